/*
 * The cuBLAS calls of the H2 engine in both precisions, overloaded on the
 * element type so that templates over T call one name (h2_cuda_hmv.cu,
 * the compression's h2_compress_cuda.cuh). alpha and beta are given in
 * double and rounded to float for the single-precision calls; host pointer
 * mode (the cuBLAS default).
 */
#ifndef GK_H2_BLAS_CUDA_CUH
#define GK_H2_BLAS_CUDA_CUH

#include "device/gk_cuda.h"

static inline cublasStatus_t h2_gemm_strided_batched(
  cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
  double alpha, const double *a, int lda, long long sa, const double *b, int ldb, long long sb,
  double beta, double *c, int ldc, long long sc, int count)
{
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c,
                                   ldc, sc, count);
}
static inline cublasStatus_t h2_gemm_strided_batched(
  cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
  double alpha, const float *a, int lda, long long sa, const float *b, int ldb, long long sb,
  double beta, float *c, int ldc, long long sc, int count)
{
  const float fa = (float) alpha, fb = (float) beta;
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &fa, a, lda, sa, b, ldb, sb, &fb, c, ldc,
                                   sc, count);
}

/* Batched products through arrays of device pointers (one matrix each). */
static inline cublasStatus_t h2_gemm_pointer_batched(
  cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
  double alpha, const double **a, int lda, const double **b, int ldb, double beta, double **c,
  int ldc, int count)
{
  return cublasDgemmBatched(h, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc, count);
}
static inline cublasStatus_t h2_gemm_pointer_batched(
  cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
  double alpha, const float **a, int lda, const float **b, int ldb, double beta, float **c,
  int ldc, int count)
{
  const float fa = (float) alpha, fb = (float) beta;
  return cublasSgemmBatched(h, ta, tb, m, n, k, &fa, a, lda, b, ldb, &fb, c, ldc, count);
}

static inline cublasStatus_t h2_geqrf_batched(cublasHandle_t h, int m, int n, double **a, int lda,
                                              double **tau, int *info, int count)
{
  return cublasDgeqrfBatched(h, m, n, a, lda, tau, info, count);
}
static inline cublasStatus_t h2_geqrf_batched(cublasHandle_t h, int m, int n, float **a, int lda,
                                              float **tau, int *info, int count)
{
  return cublasSgeqrfBatched(h, m, n, a, lda, tau, info, count);
}

/* The Euclidean norm of n contiguous entries, returned in double. */
static inline cublasStatus_t h2_nrm2(cublasHandle_t h, int n, const double *x, double *r)
{
  return cublasDnrm2(h, n, x, 1, r);
}
static inline cublasStatus_t h2_nrm2(cublasHandle_t h, int n, const float *x, double *r)
{
  float f = 0.0f;
  cublasStatus_t st = cublasSnrm2(h, n, x, 1, &f);
  *r = f;
  return st;
}

#endif
