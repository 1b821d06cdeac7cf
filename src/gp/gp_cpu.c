/* The Vecchia / FSAI preconditioner of the GP engine (see gp.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gp/gp.h"
#include "gp/gp_small.h"
#include "device/gk_hooks.h"
#include "device/gk_omp.h"

int gp_keep_preceding(const int *cand, const double *dist, int rows, int kc, int first_row,
                      int n, int m, const int *row_of, const int *id, const int *skip,
                      int threads, int *nbr)
{
  int duplicates = 0;
  /* rows write distinct lines of nbr; with the ids, every read and write is
   * random at n = 1e6, so threads pay */
#ifdef _OPENMP
#pragma omp parallel for num_threads(gk_omp_threads(threads)) schedule(static) \
    reduction(+ : duplicates)
#endif
  for (int r = 0; r < rows; r++) {
    if (skip && skip[r]) continue;
    int i = first_row + (row_of ? row_of[r] - 1 : r), q = 0;   /* 0-based ordered index */
    for (int c = 0; c < kc; c++) {
      int j = cand[r + (size_t) c * rows];
      if (j < 1) continue;
      if (id) j = id[j - 1];
      if (j - 1 >= i) continue;
      if (dist[r + (size_t) c * rows] == 0.0) duplicates++;
      if (q < m) nbr[i + (size_t) (q++) * n] = j;
    }
    for (; q < m; q++) nbr[i + (size_t) q * n] = 0;
  }
  (void) threads;
  return duplicates;
}

/* Row i of G (form GP_ROWS_FACTOR) or of the conditionals (GP_ROWS_CONDITIONAL),
 * written to line r of out (ld rows); Sigma = K + nugget on the points before
 * `noisy`. Returns i + 1 on failure (a singular system), else 0. */
static int factor_row(const double *xs, int n, int dim, const int *nbr, int m,
                      const gp_cov *cov, const gp_cov *dcov, double nugget,
                      int noisy, int form, int i, int r, int ld, double *work, int *cols,
                      double *out, double *row_stats)
{
  double *a = work, *b = work + (size_t) m * m, *g = b + m;
  const int q = gp_row_system(xs, n, dim, nbr + r, (size_t) ld, m, i, cov, nugget, noisy,
                              cols, a, b);
  double var_i = gp_cov_value(cov, xs, n, dim, i, i) + (i < noisy ? nugget : 0.0);
  double d = var_i;
  if (q > 0) {
    if (gp_cholesky(a, q)) return i + 1;
    double quad = 0.0;
    memcpy(g, b, (size_t) q * sizeof(double));
    gp_cholesky_solve(a, q, b);   /* b = Sigma[c,c]^-1 Sigma[c,i] */
    for (int s = 0; s < q; s++) quad += g[s] * b[s];
    d = var_i - quad;
  }
  const int conditional = form == GP_ROWS_CONDITIONAL;
  if (!conditional && !(d > 1e-12 * var_i)) return i + 1;
  /* the conditional form: d (a variance rounded below 0 is 0: the point is
   * nearly a neighbour) and b; the factor's: 1/sqrt(d) and -b/sqrt(d) (out
   * NULL: the statistics alone) */
  double inv = conditional ? 1.0 : 1.0 / sqrt(d);
  if (out) {
    out[r] = conditional ? (d > 0.0 ? d : 0.0) : inv;
    const double weight = conditional ? 1.0 : -inv;
    /* neighbour k of the stored row keeps its column (zeros where skipped) */
    for (int k = 0, s = 0; k < m; k++) {
      int j = nbr[r + (size_t) k * ld];
      out[r + (size_t) (k + 1) * ld] = j > 0 && j - 1 < i ? b[s++] * weight : 0.0;
    }
  }
  if (conditional) return 0;
  row_stats[0] += log(d);
  double gg = inv * inv;
  for (int t = 0; t < q; t++) gg += b[t] * b[t] * inv * inv;
  row_stats[1] += gg;
  if (dcov) {
    /* g' D[S,S] g over S = {i, c}; the vocabulary's derivatives vanish on
     * the diagonal (d = 0), a formula's need not (a weight's derivative) */
    double gdg = dcov->formula ? inv * inv * gp_cov_value(dcov, xs, n, dim, i, i) : 0.0;
    for (int s2 = 0; s2 < q; s2++) {
      double gs = -b[s2] * inv;
      gdg += 2.0 * inv * gs * gp_cov_value(dcov, xs, n, dim, cols[s2], i);
      for (int t = 0; t < q; t++) {
        double gt = -b[t] * inv;
        gdg += gs * gt * gp_cov_value(dcov, xs, n, dim, cols[s2], cols[t]);
      }
    }
    row_stats[2] += gdg;
  }
  return 0;
}

