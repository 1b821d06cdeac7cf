/* .Call glue for the PCF engine: flattens the R lists of two-column matrices
 * (R has already turned data frames and pcf objects into those), calls the
 * checks and the CPU or GPU engine, and returns R's `dist` vector or a matrix
 * (attributes are added by the R code). */
#include <limits.h>
#include <string.h>
#include "r_util.h"
#include "pcf/pcf.h"
#include "pcf/pcf_pack.h"
#include "device/gk_omp.h"
#include "pcf/pcf_knn.h"
#include "r_shared.h"
#include "device/gk_device.h"
#include "device/gk_hooks.h"
#include <math.h>

/* One pass (on R's thread) to count and check shapes and to take the data
 * pointers (flatten_plan), one to copy, in parallel (flatten_copy): for 1e5
 * functions the copy is a noticeable part of the host's serial time. The
 * plan lives in R's transient memory, freed when the call returns or raises. */
typedef struct {
  R_xlen_t n;
  size_t *offset;
  const void **data;
  char *is_int;
} flat_plan;

static void flatten_plan(SEXP list, const char *arg, flat_plan *plan)
{
  if (TYPEOF(list) != VECSXP)
    gk_stop("`%s` must be a list of PCFs (two-column matrices t, v), made by as_pcf_list()", arg);
  R_xlen_t n = Rf_xlength(list);
  size_t *offset = (size_t *) R_alloc((size_t) n + 1, sizeof(size_t));
  const void **data = (const void **) R_alloc((size_t) n + 1, sizeof(void *));
  char *is_int = R_alloc((size_t) n + 1, 1);
  offset[0] = 0;
  for (R_xlen_t f = 0; f < n; f++) {
    SEXP m = VECTOR_ELT(list, f);
    if (!Rf_isMatrix(m) || (TYPEOF(m) != REALSXP && TYPEOF(m) != INTSXP) || Rf_ncols(m) != 2)
      gk_stop("`%s[[%lld]]` must be a numeric matrix with two columns (t, v) or a data frame "
               "with columns t and v", arg, (long long) f + 1);
    offset[f + 1] = offset[f] + (size_t) Rf_nrows(m);
    is_int[f] = TYPEOF(m) == INTSXP;
    data[f] = is_int[f] ? (const void *) INTEGER(m) : (const void *) REAL(m);
  }
  plan->n = n;
  plan->offset = offset;
  plan->data = data;
  plan->is_int = is_int;
}

/* The planned functions' t and v into t and v (offset[n] values each). */
static void flatten_copy(const flat_plan *plan, double *t, double *v)
{
  const size_t *offset = plan->offset;
  int threads = offset[plan->n] < 1000000 ? 1 : gk_omp_threads(0);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 256)
#endif
  for (R_xlen_t f = 0; f < plan->n; f++) {
    size_t rows = offset[f + 1] - offset[f];
    if (!plan->is_int[f]) {
      memcpy(t + offset[f], (const double *) plan->data[f], rows * sizeof(double));
      memcpy(v + offset[f], (const double *) plan->data[f] + rows, rows * sizeof(double));
    } else {
      const int *m = (const int *) plan->data[f];
      for (size_t k = 0; k < 2 * rows; k++) {
        int value = m[k];
        (k < rows ? t + offset[f] + k : v + offset[f] + k - rows)[0] =
            value == NA_INTEGER ? NA_REAL : (double) value;
      }
    }
  }
  (void) threads;
}

static void flatten(SEXP list, const char *arg, pcf_set *s)
{
  flat_plan plan;
  flatten_plan(list, arg, &plan);
  size_t total = plan.offset[plan.n];
  double *t = (double *) R_alloc(total + 1, sizeof(double));
  double *v = (double *) R_alloc(total + 1, sizeof(double));
  flatten_copy(&plan, t, v);
  s->n = (size_t) plan.n;
  s->offset = plan.offset;
  s->t = t;
  s->v = v;
}

/* Warns when float cannot keep a set's breakpoints apart: intervals vanish
 * and the results are not those of the functions given. */
