/*
 * Bandwidth-bound products of small blocks for the HMV with few right-hand
 * sides, where cuBLAS batched GEMMs (tiled for compute) waste bandwidth (the
 * role of the paper's batched GEMV and block-sparse MV kernels). Blocks A are
 * M x K (column-major, at most H2_GEMV_MAX_DIM each); x has at most
 * H2_GEMV_MAX_RHS columns (NR, a compile-time count, so that accumulators
 * stay in registers).
 */
#ifndef GK_H2_GEMV_CUH
#define GK_H2_GEMV_CUH

#include <cuda_runtime.h>
#include <stddef.h>

/*
 * - Block-sparse rows (h2_bsr_kernel): y_r += sum over the row's blocks of
 *   A_b x_col(b), one launch for a whole phase (the dense blocks, a coupling
 *   level or every coupling level). A thread block runs one task: a row, or a
 *   chunk of a long row when the phase has too few rows to fill the GPU
 *   (h2_bsr_plan). Chunks write partial sums; the chunk that finishes last
 *   adds them in chunk order and updates y, so the result does not depend on
 *   which chunk finishes last (no float atomics: the same sums every run).
 * - Strided batches (h2_strided_kernel): output r is the sum over its `sum`
 *   blocks s = r sum + c of op(A_s) x_{s / xdiv} (A_s = a + s sa, x_i = x + i sx):
 *   sum = 1, xdiv = 1 is a strided batched GEMV; the transfers of both
 *   children of a level are sum = 2 (upsweep, transposed) or xdiv = 2
 *   (downsweep) in one launch.
 *
 * The non-transposed products keep A out of shared memory: thread (row,
 * group) of 64 x 4 reads every fourth column of a row, so a warp reads 32
 * consecutive entries of a column, BATCH loads in flight, and x comes from
 * global memory (a broadcast that hits L1/L2: x blocks are shared by many
 * rows). The transposed product stages the block in shared memory with
 * coalesced loads (leading dimension 65: the column reads below are free of
 * bank conflicts), then thread (column, group) sums a quarter of a column.
 */

#define H2_GEMV_MAX_DIM 64
#define H2_GEMV_MAX_RHS 4
#define H2_GEMV_THREADS 256
// Levels of the tree an all-level launch can describe (depth <= 31: n < 2^31).
#define H2_GEMV_MAX_LEVELS 32
// Row splitting aims at this many tasks per SM and phase (two waves of
// 8 resident blocks of 256 threads).
#define H2_SPLIT_TASKS_PER_SM 16

/* One thread block of a block-sparse launch: blocks first .. last-1 of the
 * row's list (row_blocks positions, local to the level) for output row `row`.
 * chunks > 1: chunk `chunk` of a split row whose partial sums are units
 * part .. part+chunks-1 of the partial buffer (H2_GEMV_MAX_DIM * NR entries
 * each) and whose arrival count is counters[counter]. */
struct h2_task {
  int row, first, last, level, chunks, chunk, part, counter;
};

/* Where level `l` of an all-level launch lives: block size, first position of
 * its lists (row_blocks, col) and of its blocks (entries), first row of the
 * xhat / yhat trees. */
struct h2_level {
  int bs, list;
  size_t values, hat;
};

template <typename T>
struct h2_bsr_args {
  int n_tasks, bs, nrhs, accumulate;
  const h2_task *tasks;
  const int *row_blocks, *col;
  const T *a;
  const T *x;
  int ldx;
  T *y;
  int ldy;
  T *partial;
  int *counters;
  // 0: one level, of block size bs, with a, x, y, row_blocks and col pointing
  // at it; else tasks name their level in `levels` and the pointers are bases.
  int n_levels;
  h2_level levels[H2_GEMV_MAX_LEVELS];
};

template <typename T>
struct h2_strided_args {
  int rows, M, K, nrhs, accumulate, trans, sum, xdiv;
  const T *a;
  size_t sa;
  const T *x;
  int ldx;
  size_t sx;
  T *y;
  int ldy;
  size_t sy;
};

/* acc[j] += sum over columns c = group, group + 4, ... < K of A[row, c] x[c, j]
 * (row < M), in increasing c, unrolled BATCH times (the loads of A of an
 * unrolled step are issued before their products). */
template <typename T, int NR, int BATCH>
__device__ __forceinline__ void h2_gemv_n(const T *__restrict__ A, int M, int K,
                                          const T *__restrict__ x, int ldx, int row, int group,
                                          T (&acc)[NR])
{
#pragma unroll BATCH
  for (int c = group; c < K; c += 4) {
    T v = __ldg(A + row + (size_t) c * M);
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] += v * __ldg(x + c + (size_t) j * ldx);
  }
}

/* Sums the four groups' accumulators: entry idx < len of column j ends in
 * ys[0][idx + j len]. Every thread calls it (it has barriers). */
