#include "kernels/kernel_matrix.h"
#include "device/gk_omp.h"
#include "device/gk_hooks.h"

gk_status kernel_matrix_cpu(const gk_kernel *kernel, const double *x, size_t m,
                            const double *y, size_t n, int dim, double *out,
                            int threads, gk_error *err)
{
  int inner = gk_kernel_uses_inner_product(kernel);
  ptrdiff_t ncol = (ptrdiff_t) n;
  // Columns in chunks of rows, with an interrupt check between chunks.
  const size_t chunk = 4096;
  gk_stop_flag stop;
  gk_stop_flag_init(&stop);
#pragma omp parallel for schedule(static) num_threads(gk_omp_threads(threads))
  for (ptrdiff_t j = 0; j < ncol; j++)
    for (size_t i0 = 0; i0 < m; i0 += chunk) {
      if (gk_stop_requested(&stop)) break;
      size_t i1 = i0 + chunk < m ? i0 + chunk : m;
      for (size_t i = i0; i < i1; i++)
        out[i + (size_t) j * m] =
          gk_kernel_eval(kernel, gk_pair_stat(inner, x + i, m, y + j, n, dim));
    }
  if (stop.stop) return gk_fail(err, GK_ERR_INTERRUPTED, "the kernel matrix was interrupted");
  return GK_OK;
}

gk_status kernel_matrix_formula_cpu(const gk_formula *formula, const double *x, size_t m,
                                    const double *y, size_t n, int dim, double *out,
                                    int threads, gk_error *err)
{
  if (!formula->eval) return gk_fail(err, GK_ERR_INPUT, "this formula was not compiled for the CPU");
  ptrdiff_t ncol = (ptrdiff_t) n;
  gk_stop_flag stop;
  gk_stop_flag_init(&stop);
#pragma omp parallel for schedule(static) num_threads(gk_omp_threads(threads))
  for (ptrdiff_t j = 0; j < ncol; j++) {
    if (gk_stop_requested(&stop)) continue;
    const double *yj = y + (size_t) j * dim;
    for (size_t i = 0; i < m; i++)
      out[i + (size_t) j * m] = formula->eval(x + i * dim, yj, formula->params);
  }
  if (stop.stop) return gk_fail(err, GK_ERR_INTERRUPTED, "the kernel matrix was interrupted");
  return GK_OK;
}
