/*
 * Orthogonalization and compression of a GPU H2 matrix (h2_compress.h): the
 * steps of h2_compress_cpu.c, level by level, with the nodes (or blocks) of a
 * level as one batch:
 * - The orthogonalization's QR factorizations (leaf bases, stacked
 *   transfers) by small_qr_kernel (h2_small_qr.cuh): one thread block per
 *   matrix in shared memory, R and the first columns of Q written out in one
 *   launch (Q's halves straight into the children's transfers). Shapes beyond
 *   it (more than 256 rows, or beyond the block's shared memory: 250 x 125 in
 *   double, order 5 in 3D) take cuBLAS geqrfBatched (a matrix with fewer rows
 *   than columns padded with zero rows, which leaves R and the used part of Q
 *   unchanged), take_r and form_q (one thread block per matrix; cuBLAS and
 *   cuSOLVER have no batched orgqr).
 * - The downsweep's stacks [R_parent E_i^T; S_e^T ...] (R only) by
 *   stack_qr_kernel (h2_stack_qr.cuh): one thread block per node, R in shared
 *   memory, the rows streamed from the heads and the coupling blocks where
 *   they lie, so no stack is formed. geqrfBatched reached ~0.5 TFLOP/s there.
 *   Levels whose rank exceeds the kernel's limit (kl <= 240 in double, 256 in
 *   float on an H100), or the tunable GK_H2_STACK_QR_MAX_RANK, take the former
 *   path: passes of P blocks (the tunable GK_H2_STACK_PIECES), each handing
 *   geqrfBatched pointer arrays of the nodes that take part.
 * - Products: cuBLAS strided-batched GEMMs; the couplings' projections
 *   T_i S T_j^T through pointer arrays (gemmBatched), marshaled per chunk.
 * - The SVDs of the truncation run on the GPU too: a batched one-sided
 *   Jacobi SVD in double, one thread block per matrix in shared memory
 *   (h2_svd_cuda.cu), giving what h2_svd_left_batch gives (singular values
 *   descending, orthonormal left singular vectors). Not cuSOLVER: its
 *   gesvdjBatched and syevjBatched take matrices up to 32 x 32 only, the
 *   weighted bases here are k x k at the leaves and up to 2k x k above
 *   (k = 64 for order 4 in 3D, 125 for order 5), and gesvdaStridedBatched
 *   (Gram based, rows >= columns) loses the small singular values that the
 *   rank choice sums. Only the singular values cross the bus (the rank choice
 *   is on the host); the singular vectors stay on the GPU, where the
 *   projections T_i, the new leaf bases and the new transfers are formed.
 *   A level whose matrices do not fit in one block's shared memory (about
 *   227 KB on an H100: 2k x k beyond k ~ 120) is done on the host
 *   (h2_svd_left_batch, LAPACK, OpenMP over the nodes) as before.
 * Memory: the result shares the dense leaf blocks with the input (they do not
 * change), or keeps them on the fly as an on-the-fly input does (whose
 * couplings are evaluated a chunk at a time where they are read, never
 * stored: compressing an order that could never be stored). The other
 * workspaces are per level (R factors and projections T, each nodes x k x k),
 * chunks of the orthogonal couplings (project_chunk_bytes()) or chunks of at most
 * WORK_CHUNK_BYTES (the downsweep's heads R_parent E_i^T, or its stacks on the
 * fallback path; the projection products). The arithmetic is in the
 * matrix's precision; the SVDs in double.
 */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <algorithm>
#include <vector>
#include "h2/h2_cuda_impl.cuh"
#include "h2/h2_compress.h"
#include "h2/h2_svd_cuda.cuh"
#include "h2/h2_stack_qr.cuh"
#include "h2/h2_small_qr.cuh"
#include "device/gk_hooks.h"
#include "device/gk_tunables.h"

// The largest workspace a chunked step allocates at once.
static const size_t WORK_CHUNK_BYTES = (size_t) 1 << 30;

/* Bytes of one chunk of a level's orthogonal couplings, projected just before
 * its stack QRs (generate_level): larger chunks mean fewer QR launches (each
 * ends with a partly idle wave), smaller ones less memory to allocate and
 * free (about 3 and 5 ms per GB on an H100). The tunable
 * GK_H2_PROJECT_CHUNK_MB, 4 GB by default: at 2^20 points in 3D as fast as a
 * level at a time, and faster than 1 GB. */
static size_t project_chunk_bytes(void)
{
  return (size_t) gk_tunable(GK_TUNE_H2_PROJECT_CHUNK_MB) << 20;
}

static double seconds_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static unsigned grid_of(size_t total)
{
  size_t blocks = (total + 255) / 256;
  return (unsigned) std::min<size_t>(std::max<size_t>(blocks, 1), 132 * 64);
}

/* ---- kernels ---------------------------------------------------------------- */

template <typename T>
__global__ void strided_ptrs(T **p, T *base, size_t stride, int count)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) p[i] = base + (size_t) i * stride;
}

/* r_b = the first `rows` rows of the upper triangle of a_b (n columns), zero
 * below the diagonal; rows <= lda. */
template <typename T>
__global__ void take_r(const T *a, int lda, size_t sa, int n, T *r, int rows, size_t sr,
                       size_t total)
{
  size_t per = (size_t) rows * n;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    size_t b = e / per, rem = e % per;
    int i = (int) (rem % rows), j = (int) (rem / rows);
    r[b * sr + i + (size_t) j * rows] = i <= j ? a[b * sa + i + (size_t) j * lda] : (T) 0;
  }
}

/* The first r columns of Q = H_0 ... H_{p-1} (rows 0..m-1) from the
 * reflectors of geqrf (below the diagonal of a_b, scalars in tau_b), one
 * thread block per matrix and one thread per column of Q. */
template <typename T>
__global__ void form_q(const T *a, int lda, size_t sa, const T *tau, int ntau, int m, int p,
                       int r, T *q, int ldq, size_t sq)
{
  const T *A = a + blockIdx.x * sa;
  const T *tb = tau + (size_t) blockIdx.x * ntau;
  T *Q = q + blockIdx.x * sq;
  for (int c = threadIdx.x; c < r; c += blockDim.x) {
    T *col = Q + (size_t) c * ldq;
    for (int i = 0; i < m; i++) col[i] = i == c ? (T) 1 : (T) 0;
    for (int j = p - 1; j >= 0; j--) {
      T t = tb[j];
      if (t == (T) 0) continue;
      const T *v = A + (size_t) j * lda;   // v = [1; a(j+1:m, j)]
      T dot = col[j];
      for (int i = j + 1; i < m; i++) dot += v[i] * col[i];
      dot *= t;
      col[j] -= dot;
      for (int i = j + 1; i < m; i++) col[i] -= dot * v[i];
    }
  }
}

/* The halves of each stacked Q (rows = 2 kc, r columns) into the transfers of
 * the two children (kc x r each, consecutive). */
template <typename T>
__global__ void split_halves(const T *q, int kc, int r, T *e, size_t total)
{
  size_t per = (size_t) 2 * kc * r;
  for (size_t x = blockIdx.x * (size_t) blockDim.x + threadIdx.x; x < total;
       x += (size_t) gridDim.x * blockDim.x) {
    size_t node = x / per, rem = x % per;
    int c = (int) (rem / ((size_t) kc * r)), rr = (int) (rem % ((size_t) kc * r));
    int a = rr % kc, j = rr / kc;
    e[node * per + (size_t) c * kc * r + a + (size_t) j * kc] =
      q[node * per + (size_t) c * kc + a + (size_t) j * 2 * kc];
  }
}

/* b_i = a_i^T for the rows x cols matrices a_i (consecutive; b_i: cols x rows). */
template <typename T>
__global__ void transpose_each(const T *a, int rows, int cols, T *b, size_t total)
{
  size_t per = (size_t) rows * cols;
  for (size_t x = blockIdx.x * (size_t) blockDim.x + threadIdx.x; x < total;
       x += (size_t) gridDim.x * blockDim.x) {
    size_t node = x / per, rem = x % per;
    int i = (int) (rem % rows), j = (int) (rem / rows);
    b[node * per + j + (size_t) i * cols] = a[x];
  }
}

/* The downsweep factors node i's stack in passes of at most P coupling blocks
 * (P = the stack pieces): pass 0 takes the first `first_pieces` blocks under
 * R_parent E_i^T (the remainder, so that every later pass is full), pass
 * p >= 1 the next P under the R factor of the pass before. A node with no
 * blocks has one pass of its head alone. */
__host__ __device__ static inline int stack_passes(int blocks, int P)
{
  return blocks ? (blocks + P - 1) / P : 1;
}
__host__ __device__ static inline int first_pieces(int blocks, int P)
{
  return blocks - (stack_passes(blocks, P) - 1) * P;
}

/* The pointers of the listed stacks (slot list_j - first of the chunk). */
template <typename T>
__global__ void stack_ptrs(T **a, T **tau, const int *list, int count, int first, T *M,
                           size_t per, T *taus, int ntau)
{
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= count) return;
  size_t slot = (size_t) (list[j] - first);
  a[j] = M + slot * per;
  tau[j] = taus + slot * ntau;
}

/* Rows head .. rows-1 of the listed stacks (leading dimension ld, slot stride
 * per): S_e^T for the blocks of the node's block row that pass `pass` takes,
 * kl rows each, zero below them (a stack padded to kl rows). */
