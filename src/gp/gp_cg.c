/*
 * The vector part of block conjugate gradients (gp.h): one fused pass per
 * column instead of a dozen whole-matrix temporaries in R, which at n = 1e6
 * and 50 probe columns cost more than the operator itself. Pure C.
 */
#include "gp/gp.h"
#include "device/gk_omp.h"

void gp_cg_step(size_t n, int k, const int *active, const double *q, double *x, double *r,
                double *p, double *rr, double *a, double *b, int threads)
{
  int nthreads = gk_omp_threads(threads);
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(static)
#endif
  for (int c = 0; c < k; c++) {
    size_t j = (size_t) active[c];
    const double *qc = q + (size_t) c * n;
    double *xj = x + j * n, *rj = r + j * n, *pj = p + j * n;
    double pq = 0.0;
    for (size_t i = 0; i < n; i++) pq += pj[i] * qc[i];
    double step = rr[j] / pq, next = 0.0;
    for (size_t i = 0; i < n; i++) {
      xj[i] += step * pj[i];
      rj[i] -= step * qc[i];
      next += rj[i] * rj[i];
    }
    double beta = next / rr[j];
    for (size_t i = 0; i < n; i++) pj[i] = rj[i] + beta * pj[i];
    a[c] = step;
    b[c] = beta;
    rr[j] = next;
  }
  (void) nthreads;
}

void gp_col_dots(size_t n, int k, const double *a, const int *ca, const double *b,
                 const int *cb, int threads, double *out)
{
#ifdef _OPENMP
#pragma omp parallel for num_threads(gk_omp_threads(threads)) schedule(static)
#endif
  for (int c = 0; c < k; c++) {
    const double *ac = a + (size_t) ca[c] * n, *bc = b + (size_t) cb[c] * n;
    double t = 0.0;
    for (size_t i = 0; i < n; i++) t += ac[i] * bc[i];
    out[c] = t;
  }
  (void) threads;
}

void gp_signs_from_bits(const unsigned short *bits, size_t total, int threads, double *out)
{
  ptrdiff_t words = (ptrdiff_t) ((total + 15) / 16);
#ifdef _OPENMP
#pragma omp parallel for num_threads(gk_omp_threads(threads)) schedule(static)
#endif
  for (ptrdiff_t w = 0; w < words; w++) {
    size_t e = (size_t) w * 16;
    for (int b = 0; b < 16 && e + b < total; b++)
      out[e + b] = (bits[w] >> b) & 1u ? 1.0 : -1.0;
  }
  (void) threads;
}
