/*
 * Batched SVD of the H2 truncation (h2_svd_cuda.cuh): one-sided (Hestenes)
 * Jacobi, one thread block per matrix, the matrix in shared memory in double.
 * cuSOLVER does not cover these sizes: gesvdjBatched and syevjBatched take
 * matrices up to 32 x 32 (here k x k and 2k x k with k = 64 and more), and
 * gesvdaStridedBatched works on the Gram matrix, which loses the small
 * singular values whose sum decides the rank.
 *
 * The columns of W (rows x cols) are rotated in pairs until every pair is
 * orthogonal to m eps relative to the two norms; then W V = U S, the column
 * norms are the singular values and the columns divided by them the left
 * singular vectors. Pairs follow the parallel round-robin order: in each of
 * the cols - 1 rounds of a sweep the column pairs are disjoint, one warp per
 * pair, a barrier between rounds. Columns below eps ||W||_F are rounding
 * noise and take part in no rotation (their relative orthogonality would
 * never settle). The km = min(rows, cols) largest columns, in descending
 * order, are then orthonormalized once more (classical Gram-Schmidt twice
 * with the Kahan-Parlett test): that keeps the vectors of tiny singular values
 * orthogonal to the others, and completes the basis with unit vectors where
 * a singular value is (numerically) zero, as LAPACK's U is orthonormal.
 */
#include <float.h>
#include <math.h>
#include <algorithm>
#include "h2/h2_svd_cuda.cuh"

static const int SVD_MAX_WARPS = 16;
static const int SVD_MAX_SWEEPS = 30;   // as LAPACK's dgesvj

// The matrix, the column norms, the Gram-Schmidt coefficients, one double
// per warp for block sums (doubles first, for alignment), the column order.
static size_t svd_shared_bytes(int rows, int cols)
{
  return sizeof(double) * ((size_t) rows * cols + 2 * (size_t) cols + 32) +
         sizeof(int) * (size_t) cols;
}

static __device__ __forceinline__ double warp_sum(double v)
{
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;   // the same in every lane (the butterfly adds the same pairs)
}

// The sum over the block, the same in every thread; scratch: one per warp.
static __device__ double block_sum(double v, double *scratch)
{
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();   // the previous sum has been read
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double s = 0.0;
  for (int i = 0; i < nw; i++) s += scratch[i];
  return s;
}