template <typename T>
__global__ void fill_stack(const T *S, const int *row_ptr, const int *row_blocks, const int *list,
                           int first, int pass, int P, int kl, int head, int rows, int ld,
                           size_t per, T *M, size_t total)
{
  size_t kk = (size_t) kl * kl, height = (size_t) (rows - head), each = height * kl;
  for (size_t x = blockIdx.x * (size_t) blockDim.x + threadIdx.x; x < total;
       x += (size_t) gridDim.x * blockDim.x) {
    size_t b = x / each, rem = x % each;
    int r = (int) (rem % height), c = (int) (rem / height), e = r / kl, rr = r % kl;
    int node = list[b], begin = row_ptr[node], blocks = row_ptr[node + 1] - begin;
    int lead = first_pieces(blocks, P);
    int pieces = pass == 0 ? lead : P, e_first = pass == 0 ? 0 : lead + (pass - 1) * P;
    T v = (T) 0;
    if (e < pieces) v = S[(size_t) row_blocks[begin + e_first + e] * kk + c + (size_t) rr * kl];
    M[(size_t) (node - first) * per + head + r + (size_t) c * ld] = v;
  }
}

/* After a pass: the R factor (kl x kl, top of each listed stack) stays in
 * place for the node's next pass (zero below the diagonal) or, after its
 * last pass, goes to R (kl x kl per node of the level). */
template <typename T>
__global__ void finish_pass(T *M, int ld, size_t per, const int *list, int first,
                            const int *row_ptr, int pass, int P, int kl, T *R, size_t total)
{
  size_t kk = (size_t) kl * kl;
  for (size_t x = blockIdx.x * (size_t) blockDim.x + threadIdx.x; x < total;
       x += (size_t) gridDim.x * blockDim.x) {
    size_t b = x / kk, rem = x % kk;
    int i = (int) (rem % kl), j = (int) (rem / kl), node = list[b];
    T *a = M + (size_t) (node - first) * per + i + (size_t) j * ld;
    if (pass + 1 < stack_passes(row_ptr[node + 1] - row_ptr[node], P)) {
      if (i > j) *a = (T) 0;
    } else {
      R[node * kk + i + (size_t) j * kl] = i <= j ? *a : (T) 0;
    }
  }
}

/* Entry i of the pointer arrays of the projection S' = (T_row(s) S) T_col(s)^T
 * of block s (level-local storage index; tmp: kn x k per entry), its S at
 * `from` and its S' to `to` (the two batched GEMMs of xform::projection_gemms). */
template <typename T>
__device__ void projection_pointers(int i, int s, const int *row, const int *col, const T *Tl,
                                    int kn, int k, const T *from, T *tmp, T *to, const T **a1,
                                    const T **b1, T **c1, const T **a2, const T **b2, T **c2)
{
  size_t tk = (size_t) kn * k;
  a1[i] = Tl + (size_t) row[s] * tk;
  b1[i] = from;
  c1[i] = tmp + (size_t) i * tk;
  a2[i] = tmp + (size_t) i * tk;
  b2[i] = Tl + (size_t) col[s] * tk;
  c2[i] = to;
}

/* Pointers of the projection for the blocks first .. first + count - 1 of a
 * level (S_s at S + (s - s_first) k^2: the level's stored blocks with s_first
 * = 0, or a chunk of them evaluated from s_first on; S'_s at out + s kn^2). */
template <typename T>
__global__ void marshal_projection(const int *row, const int *col, int first, int count,
                                   const T *Tl, int kn, int k, const T *S, int s_first, T *tmp,
                                   T *out,
                                   const T **a1, const T **b1, T **c1, const T **a2,
                                   const T **b2, T **c2)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  int s = first + i;
  projection_pointers(i, s, row, col, Tl, kn, k, S + (size_t) (s - s_first) * k * k, tmp,
                      out + (size_t) s * kn * kn, a1, b1, c1, a2, b2, c2);
}

/* The same for the blocks at row-order positions p_first .. p_first + count - 1
 * of a level (row_blocks: the storage index of each position; out: their
 * S' one after the other, in row order), and the row-order positions' own
 * indices for a stack QR that reads out: iota[p] = p - p_first. S holds the
 * level's stored blocks, or (in_order) just these, evaluated in row order. */
template <typename T>
__global__ void marshal_projection_rows(const int *row_blocks, const int *row, const int *col,
                                        size_t p_first, int count, const T *Tl, int kn, int k,
                                        const T *S, int in_order, T *tmp, T *out, int *iota,
                                        const T **a1, const T **b1, T **c1, const T **a2,
                                        const T **b2, T **c2)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  size_t p = p_first + i;
  int s = row_blocks[p];
  projection_pointers(i, s, row, col, Tl, kn, k, S + (size_t) (in_order ? i : s) * k * k, tmp,
                      out + (size_t) i * kn * kn, a1, b1, c1, a2, b2, c2);
  iota[p] = i;
}

// iota[i] += by, i < count (marshal_projection_rows writes sub-chunk indices).
__global__ void shift_iota(int *iota, int count, int by)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) iota[i] += by;
}

/* ---- cuBLAS, both precisions ---------------------------------------------------- */

static cublasStatus_t gemm_sb(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const double *a, int lda, long long sa,
                              const double *b, int ldb, long long sb, double *c, int ldc,
                              long long sc, int count)
{
  const double one = 1.0, zero = 0.0;
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &zero, c,
                                   ldc, sc, count);
}
static cublasStatus_t gemm_sb(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const float *a, int lda, long long sa, const float *b,
                              int ldb, long long sb, float *c, int ldc, long long sc, int count)
{
  const float one = 1.0f, zero = 0.0f;
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &zero, c,
                                   ldc, sc, count);
}
static cublasStatus_t gemm_pb(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const double **a, int lda, const double **b, int ldb,
                              double **c, int ldc, int count)
{
  const double one = 1.0, zero = 0.0;
  return cublasDgemmBatched(h, ta, tb, m, n, k, &one, a, lda, b, ldb, &zero, c, ldc, count);
}
static cublasStatus_t gemm_pb(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const float **a, int lda, const float **b, int ldb,
                              float **c, int ldc, int count)
{
  const float one = 1.0f, zero = 0.0f;
  return cublasSgemmBatched(h, ta, tb, m, n, k, &one, a, lda, b, ldb, &zero, c, ldc, count);
}
static cublasStatus_t geqrf_b(cublasHandle_t h, int m, int n, double **a, int lda, double **tau,
                              int *info, int count)
{
  return cublasDgeqrfBatched(h, m, n, a, lda, tau, info, count);
}
static cublasStatus_t geqrf_b(cublasHandle_t h, int m, int n, float **a, int lda, float **tau,
                              int *info, int count)
{
  return cublasSgeqrfBatched(h, m, n, a, lda, tau, info, count);
}
static cublasStatus_t nrm2(cublasHandle_t h, int n, const double *x, double *r)
{
  return cublasDnrm2(h, n, x, 1, r);
}
static cublasStatus_t nrm2(cublasHandle_t h, int n, const float *x, double *r)
{
  float f = 0.0f;
  cublasStatus_t st = cublasSnrm2(h, n, x, 1, &f);
  *r = f;
  return st;
}

/* ---- the transform ------------------------------------------------------------- */

/* GPU time of stretches of one stream, from pairs of events (read after the
 * stream is synchronized): a phase's share without synchronizing inside it. */
struct stream_clock {
  std::vector<cudaEvent_t> ev;
  size_t used = 0;
  ~stream_clock()
  {
    for (auto e : ev) cudaEventDestroy(e);
  }
  cudaError_t mark(cudaStream_t s)
  {
    if (used == ev.size()) {
      cudaEvent_t e;
      cudaError_t st = cudaEventCreate(&e);
      if (st != cudaSuccess) return st;
      ev.push_back(e);
    }
    return cudaEventRecord(ev[used++], s);
  }
  double take_seconds()
  {
    double ms = 0.0;
    for (size_t i = 0; i + 1 < used; i += 2) {
      float d = 0.0f;
      if (cudaEventElapsedTime(&d, ev[i], ev[i + 1]) == cudaSuccess) ms += d;
    }
    used = 0;
    return 1e-3 * ms;
  }
};

/* Device buffers of one transform, freed together. A released buffer is
 * kept for the next request it can hold: cudaFree synchronizes the device
 * and unmaps the pages (about 5 ms per GB on an H100), and the levels ask
 * for buffers of the same sizes again and again. */
struct work_set {
  struct entry {
    gk_device_buffer buf;
    bool in_use;
  };
  std::vector<entry> bufs;
  ~work_set()
  {
    for (auto &e : bufs) gk_buffer_free(&e.buf);
  }
  // The smallest released buffer of at least `bytes`, taken; NULL if none.
  void *reuse(size_t bytes)
  {
    entry *best = NULL;
    for (auto &e : bufs)
      if (!e.in_use && e.buf.ptr && e.buf.bytes >= bytes && (!best || e.buf.bytes < best->buf.bytes))
        best = &e;
    if (!best) return NULL;
    best->in_use = true;
    return best->buf.ptr;
  }
  // Frees the released buffers (before a new allocation: their memory may
  // be what it needs).
  void trim()
  {
    for (auto &e : bufs)
      if (!e.in_use) gk_buffer_free(&e.buf);
  }
  void keep(gk_device_buffer b) { bufs.push_back({b, true}); }
  void release(const void *p)
  {
    for (auto &e : bufs)
      if (e.buf.ptr == p) e.in_use = false;
  }
};

