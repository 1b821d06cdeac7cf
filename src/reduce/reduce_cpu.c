/*
 * The CPU engine of the kernel reductions (semantics in reduce.h): OpenMP over
 * the output rows, each row reducing F(x_i, y_j) over j on the fly, in double
 * precision. It is also the reference the GPU engine is tested against, which
 * is why its row loops are not the GPU's tile operators (reduce_ops.cuh); the
 * kernel formulas and the k-list are shared (gk_kernel.h, reduce_klist.h).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "reduce/reduce.h"
#include "reduce/reduce_klist.h"
#include "device/gk_hooks.h"
#include "device/gk_omp.h"

int reduce_value_columns(gk_reduction r, int e, int k)
{
  switch (r) {
  case GK_REDUCE_SUM:
  case GK_REDUCE_LOGSUMEXP:
  case GK_REDUCE_SOFTMAX_SUM: return e;
  case GK_REDUCE_MIN:
  case GK_REDUCE_MAX: return 1;
  case GK_REDUCE_KMIN: return k;
  default: return 0;
  }
}

int reduce_index_columns(gk_reduction r, int k)
{
  if (r == GK_REDUCE_ARGMIN || r == GK_REDUCE_ARGMAX) return 1;
  return r == GK_REDUCE_KMIN ? k : 0;
}

void reduce_distances_from_squares(const double *squares, size_t n, double scale, double *out)
{
  for (size_t q = 0; q < n; q++) out[q] = sqrt(squares[q] > 0 ? squares[q] : 0.0) * scale;
}

/* Widens [*lo, *hi] to hold v[0 .. n-1], in four independent chains (a
 * single chain of compares runs at one value per few cycles: knn() reads 6e5
 * coordinates at 1e5 points). */
static void extend_range(const double *v, size_t n, double *lo, double *hi)
{
  double l[4] = {*lo, *lo, *lo, *lo}, h[4] = {*hi, *hi, *hi, *hi};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int c = 0; c < 4; c++) {
      l[c] = v[i + c] < l[c] ? v[i + c] : l[c];
      h[c] = v[i + c] > h[c] ? v[i + c] : h[c];
    }
  for (; i < n; i++) {
    l[0] = v[i] < l[0] ? v[i] : l[0];
    h[0] = v[i] > h[0] ? v[i] : h[0];
  }
  for (int c = 0; c < 4; c++) {
    if (l[c] < *lo) *lo = l[c];
    if (h[c] > *hi) *hi = h[c];
  }
}

/* The range of one dimension of x (m values) and y (n values), in pieces on
 * several threads when they are many: every call of the GPU engine waits for
 * it before its upload, as for the packing (reduce_pack.c). */
static void dimension_range(const double *xd, size_t m, const double *yd, size_t n, double *lo,
                            double *hi)
{
  const int threads = gk_omp_pass_threads(m + n);
  const size_t piece = GK_OMP_PASS_PIECE;
  const long xpieces = (long) ((m + piece - 1) / piece), pieces = xpieces + (long) ((n + piece - 1) / piece);
  double l = *lo, h = *hi;
  (void) threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) reduction(min : l) reduction(max : h) \
  if (threads > 1)
#endif
  for (long p = 0; p < pieces; p++) {
    const size_t at = (size_t) (p < xpieces ? p : p - xpieces) * piece, count = p < xpieces ? m : n;
    const double *v = (p < xpieces ? xd : yd) + at;
    double pl = v[0], ph = v[0];
    extend_range(v, count - at < piece ? count - at : piece, &pl, &ph);
    l = pl < l ? pl : l;
    h = ph > h ? ph : h;
  }
  *lo = l;
  *hi = h;
}

double reduce_knn_scale(const double *x, size_t m, const double *y, size_t n, int dim)
{
  if (m == 0 || n == 0) return 1.0;
  double spread = 0.0;
  for (int d = 0; d < dim; d++) {
    const double *xd = x + (size_t) d * m, *yd = y + (size_t) d * n;
    double lo = xd[0], hi = xd[0];
    dimension_range(xd, m, yd, n, &lo, &hi);
    double s = hi / 2 - lo / 2;   /* halves: the difference itself may overflow */
    if (s > spread) spread = s;
  }
  return reduce_knn_scale_of(spread);
}

