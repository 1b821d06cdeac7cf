/*
 * Gaussian-process engine (CPU): the Vecchia / FSAI preconditioner.
 *
 * For locations in a fixed order and, for each point i, up to m neighbours
 * that come before it (from knn(), in R), the sparse lower-triangular factor G
 * with G Sigma G' ~ I, Sigma^-1 ~ G'G (Vecchia 1988; Kolotilina and Yeremin's
 * FSAI): row i solves the small system Sigma[c,c] b = Sigma[c,i] on its
 * neighbours c, d_i = Sigma[i,i] - Sigma[i,c] b, and holds 1/sqrt(d_i) at i and
 * -b/sqrt(d_i) at c. The same factor gives approximate samples (G^-1 z).
 *
 * Storage: nbr is n x m (column-major, 1-based indices into the ordered
 * points, 0 = no neighbour); coef is n x (m + 1): column 0 the diagonal,
 * column k the coefficient of neighbour k.
 * Kernel evaluation goes through gk_kernel.h (the package's one vocabulary).
 */
#ifndef GK_GP_H
#define GK_GP_H

#include <stddef.h>
#include "device/gk_error.h"
#include "kernels/gk_kernel.h"

/* Keeps, for rows first_row .. first_row + rows - 1 of the ordered points, the
 * first m candidates (rows x kc, 1-based, nearest first) that come before the
 * row, writing row first_row + r of nbr (n x m; 0 pads). Returns the number of
 * candidates at distance 0 that come before their row (duplicated locations). */
int gp_keep_preceding(const int *cand, const double *dist, int rows, int kc, int first_row,
                      int n, int m, int *nbr);

/* Builds coef. xs: n x dim scaled locations (column-major). dkernel (may be
 * NULL) is a derivative kernel D. stats[0] = sum log d_i (= log det of the
 * Vecchia covariance), stats[1] = trace(G G'), stats[2] = trace(G D G'). */
gk_status gp_vecchia_factor(const double *xs, int n, int dim, const int *nbr, int m,
                            const gk_kernel *kernel, const gk_kernel *dkernel, double nugget,
                            int threads, double *coef, double *stats, gk_error *err);

/* out = G x (transpose = 0) or G' x (transpose = 1) for x n x k. */
void gp_vecchia_apply(int n, int m, const int *nbr, const double *coef, const double *x,
                      int k, int transpose, int threads, double *out);

/* out = G^-1 x (forward substitution), x n x k. */
void gp_vecchia_solve(int n, int m, const int *nbr, const double *coef, const double *x,
                      int k, int threads, double *out);

/* One step of conjugate gradients on the columns `active` (k of them,
 * 0-based) of the n-row blocks x, r, p (updated in place), given q = A p for
 * those columns (n x k, in their order): per column a = rr / <p, q>,
 * x += a p, r -= a q, rr' = <r, r>, b = rr' / rr, p = r + b p; rr (one per
 * column of the blocks) becomes rr', and a, b (k each) are returned. */
void gp_cg_step(size_t n, int k, const int *active, const double *q, double *x, double *r,
                double *p, double *rr, double *a, double *b, int threads);

#endif
