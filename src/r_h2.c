/* .Call glue for H2 covariance matrices (src/h2/): checks the arguments,
 * calls the engine (h2_matrix.h owns the matrix and its storage policy) and
 * wraps the results; an h2matrix is an external pointer freed by its
 * finalizer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "r_util.h"
#include "r_h2.h"
#include "r_reduce.h"
#include "h2/h2_matrix.h"
#include "h2/h2_otf.h"
#include "device/gk_device.h"

static void h2_finalize(SEXP ptr)
{
  h2_matrix_free((h2_matrix *) R_ExternalPtrAddr(ptr));
  R_ClearExternalPtr(ptr);
}

static h2_matrix *handle_of(SEXP ptr)
{
  return (h2_matrix *) gk_extptr_address(
      ptr, GK_TAG_H2MATRIX, "h2matrix",
      "this h2matrix is no longer valid (was it saved and reloaded?): build it again with "
      "h2_matrix()");
}

/* The matrix behind ptr for operations on a matrix held whole (one backend),
 * else an error that names `what`. */
static h2_matrix *whole_of(SEXP ptr, const char *what)
{
  h2_matrix *h = handle_of(ptr);
  if (h->n_parts > 0)
    gk_stop("%s is not available for an h2matrix split over several GPUs: build it with "
            "`devices` naming one GPU", what);
  return h;
}

void gk_r_h2_parts(SEXP ptr, const h2_tree **tree, h2_gpu **gpu)
{
  h2_matrix *h = whole_of(ptr, "this model");
  *tree = &h->tree;
  *gpu = h->gpu;
}

static void tree_finalize(SEXP ptr)
{
  h2_tree *t = (h2_tree *) R_ExternalPtrAddr(ptr);
  if (t) {
    h2_tree_free(t);
    free(t);
  }
  R_ClearExternalPtr(ptr);
}

/* The cluster tree and block lists of the points at eta (h2.h), without
 * matrix data, for h2_matrix(tol = )'s search: the builds of every order
 * copy it (gk_r_h2_build's `tree`). Freed by gk_r_h2_tree_free or its
 * finalizer. */
SEXP gk_r_h2_tree(SEXP locs, SEXP spec, SEXP leaf_size, SEXP eta, SEXP threads)
{
  int n = Rf_nrows(locs), dim = Rf_ncols(locs);
  if (dim < 2 || dim > 3) gk_stop("an h2matrix needs points in 2 or 3 dimensions, not %d", dim);
  gk_kernel kernel = gk_kernel_from_r(spec);
  double *xs = gk_scaled_points(locs, R_NilValue, spec, NULL);
  SEXP ptr = PROTECT(gk_extptr_new(GK_TAG_H2TREE, tree_finalize));
  gk_error err;
  gk_error_clear(&err);
  h2_tree *t = (h2_tree *) calloc(1, sizeof *t);
  if (!t) gk_fail(&err, GK_ERR_NOMEM, "out of host memory for the H2 tree");
  // any order: the copies take theirs (h2_tree_for_order)
  else if (h2_tree_build(t, xs, n, dim, gk_as_int(leaf_size), 1, gk_as_double(eta), &kernel, 0.0,
                         gk_as_int(threads), &err)) {
    free(t);
    t = NULL;
  }
  if (!t) {
    UNPROTECT(1);
    gk_raise(&err);
  }
  R_SetExternalPtrAddr(ptr, t);
  UNPROTECT(1);
  return ptr;
}

SEXP gk_r_h2_tree_free(SEXP ptr)
{
  if (gk_extptr_is(ptr, GK_TAG_H2TREE)) tree_finalize(ptr);
  return R_NilValue;
}

/* Equal, or both NaN (a parameter the family has not). */
static int same_number(double a, double b)
{
  return a == b || (isnan(a) && isnan(b));
}

/* The tree in `tree` if it was built for these points' size, leaf_size, eta
 * and kernel, else an error. The points themselves and the kernel's range
 * (the tree holds them only as scaled points) are the caller's to keep the
 * same: the search passes its own. */