gk_status gp_vecchia_rows(const double *xs, int n, int dim, const int *nbr, int m,
                          const gp_cov *cov, const gp_cov *dcov, double nugget,
                          const gp_rows_options *rows, int threads, double *out, double *stats,
                          gk_error *err)
{
  const int first = rows ? rows->first : 0, noisy = rows ? rows->noisy : n;
  const int form = rows ? rows->form : GP_ROWS_FACTOR, ld = n - first;
  if (!out && form != GP_ROWS_FACTOR)
    return gk_fail(err, GK_ERR_INPUT, "internal: the Vecchia conditionals need their output");
  int nthreads = gk_omp_threads(threads);
  size_t per_thread = (size_t) m * m + 2 * (size_t) m + 1;
  double *work = (double *) malloc(per_thread * nthreads * sizeof(double));
  int *cols = (int *) malloc(((size_t) m + 1) * nthreads * sizeof(int));
  if (!work || !cols) {
    free(work);
    free(cols);
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the Vecchia rows");
  }
  stats[0] = stats[1] = stats[2] = 0.0;
  int failed = 0;
  const int chunk = 1 << 16;   /* rows between interrupt checks */
  for (int start = first; start < n && !failed; start += chunk) {
    int end = start + chunk < n ? start + chunk : n;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 256) reduction(+ : s0, s1, s2)
#endif
    for (int i = start; i < end; i++) {
      int tid = gk_omp_thread_id();
      double rs[3] = {0.0, 0.0, 0.0};
      int bad = factor_row(xs, n, dim, nbr, m, cov, dcov, nugget, noisy, form, i,
                           i - first, ld, work + per_thread * tid, cols + (size_t) (m + 1) * tid,
                           out, rs);
      if (bad) {
#ifdef _OPENMP
#pragma omp critical
#endif
        if (!failed || bad < failed) failed = bad;
      }
      s0 += rs[0];
      s1 += rs[1];
      s2 += rs[2];
    }
    stats[0] += s0;
    stats[1] += s1;
    stats[2] += s2;
    if (!failed && end < n && gk_interrupt_pending()) {
      free(work);
      free(cols);
      return gk_fail(err, GK_ERR_INTERRUPTED, "interrupted while computing the Vecchia conditionals");
    }
  }
  free(work);
  free(cols);
  if (failed)
    return gk_fail(err, GK_ERR_INPUT, GP_SINGULAR_MESSAGE, failed);
  return GK_OK;
}

void gp_vecchia_apply(int n, int m, const int *nbr, const double *coef, const double *x,
                      int k, int transpose, int threads, double *out)
{
  int nthreads = gk_omp_threads(threads);
  if (!transpose) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(static)
#endif
    for (int i = 0; i < n; i++) {
      for (int c = 0; c < k; c++) {
        const double *xc = x + (size_t) c * n;
        double t = coef[i] * xc[i];
        for (int s = 0; s < m; s++) {
          int j = nbr[i + (size_t) s * n];
          double g = coef[i + (size_t) (s + 1) * n];
          if (j > 0 && g != 0.0) t += g * xc[j - 1];
        }
        out[i + (size_t) c * n] = t;
      }
    }
    return;
  }
  /* G' x scatters rows into columns: one thread per column of x */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(static)
#endif
  for (int c = 0; c < k; c++) {
    const double *xc = x + (size_t) c * n;
    double *oc = out + (size_t) c * n;
    for (int i = 0; i < n; i++) oc[i] = coef[i] * xc[i];
    for (int i = 0; i < n; i++) {
      for (int s = 0; s < m; s++) {
        int j = nbr[i + (size_t) s * n];
        double g = coef[i + (size_t) (s + 1) * n];
        if (j > 0 && g != 0.0) oc[j - 1] += g * xc[i];
      }
    }
  }
}

void gp_vecchia_solve(int n, int m, const int *nbr, const double *coef, const double *x,
                      int k, int threads, double *out)
{
  int nthreads = gk_omp_threads(threads);
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(static)
#endif
  for (int c = 0; c < k; c++) {
    const double *xc = x + (size_t) c * n;
    double *oc = out + (size_t) c * n;
    for (int i = 0; i < n; i++) {
      double t = xc[i];
      for (int s = 0; s < m; s++) {
        int j = nbr[i + (size_t) s * n];
        double g = coef[i + (size_t) (s + 1) * n];
        if (j > 0 && g != 0.0) t -= g * oc[j - 1];
      }
      oc[i] = t / coef[i];
    }
  }
}

size_t gp_vecchia_nonzeros(int n, int m, const int *nbr)
{
  size_t count = 0;
  for (size_t e = 0; e < (size_t) n * m; e++)
    if (nbr[e] > 0) count++;
  return count;
}
