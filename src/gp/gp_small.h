/* Small dense systems of the Vecchia rows (gp_cpu.c, gp_vecchia_lik.c): the
 * pair distance (gk_sqdist) and the q x q Cholesky used per row. */
#ifndef GK_GP_SMALL_H
#define GK_GP_SMALL_H

#include <math.h>
#include <stddef.h>
#include "gpukernels/gk_kernel.h"
#include "reduce/reduce.h"

/* Squared distance between points i and j of the n x dim column-major xs. */
static inline double gp_sq_distance(const double *xs, int n, int dim, int i, int j)
{
  return gk_sqdist(xs + i, (size_t) n, xs + j, (size_t) n, dim);
}

/* The covariance of the Vecchia rows: a kernel of the vocabulary on the
 * scaled column-major points xs, or a user's formula (reduce.h), which sees
 * the points as given (no range, no shift), row-major in `pts`. */
typedef struct {
  const gk_kernel *kernel;
  const gk_formula *formula;   /* NULL: the kernel */
  const double *pts;           /* the formula's points: n x dim, row-major */
} gp_cov;

/* The covariance of points i and j. */
static inline double gp_cov_value(const gp_cov *c, const double *xs, int n, int dim, int i, int j)
{
  if (c->formula)
    return c->formula->eval(c->pts + (size_t) i * dim, c->pts + (size_t) j * dim,
                            c->formula->params);
  return gk_kernel_eval(c->kernel, gp_sq_distance(xs, n, dim, i, j));
}

/* The small system of point i given its kept neighbours (those of nbr_row[k *
 * stride], k < m, 1-based, that come before i): their indices (0-based) in
 * cols, Sigma[c,c] in the lower triangle of the q x q matrix a, Sigma[c,i] in
 * g, with Sigma = K + nugget I on the points before `noisy`. Returns q. */
static inline int gp_row_system(const double *xs, int n, int dim, const int *nbr_row,
                                size_t stride, int m, int i, const gp_cov *cov,
                                double nugget, int noisy, int *cols, double *a, double *g)
{
  int q = 0;
  for (int k = 0; k < m; k++) {
    int j = nbr_row[(size_t) k * stride];
    if (j > 0 && j - 1 < i) cols[q++] = j - 1;
  }
  for (int s = 0; s < q; s++) {
    for (int t = s; t < q; t++)
      a[t + s * q] = gp_cov_value(cov, xs, n, dim, cols[s], cols[t]) +
                     (s == t && cols[s] < noisy ? nugget : 0.0);
    g[s] = gp_cov_value(cov, xs, n, dim, cols[s], i);
  }
  return q;
}

/* In-place Cholesky of the q x q matrix a (lower triangle used); 0 on success. */
static inline int gp_cholesky(double *a, int q)
{
  for (int j = 0; j < q; j++) {
    double s = a[j + j * q];
    for (int k = 0; k < j; k++) s -= a[j + k * q] * a[j + k * q];
    if (!(s > 0.0)) return 1;
    double l = sqrt(s);
    a[j + j * q] = l;
    for (int i = j + 1; i < q; i++) {
      double t = a[i + j * q];
      for (int k = 0; k < j; k++) t -= a[i + k * q] * a[j + k * q];
      a[i + j * q] = t / l;
    }
  }
  return 0;
}

/* b = (L L')^-1 b for the factor l from gp_cholesky. */
static inline void gp_cholesky_solve(const double *l, int q, double *b)
{
  for (int i = 0; i < q; i++) {
    double t = b[i];
    for (int k = 0; k < i; k++) t -= l[i + k * q] * b[k];
    b[i] = t / l[i + i * q];
  }
  for (int i = q - 1; i >= 0; i--) {
    double t = b[i];
    for (int k = i + 1; k < q; k++) t -= l[k + i * q] * b[k];
    b[i] = t / l[i + i * q];
  }
}

#endif
