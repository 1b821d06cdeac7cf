/*
 * Batched SVD of the H2 truncation (h2_svd_cuda.cuh): one-sided (Hestenes)
 * Jacobi, one thread block per matrix, the matrix in shared memory in double.
 * cuSOLVER does not cover these sizes: gesvdjBatched and syevjBatched take
 * matrices up to 32 x 32 (here k x k and 2k x k with k = 64 and more), and
 * gesvdaStridedBatched works on the Gram matrix, which loses the small
 * singular values whose sum decides the rank. Two kernels, by the number of
 * rows: svd_left_jacobi (one warp per column pair) and svd_left_block_jacobi
 * (up to 256 rows, blocks of columns in registers); both finish with
 * svd_finish. The method is described above each.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "device/gk_device.h"
#include "h2/h2_svd_cuda.cuh"
#include "h2/h2_compress.h"

static const int SVD_MAX_WARPS = 16;
static const int SVD_MAX_SWEEPS = 30;   // as LAPACK's dgesvj
// Block Jacobi: rows per lane (entries of each of the 4 columns in
// registers), so rows <= 32 BJ_ROWS; threads per block at most.
static const int BJ_ROWS = 8;
static const int BJ_MAX_THREADS = 512;

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

// Where the kernels keep things in shared memory (svd_shared_bytes).
struct svd_smem {
  double *A, *norm, *coef, *scratch;
  int *order;
};

static __device__ svd_smem svd_layout(double *smem, int m, int n)
{
  svd_smem s;
  s.A = smem;
  s.norm = s.A + (size_t) m * n;
  s.coef = s.norm + n;
  s.scratch = s.coef + n;
  s.order = (int *) (s.scratch + 32);
  return s;
}

// W (m x n, or the transpose of an n x m matrix) into A in double; returns
// the squared norm below which a column is negligible, eps^2 ||W||_F^2.
template <typename T>
static __device__ double svd_load(const T *wb, int m, int n, int transposed, const svd_smem &s)
{
  const size_t mn = (size_t) m * n;
  double local = 0.0;
  for (size_t e = threadIdx.x; e < mn; e += blockDim.x) {
    int r = (int) (e % m), c = (int) (e / m);
    double v = (double) (transposed ? wb[c + (size_t) r * n] : wb[e]);
    s.A[e] = v;
    local += v * v;
  }
  return block_sum(local, s.scratch) * (DBL_EPSILON * DBL_EPSILON);
}

// The rotation that makes columns with squared norms al, be and product ga
// orthogonal (the smaller angle), or none (false) where one is negligible or
// the pair is orthogonal to tol already.
static __device__ __forceinline__ bool jacobi_rotation(double al, double be, double ga,
                                                       double negligible, double tol, double *c,
                                                       double *s)
{
  if (!(al > negligible && be > negligible)) return false;
  if (!(fabs(ga) > tol * sqrt(al) * sqrt(be))) return false;
  double zeta = (be - al) / (2.0 * ga), az = fabs(zeta);
  // hypot(1, zeta) without its scaling: zeta^2 stays finite below 1e150
  double t = copysign(1.0, zeta) / (az + (az < 1e150 ? sqrt(fma(zeta, zeta, 1.0)) : az));
  *c = rsqrt(fma(t, t, 1.0));
  *s = *c * t;
  return true;
}

/* The method. The columns of W (rows x cols) are rotated in pairs until
 * every pair is orthogonal to m eps relative to the two norms; then W V = U S,
 * the column norms are the singular values and the columns divided by them
 * the left singular vectors. Columns below eps ||W||_F are rounding noise and
 * take part in no rotation (their relative orthogonality would never settle).
 * The km = min(rows, cols) largest columns, in descending order, then become
 * U (svd_finish): a column that the rotations left orthogonal to the others
 * is only normalized; the rest (negligible columns, or all of them after
 * SVD_MAX_SWEEPS without convergence) are orthonormalized against the
 * columns before them (classical Gram-Schmidt twice with the Kahan-Parlett
 * test), which completes the basis with unit vectors where a singular value
 * is (numerically) zero, as LAPACK's U is orthonormal. */