static void warn_float_grid(const pcf_set *s, const char *arg)
{
  size_t row, f = pcf_float_collapse(s, &row);
  if (f < s->n)
    Rf_warningcall(R_NilValue, "single precision cannot represent the breakpoints of `%s[[%lu]]` (t = %.9g in "
               "row %lu rounds onto its predecessor; float keeps about 7 significant digits): "
               "intervals are lost and the results are inexact; use precision = \"double\"",
               arg, (unsigned long) f + 1, s->t[s->offset[f] + row - 1], (unsigned long) row);
}

/* Which elements of a list are data frames (1-based): as_pcf_list() turns
 * those into matrices. One C pass: vapply(x, is.data.frame, NA) costs R
 * about a microsecond per function, serial time before every PCF call. */
SEXP gk_r_pcf_frames(SEXP x)
{
  if (TYPEOF(x) != VECSXP) gk_stop("`x` must be a list");
  R_xlen_t n = Rf_xlength(x), count = 0;
  for (R_xlen_t f = 0; f < n; f++) count += Rf_inherits(VECTOR_ELT(x, f), "data.frame");
  SEXP out = PROTECT(Rf_allocVector(INTSXP, count));
  for (R_xlen_t f = 0, k = 0; f < n && k < count; f++)
    if (Rf_inherits(VECTOR_ELT(x, f), "data.frame")) INTEGER(out)[k++] = (int) f + 1;
  UNPROTECT(1);
  return out;
}

/* Checks a list of PCFs as the engines do; returns NULL or raises. */
SEXP gk_r_pcf_validate(SEXP x)
{
  pcf_set xs;
  gk_error err;
  gk_error_clear(&err);
  flatten(x, "x", &xs);
  if (pcf_validate(&xs, "x", 0, &err)) gk_raise(&err);
  return R_NilValue;
}

/* The engine options from the R arguments shared by every PCF entry point. */
static pcf_options options_from_r(SEXP single, SEXP threads, SEXP budget, SEXP devices,
                                  SEXP progress)
{
  pcf_options opt;
  opt.single = gk_as_flag(single);
  opt.threads = gk_as_int(threads);
  opt.budget_bytes = gk_as_double(budget);
  opt.progress = gk_as_flag(progress);
  opt.devices = INTEGER(devices);
  opt.n_devices = Rf_length(devices);
  opt.first_row = 0;
  return opt;
}

static gk_status check_sets(const pcf_op *op, int single, const pcf_set *xs,
                            const pcf_set *yp, gk_error *err);

/* Flattens and checks x (and y unless NULL); *yp is &xs when y is NULL. */
static void sets_from_r(SEXP x, SEXP y, const pcf_op *op, int single, pcf_set *xs, pcf_set *ys,
                        const pcf_set **yp)
{
  flatten(x, "x", xs);
  if (!Rf_isNull(y)) flatten(y, "y", ys);
  *yp = Rf_isNull(y) ? xs : ys;
  gk_error err;
  gk_error_clear(&err);
  if (check_sets(op, single, xs, *yp, &err)) gk_raise(&err);
}

/* The engines' checks of x and y (yp == xs: none). */
static gk_status check_sets(const pcf_op *op, int single, const pcf_set *xs,
                            const pcf_set *yp, gk_error *err)
{
  if (pcf_validate(xs, "x", single, err) || (yp != xs && pcf_validate(yp, "y", single, err)))
    return err->status;
  return pcf_check_tails(op, xs, "x", yp, "y", err);
}

static void run_engine(SEXP backend, const pcf_op *op, const pcf_set *xs, const pcf_set *yp,
                       const gk_block_writer *writer, const pcf_options *opt, gk_error *err)
{
  if (gk_backend_is_gpu(backend))
    pcf_matrix_cuda(op, xs, yp, writer, opt, err);
  else
    pcf_matrix_cpu(op, xs, yp, writer, opt, err);
}

/* The operation of an R `kind` ("pdist", "cdist", "kernel", "kernel_sym") and `p`. */
static pcf_op op_of(SEXP kind, SEXP p)
{
  return strncmp(CHAR(STRING_ELT(kind, 0)), "kernel", 6) == 0 ? pcf_op_inner()
                                                              : pcf_op_for_p(gk_as_double(p));
}

/* The checks gk_r_pcf_matrix makes, without computing (before a call is split
 * over workers, so that errors name the user's functions). */
SEXP gk_r_pcf_check(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single)
{
  pcf_set xs, ys;
  const pcf_set *yp;
  pcf_op op = op_of(kind, p);
  sets_from_r(x, y, &op, gk_as_flag(single), &xs, &ys, &yp);
  return R_NilValue;
}

