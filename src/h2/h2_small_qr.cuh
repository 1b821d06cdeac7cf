/*
 * Thin QR factorizations of many small matrices, for the H2 orthogonalization
 * (orthogonalize_gpu in h2_orthog_cuda.cu): the leaf bases U_i (m x k) and
 * the stacked transfers [T_c1 E_c1; T_c2 E_c2] (2 kc x k). For each matrix
 * A_b (m x n) of a batch, with r = min(m, n):
 *   - the Householder QR A_b = Q R as LAPACK's geqr2 (reflectors as larfg,
 *     rescaled as stack_qr_reflect in h2_stack_qr.cuh does, so that float
 *     survives tiny and huge columns),
 *   - R's first r rows (r x n, zero below the diagonal) written out,
 *   - Q's first r columns (m x r) formed as LAPACK's org2r does and written out,
 * in one kernel, where the fallback takes geqrfBatched, take_r and form_q.
 * A matrix with fewer rows than columns needs no zero padding: its last
 * reflector is the identity, as geqrf's would be for the padded matrix.
 */
#ifndef GK_H2_SMALL_QR_CUH
#define GK_H2_SMALL_QR_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include "h2/h2_stack_qr.cuh"   // stack_qr_traits, stack_qr_householder

/*
 * Layout: one thread block per matrix. The matrix lives in shared memory,
 * column-major with leading dimension m, loaded and written back with
 * consecutive threads on consecutive entries. One warp per column: for
 * reflector j a warp takes columns j+1, j+1+W, ... (W warps), each as a
 * fragment of rows j..m-1 in registers (row j + lane + 32 t in entry t of
 * lane `lane`, RC entries per lane, zero for rows >= m), sums its dot
 * product with the reflector by shuffles and writes the column back. The
 * warp that updates column j+1 makes reflector j+1 from its fragment at once
 * (lookahead), so each column costs one __syncthreads. Once R has been
 * written out, Q is formed in place over the reflectors, the reflectors
 * applied in reverse order, again one warp per column and one sync per
 * reflector; column c starts as H_c e_c when reflector c - 1 first touches it.
 *
 * Output: R_b at r + b sr (leading dimension r); Q_b's row i, split into
 * blocks of `half` rows (the two children's transfers, or one block), at
 * q + b sq + (i / half) sh + (i % half), columns ldq apart.
 *
 * Limits: m <= 32 SMALL_QR_MAX_RC = 256 rows, and the matrix plus its
 * scalars tau, (m n + r) entries, within the block's opt-in shared memory
 * (small_qr_fits): 128 x 64 in double takes 64.5 KB (three blocks per SM on
 * an H100), 250 x 125 (order 5 in 3D) 245 KB in double, beyond the H100's
 * 227 KB, and 122 KB in float. Arithmetic in T, as geqrf's.
 *
 * A matrix beyond the shared memory but within 256 rows is factored by the
 * same kernel in place in global memory (small_qr_launch_global: only tau in
 * shared memory). Each step reads and writes a warp's columns once, as in
 * shared memory, so the traffic stays in L1 and L2; it replaces geqrfBatched,
 * which goes through the trailing matrix in many launches, and a Q formed
 * one thread per column.
 *
 * Needs only the CUDA runtime.
 */

// Rows per lane at most (the fragment lives in registers): m <= 32 x this.
#define SMALL_QR_MAX_RC 8
#define SMALL_QR_MAX_WARPS 8

/* A batch: A_b at a + b sa (m x n, leading dimension m); R_b and Q_b as in
 * the header comment. */
template <typename T>
struct small_qr_batch {
  const T *a;
  size_t sa;
  int m, n;
  T *r;
  size_t sr;
  T *q;
  size_t sq;
  int ldq, half;
  size_t sh;
};

// The sum over the warp, the same in every lane (each step adds the same two
// values, in either order, in both lanes of a pair).
template <typename T>
__device__ __forceinline__ T small_qr_warp_sum(T x)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
template <typename T>
__device__ __forceinline__ T small_qr_warp_max(T x)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

