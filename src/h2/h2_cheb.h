/*
 * Tensor Chebyshev interpolation on boxes, shared by the CPU build and the
 * GPU build kernels (GK_HD: host and device), so both backends evaluate the
 * same numbers. A box is center c and half-widths h per dimension; the
 * interpolation nodes are c + h t_a with t_a = cos((2a + 1) pi / (2p)).
 * Multi-index a = a_0 + p a_1 + p^2 a_2 (dimension 0 fastest).
 */
#ifndef GK_H2_CHEB_H
#define GK_H2_CHEB_H

#include "kernels/gk_kernel.h"

#define H2_MAX_DIM 3

GK_HD double h2_cheb_point(int a, int p)
{
  return cos((2.0 * a + 1.0) * 3.14159265358979323846 / (2.0 * p));
}

/* The a-th Lagrange polynomial of the p Chebyshev points at u in [-1, 1]. */
GK_HD double h2_lagrange(int a, int p, double u)
{
  double ta = h2_cheb_point(a, p), v = 1.0;
  for (int b = 0; b < p; b++)
    if (b != a) {
      double tb = h2_cheb_point(b, p);
      v *= (u - tb) / (ta - tb);
    }
  return v;
}

/* The interpolation node `a` of a box: out[dim]. */
GK_HD void h2_box_node(int a, int p, int dim, const double *center, const double *half,
                       int stride, double *out)
{
  for (int d = 0; d < dim; d++) {
    out[d] = center[d * stride] + half[d * stride] * h2_cheb_point(a % p, p);
    a /= p;
  }
}

/* The tensor Lagrange basis function `a` of a box at point x[dim]. */
GK_HD double h2_box_basis(int a, int p, int dim, const double *center, const double *half,
                          int stride, const double *x)
{
  double v = 1.0;
  for (int d = 0; d < dim; d++) {
    v *= h2_lagrange(a % p, p, (x[d] - center[d * stride]) / half[d * stride]);
    a /= p;
  }
  return v;
}

/* Squared distance of two points of `dim` coordinates. */
GK_HD double h2_dist2(const double *x, const double *y, int dim)
{
  double s = 0.0;
  for (int d = 0; d < dim; d++) s += (x[d] - y[d]) * (x[d] - y[d]);
  return s;
}

#endif
