// The values F_ij of the reductions' tile kernels (reduce_kernels.cuh): the
// functors from the pair statistic (the vocabulary's kernels, the gaussian on
// pre-scaled points, knn's squared distance, the exponential family), and the
// statistic itself. Installed with the package and compiled at run time by
// NVRTC with the kernels.
#ifndef GK_REDUCE_VALUES_CUH
#define GK_REDUCE_VALUES_CUH

#include "gpukernels/reduce_ops.cuh"

namespace gkreduce {

// The kernel as a function of the pair statistic, from the shared vocabulary.
__device__ __forceinline__ float kernel_value(const gk_kernel &k, float stat) { return gk_kernel_eval_f(&k, stat); }
__device__ __forceinline__ double kernel_value(const gk_kernel &k, double stat) { return gk_kernel_eval(&k, stat); }

// F from the statistic (INNER: the statistic may be an inner product, else it
// is the squared distance; POINTS: F reads the points themselves, as the
// functors of users' formulas do, gk_formula.h): any kernel of the
// vocabulary, through a switch over the families per pair...
struct ValKernel {
  static constexpr bool INNER = true;
  static constexpr bool POINTS = false;
  template <typename T> __device__ __forceinline__ static T eval(T stat, const Args &a)
  {
    return kernel_value(a.kernel, stat);
  }
};

// ...or the gaussian on coordinates pre-scaled by sqrt(EXP2_UNIT log2(e) / 2),
// so that exp(-d^2 / 2) = 2^(-stat / EXP2_UNIT); the variance is applied once
// at the end (sums)...
struct ValGauss2 {
  static constexpr bool INNER = false;
  static constexpr bool POINTS = false;
  template <typename T> __device__ __forceinline__ static T eval(T stat, const Args &a)
  {
    return exp2_units(-stat);
  }
};

// ...or with the variance, for the reductions that exponentiate F itself
// (logsumexp, softmax) on the same pre-scaled coordinates...
struct ValGauss2Variance {
  static constexpr bool INNER = false;
  static constexpr bool POINTS = false;
  template <typename T> __device__ __forceinline__ static T eval(T stat, const Args &a)
  {
    return (T) a.kernel.variance * exp2_units(-stat);
  }
};

// ...or, without the switch (the generic path costs about 30-45 instructions
// per pair), the squared distance of knn, without its variance: the smallest
// values are the same, and the ops multiply it in at the end (out_scale)...
struct ValSqdist {
  static constexpr bool INNER = false;
  static constexpr bool POINTS = false;
  template <typename T> __device__ __forceinline__ static T eval(T stat, const Args &a)
  {
    return stat;
  }
};

// Dense launches of a min or max (ExtremeOp) over values that the kernel can
// compute again bit for bit from y in global memory push the extremes of
// groups of values (grouped_extreme below): only knn's squared distance
// (explicit subtractions and fma, nothing the compiler may contract
// differently in another place).
template <class Op> struct op_group {
  static constexpr int value = 0;
};
template <typename T, bool IS_MAX> struct op_group<ExtremeOp<T, IS_MAX>> {
  static constexpr int value = ExtremeOp<T, IS_MAX>::GROUP;
};
template <class Val> struct recomputable {
  static constexpr bool value = false;
};
template <> struct recomputable<ValSqdist> {
  static constexpr bool value = true;
};

// ...and the exponential family (exponential, Matern 1/2, 3/2, 5/2):
// variance (1 + d (poly1 + poly2 d)) exp(-d), d = sqrt(stat), with 2^t in one
// MUFU.EX2 in float32 (as the gaussian path; relative error about 1e-6 for
// the values that matter) and exp2_units' table and polynomial in float64.
// Sums leave the variance to the end (out_scale: ValExp, ValExpPoly); the
// ops that exponentiate F itself take it per pair (WithVariance<>).
// The float32 root is one MUFU.SQRT (sqrt.approx, relative error 2^-23,
// sqrt(0) = 0); rsqrtf's denormal handling cost 8 more instructions per pair.
__device__ __forceinline__ float root_of(float s)
{
  float r;
  asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
  return r;
}
__device__ __forceinline__ double root_of(double s) { return sqrt(s); }
// e^(-d), for both exponential-family values.
template <typename T> __device__ __forceinline__ T exp_of_minus(T d)
{
  return exp2_units(d * (T) (-1.4426950408889634 * EXP2_UNIT<T>));
}
struct ValExpPoly {
  static constexpr bool INNER = false;
  static constexpr bool POINTS = false;
  template <typename T> __device__ __forceinline__ static T eval(T stat, const Args &a)
  {
    // Beyond d = 1e4, e^-d is 0 in either precision; capping d keeps the
    // polynomial finite there (an infinite one times 0 would be NaN).
    const T d = fmin(root_of(stat), (T) 1e4);
    const T poly = (T) 1 + d * ((T) a.poly1 + (T) a.poly2 * d);
    return poly * exp_of_minus(d);
  }
};

// ...or the exponential itself (the exponential kernel and Matern 1/2, whose
// polynomial is 1): ValExpPoly without its three operations per pair, which
// the float64 products feel (they are bound by the FP64 pipe).
struct ValExp {
  static constexpr bool INNER = false;
  static constexpr bool POINTS = false;
  template <typename T> __device__ __forceinline__ static T eval(T stat, const Args &a)
  {
    return exp_of_minus(root_of(stat));
  }
};

// Either of them times the variance.
template <class Val> struct WithVariance {
  static constexpr bool INNER = Val::INNER;
  static constexpr bool POINTS = false;
  template <typename T> __device__ __forceinline__ static T eval(T stat, const Args &a)
  {
    return (T) a.kernel.variance * Val::eval(stat, a);
  }
};

// Squared distance (or inner product) of x_i, held in registers (DS > 0) or
// read from global memory (DS == 0, any dimension), with y_j in shared memory.
// Not gk_pair_stat (gk_kernel.h): this one runs in T (float too), unrolled
// over registers, with explicit fma.
template <typename T, int DS, bool MAY_BE_INNER>
__device__ __forceinline__ T pair_stat(const T *xr, const T *xg, size_t m, const T *yj,
                                       int dim, bool inner)
{
  T s = 0;
  if (MAY_BE_INNER && inner) {
    if (DS > 0) {
#pragma unroll
      for (int d = 0; d < DS; d++) s = fma(xr[d], yj[d], s);
    } else {
      for (int d = 0; d < dim; d++) s = fma(xg[(size_t) d * m], yj[d], s);
    }
    return s;
  }
  if (DS > 0) {
#pragma unroll
    for (int d = 0; d < DS; d++) {
      T t = xr[d] - yj[d];
      s = fma(t, t, s);
    }
  } else {
    for (int d = 0; d < dim; d++) {
      T t = xg[(size_t) d * m] - yj[d];
      s = fma(t, t, s);
    }
  }
  return s;
}

}  // namespace gkreduce
#endif
