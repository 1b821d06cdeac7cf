/* The Vecchia log-likelihood, its gradient and Fisher information (gp.h),
 * row by row as GpGp computes them: each point's conditional given its kept
 * neighbours c, with A = Sigma[c,c], s = Sigma[i,i], g = Sigma[c,i],
 * b = A^-1 g, d = s - g'b, e = r_i - b'r_c. A derivative D of Sigma moves
 * them by db = A^-1 (Dg - DA b), dd = Ds - 2 Dg'b + b'DA b, de = -db'r_c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gp/gp.h"
#include "gp/gp_small.h"
#include "device/gk_hooks.h"
#include "device/gk_omp.h"

/* The term's value between points a and b: sum_k w_k K_k + identity when
 * a == b (each kernel on its own points, gp_term_points()). */
static double term_value(const gp_dense_term *t, const double *xs, int n, int dim, int a, int b)
{
  double v = a == b ? t->identity : 0.0;
  for (int k = 0; k < t->nkernels; k++) {
    double stat = a == b ? 0.0 : gp_sq_distance(gp_term_points(t, k, xs), n, dim, a, b);
    v += t->weights[k] * gk_kernel_eval(&t->kernels[k], stat);
  }
  return v;
}

/* y = M x for the symmetric q x q M of which the lower triangle is stored. */
static void sym_mult(const double *mat, int q, const double *x, double *y)
{
  for (int i = 0; i < q; i++) {
    double t = 0.0;
    for (int j = 0; j < q; j++) t += (i >= j ? mat[i + j * q] : mat[j + i * q]) * x[j];
    y[i] = t;
  }
}

/* Row i's contributions: out[0] += log d, out[1] += e^2 / d, grad[t] and
 * info[s, t] (nterms x nterms). Returns i + 1 when A is not positive definite
 * or d <= 0. */
static int lik_row(const double *xs, int n, int dim, const int *nbr, int m,
                   const gk_kernel *kernel, double nugget, const double *r, int nterms,
                   const gp_dense_term *terms, int want_info, int i, double *work, int *cols,
                   double *out, double *grad, double *info)
{
  /* the layout takes the largest q (m); the system is q x q within it */
  const size_t mm = (size_t) m * m;
  double *A = work, *L = A + mm, *g = L + mm, *b = g + m, *rc = b + m, *tmp = rc + m;
  double *dA = tmp + m, *dg = dA + mm, *db = dg + m, *dd = db + (size_t) m * nterms;
  double *Adb = dd + nterms;
  const gp_cov cov = {kernel, NULL, NULL};
  const int q = gp_row_system(xs, n, dim, nbr + i, (size_t) n, m, i, &cov, nugget, n, cols,
                              A, g);
  const size_t qq = (size_t) q * q;
  for (int s = 0; s < q; s++) rc[s] = r[cols[s]];
  memcpy(L, A, qq * sizeof(double));
  if (q > 0 && gp_cholesky(L, q)) return i + 1;
  memcpy(b, g, (size_t) q * sizeof(double));
  if (q > 0) gp_cholesky_solve(L, q, b);
  double d = gk_kernel_eval(kernel, 0.0) + nugget, e = r[i];
  for (int s = 0; s < q; s++) {
    d -= g[s] * b[s];
    e -= b[s] * rc[s];
  }
  if (!(d > 0.0)) return i + 1;
  out[0] += log(d);
  out[1] += e * e / d;
  for (int t = 0; t < nterms; t++) {
    const gp_dense_term *term = &terms[t];
    for (int s = 0; s < q; s++) {
      for (int u = s; u < q; u++)
        dA[u + s * q] = term_value(term, xs, n, dim, cols[s], cols[u]);
      dg[s] = term_value(term, xs, n, dim, cols[s], i);
    }
    double *dbt = db + (size_t) t * q;
    sym_mult(dA, q, b, tmp);
    double ddt = term_value(term, xs, n, dim, i, i), det = 0.0;
    for (int s = 0; s < q; s++) {
      dbt[s] = dg[s] - tmp[s];
      ddt += -2.0 * dg[s] * b[s] + b[s] * tmp[s];
    }
    if (q > 0) gp_cholesky_solve(L, q, dbt);
    for (int s = 0; s < q; s++) det -= dbt[s] * rc[s];
    dd[t] = ddt;
    grad[t] += -0.5 * (ddt / d - e * e * ddt / (d * d) + 2.0 * e * det / d);
  }
  if (want_info) {
    for (int t = 0; t < nterms; t++) {
      sym_mult(A, q, db + (size_t) t * q, Adb);
      for (int s = 0; s <= t; s++) {
        double v = 0.5 * dd[s] * dd[t] / (d * d);
        for (int u = 0; u < q; u++) v += db[(size_t) s * q + u] * Adb[u] / d;
        info[s + (size_t) t * nterms] += v;
        if (s != t) info[t + (size_t) s * nterms] += v;
      }
    }
  }
  return 0;
}