/* kind: "pdist" (dist vector), "cdist" (matrix), "kernel" (matrix of inner
 * products between x and y) or "kernel_sym" (symmetric matrix of x). With
 * a `file` (not NULL: list(path, float, layout, n_rows, bytes, row0, col0,
 * sync)), the results go into that file's matrix instead (pcf_file.R): at
 * (row0, col0) of an n_rows-row column-major matrix of float or double of
 * `layout` (0 dense, 2 symmetric: mirrored too); returns TRUE. */
SEXP gk_r_pcf_matrix(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single, SEXP backend,
                     SEXP threads, SEXP budget, SEXP devices, SEXP progress, SEXP file)
{
  const char *what = CHAR(STRING_ELT(kind, 0));
  int symmetric = strcmp(what, "pdist") == 0 || strcmp(what, "kernel_sym") == 0;
  int inner = strncmp(what, "kernel", 6) == 0;
  gk_write_kind write_kind = strcmp(what, "pdist") == 0        ? GK_WRITE_DIST
                             : strcmp(what, "kernel_sym") == 0 ? GK_WRITE_SYMMETRIC
                                                               : GK_WRITE_DENSE;
  pcf_set xs, ys;
  const pcf_set *yp;
  gk_block_writer writer;
  gk_error err;
  gk_error_clear(&err);
  double started = gk_seconds_now();
  pcf_options opt = options_from_r(single, threads, budget, devices, progress);
  pcf_op op = inner ? pcf_op_inner() : pcf_op_for_p(gk_as_double(p));
  sets_from_r(x, symmetric ? R_NilValue : y, &op, opt.single, &xs, &ys, &yp);
  if (opt.single) {
    warn_float_grid(&xs, "x");
    if (!symmetric) warn_float_grid(yp, "y");
  }
  double checked = gk_seconds_now();
  if (gk_backend_is_gpu(backend)) {
    // The engine sizes its blocks from free GPU memory: let R collect
    // unreachable objects that hold some of it when the whole job would not fit.
    size_t want = (xs.n * yp->n + pcf_packed_size(&xs, 0, xs.n) * 2 +
                   (symmetric ? 0 : pcf_packed_size(yp, 0, yp->n) * 2)) * sizeof(double);
    for (int d = 0; d < opt.n_devices; d++) gk_r_make_room(opt.devices[d], want, 0);
  }
  if (!Rf_isNull(file)) {
    SEXP path = gk_list_get(file, "path");
    if (!Rf_isString(path)) gk_stop("invalid file target");
    int is_float = gk_as_flag(gk_list_get(file, "float"));
    size_t bytes = (size_t) gk_as_double(gk_list_get(file, "bytes"));
    void *map = NULL;
    writer = gk_block_writer_band(write_kind, (gk_write_kind) gk_as_int(gk_list_get(file, "layout")),
                                  NULL, (size_t) gk_as_double(gk_list_get(file, "n_rows")),
                                  (size_t) gk_as_double(gk_list_get(file, "row0")),
                                  (size_t) gk_as_double(gk_list_get(file, "col0")), opt.threads);
    if (gk_file_map(CHAR(STRING_ELT(path, 0)), bytes, &map, &err) == GK_OK) {
      if (is_float) writer.out_float = (float *) map;
      else writer.out = (double *) map;
      run_engine(backend, &op, &xs, yp, &writer, &opt, &err);
      gk_error unmap;
      gk_error_clear(&unmap);
      if (gk_file_unmap(map, bytes, gk_as_flag(gk_list_get(file, "sync")), &unmap) &&
          err.status == GK_OK)
        err = unmap;
    }
    if (err.status) gk_raise(&err);
    return Rf_ScalarLogical(TRUE);
  }
  SEXP out;
  if (strcmp(what, "pdist") == 0) {
    out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) (xs.n * (xs.n - 1) / 2)));
  } else {
    if ((double) xs.n * (double) yp->n > (double) R_XLEN_T_MAX || yp->n > INT_MAX || xs.n > INT_MAX)
      gk_stop("the result (%lu x %lu) is too large for an R matrix", (unsigned long) xs.n,
               (unsigned long) yp->n);
    out = PROTECT(Rf_allocMatrix(REALSXP, (int) xs.n, (int) yp->n));
  }
  writer = gk_block_writer_make(write_kind, REAL(out), xs.n, opt.threads);
  /* The GPU pipeline's scatter threads fault in the result's pages as they
   * write it (measured there; the CPU engine's are left as they were). */
  if (gk_backend_is_gpu(backend))
    gk_result_huge_pages(REAL(out), (size_t) Rf_xlength(out) * sizeof(double), 1);
  double allocated = gk_seconds_now();
  run_engine(backend, &op, &xs, yp, &writer, &opt, &err);
  /* The host's serial part around the engine (multi-GPU speed-ups hinge on it). */
  if (opt.progress)
    gk_progress("pcf: host %.3f s before the engine (inputs and checks %.3f, result %.3f), "
                "engine %.3f s", allocated - started, checked - started, allocated - checked,
                gk_seconds_now() - allocated);
  UNPROTECT(1);
  if (err.status) gk_raise(&err);
  return out;
}

