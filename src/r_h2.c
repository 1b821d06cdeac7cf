/* .Call glue for H2 covariance matrices (src/h2/): build an h2matrix held in
 * an external pointer (freed by its finalizer), multiply, describe, time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "r_util.h"
#include "r_h2.h"
#include "r_reduce.h"
#include "h2/h2_compress.h"
#include "h2/h2_otf.h"
#include "device/gk_device.h"
#include "device/gk_memory.h"
#include "device/gk_resident.h"

/* The forms of an h2matrix: every block stored; couplings and dense blocks
 * on the fly (h2_otf_build); dense blocks on the fly with stored couplings
 * (h2_otf_build_dense: the compression of an on-the-fly matrix). */
enum { H2_FORM_STORED = 0, H2_FORM_ON_THE_FLY = 1, H2_FORM_DENSE_ON_THE_FLY = 2 };

typedef struct {
  h2_tree tree;
  int single;
  double build_seconds, tree_seconds;
  h2_cpu *cpu;   /* exactly one of cpu / gpu is set */
  h2_gpu *gpu;
  gk_memory_hold mem;   /* the bytes registered with device/gk_memory.h */
  int on_the_fly;       /* the form (H2_FORM_*), h2_otf.h                 */
  int storage_reason;   /* why (H2_STORAGE_*)                              */
  double ms_stored, ms_otf, kernel_pairs;   /* the model's predictions    */
  size_t otf_bytes;
} h2_handle;

static void handle_free(h2_handle *h)
{
  if (!h) return;
  gk_memory_unregister(&h->mem);
  h2_cpu_free(h->cpu);
  h2_gpu_free(h->gpu);
  h2_tree_free(&h->tree);
  free(h);
}

static void h2_finalize(SEXP ptr)
{
  handle_free((h2_handle *) R_ExternalPtrAddr(ptr));
  R_ClearExternalPtr(ptr);
}

static h2_handle *handle_of(SEXP ptr)
{
  return (h2_handle *) gk_extptr_address(
      ptr, GK_TAG_H2MATRIX, "h2matrix",
      "this h2matrix is no longer valid (was it saved and reloaded?): build it again with "
      "h2_matrix()");
}

void gk_r_h2_parts(SEXP ptr, const h2_tree **tree, h2_gpu **gpu)
{
  h2_handle *h = handle_of(ptr);
  *tree = &h->tree;
  *gpu = h->gpu;
}

/* Before h's data are built (its tree is): collects unreachable matrices
 * first if this one would pass the memory policy (device/gk_memory.h), since
 * R sees only an external pointer of each, then counts h's bytes. */
static void make_room_and_register(h2_handle *h, int gpu)
{
  int device = gpu ? gk_device_current() : GK_MEMORY_HOST;
  size_t data = h2_data_bytes(&h->tree, h->single), host = h2_tree_bytes(&h->tree);
  if (h->on_the_fly) {   // bases, transfers (couplings), nodes and ranges (h2_otf.h)
    size_t entries = h2_basis_entries(&h->tree) + h2_transfer_entries(&h->tree);
    if (h->on_the_fly == H2_FORM_DENSE_ON_THE_FLY) entries += h2_coupling_entries(&h->tree);
    data = entries * (h->single ? 4 : 8) + h->otf_bytes;
  }
  if (!gpu) host += data;
  gk_r_make_room(GK_MEMORY_HOST, host, 1);
  if (gpu) gk_r_make_room(device, data, 1);
  gk_memory_register(&h->mem, device, host, gpu ? data : 0);
}

static double now_seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* storage: 0 stored, 1 on the fly, 2 auto (h2_otf_choose). Sets h's storage
 * fields; *otf is the on-the-fly data when that form is taken. */
