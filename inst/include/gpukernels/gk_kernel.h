/*
 * The package's one kernel vocabulary, shared by every engine and by both
 * backends: the same inline functions compile as C on the CPU and as
 * __host__ __device__ code under nvcc and NVRTC, so CPU and GPU results
 * agree. Installed with the package (inst/include): the reduction kernels
 * are compiled from it at run time.
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
 *   exponential great circle  s2 exp(-g), g = 2 rho asin(min(1, d / (2 rho))):
 *                         for points on a sphere of radius rho (in units of
 *                         the range), d is their chordal distance and g their
 *                         great-circle distance (both over the range); valid
 *                         covariance only because nu = 1/2 (Gneiting 2013)
 * Every family except `linear` is a function of d^2 ("the pair statistic");
 * `linear` is a function of the inner product.
 *
 * Derivative families (for Gaussian-process gradients, src/gp/): family
 * GK_KERNEL_DLOGRANGE + f is the derivative of family f with respect to the
 * log of an isotropic range, d k / d log(range) = -d k'(d):
 *   gaussian              s2 d^2 exp(-d^2 / 2)
 *   exponential           s2 d exp(-d)
 *   matern (nu)           s2 2^(1-nu) / Gamma(nu) d^(nu+1) K_(nu-1)(d)
 *                         nu = 1/2, 3/2, 5/2: s2 d e^-d, s2 d^2 e^-d, s2 d^2 (1 + d) / 3 e^-d
 *   cauchy                s2 2 d^2 / (1 + d^2)^2
 *   inverse multiquadric  s2 d^2 / (1 + d^2)^(3/2)
 *   exponential great circle  s2 g exp(-g) (rho = radius / range moves with
 *                         the range, so g = great-circle distance / range)
 * They are functions of d^2 like their base families, so every engine
 * evaluates them unchanged.
 */
#ifndef GK_KERNEL_H
#define GK_KERNEL_H

#ifdef __CUDACC_RTC__
/* NVRTC (the reduction kernels compiled at run time) has the math functions
 * built in but no <math.h>. */
#define INFINITY __longlong_as_double(0x7ff0000000000000LL)
#define NAN __longlong_as_double(0x7ff8000000000000LL)
#else
#include <math.h>
#include <stddef.h>
#endif

#ifdef __CUDACC__
#define GK_HD __host__ __device__ __forceinline__
#else
#define GK_HD static inline
#endif
/* The general-nu Matern series and the derivative families in the kernels
 * compiled at run time: one call instead of their loops inlined into every
 * kernel that can evaluate any family (they cost hundreds of operations per
 * value anyway, and inlined they made each such kernel take seconds to
 * compile). Kernels built with the package inline them as before. */
#ifdef __CUDACC_RTC__
#define GK_HD_CALL static __host__ __device__ __noinline__
#else
#define GK_HD_CALL GK_HD
#endif

typedef enum {
  GK_KERNEL_GAUSSIAN = 0,
  GK_KERNEL_EXPONENTIAL = 1,
  GK_KERNEL_MATERN = 2,
  GK_KERNEL_CAUCHY = 3,
  GK_KERNEL_INVERSE_MULTIQUADRIC = 4,
  GK_KERNEL_LINEAR = 5,
  GK_KERNEL_SQUARED_DISTANCE = 6,
  GK_KERNEL_EXPONENTIAL_GREATCIRCLE = 7,
  GK_KERNEL_LAST_FAMILY = 7,
  GK_KERNEL_DLOGRANGE = 16,   /* offset of the derivative families */
  GK_KERNEL_GAUSSIAN_DLOGRANGE = 16,
  GK_KERNEL_EXPONENTIAL_DLOGRANGE = 17,
  GK_KERNEL_MATERN_DLOGRANGE = 18,
  GK_KERNEL_CAUCHY_DLOGRANGE = 19,
  GK_KERNEL_INVERSE_MULTIQUADRIC_DLOGRANGE = 20,
  GK_KERNEL_EXPONENTIAL_GREATCIRCLE_DLOGRANGE = 23
} gk_kernel_family;

typedef struct {
  gk_kernel_family family;
  double variance;
  double smoothness;        /* matern nu                                          */
  int matern_twice_nu;      /* 1, 3, 5 for the closed forms; 0 for a general nu   */
  double matern_log_norm;   /* general nu: log 2 + log(nu)/2 - log(2 pi)/2 - stirling(nu) */
  double sphere_radius;     /* great-circle families: the sphere's radius / range (rho) */
} gk_kernel;

