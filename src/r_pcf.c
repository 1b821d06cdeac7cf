/* .Call glue for the PCF engine: takes the R lists of two-column matrices
 * (R has already turned data frames and pcf objects into those), flattened
 * by r_pcf_flat.c, calls the checks and the CPU or GPU engine, and returns
 * R's `dist` vector or a matrix (attributes are added by the R code). Future
 * workers' bands: r_pcf_workers.c. */
#include <limits.h>
#include <math.h>
#include <string.h>
#include "r_util.h"
#include "r_pcf_flat.h"
#include "r_pcf.h"   /* the helpers shared with r_pcf_workers.c, documented there */
#include "pcf/pcf.h"
#include "pcf/pcf_pack.h"
#include "pcf/pcf_knn.h"
#include "r_shared.h"
#include "device/gk_hooks.h"

/* The warning for function f of `arg`, which is function `at` of s. */
static void warn_float_function(const pcf_set *s, size_t at, const char *arg, size_t f)
{
  size_t row = pcf_float_collapse_row(s, at);
  Rf_warningcall(R_NilValue, "single precision cannot represent the breakpoints of `%s[[%lu]]` (t = %.9g in "
             "row %lu rounds onto its predecessor; float keeps about 7 significant digits): "
             "intervals are lost and the results are inexact; use precision = \"double\"",
             arg, (unsigned long) f + 1, s->t[s->offset[at] + row - 1], (unsigned long) row);
}