static gk_status choose_storage(h2_handle *h, int storage, int gpu, h2_otf **otf, gk_error *err)
{
  *otf = NULL;
  h->storage_reason = H2_STORAGE_REQUESTED;
  if (storage == 0) return GK_OK;
  if (h2_otf_build(&h->tree, otf, err)) return err->status;
  double cpl, dense;
  h2_otf_pairs(*otf, gpu, &cpl, &dense);
  h->kernel_pairs = cpl + dense;
  // Unreachable matrices do not count against the stored form: collect them
  // first if it would pass the memory policy (this also reads the host budget option).
  int where = gpu ? gk_device_current() : GK_MEMORY_HOST;
  gk_r_make_room(where, h2_data_bytes(&h->tree, h->single), 1);
  double available = gk_memory_available(where);
  int take = h2_otf_choose(&h->tree, *otf, h->single, gpu, available, &h->ms_stored, &h->ms_otf,
                           &h->storage_reason);
  if (storage == 1) {
    take = 1;
    h->storage_reason = H2_STORAGE_REQUESTED;
  }
  if (!take) {
    h2_otf_free(*otf);
    *otf = NULL;
    return GK_OK;
  }
  h->on_the_fly = H2_FORM_ON_THE_FLY;
  h->otf_bytes = (*otf)->host_bytes;
  return GK_OK;
}

SEXP gk_r_h2_build(SEXP locs, SEXP spec, SEXP nugget, SEXP leaf_size, SEXP order, SEXP eta,
                   SEXP single, SEXP backend, SEXP storage, SEXP threads)
{
  int n = Rf_nrows(locs), dim = Rf_ncols(locs);
  if (dim < 2 || dim > 3) gk_stop("an h2matrix needs points in 2 or 3 dimensions, not %d", dim);
  gk_kernel kernel = gk_kernel_from_r(spec);
  double range[3];
  gk_kernel_range_from_r(spec, dim, range);
  double *xs = (double *) R_alloc((size_t) n * dim + 1, sizeof(double));
  double centre[3];   // shifted before scaling: accuracy far from the origin
  gk_points_centre(REAL(locs), n, NULL, 0, dim, range, centre);
  gk_scale_points(REAL(locs), n, dim, centre, range, xs);

  // The external pointer exists (with its finalizer) before anything native
  // does, so that no R allocation failure can leak what is built.
  SEXP ptr = PROTECT(gk_extptr_new(GK_TAG_H2MATRIX, h2_finalize));
  gk_error err;
  gk_error_clear(&err);
  h2_handle *h = (h2_handle *) calloc(1, sizeof *h);
  if (!h) {
    UNPROTECT(1);
    gk_stop("out of host memory for the H2 matrix");
  }
  h->single = gk_as_flag(single);
  double start = now_seconds();
  if (h2_tree_build(&h->tree, xs, n, dim, gk_as_int(leaf_size), gk_as_int(order),
                    gk_as_double(eta), &kernel, gk_as_double(nugget), gk_as_int(threads),
                    &err) == GK_OK) {
    h->tree_seconds = now_seconds() - start;
    int gpu = gk_backend_is_gpu(backend);
    h2_otf *otf = NULL;
    if (choose_storage(h, gk_as_int(storage), gpu, &otf, &err) == GK_OK) {
      make_room_and_register(h, gpu);
      if (otf && gpu)
        h2_gpu_build_otf(&h->tree, h->single, otf, &h->gpu, &err);
      else if (otf)
        h2_cpu_build_otf(&h->tree, h->single, gk_as_int(threads), otf, &h->cpu, &err);
      else if (gpu)
        h2_gpu_build(&h->tree, h->single, &h->gpu, &err);
      else
        h2_cpu_build(&h->tree, h->single, gk_as_int(threads), &h->cpu, &err);
    }
  }
  h->build_seconds = now_seconds() - start;
  if (err.status) {
    handle_free(h);
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
  if (TYPEOF(ptr) == EXTPTRSXP && R_ExternalPtrTag(ptr) == Rf_install(GK_TAG_H2MATRIX))
    h2_finalize(ptr);
  return R_NilValue;
}

/* A GPU matrix keeps its product workspace between calls (grown for the most
 * right-hand sides asked so far): count it with the matrix's bytes, so that
 * the collection policy sees what the matrix really holds. */
static void recount_gpu_bytes(h2_handle *h)
{
  if (!h->gpu) return;
  size_t now = h2_gpu_own_bytes(h->gpu);
  if (now == h->mem.device_bytes || h->mem.device < 0) return;
  int device = h->mem.device;
  size_t host = h->mem.host_bytes;
  gk_memory_unregister(&h->mem);
  gk_memory_register(&h->mem, device, host, now);
}

static void check_finite(SEXP x)
{
  // here rather than in R: anyNA() and is.infinite() on a 1e6 x 50 block cost
  // a fresh logical copy each (0.3 s), this loop none
  const double *xv = REAL(x);
  for (R_xlen_t e = 0; e < Rf_xlength(x); e++)
    if (!R_FINITE(xv[e])) gk_stop("x contains NA, NaN or infinite values");
}

/* Rows `rows` (1-based; NULL: all) of A [blocks[[1]] blocks[[2]] ...] for a
 * list of double matrices with n rows, which are not bound into one copy
 * (h2_gpu_matmul_rows; a CPU matrix multiplies whole). On the GPU a block may
 * be a device matrix (gk_r_rhs_block), copied on the device. */
SEXP gk_r_h2_matmul_rows(SEXP ptr, SEXP blocks, SEXP rows)
{
  h2_handle *h = handle_of(ptr);
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
    recount_gpu_bytes(h);
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
  h2_handle *h = handle_of(ptr);
  if (TYPEOF(x) != REALSXP || !Rf_isMatrix(x)) gk_stop("x must be a double matrix");
  int n = Rf_nrows(x), nrhs = Rf_ncols(x);
  if (n != h->tree.n) gk_stop("non-conformable: the h2matrix has %d columns, x has %d rows",
                               h->tree.n, n);
  check_finite(x);
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, n, nrhs));
  gk_error err;
  gk_error_clear(&err);
  if (nrhs > 0) {
    if (h->gpu) h2_gpu_matmul(&h->tree, h->gpu, REAL(x), nrhs, REAL(out), &err);
    else h2_cpu_matmul(&h->tree, h->cpu, REAL(x), nrhs, REAL(out), &err);
    recount_gpu_bytes(h);
  }
  UNPROTECT(1);
  if (err.status) gk_raise(&err);
  return out;
}

