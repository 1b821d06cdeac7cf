/* .Call glue for future workers on this machine: sets and results in
 * shared memory.
 * An input segment (gk_r_pcf_share) holds x and y flattened: four size_t
 * (n_x, intervals of x, n_y, intervals of y), then for each set its n + 1
 * offsets, its t and its v. A worker attaches it and computes a band straight
 * from it into the shared result (gk_r_pcf_band): nothing is serialized or
 * flattened again. Where workers may read the caller's memory, they copy
 * their functions out of R's matrices into a region of their own laid out
 * the same way (gk_r_pcf_table, gk_r_pcf_fetch) instead. */
#include <stdlib.h>
#include <string.h>
#include "r_pcf.h"
#include "r_shared.h"

/* A view of set `which` (0: x, 1: y) of an attached input segment. */
static pcf_set share_view(const gk_shared *in, int which)
{
  const size_t *head = (const size_t *) in->values;
  const char *at = (const char *) (head + 4);
  pcf_set s;
  for (int k = 0; k <= which; k++) {
    s.n = head[2 * k];
    s.offset = (const size_t *) at;
    s.t = (const double *) (at + (s.n + 1) * sizeof(size_t));
    s.v = s.t + head[2 * k + 1];
    at = (const char *) (s.v + head[2 * k + 1]);
  }
  return s;
}

static size_t share_bytes(const gk_pcf_plan *p)
{
  return p ? ((size_t) (p->n + 1) + 2 * p->offset[p->n]) * sizeof(double) : 0;
}

/* x and y (NULL: none) copied straight from R's matrices into a new input
 * segment (one copy, whose threads make the segment's pages as they write,
 * and check each function as they copy it), then the checks of
 * gk_r_pcf_check from those verdicts:
 * list(handle, path, token, bytes), or a string saying why there is none. */
SEXP gk_r_pcf_share(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single)
{
  gk_pcf_plan px, py;
  pcf_op op = gk_pcf_op_of(kind, p);
  int is_single = gk_as_flag(single);
  gk_pcf_plan_of(x, "x", &px);
  if (!Rf_isNull(y)) gk_pcf_plan_of(y, "y", &py);
  const gk_pcf_plan *second = Rf_isNull(y) ? NULL : &py;
  size_t bytes = 4 * sizeof(size_t) + share_bytes(&px) + share_bytes(second);
  SEXP seg = PROTECT(gk_r_shared_create(Rf_ScalarReal((double) bytes)));
  if (TYPEOF(seg) == STRSXP) {   /* no shared memory: the checks alone */
    gk_r_pcf_check(x, y, kind, p, single, Rf_ScalarLogical(FALSE), R_NilValue);
    UNPROTECT(1);
    return seg;
  }
  SEXP handle = gk_list_get(seg, "handle");
  size_t *head = (size_t *) gk_r_shared_values(handle, -1);
  const gk_pcf_plan *plans[2] = {&px, second};
  gk_pcf_flat flat[2];
  char *at = (char *) (head + 4);
  for (int k = 0; k < 2; k++) {
    const gk_pcf_plan *q = plans[k];
    head[2 * k] = q ? (size_t) q->n : 0;
    head[2 * k + 1] = q ? q->offset[q->n] : 0;
    if (!q) continue;
    size_t len = q->offset[q->n];
    memcpy(at, q->offset, ((size_t) q->n + 1) * sizeof(size_t));
    at += ((size_t) q->n + 1) * sizeof(size_t);
    gk_pcf_plan_copy(q, (double *) at, (double *) at + len, is_single, &flat[k].bad,
                     &flat[k].collapse);
    at += 2 * len * sizeof(double);
  }
  gk_shared view = {0};
  view.values = (double *) head;
  for (int k = 0; k < (second ? 2 : 1); k++) flat[k].set = share_view(&view, k);
  gk_error err;
  gk_error_clear(&err);
  if (gk_pcf_check_flat(&op, is_single, &flat[0], second ? &flat[1] : NULL, &err)) {
    gk_r_shared_free(handle);   /* now, not when R collects it */
    gk_raise(&err);
  }
  if (is_single) {
    gk_pcf_warn_float_grid(&flat[0], "x");
    if (second) gk_pcf_warn_float_grid(&flat[1], "y");
  }
  UNPROTECT(1);
  return seg;
}

/* Where the functions of x and y (NULL: none) are in this process, for
 * future workers to copy out of R's matrices with process_vm_readv
 * (gk_r_pcf_fetch) while this process checks them: a private region holding
 * four size_t (n_x, intervals of x, n_y, intervals of y), then for each set
 * its n + 1 offsets and the address of each function's matrix (t, then v).
 * Integer matrices are converted into the region, after the tables, and
 * their addresses name the copies. The region's handle: it and R's matrices
 * must outlive the channel that offers it (R/distributed.R). */