static const h2_tree *tree_for(SEXP tree, int n, int dim, int leaf_size, double eta,
                               const gk_kernel *k)
{
  const h2_tree *t = (const h2_tree *) gk_extptr_address(tree, GK_TAG_H2TREE, "H2 tree",
                                                         "internal: the H2 tree was freed");
  const gk_kernel *tk = &t->kernel;
  int same_kernel = tk->family == k->family && same_number(tk->variance, k->variance) &&
                    same_number(tk->smoothness, k->smoothness) &&
                    tk->matern_twice_nu == k->matern_twice_nu &&
                    same_number(tk->matern_log_norm, k->matern_log_norm) &&
                    same_number(tk->sphere_radius, k->sphere_radius);
  if (t->n != n || t->dim != dim || t->leaf_size != leaf_size || t->eta != eta || !same_kernel)
    gk_stop("internal: the H2 tree was built for other points or settings");
  return t;
}

/* devices: NULL, or two or more 0-based GPUs to split a stored matrix over
 * (h2_matrix_build_split; backend "gpu", no `tree`). */
SEXP gk_r_h2_build(SEXP locs, SEXP spec, SEXP nugget, SEXP leaf_size, SEXP order, SEXP eta,
                   SEXP single, SEXP backend, SEXP storage, SEXP threads, SEXP tree,
                   SEXP devices)
{
  int n = Rf_nrows(locs), dim = Rf_ncols(locs);
  if (dim < 2 || dim > 3) gk_stop("an h2matrix needs points in 2 or 3 dimensions, not %d", dim);
  int storage_code = gk_as_int(storage);   // 0 stored, 1 on the fly, 2 auto, 3 if it fits
  if (storage_code < H2_STORE_BLOCKS || storage_code > H2_STORE_IF_FITS)
    gk_stop("internal: bad H2 storage %d", storage_code);
  gk_kernel kernel = gk_kernel_from_r(spec);
  // with a tree, the points are in it already
  const h2_tree *from = Rf_isNull(tree) ? NULL : tree_for(tree, n, dim, gk_as_int(leaf_size),
                                                          gk_as_double(eta), &kernel);
  double *xs = from ? NULL : gk_scaled_points(locs, R_NilValue, spec, NULL);

  // The external pointer exists (with its finalizer) before anything native
  // does, so that no R allocation failure can leak what is built.
  SEXP ptr = PROTECT(gk_extptr_new(GK_TAG_H2MATRIX, h2_finalize));
  gk_error err;
  gk_error_clear(&err);
  h2_matrix *h = NULL;
  int n_devices = Rf_isNull(devices) ? 0 : Rf_length(devices);
  if (n_devices > 1) {
    if (!Rf_isInteger(devices) || from || storage_code != H2_STORE_BLOCKS ||
        !gk_backend_is_gpu(backend))
      gk_stop("internal: a split H2 matrix is stored, on GPUs, built from its points");
    if (h2_matrix_build_split(xs, n, dim, gk_as_int(leaf_size), gk_as_int(order),
                              gk_as_double(eta), &kernel, gk_as_double(nugget),
                              gk_as_flag(single), INTEGER(devices), n_devices, gk_as_int(threads),
                              gk_r_make_room, &h, &err)) {
      UNPROTECT(1);
      gk_raise(&err);
    }
  } else if (h2_matrix_build(xs, n, dim, gk_as_int(leaf_size), gk_as_int(order), gk_as_double(eta),
                      &kernel, gk_as_double(nugget), gk_as_flag(single),
                      gk_backend_is_gpu(backend), (h2_storage_request) storage_code,
                      gk_as_int(threads), gk_r_make_room, from, &h, &err)) {
    UNPROTECT(1);
    gk_raise(&err);
  }
  R_SetExternalPtrAddr(ptr, h);
  R_CheckUserInterrupt();   // a Ctrl-C after the last check; h is owned by ptr now
  UNPROTECT(1);
  return ptr;
}

