/*
 * The GPU backend of the H2 engine. Construction: the host builds the
 * structure (h2_tree.c); the matrix data (leaf bases, transfers, couplings,
 * dense leaves) are evaluated here by one kernel each, with the entry
 * functions the CPU build uses (h2_entries.h), and stay resident until
 * h2_gpu_free. Products: the HMV of h2_hmv.c over cuBLAS strided-batched
 * GEMMs and, for the block-sparse phases, pointer arrays filled by a marshaling
 * kernel and run slot by slot with cuBLAS batched GEMMs. The dense phase runs
 * on a low-priority stream, the low-rank phases on a high-priority one.
 */
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "device/gk_cuda.h"
#include "h2/h2.h"
#include "h2/h2_entries.h"
#include "h2/h2_gemv.cuh"

// cuBLAS grids are limited in the batch dimension; larger batches are chunked.
#define H2_MAX_BATCH 65535

struct h2_gpu {
  int single;
  size_t el;
  h2_data data;
  gk_device_buffer U, E, S, D;
  gk_device_buffer slot_of_point;
  gk_device_buffer cpl_row, cpl_col, dense_row, dense_col;  // local indices, storage order
  gk_device_buffer cpl_ptrs, dense_ptrs;                    // marshaled A, B, C pointers
  gk_device_buffer cpl_row_ptr, cpl_row_blocks, dense_row_ptr, dense_row_blocks;
  int force_cublas;   // benchmarks: cuBLAS even where the small-block kernels apply
  int work_nrhs;
  gk_device_buffer xp, yp, xhat, yhat, xio;
  gk_stream low_rank, dense;  // high and low priority
  cudaEvent_t forked, joined;
  cublasHandle_t blas_low_rank, blas_dense;
};

/* ---- construction kernels ---------------------------------------------- */

template <typename T>
__global__ void fill_basis(h2_geometry g, T *U, size_t total)
{
  size_t mk = (size_t) g.leaf_size * g.rank;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    size_t rem = e % mk;
    U[e] = (T) h2_basis_entry(&g, (int) (e / mk), (int) (rem % g.leaf_size),
                              (int) (rem / g.leaf_size));
  }
}

template <typename T>
__global__ void fill_transfer(h2_geometry g, T *E, size_t total)
{
  size_t kk = (size_t) g.rank * g.rank;
  for (size_t e = kk + blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    size_t rem = e % kk;
    E[e] = (T) h2_transfer_entry(&g, (int) (e / kk), (int) (rem % g.rank), (int) (rem / g.rank));
  }
}

/* Couplings of all levels; node_i / node_j are global node indices. */
template <typename T>
__global__ void fill_coupling(h2_geometry g, const int *node_i, const int *node_j, T *S,
                              size_t total)
{
  size_t kk = (size_t) g.rank * g.rank;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    size_t s = e / kk, rem = e % kk;
    S[e] = (T) h2_coupling_entry(&g, node_i[s], node_j[s], (int) (rem % g.rank),
                                 (int) (rem / g.rank));
  }
}

template <typename T>
__global__ void fill_dense(h2_geometry g, const int *row, const int *col, T *D, size_t total)
{
  size_t mm = (size_t) g.leaf_size * g.leaf_size;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    size_t s = e / mm, rem = e % mm;
    D[e] = (T) h2_dense_entry(&g, row[s], col[s], (int) (rem % g.leaf_size),
                              (int) (rem / g.leaf_size));
  }
}

static unsigned grid_for(size_t total)
{
  size_t blocks = (total + 255) / 256;
  return (unsigned) std::min<size_t>(std::max<size_t>(blocks, 1), 132 * 64);
}

/* ---- HMV kernels: marshaling and vector permutations --------------------- */

/* Pointers of block-sparse products: A_b = values + b bs^2, B_b = x + col_b bs,
 * C_b = y + row_b bs (one thread per block). */
template <typename T>
__global__ void marshal_bsr(const int *row, const int *col, int n_blocks, int bs, const T *values,
                            const T *x, T *y, const T **a_ptr, const T **b_ptr, T **c_ptr)
{
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  a_ptr[b] = values + (size_t) b * bs * bs;
  b_ptr[b] = x + (size_t) col[b] * bs;
  c_ptr[b] = y + (size_t) row[b] * bs;
}