double reduce_knn_scale_of(double spread)
{
  if (spread == 0 || (spread < 0x1p399 && spread > 0x1p-401)) return 1.0;
  return ldexp(1.0, (int) nearbyint(log2(spread)));   /* R's round(): half to even */
}

/* Point-major copy of a column-major matrix minus the point origin[0],
 * origin[on], origin[2 on], ... (a row of a column-major on-row matrix; NULL
 * for none), divided by the range, so that a point's coordinates are
 * contiguous in the inner loops. Shifting before scaling keeps the digits of
 * distances far from the origin (the GPU engine does the same). */
static double *scaled_points(const gk_reduce_operand *p, const double *origin, size_t on,
                             const double *range)
{
  size_t n = p->rows;
  int dim = p->cols;
  double *out = (double *) malloc((n * dim + 1) * sizeof(double));
  if (!out) return NULL;
  for (int d = 0; d < dim; d++) {
    double o = origin ? origin[(size_t) d * on] : 0.0;
    for (size_t i = 0; i < n; i++) out[i * dim + d] = (p->host[i + (size_t) d * n] - o) / range[d];
  }
  return out;
}

static int all_finite(const double *v, size_t count)
{
  for (size_t q = 0; q < count; q++)
    if (!isfinite(v[q])) return 0;
  return 1;
}

typedef struct {
  const gk_reduce_spec *spec;
  const double *xs, *ys, *b;   /* xs, ys point-major and scaled; b column-major */
  size_t m, n;
  int dim, e, inner;
  const gk_formula *formula;   /* NULL: the kernel of the vocabulary */
  double *out;
  int *index;
  gk_stop_flag *stop;          /* checked every STOP_CHUNK pairs of a row */
  const int *pieces;           /* block-sparse: work pieces (reduce.h), else NULL */
  int npieces;
  const int *redranges;        /* block-sparse: the reduced ranges */
} reduce_job;

/* Pairs between interrupt checks: a few milliseconds, so that a row of many
 * millions of pairs is interruptible. */
#define STOP_CHUNK 16384
#define STOPPED(job, j) ((((j) + 1) % STOP_CHUNK) == 0 && gk_stop_requested((job)->stop))

/* The j ranges row i reduces over: pairs (start, end), `count` of them. */
typedef struct {
  const int *pairs;
  int count;
} row_spans;

#define FOR_EACH_J(sp, j)                                             \
  for (int span_ = 0; span_ < (sp)->count; span_++)                   \
    for (size_t j = (size_t) (sp)->pairs[2 * span_];                  \
         j < (size_t) (sp)->pairs[2 * span_ + 1]; j++)

static inline double pair_value(const reduce_job *job, const double *xi, size_t j)
{
  const double *yj = job->ys + j * job->dim;
  if (job->formula) return job->formula->eval(xi, yj, job->formula->params);
  return gk_kernel_eval(&job->spec->kernel, gk_pair_stat(job->inner, xi, 1, yj, 1, job->dim));
}

static void row_sum(const reduce_job *job, size_t i, const row_spans *sp, double *acc)
{
  const double *xi = job->xs + i * job->dim;
  for (int c = 0; c < job->e; c++) acc[c] = 0.0;
  FOR_EACH_J(sp, j) {
    if (STOPPED(job, j)) return;
    double v = pair_value(job, xi, j);
    for (int c = 0; c < job->e; c++) acc[c] += v * job->b[j + (size_t) c * job->n];
  }
  for (int c = 0; c < job->e; c++) job->out[i + (size_t) c * job->m] = acc[c];
}

