/* .Call glue for the Gaussian-process engine (src/gp/): the Vecchia
 * preconditioner (on the host, or kept on the GPU for the solver), its
 * products and its triangular solve, the GPU solver, the Vecchia and dense
 * likelihoods' pieces (the probes and the host CG step: r_gp_probes.c). */
#include "r_util.h"
#include "gp/gp.h"
#include "r_h2.h"
#include "r_reduce.h"
#include <string.h>

/* The locations scaled by the kernel's range (gk_scaled_points), within the
 * dimensions the GP engine takes. */
static double *scaled_points(SEXP locs, SEXP more, SEXP spec, double **more_scaled)
{
  if (Rf_ncols(locs) > GK_SCALED_MAX_DIM)
    gk_stop("the GP engine supports at most %d dimensions", GK_SCALED_MAX_DIM);
  return gk_scaled_points(locs, more, spec, more_scaled);
}

#define GP_FACTOR_TAG "gk_gp_factor"

static void factor_finalize(SEXP ptr)
{
  gp_gpu_factor *f = (gp_gpu_factor *) R_ExternalPtrAddr(ptr);
  if (!f) return;
  gp_gpu_factor_free(f);
  free(f);
  R_ClearExternalPtr(ptr);
}

/* The factor kept on the GPU that `coef` holds, or NULL: coef is a matrix. */
static gp_gpu_factor *kept_factor(SEXP coef)
{
  if (TYPEOF(coef) != EXTPTRSXP) return NULL;
  return (gp_gpu_factor *) gk_extptr_address(coef, GP_FACTOR_TAG, "Vecchia factor",
                                             "internal: the Vecchia factor was freed");
}

/* kept_ok: coef may be a factor kept on the GPU (the GPU solver's). */
static void check_factor_args(SEXP nbr, SEXP coef, SEXP x, int kept_ok)
{
  gp_gpu_factor *f = kept_factor(coef);
  if (f && !kept_ok) gk_stop("internal: the Vecchia factor is on the GPU");
  if (f) {
    if (!Rf_isInteger(nbr) || f->n != Rf_nrows(nbr) || f->m != Rf_ncols(nbr))
      gk_stop("internal: the preconditioner does not match its neighbours");
    return;
  }
  if (!Rf_isInteger(nbr) || !Rf_isMatrix(nbr)) gk_stop("internal: neighbours must be an integer matrix");
  if (!Rf_isReal(coef) || Rf_nrows(coef) != Rf_nrows(nbr) || Rf_ncols(coef) != Rf_ncols(nbr) + 1)
    gk_stop("internal: the preconditioner does not match its neighbours");
  if (!Rf_isNull(x) && (!Rf_isReal(x) || Rf_nrows(x) != Rf_nrows(nbr)))
    gk_stop("internal: the preconditioner is %d x %d but x has %d rows", Rf_nrows(nbr),
             Rf_nrows(nbr), Rf_nrows(x));
}

/* An optional integer vector of `len` values in 1..most (NULL when R gave NULL). */
static const int *optional_index(SEXP v, R_xlen_t len, int most, const char *what)
{
  if (Rf_isNull(v)) return NULL;
  if (!Rf_isInteger(v) || Rf_xlength(v) != len) gk_stop("internal: bad %s", what);
  const int *p = INTEGER(v);
  for (R_xlen_t e = 0; e < len; e++)
    if (p[e] < 0 || p[e] > most) gk_stop("internal: %s out of range", what);
  return p;
}

/* The neighbour matrix of the Vecchia rows: an integer matrix of `rows` rows
 * whose entries index the n points (1-based; 0: none). */
static const int *checked_neighbors(SEXP nbr, int rows, int n)
{
  if (!Rf_isInteger(nbr) || Rf_nrows(nbr) != rows) gk_stop("internal: bad neighbour matrix");
  const int *ix = INTEGER(nbr);
  for (R_xlen_t e = 0; e < Rf_xlength(nbr); e++)
    if (ix[e] < 0 || ix[e] > n) gk_stop("internal: neighbour index out of range");
  return ix;
}

/* Fills rows first_row.. of nbr (n x m, modified in place: R allocated it for
 * this purpose and passes it by reference) from knn() candidates; row_of, id
 * and skip as in gp_keep_preceding (NULL for none). */
