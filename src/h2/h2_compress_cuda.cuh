/*
 * What the files of the GPU orthogonalization and compression share
 * (h2_compress.h; the driver h2_compress_cuda.cu, the QR upsweep
 * h2_orthog_cuda.cu, the downsweep h2_generate_cuda.cu, the truncation
 * h2_truncate_cuda.cu, the projections h2_project_cuda.cu): the transform's
 * context, the orthogonal form it starts from, and the steps each file
 * defines for float and double. The arithmetic is in the matrix's
 * precision; the SVDs in double.
 */
#ifndef GK_H2_COMPRESS_CUDA_CUH
#define GK_H2_COMPRESS_CUDA_CUH

#include <algorithm>
#include <vector>
#include "h2/h2_cuda_impl.cuh"
#include "h2/h2_compress.h"
#include "h2/h2_blas_cuda.cuh"
#include "h2/h2_gpu_pool.cuh"
#include "device/gk_hooks.h"

// The largest workspace a chunked step allocates at once (the downsweep's
// heads or stacks, the projection products, the blocks evaluated on the fly).
static const size_t WORK_CHUNK_BYTES = (size_t) 1 << 30;

/* One orthogonalization or compression of the GPU matrix `in`: its input,
 * the stream and cuBLAS handle everything runs on, the pool of workspaces,
 * and the pointer arrays of the batched calls. */
template <typename T>
struct gpu_transform {
  const h2_tree *t;      // the input's structure
  h2_gpu *in;            // the input's data (never changed)
  cublasHandle_t h;
  cudaStream_t s;
  int threads;           // host threads of the SVDs that take the host path
  double flops;
  gk_error *err;
  gk_device_buffer ptrs;  // 6 pointer arrays of ptr_count entries
  int ptr_count;
  // An input computed on the fly (h2_otf.h) stores no dense blocks, and no
  // couplings unless it is itself a compressed one: those are evaluated as
  // built, chunk by chunk, from the tree's geometry on the GPU.
  bool couplings_otf, dense_otf;
  h2_gpu_geometry geo;
  gpu_pool pool;

  // A device buffer of `count` entries of E (at least one), zeroed when asked.
  template <typename E = T>
  E *alloc(size_t count, const char *what, int zero = 0)
  {
    const size_t bytes = (count ? count : 1) * sizeof(E);
    void *p = pool.reuse(bytes);
    if (!p) {
      pool.trim();
      gk_device_buffer b = GK_DEVICE_BUFFER_EMPTY;
      if (gk_buffer_alloc(&b, bytes, what, err)) return NULL;
      pool.keep(b);
      p = b.ptr;
    }
    if (zero && gk_cuda_status(cudaMemsetAsync(p, 0, bytes, s), what, err)) return NULL;
    return (E *) p;
  }
  // Work on the stream that used p is ordered before any later use of it.
  void release(const void *p) { pool.release(p); }
  gk_status blas(cublasStatus_t st, const char *what)
  {
    return gk_cublas_status(st, what, err);
  }
  gk_status launched(const char *what) { return gk_cuda_check_launch(what, err); }
  gk_status synced(const char *what) { return gk_cuda_status(cudaStreamSynchronize(s), what, err); }

  gk_status gemm_strided(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         const T *a, int lda, size_t sa, const T *b, int ldb, size_t sb, T *c,
                         int ldc, size_t sc, int count)
  {
    if (count <= 0 || m <= 0 || n <= 0) return GK_OK;
    if (k <= 0) return gk_fail(err, GK_ERR_INTERNAL, "an empty product in the H2 compression");
    for (int first = 0; first < count; first += H2_MAX_BATCH) {
      int chunk = std::min(H2_MAX_BATCH, count - first);
      if (blas(h2_gemm_strided_batched(h, ta, tb, m, n, k, 1.0, a + first * sa, lda,
                                       (long long) sa, b + first * sb, ldb, (long long) sb, 0.0,
                                       c + first * sc, ldc, (long long) sc, chunk),
               "the H2 compression's batched products"))
        return err->status;
    }
    return GK_OK;
  }

  /* Sum of squares of `count` device entries (nrm2 in slices that fit an int). */
  gk_status sum_squares(const T *x, size_t count, double *out)
  {
    const size_t slice = (size_t) 1 << 30;
    double total = 0.0;
    for (size_t first = 0; first < count; first += slice) {
      double r = 0.0;
      if (blas(h2_nrm2(h, (int) std::min(slice, count - first), x + first, &r), "the H2 norm"))
        return err->status;
      total += r * r;
    }
    *out = total;
    return GK_OK;
  }
};

