/*
 * The package's one kernel vocabulary, shared by every engine and by both
 * backends: the same inline functions compile as C on the CPU and as
 * __host__ __device__ code under nvcc, so CPU and GPU results agree.
 *
 * A kernel is evaluated on scaled coordinates x / range (range is one number
 * or one per dimension; engines apply it when they load coordinates). With
 * d = |x/range - y/range| and s2 = variance:
 *   gaussian              s2 exp(-d^2 / 2)
 *   exponential           s2 exp(-d)
 *   matern (nu)           s2 2^(1-nu) / Gamma(nu) d^nu K_nu(d)   (fields::Matern, GpGp)
 *                         closed forms for nu = 1/2, 3/2, 5/2:
 *                         s2 e^-d, s2 (1 + d) e^-d, s2 (1 + d + d^2/3) e^-d
 *   cauchy                s2 / (1 + d^2)
 *   inverse multiquadric  s2 / sqrt(1 + d^2)
 *   linear                s2 <x/range, y/range>
 *   squared distance      s2 d^2
 * Every family except `linear` is a function of d^2 ("the pair statistic");
 * `linear` is a function of the inner product.
 */
#ifndef GK_KERNEL_H
#define GK_KERNEL_H

#include <math.h>

#ifdef __CUDACC__
#define GK_HD __host__ __device__ __forceinline__
#else
#define GK_HD static inline
#endif

typedef enum {
  GK_KERNEL_GAUSSIAN = 0,
  GK_KERNEL_EXPONENTIAL = 1,
  GK_KERNEL_MATERN = 2,
  GK_KERNEL_CAUCHY = 3,
  GK_KERNEL_INVERSE_MULTIQUADRIC = 4,
  GK_KERNEL_LINEAR = 5,
  GK_KERNEL_SQUARED_DISTANCE = 6
} gk_kernel_family;

typedef struct {
  gk_kernel_family family;
  double variance;
  double smoothness;        /* matern nu                                          */
  int matern_twice_nu;      /* 1, 3, 5 for the closed forms; 0 for a general nu   */
  double matern_log_norm;   /* (1 - nu) log 2 - lgamma(nu), for the general nu    */
} gk_kernel;

/* Fills the derived fields (closed-form order, normalising constant). */
static inline gk_kernel gk_kernel_make(gk_kernel_family family, double variance, double smoothness)
{
  gk_kernel k;
  k.family = family;
  k.variance = variance;
  k.smoothness = smoothness;
  k.matern_twice_nu = 0;
  k.matern_log_norm = 0.0;
  if (family == GK_KERNEL_MATERN) {
    if (smoothness == 0.5) k.matern_twice_nu = 1;
    else if (smoothness == 1.5) k.matern_twice_nu = 3;
    else if (smoothness == 2.5) k.matern_twice_nu = 5;
    k.matern_log_norm = (1.0 - smoothness) * log(2.0) - lgamma(smoothness);
  }
  return k;
}

GK_HD int gk_kernel_uses_inner_product(const gk_kernel *k)
{
  return k->family == GK_KERNEL_LINEAR;
}

/*
 * 2^(1-nu)/Gamma(nu) d^nu K_nu(d) for any nu > 0, without Bessel libraries
 * (CUDA has none): K_nu(d) = int_0^inf exp(-d cosh t) cosh(nu t) dt, summed by
 * the trapezoid rule, which converges geometrically for this analytic,
 * double-exponentially decaying integrand. The step follows the width of the
 * integrand's peak, (d^2 + nu^2)^(-1/4); d^nu and the constant are folded into
 * the exponent so nothing overflows. Relative error about 1e-14 (checked
 * against R's besselK in the tests).
 */
GK_HD double gk_matern_correlation_general(double d, double nu, double log_norm)
{
  if (d <= 0.0) return 1.0;
  if (d > 2000.0) return 0.0;
  double h = 0.25 / fmax(1.0, sqrt(sqrt(d * d + nu * nu)));
  double a0 = nu * log(d) + log_norm;
  double sum = 0.5 * exp(a0 - d);
  for (int k = 1; k < 20000; k++) {
    double t = k * h;
    double a = a0 - d * cosh(t);
    double term = 0.5 * (exp(a + nu * t) + exp(a - nu * t));
    sum += term;
    if (term <= 1e-17 * sum && d * sinh(t) > nu) break;
  }
  return h * sum;
}

/* The kernel as a function of the pair statistic: d^2, or the inner product
 * for `linear`. Double precision. */
GK_HD double gk_kernel_eval(const gk_kernel *k, double stat)
{
  double d;
  switch (k->family) {
  case GK_KERNEL_GAUSSIAN:
    return k->variance * exp(-0.5 * stat);
  case GK_KERNEL_EXPONENTIAL:
    return k->variance * exp(-sqrt(stat));
  case GK_KERNEL_MATERN:
    d = sqrt(stat);
    switch (k->matern_twice_nu) {
    case 1: return k->variance * exp(-d);
    case 3: return k->variance * (1.0 + d) * exp(-d);
    case 5: return k->variance * (1.0 + d + d * d / 3.0) * exp(-d);
    default: return k->variance * gk_matern_correlation_general(d, k->smoothness, k->matern_log_norm);
    }
  case GK_KERNEL_CAUCHY:
    return k->variance / (1.0 + stat);
  case GK_KERNEL_INVERSE_MULTIQUADRIC:
    return k->variance / sqrt(1.0 + stat);
  case GK_KERNEL_LINEAR:
  case GK_KERNEL_SQUARED_DISTANCE:
    return k->variance * stat;
  }
  return NAN;
}

/* Single precision: float arithmetic throughout, except the general Matern,
 * whose series is summed in double. */
GK_HD float gk_kernel_eval_f(const gk_kernel *k, float stat)
{
  float s2 = (float) k->variance, d;
  switch (k->family) {
  case GK_KERNEL_GAUSSIAN:
    return s2 * expf(-0.5f * stat);
  case GK_KERNEL_EXPONENTIAL:
    return s2 * expf(-sqrtf(stat));
  case GK_KERNEL_MATERN:
    d = sqrtf(stat);
    switch (k->matern_twice_nu) {
    case 1: return s2 * expf(-d);
    case 3: return s2 * (1.0f + d) * expf(-d);
    case 5: return s2 * (1.0f + d + d * d * (1.0f / 3.0f)) * expf(-d);
    default: return (float) (k->variance *
                             gk_matern_correlation_general(d, k->smoothness, k->matern_log_norm));
    }
  case GK_KERNEL_CAUCHY:
    return s2 / (1.0f + stat);
  case GK_KERNEL_INVERSE_MULTIQUADRIC:
    return s2 / sqrtf(1.0f + stat);
  case GK_KERNEL_LINEAR:
  case GK_KERNEL_SQUARED_DISTANCE:
    return s2 * stat;
  }
  return NAN;
}

#endif