template <typename T>
__global__ void scatter_input(const double *x, const int *slot, int n, int nrhs, size_t rows, T *xp)
{
  size_t total = (size_t) n * nrhs;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x)
    xp[slot[e % n] + rows * (e / n)] = (T) x[e];
}

template <typename T>
__global__ void gather_output(const T *yp, const int *slot, int n, int nrhs, size_t rows, double *y)
{
  size_t total = (size_t) n * nrhs;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x)
    y[e] = (double) yp[slot[e % n] + rows * (e / n)];
}

/* ---- the batched operations of h2_ops ------------------------------------ */

static cublasStatus_t gemm_strided_t(cublasHandle_t h, cublasOperation_t ta, int m, int n, int k,
                                     const double *a, int lda, long long sa, const double *b,
                                     int ldb, long long sb, double beta, double *c, int ldc,
                                     long long sc, int count)
{
  const double one = 1.0;
  return cublasDgemmStridedBatched(h, ta, CUBLAS_OP_N, m, n, k, &one, a, lda, sa, b, ldb, sb,
                                   &beta, c, ldc, sc, count);
}

static cublasStatus_t gemm_strided_t(cublasHandle_t h, cublasOperation_t ta, int m, int n, int k,
                                     const float *a, int lda, long long sa, const float *b,
                                     int ldb, long long sb, double beta, float *c, int ldc,
                                     long long sc, int count)
{
  const float one = 1.0f, fbeta = (float) beta;
  return cublasSgemmStridedBatched(h, ta, CUBLAS_OP_N, m, n, k, &one, a, lda, sa, b, ldb, sb,
                                   &fbeta, c, ldc, sc, count);
}

static cublasStatus_t gemm_batched_t(cublasHandle_t h, int m, int n, int k, const double **a,
                                     int lda, const double **b, int ldb, double **c, int ldc,
                                     int count)
{
  const double one = 1.0;
  return cublasDgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, lda, b, ldb, &one, c,
                            ldc, count);
}

static cublasStatus_t gemm_batched_t(cublasHandle_t h, int m, int n, int k, const float **a,
                                     int lda, const float **b, int ldb, float **c, int ldc,
                                     int count)
{
  const float one = 1.0f;
  return cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, lda, b, ldb, &one, c,
                            ldc, count);
}

struct gpu_ctx {
  h2_gpu *g;
  const h2_tree *t;
};

static cublasHandle_t blas_of(h2_gpu *g, int stream)
{
  return stream == H2_STREAM_DENSE ? g->blas_dense : g->blas_low_rank;
}

static cudaStream_t stream_of(h2_gpu *g, int stream)
{
  return (cudaStream_t) (stream == H2_STREAM_DENSE ? g->dense : g->low_rank);
}

template <typename T>
static gk_status strided_t(h2_gpu *g, int stream, int trans_a, int m, int n, int k,
                           const void *a, int lda, size_t sa, const void *b, int ldb, size_t sb,
                           double beta, void *c, int ldc, size_t sc, int count, gk_error *err)
{
  if (!g->force_cublas && h2_rows_fits(m, k, n) && lda == (trans_a ? k : m) &&
      (beta == 0.0 || beta == 1.0)) {
    h2_rows_args<T> p = {count, lda, trans_a ? m : k, n, beta != 0.0, trans_a,
                         (const T *) a, sa, (const T *) b, ldb, sb, (T *) c, ldc, sc,
                         NULL, NULL, NULL};
    return gk_cuda_status(h2_rows_launch<T>(p, stream_of(g, stream)),
                          "the H2 small-block batched product", err);
  }
  for (int first = 0; first < count; first += H2_MAX_BATCH) {
    int chunk = std::min(H2_MAX_BATCH, count - first);
    cublasStatus_t st = gemm_strided_t(
      blas_of(g, stream), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
      (const T *) a + first * sa, lda, (long long) sa, (const T *) b + first * sb, ldb,
      (long long) sb, beta, (T *) c + first * sc, ldc, (long long) sc, chunk);
    if (gk_cublas_status(st, "the H2 strided batched product", err)) return err->status;
  }
  return GK_OK;
}

static gk_status gpu_gemm_strided(void *ctx, int stream, int trans_a, int m, int n, int k,
                                  const void *a, int lda, size_t sa, const void *b, int ldb,
                                  size_t sb, double beta, void *c, int ldc, size_t sc, int count,
                                  gk_error *err)
{
  h2_gpu *g = ((gpu_ctx *) ctx)->g;
  return g->single
    ? strided_t<float>(g, stream, trans_a, m, n, k, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count, err)
    : strided_t<double>(g, stream, trans_a, m, n, k, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count, err);
}

