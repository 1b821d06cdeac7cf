/*
 * The R factors of the H2 compression's downsweep stacks (h2_generate_cuda.cu):
 * for each node i, the upper triangular R_i (kl x kl, Q not formed) of
 *   [H_i; S_e1^T; S_e2^T; ...],   H_i = R_parent E_i^T (kp x kl, kp >= 0),
 * with S_e the kl x kl coupling blocks of node i's block row.
 */
#ifndef GK_H2_STACK_QR_CUH
#define GK_H2_STACK_QR_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include "device/gk_device.h"   // gk_device_shared_optin

/*
 * One thread block per node, thread c owning column c. The running R lives in
 * shared memory (upper triangle packed by rows: thread c reads row j at
 * consecutive addresses, and half of a full square lets twice as many blocks
 * share an SM); the stack streams through it C rows at a time. A chunk B is
 * folded in by the Householder QR of [R; B]: the reflector of column j touches
 * only R's row j and B's column j, so B's column c stays in thread c's
 * registers and only the reflector (C entries and tau) crosses shared memory,
 * double buffered: one __syncthreads per column.
 *
 * Limits: kl <= STACK_QR_MAX_COLUMNS (one thread per column) and the packed R
 * plus the reflectors within the block's opt-in shared memory
 * (stack_qr_fits): on an H100 (227 KB) kl <= 240 in double, and in float the
 * thread limit, kl <= 256.
 *
 * Inputs, column-major: the heads as H_i^T (kl x kp, kl * kp apart per node),
 * the coupling blocks S_e (kl x kl, block s at S + s kl^2), so that a row of
 * the stack is kl consecutive entries either way. Output: R_i at R + i kl^2,
 * kl x kl, zero below the diagonal. Arithmetic in T, as geqrf's.
 *
 * Needs only the CUDA runtime: also included by a standalone benchmark.
 */

#define STACK_QR_MAX_COLUMNS 256
// Rows per chunk in the package: registers (C per thread) against the fixed
// cost of each column (a sync, a square root, two divisions).
#define STACK_QR_ROWS 32

template <typename T> struct stack_qr_traits;
/* A sum of squares in [lo, hi] (and |alpha| <= root_hi) has neither overflowed
 * nor lost more than rounding to underflow; outside, the norm is rescaled. */
template <> struct stack_qr_traits<float> {
  typedef float4 vec;
  enum { width = 4 };
  static __device__ __forceinline__ float lo() { return 1e-30f; }
  static __device__ __forceinline__ float hi() { return 1e30f; }
  static __device__ __forceinline__ float root_hi() { return 1e15f; }
};
template <> struct stack_qr_traits<double> {
  typedef double2 vec;
  enum { width = 2 };
  static __device__ __forceinline__ double lo() { return 1e-290; }
  static __device__ __forceinline__ double hi() { return 1e290; }
  static __device__ __forceinline__ double root_hi() { return 1e145; }
};

__host__ __device__ static inline int stack_qr_row_start(int j, int kl)
{
  return j * kl - j * (j - 1) / 2;   // row j of the packed triangle: columns j .. kl-1
}

/* beta, tau and the scale of v = b * scale of the reflector below (LAPACK's
 * larfg without its rescaling) from alpha and s = ||b||^2: the caller keeps
 * them in range (stack_qr_traits). Shared with h2_small_qr.cuh. */
template <typename T>
__device__ __forceinline__ void stack_qr_householder(T alpha, T s, T *beta, T *tau, T *scale)
{
  T nrm = sqrt(alpha * alpha + s);
  T b = alpha >= (T) 0 ? -nrm : nrm;   // |alpha - beta| >= nrm > 0: no cancellation
  *scale = (T) 1 / (alpha - b);
  *tau = (b - alpha) / b;
  *beta = b;
}