void gk_pcf_warn_float_grid(const gk_pcf_flat *fs, const char *arg)
{
  if (fs->collapse < fs->set.n) warn_float_function(&fs->set, fs->collapse, arg, fs->collapse);
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

pcf_options gk_pcf_options_from_r(SEXP single, SEXP threads, SEXP budget, SEXP devices,
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
  opt.queue = NULL;
  opt.sharers = 1;
  return opt;
}

gk_status gk_pcf_check_flat(const pcf_op *op, int single, const gk_pcf_flat *fx,
                            const gk_pcf_flat *fy, gk_error *err)
{
  if (pcf_validate_known(&fx->set, "x", single, fx->bad, err) ||
      (fy && pcf_validate_known(&fy->set, "y", single, fy->bad, err)))
    return err->status;
  return pcf_check_tails(op, &fx->set, "x", fy ? &fy->set : &fx->set, "y", err);
}

SEXP gk_pcf_sets_from_r(SEXP x, SEXP y, const pcf_op *op, int single, gk_pcf_flat *fx,
                        gk_pcf_flat *fy, const pcf_set **yp, SEXP (*during)(void *), void *data)
{
  SEXP out = PROTECT(gk_pcf_flatten(x, y, single, fx, fy, during, data));
  *yp = Rf_isNull(y) ? &fx->set : &fy->set;
  gk_error err;
  gk_error_clear(&err);
  if (gk_pcf_check_flat(op, single, fx, Rf_isNull(y) ? NULL : fy, &err)) gk_raise(&err);
  UNPROTECT(1);
  return out;
}

void gk_pcf_run_engine(SEXP backend, const pcf_op *op, const pcf_set *xs, const pcf_set *yp,
                       const gk_block_writer *writer, const pcf_options *opt, gk_error *err)
{
  if (gk_backend_is_gpu(backend))
    pcf_matrix_cuda(op, xs, yp, writer, opt, err);
  else
    pcf_matrix_cpu(op, xs, yp, writer, opt, err);
}

pcf_op gk_pcf_op_of(SEXP kind, SEXP p)
{
  return strncmp(CHAR(STRING_ELT(kind, 0)), "kernel", 6) == 0 ? pcf_op_inner()
                                                              : pcf_op_for_p(gk_as_double(p));
}

gk_write_kind gk_pcf_write_kind_of(SEXP kind)
{
  const char *what = CHAR(STRING_ELT(kind, 0));
  return strcmp(what, "pdist") == 0        ? GK_WRITE_DIST
         : strcmp(what, "kernel_sym") == 0 ? GK_WRITE_SYMMETRIC
                                           : GK_WRITE_DENSE;
}

/* The checks gk_r_pcf_matrix makes, without computing (before a call is split
 * over workers, so that errors name the user's functions), made where the
 * functions are (found by gk_pcf_plan_of, or in `table`, gk_r_pcf_table's
 * for x and y, when not NULL); a copy (gk_pcf_sets_from_r) only where one
 * fails, to say which and why, or where integers need converting. With
 * `warn`, also float's warnings (where no engine call of this process will
 * make them: the workers' bands make none). */
SEXP gk_r_pcf_check(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single, SEXP warn, SEXP table)
{
  pcf_op op = gk_pcf_op_of(kind, p);
  int is_single = gk_as_flag(single), sets = Rf_isNull(y) ? 1 : 2, passes = 1;
  const char *names[2] = {"x", "y"};
  gk_pcf_plan plans[2];
  pcf_set tails[2];   /* each function's last row */
  size_t collapse[2];
  if (!Rf_isNull(table)) gk_pcf_plans_of_table(table, plans);
  for (int k = 0; k < sets && passes; k++) {
    if (Rf_isNull(table)) gk_pcf_plan_of(k ? y : x, names[k], &plans[k]);
    size_t n = (size_t) plans[k].n, *rows = (size_t *) R_alloc(n + 1, sizeof(size_t));
    double *t = (double *) R_alloc(n + 1, sizeof(double));
    double *v = (double *) R_alloc(n + 1, sizeof(double));
    for (size_t f = 0; f <= n; f++) rows[f] = f;
    tails[k] = (pcf_set) {n, rows, t, v};
    passes = gk_pcf_plan_passes(&plans[k], is_single, t, v, &collapse[k]);
  }
  if (!passes) {
    gk_pcf_flat flat[2];
    const pcf_set *yp;
    gk_pcf_sets_from_r(x, y, &op, is_single, &flat[0], &flat[1], &yp, NULL, NULL);
    for (int k = 0; k < sets && is_single && gk_as_flag(warn); k++)
      gk_pcf_warn_float_grid(&flat[k], names[k]);
    return R_NilValue;
  }
  gk_error err;
  gk_error_clear(&err);
  if (pcf_check_tails(&op, &tails[0], "x", &tails[sets - 1], "y", &err)) gk_raise(&err);
  for (int k = 0; k < sets && is_single && gk_as_flag(warn); k++) {
    size_t f = collapse[k];
    if (f >= (size_t) plans[k].n) continue;
    size_t rows = plans[k].offset[f + 1] - plans[k].offset[f], one[2] = {0, rows};
    const double *m = (const double *) plans[k].data[f];
    pcf_set view = {1, one, m, m + rows};
    warn_float_function(&view, 0, names[k], f);
  }
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

/* An uninitialised double vector of `length` (no zero fill: the writers fill
 * every entry), as a matrix when `rows` > 0: the result of an engine, or of
 * future workers (gk_r_alloc_result). */
static SEXP new_result(double length, int rows)
{
  if (rows > 0) return Rf_allocMatrix(REALSXP, rows, (int) (length / rows));
  return Rf_allocVector(REALSXP, (R_xlen_t) length);
}

static SEXP alloc_result(void *arg)
{
  result_prep *r = (result_prep *) arg;
  double started = gk_seconds_now();
  size_t n = r->fx->set.n, m = r->symmetric ? n : r->fy->set.n;
  SEXP out = r->dist ? new_result((double) (n * (n - 1) / 2), 0)
                     : new_result((double) n * (double) m, (int) n);
  /* The GPU pipeline's scatter threads fault in the result's pages as they
   * write it (measured there; the CPU engine's are left as they were). */
  if (gk_backend_is_gpu(r->backend))
    gk_result_huge_pages(REAL(out), (size_t) Rf_xlength(out) * sizeof(double));
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

gk_pcf_file_target gk_pcf_file_target_of(SEXP file)
{
  SEXP path = gk_list_get(file, "path");
  if (!Rf_isString(path) || Rf_length(path) != 1) gk_stop("invalid file target");
  gk_pcf_file_target t;
  t.path = CHAR(STRING_ELT(path, 0));
  t.is_float = gk_as_flag(gk_list_get(file, "float"));
  t.layout = (gk_write_kind) gk_as_int(gk_list_get(file, "layout"));
  t.n_rows = (size_t) gk_as_double(gk_list_get(file, "n_rows"));
  t.bytes = (size_t) gk_as_double(gk_list_get(file, "bytes"));
  t.row0 = (size_t) gk_as_double(gk_list_get(file, "row0"));
  t.col0 = (size_t) gk_as_double(gk_list_get(file, "col0"));
  t.sync = gk_as_flag(gk_list_get(file, "sync"));
  t.populate = gk_as_int(gk_list_get(file, "populate"));
  if (t.populate < GK_FILE_PAGES_NONE || t.populate > GK_FILE_PAGES_SHARE)
    gk_stop("a file target's `populate` is %d, not 0, 1 or 2", t.populate);
  return t;
}

void gk_pcf_run_into_file(const gk_pcf_file_target *t, gk_write_kind write_kind, SEXP backend,
                          const pcf_op *op, const pcf_set *xs, const pcf_set *ys,
                          const pcf_options *opt, gk_error *err)
{
  gk_block_writer writer = gk_block_writer_band(write_kind, t->layout, NULL, t->n_rows, t->row0,
                                                t->col0, opt->threads);
  void *map = NULL;
  if (gk_file_map(t->path, t->bytes, &map, err) != GK_OK) return;
  /* The rows the engine computes: from its first_row on (a band of a
   * symmetric matrix), mirrored into the columns of the same numbers. */
  size_t first_row = writer.row0 + opt->first_row, end_row = writer.row0 + xs->n;
  int symmetric = writer.layout == GK_WRITE_SYMMETRIC, in_memory = gk_file_in_memory(t->path);
  if (t->populate == GK_FILE_PAGES_WRITTEN)
    gk_file_populate(map, in_memory, t->is_float ? sizeof(float) : sizeof(double), symmetric,
                     writer.n_rows, first_row, end_row - first_row, writer.col0, ys->n,
                     opt->threads);
  else if (t->populate == GK_FILE_PAGES_SHARE)
    gk_file_populate_share(map, in_memory, t->bytes, symmetric, writer.n_rows, first_row, end_row,
                           opt->threads);
  if (t->is_float) writer.out_float = (float *) map;
  else writer.out = (double *) map;
  gk_pcf_run_engine(backend, op, xs, ys, &writer, opt, err);
  gk_error unmap;
  gk_error_clear(&unmap);
  if (gk_file_unmap(map, t->bytes, t->sync, &unmap) && err->status == GK_OK) *err = unmap;
}

/* kind: "pdist" (dist vector), "cdist" (matrix), "kernel" (matrix of inner
 * products between x and y) or "kernel_sym" (symmetric matrix of x). With
 * a `file` (not NULL: a file target, r_pcf.h), the results go into that
 * file's matrix instead (pcf_file.R); returns TRUE. */
SEXP gk_r_pcf_matrix(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single, SEXP backend,
                     SEXP threads, SEXP budget, SEXP devices, SEXP progress, SEXP file)
{
  gk_write_kind write_kind = gk_pcf_write_kind_of(kind);
  int symmetric = write_kind != GK_WRITE_DENSE;
  gk_pcf_flat fx, fy;
  const pcf_set *yp;
  gk_block_writer writer;
  gk_error err;
  gk_error_clear(&err);
  double started = gk_seconds_now();
  pcf_options opt = gk_pcf_options_from_r(single, threads, budget, devices, progress);
  pcf_op op = gk_pcf_op_of(kind, p);
  // The result is made while the inputs are copied, or by the GPU pipeline
  // as its GPUs start (prep.defer); an error in the checks leaves it to R's
  // collector.
  result_prep prep = {backend, &opt, symmetric, write_kind == GK_WRITE_DIST, !Rf_isNull(file),
                      gk_backend_is_gpu(backend) && Rf_isNull(file), &fx, &fy, R_NilValue, 0, 0};
  SEXP out = PROTECT(gk_pcf_sets_from_r(x, symmetric ? R_NilValue : y, &op, opt.single, &fx, &fy, &yp,
                                 prepare_result, &prep));
  const pcf_set *xs = &fx.set;
  if (opt.single) {
    gk_pcf_warn_float_grid(&fx, "x");
    if (!symmetric) gk_pcf_warn_float_grid(&fy, "y");
  }
  double ready = gk_seconds_now();
  if (!Rf_isNull(file)) {
    gk_pcf_file_target target = gk_pcf_file_target_of(file);
    gk_pcf_run_into_file(&target, write_kind, backend, &op, xs, yp, &opt, &err);
    UNPROTECT(1);
    if (err.status) gk_raise(&err);
    return Rf_ScalarLogical(TRUE);
  }
  writer = gk_block_writer_make(write_kind, prep.defer ? NULL : REAL(out), xs->n, opt.threads);
  if (prep.defer) {
    writer.make_out = make_result;
    writer.make_out_arg = &prep;
  }
  gk_pcf_run_engine(backend, &op, xs, yp, &writer, &opt, &err);
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
  pcf_options opt = gk_pcf_options_from_r(single, threads, budget, devices, progress);
  pcf_op op = pcf_op_for_p(gk_as_double(p));
  int kk = gk_as_int(k), both = gk_as_flag(column_lists) && !Rf_isNull(y);
  gk_pcf_sets_from_r(x, y, &op, opt.single, &fx, &fy, &yp, NULL, NULL);
  const pcf_set *xs = &fx.set;
  if (xs->n > INT_MAX || yp->n > INT_MAX) gk_stop("too many functions for R's index matrices");
  int n_cols = both ? (int) yp->n : 0;
  SEXP index = PROTECT(Rf_allocMatrix(INTSXP, (int) xs->n, kk));
  SEXP distance = PROTECT(Rf_allocMatrix(REALSXP, (int) xs->n, kk));
  SEXP col_index = PROTECT(Rf_allocMatrix(INTSXP, n_cols, kk));
  SEXP col_distance = PROTECT(Rf_allocMatrix(REALSXP, n_cols, kk));
  if (pcf_knn_create(xs->n, (size_t) n_cols, kk, Rf_isNull(y), &state, &err) == GK_OK) {
    gk_block_writer writer = pcf_knn_writer(state, opt.threads);
    gk_pcf_run_engine(backend, &op, xs, yp, &writer, &opt, &err);
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

SEXP gk_r_alloc_result(SEXP length, SEXP rows)
{
  return new_result(gk_as_double(length), gk_as_int(rows));
}