/* One marshaling launch for the level, then one batched GEMM per slot (the
 * blocks of a slot write distinct rows, so a batch never races). */
template <typename T>
static gk_status bsr_t(gpu_ctx *cx, int stream, int which, int level, const void *values, int bs,
                       const void *x, int ldx, void *y, int ldy, int nrhs, gk_error *err)
{
  h2_gpu *g = cx->g;
  const h2_tree *t = cx->t;
  const h2_bsr *b = which == H2_DENSE ? &t->dense : &t->coupling[level];
  const int *row, *col, *row_ptr, *row_blocks;
  void **ptrs;
  if (which == H2_DENSE) {
    row = (const int *) g->dense_row.ptr;
    col = (const int *) g->dense_col.ptr;
    row_ptr = (const int *) g->dense_row_ptr.ptr;
    row_blocks = (const int *) g->dense_row_blocks.ptr;
    ptrs = (void **) g->dense_ptrs.ptr;
  } else {
    row = (const int *) g->cpl_row.ptr + t->coupling_offset[level];
    col = (const int *) g->cpl_col.ptr + t->coupling_offset[level];
    row_ptr = (const int *) g->cpl_row_ptr.ptr + t->level_ptr[level] + level;
    row_blocks = (const int *) g->cpl_row_blocks.ptr + t->coupling_offset[level];
    ptrs = (void **) g->cpl_ptrs.ptr;
  }
  if (!g->force_cublas && h2_rows_fits(bs, bs, nrhs)) {
    h2_rows_args<T> p = {b->n_rows, bs, bs, nrhs, 1, 0, (const T *) values, (size_t) bs * bs,
                         (const T *) x, ldx, (size_t) bs, (T *) y, ldy, (size_t) bs,
                         row_ptr, row_blocks, col};
    return gk_cuda_status(h2_rows_launch<T>(p, stream_of(g, stream)),
                          "the H2 block-sparse product", err);
  }
  int nb = b->n_blocks;
  const T **a_ptr = (const T **) ptrs, **b_ptr = (const T **) ptrs + nb;
  T **c_ptr = (T **) ptrs + 2 * (size_t) nb;
  marshal_bsr<T><<<(nb + 255) / 256, 256, 0, stream_of(g, stream)>>>(
    row, col, nb, bs, (const T *) values, (const T *) x, (T *) y, a_ptr, b_ptr, c_ptr);
  if (gk_cuda_check_launch("the H2 marshaling kernel", err)) return err->status;
  for (int s = 0; s < b->n_slots; s++)
    for (int first = b->slot_ptr[s]; first < b->slot_ptr[s + 1]; first += H2_MAX_BATCH) {
      int chunk = std::min(H2_MAX_BATCH, b->slot_ptr[s + 1] - first);
      cublasStatus_t st = gemm_batched_t(blas_of(g, stream), bs, nrhs, bs, a_ptr + first, bs,
                                         b_ptr + first, ldx, c_ptr + first, ldy, chunk);
      if (gk_cublas_status(st, "the H2 block-sparse batched product", err)) return err->status;
    }
  return GK_OK;
}

static gk_status gpu_bsr(void *ctx, int stream, int which, int level, const void *values, int bs,
                         const void *x, int ldx, void *y, int ldy, int nrhs, gk_error *err)
{
  gpu_ctx *cx = (gpu_ctx *) ctx;
  return cx->g->single
    ? bsr_t<float>(cx, stream, which, level, values, bs, x, ldx, y, ldy, nrhs, err)
    : bsr_t<double>(cx, stream, which, level, values, bs, x, ldx, y, ldy, nrhs, err);
}

static gk_status gpu_zero(void *ctx, int stream, void *p, size_t entries, gk_error *err)
{
  h2_gpu *g = ((gpu_ctx *) ctx)->g;
  return gk_cuda_status(cudaMemsetAsync(p, 0, entries * g->el, stream_of(g, stream)),
                        "clearing the H2 workspace", err);
}