template <typename T>
struct xform {
  const h2_tree *t;      // the input's structure
  h2_gpu *in;
  cublasHandle_t h;
  cudaStream_t s;
  int threads;
  double flops;
  gk_error *err;
  gk_device_buffer ptrs;  // 6 pointer arrays of ptr_count entries
  int ptr_count;
  // An input computed on the fly (h2_otf.h) stores no dense blocks, and no
  // couplings unless it is itself a compressed one: those are evaluated as
  // built, chunk by chunk, from the tree's geometry on the GPU.
  bool couplings_otf, dense_otf;
  h2_gpu_geometry geo;

  // A device buffer of `count` entries of E (at least one), zeroed when asked.
  template <typename E = T>
  E *alloc(work_set &w, size_t count, const char *what, int zero = 0)
  {
    const size_t bytes = (count ? count : 1) * sizeof(E);
    void *p = w.reuse(bytes);
    if (!p) {
      w.trim();
      gk_device_buffer b = GK_DEVICE_BUFFER_EMPTY;
      if (gk_buffer_alloc(&b, bytes, what, err)) return NULL;
      w.keep(b);
      p = b.ptr;
    }
    if (zero && gk_cuda_status(cudaMemsetAsync(p, 0, bytes, s), what, err)) return NULL;
    return (E *) p;
  }
  // Work on the stream that used p is ordered before any later use of it.
  void release(work_set &w, const void *p) { w.release(p); }
  gk_status blas(cublasStatus_t st, const char *what)
  {
    return gk_cublas_status(st, what, err);
  }
  gk_status launched(const char *what) { return gk_cuda_check_launch(what, err); }

  gk_status gemm_strided(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         const T *a, int lda, size_t sa, const T *b, int ldb, size_t sb, T *c,
                         int ldc, size_t sc, int count)
  {
    if (count <= 0 || m <= 0 || n <= 0) return GK_OK;
    if (k <= 0) return gk_fail(err, GK_ERR_INTERNAL, "an empty product in the H2 compression");
    for (int first = 0; first < count; first += H2_MAX_BATCH) {
      int chunk = std::min(H2_MAX_BATCH, count - first);
      if (blas(gemm_sb(h, ta, tb, m, n, k, a + first * sa, lda, (long long) sa, b + first * sb,
                       ldb, (long long) sb, c + first * sc, ldc, (long long) sc, chunk),
               "the H2 compression's batched products"))
        return err->status;
    }
    return GK_OK;
  }

  /* QR of `count` matrices a_b (ld x n, stride ld n, rows >= `rows` zero
   * beyond the data: ld = max(rows, n)), tau: n per matrix. */
  gk_status qr(T *a, int ld, int n, T *tau, int count)
  {
    T **ap = (T **) ptrs.ptr, **tp = ap + ptr_count;
    for (int first = 0; first < count; first += ptr_count) {
      int chunk = std::min(ptr_count, count - first);
      strided_ptrs<T><<<(chunk + 255) / 256, 256, 0, s>>>(ap, a + (size_t) first * ld * n,
                                                          (size_t) ld * n, chunk);
      strided_ptrs<T><<<(chunk + 255) / 256, 256, 0, s>>>(tp, tau + (size_t) first * n,
                                                          (size_t) n, chunk);
      if (launched("the H2 QR pointer arrays")) return err->status;
      int info = 0;
      if (blas(geqrf_b(h, ld, n, ap, ld, tp, &info, chunk), "the H2 batched QR"))
        return err->status;
      if (info != 0)
        return gk_fail(err, GK_ERR_INTERNAL, "the H2 batched QR rejected argument %d", -info);
    }
    return GK_OK;
  }

  /* QR of the stacks of the listed nodes (rows x n, leading dimension ld;
   * node list_j in slot list_j - first, slots `per` apart, tau n per slot):
   * a pass factors only the nodes that take part in it. */
  gk_status qr_listed(T *a, int ld, size_t per, int rows, int n, T *tau, const int *list,
                      int count, int first, stream_clock &clock)
  {
    T **ap = (T **) ptrs.ptr, **tp = ap + ptr_count;
    for (int f = 0; f < count; f += ptr_count) {
      int chunk = std::min(ptr_count, count - f);
      stack_ptrs<T><<<(chunk + 255) / 256, 256, 0, s>>>(ap, tp, list + f, chunk, first, a, per,
                                                        tau, n);
      if (launched("the H2 QR pointer arrays")) return err->status;
      int info = 0;
      if (gk_cuda_status(clock.mark(s), "the H2 compression's timer", err) ||
          blas(geqrf_b(h, rows, n, ap, ld, tp, &info, chunk), "the H2 batched QR") ||
          gk_cuda_status(clock.mark(s), "the H2 compression's timer", err))
        return err->status;
      if (info != 0)
        return gk_fail(err, GK_ERR_INTERNAL, "the H2 batched QR rejected argument %d", -info);
    }
    return GK_OK;
  }

  gk_status to_host(double *dst, const T *src, size_t count)
  {
    if (!count) return GK_OK;
    std::vector<T> tmp;
    T *stage = (T *) dst;
    if (sizeof(T) != sizeof(double)) {
      try { tmp.resize(count); } catch (...) {
        return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
      }
      stage = tmp.data();
    }
    if (gk_cuda_status(cudaMemcpyAsync(stage, src, count * sizeof(T), cudaMemcpyDeviceToHost, s),
                       "copying the H2 truncation to the host", err) ||
        gk_cuda_status(cudaStreamSynchronize(s), "the H2 compression", err))
      return err->status;
    if (sizeof(T) != sizeof(double))
      for (size_t i = count; i-- > 0;) dst[i] = (double) tmp[i];
    return GK_OK;
  }

  // Doubles computed on the GPU (the singular values) to the host.
  gk_status copy_back(double *dst, const double *src, size_t count)
  {
    if (!count) return GK_OK;
    if (gk_cuda_status(cudaMemcpyAsync(dst, src, count * sizeof(double), cudaMemcpyDeviceToHost, s),
                       "copying the H2 singular values to the host", err) ||
        gk_cuda_status(cudaStreamSynchronize(s), "the H2 compression", err))
      return err->status;
    return GK_OK;
  }

  gk_status to_device(T *dst, const double *src, size_t count)
  {
    if (!count) return GK_OK;
    std::vector<T> tmp;
    const T *stage = (const T *) src;
    if (sizeof(T) != sizeof(double)) {
      try { tmp.resize(count); } catch (...) {
        return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
      }
      for (size_t i = 0; i < count; i++) tmp[i] = (T) src[i];
      stage = tmp.data();
    }
    if (gk_cuda_status(cudaMemcpyAsync(dst, stage, count * sizeof(T), cudaMemcpyHostToDevice, s),
                       "copying the H2 truncation to the GPU", err) ||
        gk_cuda_status(cudaStreamSynchronize(s), "the H2 compression", err))
      return err->status;
    return GK_OK;
  }

  /* Sum of squares of `count` device entries (nrm2 in slices that fit an int). */
  gk_status sum_squares(const T *x, size_t count, double *out)
  {
    const size_t slice = (size_t) 1 << 30;
    double total = 0.0;
    for (size_t first = 0; first < count; first += slice) {
      double r = 0.0;
      if (blas(nrm2(h, (int) std::min(slice, count - first), x + first, &r), "the H2 norm"))
        return err->status;
      total += r * r;
    }
    *out = total;
    return GK_OK;
  }

  /* The two batched GEMMs of marshaled projections f .. f + count - 1
   * (count <= H2_MAX_BATCH): tmp = T_row S, then S' = tmp T_col^T. */
  gk_status projection_gemms(int kn, int k, int f, int count)
  {
    const T **p = (const T **) ptrs.ptr;
    if (blas(gemm_pb(h, CUBLAS_OP_N, CUBLAS_OP_N, kn, k, k, p + f, kn, p + ptr_count + f, k,
                     (T **) (p + 2 * ptr_count) + f, kn, count),
             "the H2 coupling projection") ||
        blas(gemm_pb(h, CUBLAS_OP_N, CUBLAS_OP_T, kn, kn, k, p + 3 * ptr_count + f, kn,
                     p + 4 * ptr_count + f, kn, (T **) (p + 5 * ptr_count) + f, kn, count),
             "the H2 coupling projection"))
      return err->status;
    flops += (double) count * (2.0 * kn * k * k + 2.0 * kn * kn * k);
    return GK_OK;
  }

  /* S' of level l's blocks at row-order positions [p0, p1) (the rows of a
   * chunk of nodes), from the input's couplings (structure st, ranks k) into
   * out (kn x kn each, in row order); iota[p] = p - p0 there (see
   * marshal_projection_rows); *sq gets the sum of their squares. An input
   * computed on the fly has its blocks evaluated here, in row order. */
  gk_status project_rows(const h2_tree *st, const h2_tree *nt, T *const *Tl, int l, size_t p0,
                         size_t p1, T *out, int *iota, double *sq, work_set &w)
  {
    int k = st->level_rank[l], kn = nt->level_rank[l];
    size_t per = (size_t) kn * k + (couplings_otf ? (size_t) k * k : 0);
    int most = (int) std::max<size_t>(1, std::min<size_t>(WORK_CHUNK_BYTES / (per * sizeof(T)),
                                                          std::min<size_t>(ptr_count, p1 - p0)));
    T *tmp = alloc(w, (size_t) most * kn * k, "the H2 projection workspace");
    T *made = couplings_otf ? alloc(w, (size_t) most * k * k, "the H2 couplings evaluated") : NULL;
    if (!tmp || (couplings_otf && !made)) return err->status;
    const int *row = (const int *) in->cpl_row.ptr + st->coupling_offset[l];
    const int *col = (const int *) in->cpl_col.ptr + st->coupling_offset[l];
    const int *row_blocks = (const int *) in->cpl_row_blocks.ptr + st->coupling_offset[l];
    const T *S = (const T *) in->S.ptr + st->coupling_ptr[l];
    const T **p = (const T **) ptrs.ptr;
    for (size_t first = p0; first < p1; first += most) {
      int cnt = (int) std::min<size_t>(most, p1 - first);
      if (couplings_otf &&
          h2_gpu_fill_as_built(st, in, &geo, H2_COUPLING, l, first, cnt, row_blocks, made, s, err))
        return err->status;
      marshal_projection_rows<T><<<(cnt + 255) / 256, 256, 0, s>>>(
        row_blocks, row, col, first, cnt, Tl[l], kn, k, couplings_otf ? made : S,
        couplings_otf ? 1 : 0, tmp, out + (first - p0) * kn * kn,
        iota, p, p + ptr_count, (T **) (p + 2 * ptr_count), p + 3 * ptr_count,
        p + 4 * ptr_count, (T **) (p + 5 * ptr_count));
      if (launched("the H2 projection pointer arrays") || projection_gemms(kn, k, 0, cnt))
        return err->status;
      if (first > p0) {   // the marshaling wrote indices within this sub-chunk
        shift_iota<<<(cnt + 255) / 256, 256, 0, s>>>(iota + first, cnt, (int) (first - p0));
        if (launched("the H2 projection indices")) return err->status;
      }
    }
    release(w, tmp);
    if (made) release(w, made);
    return sum_squares(out, (p1 - p0) * kn * kn, sq);
  }