/* Median device time (ms) of the HMV with resident vectors (benchmarks). */
SEXP gk_r_h2_time(SEXP ptr, SEXP nrhs, SEXP reps, SEXP cublas_only)
{
  h2_handle *h = handle_of(ptr);
  gk_error err;
  gk_error_clear(&err);
  double ms = NA_REAL;
  if (!h->gpu) gk_fail(&err, GK_ERR_INPUT, "device timing needs an h2matrix built on the GPU");
  else h2_gpu_time_hmv(&h->tree, h->gpu, gk_as_int(nrhs), gk_as_int(reps),
                       gk_as_flag(cublas_only), &ms, &err);
  recount_gpu_bytes(h);
  if (err.status) gk_raise(&err);
  return Rf_ScalarReal(ms);
}

SEXP gk_r_h2_info(SEXP ptr)
{
  h2_handle *h = handle_of(ptr);
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
                         "level_coupling_blocks", ""};
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
  SET_VECTOR_ELT(out, e++, Rf_ScalarLogical(h->gpu != NULL));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->n_nodes));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(t->dense.n_slots));
  // on_the_fly: the dense blocks (forms 1 and 2); the couplings too in form 1
  SET_VECTOR_ELT(out, e++, Rf_ScalarLogical(h->on_the_fly != H2_FORM_STORED));
  SET_VECTOR_ELT(out, e++, Rf_ScalarLogical(h->on_the_fly == H2_FORM_ON_THE_FLY));
  SET_VECTOR_ELT(out, e++, Rf_ScalarInteger(h->storage_reason));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal(h->ms_stored));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal(h->ms_otf));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal(h->kernel_pairs));
  SET_VECTOR_ELT(out, e++, Rf_ScalarReal((double) h->otf_bytes));
  SEXP per_level = Rf_allocVector(INTSXP, t->depth + 1);
  SET_VECTOR_ELT(out, e++, per_level);
  for (int l = 0; l <= t->depth; l++) INTEGER(per_level)[l] = t->coupling[l].n_blocks;
  UNPROTECT(1);
  return out;
}