/* Frees the native data now (gk_free()); the R object rebuilds it when used again. */
SEXP gk_r_h2_free(SEXP ptr)
{
  if (gk_extptr_is(ptr, GK_TAG_H2MATRIX)) h2_finalize(ptr);
  return R_NilValue;
}

static void check_finite(SEXP x)
{
  // here rather than in R: anyNA() and is.infinite() on a 1e6 x 50 block make
  // a fresh logical copy each; gk_all_finite makes none and reads in parallel
  if (!gk_all_finite(REAL(x), Rf_xlength(x)))
    gk_stop("x contains NA, NaN or infinite values");
}

/* Rows `rows` (1-based; NULL: all) of A [blocks[[1]] blocks[[2]] ...] for a
 * list of double matrices with n rows, which are not bound into one copy
 * (h2_gpu_matmul_rows; a CPU matrix multiplies whole). On the GPU a block may
 * be a device matrix (gk_r_rhs_block), copied on the device. */
SEXP gk_r_h2_matmul_rows(SEXP ptr, SEXP blocks, SEXP rows)
{
  h2_matrix *h = whole_of(ptr, "this product");
  if (TYPEOF(blocks) != VECSXP || !(Rf_isNull(rows) || Rf_isInteger(rows)))
    gk_stop("internal: bad row product");
  int all = Rf_isNull(rows), n = h->tree.n;
  int nblocks = Rf_length(blocks), nrows = all ? n : Rf_length(rows), nrhs = 0;
  if (nblocks > 64) gk_stop("internal: at most 64 blocks");
  const double *x[64];
  int cols[64];
  for (int b = 0; b < nblocks; b++) {
    SEXP v = VECTOR_ELT(blocks, b);
    x[b] = gk_r_rhs_block(v, n, &cols[b]);
    if (TYPEOF(v) == EXTPTRSXP) {
      // on the GPU already (made finite by the package, as the GP probes are)
      if (!h->gpu) gk_stop("internal: a device block for an h2matrix on the CPU");
    } else {
      check_finite(v);
    }
    nrhs += cols[b];
  }
  int *r0 = (int *) R_alloc((size_t) nrows + 1, sizeof(int));
  for (int r = 0; r < nrows; r++) {
    int r1 = all ? r + 1 : INTEGER(rows)[r];
    if (r1 < 1 || r1 > n) gk_stop("internal: row %d out of range", r1);
    r0[r] = r1 - 1;
  }
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, nrows, nrhs));
  gk_error err;
  gk_error_clear(&err);
  if (h->gpu) {
    h2_gpu_matmul_rows(&h->tree, h->gpu, nblocks, x, cols, r0, nrows, REAL(out), &err);
    h2_matrix_recount(h);
  } else if (nrhs > 0) {
    double *whole_x = (double *) R_alloc((size_t) n * nrhs + 1, sizeof(double));
    double *whole_y = (double *) R_alloc((size_t) n * nrhs + 1, sizeof(double));
    for (int b = 0, at = 0; b < nblocks; at += cols[b], b++)
      memcpy(whole_x + (size_t) n * at, x[b], (size_t) n * cols[b] * sizeof(double));
    if (h2_cpu_matmul(&h->tree, h->cpu, whole_x, nrhs, whole_y, &err) == GK_OK)
      for (int c = 0; c < nrhs; c++)
        for (int r = 0; r < nrows; r++)
          REAL(out)[r + (size_t) nrows * c] = whole_y[r0[r] + (size_t) n * c];
  }
  UNPROTECT(1);
  if (err.status) gk_raise(&err);
  return out;
}