  /* S'_s = T_row(s) S_s T_col(s)^T for every coupling block of the levels
   * top..q; T[l] is kn x k per node; the source has ranks k (structure st =
   * x.t, the input's couplings: src, or evaluated chunk by chunk when the
   * input computes them on the fly), dst kn (structure nt). Chunks of blocks
   * keep the temporary within WORK_CHUNK_BYTES. */
  gk_status project(const h2_tree *st, const h2_tree *nt, T *const *Tl, const T *src, T *dst,
                    work_set &w)
  {
    // One workspace for every level: the largest chunk of kn x k products
    // (and of the k x k input blocks evaluated).
    auto chunk_of = [&](int l) {
      size_t k = st->level_rank[l], per = (size_t) nt->level_rank[l] * k + (couplings_otf ? k * k : 0);
      int chunk = (int) std::max<size_t>(1, std::min<size_t>(WORK_CHUNK_BYTES / (per * sizeof(T)),
                                                             (size_t) ptr_count));
      return std::min(chunk, st->coupling[l].n_blocks);
    };
    size_t most = 0, most_in = 0;
    for (int l = st->top_level; l <= st->depth; l++) {
      most = std::max(most, (size_t) chunk_of(l) * nt->level_rank[l] * st->level_rank[l]);
      most_in = std::max(most_in, (size_t) chunk_of(l) * st->level_rank[l] * st->level_rank[l]);
    }
    T *tmp = most ? alloc(w, most, "the H2 projection workspace") : NULL;
    T *made = couplings_otf && most_in ? alloc(w, most_in, "the H2 couplings evaluated") : NULL;
    if ((most && !tmp) || (couplings_otf && most_in && !made)) return err->status;
    for (int l = st->top_level; l <= st->depth; l++) {
      int nb = st->coupling[l].n_blocks, k = st->level_rank[l], kn = nt->level_rank[l];
      if (!nb) continue;
      int chunk = chunk_of(l);
      const int *row = (const int *) in->cpl_row.ptr + st->coupling_offset[l];
      const int *col = (const int *) in->cpl_col.ptr + st->coupling_offset[l];
      const T **p = (const T **) ptrs.ptr;
      for (int first = 0; first < nb; first += chunk) {
        int cnt = std::min(chunk, nb - first);
        const T *from = src + st->coupling_ptr[l];
        int from_first = 0;
        if (couplings_otf) {
          if (h2_gpu_fill_as_built(st, in, &geo, H2_COUPLING, l, first, cnt, NULL, made, s, err))
            return err->status;
          from = made;
          from_first = first;
        }
        marshal_projection<T><<<(cnt + 255) / 256, 256, 0, s>>>(
          row, col, first, cnt, Tl[l], kn, k, from, from_first, tmp,
          dst + nt->coupling_ptr[l], p, p + ptr_count, (T **) (p + 2 * ptr_count),
          p + 3 * ptr_count, p + 4 * ptr_count, (T **) (p + 5 * ptr_count));
        if (launched("the H2 projection pointer arrays")) return err->status;
        for (int f = 0; f < cnt; f += H2_MAX_BATCH)
          if (projection_gemms(kn, k, f, std::min(H2_MAX_BATCH, cnt - f))) return err->status;
      }
      // the next chunk's marshaling must not overwrite pointers still in use
      if (gk_cuda_status(cudaStreamSynchronize(s), "the H2 coupling projection", err))
        return err->status;
    }
    if (tmp) release(w, tmp);
    if (made) release(w, made);
    return GK_OK;
  }
};

static gk_status interrupted(gk_error *err)
{
  return gk_fail(err, GK_ERR_INTERRUPTED, "H2 compression interrupted");
}

/* The fallback for the leaves (shapes beyond small_qr_fits): U0_i (m x kq) =
 * Q_i R_i by geqrfBatched on copies padded to ld = max(m, kq) rows, in chunks;
 * Q_i(:, 1:r) to U (m x r per leaf), R_i's first r rows to Tl (r x kq per
 * leaf). */
template <typename T>
static gk_status leaf_qr_cublas(xform<T> &x, work_set &w, const T *U0, T *U, T *Tl, int m,
                                int kq, int r, int nodes)
{
  gk_error *err = x.err;
  int ld = std::max(m, kq);
  int chunk = (int) std::max<size_t>(1, std::min<size_t>(WORK_CHUNK_BYTES / ((size_t) ld * kq * sizeof(T)), nodes));
  T *a = x.alloc(w, (size_t) chunk * ld * kq, "the H2 orthogonalization workspace");
  T *tau = x.alloc(w, (size_t) chunk * kq, "the H2 orthogonalization workspace");
  if (!a || !tau) return err->status;
  for (int first = 0; first < nodes; first += chunk) {
    int cnt = std::min(chunk, nodes - first);
    // column j of leaf i: m entries to a pitch of ld (rows m..ld-1 zero)
    if ((ld > m && gk_cuda_status(cudaMemsetAsync(a, 0, (size_t) cnt * ld * kq * sizeof(T), x.s),
                                  "the H2 orthogonalization", err)) ||
        gk_cuda_status(cudaMemcpy2DAsync(a, ld * sizeof(T), U0 + (size_t) first * m * kq,
                                         m * sizeof(T), m * sizeof(T), (size_t) cnt * kq,
                                         cudaMemcpyDeviceToDevice, x.s),
                       "the H2 orthogonalization", err) ||
        x.qr(a, ld, kq, tau, cnt))
      return err->status;
    size_t total = (size_t) cnt * r * kq;
    take_r<T><<<grid_of(total), 256, 0, x.s>>>(a, ld, (size_t) ld * kq, kq,
                                               Tl + (size_t) first * r * kq, r,
                                               (size_t) r * kq, total);
    form_q<T><<<cnt, 64, 0, x.s>>>(a, ld, (size_t) ld * kq, tau, kq, m, std::min(m, kq), r,
                                  U + (size_t) first * m * r, m, (size_t) m * r);
    if (x.launched("the H2 orthogonalization kernels")) return err->status;
  }
  if (gk_cuda_status(cudaStreamSynchronize(x.s), "the H2 orthogonalization", err))
    return err->status;
  x.release(w, a);
  x.release(w, tau);
  return GK_OK;
}

/* The fallback for an inner level: the stacks z_i = [T_c1 E_c1; T_c2 E_c2]
 * (2 kc x kp, leading dimension ld = max(2 kc, kp), zero below row 2 kc) =
 * Q_i R_i by geqrfBatched (z overwritten); Q_i(:, 1:r)'s halves to the
 * children's transfers En (kc x r each), R_i's first r rows to Tl. */
template <typename T>
static gk_status inner_qr_cublas(xform<T> &x, work_set &w, T *z, int ld, T *En, T *Tl, int kc,
                                 int kp, int r, int nodes)
{
  gk_error *err = x.err;
  int rows = 2 * kc;
  T *tau = x.alloc(w, (size_t) nodes * kp, "the H2 orthogonalization workspace");
  T *qs = x.alloc(w, (size_t) nodes * rows * r, "the H2 orthogonalization workspace");
  if (!tau || !qs || x.qr(z, ld, kp, tau, nodes)) return err->status;
  size_t total = (size_t) nodes * r * kp;
  take_r<T><<<grid_of(total), 256, 0, x.s>>>(z, ld, (size_t) ld * kp, kp, Tl, r,
                                             (size_t) r * kp, total);
  form_q<T><<<nodes, 64, 0, x.s>>>(z, ld, (size_t) ld * kp, tau, kp, rows, std::min(rows, kp), r,
                                  qs, rows, (size_t) rows * r);
  total = (size_t) nodes * rows * r;
  split_halves<T><<<grid_of(total), 256, 0, x.s>>>(qs, kc, r, En, total);
  if (x.launched("the H2 orthogonalization kernels") ||
      gk_cuda_status(cudaStreamSynchronize(x.s), "the H2 orthogonalization", err))
    return err->status;
  x.release(w, tau);
  x.release(w, qs);
  return GK_OK;
}