/* ---- orthogonalization and compression (src/h2/h2_compress.h) ---------- */

/* h's matrix data in double on the host, of every form: the blocks it does
 * not store are evaluated as built by the export (h2.h). */
static gk_status handle_export(h2_handle *h, h2_host_data *d, int threads, gk_error *err)
{
  if (h->gpu) return h2_gpu_export(&h->tree, h->gpu, threads, d, err);
  return h2_cpu_export(&h->tree, h->cpu, d, err);
}

/* The storage model's figures for nh in form 2 (dense blocks on the fly,
 * couplings stored) from its dense-only product o (NULL: one is made for the
 * count and freed): the kernel pairs of a product and the predicted times of
 * the stored and the mixed form (h2_otf_choose). NA where none can be made. */
static void set_dense_otf_model(h2_handle *nh, const h2_otf *o, int gpu)
{
  h2_otf *own = NULL;
  nh->ms_stored = nh->ms_otf = nh->kernel_pairs = NA_REAL;
  if (!o) {
    gk_error ignored;
    gk_error_clear(&ignored);
    if (h2_otf_build_dense(&nh->tree, &own, &ignored)) return;
    o = own;
  }
  double cpl, dense;
  int reason;
  h2_otf_pairs(o, gpu, &cpl, &dense);
  nh->kernel_pairs = cpl + dense;   // cpl is 0: the couplings are stored
  h2_otf_choose(&nh->tree, o, nh->single, gpu, INFINITY, &nh->ms_stored, &nh->ms_otf, &reason);
  h2_otf_free(own);
}

/* A new h2matrix from A: orthogonalized when tol is NA, else compressed to
 * tol, on A's backend (see h2_compress.h). Returns list(ptr, stats). The
 * result's form follows from A's: with A's dense blocks on the fly (forms 1
 * and 2) its dense blocks stay on the fly and its compressed couplings are
 * stored (form 2), else everything is stored. */
