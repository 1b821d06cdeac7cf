/*
 * Dense kernel matrices K[i, j] = k(x_i, y_j): the small, direct engine used
 * for modest sizes, for checking the other engines, and in the demo.
 * x is m x dim and y is n x dim, column-major (R's layout), already divided by
 * the kernel's range; K is m x n, column-major.
 */
#ifndef GK_KERNEL_MATRIX_H
#define GK_KERNEL_MATRIX_H

#include <stddef.h>
#include "device/gk_error.h"
#include "gpukernels/gk_kernel.h"
#include "reduce/reduce.h"

#ifdef __cplusplus
extern "C" {
#endif

gk_status kernel_matrix_cpu(const gk_kernel *kernel, const double *x, size_t m,
                            const double *y, size_t n, int dim, double *out,
                            int threads, gk_error *err);

/* The same for a user's formula compiled for the CPU (reduce.h), which sees
 * the points as given: x (m x dim) and y (n x dim) row-major, unscaled. */
gk_status kernel_matrix_formula_cpu(const gk_formula *formula, const double *x, size_t m,
                                    const double *y, size_t n, int dim, double *out,
                                    int threads, gk_error *err);

gk_status kernel_matrix_cuda(const gk_kernel *kernel, const double *x, size_t m,
                             const double *y, size_t n, int dim, double *out,
                             gk_error *err);

/* The same on operands already on the device in use: out (m x n, leading
 * dimension m, device) = alpha K + beta out (beta = 0: out is not read), so
 * that weighted sums of kernels build without temporaries. Checks for an
 * interrupt between slices of columns; returns with the work finished. */
gk_status kernel_matrix_cuda_device(const gk_kernel *kernel, const double *x, size_t m,
                                    const double *y, size_t n, int dim, double alpha,
                                    double beta, double *out, gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