/* Within a compression the orthogonal form is a working copy: new bases and
 * transfers in w, everything else (the block lists on the GPU, the dense
 * blocks, the streams) the input's, which has the same blocks, and no product
 * plan of its own. It has no couplings: the generation projects them one
 * level at a time (compress_gpu). Making a whole matrix for it (index uploads,
 * product plan, pointer arrays) cost tens of milliseconds at 2^20 points.
 * Freed with free(), its buffers with w. */
template <typename T>
static gk_status working_copy_of(xform<T> &x, work_set &w, const h2_tree *ot, h2_gpu **O)
{
  h2_gpu *c = (h2_gpu *) malloc(sizeof *c);
  if (!c) return gk_fail(x.err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
  *c = *x.in;
  c->dense_refs = NULL;   // not one of the dense blocks' owners
  c->otf = NULL;          // nor of the input's on-the-fly data
  *O = c;
  c->S = GK_DEVICE_BUFFER_EMPTY;
  const size_t counts[2] = {h2_basis_entries(ot), h2_transfer_entries(ot)};
  gk_device_buffer *bufs[2] = {&c->U, &c->E};
  for (int i = 0; i < 2; i++) {
    T *p = x.alloc(w, counts[i], "the H2 orthogonal form");
    if (!p) return x.err->status;
    bufs[i]->ptr = p;
    bufs[i]->bytes = (counts[i] ? counts[i] : 1) * sizeof(T);
  }
  return GK_OK;
}

/* A result of the transform for the structure nt: U, E and S for the caller
 * to write; the dense blocks those of the input, shared, or on the fly as
 * the input's are (a new dense-only h2_otf: the leaves do not change). */
template <typename T>
static gk_status create_result(xform<T> &x, const h2_tree *nt, h2_gpu **out)
{
  h2_otf *dense = NULL;
  if (x.dense_otf && h2_otf_build_dense(nt, &dense, x.err)) return x.err->status;
  return h2_gpu_create_for_transform(nt, x.in->single, x.dense_otf ? NULL : x.in, dense, out,
                                     x.err);
}

/* The orthogonal form of x.in: structure ot, data O (its dense blocks as
 * x.in's, create_result; a working copy without couplings when
 * working_copy), projections T[l] (kn x k per node) kept in w for the caller. */
template <typename T>
static gk_status orthogonalize_gpu(xform<T> &x, work_set &w, h2_tree *ot, h2_gpu **O,
                                   std::vector<T *> &Tl, h2_compress_stats *st, bool working_copy)
{
  const h2_tree *t = x.t;
  gk_error *err = x.err;
  int q = t->depth, top = t->top_level, m = t->leaf_size;
  const int *k = t->level_rank;
  std::vector<int> kn(k, k + q + 1);
  double start = seconds_now();
  if (top <= q) {
    kn[q] = std::min(m, k[q]);
    for (int l = q - 1; l >= 0; l--) kn[l] = l >= top ? std::min(2 * kn[l + 1], k[l]) : 1;
  }
  if (h2_tree_copy(ot, t, err)) return err->status;
  h2_tree_set_ranks(ot, kn.data());
  if (working_copy) {
    if (working_copy_of(x, w, ot, O)) return err->status;
  } else if (create_result(x, ot, O)) {
    return err->status;
  }
  T *U = (T *) (*O)->U.ptr, *E = (T *) (*O)->E.ptr, *S = (T *) (*O)->S.ptr;
  Tl.assign(q + 1, (T *) NULL);
  if (top > q) {  // no low-rank blocks: the same data
    if (gk_cuda_status(cudaMemcpyAsync(U, x.in->U.ptr, h2_basis_entries(t) * sizeof(T),
                                       cudaMemcpyDeviceToDevice, x.s), "the H2 copy", err) ||
        gk_cuda_status(cudaMemcpyAsync(E, x.in->E.ptr, h2_transfer_entries(t) * sizeof(T),
                                       cudaMemcpyDeviceToDevice, x.s), "the H2 copy", err) ||
        gk_cuda_status(cudaMemcpyAsync(S, x.in->S.ptr, h2_coupling_entries(t) * sizeof(T),
                                       cudaMemcpyDeviceToDevice, x.s), "the H2 copy", err))
      return err->status;
    return GK_OK;
  }
  if (gk_cuda_status(cudaMemsetAsync(E, 0, h2_transfer_entries(ot) * sizeof(T), x.s),
                     "the H2 orthogonalization", err))
    return err->status;

  // Leaves: U_i = Q_i T_i, T_i = R_i (r x kq, r = min(m, kq)).
  {
    int kq = k[q], r = kn[q], nodes = t->n_leaves;
    const T *U0 = (const T *) x.in->U.ptr;
    Tl[q] = x.alloc(w, (size_t) nodes * r * kq, "the H2 projection tree");
    if (!Tl[q]) return err->status;
    if (r == std::min(m, kq) && small_qr_fits<T>(m, kq)) {
      small_qr_batch<T> b = {U0, (size_t) m * kq, m, kq, Tl[q], (size_t) r * kq,
                             U, (size_t) m * r, m, m, 0};
      if (gk_cuda_status(small_qr_launch<T>(nodes, b, x.s), "the H2 orthogonalization QR", err) ||
          x.launched("the H2 orthogonalization QR"))
        return err->status;
    } else if (leaf_qr_cublas(x, w, U0, U, Tl[q], m, kq, r, nodes)) {
      return err->status;
    }
    x.flops += 2 * h2_qr_flops(m, kq) * nodes;
    if (gk_cuda_status(cudaStreamSynchronize(x.s), "the H2 orthogonalization", err))
      return err->status;
  }
  // Inner levels: Z = [T_c1 E_c1; T_c2 E_c2] = Q T_parent; Q's halves are the new transfers.
  for (int l = q - 1; l >= top; l--) {
    int kc = kn[l + 1], ko = k[l + 1], kp = k[l], r = kn[l], rows = 2 * kc, nodes = 1 << l;
    const bool fused = r == std::min(rows, kp) && small_qr_fits<T>(rows, kp);
    int ld = fused ? rows : std::max(rows, kp);   // geqrfBatched: zero rows to kp
    T *z = x.alloc(w, (size_t) nodes * ld * kp, "the H2 orthogonalization workspace", ld > rows);
    Tl[l] = x.alloc(w, (size_t) nodes * r * kp, "the H2 projection tree");
    if (!z || !Tl[l]) return err->status;
    const T *E0 = (const T *) x.in->E.ptr + t->transfer_ptr[l + 1];
    for (int c = 0; c < 2; c++)
      if (x.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_N, kc, kp, ko, Tl[l + 1] + (size_t) c * kc * ko, kc,
                         (size_t) 2 * kc * ko, E0 + (size_t) c * ko * kp, ko, (size_t) 2 * ko * kp,
                         z + c * kc, ld, (size_t) ld * kp, nodes))
        return err->status;
    T *En = E + ot->transfer_ptr[l + 1];   // the children's new transfers, kc x r each
    if (fused) {
      small_qr_batch<T> b = {z, (size_t) rows * kp, rows, kp, Tl[l], (size_t) r * kp,
                             En, (size_t) rows * r, kc, kc, (size_t) kc * r};
      if (gk_cuda_status(small_qr_launch<T>(nodes, b, x.s), "the H2 orthogonalization QR", err) ||
          x.launched("the H2 orthogonalization QR"))
        return err->status;
    } else if (inner_qr_cublas(x, w, z, ld, En, Tl[l], kc, kp, r, nodes)) {
      return err->status;
    }
    x.flops += nodes * (4.0 * kc * ko * kp + 2 * h2_qr_flops(rows, kp));
    if (gk_cuda_status(cudaStreamSynchronize(x.s), "the H2 orthogonalization", err))
      return err->status;
    x.release(w, z);
    if (gk_interrupt_pending()) return interrupted(err);
  }
  st->seconds_orthogonalize = seconds_now() - start;
  if (working_copy) return GK_OK;   // the compression projects the couplings as it needs them
  start = seconds_now();
  if (x.project(t, ot, Tl.data(), (const T *) x.in->S.ptr, S, w)) return err->status;
  st->seconds_project = seconds_now() - start;
  return GK_OK;
}

/* Sum of squares of the input's dense blocks: stored, or evaluated in chunks. */
template <typename T>
static gk_status dense_sum_squares(xform<T> &x, work_set &w, double *out)
{
  const h2_tree *t = x.t;
  if (!x.dense_otf) return x.sum_squares((const T *) x.in->D.ptr, h2_dense_entries(t), out);
  size_t mm = (size_t) t->leaf_size * t->leaf_size, blocks = (size_t) t->dense.n_blocks;
  size_t chunk = std::max<size_t>(1, std::min(blocks, WORK_CHUNK_BYTES / (mm * sizeof(T))));
  T *made = x.alloc(w, chunk * mm, "the H2 dense blocks evaluated");
  if (!made) return x.err->status;
  double total = 0.0;
  for (size_t first = 0; first < blocks; first += chunk) {
    size_t count = std::min(chunk, blocks - first);
    double part = 0.0;
    if (h2_gpu_fill_as_built(t, x.in, &x.geo, H2_DENSE, 0, first, count, NULL, made, x.s, x.err) ||
        x.sum_squares(made, count * mm, &part))   // nrm2 returns to the host: made is free again
      return x.err->status;
    total += part;
  }
  x.release(w, made);
  *out = total;
  return GK_OK;
}

/* ||A||_F: the dense blocks (the input's) and, when asked, g's couplings. */
template <typename T>
static gk_status norm_of(xform<T> &x, work_set &w, const h2_tree *t, h2_gpu *g, bool couplings,
                         double *norm)
{
  double s2 = 0.0, d2 = 0.0;
  if ((couplings && x.sum_squares((const T *) g->S.ptr, h2_coupling_entries(t), &s2)) ||
      dense_sum_squares(x, w, &d2))
    return x.err->status;
  *norm = sqrt(s2 + d2);
  return GK_OK;
}

