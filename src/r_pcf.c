/* .Call glue for the PCF engine: takes the R lists of two-column matrices
 * (R has already turned data frames and pcf objects into those), flattened
 * by r_pcf_flat.c, calls the checks and the CPU or GPU engine, and returns
 * R's `dist` vector or a matrix (attributes are added by the R code). */
#include <limits.h>
#include <string.h>
#include "r_util.h"
#include "r_pcf_flat.h"
#include "pcf/pcf.h"
#include "pcf/pcf_pack.h"
#include "device/gk_omp.h"
#include "pcf/pcf_knn.h"
#include "r_shared.h"
#include "device/gk_device.h"
#include "device/gk_hooks.h"
#include <math.h>

/* Warns when float cannot keep a set's breakpoints apart: intervals vanish
 * and the results are not those of the functions given. */
static void warn_float_grid(const gk_pcf_flat *fs, const char *arg)
{
  const pcf_set *s = &fs->set;
  size_t f = fs->collapse;
  if (f >= s->n) return;
  size_t row = pcf_float_collapse_row(s, f);
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
  gk_pcf_flat fx;
  gk_error err;
  gk_error_clear(&err);
  gk_pcf_flatten(x, R_NilValue, 0, &fx, NULL, NULL, NULL);
  if (pcf_validate_known(&fx.set, "x", 0, fx.bad, &err)) gk_raise(&err);
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

/* The engines' checks of x and y (fy NULL: none), from the verdicts of the
 * flattening copy. */
static gk_status check_flat(const pcf_op *op, int single, const gk_pcf_flat *fx,
                            const gk_pcf_flat *fy, gk_error *err)
{
  if (pcf_validate_known(&fx->set, "x", single, fx->bad, err) ||
      (fy && pcf_validate_known(&fy->set, "y", single, fy->bad, err)))
    return err->status;
  return pcf_check_tails(op, &fx->set, "x", fy ? &fy->set : &fx->set, "y", err);
}

/* Flattens and checks x (and y unless NULL), running `during` meanwhile (see
 * gk_pcf_flatten; its value is returned); *yp is x's set when y is NULL. */
static SEXP sets_from_r(SEXP x, SEXP y, const pcf_op *op, int single, gk_pcf_flat *fx,
                        gk_pcf_flat *fy, const pcf_set **yp, SEXP (*during)(void *), void *data)
{
  SEXP out = PROTECT(gk_pcf_flatten(x, y, single, fx, fy, during, data));
  *yp = Rf_isNull(y) ? &fx->set : &fy->set;
  gk_error err;
  gk_error_clear(&err);
  if (check_flat(op, single, fx, Rf_isNull(y) ? NULL : fy, &err)) gk_raise(&err);
  UNPROTECT(1);
  return out;
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
  gk_pcf_flat fx, fy;
  const pcf_set *yp;
  pcf_op op = op_of(kind, p);
  sets_from_r(x, y, &op, gk_as_flag(single), &fx, &fy, &yp, NULL, NULL);
  return R_NilValue;
}

/* What gk_r_pcf_matrix readies on R's thread while the inputs are copied
 * (their sizes and offsets are known): room on the GPUs, then the result
 * unless it goes to a file or a GPU run makes it (`defer`: R's allocation of
 * a large result starts with a full collection, which then overlaps the
 * GPUs' first blocks; make_result). */
typedef struct {
  SEXP backend;
  const pcf_options *opt;
  int symmetric, dist, to_file, defer;
  const gk_pcf_flat *fx, *fy;
  SEXP out;         /* the result, once made (PROTECTed by its maker) */
  int asked;        /* make_result ran (and left one protection) */
  double seconds;   /* spent making the result */
} result_prep;

static SEXP alloc_result(void *arg)
{
  result_prep *r = (result_prep *) arg;
  double started = gk_seconds_now();
  size_t n = r->fx->set.n, m = r->symmetric ? n : r->fy->set.n;
  SEXP out = r->dist ? Rf_allocVector(REALSXP, (R_xlen_t) (n * (n - 1) / 2))
                     : Rf_allocMatrix(REALSXP, (int) n, (int) m);
  /* The GPU pipeline's scatter threads fault in the result's pages as they
   * write it (measured there; the CPU engine's are left as they were). */
  if (gk_backend_is_gpu(r->backend))
    gk_result_huge_pages(REAL(out), (size_t) Rf_xlength(out) * sizeof(double), 1);
  r->seconds = gk_seconds_now() - started;
  return out;
}

static SEXP prepare_result(void *arg)
{
  result_prep *r = (result_prep *) arg;
  const pcf_set *xs = &r->fx->set, *yp = r->symmetric ? xs : &r->fy->set;
  if (gk_backend_is_gpu(r->backend)) {
    // The engine sizes its blocks from free GPU memory: let R collect
    // unreachable objects that hold some of it when the whole job would not fit.
    size_t want = (xs->n * yp->n + pcf_packed_size(xs, 0, xs->n) * 2 +
                   (r->symmetric ? 0 : pcf_packed_size(yp, 0, yp->n) * 2)) * sizeof(double);
    for (int d = 0; d < r->opt->n_devices; d++) gk_r_make_room(r->opt->devices[d], want, 0);
  }
  if (!r->dist && ((double) xs->n * (double) yp->n > (double) R_XLEN_T_MAX || yp->n > INT_MAX ||
                   xs->n > INT_MAX))
    gk_stop("the result (%lu x %lu) is too large for an R matrix", (unsigned long) xs->n,
            (unsigned long) yp->n);
  return r->to_file || r->defer ? R_NilValue : alloc_result(r);
}

/* options(show.error.messages = value); its old value in *old. */
typedef struct {
  SEXP value, old;
} option_swap;

static void swap_error_messages(void *arg)
{
  option_swap *swap = (option_swap *) arg;
  SEXP call = PROTECT(Rf_lang2(Rf_install("options"), swap->value));
  SET_TAG(CDR(call), Rf_install("show.error.messages"));
  swap->old = VECTOR_ELT(Rf_eval(call, R_BaseEnv), 0);
  UNPROTECT(1);
}

static void alloc_at_top(void *arg)
{
  result_prep *r = (result_prep *) arg;
  r->out = alloc_result(r);
}

/* The writer's make_out (device/block_writer.h), on R's thread while the GPUs
 * start, so nothing here may jump out of it: the allocation (and the
 * collection before it) runs in a top-level context of its own, with R's
 * error messages off; a failure becomes err. Not through R_tryCatch: the
 * result would come back marked shared, and R would copy all of it when the
 * caller sets its attributes. */
static double *make_result(void *arg, gk_error *err)
{
  result_prep *r = (result_prep *) arg;
  PROTECT_INDEX at;
  r->asked = 1;
  PROTECT_WITH_INDEX(r->out = R_NilValue, &at);   /* gk_r_pcf_matrix unprotects it */
  option_swap quiet = {Rf_ScalarLogical(FALSE), R_NilValue};
  PROTECT(quiet.value);
  int silenced = R_ToplevelExec(swap_error_messages, &quiet);
  PROTECT(quiet.old);
  int made = R_ToplevelExec(alloc_at_top, r);
  if (made) REPROTECT(r->out, at);
  else r->out = R_NilValue;
  if (silenced) {
    option_swap back = {quiet.old, R_NilValue};
    R_ToplevelExec(swap_error_messages, &back);
  }
  UNPROTECT(2);
  if (made) return REAL(r->out);
  /* R's message: "Error: <what>\n" */
  const char *message = R_curErrorBuf(), *colon = strstr(message, ": ");
  if (strncmp(message, "Error", 5) == 0 && colon) message = colon + 2;
  gk_fail(err, GK_ERR_NOMEM, "%s", message);
  size_t len = strlen(err->message);
  if (len && err->message[len - 1] == '\n') err->message[len - 1] = '\0';
  return NULL;
}

/* kind: "pdist" (dist vector), "cdist" (matrix), "kernel" (matrix of inner
 * products between x and y) or "kernel_sym" (symmetric matrix of x). With
 * a `file` (not NULL: list(path, float, layout, n_rows, bytes, row0, col0,
 * sync, populate)), the results go into that file's matrix instead
 * (pcf_file.R): at (row0, col0) of an n_rows-row column-major matrix of
 * float or double of `layout` (0 dense, 2 symmetric: mirrored too), whose
 * pages the call makes first with `populate` (gk_file_populate); returns
 * TRUE. */
SEXP gk_r_pcf_matrix(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single, SEXP backend,
                     SEXP threads, SEXP budget, SEXP devices, SEXP progress, SEXP file)
{
  const char *what = CHAR(STRING_ELT(kind, 0));
  int symmetric = strcmp(what, "pdist") == 0 || strcmp(what, "kernel_sym") == 0;
  int inner = strncmp(what, "kernel", 6) == 0;
  gk_write_kind write_kind = strcmp(what, "pdist") == 0        ? GK_WRITE_DIST
                             : strcmp(what, "kernel_sym") == 0 ? GK_WRITE_SYMMETRIC
                                                               : GK_WRITE_DENSE;
  gk_pcf_flat fx, fy;
  const pcf_set *yp;
  gk_block_writer writer;
  gk_error err;
  gk_error_clear(&err);
  double started = gk_seconds_now();
  pcf_options opt = options_from_r(single, threads, budget, devices, progress);
  pcf_op op = inner ? pcf_op_inner() : pcf_op_for_p(gk_as_double(p));
  // The result is made while the inputs are copied, or by the GPU pipeline
  // as its GPUs start (prep.defer); an error in the checks leaves it to R's
  // collector.
  result_prep prep = {backend, &opt, symmetric, strcmp(what, "pdist") == 0, !Rf_isNull(file),
                      gk_backend_is_gpu(backend) && Rf_isNull(file), &fx, &fy, R_NilValue, 0, 0};
  SEXP out = PROTECT(sets_from_r(x, symmetric ? R_NilValue : y, &op, opt.single, &fx, &fy, &yp,
                                 prepare_result, &prep));
  const pcf_set *xs = &fx.set;
  if (opt.single) {
    warn_float_grid(&fx, "x");
    if (!symmetric) warn_float_grid(&fy, "y");
  }
  double ready = gk_seconds_now();
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
      if (gk_as_flag(gk_list_get(file, "populate")))
        gk_file_populate(map, is_float ? sizeof(float) : sizeof(double),
                         writer.layout == GK_WRITE_SYMMETRIC, writer.n_rows, writer.row0, xs->n,
                         writer.col0, symmetric ? xs->n : yp->n, opt.threads);
      if (is_float) writer.out_float = (float *) map;
      else writer.out = (double *) map;
      run_engine(backend, &op, xs, yp, &writer, &opt, &err);
      gk_error unmap;
      gk_error_clear(&unmap);
      if (gk_file_unmap(map, bytes, gk_as_flag(gk_list_get(file, "sync")), &unmap) &&
          err.status == GK_OK)
        err = unmap;
    }
    UNPROTECT(1);
    if (err.status) gk_raise(&err);
    return Rf_ScalarLogical(TRUE);
  }
  writer = gk_block_writer_make(write_kind, prep.defer ? NULL : REAL(out), xs->n, opt.threads);
  if (prep.defer) {
    writer.make_out = make_result;
    writer.make_out_arg = &prep;
  }
  run_engine(backend, &op, xs, yp, &writer, &opt, &err);
  int n_protected = 1;
  if (prep.defer) {
    if (!prep.asked && err.status == GK_OK)   // no blocks: the pipeline never started
      prep.out = PROTECT(alloc_result(&prep));
    if (prep.asked || prep.out != R_NilValue) n_protected++;
    out = prep.out;
  }
  /* The host's serial part around the engine (multi-GPU speed-ups hinge on it). */
  if (opt.progress)
    gk_progress("pcf: host %.3f s before the engine (inputs and checks), engine %.3f s; the "
                "result made in %.3f s, %s", ready - started, gk_seconds_now() - ready,
                prep.seconds, prep.defer ? "as the GPUs started" : "beside the inputs' copy");
  UNPROTECT(n_protected);
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
  pcf_op op = op_of(kind, p);
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
    sets_from_r(x, y, &op, is_single, &fx, &fy, &yp, NULL, NULL);
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
  if (check_flat(&op, is_single, &flat[0], second ? &flat[1] : NULL, &err)) {
    gk_r_shared_free(handle);   /* now, not when R collects it */
    gk_raise(&err);
  }
  if (is_single) {
    warn_float_grid(&flat[0], "x");
    if (second) warn_float_grid(&flat[1], "y");
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
    gk_fail(&err, GK_ERR_ABANDONED, "the calling session stopped taking results");
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
  gk_pcf_flat fx, fy;
  const pcf_set *yp;
  pcf_knn_state *state = NULL;
  gk_error err;
  gk_error_clear(&err);
  pcf_options opt = options_from_r(single, threads, budget, devices, progress);
  pcf_op op = pcf_op_for_p(gk_as_double(p));
  int kk = gk_as_int(k), both = gk_as_flag(column_lists) && !Rf_isNull(y);
  sets_from_r(x, y, &op, opt.single, &fx, &fy, &yp, NULL, NULL);
  const pcf_set *xs = &fx.set;
  if (xs->n > INT_MAX || yp->n > INT_MAX) gk_stop("too many functions for R's index matrices");
  int n_cols = both ? (int) yp->n : 0;
  SEXP index = PROTECT(Rf_allocMatrix(INTSXP, (int) xs->n, kk));
  SEXP distance = PROTECT(Rf_allocMatrix(REALSXP, (int) xs->n, kk));
  SEXP col_index = PROTECT(Rf_allocMatrix(INTSXP, n_cols, kk));
  SEXP col_distance = PROTECT(Rf_allocMatrix(REALSXP, n_cols, kk));
  if (pcf_knn_create(xs->n, (size_t) n_cols, kk, Rf_isNull(y), &state, &err) == GK_OK) {
    gk_block_writer writer = pcf_knn_writer(state, opt.threads);
    run_engine(backend, &op, xs, yp, &writer, &opt, &err);
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
