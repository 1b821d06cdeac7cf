/* .Call glue for the PCF engine: flattens the R lists of two-column matrices
 * (R has already turned data frames and pcf objects into those), calls the
 * checks and the CPU or GPU engine, and returns R's `dist` vector or a matrix
 * (attributes are added by the R code). */
#include <limits.h>
#include <string.h>
#include "r_util.h"
#include "pcf/pcf.h"

/* One pass to count and check shapes, one to copy: the set lives in R's
 * transient memory, freed when the call returns or raises. */
static void flatten(SEXP list, const char *arg, pcf_set *s)
{
  R_xlen_t n = Rf_xlength(list);
  size_t *offset = (size_t *) R_alloc((size_t) n + 1, sizeof(size_t));
  offset[0] = 0;
  for (R_xlen_t f = 0; f < n; f++) {
    SEXP m = VECTOR_ELT(list, f);
    if (!Rf_isMatrix(m) || (TYPEOF(m) != REALSXP && TYPEOF(m) != INTSXP) || Rf_ncols(m) != 2)
      gk_stop("`%s[[%lld]]` must be a numeric matrix with two columns (t, v) or a data frame "
               "with columns t and v", arg, (long long) f + 1);
    offset[f + 1] = offset[f] + (size_t) Rf_nrows(m);
  }
  double *t = (double *) R_alloc(offset[n] + 1, sizeof(double));
  double *v = (double *) R_alloc(offset[n] + 1, sizeof(double));
  for (R_xlen_t f = 0; f < n; f++) {
    SEXP m = VECTOR_ELT(list, f);
    size_t rows = offset[f + 1] - offset[f];
    if (TYPEOF(m) == REALSXP) {
      memcpy(t + offset[f], REAL(m), rows * sizeof(double));
      memcpy(v + offset[f], REAL(m) + rows, rows * sizeof(double));
    } else {
      for (size_t k = 0; k < 2 * rows; k++) {
        int value = INTEGER(m)[k];
        (k < rows ? t + offset[f] + k : v + offset[f] + k - rows)[0] =
            value == NA_INTEGER ? NA_REAL : (double) value;
      }
    }
  }
  s->n = (size_t) n;
  s->offset = offset;
  s->t = t;
  s->v = v;
}

/* Checks a list of PCFs as the engines do; returns NULL or raises. */
SEXP gk_r_pcf_validate(SEXP x)
{
  pcf_set xs;
  gk_error err;
  gk_error_clear(&err);
  flatten(x, "X", &xs);
  if (pcf_validate(&xs, "X", 0, &err)) gk_raise(&err);
  return R_NilValue;
}

/* kind: "pdist" (dist vector), "cdist" (matrix), "kernel" (matrix of inner
 * products between x and y) or "kernel_sym" (symmetric matrix of x). */
SEXP gk_r_pcf_matrix(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single, SEXP backend,
                     SEXP threads, SEXP budget, SEXP devices, SEXP progress, SEXP tuning)
{
  const char *what = CHAR(STRING_ELT(kind, 0));
  int symmetric = strcmp(what, "pdist") == 0 || strcmp(what, "kernel_sym") == 0;
  int inner = strncmp(what, "kernel", 6) == 0;
  pcf_set xs, ys;
  pcf_options opt;
  gk_block_writer writer;
  gk_error err;
  gk_error_clear(&err);

  opt.single = gk_as_flag(single);
  opt.threads = gk_as_int(threads);
  opt.budget_bytes = gk_as_double(budget);
  opt.progress = gk_as_flag(progress);
  opt.devices = INTEGER(devices);
  opt.n_devices = Rf_length(devices);
  opt.gpu_walk = INTEGER(tuning)[0];
  opt.gpu_shared_bytes = INTEGER(tuning)[1];
  pcf_op op = inner ? pcf_op_inner() : pcf_op_for_p(gk_as_double(p));

  flatten(x, "X", &xs);
  if (!symmetric) flatten(y, "Y", &ys);
  const pcf_set *yp = symmetric ? &xs : &ys;
  if (pcf_validate(&xs, "X", opt.single, &err) ||
      (!symmetric && pcf_validate(&ys, "Y", opt.single, &err)) ||
      pcf_check_tails(&op, &xs, "X", yp, "Y", &err))
    gk_raise(&err);

  SEXP out;
  if (strcmp(what, "pdist") == 0) {
    out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) (xs.n * (xs.n - 1) / 2)));
  } else {
    if ((double) xs.n * (double) yp->n > (double) R_XLEN_T_MAX || yp->n > INT_MAX || xs.n > INT_MAX)
      gk_stop("the result (%lu x %lu) is too large for an R matrix", (unsigned long) xs.n,
               (unsigned long) yp->n);
    out = PROTECT(Rf_allocMatrix(REALSXP, (int) xs.n, (int) yp->n));
  }
  writer.kind = strcmp(what, "pdist") == 0 ? GK_WRITE_DIST
              : strcmp(what, "kernel_sym") == 0 ? GK_WRITE_SYMMETRIC : GK_WRITE_DENSE;
  writer.out = REAL(out);
  writer.n_rows = xs.n;
  writer.threads = opt.threads;

  if (gk_backend_is_gpu(backend))
    pcf_matrix_cuda(&op, &xs, yp, &writer, &opt, &err);
  else
    pcf_matrix_cpu(&op, &xs, yp, &writer, &opt, &err);
  UNPROTECT(1);
  if (err.status) gk_raise(&err);
  return out;
}