/* The reflector H = I - tau [1; v] [1; v]^T with H [alpha; b] = [beta; 0]
 * (LAPACK's larfg): alpha = R(j,j) at *rjj, b the chunk's column j. Writes
 * v and tau to shared memory, beta to *rjj; tau = 0 (H = I) for a zero b. */
template <typename T, int C>
__device__ __forceinline__ void stack_qr_reflect(const T (&b)[C], T *rjj, T *v, T *tau)
{
  typedef stack_qr_traits<T> lim;
  T alpha = *rjj, s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma unroll
  for (int i = 0; i < C; i += 4) {
    s0 += b[i] * b[i];
    s1 += b[i + 1] * b[i + 1];
    s2 += b[i + 2] * b[i + 2];
    s3 += b[i + 3] * b[i + 3];
  }
  T s = (s0 + s1) + (s2 + s3);
  if (s >= lim::lo() && s <= lim::hi() && fabs(alpha) <= lim::root_hi()) {
    T beta, scale;
    stack_qr_householder(alpha, s, &beta, tau, &scale);
#pragma unroll
    for (int i = 0; i < C; i++) v[i] = b[i] * scale;
    *rjj = beta;
    return;
  }
  // Rare: tiny (denormal), huge or non-finite entries. Everything in units of
  // m = max |entry|, so that no reciprocal of a denormal norm overflows (as
  // LAPACK's larfg rescales); NaN goes on into R.
  T mb = 0;
#pragma unroll
  for (int i = 0; i < C; i++) mb = fmax(mb, fabs(b[i]));
  if (s == (T) 0 && mb == (T) 0) {   // nothing below the diagonal: H = I (a NaN goes on)
    *tau = 0;
    return;
  }
  T m = fmax(mb, fabs(alpha)), t = 0, beta, scale;
#pragma unroll
  for (int i = 0; i < C; i++) t += (b[i] / m) * (b[i] / m);
  // in units of m: the norm in [1, sqrt(C + 1)], |a - beta| >= 1
  stack_qr_householder(alpha / m, t, &beta, tau, &scale);
#pragma unroll
  for (int i = 0; i < C; i++) v[i] = (b[i] / m) * scale;
  *rjj = beta * m;
}

/* [R(j,c); b] <- H [R(j,c); b] for the reflector (v, tau) of column j. */
template <typename T, int C>
__device__ __forceinline__ void stack_qr_apply(T (&b)[C], const T *v, T tau, T *rjc)
{
  typedef typename stack_qr_traits<T>::vec V;
  const int W = stack_qr_traits<T>::width;
  union vec_t { V v; T t[W]; };
  T w[4] = {*rjc, 0, 0, 0};   // four chains for ILP
#pragma unroll
  for (int i = 0; i < C; i += W) {
    vec_t u;
    u.v = *(const V *) (v + i);
#pragma unroll
    for (int q = 0; q < W; q++) w[(i + q) & 3] += u.t[q] * b[i + q];
  }
  T d = tau * ((w[0] + w[1]) + (w[2] + w[3]));
  *rjc -= d;
#pragma unroll
  for (int i = 0; i < C; i += W) {   // v again from shared memory: fewer registers than keeping it
    vec_t u;
    u.v = *(const V *) (v + i);
#pragma unroll
    for (int q = 0; q < W; q++) b[i + q] -= d * u.t[q];
  }
}

/* Block b: node first + b (row_ptr / row_blocks: the level's block rows),
 * head H^T at heads + b kl kp. blockDim.x >= kl, a multiple of 32. */