SEXP gk_r_gp_keep_preceding(SEXP cand, SEXP dist, SEXP first_row, SEXP nbr, SEXP row_of,
                            SEXP id, SEXP skip, SEXP threads)
{
  if (!Rf_isInteger(cand) || !Rf_isReal(dist) || !Rf_isInteger(nbr) ||
      Rf_nrows(cand) != Rf_nrows(dist) || Rf_ncols(cand) != Rf_ncols(dist))
    gk_stop("internal: bad neighbour candidates");
  int rows = Rf_nrows(cand), first = gk_as_int(first_row) - 1, n = Rf_nrows(nbr);
  if (first < 0 || first + rows > n) gk_stop("internal: neighbour rows out of range");
  const int *rows_of = optional_index(row_of, rows, n - first, "neighbour rows");
  const int *ids = optional_index(id, Rf_isNull(id) ? 0 : Rf_xlength(id), n, "neighbour ids");
  const int *skips = optional_index(skip, rows, 1, "neighbour rows to skip");
  if (ids) {
    const int *c = INTEGER(cand);
    for (R_xlen_t e = 0; e < Rf_xlength(cand); e++)
      if (c[e] > Rf_xlength(id)) gk_stop("internal: neighbour candidate out of range");
  }
  int dup = gp_keep_preceding(INTEGER(cand), REAL(dist), rows, Rf_ncols(cand), first, n,
                              Rf_ncols(nbr), rows_of, ids, skips, gk_as_int(threads),
                              INTEGER(nbr));
  return Rf_ScalarInteger(dup);
}

/* Where gk_r_gp_factor's coefficients go: "matrix" (an R matrix), "device"
 * (kept on the GPU where they fit, else a matrix) or "none" (the statistics
 * alone: a derivative's trace, its factor unused). */
enum { COEF_MATRIX, COEF_DEVICE, COEF_NONE };

static int coef_destination(SEXP coef)
{
  const char *names[] = {"matrix", "device", "none"};
  if (Rf_isString(coef) && Rf_xlength(coef) == 1)
    for (int d = 0; d < 3; d++)
      if (!strcmp(CHAR(STRING_ELT(coef, 0)), names[d])) return d;
  gk_stop("internal: bad destination of the Vecchia coefficients");
  return COEF_MATRIX;
}

/* The Vecchia factor, or with `rows` = c(first, noisy, conditional) (first
 * 1-based) the rows of gp_rows_options; nbr then holds the rows first .. n.
 * gpu: on the GPU (gp_gpu_vecchia_rows), else on the CPU. coef_to: where the
 * coefficients go (coef_destination; "matrix" for the conditionals), returned
 * as list(coef, stats) with coef a matrix, the kept factor's handle or NULL. */
