/* .Call glue for the kernel vocabulary: dense kernel matrices and single
 * kernel values (used by R code that needs the exact kernel). */
#include <stdlib.h>
#include "r_util.h"
#include "kernels/kernel_matrix.h"
#include "r_reduce.h"

/* A formula's matrix (CPU): the points transposed to row-major, as given. */
static SEXP kernel_matrix_formula(SEXP x, SEXP y, SEXP native, SEXP threads)
{
  int m = Rf_nrows(x), n = Rf_nrows(y), dim = Rf_ncols(x);
  gk_formula f;
  gk_r_formula_from(native, dim, &f);
  double *xt = (double *) R_alloc((size_t) m * dim + 1, sizeof(double));
  double *yt = (double *) R_alloc((size_t) n * dim + 1, sizeof(double));
  for (int k = 0; k < dim; k++) {
    for (int i = 0; i < m; i++) xt[(size_t) i * dim + k] = REAL(x)[i + (size_t) k * m];
    for (int j = 0; j < n; j++) yt[(size_t) j * dim + k] = REAL(y)[j + (size_t) k * n];
  }
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, m, n));
  gk_error err;
  gk_error_clear(&err);
  kernel_matrix_formula_cpu(&f, xt, m, yt, n, dim, REAL(out), gk_as_int(threads), &err);
  UNPROTECT(1);
  gk_finish(&err);
  return out;
}

SEXP gk_r_kernel_matrix(SEXP x, SEXP y, SEXP spec, SEXP backend, SEXP threads)
{
  int m = Rf_nrows(x), n = Rf_nrows(y), dim = Rf_ncols(x);
  if (gk_r_is_formula(spec)) return kernel_matrix_formula(x, y, spec, threads);
  gk_kernel kernel = gk_kernel_from_r(spec);
  double *range = (double *) R_alloc(dim > 0 ? dim : 1, sizeof(double));
  gk_kernel_range_from_r(spec, dim, range);

  // Scaled copies live in R's transient memory: freed on return or on error.
  // Kernels of differences see both sets shifted by one common centre.
  double *xs = (double *) R_alloc((size_t) m * dim + 1, sizeof(double));
  double *ys = (double *) R_alloc((size_t) n * dim + 1, sizeof(double));
  double *centre = NULL;
  if (!gk_kernel_uses_inner_product(&kernel)) {
    centre = (double *) R_alloc(dim > 0 ? dim : 1, sizeof(double));
    gk_points_centre(REAL(x), m, REAL(y), n, dim, range, centre);
  }
  gk_scale_points(REAL(x), m, dim, centre, range, xs);
  gk_scale_points(REAL(y), n, dim, centre, range, ys);

  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, m, n));
  gk_error err;
  gk_error_clear(&err);
  if (gk_backend_is_gpu(backend))
    kernel_matrix_cuda(&kernel, xs, m, ys, n, dim, REAL(out), &err);
  else
    kernel_matrix_cpu(&kernel, xs, m, ys, n, dim, REAL(out), gk_as_int(threads), &err);
  UNPROTECT(1);
  gk_finish(&err);
  return out;
}

/* The kernel of pair statistics (d^2, or inner products for `linear`). */
SEXP gk_r_kernel_eval(SEXP spec, SEXP stat)
{
  gk_kernel kernel = gk_kernel_from_r(spec);
  R_xlen_t n = Rf_xlength(stat);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, n));
  for (R_xlen_t i = 0; i < n; i++) REAL(out)[i] = gk_kernel_eval(&kernel, REAL(stat)[i]);
  UNPROTECT(1);
  return out;
}