template <typename T, int C>
__global__ void __launch_bounds__(STACK_QR_MAX_COLUMNS)
stack_qr_kernel(const T *heads, int kp, const T *S, const int *row_ptr, const int *row_blocks,
                int kl, int first, T *R)
{
  static_assert(C % 4 == 0, "chunks of a multiple of 4 rows");
  extern __shared__ __align__(16) unsigned char stack_qr_smem[];
  T *vs = (T *) stack_qr_smem;                 // 2 x C: reflectors of columns j and j + 1
  const T **rowp = (const T **) (vs + 2 * C);  // C: the chunk's rows (NULL: zero)
  T *taus = (T *) (rowp + C);                  // 2
  T *Rs = taus + 2;                            // kl (kl + 1) / 2
  const int c = threadIdx.x, node = first + blockIdx.x;
  const int begin = row_ptr[node], rows = kp + (row_ptr[node + 1] - begin) * kl;
  const size_t kk = (size_t) kl * kl;
  const T *head = heads + (size_t) blockIdx.x * kl * kp;
  for (int e = c; e < kl * (kl + 1) / 2; e += blockDim.x) Rs[e] = 0;
  for (int row0 = 0; row0 < rows; row0 += C) {
    for (int r = c; r < C; r += blockDim.x) {
      int g = row0 + r;
      const T *p = NULL;
      if (g < kp) {
        p = head + (size_t) g * kl;
      } else if (g < rows) {
        int e = (g - kp) / kl;
        p = S + (size_t) row_blocks[begin + e] * kk + (size_t) (g - kp - e * kl) * kl;
      }
      rowp[r] = p;
    }
    __syncthreads();
    T b[C];
#pragma unroll
    for (int i = 0; i < C; i++) {
      const T *p = rowp[i];
      b[i] = p && c < kl ? p[c] : (T) 0;
    }
    if (c == 0) stack_qr_reflect<T, C>(b, Rs, vs, taus);
    __syncthreads();
    for (int j = 0; j + 1 < kl; j++) {
      // reflector j in buffer j & 1; j + 1 goes to the other, read after the sync
      const T tau = taus[j & 1];
      if (c > j && c < kl && tau != (T) 0)
        stack_qr_apply<T, C>(b, vs + (j & 1) * C, tau, Rs + stack_qr_row_start(j, kl) + c - j);
      if (c == j + 1)
        stack_qr_reflect<T, C>(b, Rs + stack_qr_row_start(c, kl), vs + (c & 1) * C, taus + (c & 1));
      __syncthreads();
    }
  }
  __syncthreads();
  T *out = R + (size_t) node * kk;
  for (size_t e = c; e < kk; e += blockDim.x) {
    int i = (int) (e % kl), j = (int) (e / kl);
    out[e] = i <= j ? Rs[stack_qr_row_start(i, kl) + j - i] : (T) 0;
  }
}

template <typename T, int C>
inline size_t stack_qr_shared_bytes(int kl)
{
  return (2 * C + 2 + (size_t) kl * (kl + 1) / 2) * sizeof(T) + C * sizeof(T *);
}

/* Whether the device in use runs stack_qr_kernel<T, C> for this kl. */
template <typename T, int C>
inline bool stack_qr_fits(int kl)
{
  if (kl < 1 || kl > STACK_QR_MAX_COLUMNS) return false;
  return stack_qr_shared_bytes<T, C>(kl) <= gk_device_shared_optin();
}

/* R factors of the stacks of nodes first .. first + count - 1 on stream s
 * (requires stack_qr_fits). Returns the attribute call's status; the
 * launch's is the caller's to check (cudaGetLastError). */
template <typename T, int C>
inline cudaError_t stack_qr_launch(int count, const T *heads, int kp, const T *S,
                                   const int *row_ptr, const int *row_blocks, int kl, int first,
                                   T *R, cudaStream_t s)
{
  if (count <= 0) return cudaSuccess;
  size_t smem = stack_qr_shared_bytes<T, C>(kl);
  cudaError_t st = cudaFuncSetAttribute(stack_qr_kernel<T, C>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem);
  if (st != cudaSuccess) return st;
  stack_qr_kernel<T, C><<<count, (kl + 31) / 32 * 32, smem, s>>>(heads, kp, S, row_ptr,
                                                                  row_blocks, kl, first, R);
  return cudaSuccess;
}

#endif