SEXP gk_r_h2_matmul(SEXP ptr, SEXP x)
{
  h2_matrix *h = handle_of(ptr);
  /* a plain vector is one column: taken as it is, without the copy that
   * matrix(x, ncol = 1) would make */
  if (TYPEOF(x) != REALSXP) gk_stop("x must be a double vector or matrix");
  int is_matrix = Rf_isMatrix(x);
  int n = is_matrix ? Rf_nrows(x) : Rf_length(x), nrhs = is_matrix ? Rf_ncols(x) : 1;
  if (n != h->tree.n) gk_stop("non-conformable: the h2matrix has %d columns, x has %d rows",
                               h->tree.n, n);
  // on GPUs the input's permutation checks it (h2_gpu_matmul,
  // h2_matrix_matmul_split), with no pass over x here
  if (!h->gpu && h->n_parts == 0) check_finite(x);
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, n, nrhs));
  gk_error err;
  gk_error_clear(&err);
  if (nrhs > 0) {
    if (h->n_parts > 0) h2_matrix_matmul_split(h, REAL(x), nrhs, REAL(out), &err);
    else if (h->gpu) h2_gpu_matmul(&h->tree, h->gpu, REAL(x), nrhs, REAL(out), &err);
    else h2_cpu_matmul(&h->tree, h->cpu, REAL(x), nrhs, REAL(out), &err);
    h2_matrix_recount(h);
  }
  UNPROTECT(1);
  if (err.status) gk_raise(&err);
  return out;
}

/* Median device time (ms) of the HMV with resident vectors (benchmarks); of
 * a split matrix, each part's. */
SEXP gk_r_h2_time(SEXP ptr, SEXP nrhs, SEXP reps, SEXP cublas_only)
{
  h2_matrix *h = handle_of(ptr);
  gk_error err;
  gk_error_clear(&err);
  double ms = NA_REAL;
  if (h->n_parts > 0) {   // each part's, one after the other: a vector
    SEXP out = PROTECT(Rf_allocVector(REALSXP, h->n_parts));
    int previous = gk_device_in_use();
    for (int p = 0; p < h->n_parts && err.status == GK_OK; p++) {
      h2_matrix *part = h->parts[p];
      REAL(out)[p] = NA_REAL;
      h2_gpu_time_hmv(&part->tree, part->gpu, gk_as_int(nrhs), gk_as_int(reps),
                      gk_as_flag(cublas_only), &REAL(out)[p], &err);
      h2_matrix_recount(part);
    }
    gk_error ignored;
    if (previous >= 0) gk_device_enter(previous, &ignored);
    UNPROTECT(1);
    if (err.status) gk_raise(&err);
    return out;
  }
  if (!h->gpu) gk_fail(&err, GK_ERR_INPUT, "device timing needs an h2matrix built on the GPU");
  else h2_gpu_time_hmv(&h->tree, h->gpu, gk_as_int(nrhs), gk_as_int(reps),
                       gk_as_flag(cublas_only), &ms, &err);
  h2_matrix_recount(h);
  if (err.status) gk_raise(&err);
  return Rf_ScalarReal(ms);
}

/* The engine's NaN (not known) as R's NA. */
static double known(double x)
{
  return ISNAN(x) ? NA_REAL : x;
}