SEXP gk_r_pcf_table(SEXP x, SEXP y)
{
  gk_pcf_plan plans[2];
  int sets = Rf_isNull(y) ? 1 : 2;
  size_t words = 4, converted = 0;   /* the tables' size_t, the conversions' doubles */
  for (int k = 0; k < sets; k++) {
    gk_pcf_plan *q = &plans[k];
    gk_pcf_plan_of(k ? y : x, k ? "y" : "x", q);
    words += 2 * (size_t) q->n + 1;
    for (R_xlen_t f = 0; f < q->n; f++)
      if (q->is_int[f]) converted += 2 * (q->offset[f + 1] - q->offset[f]);
  }
  gk_error err;
  gk_error_clear(&err);
  SEXP table = PROTECT(gk_r_private_create((words + converted) * sizeof(double), &err));
  if (table == R_NilValue) gk_raise(&err);
  size_t *head = (size_t *) gk_r_shared_values(table, -1), *at = head + 4;
  double *copies = (double *) (head + words);
  memset(head, 0, 4 * sizeof(size_t));
  for (int k = 0; k < sets; k++) {
    const gk_pcf_plan *q = &plans[k];
    size_t n = (size_t) q->n;
    head[2 * k] = n;
    head[2 * k + 1] = q->offset[n];
    memcpy(at, q->offset, (n + 1) * sizeof(size_t));
    at += n + 1;
    const void **address = (const void **) at;
    for (size_t f = 0; f < n; f++) {
      address[f] = q->data[f];
      if (q->is_int[f]) {
        size_t rows = q->offset[f + 1] - q->offset[f];
        gk_pcf_int_columns((const int *) q->data[f], rows, copies, copies + rows);
        address[f] = copies;
        copies += 2 * rows;
      }
    }
    at += n;
  }
  UNPROTECT(1);
  return table;
}

/* Where set k's n + 1 offsets start in a table (in size_t from its
 * start, `head` its first four); its n addresses follow them. */
static size_t table_set_at(const size_t *head, int k)
{
  return 4 + (k ? 2 * head[0] + 1 : 0);
}

void gk_pcf_plans_of_table(SEXP table, gk_pcf_plan plans[2])
{
  const size_t *head = (const size_t *) gk_r_shared_of(table)->values;
  for (int k = 0; k < 2; k++) {
    size_t n = head[2 * k];
    const size_t *at = head + table_set_at(head, k);
    plans[k].n = (R_xlen_t) n;
    plans[k].offset = at;
    plans[k].data = (const void *const *) (at + n + 1);
    plans[k].is_int = NULL;   /* converted in the table */
  }
}

/* A worker's copy of the caller's inputs (the table of gk_r_pcf_table,
 * offered through the caller's result channel `target`): functions
 * x_rows[1]..x_rows[2] of x (1-based: a band of a dist needs its rows and
 * the functions before them, one of another matrix its rows only) and all
 * of y, laid out as an input segment (so share_view reads either), once the
 * caller has offered them (its workers are launched before it does) and
 * said that they passed its checks. The handle of the copy; "declined" when
 * this process may not read the caller's memory (the caller then shares the
 * inputs through a segment); FALSE when it cannot attach the channel. */