template <typename T>
__global__ void __launch_bounds__(SVD_MAX_WARPS * 32)
svd_left_jacobi(int m, int n, int km, const T *w, int transposed, double *sig, T *u)
{
  extern __shared__ double smem[];
  double *A = smem, *norm = A + (size_t) m * n, *coef = norm + n, *scratch = coef + n;
  int *order = (int *) (scratch + 32);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const size_t mn = (size_t) m * n;
  const T *wb = w + blockIdx.x * mn;

  double local = 0.0;
  for (size_t e = threadIdx.x; e < mn; e += blockDim.x) {
    int r = (int) (e % m), c = (int) (e / m);
    double v = (double) (transposed ? wb[c + (size_t) r * n] : wb[e]);
    A[e] = v;
    local += v * v;
  }
  const double negligible = block_sum(local, scratch) * (DBL_EPSILON * DBL_EPSILON);
  const double tol = m * DBL_EPSILON;

  // Sweeps of rotations until no pair needs one.
  const int np = n + (n & 1), pairs = np / 2;
  for (int sweep = 0; sweep < SVD_MAX_SWEEPS; sweep++) {
    int rotated = 0;
    for (int round = 0; round < np - 1; round++) {
      for (int p = warp; p < pairs; p += nw) {
        int i = p == 0 ? round : (round + p) % (np - 1);
        int j = p == 0 ? np - 1 : (round - p + np - 1) % (np - 1);
        if (j >= n) continue;   // the padding column of an odd n
        double *ai = A + (size_t) i * m, *aj = A + (size_t) j * m;
        double al = 0.0, be = 0.0, ga = 0.0;
        for (int r = lane; r < m; r += 32) {
          double x = ai[r], y = aj[r];
          al += x * x;
          be += y * y;
          ga += x * y;
        }
        al = warp_sum(al);
        be = warp_sum(be);
        ga = warp_sum(ga);
        if (!(al > negligible && be > negligible)) continue;
        if (!(fabs(ga) > tol * sqrt(al) * sqrt(be))) continue;
        rotated = 1;
        // the rotation that makes the pair orthogonal, the smaller angle
        double zeta = (be - al) / (2.0 * ga);
        double t = copysign(1.0, zeta) / (fabs(zeta) + hypot(1.0, zeta));
        double c = 1.0 / sqrt(1.0 + t * t), s = c * t;
        for (int r = lane; r < m; r += 32) {
          double x = ai[r], y = aj[r];
          ai[r] = c * x - s * y;
          aj[r] = s * x + c * y;
        }
      }
      __syncthreads();
    }
    if (!__syncthreads_or(rotated)) break;
  }

  // Singular values: the column norms; their descending order (ties by index).
  for (int j = warp; j < n; j += nw) {
    const double *aj = A + (size_t) j * m;
    double s2 = 0.0;
    for (int r = lane; r < m; r += 32) s2 += aj[r] * aj[r];
    s2 = warp_sum(s2);
    if (lane == 0) norm[j] = s2 == s2 ? sqrt(s2) : INFINITY;   // NaN: first, and kept
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    double v = norm[j];
    int rank = 0;
    for (int i = 0; i < n; i++) rank += norm[i] > v || (norm[i] == v && i < j);
    order[rank] = j;
  }
  __syncthreads();

  // Left singular vectors: the columns in that order, orthonormalized.
  for (int j = 0; j < km; j++) {
    double *v = A + (size_t) order[j] * m;
    const double sj = norm[order[j]];
    int done = 0;
    if (!(sj < INFINITY)) {   // non-finite input: a non-finite result, for the caller's check
      for (int r = threadIdx.x; r < m; r += blockDim.x) v[r] = NAN;
      done = 1;
    }
    // candidates: the Jacobi column (unless negligible), then e_0, e_1, ...
    for (int cand = sj * sj > negligible ? -1 : 0; !done && cand < m; cand++) {
      for (int r = threadIdx.x; r < m; r += blockDim.x)
        v[r] = cand < 0 ? v[r] / sj : (r == cand ? 1.0 : 0.0);
      __syncthreads();
      double n1 = 0.0, n2 = 0.0;
      for (int pass = 0; pass < 2; pass++) {
        for (int i = warp; i < j; i += nw) {
          const double *qi = A + (size_t) order[i] * m;
          double d = 0.0;
          for (int r = lane; r < m; r += 32) d += qi[r] * v[r];
          d = warp_sum(d);
          if (lane == 0) coef[i] = d;
        }
        __syncthreads();
        double s2 = 0.0;
        for (int r = threadIdx.x; r < m; r += blockDim.x) {
          double x = v[r];
          for (int i = 0; i < j; i++) x -= coef[i] * A[(size_t) order[i] * m + r];
          v[r] = x;
          s2 += x * x;
        }
        double nrm = sqrt(block_sum(s2, scratch));
        if (pass == 0) n1 = nrm; else n2 = nrm;
      }
      // Kahan-Parlett: little lost in the second pass, so v is orthogonal
      if (n2 > 0.0 && n2 >= n1 * 0.70710678118654752) {
        for (int r = threadIdx.x; r < m; r += blockDim.x) v[r] /= n2;
        done = 1;
      }
    }
    if (!done)   // not reached in exact arithmetic (km <= m unit vectors span the rest)
      for (int r = threadIdx.x; r < m; r += blockDim.x) v[r] = 0.0;
    __syncthreads();
  }

  T *ub = u + blockIdx.x * (size_t) m * km;
  for (size_t e = threadIdx.x; e < (size_t) m * km; e += blockDim.x)
    ub[e] = (T) A[(size_t) order[e / m] * m + e % m];
  for (int c = threadIdx.x; c < km; c += blockDim.x)
    sig[blockIdx.x * (size_t) km + c] = norm[order[c]];
}

bool h2_svd_gpu_fits(int rows, int cols)
{
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
        cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return rows > 0 && cols > 0 && svd_shared_bytes(rows, cols) <= (size_t) optin;
}

template <typename T>
static gk_status svd_left_gpu(int count, int rows, int cols, const T *w, int transposed,
                              double *sig, T *u, cudaStream_t s, gk_error *err)
{
  if (count <= 0 || rows <= 0 || cols <= 0) return GK_OK;
  size_t smem = svd_shared_bytes(rows, cols);
  int warps = std::min(SVD_MAX_WARPS, std::max(1, (cols + 1) / 2));
  if (gk_cuda_status(cudaFuncSetAttribute(svd_left_jacobi<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem),
                     "the H2 batched SVD", err))
    return err->status;
  svd_left_jacobi<T><<<count, warps * 32, smem, s>>>(rows, cols, std::min(rows, cols), w,
                                                     transposed, sig, u);
  return gk_cuda_check_launch("the H2 batched SVD", err);
}

gk_status h2_svd_left_gpu(int count, int rows, int cols, const double *w, int transposed,
                          double *sig, double *u, cudaStream_t s, gk_error *err)
{
  return svd_left_gpu<double>(count, rows, cols, w, transposed, sig, u, s, err);
}

gk_status h2_svd_left_gpu(int count, int rows, int cols, const float *w, int transposed,
                          double *sig, float *u, cudaStream_t s, gk_error *err)
{
  return svd_left_gpu<float>(count, rows, cols, w, transposed, sig, u, s, err);
}
