/*
 * The integral over one pair of packed PCFs (pcf_pack.h), shared by the CPU
 * engine (C) and the GPU kernels (nvcc, __host__ __device__): both backends
 * run the same arithmetic. pcf_pair_d / pcf_pair_f work in double / float;
 * `op` is a constant at every call site, so the compiler specialises the loop.
 *
 * The walk visits the union of both functions' breakpoints: between two
 * consecutive ones, both functions are constant, and the op accumulates
 * (length) x F(f, g). It is branch-free apart from the loop test (the next
 * interval of each function is loaded unconditionally, the pointer advances by
 * a comparison), which keeps CPUs free of mispredictions and warps converged.
 * The last interval (t_n, inf) contributes only to the maximum of p = Inf:
 * callers have checked that it contributes 0 to the integrals.
 */
#ifndef GK_PCF_INTEGRATE_H
#define GK_PCF_INTEGRATE_H

#include <math.h>
#include "pcf/pcf.h"
#include "pcf/pcf_pack.h"

#ifdef __CUDACC__
#define PCF_HD __host__ __device__ __forceinline__
#else
#define PCF_HD static inline __attribute__((always_inline))
#endif

#define PCF_REAL double
#define PCF_INTERVAL pcf_interval_d
#define PCF_NAME(x) x##_d
#define PCF_ABS fabs
#define PCF_POW pow
#define PCF_SQRT sqrt
#include "pcf/pcf_integrate_impl.h"

#define PCF_REAL float
#define PCF_INTERVAL pcf_interval_f
#define PCF_NAME(x) x##_f
#define PCF_ABS fabsf
#define PCF_POW powf
#define PCF_SQRT sqrtf
#include "pcf/pcf_integrate_impl.h"

#endif