/* The chunks of a level's orthogonal couplings that the downsweep makes just
 * before their QRs (generate_level and generate_level_passes, from the
 * orthogonalization's projections Tl): buffers for the most blocks a chunk
 * holds (project_chunk_bytes(), two rows at least, no more than the level)
 * and the per-chunk index (see marshal_projection_rows). */
template <typename T>
struct coupling_chunks {
  size_t fit = 0;   // blocks a chunk may hold
  T *Sc = NULL;
  int *iota = NULL;

  gk_status alloc(xform<T> &x, work_set &w, const h2_tree *t, int l)
  {
    const h2_bsr *b = &t->coupling[l];
    int nodes = 1 << l;
    size_t block = (size_t) t->level_rank[l] * t->level_rank[l], most = 0;
    fit = std::max<size_t>(1, project_chunk_bytes() / (block * sizeof(T)));
    for (int i = 0; i < nodes; i += 2)
      most = std::max(most, (size_t) (b->row_ptr[std::min(i + 2, nodes)] - b->row_ptr[i]));
    Sc = x.alloc(w, std::max(std::min(fit, (size_t) b->n_blocks), most) * block,
                 "a chunk of the H2 orthogonal couplings");
    iota = x.template alloc<int>(w, (size_t) b->n_blocks, "the H2 stack QR's block indices");
    return Sc && iota ? GK_OK : x.err->status;
  }
  /* The rows first .. first + *cnt - 1 (*cnt shortened to the longest even
   * run, two rows at least, whose blocks fit) projected into Sc. */
  gk_status make(xform<T> &x, work_set &w, const h2_tree *t, int l, T *const *Tl, int first,
                 int *cnt, double *couplings_sq)
  {
    const h2_bsr *b = &t->coupling[l];
    auto blocks_of = [&](int c) { return (size_t) (b->row_ptr[first + c] - b->row_ptr[first]); };
    if (*cnt >= 2) {
      int lo = 1, hi = *cnt / 2;   // in pairs of rows
      while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (blocks_of(2 * mid) <= fit) lo = mid;
        else hi = mid - 1;
      }
      *cnt = 2 * lo;
    }
    double sq = 0.0;
    if (x.project_rows(x.t, t, Tl, l, b->row_ptr[first], b->row_ptr[first + *cnt], Sc, iota, &sq,
                       w))
      return x.err->status;
    *couplings_sq += sq;
    return GK_OK;
  }
  void release(xform<T> &x, work_set &w)
  {
    if (Sc) x.release(w, Sc);
    if (iota) x.release(w, iota);
  }
};

/* Coupling blocks per pass of the downsweep: the tunable GK_H2_STACK_PIECES,
 * 4 by default. Fewer flops at 8 (the carried R is a fifth of the QR work at 4
 * in 3D), but cuBLAS's batched QR is slower on the taller stacks: on an H100
 * at 2^20 points the generation took 1.59 s (3D) and 0.59 s (2D) at 4, 2.29 s
 * and 1.09 s at 8. Tests set 1 and 3 for many passes. */
static int stack_pieces(void)
{
  return (int) gk_tunable(GK_TUNE_H2_STACK_PIECES);
}

/* R[l] by geqrfBatched (the fallback, stack_qr_takes): node i's stack in
 * passes of at most P blocks, R <- R of [R; next P blocks] (stack_passes()).
 * A pass factors only the nodes that take part, grouped by stack height (pass
 * 0: by the number of its blocks; later passes: all (P + 1) kl rows), so no
 * zero rows are factored. Each pass re-factors the k_l rows of R carried over,
 * so a larger P does less work but takes more memory per stack. */
template <typename T>
static gk_status generate_level_passes(xform<T> &x, work_set &w, const h2_tree *t, h2_gpu *O,
                                       int l, int P, std::vector<T *> &R, stream_clock &qr_clock,
                                       T *const *Tl, double *couplings_sq)
{
  gk_error *err = x.err;
  const T *Eo = (const T *) O->E.ptr;
  const int *row_ptr_all = (const int *) O->cpl_row_ptr.ptr;
  const h2_bsr *b = &t->coupling[l];
  int top = t->top_level, kl = t->level_rank[l], nodes = 1 << l, passes = 1;
  int kp = l > top ? t->level_rank[l - 1] : 0;
  int ld = std::max(kp, kl) + P * kl;
  size_t per = (size_t) ld * kl;
  int chunk = (int) std::max<size_t>(2, std::min<size_t>(WORK_CHUNK_BYTES / (per * sizeof(T)), nodes));
  chunk = std::min(chunk - chunk % 2, nodes);   // even: both children of a parent
  if (chunk < 1) chunk = 1;
  // The groups of one height: pass 0 with r = 0 .. P blocks, then passes 1, 2, ...
  // (ascending node lists, concatenated in `lists`, group g at group_ptr[g]).
  std::vector<int> lists, group_ptr, group_pass, group_pieces;
  try {
    for (int i = 0; i < nodes; i++)
      passes = std::max(passes, stack_passes(b->row_ptr[i + 1] - b->row_ptr[i], P));
    for (int r = 0; r <= P; r++) {
      group_ptr.push_back((int) lists.size());
      group_pass.push_back(0);
      group_pieces.push_back(r);
      for (int i = 0; i < nodes; i++)
        if (first_pieces(b->row_ptr[i + 1] - b->row_ptr[i], P) == r) lists.push_back(i);
    }
    for (int p = 1; p < passes; p++) {
      group_ptr.push_back((int) lists.size());
      group_pass.push_back(p);
      group_pieces.push_back(P);
      for (int i = 0; i < nodes; i++)
        if (stack_passes(b->row_ptr[i + 1] - b->row_ptr[i], P) > p) lists.push_back(i);
    }
    group_ptr.push_back((int) lists.size());
  } catch (...) {
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
  }
  R[l] = x.alloc(w, (size_t) nodes * kl * kl, "the H2 compression's R factors");
  T *M = x.alloc(w, (size_t) chunk * per, "the H2 compression's stacks");
  T *tau = x.alloc(w, (size_t) chunk * kl, "the H2 compression's stacks");
  int *dlists = x.template alloc<int>(w, lists.size(), "the H2 compression's stack lists");
  if (!R[l] || !M || !tau || !dlists ||
      gk_cuda_status(cudaMemcpyAsync(dlists, lists.data(), lists.size() * sizeof(int),
                                     cudaMemcpyHostToDevice, x.s),
                     "the H2 compression's stack lists", err))
    return err->status;
  const int *row_ptr = row_ptr_all + t->level_ptr[l] + l;
  // Each chunk of rows has its orthogonal couplings projected first
  // (coupling_chunks), and the stacks read them there.
  coupling_chunks<T> cc;
  if (cc.alloc(x, w, t, l)) return err->status;
  for (int first = 0, cnt = 0; first < nodes; first += cnt) {
    cnt = std::min(chunk, nodes - first);
    if (cc.make(x, w, t, l, Tl, first, &cnt, couplings_sq)) return err->status;
    if (kp) {   // the heads R_parent E_i^T of every node of the chunk
      for (int c = 0; c < 2; c++) {   // nodes first + c + 2j have the parents first/2 + j
        int count = (cnt - c + 1) / 2;
        if (x.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_T, kp, kl, kp,
                           R[l - 1] + (size_t) (first / 2) * kp * kp, kp, (size_t) kp * kp,
                           Eo + t->transfer_ptr[l] + (size_t) (first + c) * kl * kp, kl,
                           (size_t) 2 * kl * kp, M + (size_t) c * per, ld, 2 * per, count))
          return err->status;
      }
    }
    for (size_t g = 0; g + 1 < group_ptr.size(); g++) {
      const int *gb = lists.data() + group_ptr[g], *ge = lists.data() + group_ptr[g + 1];
      int lo = (int) (std::lower_bound(gb, ge, first) - lists.data());
      int count = (int) (std::lower_bound(gb, ge, first + cnt) - lists.data()) - lo;
      if (count <= 0) continue;
      int pass = group_pass[g], head = pass == 0 ? kp : kl;
      int rows = std::max(head + group_pieces[g] * kl, kl);
      if (rows > head) {
        size_t total = (size_t) count * (rows - head) * kl;
        fill_stack<T><<<grid_of(total), 256, 0, x.s>>>(cc.Sc, row_ptr, cc.iota, dlists + lo,
                                                        first, pass, P, kl, head, rows, ld, per,
                                                        M, total);
        if (x.launched("the H2 compression's stacks")) return err->status;
      }
      if (x.qr_listed(M, ld, per, rows, kl, tau, dlists + lo, count, first, qr_clock))
        return err->status;
      size_t total = (size_t) count * kl * kl;
      finish_pass<T><<<grid_of(total), 256, 0, x.s>>>(M, ld, per, dlists + lo, first, row_ptr,
                                                       pass, P, kl, R[l], total);
      if (x.launched("the H2 compression's R factors")) return err->status;
      // the work done: the carried R factors re-factored included
      x.flops += count * (h2_qr_flops(rows, kl) + (pass == 0 ? 2.0 * kp * kp * kl : 0.0));
    }
  }
  if (gk_cuda_status(cudaStreamSynchronize(x.s), "the H2 compression", err))
    return err->status;
  x.release(w, M);
  x.release(w, tau);
  x.release(w, dlists);
  cc.release(x, w);
  return GK_OK;
}

