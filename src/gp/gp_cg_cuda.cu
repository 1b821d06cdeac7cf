// The block CG's column operations on the GPU (gp_cg_cuda.cuh).
#include "gp/gp_cg_cuda.cuh"

namespace gp_cg {

namespace {

/* dst[:, c] = src[:, cols[c]] */
__global__ void gather_columns(size_t n, const double *src, const int *cols, double *dst)
{
  const double *s = src + (size_t) cols[blockIdx.y] * n;
  double *d = dst + (size_t) blockIdx.y * n;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    d[i] = s[i];
}

/* The block's sum of v, in a fixed order, by thread 0. */
__device__ inline double block_sum(double v, double *shared)
{
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  double total = shared[0];
  __syncthreads();
  return total;
}

/* partial[c * gridDim.x + b] = block b's part of <a[:, ja], b[:, c]>, with
 * ja = cols[c] (a: the n x K state, b: the n x k block of the active columns). */
__global__ void dot_partials(size_t n, const double *a, const int *cols, const double *bm,
                             double *partial)
{
  __shared__ double shared[kThreads];
  const double *ac = a + (size_t) cols[blockIdx.y] * n, *bc = bm + (size_t) blockIdx.y * n;
  double v = 0.0;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    v += ac[i] * bc[i];
  double total = block_sum(v, shared);
  if (threadIdx.x == 0) partial[(size_t) blockIdx.y * gridDim.x + blockIdx.x] = total;
}

/* out[c] = the sum of column c's `parts` partials, in order (one block per column). */
__global__ void sum_partials(const double *partial, int parts, double *out)
{
  __shared__ double shared[kThreads];
  double v = 0.0;
  for (int p = threadIdx.x; p < parts; p += blockDim.x) v += partial[(size_t) blockIdx.y * parts + p];
  double total = block_sum(v, shared);
  if (threadIdx.x == 0) out[blockIdx.y] = total;
}

/* For active column c (state column j = cols[c]): step = rr[j] / pq[c],
 * x_j += step p_j, r_j -= step q_c, and block partials of <r_j, r_j>. */
__global__ void step_partials(size_t n, const int *cols, const double *rr, const double *pq,
                              const double *q, double *x, double *r, const double *p,
                              double *partial)
{
  __shared__ double shared[kThreads];
  size_t j = (size_t) cols[blockIdx.y];
  double step = rr[j] / pq[blockIdx.y];
  const double *qc = q + (size_t) blockIdx.y * n, *pj = p + j * n;
  double *xj = x + j * n, *rj = r + j * n;
  double v = 0.0;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x) {
    xj[i] += step * pj[i];
    double t = rj[i] - step * qc[i];
    rj[i] = t;
    v += t * t;
  }
  double total = block_sum(v, shared);
  if (threadIdx.x == 0) partial[(size_t) blockIdx.y * gridDim.x + blockIdx.x] = total;
}

/* After sum_partials gave next[c] = <r_j, r_j>: the coefficients, and rr. */
__global__ void finish_step(int k, const int *cols, const double *pq, const double *next,
                            double *rr, double *coef_a, double *coef_b)
{
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= k) return;
  int j = cols[c];
  coef_a[c] = rr[j] / pq[c];
  coef_b[c] = next[c] / rr[j];
  rr[j] = next[c];
}

/* p_j = r_j + beta_c p_j */
__global__ void next_direction(size_t n, const int *cols, const double *beta, const double *r,
                               double *p)
{
  size_t j = (size_t) cols[blockIdx.y];
  double b = beta[blockIdx.y];
  const double *rj = r + j * n;
  double *pj = p + j * n;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    pj[i] = rj[i] + b * pj[i];
}

/* Tiles of 32 rows x 32 columns through shared memory (the 33rd column keeps
 * the tile's reads and writes on different banks), so that both the
 * column-major and the row-major side move whole 256-byte runs. */
const int kTile = 32;