/* The most scalar parameters a user's formula (gk_formula() in R, the
 * reductions' alternative to the families above) passes to its kernels,
 * counting those R derives from them (expressions of parameters alone). */
#define GK_FORMULA_MAX_PARAMS 32

#define GK_HALF_LOG_2PI 0.918938533204672741780329736406

/* lgamma(nu) - (nu - 1/2) log nu + nu - log(2 pi)/2: the series where lgamma
 * would cancel against the rest. */
GK_HD double gk_matern_stirling(double nu)
{
  if (nu < 15.0) return lgamma(nu) - (nu - 0.5) * log(nu) + nu - GK_HALF_LOG_2PI;
  double r = 1.0 / nu, r2 = r * r;
  return r * (1.0 / 12 - r2 * (1.0 / 360 - r2 * (1.0 / 1260 - r2 * (1.0 / 1680))));
}

/* The general-nu constant: log 2 + log(nu)/2 - log(2 pi)/2 - stirling(nu). */
GK_HD double gk_matern_log_norm(double nu)
{
  return log(2.0) + 0.5 * log(nu) - GK_HALF_LOG_2PI - gk_matern_stirling(nu);
}

#ifndef __CUDACC_RTC__   /* host only */
/* Rough cost of one evaluation, in gaussian evaluations. Engines size their
 * units of work between interrupt checks by it: the general-nu Matern sums a
 * quadrature of tens of double-precision exponentials (measured on the H100:
 * about 230 times the gaussian's time, float64). Overestimating costs only a few
 * more synchronizations; underestimating delays an interrupt by seconds. */
static inline double gk_kernel_relative_cost(const gk_kernel *k)
{
  int family = (int) k->family >= (int) GK_KERNEL_DLOGRANGE
    ? (int) k->family - (int) GK_KERNEL_DLOGRANGE : (int) k->family;
  if (family == GK_KERNEL_MATERN && k->matern_twice_nu == 0) return 256.0;
  return 1.0;
}

/* The name of a base family (gk_kernel() in R), NULL beyond them: the one
 * list of family names, from which R's table of family codes is made at load
 * time (src/r_codes.c). */
static inline const char *gk_kernel_family_name(int family)
{
  static const char *const names[] = {"gaussian", "exponential", "matern", "cauchy",
                                      "inverse_multiquadric", "linear", "squared_distance",
                                      "exponential_great_circle"};
  return family >= 0 && family <= (int) GK_KERNEL_LAST_FAMILY ? names[family] : NULL;
}

/* Whether a base family has a range derivative (family GK_KERNEL_DLOGRANGE +
 * f): the covariances, not `linear` nor `squared_distance`. */
static inline int gk_kernel_has_dlogrange(int family)
{
  return (family >= (int) GK_KERNEL_GAUSSIAN && family <= (int) GK_KERNEL_INVERSE_MULTIQUADRIC) ||
         family == (int) GK_KERNEL_EXPONENTIAL_GREATCIRCLE;
}

/* Whether `code` is a family of the vocabulary: a base family or the range
 * derivative of one that has it. */
static inline int gk_kernel_code_valid(int code)
{
  if (code >= (int) GK_KERNEL_DLOGRANGE)
    return gk_kernel_has_dlogrange(code - (int) GK_KERNEL_DLOGRANGE);
  return gk_kernel_family_name(code) != NULL;
}

/* Whether a family (base or derivative) is evaluated at great-circle distances
 * and so needs `sphere_radius`. */
static inline int gk_kernel_on_sphere(int code)
{
  return code == (int) GK_KERNEL_EXPONENTIAL_GREATCIRCLE ||
         code == (int) GK_KERNEL_EXPONENTIAL_GREATCIRCLE_DLOGRANGE;
}

/* Fills the derived fields (closed-form order, normalising constant). */
static inline gk_kernel gk_kernel_make(gk_kernel_family family, double variance, double smoothness)
{
  gk_kernel k;
  k.family = family;
  k.variance = variance;
  k.smoothness = smoothness;
  k.matern_twice_nu = 0;
  k.matern_log_norm = 0.0;
  k.sphere_radius = 0.0;   /* set by the caller for the great-circle families */
  if (family == GK_KERNEL_MATERN || family == GK_KERNEL_MATERN_DLOGRANGE) {
    if (smoothness == 0.5) k.matern_twice_nu = 1;
    else if (smoothness == 1.5) k.matern_twice_nu = 3;
    else if (smoothness == 2.5) k.matern_twice_nu = 5;
    k.matern_log_norm = gk_matern_log_norm(smoothness);
  }
  return k;
}

