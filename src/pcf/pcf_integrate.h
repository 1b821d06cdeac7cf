/*
 * The integral over one pair of packed PCFs (pcf_pack.h), shared by the CPU
 * engine (C) and the GPU kernels (nvcc, __host__ __device__): both backends
 * run the same arithmetic. pcf_pair_d / pcf_pair_f walk double / float
 * intervals; the arithmetic is double in both (float only stores the inputs,
 * so float sums cannot overflow where the double result is finite). `op` is a
 * constant at every call site, so the compiler specialises the loop.
 *
 * The walk visits the union of both functions' breakpoints: between two
 * consecutive ones, both functions are constant, and the op accumulates
 * (length) x F(f, g). It is branch-free apart from the loop test (the next
 * interval of each function is loaded unconditionally, the pointer advances by
 * a comparison), which keeps CPUs free of mispredictions and warps converged.
 * The last interval (t_n, inf) contributes only to the maximum of p = Inf:
 * callers have checked that it contributes 0 to the integrals.
 *
 * L2 and Lp sums of dt |f - g|^p overflow (values near 1e200, or p = 1000)
 * or underflow (small values and a large p) where the distance itself is an
 * ordinary number. The fast sum is kept when it is a normal number well above
 * the underflow threshold; otherwise the pair is walked again in scaled form
 * (pcf_pair_scaled), which is rare and costs two more walks.
 */
#ifndef GK_PCF_INTEGRATE_H
#define GK_PCF_INTEGRATE_H

#include <float.h>
#include <math.h>
#include "pcf/pcf.h"
#include "pcf/pcf_pack.h"

#ifdef __CUDACC__
#define PCF_HD __host__ __device__ __forceinline__
#else
#define PCF_HD static inline __attribute__((always_inline))
#endif

/* Below this, terms that underflowed (each < DBL_MIN) could matter to
 * working precision, so the sum is recomputed in scaled form. */
#define PCF_SUM_TINY (DBL_MIN / DBL_EPSILON)

/* log(a / b) for positive a, b, precise when the ratio is representable. */
PCF_HD double pcf_log_ratio(double a, double b)
{
  double r = a / b;
  return r >= DBL_MIN && r <= DBL_MAX ? log(r) : log(a) - log(b);
}

/* Adds the contribution of an interval of length dt on which f = a and g = b. */
PCF_HD double pcf_accumulate(int op, double acc, double dt, double a, double b, double p)
{
  double d = fabs(a - b);
  switch (op) {
  case PCF_OP_L1: return acc + dt * d;
  case PCF_OP_L2: return acc + dt * d * d;
  case PCF_OP_LP: return d > 0 ? acc + dt * pow(d, p) : acc;
  case PCF_OP_LINF: return dt > 0 && d > acc ? d : acc;
  default: return acc + dt * a * b;
  }
}

#define PCF_INTERVAL pcf_interval_d
#define PCF_NAME(x) x##_d
#include "pcf/pcf_integrate_impl.h"

#define PCF_INTERVAL pcf_interval_f
#define PCF_NAME(x) x##_f
#include "pcf/pcf_integrate_impl.h"

#endif