/* ---- future workers on this machine: sets and results in shared memory ----
 * An input segment (gk_r_pcf_share) holds x and y flattened: four size_t
 * (n_x, intervals of x, n_y, intervals of y), then for each set its n + 1
 * offsets, its t and its v. A worker attaches it and computes a band straight
 * from it into the shared result (gk_r_pcf_band): nothing is serialized or
 * flattened again. */

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

static size_t share_bytes(const flat_plan *p)
{
  return p ? ((size_t) (p->n + 1) + 2 * p->offset[p->n]) * sizeof(double) : 0;
}

/* x and y (NULL: none) copied straight from R's matrices into a new input
 * segment (one copy, whose threads make the segment's pages as they write),
 * then the checks of gk_r_pcf_check on the segment's view of them:
 * list(handle, path, token, bytes), or a string saying why there is none.
 * With `staged` TRUE, into a region of this process instead (the handle
 * alone), which future workers read with process_vm_readv (gk_r_pcf_fetch). */
SEXP gk_r_pcf_share(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single, SEXP staged)
{
  flat_plan px, py;
  pcf_op op = op_of(kind, p);
  flatten_plan(x, "x", &px);
  if (!Rf_isNull(y)) flatten_plan(y, "y", &py);
  const flat_plan *second = Rf_isNull(y) ? NULL : &py;
  size_t bytes = 4 * sizeof(size_t) + share_bytes(&px) + share_bytes(second);
  SEXP seg = PROTECT(gk_as_flag(staged) ? gk_r_private_create(bytes)
                                        : gk_r_shared_create(Rf_ScalarReal((double) bytes)));
  if (TYPEOF(seg) == STRSXP) {   /* no shared memory: the checks alone */
    pcf_set xs, ys;
    const pcf_set *yp;
    sets_from_r(x, y, &op, gk_as_flag(single), &xs, &ys, &yp);
    UNPROTECT(1);
    return seg;
  }
  SEXP handle = TYPEOF(seg) == VECSXP ? gk_list_get(seg, "handle") : seg;
  size_t *head = (size_t *) gk_r_shared_values(handle, -1);
  const flat_plan *plans[2] = {&px, second};
  char *at = (char *) (head + 4);
  for (int k = 0; k < 2; k++) {
    const flat_plan *q = plans[k];
    head[2 * k] = q ? (size_t) q->n : 0;
    head[2 * k + 1] = q ? q->offset[q->n] : 0;
    if (!q) continue;
    size_t len = q->offset[q->n];
    memcpy(at, q->offset, ((size_t) q->n + 1) * sizeof(size_t));
    at += ((size_t) q->n + 1) * sizeof(size_t);
    flatten_copy(q, (double *) at, (double *) at + len);
    at += 2 * len * sizeof(double);
  }
  gk_shared view = {0};
  view.values = (double *) head;
  pcf_set xs = share_view(&view, 0), ys = second ? share_view(&view, 1) : xs;
  const pcf_set *yp = second ? &ys : &xs;
  gk_error err;
  gk_error_clear(&err);
  if (check_sets(&op, gk_as_flag(single), &xs, yp, &err)) {
    gk_r_shared_free(handle);   /* now, not when R collects it */
    gk_raise(&err);
  }
  if (gk_as_flag(single)) {
    warn_float_grid(&xs, "x");
    if (yp != &xs) warn_float_grid(yp, "y");
  }
  UNPROTECT(1);
  return seg;
}

