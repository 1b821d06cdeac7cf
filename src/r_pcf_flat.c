/* Flattening R's lists of two-column matrices into the engines' pcf_set:
 * one pass on R's thread to check shapes and take the data pointers, one to
 * copy and check the values, in parallel. The copy is the largest serial
 * step of the host before a PCF engine starts, and the result's allocation
 * (R's collector runs first: a 10 GB vector never fits its heap's free
 * space) the second, so the copy can run on a helper thread meanwhile. */
#include <pthread.h>
#include <string.h>
#include "r_pcf_flat.h"
#include "device/gk_omp.h"
#include "device/gk_shared.h"

void gk_pcf_plan_of(SEXP list, const char *arg, gk_pcf_plan *plan)
{
  if (TYPEOF(list) != VECSXP)
    gk_stop("`%s` must be a list of PCFs (two-column matrices t, v), made by as_pcf_list()", arg);
  R_xlen_t n = Rf_xlength(list);
  size_t *offset = (size_t *) R_alloc((size_t) n + 1, sizeof(size_t));
  const void **data = (const void **) R_alloc((size_t) n + 1, sizeof(void *));
  char *is_int = R_alloc((size_t) n + 1, 1);
  offset[0] = 0;
  for (R_xlen_t f = 0; f < n; f++) {
    SEXP m = VECTOR_ELT(list, f);
    if (!Rf_isMatrix(m) || (TYPEOF(m) != REALSXP && TYPEOF(m) != INTSXP) || Rf_ncols(m) != 2)
      gk_stop("`%s[[%lld]]` must be a numeric matrix with two columns (t, v) or a data frame "
               "with columns t and v", arg, (long long) f + 1);
    offset[f + 1] = offset[f] + (size_t) Rf_nrows(m);
    is_int[f] = TYPEOF(m) == INTSXP;
    data[f] = is_int[f] ? (const void *) INTEGER(m) : (const void *) REAL(m);
  }
  plan->n = n;
  plan->offset = offset;
  plan->data = data;
  plan->is_int = is_int;
}

/* Threads for a copy: one below a million breakpoints. Asked on R's thread
 * (a helper thread has OpenMP's defaults, not the session's). */
static int copy_threads(const gk_pcf_plan *plan)
{
  return plan->offset[plan->n] < 1000000 ? 1 : gk_omp_threads(0);
}

void gk_pcf_int_columns(const int *m, size_t rows, double *t, double *v)
{
  for (size_t k = 0; k < 2 * rows; k++) {
    int value = m[k];
    (k < rows ? t + k : v + k - rows)[0] = value == NA_INTEGER ? NA_REAL : (double) value;
  }
}

static void copy_with(const gk_pcf_plan *plan, double *t, double *v, int single, int threads,
                      size_t *bad, size_t *collapse)
{
  const size_t *offset = plan->offset;
  pcf_set view = {(size_t) plan->n, offset, t, v};
  long long first_bad = plan->n, first_collapse = plan->n;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 256) \
    reduction(min : first_bad, first_collapse)
#endif
  for (R_xlen_t f = 0; f < plan->n; f++) {
    size_t rows = offset[f + 1] - offset[f];
    if (!(plan->is_int && plan->is_int[f])) {
      memcpy(t + offset[f], (const double *) plan->data[f], rows * sizeof(double));
      memcpy(v + offset[f], (const double *) plan->data[f] + rows, rows * sizeof(double));
    } else {
      gk_pcf_int_columns((const int *) plan->data[f], rows, t + offset[f], v + offset[f]);
    }
    // While the function is in cache: the checks and float's verdict (the
    // latter matters only for sets that pass the checks).
    if (pcf_function_bad(&view, (size_t) f, single)) {
      if (f < first_bad) first_bad = f;
    } else if (single && f < first_collapse && pcf_float_collapse_row(&view, (size_t) f)) {
      first_collapse = f;
    }
  }
  (void) threads;
  *bad = (size_t) first_bad;
  *collapse = (size_t) first_collapse;
}

void gk_pcf_plan_copy(const gk_pcf_plan *plan, double *t, double *v, int single, size_t *bad,
                      size_t *collapse)
{
  copy_with(plan, t, v, single, copy_threads(plan), bad, collapse);
}

