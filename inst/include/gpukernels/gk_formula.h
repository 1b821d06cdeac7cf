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

// 2^(u/64). In float one MUFU.EX2, as the built-in gaussian and exponential
// families; in double the engine's table and polynomial (exp2_units, relative
// error below 3.3e-16) up to 2^1000, the library beyond (tested on the high
// word: an integer compare, not one more FP64 instruction). R writes exp(v)
// as 2^(v 64 log2 e / 64), with the constant folded into the formula's
// parameters, so that a formula equal to a built-in family costs what it does.
__device__ __forceinline__ float gk_exp2(float u) { return gkreduce::exp2_units(u * (1.0f / 64)); }
__device__ __forceinline__ double gk_exp2(double u)
{
  return __double2hiint(u) < 0x40EF4000 ? gkreduce::exp2_units(u) : exp2(u * (1.0 / 64));
}
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

}  // namespace gkformula

#else

static inline double gk_exp2(double u) { return exp2(u * (1.0 / 64)); }
static inline double gk_sign(double v) { return (double) ((v > 0) - (v < 0)); }
static inline double gk_dnorm(double u) { return 0.398942280401432677939946 * exp(-0.5 * u * u); }
static inline double gk_pnorm(double u) { return 0.5 * erfc(-u * 0.707106781186547524400844); }

#endif
#endif