/* list() of an h2matrix's structure, form and figures. */
SEXP gk_r_h2_info(SEXP ptr)
{
  h2_matrix *h = handle_of(ptr);
  const h2_tree *t = &h->tree;
  const char *names[] = {"n", "dim", "levels", "leaf_size", "order", "rank", "eta",
                         "coupling_blocks", "dense_blocks", "basis_entries",
                         "transfer_entries", "transfer_entries_read", "coupling_entries",
                         "dense_entries",
                         "bytes_per_entry", "build_seconds", "tree_seconds", "top_level", "gpu",
                         "nodes",
                         "max_dense_per_row", "on_the_fly", "couplings_on_the_fly",
                         "storage_reason", "ms_stored",
                         "ms_on_the_fly", "kernel_pairs", "on_the_fly_bytes",
                         "level_coupling_blocks", "parts", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  int e = 0;
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->n));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->dim));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->depth + 1));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->leaf_size));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->order));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->rank));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal(t->eta));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal((double) t->coupling_offset[t->depth + 1]));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal((double) t->dense.n_blocks));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal((double) h2_basis_entries(t)));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal((double) h2_transfer_entries(t)));
  // Only the transfers below the top coupling level are ever read.
  double transfers = t->top_level < t->depth
    ? (double) (t->transfer_ptr[t->depth + 1] - t->transfer_ptr[t->top_level + 1]) : 0.0;
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal(transfers));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal((double) h2_coupling_entries(t)));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal((double) h2_dense_entries(t)));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(h->single ? 4 : 8));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal(h->build_seconds));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal(h->tree_seconds));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->top_level));
  SET_VECTOR_ELT(out, e++, Rf_ScalarLogical(h->gpu != NULL || h->n_parts > 0));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->n_nodes));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->dense.n_slots));
  // on_the_fly: the dense blocks (both on-the-fly forms); the couplings too in one
  SET_VECTOR_ELT(out, e++, Rf_ScalarLogical(h->form != H2_FORM_STORED));
  SET_VECTOR_ELT(out, e++, Rf_ScalarLogical(h->form == H2_FORM_ON_THE_FLY));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(h->storage_reason));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal(known(h->ms_stored)));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal(known(h->ms_otf)));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal(known(h->kernel_pairs)));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal((double) h->otf_bytes));
  SEXP per_level = Rf_allocVector(INTSXP, t->depth + 1);
  SET_VECTOR_ELT(out, e++, per_level);
  for (int l = 0; l <= t->depth; l++) INTEGER(per_level)[l] = t->coupling[l].n_blocks;
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(h->n_parts > 0 ? h->n_parts : 1));
  UNPROTECT(1);
  return out;
}

/* ---- orthogonalization and compression (src/h2/h2_compress.h) ---------- */

/* A new h2matrix from A: orthogonalized when tol is NA, else compressed to
 * tol, on A's backend unless on_gpu is FALSE (h2_matrix_compress).
 * Returns list(ptr, stats). */
SEXP gk_r_h2_compress(SEXP ptr, SEXP tol, SEXP threads, SEXP on_gpu)
{
  h2_matrix *h = whole_of(ptr, "compression"), *nh = NULL;
  double tolerance = gk_as_double(tol);
  gk_error err;
  gk_error_clear(&err);
  h2_compress_stats st;
  SEXP res = PROTECT(Rf_allocVector(VECSXP, 2));
  SEXP np = PROTECT(gk_extptr_new(GK_TAG_H2MATRIX, h2_finalize));
  SET_VECTOR_ELT(res, 0, np);
  if (h2_matrix_compress(h, ISNA(tolerance), tolerance, gk_as_int(threads), gk_as_flag(on_gpu),
                         gk_r_make_room, &nh, &st, &err)) {
    UNPROTECT(2);
    gk_raise(&err);
  }
  R_SetExternalPtrAddr(np, nh);
  const char *names[] = {"norm_frobenius", "error_frobenius", "seconds_orthogonalize",
                         "seconds_generate", "seconds_truncate", "seconds_project", "flops",
                         "seconds", "seconds_generate_qr", ""};
  SEXP s = PROTECT(Rf_mkNamed(VECSXP, names));
  SET_VECTOR_ELT(s, 0, Rf_ScalarReal(st.norm_frobenius));
  SET_VECTOR_ELT(s, 1, Rf_ScalarReal(ISNA(tolerance) ? 0.0 : st.error_frobenius));
  SET_VECTOR_ELT(s, 2, Rf_ScalarReal(st.seconds_orthogonalize));
  SET_VECTOR_ELT(s, 3, Rf_ScalarReal(st.seconds_generate));
  SET_VECTOR_ELT(s, 4, Rf_ScalarReal(st.seconds_truncate));
  SET_VECTOR_ELT(s, 5, Rf_ScalarReal(st.seconds_project));
  SET_VECTOR_ELT(s, 6, Rf_ScalarReal(st.flops));
  SET_VECTOR_ELT(s, 7, Rf_ScalarReal(nh->build_seconds));
  // NA where the QRs were not timed apart (the host path, orthogonalization only)
  SET_VECTOR_ELT(s, 8, Rf_ScalarReal(st.seconds_generate_qr > 0 ? st.seconds_generate_qr : NA_REAL));
  SET_VECTOR_ELT(res, 1, s);
  UNPROTECT(3);
  return res;
}