/* Reflector j from the warp's fragment `a` of column j (rows base + lane +
 * 32 t, base = j or j - 1, zero from row m): H = I - tau [1; v] [1; v]^T with
 * H [alpha; b] = [beta; 0], alpha = A(j, j), b = A(j+1:m-1, j). The fragment
 * becomes beta in row j and v below it (rows above j unchanged); returns tau,
 * the same in every lane. tau = 0 (H = I, fragment unchanged) when b is zero,
 * as larfg. */
template <typename T, int RC>
__device__ __forceinline__ T small_qr_reflect(T (&a)[RC], int base, int j, int m, int lane)
{
  typedef stack_qr_traits<T> lim;
  T s = 0, mine = 0;
#pragma unroll
  for (int t = 0; t < RC; t++) {
    int i = base + lane + 32 * t;
    if (i > j && i < m) s += a[t] * a[t];
    if (i == j) mine = a[t];
  }
  s = small_qr_warp_sum(s);
  const T alpha = __shfl_sync(0xffffffffu, mine, j - base);   // row j: lane j - base, t = 0
  T beta, tau, scale;
  if (s >= lim::lo() && s <= lim::hi() && fabs(alpha) <= lim::root_hi()) {
    stack_qr_householder(alpha, s, &beta, &tau, &scale);
#pragma unroll
    for (int t = 0; t < RC; t++) {
      int i = base + lane + 32 * t;
      if (i == j) a[t] = beta;
      else if (i > j && i < m) a[t] *= scale;
    }
    return tau;
  }
  // Rare: tiny (denormal), huge or non-finite entries. Everything in units of
  // u = max |entry| (as stack_qr_reflect, LAPACK's larfg rescales); NaN goes on.
  T mb = 0;
#pragma unroll
  for (int t = 0; t < RC; t++) {
    int i = base + lane + 32 * t;
    if (i > j && i < m) mb = fmax(mb, fabs(a[t]));
  }
  mb = small_qr_warp_max(mb);
  if (s == (T) 0 && mb == (T) 0) return 0;   // nothing below the diagonal: H = I
  const T u = fmax(mb, fabs(alpha));
  T su = 0;
#pragma unroll
  for (int t = 0; t < RC; t++) {
    int i = base + lane + 32 * t;
    if (i > j && i < m) su += (a[t] / u) * (a[t] / u);
  }
  su = small_qr_warp_sum(su);
  stack_qr_householder(alpha / u, su, &beta, &tau, &scale);
#pragma unroll
  for (int t = 0; t < RC; t++) {
    int i = base + lane + 32 * t;
    if (i == j) a[t] = beta * u;
    else if (i > j && i < m) a[t] = (a[t] / u) * scale;
  }
  return tau;
}

/* a <- H a for the reflector (v, tau) held as the fragment v ([1; v] in the
 * fragment's rows, zero from row m); a warp's dot product by shuffles. */
template <typename T, int RC>
__device__ __forceinline__ void small_qr_apply(T (&a)[RC], const T (&v)[RC], T tau)
{
  T w[2] = {0, 0};   // two chains
#pragma unroll
  for (int t = 0; t < RC; t++) w[t & 1] += v[t] * a[t];
  const T d = tau * small_qr_warp_sum(w[0] + w[1]);
#pragma unroll
  for (int t = 0; t < RC; t++) a[t] -= d * v[t];
}

/* This lane's fragment of reflector j, [1; A(j+1:m-1, j)] (rows j + lane +
 * 32 t, zero past m), from column j of the matrix in shared memory. */
template <typename T, int RC>
__device__ __forceinline__ void small_qr_reflector(const T *A, int m, int j, int lane, T (&v)[RC])
{
#pragma unroll
  for (int t = 0; t < RC; t++) {
    int i = j + lane + 32 * t;
    v[t] = i == j ? (T) 1 : i < m ? A[i + j * m] : (T) 0;
  }
}

/* Block b factors matrix b; blockDim.x a multiple of 32, at most
 * 32 SMALL_QR_MAX_WARPS; m <= 32 RC. IN_PLACE: the matrix is factored where
 * it lies (p.a, then overwritten), not in shared memory. */
