// The Vecchia factor G and its transpose applied to blocks of vectors on the
// GPU (gp_cuda.cu's solver): row r of G or G' is coef[r] at r plus the terms
// (row j, value g) that a `Terms` lists for r, added in that order (as
// gp_vecchia_apply does on the CPU), so that both layouts below give the same
// sums to the bit.
#ifndef GK_GP_PRECOND_CUDA_CUH
#define GK_GP_PRECOND_CUDA_CUH

#include <stddef.h>
#include <cuda_runtime.h>

namespace gp_precond {

const int kCols = 8;   // columns per thread in the column-major products

/* G by rows: row i's neighbours nbr[i, s] (1-based, 0 = none) with coef[i, s + 1]. */
struct g_terms {
  size_t n;
  int m;
  const int *nbr;
  const double *coef;
  __device__ size_t begin(size_t) const { return 0; }
  __device__ size_t end(size_t) const { return (size_t) m; }
  __device__ bool get(size_t i, size_t s, size_t *j, double *g) const
  {
    int q = nbr[i + s * n];
    *g = coef[i + (s + 1) * n];
    *j = (size_t) (q - 1);
    return q > 0 && *g != 0.0;
  }
};

/* G' by rows, through the transposed pattern: column j of G is tval[e] at
 * rows trow[e], e in ptr[j] .. ptr[j + 1]. */
struct gt_terms {
  const size_t *ptr;
  const int *trow;
  const double *tval;
  __device__ size_t begin(size_t j) const { return ptr[j]; }
  __device__ size_t end(size_t j) const { return ptr[j + 1]; }
  __device__ bool get(size_t, size_t e, size_t *i, double *g) const
  {
    *i = (size_t) trow[e];
    *g = tval[e];
    return *g != 0.0;
  }
};

/* Column-major blocks (n x k, leading dimension n), for few columns: a
 * thread takes a row and up to kCols columns, so the row's terms are read
 * once per kCols columns (launch: grid (rows, ceil(k / kCols))). */
template <typename Terms>
__global__ void apply_columns(size_t n, Terms terms, const double *coef, const double *x, int k,
                              double *out)
{
  int c0 = blockIdx.y * kCols;
  int cols = k - c0 < kCols ? k - c0 : kCols;
  for (size_t r = blockIdx.x * (size_t) blockDim.x + threadIdx.x; r < n;
       r += (size_t) gridDim.x * blockDim.x) {
    double acc[kCols];
    double d = coef[r];
#pragma unroll
    for (int c = 0; c < kCols; c++) acc[c] = c < cols ? d * x[r + (size_t) (c0 + c) * n] : 0.0;
    for (size_t t = terms.begin(r); t < terms.end(r); t++) {
      size_t j;
      double g;
      if (terms.get(r, t, &j, &g)) {
#pragma unroll
        for (int c = 0; c < kCols; c++)
          if (c < cols) acc[c] += g * x[j + (size_t) (c0 + c) * n];
      }
    }
#pragma unroll
    for (int c = 0; c < kCols; c++)
      if (c < cols) out[r + (size_t) (c0 + c) * n] = acc[c];
  }
}

/* Row-major blocks (row r's k values at x + r k), for many columns: a warp
 * takes a row, its lanes the columns, so each term reads one contiguous row
 * of x (k doubles) where the column-major layout reads k scattered ones (at
 * n = 1e6 with 52 columns, 4 times fewer memory sectors). The lanes fetch 32
 * terms at a time and pass them round with shuffles. */
template <typename Terms>
__global__ void apply_rows_major(size_t n, Terms terms, const double *coef, const double *x,
                                 int k, double *out)
{
  const unsigned full = 0xffffffffu;
  int lane = threadIdx.x & 31;
  size_t warps = ((size_t) gridDim.x * blockDim.x) >> 5;
  for (size_t r = (blockIdx.x * (size_t) blockDim.x + threadIdx.x) >> 5; r < n; r += warps) {
    double d = coef[r];
    size_t first = terms.begin(r), last = terms.end(r);
    for (int c0 = 0; c0 < k; c0 += 64) {   // two columns per lane
      int c1 = c0 + lane, c2 = c0 + 32 + lane;
      double a1 = c1 < k ? d * x[r * k + c1] : 0.0, a2 = c2 < k ? d * x[r * k + c2] : 0.0;
      for (size_t t0 = first; t0 < last; t0 += 32) {
        size_t mine = 0;
        double g_mine = 0.0;
        if (t0 + lane < last && !terms.get(r, t0 + lane, &mine, &g_mine)) g_mine = 0.0;
        int count = last - t0 < 32 ? (int) (last - t0) : 32;
        for (int u = 0; u < count; u++) {
          size_t j = (size_t) __shfl_sync(full, (long long) mine, u);
          double g = __shfl_sync(full, g_mine, u);
          if (g != 0.0) {
            if (c1 < k) a1 += g * x[j * k + c1];
            if (c2 < k) a2 += g * x[j * k + c2];
          }
        }
      }
      if (c1 < k) out[r * k + c1] = a1;
      if (c2 < k) out[r * k + c2] = a2;
    }
  }
}

}  // namespace gp_precond
#endif
