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
#include "device/gk_device.h"
#include "device/gk_resident.h"
#include "gpukernels/gk_kernel.h"
#include "reduce/reduce.h"
#include "gp/gp_small.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keeps, for rows first_row .. first_row + rows - 1 of the ordered points, the
 * first m candidates (rows x kc, 1-based, nearest first) that come before the
 * row, writing the row's line of nbr (n x m; 0 pads). Row r of cand is row
 * first_row + row_of[r] - 1 (row_of NULL: r), and candidate c stands for the
 * point id[c - 1] (id NULL: c): the neighbour search works on points sorted
 * by grid cell and hands its result over as it is, without reordering it in
 * R. Rows r with skip[r] set are left alone. Returns the number of candidates
 * at distance 0 that come before their row (duplicated locations). */
int gp_keep_preceding(const int *cand, const double *dist, int rows, int kc, int first_row,
                      int n, int m, const int *row_of, const int *id, const int *skip,
                      int threads, int *nbr);

/* Which rows gp_vecchia_rows() computes, and what it writes for each. With
 * NULL: every row, in GP_ROWS_FACTOR form, every point noisy. */
enum { GP_ROWS_FACTOR = 0, GP_ROWS_CONDITIONAL = 1 };
typedef struct {
  int first;   /* rows first .. n - 1 (0-based); nbr and out hold n - first rows */
  int noisy;   /* Sigma = K + nugget I on the points before `noisy`, K after:
                  observations first, then the latent values at new points     */
  int form;    /* GP_ROWS_FACTOR: the row of G (coef); GP_ROWS_CONDITIONAL: the
                  conditional variance d_i in column 0 (clamped at 0: no failure
                  on a point that is one of its neighbours) and b in columns
                  1 .. m (kriging variances and weights, Vecchia simulation)    */
} gp_rows_options;

/* Builds coef (or the conditionals, see gp_rows_options). xs: n x dim scaled
 * locations (column-major), cov the covariance (gp_small.h: a kernel on xs,
 * or a formula on its own points). dcov (may be NULL) is a derivative D.
 * In the factor form stats[0] = sum log d_i (= log det of the Vecchia
 * covariance), stats[1] = trace(G G'), stats[2] = trace(G D G'); 0 in the
 * conditional form. out NULL (the factor form only): the statistics alone,
 * for callers that want a derivative's trace and not its factor. */
gk_status gp_vecchia_rows(const double *xs, int n, int dim, const int *nbr, int m,
                          const gp_cov *cov, const gp_cov *dcov, double nugget,
                          const gp_rows_options *rows, int threads, double *out, double *stats,
                          gk_error *err);

/* The error of a row whose small system is singular (%d: the row, 1-based),
 * the same from both backends. */
#define GP_SINGULAR_MESSAGE                                                     \
  "the covariance matrix is numerically singular near location %d (in the "    \
  "internal order): duplicated or nearly duplicated locations need a larger "  \
  "nugget"

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

/* ---- the solver on the GPU (gp_cuda.cu; gp_nocuda.c in a CPU-only build) ----
 *
 * Block conjugate gradients on A = G Sigma G' with every vector kept on the GPU
 * (at n = 1e6 and 50 probes a block is 400 MB: copies through the host would
 * cost more than the products). The same iteration as gp_block_cg() in R:
 * each column stops when its residual falls to tol times its start; a step
 * with p'Ap <= 0 (Sigma is not positive definite: an H2 matrix less accurate
 * than the nugget) is remembered, and the columns still running then get 5
 * times the iterations done so far plus 50 before the solver gives up. */

/* Sigma x for n x nrhs column-major doubles on the solver's GPU (x and y do
 * not overlap). Returns with its work finished. The operator may want its
 * vectors' rows in an order of its own (an H2 matrix: its tree's, where near
 * points are near in memory); the solver then keeps every vector, and G, in
 * that order, which also makes G's gathers local. */
typedef struct {
  gk_status (*apply)(void *ctx, const double *x, int nrhs, double *y, gk_error *err);
  void *ctx;
  int device;          /* the GPU (0-based) that holds the operator's data        */
  const int *order;    /* host, n: the point (0-based) at each row of the vectors
                          apply() takes and gives; NULL: the points' order         */
} gp_gpu_operator;