int gk_pcf_plan_passes(const gk_pcf_plan *plan, int single, double *last_t, double *last_v,
                       size_t *collapse)
{
  int failed = plan->n == 0;
  long long first_collapse = plan->n;
  // A pass that only reads: a few threads reach the host's bandwidth (and
  // leave the other cores to future workers copying the same functions).
  int threads = gk_omp_pass_threads(2 * plan->offset[plan->n]);
  (void) threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 256) \
    reduction(| : failed) reduction(min : first_collapse)
#endif
  for (R_xlen_t f = 0; f < plan->n; f++) {
    size_t rows = plan->offset[f + 1] - plan->offset[f], one[2] = {0, rows};
    if (plan->is_int && plan->is_int[f]) {
      failed = 1;
      continue;
    }
    const double *m = (const double *) plan->data[f];
    pcf_set view = {1, one, m, m + rows};
    if (pcf_function_bad(&view, 0, single)) {
      failed = 1;
      continue;
    }
    // Each thread's functions come in order: past its first, float's verdict is not needed.
    if (single && f < first_collapse && pcf_float_collapse_row(&view, 0)) first_collapse = f;
    last_t[f] = m[rows - 1];
    last_v[f] = m[2 * rows - 1];
  }
  *collapse = (size_t) first_collapse;
  return !failed;
}

/* The copies of up to two sets, on a helper thread or on R's. */
typedef struct {
  const gk_pcf_plan *plan[2];
  gk_pcf_flat *out[2];
  int threads[2], single, started, joined;
  pthread_t thread;
} copy_job;

static void *copy_run(void *arg)
{
  copy_job *job = (copy_job *) arg;
  for (int k = 0; k < 2; k++) {
    gk_pcf_flat *o = job->out[k];
    if (job->plan[k])
      copy_with(job->plan[k], (double *) o->set.t, (double *) o->set.v, job->single,
                job->threads[k], &o->bad, &o->collapse);
  }
  return NULL;
}

static void copy_join(void *arg)
{
  copy_job *job = (copy_job *) arg;
  if (job->started && !job->joined) pthread_join(job->thread, NULL);
  job->joined = 1;
}

static void plan_set(SEXP list, const char *arg, gk_pcf_plan *plan, gk_pcf_flat *out)
{
  gk_pcf_plan_of(list, arg, plan);
  size_t total = plan->offset[plan->n];
  out->set.n = (size_t) plan->n;
  out->set.offset = plan->offset;
  out->set.t = (const double *) R_alloc(total + 1, sizeof(double));
  out->set.v = (const double *) R_alloc(total + 1, sizeof(double));
  out->bad = out->collapse = out->set.n;
  // As for results: 2 MiB pages cut the copy's page faults (most of its time
  // on fresh memory) by 512.
  gk_result_huge_pages((void *) out->set.t, total * sizeof(double));
  gk_result_huge_pages((void *) out->set.v, total * sizeof(double));
}

SEXP gk_pcf_flatten(SEXP x, SEXP y, int single, gk_pcf_flat *fx, gk_pcf_flat *fy,
                    SEXP (*during)(void *), void *data)
{
  gk_pcf_plan px, py;
  copy_job job;
  memset(&job, 0, sizeof job);
  plan_set(x, "x", &px, fx);
  if (!Rf_isNull(y)) plan_set(y, "y", &py, fy);
  job.plan[0] = &px;
  job.plan[1] = Rf_isNull(y) ? NULL : &py;
  job.out[0] = fx;
  job.out[1] = fy;
  job.single = single;
  // Beside `during`, one thread fewer: R's thread keeps a core for it.
  for (int k = 0; k < 2; k++) {
    job.threads[k] = job.plan[k] ? copy_threads(job.plan[k]) : 1;
    if (during && job.threads[k] > 1) job.threads[k]--;
  }
  // The helper thread only reads the matrices (R's collector moves nothing)
  // and writes the copies; it calls nothing of R's.
  job.started = during && pthread_create(&job.thread, NULL, copy_run, &job) == 0;
  if (!job.started) copy_run(&job);
  if (!during) return R_NilValue;
  // An error in `during` jumps out only after the copy has finished with the
  // transient memory that R frees on the way.
  return R_ExecWithCleanup(during, data, copy_join, &job);
}