gk_status gp_vecchia_loglik(const double *xs, int n, int dim, const int *nbr, int m,
                            const gk_kernel *kernel, double nugget, const double *r,
                            int nterms, const gp_dense_term *terms, int want_info, int threads,
                            gp_vecchia_lik *res, gk_error *err)
{
  int nthreads = gk_omp_threads(threads);
  const size_t per_thread = 3 * (size_t) m * m + (size_t) m * (6 + nterms) + nterms + 8;
  const size_t per_stats = 2 + nterms + (size_t) nterms * nterms;
  double *work = (double *) malloc(per_thread * nthreads * sizeof(double));
  double *stats = (double *) calloc(per_stats * nthreads, sizeof(double));
  int *cols = (int *) malloc(((size_t) m + 1) * nthreads * sizeof(int));
  if (!work || !stats || !cols) {
    free(work);
    free(stats);
    free(cols);
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the Vecchia likelihood");
  }
  int failed = 0;
  const int chunk = 1 << 15;   /* rows between interrupt checks */
  for (int start = 0; start < n && !failed; start += chunk) {
    int end = start + chunk < n ? start + chunk : n;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(static)
#endif
    for (int i = start; i < end; i++) {
      int tid = gk_omp_thread_id();
      double *st = stats + per_stats * tid;
      int bad = lik_row(xs, n, dim, nbr, m, kernel, nugget, r, nterms, terms, want_info, i,
                        work + per_thread * tid, cols + (size_t) (m + 1) * tid, st, st + 2,
                        st + 2 + nterms);
      if (bad) {
#ifdef _OPENMP
#pragma omp critical
#endif
        if (!failed || bad < failed) failed = bad;
      }
    }
    if (!failed && end < n && gk_interrupt_pending()) {
      free(work);
      free(stats);
      free(cols);
      return gk_fail(err, GK_ERR_INTERRUPTED, "interrupted in the Vecchia likelihood");
    }
  }
  /* static rows per thread, summed in thread order: a run repeats to the bit */
  memset(res->sums, 0, sizeof res->sums);
  for (int t = 0; t < nterms; t++) res->grad[t] = 0.0;
  for (size_t e = 0; want_info && e < (size_t) nterms * nterms; e++) res->info[e] = 0.0;
  for (int h = 0; h < nthreads; h++) {
    const double *st = stats + per_stats * h;
    res->sums[0] += st[0];
    res->sums[1] += st[1];
    for (int t = 0; t < nterms; t++) res->grad[t] += st[2 + t];
    for (size_t e = 0; want_info && e < (size_t) nterms * nterms; e++)
      res->info[e] += st[2 + nterms + e];
  }
  free(work);
  free(stats);
  free(cols);
  if (failed) return gk_fail(err, GK_ERR_INPUT, GP_SINGULAR_MESSAGE, failed);
  return GK_OK;
}
