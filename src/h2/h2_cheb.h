/*
 * Tensor Chebyshev interpolation on boxes, shared by the CPU build and the
 * GPU build kernels (GK_HD: host and device), so both backends evaluate the
 * same numbers. A box is center c and half-widths h per dimension; the
 * interpolation nodes are c + h t_a with t_a = cos((2a + 1) pi / (2p)).
 * Multi-index a = a_0 + p a_1 + p^2 a_2 (dimension 0 fastest).
 */
#ifndef GK_H2_CHEB_H
#define GK_H2_CHEB_H

#include "gpukernels/gk_kernel.h"

#define H2_MAX_DIM 3

#define H2_MAX_ORDER 16

/* The p Chebyshev points, tabulated once (the entry functions below are
 * called for every matrix entry). */
typedef struct {
  int p;
  double t[H2_MAX_ORDER];
} h2_cheb;

static inline h2_cheb h2_cheb_make(int p)
{
  h2_cheb c;
  c.p = p;
  for (int a = 0; a < H2_MAX_ORDER; a++)
    c.t[a] = a < p ? cos((2.0 * a + 1.0) * 3.14159265358979323846 / (2.0 * p)) : 0.0;
  return c;
}

/* The a-th Lagrange polynomial of the p Chebyshev points at u in [-1, 1]. */
GK_HD double h2_lagrange(const h2_cheb *c, int a, double u)
{
  double ta = c->t[a], v = 1.0;
  for (int b = 0; b < c->p; b++)
    if (b != a) v *= (u - c->t[b]) / (ta - c->t[b]);
  return v;
}

/* The interpolation node `a` of a box: out[dim]. */
GK_HD void h2_box_node(const h2_cheb *c, int a, int dim, const double *center,
                       const double *half, int stride, double *out)
{
  for (int d = 0; d < dim; d++) {
    out[d] = center[d * stride] + half[d * stride] * c->t[a % c->p];
    a /= c->p;
  }
}

/* The tensor Lagrange basis function `a` of a box at point x[dim]. */
GK_HD double h2_box_basis(const h2_cheb *c, int a, int dim, const double *center,
                          const double *half, int stride, const double *x)
{
  double v = 1.0;
  for (int d = 0; d < dim; d++) {
    v *= h2_lagrange(c, a % c->p, (x[d] - center[d * stride]) / half[d * stride]);
    a /= c->p;
  }
  return v;
}

/* Squared distance of two points of `dim` coordinates. */
GK_HD double h2_dist2(const double *x, const double *y, int dim)
{
  return gk_sqdist(x, 1, y, 1, dim);
}

#endif