/* Singular values (the column norms of A, m x n after the rotations), their
 * descending order (ties by index), and U: the first km columns in that
 * order. Those before `first_gs` in the order whose squared norm is above
 * 2 negligible are orthogonal already and only normalized (the factor 2
 * keeps columns that the rotations may have taken for negligible, by a
 * rounding of their norm, out of that set); the others are orthonormalized. */
template <typename T>
static __device__ void svd_finish(const svd_smem &s, int m, int n, int km, double negligible,
                                  int first_gs, double *sig, T *u)
{
  double *A = s.A, *norm = s.norm, *coef = s.coef, *scratch = s.scratch;
  int *order = s.order;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;

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

  // The columns orthogonal already: normalized, all at once.
  int lead = 0;
  while (lead < (first_gs < km ? first_gs : km) && norm[order[lead]] < INFINITY &&
         norm[order[lead]] * norm[order[lead]] > 2.0 * negligible)
    lead++;
  for (size_t e = threadIdx.x; e < (size_t) m * lead; e += blockDim.x)
    A[(size_t) order[e / m] * m + e % m] /= norm[order[e / m]];
  __syncthreads();

  // The rest, one at a time.
  for (int j = lead; j < km; j++) {
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

// The pair of a round-robin round over np (even) items, pair p of np / 2:
// item np - 1 stays, the others move one place per round.
/* svd_left_jacobi (more than 32 BJ_ROWS = 256 rows): one warp per column
 * pair, round-robin order, a barrier after each of the cols - 1 rounds of a
 * sweep. At 64 rows a lane holds 2 entries per column, so each rotation costs
 * 3 warp sums of 5 shuffle steps for 6 multiply-adds, and its scalar work
 * (divisions, square roots) serves one pair. Its output orthonormalizes
 * every column by Gram-Schmidt (one column at a time, 6 barriers each). */

static __device__ __forceinline__ void round_robin_pair(int round, int p, int np, int *i, int *j)
{
  *i = p == 0 ? round : (round + p) % (np - 1);
  *j = p == 0 ? np - 1 : (round - p + np - 1) % (np - 1);
}

template <typename T>
__global__ void __launch_bounds__(SVD_MAX_WARPS * 32)
svd_left_jacobi(int m, int n, int km, const T *w, int transposed, double *sig, T *u)
{
  extern __shared__ double smem[];
  const svd_smem sm = svd_layout(smem, m, n);
  double *A = sm.A;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const double negligible = svd_load(w + blockIdx.x * (size_t) m * n, m, n, transposed, sm);
  const double tol = m * DBL_EPSILON;

  // Sweeps of rotations until no pair needs one.
  const int np = n + (n & 1), pairs = np / 2;
  for (int sweep = 0; sweep < SVD_MAX_SWEEPS; sweep++) {
    int rotated = 0;
    for (int round = 0; round < np - 1; round++) {
      for (int p = warp; p < pairs; p += nw) {
        int i, j;
        round_robin_pair(round, p, np, &i, &j);
        if (j >= n) continue;   // the padding column of an odd n
        double *ai = A + (size_t) i * m, *aj = A + (size_t) j * m;
        double al = 0.0, be = 0.0, ga = 0.0;
        for (int r = lane; r < m; r += 32) {
          double x = ai[r], y = aj[r];
          al += x * x;
          be += y * y;
          ga += x * y;
        }
        double c, s;
        if (!jacobi_rotation(warp_sum(al), warp_sum(be), warp_sum(ga), negligible, tol, &c, &s))
          continue;
        rotated = 1;
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
  svd_finish<T>(sm, m, n, km, negligible, 0, sig, u);
}

/* svd_left_block_jacobi (up to 256 rows: every shape of the usual orders):
 * the columns in blocks of two, a round-robin order over the blocks; a group
 * of g lanes (g = 8 for 64 rows, BJ_ROWS rows per lane) loads the 4 columns
 * of a block pair into registers once, makes the 4 rotations between the
 * blocks (and in the first round of a sweep the 2 within them) in registers,
 * two disjoint pairs at a time, and stores them once. Per rotation: 1.3 m
 * shared-memory entries moved instead of 6 m, log2(g) shuffle steps for 6
 * sums shared by 2 pairs, the scalar work spread over 32 / g groups of a
 * warp; a sweep has cols / 2 rounds (barriers) instead of cols - 1. Every
 * pair is still rotated once per sweep, with the same test and rotation, so
 * the sweeps are those of cyclic Jacobi. A matrix with fewer rows than
 * columns (the inner levels: 2 r x k with r < k / 2) is first reduced to its
 * rows x rows triangle L (W = L Q, Householder from the right as LAPACK's
 * gelq2; U and S are L's): the rotations then run over rows columns instead
 * of cols, and none drain to zero. */

/* W (m x n, m < n, in A with leading dimension m) = L Q: Householder
 * reflectors from the right zero each row right of the diagonal in turn, as
 * LAPACK's gelq2; L (lower triangular, zeros above) ends in the first m
 * columns. Row j's reflector is H = I - tau v v^T, v = (1, x / (alpha -
 * beta)) for the row's tail (alpha, x), beta = -sign(alpha) ||(alpha, x)||.
 * A non-finite tail makes L[j, j] NaN, for the caller's check. */
static __device__ void lq_in_place(double *A, int m, int n, double *scratch)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int j = 0; j < m; j++) {
    double *row = A + j;   // row j's entry in column c: row[c * m]
    double local = 0.0;
    for (int c = j + 1 + threadIdx.x; c < n; c += blockDim.x) local += row[(size_t) c * m] * row[(size_t) c * m];
    const double xx = block_sum(local, scratch), alpha = row[(size_t) j * m];
    double diag = alpha;
    if (xx > 0.0 && xx <= DBL_MAX) {
      const double beta = -copysign(sqrt(alpha * alpha + xx), alpha);
      const double tau = (beta - alpha) / beta, scale = 1.0 / (alpha - beta);
      diag = beta;
      // rows below: row_i -= tau (row_i . v) v^T
      for (int i = j + 1 + warp; i < m; i += nw) {
        double *ri = A + i;
        double d = 0.0;
        for (int c = j + 1 + lane; c < n; c += 32) d += ri[(size_t) c * m] * row[(size_t) c * m];
        const double f = tau * (ri[(size_t) j * m] + scale * warp_sum(d));
        for (int c = j + 1 + lane; c < n; c += 32) ri[(size_t) c * m] -= f * scale * row[(size_t) c * m];
        if (lane == 0) ri[(size_t) j * m] -= f;
      }
    } else if (!(xx == 0.0)) {
      diag = NAN;
    }
    __syncthreads();   // the rows below have read row j
    for (int c = j + threadIdx.x; c < n; c += blockDim.x) row[(size_t) c * m] = c == j ? diag : 0.0;
    __syncthreads();
  }
}

static __device__ __forceinline__ void rotate_columns(double *x, double *y, int rows, double c,
                                                      double s)
{
#pragma unroll
  for (int e = 0; e < rows; e++) {
    double a = x[e], b = y[e];
    x[e] = c * a - s * b;
    y[e] = s * a + c * b;
  }
}

// Two disjoint pairs (x1, y1) and (x2, y2) of a group's register columns
// made orthogonal, their 6 sums reduced together; whether one was rotated.
template <int G>
static __device__ __forceinline__ int rotate_two_pairs(double (&x1)[BJ_ROWS], double (&y1)[BJ_ROWS],
                                                       double (&x2)[BJ_ROWS], double (&y2)[BJ_ROWS],
                                                       double negligible, double tol)
{
  double s[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
#pragma unroll
  for (int e = 0; e < BJ_ROWS; e++) {
    s[0] += x1[e] * x1[e];
    s[1] += y1[e] * y1[e];
    s[2] += x1[e] * y1[e];
    s[3] += x2[e] * x2[e];
    s[4] += y2[e] * y2[e];
    s[5] += x2[e] * y2[e];
  }
#pragma unroll
  for (int o = G >> 1; o > 0; o >>= 1)
#pragma unroll
    for (int k = 0; k < 6; k++) s[k] += __shfl_xor_sync(0xffffffffu, s[k], o);
  // unrotated pairs take c = 1, s = 0 (the same entries, unless the other
  // column is not finite: the result is not finite then either way); no
  // branch, so the columns need no second set of registers
  double c1 = 1.0, s1 = 0.0, c2 = 1.0, s2 = 0.0;
  int rotated = jacobi_rotation(s[0], s[1], s[2], negligible, tol, &c1, &s1);
  rotated |= jacobi_rotation(s[3], s[4], s[5], negligible, tol, &c2, &s2);
  rotate_columns(x1, y1, BJ_ROWS, c1, s1);
  rotate_columns(x2, y2, BJ_ROWS, c2, s2);
  return rotated;
}

/* Sweeps of block Jacobi over A (m x n, m <= 32 BJ_ROWS) until a sweep
 * rotates nothing (true) or SVD_MAX_SWEEPS (false). Block b holds columns
 * 2b and 2b + 1; blocks round-robin in pairs, one block pair per group of g
 * lanes (a power of two with g BJ_ROWS >= m); lane l of a group holds rows
 * l + g e, e < BJ_ROWS, of the 4 columns (zeros beyond m and n). */
template <int G>
static __device__ bool block_jacobi(double *A, int m, int n, double negligible, double tol)
{
  const int group = threadIdx.x / G, gl = threadIdx.x % G, groups = blockDim.x / G;
  const int nb = (n + 1) / 2, nbp = nb + (nb & 1), block_pairs = nbp / 2;
  for (int sweep = 0; sweep < SVD_MAX_SWEEPS; sweep++) {
    int rotated = 0;
    for (int round = 0; round < nbp - 1; round++) {
      // the groups of a warp take part together (the shuffles need whole
      // warps); warps with no block pair left skip the pass
      for (int base = 0; base < block_pairs; base += groups) {
        const int p = base + group;
        if (base + (threadIdx.x & ~31) / G >= block_pairs) continue;
        int bi = 0, bj = 0;
        if (p < block_pairs) round_robin_pair(round, p, nbp, &bi, &bj);
        // column k's rows in this lane: a[k][G e] for e < cnt[k]
        const int own = (m - gl + G - 1) / G;
        double *a[4];
        int cnt[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
          const int c = 2 * (k < 2 ? bi : bj) + (k & 1);
          cnt[k] = p < block_pairs && c < n ? own : 0;
          a[k] = A + (size_t) c * m + gl;
        }
        double x[4][BJ_ROWS];
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
          for (int e = 0; e < BJ_ROWS; e++) x[k][e] = e < cnt[k] ? a[k][G * e] : 0.0;
        if (round == 0) rotated |= rotate_two_pairs<G>(x[0], x[1], x[2], x[3], negligible, tol);
        rotated |= rotate_two_pairs<G>(x[0], x[2], x[1], x[3], negligible, tol);
        rotated |= rotate_two_pairs<G>(x[0], x[3], x[1], x[2], negligible, tol);
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
          for (int e = 0; e < BJ_ROWS; e++)
            if (e < cnt[k]) a[k][G * e] = x[k][e];
      }
      __syncthreads();
    }
    if (!__syncthreads_or(rotated)) return true;
  }
  return false;
}

template <typename T, int G>
__global__ void __launch_bounds__(BJ_MAX_THREADS)
svd_left_block_jacobi(int m, int n, int km, const T *w, int transposed, double *sig, T *u)
{
  extern __shared__ double smem[];
  const svd_smem sm = svd_layout(smem, m, n);
  const double negligible = svd_load(w + blockIdx.x * (size_t) m * n, m, n, transposed, sm);
  int nj = n;
  if (m < n) {   // the same U and S from L (m x m, first m columns of A)
    lq_in_place(sm.A, m, n, sm.scratch);
    nj = m;
  }
  bool converged = block_jacobi<G>(sm.A, m, nj, negligible, m * DBL_EPSILON);
  svd_finish<T>(sm, m, nj, km, negligible, converged ? km : 0, sig, u);
}

/* The lanes per column group of svd_left_block_jacobi for m rows: the power
 * of two g >= 4 with g BJ_ROWS >= m (0: m too large, take svd_left_jacobi).
 * A compile-time g makes the register columns' addresses immediate offsets
 * from 4 bases (a run-time one kept 32 addresses live, and spilled). */
static int block_jacobi_lanes(int m)
{
  int g = 4;
  while (g * BJ_ROWS < m) g *= 2;
  return g <= 32 ? g : 0;
}

template <typename T, int G>
static gk_status launch_block_jacobi(int count, int rows, int cols, const T *w, int transposed,
                                     double *sig, T *u, size_t smem, cudaStream_t s,
                                     gk_error *err)
{
  // a group per block pair of the km columns that the rotations see; at
  // least 4 warps for the reduction to L and the output
  const int km = std::min(rows, cols), nb = (km + 1) / 2, block_pairs = (nb + (nb & 1)) / 2;
  const int threads = std::min(BJ_MAX_THREADS, std::max(128, (block_pairs * G + 31) / 32 * 32));
  if (gk_cuda_status(cudaFuncSetAttribute(svd_left_block_jacobi<T, G>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem),
                     "the H2 batched SVD", err))
    return err->status;
  svd_left_block_jacobi<T, G><<<count, threads, smem, s>>>(rows, cols, km, w, transposed, sig, u);
  return gk_cuda_check_launch("the H2 batched SVD", err);
}

bool h2_svd_gpu_fits(int rows, int cols)
{
  return rows > 0 && cols > 0 && svd_shared_bytes(rows, cols) <= gk_device_shared_optin();
}

template <typename T>
static gk_status svd_left_gpu(int count, int rows, int cols, const T *w, int transposed,
                              double *sig, T *u, cudaStream_t s, gk_error *err)
{
  if (count <= 0 || rows <= 0 || cols <= 0) return GK_OK;
  const size_t smem = svd_shared_bytes(rows, cols);
  switch (block_jacobi_lanes(rows)) {
  case 4: return launch_block_jacobi<T, 4>(count, rows, cols, w, transposed, sig, u, smem, s, err);
  case 8: return launch_block_jacobi<T, 8>(count, rows, cols, w, transposed, sig, u, smem, s, err);
  case 16: return launch_block_jacobi<T, 16>(count, rows, cols, w, transposed, sig, u, smem, s, err);
  case 32: return launch_block_jacobi<T, 32>(count, rows, cols, w, transposed, sig, u, smem, s, err);
  default: break;
  }
  const int warps = std::min(SVD_MAX_WARPS, std::max(1, (cols + 1) / 2));
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

template <typename T>
static gk_status svd_left_gpu_host(int nodes, int rows, int cols, const double *w, double *sig,
                                   double *u, gk_error *err)
{
  const size_t nw = (size_t) nodes * rows * cols, km = std::min(rows, cols);
  const size_t nu = (size_t) nodes * rows * km, ns = (size_t) nodes * km;
  std::vector<T> wt(w, w + nw), ut(nu);
  T *dw = NULL, *du = NULL;
  double *ds = NULL;
  gk_status st = GK_OK;
  if (!h2_svd_gpu_fits(rows, cols))
    return gk_fail(err, GK_ERR_INTERNAL, "a %d x %d matrix exceeds a block's shared memory", rows,
                   cols);
  if (gk_cuda_status(cudaMalloc((void **) &dw, nw * sizeof(T)), "the SVD test", err) ||
      gk_cuda_status(cudaMalloc((void **) &du, nu * sizeof(T)), "the SVD test", err) ||
      gk_cuda_status(cudaMalloc((void **) &ds, ns * sizeof(double)), "the SVD test", err) ||
      gk_cuda_status(cudaMemcpy(dw, wt.data(), nw * sizeof(T), cudaMemcpyHostToDevice),
                     "the SVD test", err) ||
      h2_svd_left_gpu(nodes, rows, cols, dw, 0, ds, du, 0, err) ||
      gk_cuda_status(cudaMemcpy(ut.data(), du, nu * sizeof(T), cudaMemcpyDeviceToHost),
                     "the SVD test", err) ||
      gk_cuda_status(cudaMemcpy(sig, ds, ns * sizeof(double), cudaMemcpyDeviceToHost),
                     "the SVD test", err))
    st = err->status;
  cudaFree(dw);
  cudaFree(du);
  cudaFree(ds);
  std::copy(ut.begin(), ut.end(), u);
  return st;
}

gk_status h2_svd_left_gpu_host(int nodes, int rows, int cols, const double *w, int single,
                               double *sig, double *u, gk_error *err)
{
  if (nodes <= 0 || rows <= 0 || cols <= 0) return GK_OK;
  try {
    return single ? svd_left_gpu_host<float>(nodes, rows, cols, w, sig, u, err)
                  : svd_left_gpu_host<double>(nodes, rows, cols, w, sig, u, err);
  } catch (...) {
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the SVD test");
  }
}