typedef struct {
  double *x;            /* n x k (host): the solutions, or NULL: not wanted    */
  double *gt_x;         /* n x gt_x_cols (host): the first gt_x_cols columns of
                           G' x (what callers use: Sigma^-1 G' b, nearly), or
                           NULL                                                 */
  int gt_x_cols;        /* columns of gt_x (k: all)                             */
  const int *rows;      /* nrows rows (0-based) of G' x wanted for every column,
                           into gt_x_rows (nrows x k), or NULL: at n = 1e6 the
                           probes' columns are 0.4 GB that a value-only caller
                           reads at a thousand rows                             */
  int nrows;
  double *gt_x_rows;
  double *gt_b;         /* n x k (host): G' b, or NULL                          */
  int *iterations;      /* k: iterations each column ran                       */
  double *alpha, *beta; /* maxit x k (host): CG coefficients, NaN where a column
                           did not run (they give the Lanczos matrices)         */
  int converged;        /* 1: every column reached tol                          */
  int indefinite_at;    /* first iteration with p'Ap <= 0 (0: none)             */
  int gave_up;          /* 1: stopped early on an operator that is not positive
                           definite (indefinite_at says when it was seen)       */
} gp_cg_result;

/* The Vecchia factor kept on the GPU that made it (gp_gpu_vecchia_rows with
 * `keep`): its neighbours and coefficients stay there for the solver, and the
 * coefficients come down only when the host asks (gp_gpu_factor_download):
 * at n = 1e6 and 60 neighbours they are 0.5 GB, and the neighbours 0.24 GB. */
typedef struct {
  gk_resident res;   /* first: the GPU that holds it                         */
  int n, m;
  size_t nonzeros;   /* non-zero neighbour slots (gp_vecchia_nonzeros)       */
  gk_device_buffer nbr, coef;   /* n x m ints (1-based, 0: none), n x (m + 1) */
} gp_gpu_factor;

gk_status gp_gpu_factor_download(const gp_gpu_factor *f, double *coef, gk_error *err);
void gp_gpu_factor_free(gp_gpu_factor *f);   /* its GPU memory, not the struct */

/* Solves G Sigma G' x = b for the k columns of b = [b_1 ... b_nblocks] (host
 * or device blocks of n x b_cols[i], side by side: callers need not bind them
 * into one copy, nor upload again probes kept on the GPU); column c stops at
 * the relative residual tol[c]; nbr and coef as for gp_vecchia_apply, or
 * `fac` (then nbr and coef are not read): G on the device already. The first
 * g_blocks blocks are multiplied by G on the device before solving (callers
 * solve for G b). The result's arrays are the caller's. Interrupts are
 * checked between iterations. */
gk_status gp_gpu_block_cg(const gp_gpu_operator *op, int n, int m, const int *nbr,
                          const double *coef, const gp_gpu_factor *fac, int nblocks,
                          const double *const *b, const int *b_cols, int g_blocks,
                          const double *tol, int maxit, gp_cg_result *res, gk_error *err);

/* out[c] = sum_i a[i, ca[c]] b[i, cb[c]] for c < k (0-based columns of the
 * n-row blocks a and b): the probe sums of the gradient without R's n x k
 * temporaries. */
void gp_col_dots(size_t n, int k, const double *a, const int *ca, const double *b,
                 const int *cb, int threads, double *out);

/* out[e] = +1 or -1 from bit e % 16 of bits[e / 16], for e < total: the
 * probes' signs, drawn as 16 bits per uniform by the caller (R's stream is
 * serial) and spread on all threads (a 1e6 x 50 block is 400 MB to write). */
void gp_signs_from_bits(const unsigned short *bits, size_t total, int threads, double *out);

/* Sigma = K + nugget I through the tiled reductions (reduce.h): K x as a sum
 * reduction over `points` (a device operand: its GPU is the solver's) with
 * the weights and the result on the device. Fill `spec` (kernel, range) and
 * `points`, then pass gp_tiled_sigma_apply and the struct as the operator. */
typedef struct {
  gk_reduce_spec spec;
  gk_reduce_operand points;
  double nugget;
} gp_tiled_sigma;

gk_status gp_tiled_sigma_apply(void *ctx, const double *x, int nrhs, double *y, gk_error *err);

/* The count of non-zero neighbour slots of nbr (n x m). */
size_t gp_vecchia_nonzeros(int n, int m, const int *nbr);

/* gp_vecchia_rows() on the GPU (gp_factor_cuda.cu; gp_nocuda.c in a CPU-only
 * build): the same contract, host inputs and outputs, on the active device,
 * one warp per row; m at most 64. The statistics agree with the CPU's to
 * rounding (they are summed in another order). With `keep` (zeroed; the
 * factor form of every row only) the neighbours and coefficients stay on the
 * GPU there and `out` is not written; where they do not fit, keep->coef.ptr
 * stays NULL and `out` is written as without. With neither `keep` nor `out`
 * (the factor form only) the statistics alone: the coefficients are neither
 * kept nor brought down, and the neighbours go up a chunk at a time. */
gk_status gp_gpu_vecchia_rows(const double *xs, int n, int dim, const int *nbr, int m,
                              const gk_kernel *kernel, const gk_kernel *dkernel, double nugget,
                              const gp_rows_options *rows, double *out, double *stats,
                              gp_gpu_factor *keep, gk_error *err);