/* Whether level rank kl takes the stack QR kernel: where it fits, up to the
 * tunable GK_H2_STACK_QR_MAX_RANK (the kernel's limit by default; tests set 0
 * so that small matrices take the passes of generate_level_passes, which
 * otherwise only ranks beyond the kernel reach). */
template <typename T>
static bool stack_qr_takes(int kl)
{
  return kl <= (int) gk_tunable(GK_TUNE_H2_STACK_QR_MAX_RANK) &&
         stack_qr_fits<T, STACK_QR_ROWS>(kl);
}

/* R[l] by stack_qr_kernel: per chunk of nodes the heads as H_i^T = E_i R_parent^T
 * (kl x kp, so that each of the stack's rows is contiguous, as in S_e), then
 * one thread block per node reads them and its coupling blocks in place. */
template <typename T>
static gk_status generate_level(xform<T> &x, work_set &w, const h2_tree *t, h2_gpu *O, int l,
                                std::vector<T *> &R, stream_clock &qr_clock, T *const *Tl,
                                double *couplings_sq)
{
  gk_error *err = x.err;
  const h2_bsr *b = &t->coupling[l];
  int top = t->top_level, kl = t->level_rank[l], nodes = 1 << l;
  int kp = l > top ? t->level_rank[l - 1] : 0;
  size_t per = (size_t) kl * kp;
  // Chunks of nodes (even: both children of a parent). The heads' buffer is
  // sized for the leaf level, so that every level reuses one buffer.
  auto chunk_of = [&](int count) {
    int c = (int) std::max<size_t>(2, std::min<size_t>(WORK_CHUNK_BYTES / (per * sizeof(T)), count));
    return std::min(c - c % 2, count);
  };
  int chunk = per ? chunk_of(nodes) : nodes;
  R[l] = x.alloc(w, (size_t) nodes * kl * kl, "the H2 compression's R factors");
  T *H = per ? x.alloc(w, (size_t) chunk_of(t->n_leaves) * per, "the H2 compression's stack heads")
             : NULL;
  if (!R[l] || (per && !H)) return err->status;
  const T *E = (const T *) O->E.ptr + t->transfer_ptr[l];
  const int *row_ptr = (const int *) O->cpl_row_ptr.ptr + t->level_ptr[l] + l;
  // Each chunk of rows has its orthogonal couplings projected first
  // (coupling_chunks), and the stack QR reads them there.
  coupling_chunks<T> cc;
  if (cc.alloc(x, w, t, l)) return err->status;
  for (int first = 0; first < nodes;) {
    int cnt = std::min(chunk, nodes - first);
    if (cc.make(x, w, t, l, Tl, first, &cnt, couplings_sq)) return err->status;
    for (int c = 0; per && c < 2; c++)   // nodes first + c + 2j have the parents first/2 + j
      if (x.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_T, kl, kp, kp, E + (first + c) * per, kl, 2 * per,
                         R[l - 1] + (size_t) (first / 2) * kp * kp, kp, (size_t) kp * kp,
                         H + c * per, kl, 2 * per, (cnt - c + 1) / 2))
        return err->status;
    if (gk_cuda_status(qr_clock.mark(x.s), "the H2 compression's timer", err) ||
        gk_cuda_status(stack_qr_launch<T, STACK_QR_ROWS>(cnt, H, kp, cc.Sc, row_ptr, cc.iota, kl,
                                                         first, R[l], x.s),
                       "the H2 stack QR", err) ||
        x.launched("the H2 stack QR") ||
        gk_cuda_status(qr_clock.mark(x.s), "the H2 compression's timer", err))
      return err->status;
    first += cnt;
  }
  for (int i = 0; i < nodes; i++) {
    double rows = kp + (double) (b->row_ptr[i + 1] - b->row_ptr[i]) * kl;
    x.flops += 2.0 * kp * kp * kl + h2_qr_flops(rows, kl);
  }
  if (gk_cuda_status(cudaStreamSynchronize(x.s), "the H2 compression", err)) return err->status;
  x.release(w, H);
  cc.release(x, w);
  return GK_OK;
}

/* Compression of the orthogonal form (ot, O: a working copy without
 * couplings, working_copy_of) into (nt, *C). Tl: the orthogonalization's
 * projections (kn x k per node). The orthogonal couplings are projected from
 * the input's (stored, or evaluated in row order when the input computes
 * them on the fly) chunk by chunk of clusters just before the chunk's QRs
 * (coupling_chunks); the new couplings are projected from
 * the input's with the product of both projections. So the orthogonal
 * couplings (27.5 GB at 2^20 points in 3D) are never all allocated;
 * st->norm_frobenius (the dense part on entry, from norm_of) gets their part
 * as they are made. */
