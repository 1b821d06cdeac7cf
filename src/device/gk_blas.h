/*
 * The Fortran BLAS symbols the C cores call, declared here because R's
 * R_ext/BLAS.h is an R header (allowed in the glue only). gfortran passes the
 * length of each character argument as a trailing hidden size_t; we pass 1.
 * Only double precision is declared: R's own libRblas has no single-precision
 * routines, so float code must not depend on sgemm_. The LAPACK routines are
 * those of R's libRlapack ($(LAPACK_LIBS)).
 */
#ifndef GK_BLAS_H
#define GK_BLAS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void dgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k,
            const double *alpha, const double *a, const int *lda, const double *b,
            const int *ldb, const double *beta, double *c, const int *ldc,
            size_t transa_len, size_t transb_len);

/* C = alpha op(A) op(B) + beta C with 'N' / 'T' flags, column-major. */
static inline void gk_dgemm(char transa, char transb, int m, int n, int k, double alpha,
                            const double *a, int lda, const double *b, int ldb,
                            double beta, double *c, int ldc)
{
  dgemm_(&transa, &transb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
}

/* LAPACK: QR (R in the upper triangle, reflectors below), Q from the
 * reflectors, and the SVD. */
void dgeqrf_(const int *m, const int *n, double *a, const int *lda, double *tau, double *work,
             const int *lwork, int *info);
void dorgqr_(const int *m, const int *n, const int *k, double *a, const int *lda,
             const double *tau, double *work, const int *lwork, int *info);
void dgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, double *a,
             const int *lda, double *s, double *u, const int *ldu, double *vt, const int *ldvt,
             double *work, const int *lwork, int *info, size_t jobu_len, size_t jobvt_len);

#ifdef __cplusplus
}
#endif
#endif