template <typename T, int NR>
__device__ __forceinline__ void h2_sum_groups(T (*ys)[H2_GEMV_MAX_DIM * NR], const T (&acc)[NR],
                                              int len, int idx, int group)
{
  if (idx < len)
#pragma unroll
    for (int j = 0; j < NR; j++) ys[group][idx + j * len] = acc[j];
  __syncthreads();
  for (int i = threadIdx.x; i < len * NR; i += H2_GEMV_THREADS)
    ys[0][i] = ys[0][i] + ys[1][i] + ys[2][i] + ys[3][i];
  __syncthreads();
}

/* y (len x NR, leading dimension ldy) = or += v. */
template <typename T>
__device__ __forceinline__ void h2_store(T *y, int ldy, int len, int i, T v, int accumulate)
{
  T *out = y + (i % len) + (size_t) (i / len) * ldy;
  *out = accumulate ? *out + v : v;
}

// One right-hand side (the common case, and the large-n one that must stream
// at full bandwidth): 32 registers, 8 resident blocks per SM, no spills; more
// right-hand sides: at most 64 registers (as many as before the row split).
template <typename T, int NR>
__global__ void __launch_bounds__(H2_GEMV_THREADS, NR == 1 ? 8 : 4)
h2_bsr_kernel(const h2_bsr_args<T> p)
{
  __shared__ T ys[4][H2_GEMV_MAX_DIM * NR];
  __shared__ int last_chunk;
  // the task's fields are read where needed (fewer live registers in the loop)
  const h2_task *task = p.tasks + blockIdx.x;
  int bs = p.bs;
  const T *a = p.a, *x = p.x;
  const int *row_blocks = p.row_blocks, *col = p.col;
  size_t hat = 0;
  if (p.n_levels) {
    const h2_level lv = p.levels[task->level];
    bs = lv.bs;
    a += lv.values;
    hat = lv.hat;
    row_blocks += lv.list;
    col += lv.list;
  }
  const int tid = threadIdx.x, row = tid % 64, group = tid / 64;
  const size_t bb = (size_t) bs * bs;
  T acc[NR];
#pragma unroll
  for (int j = 0; j < NR; j++) acc[j] = 0;
  if (row < bs) {
    const int last = task->last;
    for (int e = task->first; e < last; e++) {
      size_t s = (size_t) row_blocks[e];
      h2_gemv_n<T, NR, 4>(a + s * bb, bs, bs, x + hat + (size_t) col[s] * bs, p.ldx, row, group,
                          acc);
    }
  }
  h2_sum_groups<T, NR>(ys, acc, bs, row, group);
  const int len = bs * NR, chunks = task->chunks;
  T *y = p.y + hat + (size_t) task->row * bs;
  if (chunks == 1) {
    for (int i = tid; i < len; i += H2_GEMV_THREADS)
      h2_store<T>(y, p.ldy, bs, i, ys[0][i], p.accumulate);
    return;
  }
  // A chunk of a split row: publish the partial sum, count arrivals; the last
  // arrival (its reads ordered after everyone's writes by the fences) adds the
  // partials in chunk order and re-arms the counter for the next launch.
  const size_t unit = (size_t) H2_GEMV_MAX_DIM * NR;
  T *part = p.partial + (size_t) task->part * unit;
  int *counter = p.counters + task->counter;
  for (int i = tid; i < len; i += H2_GEMV_THREADS) __stcg(part + task->chunk * unit + i, ys[0][i]);
  __threadfence();
  __syncthreads();
  if (tid == 0) last_chunk = atomicAdd(counter, 1) == chunks - 1;
  __syncthreads();
  if (!last_chunk) return;
  __threadfence();
  for (int i = tid; i < len; i += H2_GEMV_THREADS) {
    T v = __ldcg(part + i);
    for (int c = 1; c < chunks; c++) v += __ldcg(part + c * unit + i);
    h2_store<T>(y, p.ldy, bs, i, v, p.accumulate);
  }
  if (tid == 0) *counter = 0;
}

template <typename T, int NR>
__global__ void __launch_bounds__(H2_GEMV_THREADS) h2_strided_n_kernel(const h2_strided_args<T> p)
{
  __shared__ T ys[4][H2_GEMV_MAX_DIM * NR];
  const int r = blockIdx.x, tid = threadIdx.x, row = tid % 64, group = tid / 64;
  T acc[NR];
#pragma unroll
  for (int j = 0; j < NR; j++) acc[j] = 0;
  if (row < p.M)
    for (int c = 0; c < p.sum; c++) {
      size_t s = (size_t) r * p.sum + c;
      // 16 loads in flight: a 64 x 64 block in one round trip (these launches are small)
      h2_gemv_n<T, NR, 16>(p.a + s * p.sa, p.M, p.K, p.x + (s / p.xdiv) * p.sx, p.ldx, row,
                           group, acc);
    }
  h2_sum_groups<T, NR>(ys, acc, p.M, row, group);
  T *y = p.y + (size_t) r * p.sy;
  for (int i = tid; i < p.M * NR; i += H2_GEMV_THREADS)
    h2_store<T>(y, p.ldy, p.M, i, ys[0][i], p.accumulate);
}