/* min / max and their first index; `sign` = -1 turns max into a min. */
static void row_extreme(const reduce_job *job, size_t i, const row_spans *sp, double sign, int want_index)
{
  const double *xi = job->xs + i * job->dim;
  double best = INFINITY;
  size_t arg = 0;
  int found = 0;
  FOR_EACH_J(sp, j) {
    if (STOPPED(job, j)) return;
    double v = sign * pair_value(job, xi, j);
    if (!found || v < best) {  /* strict: ties keep the first j */
      best = v;
      arg = j;
      found = 1;
    }
  }
  if (want_index) job->index[i] = found ? (int) arg + 1 : 0;
  else job->out[i] = sign * best;
}

/* The k smallest values (reduce_klist.h: ties keep the smaller index); rows
 * with fewer than k pairs end with Inf and index 0. */
static void row_kmin(const reduce_job *job, size_t i, const row_spans *sp, double *val, int *idx)
{
  const double *xi = job->xs + i * job->dim;
  int k = job->spec->k, filled = 0;
  for (int q = 0; q < k; q++) { val[q] = INFINITY; idx[q] = 0; }
  FOR_EACH_J(sp, j) {
    if (STOPPED(job, j)) return;
    klist_push(val, idx, &filled, k, pair_value(job, xi, j), (int) j + 1);
  }
  for (int q = 0; q < k; q++) {
    job->out[i + (size_t) q * job->m] = val[q];
    job->index[i + (size_t) q * job->m] = idx[q];
  }
}

/* LOGSUMEXP and SOFTMAX_SUM with a running maximum: acc[c] holds
 * sum_j exp(F_ij - max) b_jc, acc[e] the softmax denominator. */
static void row_exp(const reduce_job *job, size_t i, const row_spans *sp, double *acc, int softmax)
{
  const double *xi = job->xs + i * job->dim;
  double mx = -INFINITY;
  for (int c = 0; c <= job->e; c++) acc[c] = 0.0;
  FOR_EACH_J(sp, j) {
    if (STOPPED(job, j)) return;
    double v = pair_value(job, xi, j);
    if (v > mx) {
      double shrink = exp(mx - v);
      for (int c = 0; c <= job->e; c++) acc[c] *= shrink;
      mx = v;
    }
    double w = exp(v - mx);
    for (int c = 0; c < job->e; c++) acc[c] += w * job->b[j + (size_t) c * job->n];
    acc[job->e] += w;
  }
  for (int c = 0; c < job->e; c++)
    job->out[i + (size_t) c * job->m] = softmax ? acc[c] / acc[job->e] : mx + log(acc[c]);
}

/* What row i reduces over: all of y, or its piece's list of ranges. */
static row_spans spans_of_row(const reduce_job *job, size_t i, int *dense_pair)
{
  row_spans sp;
  if (!job->pieces) {
    dense_pair[0] = 0;
    dense_pair[1] = (int) job->n;
    sp.pairs = dense_pair;
    sp.count = 1;
    return sp;
  }
  int lo = 0, hi = job->npieces - 1;   // the piece with start <= i < end
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if ((size_t) job->pieces[4 * mid] <= i) lo = mid; else hi = mid - 1;
  }
  const int *p = job->pieces + 4 * lo;
  sp.pairs = job->redranges + 2 * (size_t) p[2];
  sp.count = p[3] - p[2];
  return sp;
}

static void reduce_row(const reduce_job *job, size_t i, double *scratch, int *iscratch)
{
  int dense_pair[2];
  row_spans sp = spans_of_row(job, i, dense_pair);
  switch (job->spec->reduction) {
  case GK_REDUCE_SUM: row_sum(job, i, &sp, scratch); break;
  case GK_REDUCE_MIN: row_extreme(job, i, &sp, 1.0, 0); break;
  case GK_REDUCE_MAX: row_extreme(job, i, &sp, -1.0, 0); break;
  case GK_REDUCE_ARGMIN: row_extreme(job, i, &sp, 1.0, 1); break;
  case GK_REDUCE_ARGMAX: row_extreme(job, i, &sp, -1.0, 1); break;
  case GK_REDUCE_KMIN: row_kmin(job, i, &sp, scratch, iscratch); break;
  case GK_REDUCE_LOGSUMEXP: row_exp(job, i, &sp, scratch, 0); break;
  case GK_REDUCE_SOFTMAX_SUM: row_exp(job, i, &sp, scratch, 1); break;
  }
}