SEXP gk_r_h2_compress(SEXP ptr, SEXP tol, SEXP threads, SEXP on_gpu)
{
  h2_handle *h = handle_of(ptr);
  double tolerance = gk_as_double(tol);
  int nthreads = gk_as_int(threads);
  gk_error err;
  gk_error_clear(&err);
  h2_host_data in = {0}, out = {0};
  h2_compress_stats st;
  memset(&st, 0, sizeof st);
  SEXP res = PROTECT(Rf_allocVector(VECSXP, 2));
  SEXP np = PROTECT(gk_extptr_new(GK_TAG_H2MATRIX, h2_finalize));
  SET_VECTOR_ELT(res, 0, np);
  h2_handle *nh = (h2_handle *) calloc(1, sizeof *nh);
  if (!nh) {
    UNPROTECT(2);
    gk_stop("out of host memory for the H2 matrix");
  }
  nh->single = h->single;
  // The form follows from the input (summary() says so), not from a choice.
  int dense_otf = h->on_the_fly != H2_FORM_STORED;
  nh->on_the_fly = dense_otf ? H2_FORM_DENSE_ON_THE_FLY : H2_FORM_STORED;
  nh->storage_reason = H2_STORAGE_REQUESTED;
  nh->ms_stored = nh->ms_otf = NA_REAL;   // no model for a stored result
  nh->kernel_pairs = 0.0;                 // a stored product evaluates no kernel
  double start = now_seconds();
  if (h->gpu && gk_as_flag(on_gpu)) {
    // On the GPU (h2_compress_cuda.cu): the new matrix shares A's dense blocks
    // or, with A's dense blocks on the fly, gets a dense-only on-the-fly product
    // of its own (the couplings of an on-the-fly A evaluated chunk by chunk,
    // never stored); room for at most A's low-rank part is made first, its own
    // bytes counted after.
    int device = ((const gk_resident *) h->gpu)->device;   // an h2_gpu starts with it
    size_t el = h->single ? sizeof(float) : sizeof(double);
    size_t low = (h2_basis_entries(&h->tree) + h2_transfer_entries(&h->tree) +
                  h2_coupling_entries(&h->tree)) * el;
    gk_r_make_room(device, low, 1);
    h2_transform_gpu(&h->tree, h->gpu, ISNA(tolerance) ? 0.0 : tolerance, nthreads, &nh->tree,
                     &nh->gpu, &st, &err);
    if (!err.status) {
      if (dense_otf) nh->otf_bytes = h2_gpu_otf_host_bytes(nh->gpu);
      gk_memory_register(&nh->mem, device, h2_tree_bytes(&nh->tree) + nh->otf_bytes,
                         h2_gpu_own_bytes(nh->gpu));
      if (dense_otf) set_dense_otf_model(nh, NULL, 1);
    }
  } else {
    // On the host with LAPACK; a GPU matrix goes there and back (with
    // options(gpukernels.h2_compress_on_host = TRUE)). An on-the-fly A's
    // export evaluates the blocks it does not store, so the copy in double can
    // be far larger than A: checked against the host budget before it is made
    // (malloc may promise what the pages cannot keep).
    const h2_tree *t = &h->tree;
    double copy = 8.0 * (double) (h2_basis_entries(t) + h2_transfer_entries(t) +
                                  h2_coupling_entries(t) + h2_dense_entries(t));
    gk_r_make_room(GK_MEMORY_HOST, (size_t) copy, 0);
    double available = gk_memory_available(GK_MEMORY_HOST);
    if (copy > available)
      gk_fail(&err, GK_ERR_NOMEM, "compressing this H2 matrix on the host needs its blocks in double "
              "precision, %.1f GB of host memory, and %.1f GB are available "
              "(options(gpukernels.host_memory_budget)); on a GPU it is compressed without that copy",
              copy / 1e9, available / 1e9);
    else
      handle_export(h, &in, nthreads, &err);
    if (!err.status) {
      if (ISNA(tolerance)) h2_orthogonalize_host(&h->tree, &in, nthreads, &nh->tree, &out, &st, &err);
      else h2_compress_host(&h->tree, &in, tolerance, nthreads, &nh->tree, &out, &st, &err);
    }
    h2_host_data_free(&in);
    h2_otf *o = NULL;
    if (!err.status && dense_otf && h2_otf_build_dense(&nh->tree, &o, &err) == GK_OK) {
      nh->otf_bytes = o->host_bytes;
      set_dense_otf_model(nh, o, h->gpu != NULL);
    }
    if (!err.status) {
      make_room_and_register(nh, h->gpu != NULL);
      // o is owned by the import from here, also on failure
      if (h->gpu) h2_gpu_import(&nh->tree, nh->single, &out, o, &nh->gpu, &err);
      else h2_cpu_import(&nh->tree, nh->single, nthreads, &out, o, &nh->cpu, &err);
      o = NULL;
    }
    h2_otf_free(o);
    h2_host_data_free(&out);
  }
  nh->build_seconds = now_seconds() - start;
  if (err.status) {
    handle_free(nh);
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
  h2_handle *h = handle_of(ptr);
  SEXP out = PROTECT(Rf_allocVector(INTSXP, h->tree.depth + 1));
  for (int l = 0; l <= h->tree.depth; l++) INTEGER(out)[l] = h->tree.level_rank[l];
  UNPROTECT(1);
  return out;
}

/* ||Q^T Q - I||_max over the leaf bases and over sum_c E_c^T E_c - I of every
 * used inner node: how orthonormal the basis tree is (tests). */
SEXP gk_r_h2_orthogonality(SEXP ptr)
{
  h2_handle *h = handle_of(ptr);
  const h2_tree *t = &h->tree;
  gk_error err;
  gk_error_clear(&err);
  h2_host_data d = {0};
  handle_export(h, &d, 1, &err);
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