SEXP gk_r_gp_factor(SEXP locs, SEXP nbr, SEXP spec, SEXP dspec, SEXP nugget, SEXP rows,
                    SEXP threads, SEXP gpu, SEXP coef_to)
{
  const int dest = coef_destination(coef_to);
  int n = Rf_nrows(locs), dim = Rf_ncols(locs), m = Rf_ncols(nbr);
  gp_rows_options opt = {0, n, GP_ROWS_FACTOR};
  if (!Rf_isNull(rows)) {
    if (!Rf_isInteger(rows) || Rf_xlength(rows) != 3) gk_stop("internal: bad Vecchia rows");
    opt.first = INTEGER(rows)[0] - 1;
    opt.noisy = INTEGER(rows)[1];
    opt.form = INTEGER(rows)[2] ? GP_ROWS_CONDITIONAL : GP_ROWS_FACTOR;
    if (opt.first < 0 || opt.first > n || opt.noisy < 0 || opt.noisy > n)
      gk_stop("internal: Vecchia rows out of range");
    if (dest != COEF_MATRIX) gk_stop("internal: the Vecchia rows come back as a matrix");
  }
  const int *ix = checked_neighbors(nbr, n - opt.first, n);
  int has_d = !Rf_isNull(dspec);
  gk_kernel kernel, dkernel;
  gk_formula formula, dformula;
  gp_cov cov = {&kernel, NULL, NULL}, dcov = {&dkernel, NULL, NULL};
  double *xs;
  if (gk_r_is_formula(spec)) {
    /* a formula (CPU only: R compiled it) sees the points as given, row-major */
    if (has_d && !gk_r_is_formula(dspec)) gk_stop("internal: a formula's derivative is a formula");
    if (!Rf_isReal(locs) || dim < 1) gk_stop("internal: bad locations");
    gk_r_formula_from(spec, dim, &formula);
    if (has_d) gk_r_formula_from(dspec, dim, &dformula);
    if (!formula.eval || (has_d && !dformula.eval))
      gk_stop("internal: the formula was not compiled for the CPU");
    xs = (double *) R_alloc((size_t) n * dim + 1, sizeof(double));
    for (int i = 0; i < n; i++)
      for (int k = 0; k < dim; k++) xs[(size_t) i * dim + k] = REAL(locs)[i + (size_t) k * n];
    cov = (gp_cov) {NULL, &formula, xs};
    dcov = (gp_cov) {NULL, &dformula, xs};
  } else {
    kernel = gk_kernel_from_r(spec);
    if (has_d) dkernel = gk_kernel_from_r(dspec);
    xs = scaled_points(locs, R_NilValue, spec, NULL);
  }
  const int on_gpu = gk_as_flag(gpu) && !cov.formula;
  const char *names[] = {"coef", "stats", ""};
  gk_error err;
  gk_error_clear(&err);
  if (on_gpu && dest == COEF_DEVICE) {
    // kept on the GPU where it fits (the handle exists first: nothing leaks)
    SEXP handle = PROTECT(gk_extptr_new(GP_FACTOR_TAG, factor_finalize));
    gp_gpu_factor *f = (gp_gpu_factor *) calloc(1, sizeof *f);
    if (!f) {
      UNPROTECT(1);
      gk_stop("out of host memory for the Vecchia factor");
    }
    R_SetExternalPtrAddr(handle, f);
    SEXP stats = PROTECT(Rf_allocVector(REALSXP, 3));
    if (gp_gpu_vecchia_rows(xs, n, dim, ix, m, &kernel, has_d ? &dkernel : NULL,
                            gk_as_double(nugget), &opt, NULL, REAL(stats), f, &err)) {
      UNPROTECT(2);
      gk_raise(&err);
    }
    if (f->coef.ptr) {
      SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
      SET_VECTOR_ELT(out, 0, handle);
      SET_VECTOR_ELT(out, 1, stats);
      UNPROTECT(3);
      return out;
    }
    UNPROTECT(2);   // it does not fit: made on the GPU and brought down
  }
  SEXP coef = PROTECT(dest == COEF_NONE ? R_NilValue
                                         : Rf_allocMatrix(REALSXP, n - opt.first, m + 1));
  double *values = dest == COEF_NONE ? NULL : REAL(coef);
  SEXP stats = PROTECT(Rf_allocVector(REALSXP, 3));
  if (on_gpu)
    gp_gpu_vecchia_rows(xs, n, dim, ix, m, &kernel, has_d ? &dkernel : NULL,
                        gk_as_double(nugget), &opt, values, REAL(stats), NULL, &err);
  else
    gp_vecchia_rows(xs, n, dim, ix, m, &cov, has_d ? &dcov : NULL, gk_as_double(nugget),
                    &opt, gk_as_int(threads), values, REAL(stats), &err);
  if (err.status) {
    UNPROTECT(2);
    gk_raise(&err);
  }
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SET_VECTOR_ELT(out, 0, coef);
  SET_VECTOR_ELT(out, 1, stats);
  UNPROTECT(3);
  return out;
}

/* The coefficients of a factor kept on the GPU, as the n x (m + 1) matrix
 * gk_r_gp_factor returns otherwise. */
SEXP gk_r_gp_factor_host(SEXP coef)
{
  gp_gpu_factor *f = kept_factor(coef);
  if (!f) gk_stop("internal: not a Vecchia factor on the GPU");
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, f->n, f->m + 1));
  gk_error err;
  gk_error_clear(&err);
  if (gp_gpu_factor_download(f, REAL(out), &err)) {
    UNPROTECT(1);
    gk_raise(&err);
  }
  UNPROTECT(1);
  return out;
}

/* Frees a factor kept on the GPU now (its users are done with it); anything
 * else is left alone. */
SEXP gk_r_gp_factor_free(SEXP coef)
{
  if (gk_extptr_is(coef, GP_FACTOR_TAG)) factor_finalize(coef);
  return R_NilValue;
}