#endif

GK_HD int gk_kernel_uses_inner_product(const gk_kernel *k)
{
  return k->family == GK_KERNEL_LINEAR;
}

/* The squared distance of points x and y of `dim` coordinates, those of x
 * `sx` apart and those of y `sy` apart (1 for a point stored contiguously, the
 * row count for a row of a column-major matrix). Every engine's distances come
 * from here, so that CPU and GPU sum the same terms in the same order; the GPU
 * reduction kernels (reduce_kernels.cuh) keep their own loop, over registers
 * and in float as well. */
GK_HD double gk_sqdist(const double *x, size_t sx, const double *y, size_t sy, int dim)
{
  double s = 0.0;
  for (int k = 0; k < dim; k++) {
    double t = x[(size_t) k * sx] - y[(size_t) k * sy];
    s += t * t;
  }
  return s;
}

/* The pair statistic a kernel is a function of (gk_kernel_uses_inner_product):
 * the squared distance, or with `inner` the inner product. */
GK_HD double gk_pair_stat(int inner, const double *x, size_t sx, const double *y, size_t sy,
                          int dim)
{
  if (!inner) return gk_sqdist(x, sx, y, sy, dim);
  double s = 0.0;
  for (int k = 0; k < dim; k++) s += x[(size_t) k * sx] * y[(size_t) k * sy];
  return s;
}

/*
 * 2^(1-nu)/Gamma(nu) d^nu K_nu(d) for any nu > 0, without Bessel libraries
 * (CUDA has none): K_nu(d) = int_0^inf exp(-d cosh t) cosh(nu t) dt, summed by
 * the trapezoid rule, which converges geometrically for this analytic,
 * double-exponentially decaying integrand. The step follows the width of the
 * integrand's peak, (d^2 + nu^2)^(-1/4).
 *
 * The sum starts at the peak t* = asinh(nu / d) and walks outwards, so its
 * length does not grow with nu or with 1/d (about 80 terms for large nu). Each
 * term is written around the peak, where everything cancels analytically:
 * with R = sqrt(nu^2 + d^2) and s = t - t*,
 *   log[2^(1-nu)/Gamma(nu) d^nu exp(-d cosh t + nu t)] = peak + psi(s),
 *   peak = log 2 + log(nu)/2 - log(2 pi)/2 - stirling(nu)
 *          + nu log1p(d^2 / (2 nu (nu + R))) - d^2 / (nu + R),
 *   psi(s) = -nu (sinh s - s) - R (cosh s - 1),
 * (stirling(nu) = lgamma(nu) - (nu - 1/2) log nu + nu - log(2 pi)/2), so no
 * large numbers are subtracted at any nu: relative error about 1e-14 (checked
 * against R's besselK and an independent quadrature in the tests), 1e5 and 1e6
 * as fast as 0.7. The cosh(nu t) term's other half is the factor
 * 1 + exp(-2 nu t).
 */
/* psi(s) above, from one expm1: with u = e^(s/2) - 1, sinh(s/2) =
 * u (u + 2) / (2 (u + 1)) without cancellation; sinh s - s by its series
 * where it would cancel. */
GK_HD double gk_matern_psi(double s, double nu, double big_r)
{
  double u = expm1(0.5 * s), e = u + 1.0;
  double sinh_half = 0.5 * u * (u + 2.0) / e, cosh_half = 0.5 * (e + 1.0 / e);
  double s2 = s * s;
  double sinh_minus = fabs(s) < 0.1
    ? s * s2 * (1.0 / 6 + s2 * (1.0 / 120 + s2 * (1.0 / 5040 + s2 * (1.0 / 362880))))
    : 2.0 * sinh_half * cosh_half - s;
  return -nu * sinh_minus - 2.0 * big_r * sinh_half * sinh_half;
}

/* One trapezoid term: weight * integrand at t (the e^(nu t) half of cosh(nu t)
 * around the peak, times 1 + e^(-2 nu t) for the other half, which is below
 * rounding once 2 nu t > 40). */
