/*
 * Bandwidth-bound products of small blocks for the HMV with few right-hand
 * sides, where cuBLAS batched GEMMs (tiled for compute) waste bandwidth: one
 * thread block per output block row streams the row's blocks with coalesced
 * loads and writes its output once, so a whole block-sparse level is one
 * launch (the role of the paper's batched GEMV and block-sparse MV kernels).
 *
 * Row r computes y_r (+)= sum over its blocks op(A_b) x_b, where A_b is M x K
 * (column-major, at most H2_GEMV_MAX_DIM each) and x has at most
 * H2_GEMV_MAX_RHS columns. Blocks come either from block-sparse row lists
 * (row_ptr != NULL: blocks s = row_blocks[...], A = a + s sa, x = x + col[s] sx)
 * or one per row (A = a + r sa, x = x + r sx); y_r = y + r sy.
 */
#ifndef GK_H2_GEMV_CUH
#define GK_H2_GEMV_CUH

#include <cuda_runtime.h>

#define H2_GEMV_MAX_DIM 64
#define H2_GEMV_MAX_RHS 4
#define H2_GEMV_THREADS 256

template <typename T>
struct h2_rows_args {
  int rows, M, K, nrhs, accumulate, trans;
  const T *a;
  size_t sa;
  const T *x;
  int ldx;
  size_t sx;
  T *y;
  int ldy;
  size_t sy;
  const int *row_ptr, *row_blocks, *col;
};

/* NR: right-hand sides (a compile-time count, so accumulators stay in
 * registers). x is read straight from global memory: in the non-transposed
 * product a warp reads one x entry at a time (a broadcast), in the transposed
 * one a coalesced column; both hit L2, since x blocks are shared by many rows.
 * No barrier is needed inside the block loop. */
template <typename T, bool TRANS, int NR>
__global__ void __launch_bounds__(H2_GEMV_THREADS) h2_rows_kernel(h2_rows_args<T> p)
{
  __shared__ T ys[4][H2_GEMV_MAX_DIM * NR];
  const int r = blockIdx.x, tid = threadIdx.x;
  const int ylen = TRANS ? p.K : p.M;
  int first = r, last = r + 1;
  if (p.row_ptr) { first = p.row_ptr[r]; last = p.row_ptr[r + 1]; }
  T acc[NR];
#pragma unroll
  for (int j = 0; j < NR; j++) acc[j] = 0;
  if (TRANS)
    for (int e = tid; e < ylen * NR; e += H2_GEMV_THREADS) ys[0][e] = 0;
  __syncthreads();
  for (int e = first; e < last; e++) {
    size_t s = p.row_ptr ? (size_t) p.row_blocks[e] : (size_t) e;
    size_t xblock = p.row_ptr ? (size_t) p.col[s] : s;
    const T *A = p.a + s * p.sa, *x = p.x + xblock * p.sx;
    if (!TRANS) {
      // 64 rows x 4 column groups: a warp reads 32 consecutive entries of a column.
      int row = tid % 64, group = tid / 64;
      if (row < p.M) {
#pragma unroll 4
        for (int c = group; c < p.K; c += 4) {
          T v = A[row + (size_t) c * p.M];
#pragma unroll
          for (int j = 0; j < NR; j++) acc[j] += v * x[c + (size_t) j * p.ldx];
        }
      }
    } else {
      // A warp per output column i: lanes read the column, then a shuffle sum.
      int warp = tid / 32, lane = tid % 32;
      for (int i = warp; i < p.K; i += H2_GEMV_THREADS / 32) {
        const T *col = A + (size_t) i * p.M;
        T part[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) part[j] = 0;
        for (int rr = lane; rr < p.M; rr += 32) {
          T v = col[rr];
#pragma unroll
          for (int j = 0; j < NR; j++) part[j] += v * x[rr + (size_t) j * p.ldx];
        }
#pragma unroll
        for (int j = 0; j < NR; j++) {
          T v = part[j];
          for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
          if (lane == 0) ys[0][i + j * ylen] += v;
        }
      }
    }
  }
  if (!TRANS) {
    int row = tid % 64, group = tid / 64;
    if (row < p.M)
#pragma unroll
      for (int j = 0; j < NR; j++) ys[group][row + j * ylen] = acc[j];
    __syncthreads();
    for (int i = tid; i < ylen * NR; i += H2_GEMV_THREADS)
      ys[0][i] = ys[0][i] + ys[1][i] + ys[2][i] + ys[3][i];
  }
  __syncthreads();
  T *y = p.y + (size_t) r * p.sy;
  for (int i = tid; i < ylen * NR; i += H2_GEMV_THREADS) {
    T *out = y + (i % ylen) + (size_t) (i / ylen) * p.ldy;
    *out = p.accumulate ? *out + ys[0][i] : ys[0][i];
  }
}

template <typename T, bool TRANS>
static void h2_rows_launch_nr(const h2_rows_args<T> &p, cudaStream_t stream)
{
  switch (p.nrhs) {
  case 1: h2_rows_kernel<T, TRANS, 1><<<p.rows, H2_GEMV_THREADS, 0, stream>>>(p); break;
  case 2: h2_rows_kernel<T, TRANS, 2><<<p.rows, H2_GEMV_THREADS, 0, stream>>>(p); break;
  case 3: h2_rows_kernel<T, TRANS, 3><<<p.rows, H2_GEMV_THREADS, 0, stream>>>(p); break;
  default: h2_rows_kernel<T, TRANS, 4><<<p.rows, H2_GEMV_THREADS, 0, stream>>>(p); break;
  }
}

template <typename T>
static cudaError_t h2_rows_launch(const h2_rows_args<T> &p, cudaStream_t stream)
{
  if (p.rows <= 0) return cudaSuccess;
  if (p.trans) h2_rows_launch_nr<T, true>(p, stream);
  else h2_rows_launch_nr<T, false>(p, stream);
  return cudaGetLastError();
}

static inline int h2_rows_fits(int m, int k, int nrhs)
{
  return m <= H2_GEMV_MAX_DIM && k <= H2_GEMV_MAX_DIM && nrhs <= H2_GEMV_MAX_RHS;
}

#endif