SEXP gk_r_gp_apply(SEXP nbr, SEXP coef, SEXP x, SEXP transpose, SEXP threads)
{
  check_factor_args(nbr, coef, x, 0);
  int n = Rf_nrows(x), k = Rf_ncols(x);
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, n, k));
  gp_vecchia_apply(n, Rf_ncols(nbr), INTEGER(nbr), REAL(coef), REAL(x), k,
                   gk_as_flag(transpose), gk_as_int(threads), REAL(out));
  UNPROTECT(1);
  return out;
}

SEXP gk_r_gp_solve(SEXP nbr, SEXP coef, SEXP x, SEXP threads)
{
  check_factor_args(nbr, coef, x, 0);
  int n = Rf_nrows(x), k = Rf_ncols(x);
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, n, k));
  gp_vecchia_solve(n, Rf_ncols(nbr), INTEGER(nbr), REAL(coef), REAL(x), k,
                   gk_as_int(threads), REAL(out));
  UNPROTECT(1);
  return out;
}

/* Sigma x on the GPU through an H2 matrix (gp_gpu_operator). */
typedef struct {
  const h2_tree *tree;
  h2_gpu *gpu;
} h2_sigma;

static gk_status h2_sigma_apply(void *ctx, const double *x, int nrhs, double *y, gk_error *err)
{
  h2_sigma *a = (h2_sigma *) ctx;
  return h2_gpu_matmul_device(a->tree, a->gpu, x, nrhs, y, 1, err);   // the tree's order
}

/* Runs gp_gpu_block_cg with `op` on the right-hand sides b (a list of double
 * matrices with n rows, side by side) and returns list(x, gt_x, gt_b,
 * iterations, alpha, beta, converged, indefinite_at, gave_up, gt_x_rows).
 * coef: a matrix or a factor kept on the GPU. `want` = list(x, gt_b,
 * g_blocks, gt_x_cols, rows): x (when want$x) the solutions, gt_x = G' x (its
 * first want$gt_x_cols columns; NULL: all), gt_b = G' b (when want$gt_b,
 * else NULL), gt_x_rows the rows want$rows (1-based; NULL: none) of all of
 * G' x; the first want$g_blocks blocks of b are multiplied by G first; alpha
 * and beta are maxit x k. */