/* A worker's copy of the caller's staged inputs (gk_r_pcf_share with
 * `staged`), read through the caller's result channel `target`: the first
 * `x_count` functions of x (a band needs its rows and, for a dist, the
 * functions before them) and all of y, laid out as the segment is (so
 * share_view reads either). The handle of the copy; "declined" when this
 * process may not read the caller's memory (the caller then shares the
 * inputs through a segment); FALSE when it cannot attach the channel. */
SEXP gk_r_pcf_fetch(SEXP target, SEXP x_count, SEXP threads)
{
  gk_channel_port port;
  gk_error err;
  gk_error_clear(&err);
  if (gk_r_channel_attach(target, &port, &err) != GK_OK) return Rf_ScalarLogical(FALSE);
  size_t head[4], want = (size_t) gk_as_double(x_count);
  gk_channel_range r = {head, 0, sizeof(head)};
  int t = gk_as_int(threads);
  if (gk_channel_read_input(&port, &r, 1, t, &err) == GK_OK && want > head[0])
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
  size_t *offsets = (size_t *) R_alloc(want + 1, sizeof(size_t));
  gk_channel_range first = {offsets, sizeof(head), (want + 1) * sizeof(size_t)};
  if (gk_channel_read_input(&port, &first, 1, t, &err) == GK_OK) {
    size_t len = offsets[want] * sizeof(double);
    size_t bytes = sizeof(head) + (want + 1) * sizeof(size_t) + 2 * len + y_bytes;
    SEXP copy = PROTECT(gk_r_private_create(bytes));
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
      gk_fail(&err, GK_ERR_INTERRUPTED, "the calling session stopped");
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
 * band's (0, 0) is in the result; (0, 0) for y_set 0). c(seconds spent
 * waiting for a free slot, 1 when the blocks went straight into the result,
 * else 0), or FALSE when this process cannot attach them (another machine). */
SEXP gk_r_pcf_band(SEXP input, SEXP x_range, SEXP y_set, SEXP y_range, SEXP kind, SEXP p,
                   SEXP single, SEXP backend, SEXP threads, SEXP budget, SEXP devices,
                   SEXP progress, SEXP target)
{
  const char *what = CHAR(STRING_ELT(kind, 0));
  gk_write_kind write_kind = strcmp(what, "pdist") == 0        ? GK_WRITE_DIST
                             : strcmp(what, "kernel_sym") == 0 ? GK_WRITE_SYMMETRIC
                                                               : GK_WRITE_DENSE;
  pcf_options opt = options_from_r(single, threads, budget, devices, progress);
  pcf_op op = op_of(kind, p);
  int which = gk_as_int(y_set);
  gk_shared in;
  gk_channel_port port;
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
  if (gk_r_channel_attach(target, &port, &err) != GK_OK) {
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
  gk_block_writer writer = gk_channel_writer(
      &port, write_kind, (size_t) gk_as_double(gk_list_get(target, "row0")),
      (size_t) gk_as_double(gk_list_get(target, "col0")), opt.threads);
  if (err.status == GK_OK) run_engine(backend, &op, &xs, which > 0 ? &ys : &xs, &writer, &opt, &err);
  if (err.status == GK_OK && port.failed)
    gk_fail(&err, GK_ERR_INTERRUPTED, "the calling session stopped taking results");
  double waited = port.wait_s, direct = port.direct == 1;
  gk_shared_release(&in);
  gk_channel_detach(&port);
  if (err.status) gk_raise(&err);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 2));
  REAL(out)[0] = waited;
  REAL(out)[1] = direct;
  UNPROTECT(1);
  return out;
}

/* index 0 (no candidate) as NA in R */
static void knn_missing_as_na(SEXP index, SEXP distance)
{
  int *ix = INTEGER(index);
  double *dv = REAL(distance);
  for (R_xlen_t q = 0; q < Rf_xlength(index); q++) {
    if (ix[q] == 0) {
      ix[q] = NA_INTEGER;
      dv[q] = NA_REAL;
    }
  }
}

/* The k nearest functions of y (of x itself, never a function to itself, when
 * y is NULL) for each function of x: list(index, distance), n x k matrices;
 * with column_lists (y given), also the k nearest of x for each function of
 * y, from the same distances (list elements 3 and 4). */
