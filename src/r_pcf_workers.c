/* .Call glue for future workers on this machine: sets and results in
 * shared memory.
 * An input segment (gk_r_pcf_share) holds x and y flattened: four size_t
 * (n_x, intervals of x, n_y, intervals of y), then for each set its n + 1
 * offsets, its t and its v. A worker attaches it and computes a band straight
 * from it into the shared result (gk_r_pcf_band): nothing is serialized or
 * flattened again. */
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
 * list(handle, path, token, bytes), or a string saying why there is none.
 * With `staged` TRUE, into a region of this process instead (the handle
 * alone), which future workers read with process_vm_readv (gk_r_pcf_fetch). */
SEXP gk_r_pcf_share(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single, SEXP staged)
{
  gk_pcf_plan px, py;
  pcf_op op = gk_pcf_op_of(kind, p);
  int is_single = gk_as_flag(single);
  gk_pcf_plan_of(x, "x", &px);
  if (!Rf_isNull(y)) gk_pcf_plan_of(y, "y", &py);
  const gk_pcf_plan *second = Rf_isNull(y) ? NULL : &py;
  size_t bytes = 4 * sizeof(size_t) + share_bytes(&px) + share_bytes(second);
  gk_error made;
  gk_error_clear(&made);
  SEXP seg = PROTECT(gk_as_flag(staged) ? gk_r_private_create(bytes, &made)
                                        : gk_r_shared_create(Rf_ScalarReal((double) bytes)));
  if (seg == R_NilValue) gk_raise(&made);
  if (TYPEOF(seg) == STRSXP) {   /* no shared memory: the checks alone */
    gk_pcf_flat fx, fy;
    const pcf_set *yp;
    gk_pcf_sets_from_r(x, y, &op, is_single, &fx, &fy, &yp, NULL, NULL);
    UNPROTECT(1);
    return seg;
  }
  SEXP handle = TYPEOF(seg) == VECSXP ? gk_list_get(seg, "handle") : seg;
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

/* A worker's copy of the caller's staged inputs (gk_r_pcf_share with
 * `staged`), read through the caller's result channel `target`: the first
 * `x_count` functions of x (a band needs its rows and, for a dist, the
 * functions before them) and all of y, laid out as the segment is (so
 * share_view reads either), once the caller has offered them (its workers
 * are launched before it stages them). The handle of the copy; "declined"
 * when this process may not read the caller's memory (the caller then
 * shares the inputs through a segment); FALSE when it cannot attach the
 * channel. */
SEXP gk_r_pcf_fetch(SEXP target, SEXP x_count, SEXP threads)
{
  gk_channel_port port;
  gk_error err;
  gk_error_clear(&err);
  size_t head[4], want = (size_t) gk_as_double(x_count);
  // R's allocations before the channel is attached: an error in one would leave it attached
  size_t *offsets = (size_t *) R_alloc(want + 1, sizeof(size_t));
  int t = gk_as_int(threads);
  if (gk_r_channel_attach(target, &port, &err) != GK_OK) return Rf_ScalarLogical(FALSE);
  gk_channel_range r = {head, 0, sizeof(head)};
  // Launched before the caller staged them: wait for the offer (its give-up rules).
  if (gk_channel_await_input(&port, &err) == GK_OK &&
      gk_channel_read_input(&port, &r, 1, t, &err) == GK_OK && want > head[0])
    gk_fail(&err, GK_ERR_INTERNAL, "a band beyond its set of PCFs");
  if (err.status == GK_ERR_INPUT) {
    gk_channel_detach(&port);
    return Rf_mkString("declined");
  }
  if (err.status) {
    gk_channel_detach(&port);
    gk_raise(&err);
  }
  /* x's offsets first: they say how many intervals the first want functions have. */
  size_t x_offsets = (head[0] + 1) * sizeof(size_t), x_values = head[1] * sizeof(double);
  size_t y_bytes = head[2] ? (head[2] + 1 + 2 * head[3]) * sizeof(double) : 0;
  gk_channel_range first = {offsets, sizeof(head), (want + 1) * sizeof(size_t)};
  SEXP copy = R_NilValue;
  size_t len = 0;   /* bytes of t (and of v) of the first want functions */
  if (gk_channel_read_input(&port, &first, 1, t, &err) == GK_OK) {
    len = offsets[want] * sizeof(double);
    copy = gk_r_private_create(sizeof(head) + (want + 1) * sizeof(size_t) + 2 * len + y_bytes,
                               &err);
  }
  if (copy != R_NilValue) {
    PROTECT(copy);
    size_t *local = (size_t *) gk_r_shared_of(copy)->values;
    local[0] = want;
    local[1] = offsets[want];
    local[2] = head[2];
    local[3] = head[3];
    char *at = (char *) (local + 4);
    memcpy(at, offsets, (want + 1) * sizeof(size_t));
    at += (want + 1) * sizeof(size_t);
    size_t t_from = sizeof(head) + x_offsets;
    gk_channel_range ranges[3] = {{at, t_from, len},
                                  {at + len, t_from + x_values, len},
                                  {at + 2 * len, t_from + 2 * x_values, y_bytes}};
    if (gk_channel_read_input(&port, ranges, 3, t, &err) == GK_OK && gk_channel_aborted(&port))
      gk_fail(&err, GK_ERR_ABANDONED, "the calling session stopped");
    gk_channel_detach(&port);
    if (err.status) {
      gk_r_shared_free(copy);
      gk_raise(&err);
    }
    UNPROTECT(1);
    return copy;
  }
  gk_channel_detach(&port);
  gk_raise(&err);
  return R_NilValue;
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
 * band's (0, 0) is in the result; (0, 0) for y_set 0), or with a `file`
 * (not NULL: a file target as gk_r_pcf_matrix takes it, pcf_dist_file())
 * written into that file's matrix instead (`target` is then not used).
 * c(seconds spent waiting for a free slot, 1 when the blocks went straight
 * into the result, else 0), or FALSE when this process cannot attach them
 * (another machine). */
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
  double waited = port.wait_s, direct = to_file || port.direct == 1;
  gk_shared_release(&in);
  if (!to_file) gk_channel_detach(&port);
  if (err.status) gk_raise(&err);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 2));
  REAL(out)[0] = waited;
  REAL(out)[1] = direct;
  UNPROTECT(1);
  return out;
}

