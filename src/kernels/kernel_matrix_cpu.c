#include "kernels/kernel_matrix.h"
#include "device/gk_omp.h"

/* The pair statistic of rows i of x and j of y: squared distance, or the
 * inner product for kernels that need it. */
static inline double pair_statistic(int inner, const double *x, size_t m, size_t i,
                                    const double *y, size_t n, size_t j, int dim)
{
  double acc = 0.0;
  for (int k = 0; k < dim; k++) {
    double a = x[i + (size_t) k * m], b = y[j + (size_t) k * n];
    acc += inner ? a * b : (a - b) * (a - b);
  }
  return acc;
}

gk_status kernel_matrix_cpu(const gk_kernel *kernel, const double *x, size_t m,
                            const double *y, size_t n, int dim, double *out,
                            int threads, gk_error *err)
{
  (void) err;
  int inner = gk_kernel_uses_inner_product(kernel);
  ptrdiff_t ncol = (ptrdiff_t) n;
#pragma omp parallel for schedule(static) num_threads(gk_omp_threads(threads))
  for (ptrdiff_t j = 0; j < ncol; j++)
    for (size_t i = 0; i < m; i++)
      out[i + (size_t) j * m] =
        gk_kernel_eval(kernel, pair_statistic(inner, x, m, i, y, n, (size_t) j, dim));
  return GK_OK;
}