GK_HD double gk_matern_term(double t, double t_peak, double nu, double d, double big_r,
                            double peak)
{
  double w = t > 0.0 ? 0.5 : 0.25;    // the trapezoid's half weight at t = 0
  double other = 2.0 * nu * t < 40.0 ? 1.0 + exp(-2.0 * nu * t) : 1.0;
  // For small nu the direct form nu s - d (cosh t - cosh t*) loses at most
  // 20 * 700 * 1e-16 (t* < 700) and costs less than psi.
  double psi = nu <= 20.0 ? nu * (t - t_peak) - d * cosh(t) + big_r
                          : gk_matern_psi(t - t_peak, nu, big_r);
  return w * exp(peak + psi) * other;
}

GK_HD_CALL double gk_matern_correlation_general(double d, double nu, double log_norm)
{
  if (d <= 0.0) return 1.0;
  // Far away (d^2 would overflow below): the correlation is below the smallest
  // double for every nu < 1e290 (for large nu it is about exp(-d^2 / (4 nu))).
  if (d > 1.0e150 && nu < 1.0e290) return 0.0;
  double big_r = sqrt(nu * nu + d * d), d2r = d * d / (nu + big_r);
  double peak = log_norm + nu * log1p(0.5 * d2r / nu) - d2r;
  // The sum is at most about 2 exp(peak) sqrt(2 pi / R) + exp(peak) h: below
  // the smallest double, the correlation is 0.
  if (peak < -760.0) return 0.0;
  double h = 0.25 / fmax(1.0, sqrt(big_r));
  double t_peak = asinh(nu / d);
  double k_peak = floor(t_peak / h);
  double sum = 0.0;
  // Upwards from the peak: terms fall off double-exponentially.
  for (int k = 0; k < 100000; k++) {
    double t = (k_peak + k) * h;
    double term = gk_matern_term(t, t_peak, nu, d, big_r, peak);
    sum += term;
    if (term <= 1e-17 * sum && t > t_peak) break;
  }
  // Downwards to t = 0: log-concave, so once a term is negligible and shrinks
  // by at least half a step, all the rest together are too.
  double previous = INFINITY;
  for (double k = k_peak - 1; k >= 0; k--) {
    double t = k * h;
    double term = gk_matern_term(t, t_peak, nu, d, big_r, peak);
    sum += term;
    if (term <= 1e-18 * sum && term <= 0.5 * previous) break;
    previous = term;
  }
  return h * sum;
}


/* exp(log_norm) d^power K_order(d) by the plain trapezoid rule on
 * K_v(d) = int_0^inf exp(-d cosh t) cosh(v t) dt (used for the range
 * derivative of the general Matern, d^(nu+1) K_(nu-1), where the order and the
 * power differ; moderate nu). */
GK_HD double gk_bessel_power_term(double d, double power, double order, double log_norm)
{
  order = fabs(order);   /* K_-v = K_v */
  double h = 0.25 / fmax(1.0, sqrt(sqrt(d * d + order * order)));
  double a0 = power * log(d) + log_norm;
  double sum = 0.5 * exp(a0 - d);
  for (int k = 1; k < 20000; k++) {
    double t = k * h;
    double a = a0 - d * cosh(t);
    double term = 0.5 * (exp(a + order * t) + exp(a - order * t));
    sum += term;
    if (term <= 1e-17 * sum && d * sinh(t) > order) break;
  }
  return h * sum;
}

/* -d d/dd of the general Matern correlation: d^(nu+1) K_(nu-1)(d) times the
 * constant, from (d^nu K_nu)' = -d^nu K_(nu-1). Zero at d = 0 for nu > 0. */
GK_HD double gk_matern_dlogrange_general(double d, double nu)
{
  if (!(d > 0.0) || d > 2000.0) return d != d ? d : 0.0;
  return gk_bessel_power_term(d, nu + 1.0, nu - 1.0, (1.0 - nu) * log(2.0) - lgamma(nu));
}

/* The great-circle distance of two points on the sphere of radius rho =
 * k->sphere_radius from their chordal distance d (both in units of the
 * range): 2 rho asin(d / (2 rho)). A chord longer than the diameter (points
 * off the sphere, such as H2's interpolation nodes) counts as antipodal; NaN
 * stays NaN. The great-circle families are the exponential's formulas at this
 * distance, so the exponential has one definition. */
GK_HD double gk_great_circle(const gk_kernel *k, double d)
{
  double rho = k->sphere_radius, x = d / (2.0 * rho);
  return 2.0 * rho * asin(x > 1.0 ? 1.0 : x);
}

