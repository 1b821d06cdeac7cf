/*
 * What the body of a user's formula (gk_formula() in R) calls beyond the math
 * library. R translates a formula into one C expression body, a list of
 * `const T t<k> = ...;` statements over the coordinates x1.., y1.. and the
 * parameters p1.. (R/formula_code.R); that same body is compiled
 *   - for the CPU engine as a C function of doubles (R's C compiler), and
 *   - for the GPU engine as a value functor of reduce_kernels.cuh for
 *     T = double or float (NVRTC), spliced into the built-in tile kernels.
 * The two sets of helpers below are the only difference between them.
 */
#ifndef GK_FORMULA_H
#define GK_FORMULA_H

#include "gpukernels/gk_kernel.h"

#ifdef __CUDACC__
#include "gpukernels/reduce_kernels.cuh"

namespace gkformula {

// 2^(u / unit), where R writes exp(v) as gk_exp2(v log2(e) unit) with the
// constant folded into the formula's derived parameters, and the unit is the
// engine's (R passes the parameters for the engine and precision of the call):
// 1 in float, one MUFU.EX2 as the built-in gaussian and exponential families;
// 64 in double, the engine's table and polynomial (exp2_units, relative error
// below 3.3e-16). So a formula equal to a built-in family costs what it does,
// without a branch per pair: in double, u at or beyond 1023.5 x 64 (results
// past 1.3e308) gives Inf, tested on the high word (integer operations, not
// one more FP64 instruction); NaN stays NaN.
__device__ __forceinline__ float gk_exp2(float u) { return gkreduce::exp2_units(u); }
__device__ __forceinline__ double gk_exp2(double u)
{
  const double v = gkreduce::exp2_units(u);
  const unsigned above = (unsigned) (__double2hiint(u) - 0x40EFFE00);   // 65504.0's high word
  return above <= 0x7FF00000u - 0x40EFFE00u ? __longlong_as_double(0x7ff0000000000000LL) : v;
}
// The same where R has proved u <= 0 (gk_formula_sign(): -S, -sqrt(S), ...):
// nothing to overflow, so the built-in gaussian's exact cost.
template <typename T> __device__ __forceinline__ T gk_exp2_nonpos(T u) { return gkreduce::exp2_units(u); }
template <typename T> __device__ __forceinline__ T gk_sign(T v) { return (T) ((v > 0) - (v < 0)); }
template <typename T> __device__ __forceinline__ T gk_dnorm(T u)
{
  return (T) 0.398942280401432677939946 * exp((T) -0.5 * u * u);
}
template <typename T> __device__ __forceinline__ T gk_pnorm(T u)
{
  return (T) 0.5 * erfc(-u * (T) 0.707106781186547524400844);
}

// Coordinate K of x_i: from registers when the kernel holds the point there
// (DS > 0), else from global memory (column-major, m rows).
template <typename T, int DS, int K>
__device__ __forceinline__ T coord(const T *xr, const T *xg, size_t m)
{
  if constexpr (DS > K) return xr[K];
  else return xg[(size_t) K * m];
}

// A formula's matrix (the dense GP on the GPU): out[i + j m] = weight
// F(x_i, y_j) + beta out[i + j m] for x column-major (a.m rows) and y
// point-major (n points of a.dim), one thread per entry.
template <class F>
__global__ void formula_matrix(gkreduce::Args a, const double *x, const double *y, size_t n,
                               double weight, double beta, double *out)
{
  const size_t total = a.m * n;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    const size_t i = e % a.m, j = e / a.m;
    const double v = F::template points<double, 0>(x + i, x + i, a.m, y + j * a.dim, a);
    out[e] = beta == 0.0 ? weight * v : weight * v + beta * out[e];
  }
}

}  // namespace gkformula

#else

static inline double gk_exp2(double u) { return exp2(u); }   /* unit 1 on the CPU */
static inline double gk_exp2_nonpos(double u) { return exp2(u); }
static inline double gk_sign(double v) { return (double) ((v > 0) - (v < 0)); }
static inline double gk_dnorm(double u) { return 0.398942280401432677939946 * exp(-0.5 * u * u); }
static inline double gk_pnorm(double u) { return 0.5 * erfc(-u * 0.707106781186547524400844); }

#endif
#endif