SEXP gk_r_pcf_fetch(SEXP target, SEXP x_rows, SEXP threads)
{
  if (TYPEOF(x_rows) != REALSXP || Rf_xlength(x_rows) != 2) gk_stop("x_rows: two numbers");
  double from = REAL(x_rows)[0], to = REAL(x_rows)[1];
  int t = gk_as_int(threads);
  gk_channel_port port;
  gk_error err;
  gk_error_clear(&err);
  if (gk_r_channel_attach(target, &port, &err) != GK_OK) return Rf_ScalarLogical(FALSE);
  size_t head[4] = {0}, *tables = NULL;
  gk_channel_columns *matrices = NULL;
  SEXP copy = R_NilValue;
  gk_channel_range r = {head, 0, sizeof(head)};
  // Launched before the caller offered them: wait for the offer (its give-up rules).
  if (gk_channel_await_input(&port, &err) == GK_OK &&
      gk_channel_read_input(&port, &r, 1, t, &err) == GK_OK &&
      !(from >= 1 && to >= from && to <= (double) head[0]))
    gk_fail(&err, GK_ERR_INTERNAL, "a band beyond its set of PCFs");
  size_t first = err.status ? 0 : (size_t) from - 1, count = err.status ? 0 : (size_t) to - first;
  size_t n_x = head[0], n_y = head[2];
  /* Their part of the tables: x's offsets and addresses, then y's. */
  if (err.status == GK_OK) {
    tables = (size_t *) malloc((2 * count + 2 * n_y + 2) * sizeof(size_t));
    if (!tables) gk_fail(&err, GK_ERR_NOMEM, "out of host memory for PCF inputs");
  }
  size_t *x_offset = tables, *x_at = x_offset + count + 1, *y_offset = x_at + count,
         *y_at = y_offset + n_y + 1, x_from = table_set_at(head, 0),
         y_from = table_set_at(head, 1);
  if (err.status == GK_OK) {
    gk_channel_range parts[4] = {
        {x_offset, (x_from + first) * sizeof(size_t), (count + 1) * sizeof(size_t)},
        {x_at, (x_from + n_x + 1 + first) * sizeof(size_t), count * sizeof(size_t)},
        {y_offset, y_from * sizeof(size_t), n_y ? (n_y + 1) * sizeof(size_t) : 0},
        {y_at, (y_from + n_y + 1) * sizeof(size_t), n_y * sizeof(size_t)}};
    gk_channel_read_input(&port, parts, n_y ? 4 : 2, t, &err);
  }
  size_t x_len = err.status ? 0 : x_offset[count] - x_offset[0];
  size_t y_len = err.status || !n_y ? 0 : y_offset[n_y];
  size_t y_words = n_y ? n_y + 1 + 2 * y_len : 0;
  if (err.status == GK_OK)
    copy = gk_r_private_create((4 + count + 1 + 2 * x_len + y_words) * sizeof(double), &err);
  PROTECT(copy);
  if (copy != R_NilValue) {
    size_t *local = (size_t *) gk_r_shared_of(copy)->values, *offset = local + 4;
    local[0] = count;
    local[1] = x_len;
    local[2] = n_y;
    local[3] = y_len;
    for (size_t f = 0; f <= count; f++) offset[f] = x_offset[f] - x_offset[0];
    double *x_t = (double *) (offset + count + 1), *x_v = x_t + x_len;
    size_t *y_local = (size_t *) (x_v + x_len);   /* y's part, where there is a y */
    double *y_t = n_y ? (double *) (y_local + n_y + 1) : NULL, *y_v = n_y ? y_t + y_len : NULL;
    if (n_y) memcpy(y_local, y_offset, (n_y + 1) * sizeof(size_t));
    matrices = (gk_channel_columns *) malloc((count + n_y + 1) * sizeof(gk_channel_columns));
    if (!matrices) gk_fail(&err, GK_ERR_NOMEM, "out of host memory for PCF inputs");
    for (size_t f = 0; matrices && f < count + n_y; f++) {
      int in_x = f < count;
      size_t g = in_x ? f : f - count, *o = in_x ? offset : y_offset;
      double *to_t = in_x ? x_t : y_t, *to_v = in_x ? x_v : y_v;
      matrices[f] = (gk_channel_columns) {in_x ? x_at[g] : y_at[g], o[g + 1] - o[g], to_t + o[g],
                                          to_v + o[g]};
    }
    // Read while the caller checks them; used only once they passed.
    if (matrices && gk_channel_read_columns(&port, matrices, count + n_y, t, &err) == GK_OK &&
        gk_channel_await_checked(&port, &err) == GK_OK && gk_channel_aborted(&port))
      gk_fail(&err, GK_ERR_ABANDONED, "the calling session stopped");
  }
  free(tables);
  free(matrices);
  gk_channel_detach(&port);
  if (err.status && copy != R_NilValue) gk_r_shared_free(copy);
  UNPROTECT(1);
  if (err.status == GK_ERR_INPUT) return Rf_mkString("declined");
  if (err.status) gk_raise(&err);
  return copy;
}

/* Whether blocks are left in the shared list of the caller's result
 * channel `target`: FALSE once it was planned and every block is taken, so
 * that a worker that starts that late reads no inputs. TRUE where the
 * channel cannot be attached (the worker's usual route then says so). */
SEXP gk_r_pcf_blocks_left(SEXP target)
{
  gk_channel_port port;
  gk_error err;
  gk_error_clear(&err);
  if (gk_r_channel_attach(target, &port, &err) != GK_OK) return Rf_ScalarLogical(TRUE);
  int left = gk_block_left(gk_channel_queue(&port));
  gk_channel_detach(&port);
  return Rf_ScalarLogical(left);
}

/* Functions [from, to] (1-based) of a set; 0 when outside it. */
static int share_range(pcf_set *s, double from, double to)
{
  if (!(from >= 1) || !(to >= 0)) return 0;
  size_t first = (size_t) from - 1, last = (size_t) to;
  if (last > s->n || first > last) return 0;
  s->offset += first;
  s->n = last - first;
  return 1;
}

