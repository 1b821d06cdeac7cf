/* The GPU kernel-matrix engine in a CPU-only build: fails with the no-CUDA error. */
#ifndef GK_HAVE_CUDA
#include "kernels/kernel_matrix.h"

gk_status kernel_matrix_cuda(const gk_kernel *kernel, const double *x, size_t m,
                             const double *y, size_t n, int dim, double *out,
                             gk_error *err)
{
  (void) kernel; (void) x; (void) m; (void) y; (void) n; (void) dim; (void) out;
  return gk_fail_no_cuda(err);
}

gk_status kernel_matrix_cuda_device(const gk_kernel *kernel, const double *x, size_t m,
                                    const double *y, size_t n, int dim, double alpha,
                                    double beta, double *out, gk_error *err)
{
  (void) kernel; (void) x; (void) m; (void) y; (void) n; (void) dim; (void) alpha;
  (void) beta; (void) out;
  return gk_fail_no_cuda(err);
}
#else
/* ISO C forbids an empty translation unit. */
typedef int gk_kernel_matrix_nocuda_unused;
#endif