gk_status reduce_cpu(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                     const gk_reduce_operand *y, const gk_reduce_operand *b,
                     double *out, int *index, int threads, gk_error *err)
{
  reduce_job job;
  double *scratch = NULL;
  int *iscratch = NULL;
  void *scratch_block = NULL;
  int *pieces = NULL;
  int nthreads = gk_omp_threads(threads);
  job.pieces = NULL;
  job.npieces = 0;
  job.redranges = NULL;
  if (spec->ranges && reduce_ranges_check(spec->ranges, x->rows, y->rows, err)) return err->status;
  if (spec->formula && !spec->formula->eval)
    return gk_fail(err, GK_ERR_INPUT, "this formula was not compiled for the CPU");
  // Symmetric sums (reduce.h) are checked as the GPU engine checks them, then
  // evaluated both ways: the rows' sums are the same, to rounding.
  if (spec->symmetric && reduce_check_symmetric(spec, x, y, err)) return err->status;
  if (spec->ranges) {
    if (reduce_ranges_pieces(spec->ranges, x->rows, 0, &pieces, &job.npieces, err)) return err->status;
    job.pieces = pieces;
    job.redranges = spec->ranges->redranges_j;
  }
  job.spec = spec;
  job.m = x->rows;
  job.n = y->rows;
  job.dim = x->cols;
  job.e = b ? b->cols : 1;
  job.b = b ? b->host : NULL;
  job.formula = spec->formula;
  job.inner = gk_reduce_sees_points(spec);
  job.out = out;
  job.index = index;
  // Kernels of differences: both sets relative to y's first point.
  const double *origin = !job.inner && job.n > 0 ? y->host : NULL;
  job.xs = scaled_points(x, origin, job.n, spec->range);
  job.ys = scaled_points(y, origin, job.n, spec->range);
  gk_stop_flag stop;
  gk_stop_flag_init(&stop);
  job.stop = &stop;
  /* Per-thread scratch: E + 1 accumulators, or the k-list of KMIN, each
   * thread's in cache lines of its own: the sums write their accumulators at
   * every pair, and two threads' accumulators in one line (as malloc's
   * alignment fell) made the exact products of h2_error() 3 times slower. */
  size_t per_thread = (size_t) (job.e > spec->k ? job.e : spec->k) + 1;
  const size_t line = 64, stride = (per_thread * sizeof(double) + line - 1) / line * line;
  scratch_block = malloc(2 * stride * (size_t) nthreads + line);   // doubles, then ints
  if (scratch_block) {
    scratch = (double *) (((uintptr_t) scratch_block + line - 1) & ~(uintptr_t) (line - 1));
    iscratch = (int *) (scratch + stride / sizeof(double) * nthreads);
  }
  if (!job.xs || !job.ys || !scratch_block) {
    gk_fail(err, GK_ERR_NOMEM, "out of memory for the reduction's work arrays");
    goto done;
  }
  if (!all_finite(job.xs, job.m * job.dim) || !all_finite(job.ys, job.n * job.dim)) {
    gk_fail(err, GK_ERR_INPUT, "the points span more than 1e308 times the kernel's range: "
            "use a larger range, or rescale the coordinates");
    goto done;
  }
  /* Rows in blocks; every thread also checks for an interrupt within its rows. */
  const size_t block = 4096;
  for (size_t start = 0; start < job.m; start += block) {
    ptrdiff_t end = (ptrdiff_t) (start + block < job.m ? start + block : job.m);
    // No more threads than chunks of 16 rows: the others would get no work,
    // and starting them is most of a small call's time.
    ptrdiff_t chunks = (end - (ptrdiff_t) start + 15) / 16;
    int team = chunks < nthreads ? (int) chunks : nthreads;
#pragma omp parallel for schedule(dynamic, 16) num_threads(team)
    for (ptrdiff_t i = (ptrdiff_t) start; i < end; i++) {
      int t = gk_omp_thread_id();
      if (gk_stop_seen(&stop) || ((i % 16) == 0 && gk_stop_requested(&stop))) continue;
      reduce_row(&job, (size_t) i, scratch + t * (stride / sizeof(double)),
                 iscratch + t * (stride / sizeof(int)));
    }
    if (gk_stop_requested(&stop)) {
      gk_fail(err, GK_ERR_INTERRUPTED, "the reduction was interrupted");
      goto done;
    }
  }
  if (spec->root_scale > 0 && out) {   // knn's distances, in chunks over the threads
    const size_t total = job.m * (size_t) reduce_value_columns(spec->reduction, job.e, spec->k);
    const size_t chunk = (size_t) 1 << 16;
    const ptrdiff_t chunks = (ptrdiff_t) ((total + chunk - 1) / chunk);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (chunks > 1)
    for (ptrdiff_t c = 0; c < chunks; c++) {
      const size_t from = (size_t) c * chunk, len = total - from < chunk ? total - from : chunk;
      reduce_distances_from_squares(out + from, len, spec->root_scale, out + from);
    }
  }
done:
  free(pieces);
  free((void *) job.xs);
  free((void *) job.ys);
  free(scratch_block);
  return err->status;
}