static gk_status gpu_fork(void *ctx, gk_error *err)
{
  h2_gpu *g = ((gpu_ctx *) ctx)->g;
  GK_CUDA_TRY(cudaEventRecord(g->forked, (cudaStream_t) g->low_rank), "the H2 fork", err);
  GK_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t) g->dense, g->forked, 0), "the H2 fork", err);
  return GK_OK;
fail:
  return err->status;
}

static gk_status gpu_join(void *ctx, gk_error *err)
{
  h2_gpu *g = ((gpu_ctx *) ctx)->g;
  GK_CUDA_TRY(cudaEventRecord(g->joined, (cudaStream_t) g->dense), "the H2 join", err);
  GK_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t) g->low_rank, g->joined, 0), "the H2 join", err);
  return GK_OK;
fail:
  return err->status;
}

/* ---- construction ---------------------------------------------------------- */

static gk_status upload(gk_device_buffer *buf, const void *src, size_t bytes, const char *what,
                        gk_error *err)
{
  if (gk_buffer_alloc(buf, bytes ? bytes : 1, what, err)) return err->status;
  if (bytes && gk_buffer_upload(buf, src, bytes, NULL, err)) return err->status;
  return GK_OK;
}

template <typename T>
static gk_status fill_all(const h2_tree *t, h2_gpu *g, const h2_geometry &geo, const int *node_i,
                          const int *node_j, gk_error *err)
{
  size_t total = h2_basis_entries(t);
  fill_basis<T><<<grid_for(total), 256>>>(geo, (T *) g->U.ptr, total);
  total = h2_transfer_entries(t);
  fill_transfer<T><<<grid_for(total), 256>>>(geo, (T *) g->E.ptr, total);
  total = h2_coupling_entries(t);
  if (total) fill_coupling<T><<<grid_for(total), 256>>>(geo, node_i, node_j, (T *) g->S.ptr, total);
  total = h2_dense_entries(t);
  if (total)
    fill_dense<T><<<grid_for(total), 256>>>(geo, (const int *) g->dense_row.ptr,
                                             (const int *) g->dense_col.ptr, (T *) g->D.ptr, total);
  if (gk_cuda_check_launch("the H2 construction kernels", err)) return err->status;
  return gk_cuda_status(cudaDeviceSynchronize(), "the H2 construction kernels", err);
}

