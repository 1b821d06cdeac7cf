/*
 * The neighbour search on a host thread of its own (gp_neighbors.h), so that
 * the caller does other work meanwhile: at n = 1e6 in 2D the host walk takes
 * about as long as the GPU's H2 build of the same call, which needs no
 * neighbours. Pure C (pthreads). The thread never calls the host program: its
 * interrupt checks read the job's cancel flag (gk_hooks_bind_worker), which
 * the caller sets when it gives up or is interrupted while it waits.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "gp/gp_neighbors.h"
#include "device/gk_hooks.h"

struct gp_neighbors_job {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t finished;
  int done;                 /* under lock: the search has returned          */
  int cancel;               /* atomic: set by the caller, read by the search */
  const double *x;
  int n, dim, m;
  gp_neighbors_options opt;
  int *nbr, duplicates;
  gk_error err;
};

static int job_cancelled(void *ctx)
{
  return __atomic_load_n(&((gp_neighbors_job *) ctx)->cancel, __ATOMIC_RELAXED);
}

static void *job_run(void *arg)
{
  gp_neighbors_job *job = (gp_neighbors_job *) arg;
  gk_hooks_bind_worker(job_cancelled, job);
  gp_neighbors(job->x, job->n, job->dim, job->m, &job->opt, job->nbr, &job->duplicates, &job->err);
  gk_hooks_bind_worker(NULL, NULL);
  pthread_mutex_lock(&job->lock);
  job->done = 1;
  pthread_cond_signal(&job->finished);
  pthread_mutex_unlock(&job->lock);
  return NULL;
}

gk_status gp_neighbors_start(const double *x, int n, int dim, int m, int threads, int *nbr,
                             gp_neighbors_job **out, gk_error *err)
{
  *out = NULL;
  if (dim < 1 || dim > GP_NEIGHBORS_CELL_DIMS)
    return gk_fail(err, GK_ERR_INTERNAL, "a neighbour search in %d dimensions on a "
                   "host thread (at most %d)", dim, GP_NEIGHBORS_CELL_DIMS);
  gp_neighbors_job *job = (gp_neighbors_job *) calloc(1, sizeof *job);
  if (!job) return gk_fail(err, GK_ERR_NOMEM, "out of memory for the neighbour search");
  job->x = x;
  job->n = n;
  job->dim = dim;
  job->m = m;
  job->opt.gpu = 0;   /* the cell walk is host code on either backend */
  job->opt.threads = threads;
  job->opt.dense_pairs = 0;
  job->nbr = nbr;
  gk_error_clear(&job->err);
  pthread_mutex_init(&job->lock, NULL);
  pthread_cond_init(&job->finished, NULL);
  int rc = pthread_create(&job->thread, NULL, job_run, job);
  if (rc) {
    pthread_cond_destroy(&job->finished);
    pthread_mutex_destroy(&job->lock);
    free(job);
    return gk_fail(err, GK_ERR_NOMEM, "could not start a thread for the neighbour search "
                   "(error %d)", rc);
  }
  *out = job;
  return GK_OK;
}

gk_status gp_neighbors_join(gp_neighbors_job *job, int cancel, int *duplicates, gk_error *err)
{
  if (cancel) __atomic_store_n(&job->cancel, 1, __ATOMIC_RELAXED);
  /* wait in slices of 50 ms, asking the host program in between (this is
   * the caller's thread): an interrupt stops the search at its next block */
  int interrupted = 0;
  pthread_mutex_lock(&job->lock);
  while (!job->done) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 50000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    int rc = pthread_cond_timedwait(&job->finished, &job->lock, &until);
    if (rc == ETIMEDOUT && !job->done && !job_cancelled(job) && gk_interrupt_pending()) {
      interrupted = 1;
      __atomic_store_n(&job->cancel, 1, __ATOMIC_RELAXED);
    }
  }
  pthread_mutex_unlock(&job->lock);
  pthread_join(job->thread, NULL);
  *duplicates = job->duplicates;
  gk_status status = job->err.status;
  if (status) *err = job->err;
  else if (interrupted)   /* the check consumed the interrupt: it ends this call */
    status = gk_fail(err, GK_ERR_INTERRUPTED, "the neighbour search was interrupted");
  pthread_cond_destroy(&job->finished);
  pthread_mutex_destroy(&job->lock);
  free(job);
  return status;
}