template <typename T, int RC, bool IN_PLACE>
__global__ void __launch_bounds__(32 * SMALL_QR_MAX_WARPS)
small_qr_kernel(const small_qr_batch<T> p)
{
  extern __shared__ __align__(16) unsigned char small_qr_smem[];
  const int m = p.m, n = p.n, r = m < n ? m : n;
  const size_t b = blockIdx.x;
  // m x n, leading dimension m; then r scalars tau
  T *A = IN_PLACE ? (T *) (p.a + b * p.sa) : (T *) small_qr_smem;
  T *tau = IN_PLACE ? (T *) small_qr_smem : A + m * n;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;

  if (!IN_PLACE) {
    const T *src = p.a + b * p.sa;
    for (int e = threadIdx.x; e < m * n; e += blockDim.x) A[e] = src[e];
    __syncthreads();
  }

  // Reflector 0 (the others come from the lookahead below).
  if (warp == 0) {
    T a[RC];
#pragma unroll
    for (int t = 0; t < RC; t++) {
      int i = lane + 32 * t;
      a[t] = i < m ? A[i] : (T) 0;
    }
    T t0 = small_qr_reflect<T, RC>(a, 0, 0, m, lane);
#pragma unroll
    for (int t = 0; t < RC; t++) {
      int i = lane + 32 * t;
      if (i < m) A[i] = a[t];
    }
    if (lane == 0) tau[0] = t0;
  }
  __syncthreads();

  // Factorization: step j applies reflector j to columns j+1 .. n-1 (rows
  // j .. m-1) and makes reflector j+1. Reads column j and tau[j], written the
  // step before; writes columns > j and tau[j+1]. (The last reflector, r - 1,
  // changes no column: none is right of it when m >= n, and it is the
  // identity when m < n.)
  for (int j = 0; j + 1 < r; j++) {
    const T tj = tau[j];
    T v[RC];
    // (no early exit: one __syncthreads for all)
    if (j + 1 + warp < n) small_qr_reflector<T, RC>(A, m, j, lane, v);
    for (int c = j + 1 + warp; c < n; c += warps) {
      T a[RC];
#pragma unroll
      for (int t = 0; t < RC; t++) {
        int i = j + lane + 32 * t;
        a[t] = i < m ? A[i + c * m] : (T) 0;
      }
      if (tj != (T) 0) small_qr_apply<T, RC>(a, v, tj);
      if (c == j + 1 && c < r) {
        T tc = small_qr_reflect<T, RC>(a, j, c, m, lane);
        if (lane == 0) tau[c] = tc;
      }
#pragma unroll
      for (int t = 0; t < RC; t++) {
        int i = j + lane + 32 * t;
        if (i < m) A[i + c * m] = a[t];
      }
    }
    __syncthreads();
  }

  // R: rows 0 .. r-1, zero below the diagonal.
  T *R = p.r + b * p.sr;
  for (int e = threadIdx.x; e < r * n; e += blockDim.x) {
    int i = e % r, c = e / r;
    R[e] = i <= c ? A[i + c * m] : (T) 0;
  }
  __syncthreads();   // R read before Q overwrites it

  // Q's columns 0 .. r-1 in place (org2r): step j applies reflector j to
  // columns j+1 .. r-1, rows j .. m-1. Column c is Q's from step c - 1 on,
  // which starts it as H_c e_c = e_c - tau_c [1; v_c] from its reflector;
  // until step j its row j still holds R, read as zero. Reads column j
  // (reflector j) and tau; writes columns > j only.
  for (int j = r - 2; j >= 0; j--) {
    const T tj = tau[j];
    T v[RC];
    if (j + 1 + warp < r) small_qr_reflector<T, RC>(A, m, j, lane, v);
    for (int c = j + 1 + warp; c < r; c += warps) {
      T a[RC];
      if (c == j + 1) {
        const T tc = tau[c];
#pragma unroll
        for (int t = 0; t < RC; t++) {
          int i = j + lane + 32 * t;
          a[t] = i == c ? (T) 1 - tc : i > c && i < m ? -tc * A[i + c * m] : (T) 0;
        }
      } else {
#pragma unroll
        for (int t = 0; t < RC; t++) {
          int i = j + lane + 32 * t;
          a[t] = i > j && i < m ? A[i + c * m] : (T) 0;
        }
      }
      if (tj != (T) 0) small_qr_apply<T, RC>(a, v, tj);
#pragma unroll
      for (int t = 0; t < RC; t++) {
        int i = j + lane + 32 * t;
        if (i < m) A[i + c * m] = a[t];
      }
    }
    __syncthreads();
  }
  // Column 0: H_0 e_0 (every warp has read reflector 0 by the last sync).
  if (warp == 0) {
    const T t0 = tau[0];
    for (int i = lane; i < m; i += 32) A[i] = i == 0 ? (T) 1 - t0 : -t0 * A[i];
  }
  __syncthreads();

  T *Q = p.q + b * p.sq;
  for (int e = threadIdx.x; e < m * r; e += blockDim.x) {
    int i = e % m, c = e / m, h = i / p.half;
    Q[h * p.sh + (size_t) (i - h * p.half) + (size_t) c * p.ldq] = A[e];
  }
}