extern "C" gk_status h2_gpu_build(const h2_tree *t, int single, h2_gpu **out, gk_error *err)
{
  *out = NULL;
  gk_device_buffer center = GK_DEVICE_BUFFER_EMPTY, half = GK_DEVICE_BUFFER_EMPTY;
  gk_device_buffer points = GK_DEVICE_BUFFER_EMPTY, counts = GK_DEVICE_BUFFER_EMPTY;
  gk_device_buffer node_i = GK_DEVICE_BUFFER_EMPTY, node_j = GK_DEVICE_BUFFER_EMPTY;
  std::vector<int> gi, gj, lr, lc, rp, rb;
  size_t n_cpl = t->coupling_offset[t->depth + 1], max_level = 1;
  size_t need, budget = 0;
  h2_gpu *g = (h2_gpu *) calloc(1, sizeof *g);
  if (!g) return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 matrix");
  g->single = single;
  g->el = single ? sizeof(float) : sizeof(double);

  need = (h2_basis_entries(t) + h2_transfer_entries(t) + h2_coupling_entries(t) +
          h2_dense_entries(t)) * g->el;
  GK_TRY(gk_device_memory_budget(0.9, &budget, err));
  if (need > budget) {
    gk_fail(err, GK_ERR_NOMEM, "the H2 matrix needs %.2f GB of GPU memory but only %.2f GB are "
            "free: use a larger eta, a smaller order, single precision or the CPU",
            need / 1e9, budget / 1e9);
    goto fail;
  }

  // Block indices in storage order: global nodes (construction) and local rows/cols (marshaling).
  try {
    gi.resize(n_cpl); gj.resize(n_cpl); lr.resize(n_cpl); lc.resize(n_cpl); rb.resize(n_cpl);
    rp.resize((size_t) t->n_nodes + t->depth + 1);
  } catch (...) {
    gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 block lists");
    goto fail;
  }
  for (int l = 0; l <= t->depth; l++) {
    const h2_bsr *b = &t->coupling[l];
    size_t off = t->coupling_offset[l];
    max_level = std::max(max_level, (size_t) b->n_blocks);
    for (int s = 0; s < b->n_blocks; s++) {
      gi[off + s] = t->level_ptr[l] + b->row[s];
      gj[off + s] = t->level_ptr[l] + b->col[s];
      lr[off + s] = b->row[s];
      lc[off + s] = b->col[s];
      rb[off + s] = b->row_blocks[s];
    }
    // Row pointers of level l start at level_ptr[l] + l (each level has rows + 1).
    std::copy(b->row_ptr, b->row_ptr + b->n_rows + 1, rp.begin() + t->level_ptr[l] + l);
  }
  GK_TRY(upload(&center, t->center, (size_t) t->n_nodes * t->dim * sizeof(double), "H2 boxes", err));
  GK_TRY(upload(&half, t->half, (size_t) t->n_nodes * t->dim * sizeof(double), "H2 boxes", err));
  GK_TRY(upload(&points, t->leaf_points,
                (size_t) t->n_leaves * t->leaf_size * t->dim * sizeof(double), "H2 points", err));
  GK_TRY(upload(&counts, t->leaf_count, (size_t) t->n_leaves * sizeof(int), "H2 leaf sizes", err));
  GK_TRY(upload(&node_i, gi.data(), n_cpl * sizeof(int), "H2 coupling blocks", err));
  GK_TRY(upload(&node_j, gj.data(), n_cpl * sizeof(int), "H2 coupling blocks", err));
  GK_TRY(upload(&g->cpl_row, lr.data(), n_cpl * sizeof(int), "H2 coupling blocks", err));
  GK_TRY(upload(&g->cpl_col, lc.data(), n_cpl * sizeof(int), "H2 coupling blocks", err));
  GK_TRY(upload(&g->dense_row, t->dense.row, (size_t) t->dense.n_blocks * sizeof(int),
                "H2 dense blocks", err));
  GK_TRY(upload(&g->dense_col, t->dense.col, (size_t) t->dense.n_blocks * sizeof(int),
                "H2 dense blocks", err));
  GK_TRY(upload(&g->cpl_row_ptr, rp.data(), rp.size() * sizeof(int), "H2 coupling blocks", err));
  GK_TRY(upload(&g->cpl_row_blocks, rb.data(), n_cpl * sizeof(int), "H2 coupling blocks", err));
  GK_TRY(upload(&g->dense_row_ptr, t->dense.row_ptr, ((size_t) t->n_leaves + 1) * sizeof(int),
                "H2 dense blocks", err));
  GK_TRY(upload(&g->dense_row_blocks, t->dense.row_blocks, (size_t) t->dense.n_blocks * sizeof(int),
                "H2 dense blocks", err));
  GK_TRY(upload(&g->slot_of_point, t->slot_of_point, (size_t) t->n * sizeof(int),
                "H2 permutation", err));
  GK_TRY(gk_buffer_alloc(&g->cpl_ptrs, 3 * max_level * sizeof(void *), "H2 pointer arrays", err));
  GK_TRY(gk_buffer_alloc(&g->dense_ptrs, 3 * ((size_t) t->dense.n_blocks + 1) * sizeof(void *),
                         "H2 pointer arrays", err));
  GK_TRY(gk_buffer_alloc(&g->U, h2_basis_entries(t) * g->el + 1, "H2 leaf bases", err));
  GK_TRY(gk_buffer_alloc(&g->E, h2_transfer_entries(t) * g->el + 1, "H2 transfer matrices", err));
  GK_TRY(gk_buffer_alloc(&g->S, h2_coupling_entries(t) * g->el + 1, "H2 coupling matrices", err));
  GK_TRY(gk_buffer_alloc(&g->D, h2_dense_entries(t) * g->el + 1, "H2 dense blocks", err));
  g->data.U = g->U.ptr;
  g->data.E = g->E.ptr;
  g->data.S = g->S.ptr;
  g->data.D = g->D.ptr;
  {
    h2_geometry geo = h2_geometry_of(t, (const double *) center.ptr, (const double *) half.ptr,
                                     (const double *) points.ptr, (const int *) counts.ptr);
    if (single) GK_TRY(fill_all<float>(t, g, geo, (const int *) node_i.ptr, (const int *) node_j.ptr, err));
    else GK_TRY(fill_all<double>(t, g, geo, (const int *) node_i.ptr, (const int *) node_j.ptr, err));
  }

  GK_TRY(gk_stream_create(&g->low_rank, 1, err));
  GK_TRY(gk_stream_create(&g->dense, 0, err));
  GK_CUDA_TRY(cudaEventCreateWithFlags(&g->forked, cudaEventDisableTiming), "H2 events", err);
  GK_CUDA_TRY(cudaEventCreateWithFlags(&g->joined, cudaEventDisableTiming), "H2 events", err);
  // One cuBLAS handle per stream: a handle's workspace must not be shared by
  // two streams running at once.
  if (gk_cublas_status(cublasCreate(&g->blas_low_rank), "creating a cuBLAS handle", err)) goto fail;
  if (gk_cublas_status(cublasCreate(&g->blas_dense), "creating a cuBLAS handle", err)) goto fail;
  if (gk_cublas_status(cublasSetStream(g->blas_low_rank, (cudaStream_t) g->low_rank), "cuBLAS", err) ||
      gk_cublas_status(cublasSetStream(g->blas_dense, (cudaStream_t) g->dense), "cuBLAS", err))
    goto fail;

  gk_buffer_free(&center);
  gk_buffer_free(&half);
  gk_buffer_free(&points);
  gk_buffer_free(&counts);
  gk_buffer_free(&node_i);
  gk_buffer_free(&node_j);
  *out = g;
  return GK_OK;
fail:
  gk_buffer_free(&center);
  gk_buffer_free(&half);
  gk_buffer_free(&points);
  gk_buffer_free(&counts);
  gk_buffer_free(&node_i);
  gk_buffer_free(&node_j);
  h2_gpu_free(g);
  return err->status;
}