SEXP gk_r_pcf_knn(SEXP x, SEXP y, SEXP k, SEXP p, SEXP single, SEXP backend, SEXP threads,
                  SEXP budget, SEXP devices, SEXP progress, SEXP column_lists)
{
  pcf_set xs, ys;
  const pcf_set *yp;
  pcf_knn_state *state = NULL;
  gk_error err;
  gk_error_clear(&err);
  pcf_options opt = options_from_r(single, threads, budget, devices, progress);
  pcf_op op = pcf_op_for_p(gk_as_double(p));
  int kk = gk_as_int(k), both = gk_as_flag(column_lists) && !Rf_isNull(y);
  sets_from_r(x, y, &op, opt.single, &xs, &ys, &yp);
  if (xs.n > INT_MAX || yp->n > INT_MAX) gk_stop("too many functions for R's index matrices");
  int n_cols = both ? (int) yp->n : 0;
  SEXP index = PROTECT(Rf_allocMatrix(INTSXP, (int) xs.n, kk));
  SEXP distance = PROTECT(Rf_allocMatrix(REALSXP, (int) xs.n, kk));
  SEXP col_index = PROTECT(Rf_allocMatrix(INTSXP, n_cols, kk));
  SEXP col_distance = PROTECT(Rf_allocMatrix(REALSXP, n_cols, kk));
  if (pcf_knn_create(xs.n, (size_t) n_cols, kk, Rf_isNull(y), &state, &err) == GK_OK) {
    gk_block_writer writer = pcf_knn_writer(state, opt.threads);
    run_engine(backend, &op, &xs, yp, &writer, &opt, &err);
    if (err.status == GK_OK) {
      pcf_knn_result(state, REAL(distance), INTEGER(index));
      if (both) pcf_knn_column_result(state, REAL(col_distance), INTEGER(col_index));
    }
  }
  pcf_knn_destroy(state);
  if (err.status) {
    UNPROTECT(4);
    gk_raise(&err);
  }
  knn_missing_as_na(index, distance);
  knn_missing_as_na(col_index, col_distance);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, both ? 4 : 2));
  SET_VECTOR_ELT(out, 0, index);
  SET_VECTOR_ELT(out, 1, distance);
  if (both) {
    SET_VECTOR_ELT(out, 2, col_index);
    SET_VECTOR_ELT(out, 3, col_distance);
  }
  UNPROTECT(5);
  return out;
}

/* Writes a block of doubles computed elsewhere (a distributed chunk) into an
 * output made by gk_r_alloc_result or a result channel's handle
 * (gk_r_channel_create), in place: kind 0 dense, 1 dist, 2 symmetric
 * (see device/block_writer.h); `triangle` TRUE means block is the `dist`
 * vector of functions [row0, row0 + m) (dist outputs only). */
SEXP gk_r_block_write(SEXP out, SEXP kind, SEXP n_rows, SEXP row0, SEXP col0, SEXP block,
                      SEXP triangle)
{
  double *values = TYPEOF(out) == EXTPTRSXP ? gk_r_channel_values(out) : REAL(out);
  gk_block_writer w = gk_block_writer_make((gk_write_kind) gk_as_int(kind), values,
                                           (size_t) gk_as_double(n_rows), 0);
  size_t r0 = (size_t) gk_as_double(row0), c0 = (size_t) gk_as_double(col0);
  if (gk_as_flag(triangle)) {
    double m = (1 + sqrt(1 + 8 * (double) Rf_xlength(block))) / 2;
    gk_block_write_triangle(&w, r0, (size_t) (m + 0.5), REAL(block));
  } else {
    gk_block b = {r0, (size_t) Rf_nrows(block), c0, (size_t) Rf_ncols(block)};
    gk_block_write(&w, &b, REAL(block), 0);
  }
  return R_NilValue;
}

/* An uninitialised double vector of `length` (no zero fill: the writers fill
 * every entry), as a matrix when `rows` > 0. */
SEXP gk_r_alloc_result(SEXP length, SEXP rows)
{
  int r = gk_as_int(rows);
  if (r > 0) return Rf_allocMatrix(REALSXP, r, (int) (gk_as_double(length) / r));
  return Rf_allocVector(REALSXP, (R_xlen_t) gk_as_double(length));
}