/* ---- the exact likelihood on the GPU (gp_dense_cuda.cu; gp_nocuda.c in a
 * CPU-only build) ----
 *
 * Sigma = K + nugget I over the scaled points xs (n x dim) is formed, factored
 * (cuSOLVER's Cholesky) and kept on the active device; n x n data never comes
 * back. n is at most GP_DENSE_GPU_MAX: cuSOLVER's 32-bit interface indexes
 * the n^2 entries with int. */
#define GP_DENSE_GPU_MAX 46340

/* The error when Sigma's Cholesky factorization fails, the same from R's
 * chol() on the CPU. */
#define GP_NOT_POSITIVE_DEFINITE_MESSAGE                                      \
  "the covariance matrix is not positive definite (duplicated or nearly "     \
  "duplicated locations need a larger nugget)"

/* A derivative of Sigma: sum_k weights[k] * (kernels[k] over xs) + identity * I.
 * The kernels take the points as scaled for Sigma's kernel, or, where
 * points[k] is not NULL, as scaled for their own range (n x dim, the same
 * layout): the central difference in a group of ranges. */
typedef struct {
  int nkernels;
  const gk_kernel *kernels;
  const double *weights;
  const double *const *points;   /* nkernels, or NULL: all on Sigma's points */
  double identity;
  const gk_formula *formulas;    /* or NULL: nkernels formulas in place of the
                                  * kernels (on the points as given; GPU only) */
} gp_dense_term;

/* The points term kernel k is evaluated on: its own, or Sigma's xs. */
static inline const double *gp_term_points(const gp_dense_term *t, int k, const double *xs)
{
  return t->points && t->points[k] ? t->points[k] : xs;
}

typedef struct {
  double logdet;   /* log det Sigma                                              */
  double *solved;  /* n x q (host): Sigma^-1 rhs                                  */
  double *trace;   /* nterms: tr(Sigma^-1 D_t)                                    */
  double *quad;    /* q x q x nterms: (Sigma^-1 rhs)' D_t (Sigma^-1 rhs)          */
  double *info;    /* nterms x nterms: tr(Sigma^-1 D_s Sigma^-1 D_t), when asked */
} gp_dense_result;

/* The pieces of the log-likelihood, its gradient and (want_info) the Fisher
 * information for the right-hand sides rhs (n x q, host: [y X]) and nterms
 * derivatives. With kernel NULL, Sigma is formula + nugget I on the points xs
 * as given (a covariance formula, compiled for the GPU), and the terms give
 * formulas too. Fails with GP_NOT_POSITIVE_DEFINITE_MESSAGE (GK_ERR_INPUT)
 * when Sigma is not numerically positive definite, and with GK_ERR_NOMEM
 * naming the other methods when the n x n matrices do not fit. */
gk_status gp_gpu_dense(const double *xs, int n, int dim, const gk_kernel *kernel,
                       const gk_formula *formula, double nugget, const double *rhs, int q,
                       int nterms, const gp_dense_term *terms, int want_info,
                       gp_dense_result *res, gk_error *err);

/* Kriging variances' pieces at m new points xnew (m x dim, host, scaled as
 * xs), with C = K(xs, xnew): vq[j] = C_j' Sigma^-1 C_j, and with a design
 * matrix X (n x p, p > 0) xsc = X' Sigma^-1 C (p x m) and xsx = X' Sigma^-1 X
 * (p x p). */
gk_status gp_gpu_dense_krige(const double *xs, int n, int dim, const gk_kernel *kernel,
                             double nugget, const double *X, int p, const double *xnew, int m,
                             double *vq, double *xsc, double *xsx, gk_error *err);

/* ---- the Vecchia likelihood (gp_vecchia_lik.c, the CPU) ----
 *
 * For the points in their order with neighbours nbr (as gp_vecchia_rows),
 * Sigma = K + nugget I and the residuals r = y - X beta (n): sums[0] =
 * sum log d_i, sums[1] = sum e_i^2 / d_i (the log-likelihood is -(n log 2 pi
 * + sums[0] + sums[1]) / 2), grad[t] its derivative along the term D_t
 * (beta held: at the GLS beta the profile's gradient is the same), and with
 * want_info the Fisher information of the rows' conditionals (nterms x
 * nterms, GpGp's). Interrupts are checked between chunks of rows. */
typedef struct {
  double sums[2];
  double *grad;   /* nterms (caller's)                       */
  double *info;   /* nterms x nterms (caller's), or NULL     */
} gp_vecchia_lik;

gk_status gp_vecchia_loglik(const double *xs, int n, int dim, const int *nbr, int m,
                            const gk_kernel *kernel, double nugget, const double *r,
                            int nterms, const gp_dense_term *terms, int want_info, int threads,
                            gp_vecchia_lik *res, gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
