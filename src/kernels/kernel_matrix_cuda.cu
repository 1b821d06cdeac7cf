// Dense kernel matrix on the GPU: one thread per entry, threads of a warp on
// consecutive rows so that reads of x and writes of K are coalesced.
#include "kernels/kernel_matrix.h"
#include "device/gk_cuda.h"
#include "device/gk_hooks.h"

__global__ void kernel_matrix_entries(gk_kernel kernel, const double *x, size_t m,
                                      const double *y, size_t n, int dim, double alpha,
                                      double beta, double *out)
{
  size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x;
  size_t j = blockIdx.y;
  if (i >= m) return;
  int inner = gk_kernel_uses_inner_product(&kernel);
  double v = alpha * gk_kernel_eval(&kernel, gk_pair_stat(inner, x + i, m, y + j, n, dim));
  out[i + j * m] = beta == 0.0 ? v : v + beta * out[i + j * m];
}

extern "C" gk_status kernel_matrix_cuda_device(const gk_kernel *kernel, const double *x,
                                               size_t m, const double *y, size_t n, int dim,
                                               double alpha, double beta, double *out,
                                               gk_error *err)
{
  const int threads = 256;
  if (m == 0 || n == 0) return GK_OK;
  // Slices of columns (gridDim.y is at most 65535) of about 2^26 entries, with
  // an interrupt check between them: a slice of the slowest kernel (the
  // general Matern) takes well under a second.
  size_t per_slice = ((size_t) 1 << 26) / m;
  per_slice = per_slice < 1 ? 1 : per_slice > 65535 ? 65535 : per_slice;
  for (size_t j0 = 0; j0 < n; j0 += per_slice) {
    size_t cols = n - j0 < per_slice ? n - j0 : per_slice;
    dim3 grid((unsigned) ((m + threads - 1) / threads), (unsigned) cols);
    kernel_matrix_entries<<<grid, threads>>>(*kernel, x, m, y + j0, n, dim, alpha, beta,
                                             out + j0 * m);
    if (gk_cuda_check_launch("the kernel-matrix kernel", err)) return err->status;
    if (gk_stream_sync(NULL, "the kernel-matrix kernel", err)) return err->status;
    if (j0 + cols < n && gk_interrupt_pending())
      return gk_fail(err, GK_ERR_INTERRUPTED, "the kernel matrix was interrupted");
  }
  return GK_OK;
}

extern "C" gk_status kernel_matrix_cuda(const gk_kernel *kernel, const double *x, size_t m,
                                        const double *y, size_t n, int dim, double *out,
                                        gk_error *err)
{
  gk_device_buffer dx = GK_DEVICE_BUFFER_EMPTY, dy = GK_DEVICE_BUFFER_EMPTY,
                   dk = GK_DEVICE_BUFFER_EMPTY;
  if (m == 0 || n == 0) return GK_OK;
  if (gk_device_enter(GK_DEVICE_ACTIVE, err)) return err->status;
  GK_TRY(gk_buffer_alloc(&dx, m * dim * sizeof(double), "the points x", err));
  GK_TRY(gk_buffer_alloc(&dy, n * dim * sizeof(double), "the points y", err));
  GK_TRY(gk_buffer_alloc(&dk, m * n * sizeof(double), "the kernel matrix", err));
  GK_TRY(gk_buffer_upload(&dx, x, dx.bytes, NULL, err));
  GK_TRY(gk_buffer_upload(&dy, y, dy.bytes, NULL, err));
  GK_TRY(kernel_matrix_cuda_device(kernel, (const double *) dx.ptr, m, (const double *) dy.ptr,
                                   n, dim, 1.0, 0.0, (double *) dk.ptr, err));
  GK_TRY(gk_buffer_download(out, &dk, dk.bytes, NULL, err));
  GK_TRY(gk_stream_sync(NULL, "the kernel-matrix kernel", err));
fail:
  gk_buffer_free(&dx);
  gk_buffer_free(&dy);
  gk_buffer_free(&dk);
  return err->status;
}