/* Both directions in one kernel: the column-major side is n x k (its
 * columns cols[c], or the first k), the row-major side row i's k values at
 * i k; to_rows: column-major into row-major, else back. The tile holds
 * [column][row] either way; each side is read or written along its own
 * contiguous direction (threadIdx.x). */
__global__ void transpose_kernel(size_t n, const double *src, const int *cols, int k, double *dst,
                                 int to_rows)
{
  __shared__ double tile[kTile][kTile + 1];
  int c0 = blockIdx.y * kTile;
  for (size_t i0 = (size_t) blockIdx.x * kTile; i0 < n; i0 += (size_t) gridDim.x * kTile) {
    for (int pass = 0; pass < 2; pass++) {
      // pass 0 reads src, pass 1 writes dst: the column-major side runs
      // along rows, the row-major side along columns
      int col_major = pass == 0 ? to_rows : !to_rows;
      for (int u = threadIdx.y; u < kTile; u += blockDim.y) {
        int cl = col_major ? u : (int) threadIdx.x, il = col_major ? (int) threadIdx.x : u;
        int c = c0 + cl;
        size_t i = i0 + il;
        if (c >= k || i >= n) continue;
        if (pass == 0)
          tile[cl][il] = to_rows ? src[i + (size_t) (cols ? cols[c] : c) * n] : src[i * k + c];
        else if (to_rows)
          dst[i * k + c] = tile[cl][il];
        else
          dst[i + (size_t) c * n] = tile[cl][il];
      }
      __syncthreads();
    }
  }
}

dim3 tile_grid(size_t n, int k)
{
  size_t rows = (n + kTile - 1) / kTile;
  return dim3((unsigned) (rows < 1 ? 1 : (rows > 65535 ? 65535 : rows)),
              (unsigned) ((k + kTile - 1) / kTile));
}

/* y += a x */
__global__ void add_scaled_kernel(size_t count, double a, const double *x, double *y)
{
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < count;
       e += (size_t) gridDim.x * blockDim.x)
    y[e] += a * x[e];
}

}  // namespace

void gather(size_t n, const double *src, const int *cols, int k, unsigned parts, double *dst,
            cudaStream_t s)
{
  gather_columns<<<dim3(parts, k), kThreads, 0, s>>>(n, src, cols, dst);
}

void dots(size_t n, const double *a, const int *cols, const double *b, int k, unsigned parts,
          double *partial, double *out, cudaStream_t s)
{
  dot_partials<<<dim3(parts, k), kThreads, 0, s>>>(n, a, cols, b, partial);
  sum_partials<<<dim3(1, k), kThreads, 0, s>>>(partial, parts, out);
}

void step(size_t n, const int *cols, int k, unsigned parts, const double *pq, const double *q,
          double *x, double *r, double *p, double *rr, double *partial, double *next,
          double *coef_a, double *coef_b, cudaStream_t s)
{
  step_partials<<<dim3(parts, k), kThreads, 0, s>>>(n, cols, rr, pq, q, x, r, p, partial);
  sum_partials<<<dim3(1, k), kThreads, 0, s>>>(partial, parts, next);
  finish_step<<<(k + 127) / 128, 128, 0, s>>>(k, cols, pq, next, rr, coef_a, coef_b);
  next_direction<<<dim3(parts, k), kThreads, 0, s>>>(n, cols, coef_b, r, p);
}

void to_rows(size_t n, const double *src, const int *cols, int k, double *dst, cudaStream_t s)
{
  transpose_kernel<<<tile_grid(n, k), dim3(kTile, 8), 0, s>>>(n, src, cols, k, dst, 1);
}

void from_rows(size_t n, const double *src, int k, double *dst, cudaStream_t s)
{
  transpose_kernel<<<tile_grid(n, k), dim3(kTile, 8), 0, s>>>(n, src, NULL, k, dst, 0);
}

void add_scaled(size_t count, double a, const double *x, double *y)
{
  add_scaled_kernel<<<blocks_for(count), kThreads>>>(count, a, x, y);
}

}  // namespace gp_cg