/* The orthogonal form of the input (h2_orthog_cuda.cu): its structure (the
 * ranks of h2_orthogonal_ranks), its data, and per level the projection of
 * the input's bases onto the new ones, old basis = new basis * P[l]
 * (kn x k per node, in the transform's pool). The data is the result of an
 * orthogonalization, or within a compression a working copy without
 * couplings (the compression projects them as it needs them). */
template <typename T>
struct orthogonal_form {
  h2_tree tree;
  h2_gpu *data = NULL;
  bool working_copy = false;   // data: freed with free() (its buffers are the pool's)
  std::vector<T *> projection;
};

/* What the truncation upsweep keeps (h2_truncate_cuda.cu), per level of the
 * orthogonal form: the new rank r_l (1 above the top level), the rows of the
 * weighted bases (k_q at the leaves, else 2 r_{l+1}), the kept left singular
 * vectors Q_i(:, 1:r) (rows x r per node) and the projection of the old
 * basis onto the new, r x k_l per node (both in the transform's pool). */
template <typename T>
struct gpu_truncated {
  std::vector<int> rank, weighted_rows;
  std::vector<T *> vectors, projection;
};

/* ---- the steps, each defined in its file for float and double ------------ */

/* h2_orthog_cuda.cu: the orthogonal form of ctx.in (a working copy when
 * working_copy, else a result of its own, create_result), with the
 * couplings projected unless it is a working copy. */
template <typename T>
gk_status orthogonalize_gpu(gpu_transform<T> &ctx, orthogonal_form<T> &orth, bool working_copy,
                            h2_compress_stats *st);

/* h2_orthog_cuda.cu: a result of the transform for the structure nt: U, E and
 * S for the caller to write; the dense blocks those of the input, shared, or
 * on the fly as the input's are (a new dense-only h2_otf: the leaves do not
 * change). */
template <typename T>
gk_status create_result(gpu_transform<T> &ctx, const h2_tree *nt, h2_gpu **out);

/* h2_orthog_cuda.cu: the halves of each node's stacked Q (2 kc x r, `nodes`
 * of them one after the other) into the transfers of its two children
 * (kc x r each, consecutive in e). */
template <typename T>
gk_status split_halves_launch(gpu_transform<T> &ctx, const T *q, int nodes, int kc, int r, T *e,
                              const char *what);

/* h2_project_cuda.cu: S'_s = P_row(s) S_s P_col(s)^T for every coupling block
 * of the input (structure ctx.t, ranks k; its couplings `from`, or evaluated
 * chunk by chunk when the input computes them on the fly) into `to`
 * (structure nt, ranks kn); P[l] is kn x k per node. */
template <typename T>
gk_status project_couplings(gpu_transform<T> &ctx, const h2_tree *nt, T *const *P, const T *from,
                            T *to);

/* h2_project_cuda.cu: the same for level l's blocks at row-order positions
 * [p0, p1) into out (kn x kn each, in row order), with iota[p] = p - p0 there
 * (the indices the stack QR reads them by); *sq gets the sum of their
 * squares. An input computed on the fly has its blocks evaluated here. */
template <typename T>
gk_status project_rows(gpu_transform<T> &ctx, const h2_tree *nt, T *const *P, int l, size_t p0,
                       size_t p1, T *out, int *iota, double *sq);

/* h2_generate_cuda.cu: the downsweep of a compression. R[l] (k_l x k_l per
 * node, allocated here) gets the R factor of each node's stack
 * [R_parent E_i^T; S_ij^T, j in row i] of the orthogonal form (Q not
 * formed), the orthogonal couplings made chunk by chunk just before their
 * QRs; *couplings_sq gets their sum of squares, st->seconds_generate_qr the
 * GPU time of the QRs. */
template <typename T>
gk_status generate_r_factors(gpu_transform<T> &ctx, const orthogonal_form<T> &orth,
                             std::vector<T *> &R, double *couplings_sq, h2_compress_stats *st);

/* h2_truncate_cuda.cu: the truncation upsweep of the orthogonal form to tol
 * (h2_truncate_upsweep over the GPU's operations), from the downsweep's R
 * factors (released as it goes); st->error_frobenius gets the estimate. */
template <typename T>
gk_status truncate_gpu(gpu_transform<T> &ctx, const orthogonal_form<T> &orth, std::vector<T *> &R,
                       double tol, gpu_truncated<T> &out, h2_compress_stats *st);

#endif