/* The rank of each level's bases (root first). */
SEXP gk_r_h2_ranks(SEXP ptr)
{
  h2_matrix *h = handle_of(ptr);
  SEXP out = PROTECT(Rf_allocVector(INTSXP, h->tree.depth + 1));
  for (int l = 0; l <= h->tree.depth; l++) INTEGER(out)[l] = h->tree.level_rank[l];
  UNPROTECT(1);
  return out;
}

/* ||Q^T Q - I||_max over the leaf bases and over sum_c E_c^T E_c - I of every
 * used inner node: how orthonormal the basis tree is (tests). */
SEXP gk_r_h2_orthogonality(SEXP ptr)
{
  h2_matrix *h = whole_of(ptr, "this check");
  const h2_tree *t = &h->tree;
  gk_error err;
  gk_error_clear(&err);
  h2_host_data d = {0};
  h2_matrix_export(h, &d, 1, &err);
  if (err.status) gk_raise(&err);
  double worst = 0.0;
  int q = t->depth, m = t->leaf_size;
  if (t->top_level <= q) {
    int kq = t->level_rank[q];
    for (int i = 0; i < t->n_leaves; i++) {
      const double *u = d.U + (size_t) i * m * kq;
      for (int a = 0; a < kq; a++)
        for (int b = 0; b < kq; b++) {
          double s = 0.0;
          for (int r = 0; r < m; r++) s += u[r + (size_t) a * m] * u[r + (size_t) b * m];
          worst = fmax(worst, fabs(s - (a == b)));
        }
    }
    for (int l = t->top_level; l < q; l++) {
      int kc = t->level_rank[l + 1], kp = t->level_rank[l];
      for (int i = 0; i < (1 << l); i++)
        for (int a = 0; a < kp; a++)
          for (int b = 0; b < kp; b++) {
            double s = 0.0;
            for (int c = 0; c < 2; c++) {
              const double *e = d.E + t->transfer_ptr[l + 1] + (size_t) (2 * i + c) * kc * kp;
              for (int r = 0; r < kc; r++) s += e[r + (size_t) a * kc] * e[r + (size_t) b * kc];
            }
            worst = fmax(worst, fabs(s - (a == b)));
          }
    }
  }
  h2_host_data_free(&d);
  return Rf_ScalarReal(worst);
}

/* The GPU's batched SVD of the H2 truncation on the matrices of w (an array
 * rows x cols x nodes), for tests: list(d = min(rows, cols) x nodes singular
 * values, u = rows x min(rows, cols) x nodes left singular vectors). */
SEXP gk_r_h2_svd_gpu(SEXP w, SEXP dims, SEXP single)
{
  int rows = INTEGER(dims)[0], cols = INTEGER(dims)[1], nodes = INTEGER(dims)[2];
  int km = rows < cols ? rows : cols;
  if ((double) rows * cols * nodes != (double) XLENGTH(w)) Rf_error("w does not match dims");
  SEXP d = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) km * nodes));
  SEXP u = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) rows * km * nodes));
  gk_error err;
  gk_error_clear(&err);
  h2_svd_left_gpu_host(nodes, rows, cols, REAL(w), Rf_asLogical(single), REAL(d), REAL(u), &err);
  if (err.status) gk_raise(&err);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2)), names = PROTECT(Rf_allocVector(STRSXP, 2));
  SET_VECTOR_ELT(out, 0, d);
  SET_VECTOR_ELT(out, 1, u);
  SET_STRING_ELT(names, 0, Rf_mkChar("d"));
  SET_STRING_ELT(names, 1, Rf_mkChar("u"));
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(4);
  return out;
}