/* A distance from the coordinate differences with a per-pair scale (as
 * hypot), halves first so that nothing overflows or underflows. */
static double exact_distance(const double *x, size_t m, size_t i, const double *y, size_t n,
                             size_t j, int dim)
{
  double big = 0.0, s = 0.0;
  for (int d = 0; d < dim; d++) {
    double h = fabs(x[i + (size_t) d * m] / 2 - y[j + (size_t) d * n] / 2);
    if (h > big) big = h;
  }
  if (big == 0.0) return 0.0;
  for (int d = 0; d < dim; d++) {
    double h = (x[i + (size_t) d * m] / 2 - y[j + (size_t) d * n] / 2) / big;
    s += h * h;
  }
  return 2.0 * big * sqrt(s);
}

gk_status reduce_knn_refine(const double *x, size_t m, const double *y, size_t n, int dim,
                            size_t k, double scale, int na_index, int *index, double *distance,
                            int *changed, gk_error *err)
{
  *changed = 0;
  if (m == 0 || n == 0 || k == 0) return GK_OK;
  const double limit = (scale > 0 ? scale : reduce_knn_scale(x, m, y, n, dim)) * sqrt(DBL_MIN);
  double *best = (double *) malloc(k * sizeof(double));
  int *best_j = (int *) malloc(k * sizeof(int));
  if (!best || !best_j) {
    free(best);
    free(best_j);
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for knn's exact search");
  }
  gk_status st = GK_OK;
  for (size_t i = 0; i < m && st == GK_OK; i++) {
    int bad = 0;
    for (size_t c = 0; c < k && !bad; c++) {
      const int j = index[i + c * m];
      // Sorted distances: the first at or beyond the limit ends the row's test.
      if (!(distance[i + c * m] < limit)) break;
      if (j == na_index) continue;
      for (int d = 0; d < dim; d++)
        if (x[i + (size_t) d * m] != y[(size_t) (j - 1) + (size_t) d * n]) bad = 1;
    }
    if (!bad) continue;
    *changed = 1;
    int filled = 0;
    for (size_t j = 0; j < n; j++) {
      if ((j & 4095) == 0 && gk_interrupt_pending()) {
        st = gk_fail(err, GK_ERR_INTERRUPTED, "knn was interrupted");
        break;
      }
      klist_push(best, best_j, &filled, (int) k, exact_distance(x, m, i, y, n, j, dim), (int) j + 1);
    }
    for (size_t c = 0; c < k; c++) {
      index[i + c * m] = (int) c < filled ? best_j[c] : na_index;
      distance[i + c * m] = (int) c < filled ? best[c] : INFINITY;
    }
  }
  free(best);
  free(best_j);
  return st;
}