static SEXP run_solver(const gp_gpu_operator *op, SEXP nbr, SEXP coef, SEXP b, SEXP tol,
                       SEXP maxit, SEXP want)
{
  if (TYPEOF(b) != VECSXP || Rf_length(b) > 64) gk_stop("internal: bad right-hand sides");
  int nblocks = Rf_length(b), k = 0, n = Rf_nrows(nbr), iters = gk_as_int(maxit);
  const double *blocks[64];
  int cols[64];
  check_factor_args(nbr, coef, R_NilValue, 1);
  SEXP want_x = gk_list_get(want, "x"), want_gt_b = gk_list_get(want, "gt_b");
  SEXP want_cols = gk_list_get(want, "gt_x_cols"), want_rows = gk_list_get(want, "rows");
  int g_blocks = Rf_isNull(gk_list_get(want, "g_blocks")) ? 0 :
    gk_as_int(gk_list_get(want, "g_blocks"));
  if (g_blocks < 0 || g_blocks > nblocks) gk_stop("internal: bad g_blocks");
  for (int i = 0; i < nblocks; i++) {
    blocks[i] = gk_r_rhs_block(VECTOR_ELT(b, i), n, &cols[i]);   // host or device
    k += cols[i];
  }
  if (iters < 1) gk_stop("internal: maxit must be positive");
  // the relative residual per column (one value: for all of them)
  if (!Rf_isReal(tol) || (Rf_length(tol) != 1 && Rf_length(tol) != k))
    gk_stop("internal: tol must have 1 or %d values", k);
  double *col_tol = (double *) R_alloc((size_t) k + 1, sizeof(double));
  for (int c = 0; c < k; c++) col_tol[c] = REAL(tol)[Rf_length(tol) == 1 ? 0 : c];
  const char *names[] = {"x", "gt_x", "gt_b", "iterations", "alpha", "beta", "converged",
                         "indefinite_at", "gave_up", "gt_x_rows", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SEXP x = gk_as_flag(want_x) ? Rf_allocMatrix(REALSXP, n, k) : R_NilValue;
  SET_VECTOR_ELT(out, 0, x);
  int gt_x_cols = Rf_isNull(want_cols) ? k : gk_as_int(want_cols);
  if (gt_x_cols < 0 || gt_x_cols > k) gk_stop("internal: bad gt_x_cols");
  const int *rows = optional_index(want_rows, Rf_isNull(want_rows) ? 0 : Rf_xlength(want_rows),
                                   n, "solution rows");
  int nrows = rows ? (int) Rf_xlength(want_rows) : 0;
  int *rows0 = (int *) R_alloc((size_t) nrows + 1, sizeof(int));
  for (int r = 0; r < nrows; r++) {
    if (rows[r] < 1) gk_stop("internal: solution rows out of range");
    rows0[r] = rows[r] - 1;
  }
  SEXP gt_x = Rf_allocMatrix(REALSXP, n, gt_x_cols);
  SET_VECTOR_ELT(out, 1, gt_x);
  SEXP gt_x_rows = rows ? Rf_allocMatrix(REALSXP, nrows, k) : R_NilValue;
  SET_VECTOR_ELT(out, 9, gt_x_rows);
  SEXP gt_b = gk_as_flag(want_gt_b) ? Rf_allocMatrix(REALSXP, n, k) : R_NilValue;
  SET_VECTOR_ELT(out, 2, gt_b);
  SEXP iterations = Rf_allocVector(INTSXP, k);
  SET_VECTOR_ELT(out, 3, iterations);
  SEXP alpha = Rf_allocMatrix(REALSXP, iters, k);
  SET_VECTOR_ELT(out, 4, alpha);
  SEXP beta = Rf_allocMatrix(REALSXP, iters, k);
  SET_VECTOR_ELT(out, 5, beta);
  gp_cg_result res;
  memset(&res, 0, sizeof res);
  res.x = Rf_isNull(x) ? NULL : REAL(x);
  res.gt_x = gt_x_cols > 0 ? REAL(gt_x) : NULL;
  res.gt_x_cols = gt_x_cols;
  res.rows = rows ? rows0 : NULL;
  res.nrows = nrows;
  res.gt_x_rows = rows ? REAL(gt_x_rows) : NULL;
  res.gt_b = Rf_isNull(gt_b) ? NULL : REAL(gt_b);
  res.iterations = INTEGER(iterations);
  res.alpha = REAL(alpha);
  res.beta = REAL(beta);
  gp_gpu_factor *fac = kept_factor(coef);
  gk_error err;
  gk_error_clear(&err);
  gp_gpu_block_cg(op, n, Rf_ncols(nbr), INTEGER(nbr), fac ? NULL : REAL(coef), fac, nblocks,
                  blocks, cols, g_blocks, col_tol, iters, &res, &err);
  if (err.status) {
    UNPROTECT(1);
    gk_raise(&err);
  }
  SET_VECTOR_ELT(out, 6, Rf_ScalarLogical(res.converged));
  SET_VECTOR_ELT(out, 7, Rf_ScalarInteger(res.indefinite_at));
  SET_VECTOR_ELT(out, 8, Rf_ScalarLogical(res.gave_up));
  UNPROTECT(1);
  return out;
}

/* Block CG on G Sigma G' with the vectors on the GPU of the h2matrix `sigma`
 * (run_solver). */
SEXP gk_r_gp_block_cg_h2(SEXP sigma, SEXP nbr, SEXP coef, SEXP b, SEXP tol, SEXP maxit,
                         SEXP want)
{
  const h2_tree *tree;
  h2_sigma op_data;
  gk_r_h2_parts(sigma, &tree, &op_data.gpu);
  op_data.tree = tree;
  if (!op_data.gpu) gk_stop("internal: the GPU solver needs an h2matrix on the GPU");
  int n = Rf_nrows(nbr);
  if (n != tree->n) gk_stop("internal: the h2matrix has %d rows, the solver %d", tree->n, n);
  // the solver's vectors in the tree's point order (h2_sigma_apply): near
  // points near in memory, for the H2 permutations and G's gathers alike
  int *order = (int *) R_alloc((size_t) n + 1, sizeof(int));
  if (h2_tree_point_order(tree, order)) gk_stop("out of host memory for the H2 point order");
  gp_gpu_operator op = {h2_sigma_apply, &op_data, h2_gpu_device(op_data.gpu), order};
  return run_solver(&op, nbr, coef, b, tol, maxit, want);
}

/* The same with Sigma = K + nugget I through the tiled reductions, K of the
 * kernel `spec` over `points`, a device matrix (gp_tiled_sigma). */
SEXP gk_r_gp_block_cg_tiled(SEXP points, SEXP spec, SEXP nugget, SEXP nbr, SEXP coef, SEXP b,
                            SEXP tol, SEXP maxit, SEXP want)
{
  gp_tiled_sigma sigma;
  memset(&sigma, 0, sizeof sigma);
  sigma.points = gk_r_reduce_operand(points);
  if (!sigma.points.device) gk_stop("internal: the GPU solver needs the points on the GPU");
  if ((int) sigma.points.rows != Rf_nrows(nbr))
    gk_stop("internal: %d points, the solver %d", (int) sigma.points.rows, Rf_nrows(nbr));
  double *range = (double *) R_alloc(sigma.points.cols > 0 ? sigma.points.cols : 1, sizeof(double));
  gk_formula formula;
  if (gk_r_is_formula(spec)) {   // a covariance formula, as kernel_reduce() runs it
    gk_r_formula_spec(spec, sigma.points.cols, &formula, &sigma.spec, range);
  } else {
    sigma.spec.kernel = gk_kernel_from_r(spec);
    gk_kernel_range_from_r(spec, sigma.points.cols, range);
  }
  sigma.spec.range = range;
  sigma.spec.method = GK_REDUCE_AUTO;
  sigma.nugget = gk_as_double(nugget);
  gp_gpu_operator op = {gp_tiled_sigma_apply, &sigma, sigma.points.gpu, NULL};
  return run_solver(&op, nbr, coef, b, tol, maxit, want);
}

/* The derivative terms from R: a list of list(kernels = list of kernel specs,
 * weights, identity, points) (R's gp_dense_terms()). A kernel with another
 * range than `spec` (a central difference in a group of ranges) gets the
 * locations scaled by its own; one with its own points (points[[k]], an n x dim
 * matrix in the locations' order: an angle's rotated points) those, scaled
 * by its range. */
static gp_dense_term *terms_from_r(SEXP terms, SEXP locs, SEXP spec, int dim)
{
  if (TYPEOF(terms) != VECSXP) gk_stop("internal: bad derivative terms");
  int nterms = Rf_length(terms), n = Rf_nrows(locs);
  double range[64], term_range[64];
  if (dim > 64) gk_stop("internal: too many dimensions for the derivative terms");
  gk_kernel_range_from_r(spec, dim, range);
  gp_dense_term *dterms = (gp_dense_term *) R_alloc((size_t) nterms + 1, sizeof(gp_dense_term));
  for (int t = 0; t < nterms; t++) {
    SEXP term = VECTOR_ELT(terms, t);
    SEXP kernels = VECTOR_ELT(term, 0), weights = VECTOR_ELT(term, 1);
    if (TYPEOF(kernels) != VECSXP || !Rf_isReal(weights) ||
        Rf_length(weights) != Rf_length(kernels))
      gk_stop("internal: bad derivative term");
    int nk = Rf_length(kernels);
    SEXP own = Rf_length(term) > 3 ? VECTOR_ELT(term, 3) : R_NilValue;
    if (!Rf_isNull(own) && (TYPEOF(own) != VECSXP || Rf_length(own) != nk))
      gk_stop("internal: bad derivative term points");
    gk_kernel *ks = (gk_kernel *) R_alloc((size_t) nk + 1, sizeof(gk_kernel));
    const double **points = (const double **) R_alloc((size_t) nk + 1, sizeof(double *));
    for (int k = 0; k < nk; k++) {
      ks[k] = gk_kernel_from_r(VECTOR_ELT(kernels, k));
      gk_kernel_range_from_r(VECTOR_ELT(kernels, k), dim, term_range);
      points[k] = NULL;
      SEXP at = Rf_isNull(own) ? R_NilValue : VECTOR_ELT(own, k);
      if (!Rf_isNull(at)) {
        if (!Rf_isReal(at) || !Rf_isMatrix(at) || Rf_nrows(at) != n || Rf_ncols(at) != dim)
          gk_stop("internal: derivative term points must be a %d x %d double matrix", n, dim);
        points[k] = scaled_points(at, R_NilValue, VECTOR_ELT(kernels, k), NULL);
        continue;
      }
      for (int d = 0; d < dim; d++)
        if (term_range[d] != range[d]) {
          points[k] = scaled_points(locs, R_NilValue, VECTOR_ELT(kernels, k), NULL);
          break;
        }
    }
    dterms[t].nkernels = nk;
    dterms[t].kernels = ks;
    dterms[t].points = points;
    dterms[t].weights = REAL(weights);
    dterms[t].identity = gk_as_double(VECTOR_ELT(term, 2));
    dterms[t].formulas = NULL;
  }
  return dterms;
}

/* The Vecchia log-likelihood's pieces (gp_vecchia_loglik) for the ordered
 * locations, their neighbours and the residuals r: list(sums (2),
 * gradient (nterms), info (nterms x nterms or NULL)). */
SEXP gk_r_gp_vecchia_lik(SEXP locs, SEXP nbr, SEXP spec, SEXP nugget, SEXP r, SEXP terms,
                         SEXP want_info, SEXP threads)
{
  int n = Rf_nrows(locs), dim = Rf_ncols(locs), m = Rf_ncols(nbr);
  const int *ix = checked_neighbors(nbr, n, n);
  if (!Rf_isReal(r) || Rf_xlength(r) != n) gk_stop("internal: bad residuals");
  int nterms = Rf_length(terms), info = gk_as_flag(want_info);
  gk_kernel kernel = gk_kernel_from_r(spec);
  gp_dense_term *dterms = terms_from_r(terms, locs, spec, dim);
  double *xs = scaled_points(locs, R_NilValue, spec, NULL);
  const char *names[] = {"sums", "gradient", "info", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SEXP sums = gk_list_put(out, 0, Rf_allocVector(REALSXP, 2));
  SEXP grad = gk_list_put(out, 1, Rf_allocVector(REALSXP, nterms));
  SEXP fisher = gk_list_put(out, 2, info ? Rf_allocMatrix(REALSXP, nterms, nterms) : R_NilValue);
  gp_vecchia_lik res = {{0.0, 0.0}, REAL(grad), info ? REAL(fisher) : NULL};
  gk_error err;
  gk_error_clear(&err);
  gp_vecchia_loglik(xs, n, dim, ix, m, &kernel, gk_as_double(nugget), REAL(r), nterms, dterms,
                    info, gk_as_int(threads), &res, &err);
  REAL(sums)[0] = res.sums[0];
  REAL(sums)[1] = res.sums[1];
  UNPROTECT(1);
  gk_finish(&err);
  return out;
}

/* The exact likelihood's pieces on the GPU (gp_gpu_dense). terms: as
 * terms_from_r(); returns list(logdet, solved, trace, quad (q x q x nterms),
 * info (NULL unless want_info)). */
static SEXP dense_pieces(const double *xs, int n, int dim, const gk_kernel *kernel,
                         const gk_formula *formula, double nugget, SEXP rhs, int nterms,
                         const gp_dense_term *dterms, int info)
{
  int q = Rf_ncols(rhs);
  const char *names[] = {"logdet", "solved", "trace", "quad", "info", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SEXP solved = gk_list_put(out, 1, Rf_allocMatrix(REALSXP, n, q));
  SEXP trace = gk_list_put(out, 2, Rf_allocVector(REALSXP, nterms));
  SEXP quad = gk_list_put(out, 3, Rf_alloc3DArray(REALSXP, q, q, nterms));
  SEXP fisher = gk_list_put(out, 4, info ? Rf_allocMatrix(REALSXP, nterms, nterms) : R_NilValue);
  gp_dense_result res = {0.0, REAL(solved), REAL(trace), REAL(quad),
                         info ? REAL(fisher) : NULL};
  gk_error err;
  gk_error_clear(&err);
  gp_gpu_dense(xs, n, dim, kernel, formula, nugget, REAL(rhs), q, nterms, dterms, info, &res,
               &err);
  SET_VECTOR_ELT(out, 0, Rf_ScalarReal(res.logdet));
  UNPROTECT(1);
  gk_finish(&err);
  return out;
}

static void check_rhs(SEXP rhs, int n)
{
  if (!Rf_isReal(rhs) || !Rf_isMatrix(rhs) || Rf_nrows(rhs) != n)
    gk_stop("internal: bad right-hand sides");
}

SEXP gk_r_gp_dense(SEXP locs, SEXP spec, SEXP nugget, SEXP rhs, SEXP terms, SEXP want_info)
{
  int n = Rf_nrows(locs), dim = Rf_ncols(locs);
  check_rhs(rhs, n);
  gk_kernel kernel = gk_kernel_from_r(spec);
  gp_dense_term *dterms = terms_from_r(terms, locs, spec, dim);
  double *xs = scaled_points(locs, R_NilValue, spec, NULL);
  return dense_pieces(xs, n, dim, &kernel, NULL, gk_as_double(nugget), rhs, Rf_length(terms),
                      dterms, gk_as_flag(want_info));
}

/* The same for a covariance formula (prepared for the GPU, unfolded) on the
 * points as given: terms as terms_from_r()'s, their kernels formulas. */
SEXP gk_r_gp_dense_formula(SEXP locs, SEXP spec, SEXP nugget, SEXP rhs, SEXP terms,
                           SEXP want_info)
{
  int n = Rf_nrows(locs), dim = Rf_ncols(locs);
  if (!Rf_isReal(locs) || TYPEOF(terms) != VECSXP) gk_stop("internal: bad dense formula GP");
  check_rhs(rhs, n);
  gk_formula *sigma = (gk_formula *) R_alloc(1, sizeof(gk_formula));
  gk_r_formula_from(spec, dim, sigma);
  int nterms = Rf_length(terms);
  gp_dense_term *dterms = (gp_dense_term *) R_alloc((size_t) nterms + 1, sizeof(gp_dense_term));
  memset(dterms, 0, ((size_t) nterms + 1) * sizeof(gp_dense_term));
  for (int t = 0; t < nterms; t++) {
    SEXP term = VECTOR_ELT(terms, t);
    SEXP kernels = VECTOR_ELT(term, 0), weights = VECTOR_ELT(term, 1);
    if (TYPEOF(kernels) != VECSXP || !Rf_isReal(weights) || Rf_length(weights) != Rf_length(kernels))
      gk_stop("internal: bad derivative term");
    int nk = Rf_length(kernels);
    gk_formula *fs = (gk_formula *) R_alloc((size_t) nk + 1, sizeof(gk_formula));
    for (int k = 0; k < nk; k++) gk_r_formula_from(VECTOR_ELT(kernels, k), dim, &fs[k]);
    dterms[t].nkernels = nk;
    dterms[t].formulas = fs;
    dterms[t].weights = REAL(weights);
    dterms[t].identity = gk_as_double(VECTOR_ELT(term, 2));
  }
  return dense_pieces(REAL(locs), n, dim, NULL, sigma, gk_as_double(nugget), rhs, nterms, dterms,
                      gk_as_flag(want_info));
}

/* Kriging variances' pieces on the GPU (gp_gpu_dense_krige): list(vq, xsc
 * (p x m), xsx (p x p)) for the design matrix X (n x p) at the locations. */
SEXP gk_r_gp_dense_krige(SEXP locs, SEXP newlocs, SEXP spec, SEXP nugget, SEXP X)
{
  int n = Rf_nrows(locs), dim = Rf_ncols(locs), m = Rf_nrows(newlocs);
  if (!Rf_isReal(X) || !Rf_isMatrix(X) || Rf_nrows(X) != n) gk_stop("internal: bad design matrix");
  int p = Rf_ncols(X);
  gk_kernel kernel = gk_kernel_from_r(spec);
  double *xnew = NULL;
  double *xs = scaled_points(locs, newlocs, spec, &xnew);
  const char *names[] = {"vq", "xsc", "xsx", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SEXP vq = gk_list_put(out, 0, Rf_allocVector(REALSXP, m));
  SEXP xsc = gk_list_put(out, 1, Rf_allocMatrix(REALSXP, p, m));
  SEXP xsx = gk_list_put(out, 2, Rf_allocMatrix(REALSXP, p, p));
  gk_error err;
  gk_error_clear(&err);
  gp_gpu_dense_krige(xs, n, dim, &kernel, gk_as_double(nugget), REAL(X), p, xnew, m, REAL(vq),
                     REAL(xsc), REAL(xsx), &err);
  UNPROTECT(1);
  gk_finish(&err);
  return out;
}