/* d k / d log(range) for the derivative families, in double precision. */
GK_HD_CALL double gk_kernel_eval_dlogrange(const gk_kernel *k, double stat)
{
  double d = sqrt(stat);
  // Far away the closed forms below are 0 (their exp underflows first), but
  // d or d^2 may overflow to Inf and Inf * 0 is NaN.
  switch ((int) k->family - (int) GK_KERNEL_DLOGRANGE) {
  case GK_KERNEL_GAUSSIAN:
    return stat > 2000.0 ? 0.0 : k->variance * stat * exp(-0.5 * stat);
  case GK_KERNEL_EXPONENTIAL_GREATCIRCLE:   // g / range moves as d does: -g k'(g)
    d = gk_great_circle(k, d);
    /* fall through */
  case GK_KERNEL_EXPONENTIAL:
    return d > 800.0 ? 0.0 : k->variance * d * exp(-d);
  case GK_KERNEL_MATERN:
    if (k->matern_twice_nu != 0 && d > 800.0) return 0.0;
    switch (k->matern_twice_nu) {
    case 1: return k->variance * d * exp(-d);
    case 3: return k->variance * stat * exp(-d);
    case 5: return k->variance * stat * (1.0 + d) * (1.0 / 3.0) * exp(-d);
    default: return k->variance * gk_matern_dlogrange_general(d, k->smoothness);
    }
  case GK_KERNEL_CAUCHY:   // 2 s / (1 + s)^2, without Inf / Inf for huge s
    return stat > 1.0 ? k->variance * 2.0 / ((1.0 + stat) * (1.0 + 1.0 / stat))
                      : k->variance * 2.0 * stat / ((1.0 + stat) * (1.0 + stat));
  case GK_KERNEL_INVERSE_MULTIQUADRIC:   // s / (1 + s)^(3/2), likewise
    return stat > 1.0 ? k->variance / ((1.0 + 1.0 / stat) * sqrt(1.0 + stat))
                      : k->variance * stat / ((1.0 + stat) * sqrt(1.0 + stat));
  }
  return NAN;
}

/* The kernel as a function of the pair statistic: d^2, or the inner product
 * for `linear`. Double precision. */
GK_HD double gk_kernel_eval(const gk_kernel *k, double stat)
{
  double d;
  switch (k->family) {
  case GK_KERNEL_GAUSSIAN:
    return k->variance * exp(-0.5 * stat);
  case GK_KERNEL_EXPONENTIAL_GREATCIRCLE:
    d = gk_great_circle(k, sqrt(stat));
    stat = d * d;
    /* fall through */
  case GK_KERNEL_EXPONENTIAL:
    return k->variance * exp(-sqrt(stat));
  case GK_KERNEL_MATERN:
    d = sqrt(stat);
    // Far away the closed forms are 0 (e^-d underflows with d^2 e^-d), but
    // d^2 or d may overflow to Inf and Inf * 0 is NaN.
    if (k->matern_twice_nu != 0 && d > 800.0) return 0.0;
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
  default:
    if (k->family >= GK_KERNEL_DLOGRANGE) return gk_kernel_eval_dlogrange(k, stat);
  }
  return NAN;
}

/* Single precision: float arithmetic throughout, except the general Matern,
 * whose series is summed in double. A second copy of the formulas above
 * because this header is C (no templates) and float needs expf/sqrtf to be
 * fast on the GPU; change both together (test-reduce.R compares them). */
GK_HD float gk_kernel_eval_f(const gk_kernel *k, float stat)
{
  float s2 = (float) k->variance, d;
  switch (k->family) {
  case GK_KERNEL_GAUSSIAN:
    return s2 * expf(-0.5f * stat);
  case GK_KERNEL_EXPONENTIAL_GREATCIRCLE:   // the distance in double (asin near 1)
    d = (float) gk_great_circle(k, sqrt((double) stat));
    stat = d * d;
    /* fall through */
  case GK_KERNEL_EXPONENTIAL:
    return s2 * expf(-sqrtf(stat));
  case GK_KERNEL_MATERN:
    d = sqrtf(stat);
    if (k->matern_twice_nu != 0 && d > 200.0f) return 0.0f;   // as in double: 0, not NaN
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
  default:   /* derivative families: in double (used for gradients only) */
    if (k->family >= GK_KERNEL_DLOGRANGE) return (float) gk_kernel_eval_dlogrange(k, (double) stat);
  }
  return NAN;
}

#endif