/* One band of a distributed matrix on a worker: rows x_range of x against
 * y_range of set y_set (1: x, 2: y; 0: a band of the symmetric result, rows
 * x_range against functions 1.. of x up to the band's last, lower triangle,
 * in one engine call: the engine's first_row), computed as `kind` from the
 * input segment `input` and sent through ring `ring` of the caller's result
 * channel `target` (list(path, token, bytes, ring, row0, col0): where the
 * band's (0, 0) is in the result; (0, 0) for y_set 0; with `sharers`, the
 * number of workers that take the blocks of the whole result from the
 * channel's shared list, the band then being all of it), or with a `file`
 * (not NULL: a file target as gk_r_pcf_matrix takes it, pcf_dist_file())
 * written into that file's matrix instead (`target` is then not used).
 * c(seconds spent waiting for a free slot, how the blocks went: 2 handed
 * over in place, 1 straight into the file, 0 copied through slots,
 * blocks sent (NA into a file)), or FALSE when this
 * process cannot attach them (another machine). */
SEXP gk_r_pcf_band(SEXP input, SEXP x_range, SEXP y_set, SEXP y_range, SEXP kind, SEXP p,
                   SEXP single, SEXP backend, SEXP threads, SEXP budget, SEXP devices,
                   SEXP progress, SEXP target, SEXP file)
{
  gk_write_kind write_kind = gk_pcf_write_kind_of(kind);
  pcf_options opt = gk_pcf_options_from_r(single, threads, budget, devices, progress);
  pcf_op op = gk_pcf_op_of(kind, p);
  int which = gk_as_int(y_set);
  int to_file = !Rf_isNull(file);
  gk_pcf_file_target into = {0};
  if (to_file) into = gk_pcf_file_target_of(file);   /* its R errors before anything is held */
  SEXP shared_list = to_file ? R_NilValue : gk_list_get(target, "sharers");
  int sharers = shared_list == R_NilValue ? 0 : gk_as_int(shared_list);
  gk_shared in;
  gk_channel_port port = {0};
  gk_error err;
  gk_error_clear(&err);
  int fetched = TYPEOF(input) == EXTPTRSXP;   /* a copy made by gk_r_pcf_fetch */
  if (fetched) {
    in = *gk_r_shared_of(input);
    in.map = NULL;   /* the handle keeps it: released below as a view only */
    in.fd = -1;
  } else if (gk_r_shared_attach(input, &in, &err) != GK_OK) {
    return Rf_ScalarLogical(FALSE);
  }
  if (!to_file && gk_r_channel_attach(target, &port, &err) != GK_OK) {
    gk_shared_release(&in);
    return Rf_ScalarLogical(FALSE);
  }
  if (sharers > 0) {   /* the call's workers take blocks from one list */
    opt.queue = gk_channel_queue(&port);
    opt.sharers = sharers;
  }
  pcf_set xs = share_view(&in, 0), ys = which > 0 ? share_view(&in, which - 1) : xs;
  /* A symmetric band: x is functions 1..b, of which rows a..b are computed. */
  double a = REAL(x_range)[0], b = REAL(x_range)[1];
  if (which == 0) opt.first_row = a >= 1 ? (size_t) a - 1 : 0;
  if (!share_range(&xs, which == 0 ? 1 : a, b) ||
      (which > 0 && !share_range(&ys, REAL(y_range)[0], REAL(y_range)[1])) ||
      opt.first_row > xs.n)
    gk_fail(&err, GK_ERR_INTERNAL, "a band outside its set of PCFs");
  const pcf_set *yp = which > 0 ? &ys : &xs;
  if (to_file) {
    if (err.status == GK_OK)
      gk_pcf_run_into_file(&into, write_kind, backend, &op, &xs, yp, &opt, &err);
  } else {
    gk_block_writer writer = gk_channel_writer(
        &port, write_kind, (size_t) gk_as_double(gk_list_get(target, "row0")),
        (size_t) gk_as_double(gk_list_get(target, "col0")), opt.threads);
    if (err.status == GK_OK) gk_pcf_run_engine(backend, &op, &xs, yp, &writer, &opt, &err);
    if (err.status == GK_OK && port.failed)
      gk_fail(&err, GK_ERR_ABANDONED, "the calling session stopped taking results");
  }
  double waited = port.wait_s, route = port.handover == 1 ? 2 : to_file;
  double blocks = to_file ? NA_REAL : (double) port.blocks;
  gk_shared_release(&in);
  if (!to_file) gk_channel_detach(&port);
  if (err.status) gk_raise(&err);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 3));
  REAL(out)[0] = waited;
  REAL(out)[1] = route;
  REAL(out)[2] = blocks;
  UNPROTECT(1);
  return out;
}