/* ---- products ---------------------------------------------------------------- */

/* The workspace for nrhs right-hand sides, kept between calls and grown when
 * a call needs more. */
static gk_status ensure_workspace(const h2_tree *t, h2_gpu *g, int nrhs, gk_error *err)
{
  if (g->work_nrhs >= nrhs) return GK_OK;
  gk_buffer_free(&g->xp);
  gk_buffer_free(&g->yp);
  gk_buffer_free(&g->xhat);
  gk_buffer_free(&g->yhat);
  gk_buffer_free(&g->xio);
  g->work_nrhs = 0;
  size_t rows = (size_t) t->n_leaves * t->leaf_size, tree = (size_t) t->n_nodes * t->rank;
  if (gk_buffer_alloc(&g->xp, rows * nrhs * g->el, "the H2 product workspace", err) ||
      gk_buffer_alloc(&g->yp, rows * nrhs * g->el, "the H2 product workspace", err) ||
      gk_buffer_alloc(&g->xhat, tree * nrhs * g->el, "the H2 product workspace", err) ||
      gk_buffer_alloc(&g->yhat, tree * nrhs * g->el, "the H2 product workspace", err) ||
      gk_buffer_alloc(&g->xio, (size_t) t->n * nrhs * sizeof(double), "the H2 product workspace", err))
    return err->status;
  g->work_nrhs = nrhs;
  return GK_OK;
}

static gk_status run_hmv(const h2_tree *t, h2_gpu *g, int nrhs, gk_error *err)
{
  gpu_ctx cx = {g, t};
  h2_work w = {g->xp.ptr, g->yp.ptr, g->xhat.ptr, g->yhat.ptr};
  h2_ops ops = {&cx, g->el, gpu_gemm_strided, gpu_bsr, gpu_zero, gpu_fork, gpu_join};
  return h2_hmv(t, &ops, &g->data, &w, nrhs, err);
}