template <typename T>
inline size_t small_qr_shared_bytes(int m, int n)
{
  return ((size_t) m * n + (size_t) (m < n ? m : n)) * sizeof(T);
}

/* The warps of a block: one per 8 columns, so that each warp has a few
 * columns per reflector to overlap and narrow matrices take small blocks. */
inline int small_qr_warps(int n)
{
  int warps = (n + 7) / 8;
  return warps < 1 ? 1 : warps > SMALL_QR_MAX_WARPS ? SMALL_QR_MAX_WARPS : warps;
}

/* Whether the device in use runs small_qr_kernel<T> on m x n matrices. */
template <typename T>
inline bool small_qr_fits(int m, int n)
{
  if (m < 1 || n < 1 || m > 32 * SMALL_QR_MAX_RC) return false;
  return small_qr_shared_bytes<T>(m, n) <= gk_device_shared_optin();
}

template <typename T, int RC>
inline cudaError_t small_qr_launch_rc(int count, const small_qr_batch<T> &p, cudaStream_t s)
{
  size_t smem = small_qr_shared_bytes<T>(p.m, p.n);
  cudaError_t st = cudaFuncSetAttribute(small_qr_kernel<T, RC, false>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem);
  if (st != cudaSuccess) return st;
  small_qr_kernel<T, RC, false><<<count, 32 * small_qr_warps(p.n), smem, s>>>(p);
  return cudaSuccess;
}

/* Factors `count` matrices of the batch on stream s (requires small_qr_fits).
 * Returns the attribute call's status; the launch's is the caller's to check
 * (cudaGetLastError). */
template <typename T>
inline cudaError_t small_qr_launch(int count, const small_qr_batch<T> &p, cudaStream_t s)
{
  if (count <= 0) return cudaSuccess;
  if (p.m <= 32) return small_qr_launch_rc<T, 1>(count, p, s);
  if (p.m <= 64) return small_qr_launch_rc<T, 2>(count, p, s);
  if (p.m <= 128) return small_qr_launch_rc<T, 4>(count, p, s);
  return small_qr_launch_rc<T, SMALL_QR_MAX_RC>(count, p, s);
}

/* Whether small_qr_launch_global takes m x n matrices: at most 256 rows. */
inline bool small_qr_fits_global(int m, int n)
{
  return m >= 1 && n >= 1 && m <= 32 * SMALL_QR_MAX_RC;
}

/* Factors `count` matrices of the batch on stream s in place (requires
 * small_qr_fits_global): p.a is overwritten (cast from const), so it must be
 * a workspace of the caller's. The launch's status is the caller's to check. */
template <typename T>
inline void small_qr_launch_global(int count, const small_qr_batch<T> &p, cudaStream_t s)
{
  if (count <= 0) return;
  size_t smem = (size_t) (p.m < p.n ? p.m : p.n) * sizeof(T);
  int threads = 32 * small_qr_warps(p.n);
  if (p.m <= 64) small_qr_kernel<T, 2, true><<<count, threads, smem, s>>>(p);
  else if (p.m <= 128) small_qr_kernel<T, 4, true><<<count, threads, smem, s>>>(p);
  else small_qr_kernel<T, SMALL_QR_MAX_RC, true><<<count, threads, smem, s>>>(p);
}

#endif