template <typename T>
static gk_status compress_gpu(xform<T> &x, work_set &w, const h2_tree *ot, h2_gpu *O, double tol,
                              h2_tree *nt, h2_gpu **C, h2_compress_stats *st, T *const *Tl)
{
  const h2_tree *t = ot;
  gk_error *err = x.err;
  int q = t->depth, top = t->top_level, m = t->leaf_size;
  const int *k = t->level_rank;
  const T *Eo = (const T *) O->E.ptr, *Uo = (const T *) O->U.ptr;
  std::vector<T *> R(q + 1, (T *) NULL), Tn(q + 1, (T *) NULL);
  std::vector<T *> Q(q + 1, (T *) NULL);   // left singular vectors of the truncation
  std::vector<int> rk(q + 1, 1), two(q + 1, 0);
  double start = seconds_now(), discarded_total = 0.0;

  // Downsweep: R_i of the stack [R_parent E_i^T; S_ij^T, j in row i] (Q not formed).
  const int P = stack_pieces();
  stream_clock qr_clock;
  double couplings_sq = 0.0;
  for (int l = top; l <= q; l++) {
    if (stack_qr_takes<T>(k[l]) ? generate_level(x, w, t, O, l, R, qr_clock, Tl, &couplings_sq)
                                : generate_level_passes(x, w, t, O, l, P, R, qr_clock, Tl,
                                                        &couplings_sq))
      return err->status;
    st->seconds_generate_qr += qr_clock.take_seconds();
    if (gk_interrupt_pending()) return interrupted(err);
  }
  st->norm_frobenius = sqrt(st->norm_frobenius * st->norm_frobenius + couplings_sq);
  st->seconds_generate = seconds_now() - start - st->seconds_project;
  start = seconds_now();

  // Truncation upsweep (the budget as in h2_compress_cpu.c): the weighted bases
  // W_i and their SVDs on the GPU (h2_svd_cuda.cu), or on the host (LAPACK)
  // where a W_i does not fit in one block's shared memory; the rank choice on
  // the host, from the singular values. Q[l] keeps Q_i(:, 1:r) on the GPU.
  double budget_all = 0.5 * (tol * st->norm_frobenius) * (tol * st->norm_frobenius), carry = 0.0;
  int levels = q - top + 1;
  std::vector<double> sig, Wh, Qh;   // Wh, Qh: the host path only
  for (int l = q; l >= top; l--) {
    int nodes = 1 << l, kl = k[l];
    int rows = l == q ? kl : 2 * rk[l + 1], km = std::min(rows, kl);
    two[l] = rows;
    T *Z = NULL, *Wd = R[l];   // at the leaves W_i = U_i R_i^T, factored as R_i^T (U orthonormal)
    try {
      sig.resize((size_t) nodes * km);
    } catch (...) {
      return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
    }
    if (l < q) {
      int kc = rk[l + 1], ko = k[l + 1];
      Z = x.alloc(w, (size_t) nodes * rows * kl, "the H2 truncation workspace");
      Wd = x.alloc(w, (size_t) nodes * rows * kl, "the H2 truncation workspace");
      if (!Z || !Wd) return err->status;
      for (int c = 0; c < 2; c++)
        if (x.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_N, kc, kl, ko, Tn[l + 1] + (size_t) c * kc * ko, kc,
                           (size_t) 2 * kc * ko,
                           Eo + t->transfer_ptr[l + 1] + (size_t) c * ko * kl, ko,
                           (size_t) 2 * ko * kl, Z + c * kc, rows, (size_t) rows * kl, nodes))
          return err->status;
      if (x.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_T, rows, kl, kl, Z, rows, (size_t) rows * kl, R[l],
                         kl, (size_t) kl * kl, Wd, rows, (size_t) rows * kl, nodes))
        return err->status;
      x.flops += nodes * (4.0 * kc * ko * kl + 2.0 * rows * kl * kl);
    }
    T *Qd = x.alloc(w, (size_t) nodes * rows * km, "the H2 truncation workspace");
    if (!Qd) return err->status;
    if (h2_svd_gpu_fits(rows, kl)) {
      double *sd = x.template alloc<double>(w, (size_t) nodes * km, "the H2 truncation workspace");
      if (!sd || h2_svd_left_gpu(nodes, rows, kl, Wd, l == q, sd, Qd, x.s, err) ||
          x.copy_back(sig.data(), sd, (size_t) nodes * km))
        return err->status;
      x.release(w, sd);
      x.flops += nodes * h2_svd_flops(rows, kl);
    } else {
      try {
        Wh.resize((size_t) nodes * rows * kl);
        Qh.resize((size_t) nodes * rows * km);
      } catch (...) {
        return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
      }
      if (l == q) {   // R_i^T
        if (x.to_host(Qh.data(), R[q], (size_t) nodes * kl * kl)) return err->status;
        for (int i = 0; i < nodes; i++) {
          const double *ri = Qh.data() + (size_t) i * kl * kl;
          double *wi = Wh.data() + (size_t) i * kl * kl;
          for (int c = 0; c < kl; c++)
            for (int r = 0; r < kl; r++) wi[r + (size_t) c * kl] = ri[c + (size_t) r * kl];
        }
      } else if (x.to_host(Wh.data(), Wd, (size_t) nodes * rows * kl)) {
        return err->status;
      }
      int e = h2_svd_left_batch(nodes, rows, kl, Wh.data(), sig.data(), Qh.data(), x.threads,
                                &x.flops);
      if (e == -1000) return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
      if (e) return gk_fail(err, GK_ERR_INTERNAL, "LAPACK failed in the H2 compression (info = %d)", e);
      if (x.to_device(Qd, Qh.data(), (size_t) nodes * rows * km)) return err->status;
    }
    if (l < q) x.release(w, Wd);
    x.release(w, R[l]);
    double discarded;
    int r = h2_choose_rank(sig.data(), nodes, km, budget_all / levels + carry, &discarded);
    carry += budget_all / levels - discarded;
    discarded_total += discarded;
    rk[l] = r;
    if (r < km) {   // only Q_i(:, 1:r) is used from here on
      Q[l] = x.alloc(w, (size_t) nodes * rows * r, "the H2 truncation's singular vectors");
      if (!Q[l] ||
          gk_cuda_status(cudaMemcpy2DAsync(Q[l], (size_t) rows * r * sizeof(T), Qd,
                                           (size_t) rows * km * sizeof(T),
                                           (size_t) rows * r * sizeof(T), nodes,
                                           cudaMemcpyDeviceToDevice, x.s),
                         "the H2 truncation", err))
        return err->status;
      x.release(w, Qd);
    } else {
      Q[l] = Qd;
    }
    // The projection T_i = Q_i(:, 1:r)^T (old basis), r x k_l.
    Tn[l] = x.alloc(w, (size_t) nodes * r * kl, "the H2 projection tree");
    if (!Tn[l]) return err->status;
    if (l == q) {
      size_t total = (size_t) nodes * kl * r;
      transpose_each<T><<<grid_of(total), 256, 0, x.s>>>(Q[q], kl, r, Tn[q], total);
      if (x.launched("the H2 truncation")) return err->status;
    } else {
      if (x.gemm_strided(CUBLAS_OP_T, CUBLAS_OP_N, r, kl, rows, Q[l], rows, (size_t) rows * r, Z,
                         rows, (size_t) rows * kl, Tn[l], r, (size_t) r * kl, nodes))
        return err->status;
      x.release(w, Z);
      x.flops += 2.0 * nodes * r * kl * rows;
    }
    if (gk_interrupt_pending()) return interrupted(err);
  }
  std::vector<double>().swap(Wh);
  std::vector<double>().swap(Qh);
  for (int l = 0; l < top; l++) rk[l] = 1;
  if (h2_tree_copy(nt, t, err)) return err->status;
  h2_tree_set_ranks(nt, rk.data());
  if (create_result(x, nt, C)) return err->status;

  // New leaf bases U Q(:, 1:r) and transfers (the halves of the parents' Q).
  {
    int kq = k[q], r = rk[q], nodes = t->n_leaves;
    T *En = (T *) (*C)->E.ptr;
    if (x.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_N, m, r, kq, Uo, m, (size_t) m * kq, Q[q], kq,
                       (size_t) kq * r, (T *) (*C)->U.ptr, m, (size_t) m * r, nodes) ||
        gk_cuda_status(cudaMemsetAsync(En, 0, h2_transfer_entries(nt) * sizeof(T), x.s),
                       "the H2 truncation", err))
      return err->status;
    x.flops += 2.0 * nodes * m * r * kq;
    for (int l = q - 1; l >= top; l--) {
      size_t total = ((size_t) 1 << l) * two[l] * rk[l];
      split_halves<T><<<grid_of(total), 256, 0, x.s>>>(Q[l], rk[l + 1], rk[l],
                                                        En + nt->transfer_ptr[l + 1], total);
      if (x.launched("the H2 truncation")) return err->status;
    }
    if (gk_cuda_status(cudaStreamSynchronize(x.s), "the H2 truncation", err)) return err->status;
    for (int l = top; l <= q; l++) x.release(w, Q[l]);
  }
  st->seconds_truncate = seconds_now() - start;
  start = seconds_now();
  // From the input's couplings with both projections: Tn T (r x k per node).
  std::vector<T *> both(q + 1, (T *) NULL);
  for (int l = top; l <= q; l++) {
    int nodes = 1 << l, kin = x.t->level_rank[l];
    both[l] = x.alloc(w, (size_t) nodes * rk[l] * kin, "the H2 projection tree");
    if (!both[l] ||
        x.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_N, rk[l], kin, k[l], Tn[l], rk[l],
                       (size_t) rk[l] * k[l], Tl[l], k[l], (size_t) k[l] * kin, both[l], rk[l],
                       (size_t) rk[l] * kin, nodes))
      return err->status;
    x.flops += 2.0 * nodes * rk[l] * k[l] * kin;
  }
  if (x.project(x.t, nt, both.data(), (const T *) x.in->S.ptr, (T *) (*C)->S.ptr, w))
    return err->status;
  if (gk_cuda_status(cudaStreamSynchronize(x.s), "the H2 compression", err)) return err->status;
  st->seconds_project += seconds_now() - start;
  st->error_frobenius =
    st->norm_frobenius > 0 ? sqrt(2.0 * discarded_total) / st->norm_frobenius : 0.0;
  return GK_OK;
}

template <typename T>
static gk_status transform(const h2_tree *t, h2_gpu *in, double tol, int threads, h2_tree *nt,
                           h2_gpu **out, h2_compress_stats *st, gk_error *err)
{
  xform<T> x = {t, in, NULL, (cudaStream_t) in->low_rank, threads, 0.0, err,
                GK_DEVICE_BUFFER_EMPTY, 0};
  x.couplings_otf = in->otf && in->otf->couplings_on_the_fly;
  x.dense_otf = in->otf != NULL;
  x.geo = {GK_DEVICE_BUFFER_EMPTY, GK_DEVICE_BUFFER_EMPTY, GK_DEVICE_BUFFER_EMPTY,
           GK_DEVICE_BUFFER_EMPTY};
  h2_tree ot;
  h2_gpu *O = NULL;
  std::vector<T *> Tl;
  gk_status status = GK_OK;
  memset(&ot, 0, sizeof ot);
  // A compression's orthogonal form is a working copy; an orthogonalization's is the result.
  const bool working_copy = tol > 0 && t->top_level <= t->depth;
  {
    work_set w;
    x.ptr_count = H2_MAX_BATCH;
    if (gk_cublas_handle(GK_BLAS_LANE_0, in->low_rank, &x.h, err) ||
        gk_buffer_alloc(&x.ptrs, 6 * (size_t) x.ptr_count * sizeof(void *),
                        "the H2 compression's pointer arrays", err)) {
      status = err->status;
    } else {
      w.keep(x.ptrs);
      if ((x.couplings_otf || x.dense_otf) && h2_gpu_geometry_upload(t, &x.geo, err))
        status = err->status;
      if (!status) status = orthogonalize_gpu<T>(x, w, &ot, &O, Tl, st, working_copy);
      if (!status) status = norm_of<T>(x, w, &ot, O, !working_copy, &st->norm_frobenius);
      if (!status && working_copy) {
        status = compress_gpu<T>(x, w, &ot, O, tol, nt, out, st, Tl.data());
      } else if (!status) {   // orthogonalization (or nothing to truncate): O is the result
        *nt = ot;
        memset(&ot, 0, sizeof ot);
        *out = O;
        O = NULL;
        st->error_frobenius = 0.0;
      }
    }
    if (!status)
      status = gk_cuda_status(cudaStreamSynchronize(x.s), "the H2 compression", err);
    // A QR or SVD that went wrong shows as a non-finite result: an error, not a silent one.
    double check = 0.0, basis = 0.0;
    if (!status && !(status = x.sum_squares((const T *) (*out)->S.ptr, h2_coupling_entries(nt), &check)) &&
        !(status = x.sum_squares((const T *) (*out)->U.ptr, h2_basis_entries(nt), &basis)) &&
        !(isfinite(check) && isfinite(basis)))
      status = gk_fail(err, GK_ERR_INTERNAL, "the H2 %s on the GPU gave non-finite values",
                       tol > 0 ? "compression" : "orthogonalization");
  }  // work buffers freed here
  h2_gpu_geometry_free(&x.geo);
  st->flops = x.flops;
  if (working_copy) free(O);
  else h2_gpu_free(O);
  h2_tree_free(&ot);
  if (status) {
    h2_gpu_free(*out);
    *out = NULL;
    h2_tree_free(nt);
  }
  return status;
}

extern "C" gk_status h2_transform_gpu(const h2_tree *t, h2_gpu *in, double tol, int threads,
                                      h2_tree *out_tree, h2_gpu **out, h2_compress_stats *st,
                                      gk_error *err)
{
  *out = NULL;
  memset(out_tree, 0, sizeof *out_tree);
  memset(st, 0, sizeof *st);
  if (tol < 0 || tol != tol)
    return gk_fail(err, GK_ERR_INPUT, "the compression tolerance must be positive");
  if (gk_resident_enter(&in->res, err)) return err->status;
  if (gk_cuda_status(cudaDeviceSynchronize(), "the H2 matrix", err)) return err->status;
  return in->single ? transform<float>(t, in, tol, threads, out_tree, out, st, err)
                    : transform<double>(t, in, tol, threads, out_tree, out, st, err);
}
