/*
 * Batched SVD for the H2 truncation (h2_svd_cuda.cu): singular values and
 * left singular vectors of many small dense matrices, one thread block per
 * matrix held in shared memory, one-sided Jacobi in double (block Jacobi in
 * registers up to 256 rows). The result is
 * that of h2_svd_left_batch (h2_compress.h): for each rows x cols matrix,
 * km = min(rows, cols) singular values in descending order and the rows x km
 * orthonormal left singular vectors, matrices one after the other.
 * .cu files only.
 */
#ifndef GK_H2_SVD_CUDA_CUH
#define GK_H2_SVD_CUDA_CUH

#include "device/gk_cuda.h"

/* Whether the device in use can hold one rows x cols matrix (and the
 * kernel's bookkeeping) in the shared memory of one block; if not, the
 * caller takes the host path (h2_svd_left_batch). */
bool h2_svd_gpu_fits(int rows, int cols);

/* w: count matrices (rows x cols, column-major, stride rows * cols; with
 * transposed set, cols x rows matrices whose transposes are factored) in the
 * caller's precision; sig: count * km doubles; u: count * rows * km. Enqueued
 * on stream s (no synchronization). Requires h2_svd_gpu_fits(rows, cols). */
gk_status h2_svd_left_gpu(int count, int rows, int cols, const double *w, int transposed,
                          double *sig, double *u, cudaStream_t s, gk_error *err);
gk_status h2_svd_left_gpu(int count, int rows, int cols, const float *w, int transposed,
                          double *sig, float *u, cudaStream_t s, gk_error *err);

#endif