extern "C" gk_status h2_gpu_matmul(const h2_tree *t, h2_gpu *g, const double *x, int nrhs,
                                   double *y, gk_error *err)
{
  cudaStream_t s = (cudaStream_t) g->low_rank;
  size_t rows = (size_t) t->n_leaves * t->leaf_size, total = (size_t) t->n * nrhs;
  GK_TRY(ensure_workspace(t, g, nrhs, err));
  GK_CUDA_TRY(cudaMemcpyAsync(g->xio.ptr, x, total * sizeof(double), cudaMemcpyHostToDevice, s),
              "uploading the H2 product's input", err);
  GK_CUDA_TRY(cudaMemsetAsync(g->xp.ptr, 0, rows * nrhs * g->el, s), "the H2 input", err);
  if (g->single)
    scatter_input<float><<<grid_for(total), 256, 0, s>>>((const double *) g->xio.ptr,
      (const int *) g->slot_of_point.ptr, t->n, nrhs, rows, (float *) g->xp.ptr);
  else
    scatter_input<double><<<grid_for(total), 256, 0, s>>>((const double *) g->xio.ptr,
      (const int *) g->slot_of_point.ptr, t->n, nrhs, rows, (double *) g->xp.ptr);
  GK_TRY(gk_cuda_check_launch("the H2 input permutation", err));
  GK_TRY(run_hmv(t, g, nrhs, err));
  if (g->single)
    gather_output<float><<<grid_for(total), 256, 0, s>>>((const float *) g->yp.ptr,
      (const int *) g->slot_of_point.ptr, t->n, nrhs, rows, (double *) g->xio.ptr);
  else
    gather_output<double><<<grid_for(total), 256, 0, s>>>((const double *) g->yp.ptr,
      (const int *) g->slot_of_point.ptr, t->n, nrhs, rows, (double *) g->xio.ptr);
  GK_TRY(gk_cuda_check_launch("the H2 output permutation", err));
  GK_CUDA_TRY(cudaMemcpyAsync(y, g->xio.ptr, total * sizeof(double), cudaMemcpyDeviceToHost, s),
              "downloading the H2 product", err);
  GK_TRY(gk_stream_sync(g->low_rank, "the H2 product", err));
  return GK_OK;
fail:
  cudaDeviceSynchronize();
  return err->status;
}

extern "C" gk_status h2_gpu_time_hmv(const h2_tree *t, h2_gpu *g, int nrhs, int reps,
                                     int cublas_only, double *ms, gk_error *err)
{
  cudaStream_t s = (cudaStream_t) g->low_rank;
  cudaEvent_t start = NULL, stop = NULL;
  std::vector<double> times;
  size_t rows = (size_t) t->n_leaves * t->leaf_size;
  if (reps < 1) reps = 1;
  GK_TRY(ensure_workspace(t, g, nrhs, err));
  GK_CUDA_TRY(cudaMemsetAsync(g->xp.ptr, 0, rows * nrhs * g->el, s), "the H2 input", err);
  GK_CUDA_TRY(cudaEventCreate(&start), "timing events", err);
  GK_CUDA_TRY(cudaEventCreate(&stop), "timing events", err);
  for (int r = -2; r < reps; r++) {  // two warm-up runs
    GK_CUDA_TRY(cudaEventRecord(start, s), "timing events", err);
    g->force_cublas = cublas_only;
    gk_status status = run_hmv(t, g, nrhs, err);
    g->force_cublas = 0;
    GK_TRY(status);
    GK_CUDA_TRY(cudaEventRecord(stop, s), "timing events", err);
    GK_CUDA_TRY(cudaEventSynchronize(stop), "the timed H2 product", err);
    float elapsed = 0.0f;
    GK_CUDA_TRY(cudaEventElapsedTime(&elapsed, start, stop), "timing events", err);
    if (r >= 0) times.push_back(elapsed);
  }
  std::sort(times.begin(), times.end());
  *ms = times[times.size() / 2];
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return GK_OK;
fail:
  cudaDeviceSynchronize();
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  return err->status;
}

extern "C" void h2_gpu_free(h2_gpu *g)
{
  if (!g) return;
  if (g->low_rank) cudaStreamSynchronize((cudaStream_t) g->low_rank);
  if (g->dense) cudaStreamSynchronize((cudaStream_t) g->dense);
  gk_device_buffer *bufs[] = {&g->U, &g->E, &g->S, &g->D, &g->slot_of_point, &g->cpl_row,
                              &g->cpl_col, &g->dense_row, &g->dense_col, &g->cpl_ptrs,
                              &g->dense_ptrs, &g->cpl_row_ptr, &g->cpl_row_blocks,
                              &g->dense_row_ptr, &g->dense_row_blocks, &g->xp, &g->yp, &g->xhat, &g->yhat, &g->xio};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gk_buffer_free(bufs[i]);
  if (g->blas_low_rank) cublasDestroy(g->blas_low_rank);
  if (g->blas_dense) cublasDestroy(g->blas_dense);
  if (g->forked) cudaEventDestroy(g->forked);
  if (g->joined) cudaEventDestroy(g->joined);
  gk_stream_destroy(&g->low_rank);
  gk_stream_destroy(&g->dense);
  free(g);
}
