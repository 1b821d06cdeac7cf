/* .Call glue for the kernel reductions (src/reduce/) and for device matrices. */
#include <stdlib.h>
#include "r_util.h"
#include "reduce/reduce.h"
#include "reduce/device_matrix.h"

static void device_matrix_finalize(SEXP ptr)
{
  gk_device_matrix *dm = (gk_device_matrix *) R_ExternalPtrAddr(ptr);
  if (!dm) return;
#ifdef GK_HAVE_CUDA
  device_matrix_free(dm);
#endif
  free(dm);
  R_ClearExternalPtr(ptr);
}

/* Uploads a double matrix; returns an external pointer (freed by its finalizer). */
SEXP gk_r_device_matrix(SEXP x, SEXP single)
{
  gk_error err;
  gk_error_clear(&err);
#ifdef GK_HAVE_CUDA
  gk_device_matrix *dm = (gk_device_matrix *) calloc(1, sizeof *dm);
  if (!dm) Rf_error("out of memory");
  // Register the finalizer before the address, so nothing leaks if R fails.
  SEXP ptr = PROTECT(R_MakeExternalPtr(NULL, Rf_install("gk_device_matrix"), R_NilValue));
  R_RegisterCFinalizerEx(ptr, device_matrix_finalize, TRUE);
  if (device_matrix_upload(dm, REAL(x), (size_t) Rf_nrows(x), Rf_ncols(x), gk_as_flag(single),
                           &err)) {
    free(dm);
    UNPROTECT(1);
    gk_raise(&err);
  }
  R_SetExternalPtrAddr(ptr, dm);
  UNPROTECT(1);
  return ptr;
#else
  (void) x;
  (void) single;
  gk_fail_no_cuda(&err);
  gk_raise(&err);
  return R_NilValue;
#endif
}

static gk_device_matrix *device_matrix_of(SEXP ptr)
{
  gk_device_matrix *dm = TYPEOF(ptr) == EXTPTRSXP ? (gk_device_matrix *) R_ExternalPtrAddr(ptr) : NULL;
  if (!dm) Rf_error("this device matrix is no longer valid (it was freed, or saved and reloaded)");
  return dm;
}

SEXP gk_r_device_matrix_download(SEXP ptr)
{
  gk_device_matrix *dm = device_matrix_of(ptr);
  gk_error err;
  gk_error_clear(&err);
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, (int) dm->rows, dm->cols));
#ifdef GK_HAVE_CUDA
  device_matrix_download(dm, REAL(out), &err);
#else
  gk_fail_no_cuda(&err);
#endif
  UNPROTECT(1);
  if (err.status) gk_raise(&err);
  return out;
}

/* A host matrix (REALSXP) or a device matrix (external pointer) as an operand. */
static gk_reduce_operand operand_of(SEXP a)
{
  gk_reduce_operand op = {NULL, NULL, 0, 0, 0};
  if (TYPEOF(a) == EXTPTRSXP) {
    gk_device_matrix *dm = device_matrix_of(a);
    op.device = dm->buf.ptr;
    op.device_single = dm->single;
    op.rows = dm->rows;
    op.cols = dm->cols;
  } else {
    op.host = REAL(a);
    op.rows = (size_t) Rf_nrows(a);
    op.cols = Rf_ncols(a);
  }
  return op;
}

/* Returns list(values, index): M x value-columns doubles and M x index-columns
 * integers (1-based, NA for an empty reduction), vectors when vector_out and
 * there is one column. The R side has checked all
 * arguments; b is NULL for reductions without weights. */
SEXP gk_r_reduce(SEXP x, SEXP y, SEXP b, SEXP spec, SEXP reduction, SEXP k, SEXP single,
                 SEXP method, SEXP backend, SEXP threads, SEXP vector_out)
{
  gk_reduce_operand xo = operand_of(x), yo = operand_of(y), bo = {NULL, NULL, 0, 0, 0};
  int has_b = !Rf_isNull(b);
  if (has_b) bo = operand_of(b);
  gk_reduce_spec rs;
  rs.kernel = gk_kernel_from_r(spec);
  double *range = (double *) R_alloc(xo.cols > 0 ? xo.cols : 1, sizeof(double));
  gk_kernel_range_from_r(spec, xo.cols, range);
  rs.range = range;
  rs.reduction = (gk_reduction) gk_as_int(reduction);
  rs.k = gk_as_int(k);
  rs.single = gk_as_flag(single);
  rs.method = (gk_reduce_method) gk_as_int(method);

  int m = (int) xo.rows;
  int vcols = reduce_value_columns(rs.reduction, has_b ? bo.cols : 1, rs.k);
  int icols = reduce_index_columns(rs.reduction, rs.k);
  // vector_out: one-column results as plain vectors (what R returns to users).
  int as_vector = gk_as_flag(vector_out);
  SEXP values = PROTECT(as_vector && vcols == 1 ? Rf_allocVector(REALSXP, m)
                                                 : Rf_allocMatrix(REALSXP, m, vcols));
  SEXP index = PROTECT(as_vector && icols == 1 ? Rf_allocVector(INTSXP, m)
                                                : Rf_allocMatrix(INTSXP, m, icols));
  gk_error err;
  gk_error_clear(&err);
  if (gk_backend_is_gpu(backend)) {
#ifdef GK_HAVE_CUDA
    reduce_cuda(&rs, &xo, &yo, has_b ? &bo : NULL, REAL(values), INTEGER(index), &err);
#else
    gk_fail_no_cuda(&err);
#endif
  } else {
    reduce_cpu(&rs, &xo, &yo, has_b ? &bo : NULL, REAL(values), INTEGER(index),
               gk_as_int(threads), &err);
  }
  if (err.status) {
    UNPROTECT(2);
    gk_raise(&err);
  }
  // The cores write 0 for "no index" (an empty reduction): R's NA.
  int *ix = INTEGER(index);
  for (R_xlen_t q = 0; q < Rf_xlength(index); q++)
    if (ix[q] == 0) ix[q] = NA_INTEGER;
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(out, 0, values);
  SET_VECTOR_ELT(out, 1, index);
  UNPROTECT(3);
  return out;
}

/* Frees the reduction engine's cached GPU workspace (package unload). */
void gk_reduce_unload(void)
{
#ifdef GK_HAVE_CUDA
  reduce_cuda_release();
#endif
}