template <typename T, int NR>
__global__ void __launch_bounds__(H2_GEMV_THREADS) h2_strided_t_kernel(const h2_strided_args<T> p)
{
  const int LD = H2_GEMV_MAX_DIM + 1;
  const int LOADS = H2_GEMV_MAX_DIM * H2_GEMV_MAX_DIM / H2_GEMV_THREADS;
  __shared__ T As[H2_GEMV_MAX_DIM * LD];
  __shared__ T xs[H2_GEMV_MAX_DIM * NR];
  __shared__ T ys[4][H2_GEMV_MAX_DIM * NR];
  const int r = blockIdx.x, tid = threadIdx.x, col = tid % 64, group = tid / 64;
  const int M = p.M, K = p.K, MK = M * K;
  T acc[NR];
#pragma unroll
  for (int j = 0; j < NR; j++) acc[j] = 0;
  for (int c = 0; c < p.sum; c++) {
    size_t s = (size_t) r * p.sum + c;
    const T *A = p.a + s * p.sa, *x = p.x + (s / p.xdiv) * p.sx;
    T v[LOADS];
#pragma unroll
    for (int u = 0; u < LOADS; u++) {
      int e = tid + u * H2_GEMV_THREADS;
      v[u] = e < MK ? __ldg(A + e) : T(0);
    }
    // M * NR <= H2_GEMV_THREADS: one entry of x per thread
    const int xr = tid % M, xc = tid / M;
    T xv = xc < NR ? __ldg(x + xr + (size_t) xc * p.ldx) : T(0);
    if (c > 0) __syncthreads();   // the previous block's reads are done
    if (xc < NR) xs[xr + xc * H2_GEMV_MAX_DIM] = xv;
    // entry e = tid + u H2_GEMV_THREADS is (ar, ac) of A, stepped without divisions
    int ar = tid % M, ac = tid / M;
    const int step_r = H2_GEMV_THREADS % M, step_c = H2_GEMV_THREADS / M;
#pragma unroll
    for (int u = 0; u < LOADS; u++) {
      if (tid + u * H2_GEMV_THREADS < MK) As[ar + ac * LD] = v[u];
      ar += step_r;
      ac += step_c;
      if (ar >= M) {
        ar -= M;
        ac++;
      }
    }
    __syncthreads();
    if (col < K)
      for (int i = group; i < M; i += 4) {
        T a = As[i + col * LD];
#pragma unroll
        for (int j = 0; j < NR; j++) acc[j] += a * xs[i + j * H2_GEMV_MAX_DIM];
      }
  }
  h2_sum_groups<T, NR>(ys, acc, K, col, group);
  T *y = p.y + (size_t) r * p.sy;
  for (int i = tid; i < K * NR; i += H2_GEMV_THREADS)
    h2_store<T>(y, p.ldy, K, i, ys[0][i], p.accumulate);
}

template <typename T>
static cudaError_t h2_bsr_launch(const h2_bsr_args<T> &p, cudaStream_t stream)
{
  if (p.n_tasks <= 0) return cudaSuccess;
  switch (p.nrhs) {
  case 1: h2_bsr_kernel<T, 1><<<p.n_tasks, H2_GEMV_THREADS, 0, stream>>>(p); break;
  case 2: h2_bsr_kernel<T, 2><<<p.n_tasks, H2_GEMV_THREADS, 0, stream>>>(p); break;
  case 3: h2_bsr_kernel<T, 3><<<p.n_tasks, H2_GEMV_THREADS, 0, stream>>>(p); break;
  default: h2_bsr_kernel<T, 4><<<p.n_tasks, H2_GEMV_THREADS, 0, stream>>>(p); break;
  }
  return cudaGetLastError();
}

template <typename T, bool TRANS>
static void h2_strided_launch_nr(const h2_strided_args<T> &p, cudaStream_t stream)
{
#define H2_STRIDED_CASE(NR)                                                              \
  if (TRANS) h2_strided_t_kernel<T, NR><<<p.rows, H2_GEMV_THREADS, 0, stream>>>(p);      \
  else h2_strided_n_kernel<T, NR><<<p.rows, H2_GEMV_THREADS, 0, stream>>>(p);
  switch (p.nrhs) {
  case 1: H2_STRIDED_CASE(1) break;
  case 2: H2_STRIDED_CASE(2) break;
  case 3: H2_STRIDED_CASE(3) break;
  default: H2_STRIDED_CASE(4) break;
  }
#undef H2_STRIDED_CASE
}

template <typename T>
static cudaError_t h2_strided_launch(const h2_strided_args<T> &p, cudaStream_t stream)
{
  if (p.rows <= 0) return cudaSuccess;
  if (p.trans) h2_strided_launch_nr<T, true>(p, stream);
  else h2_strided_launch_nr<T, false>(p, stream);
  return cudaGetLastError();
}

static inline int h2_rows_fits(int m, int k, int nrhs)
{
  return m <= H2_GEMV_MAX_DIM && k <= H2_GEMV_MAX_DIM && nrhs <= H2_GEMV_MAX_RHS;
}

#endif
