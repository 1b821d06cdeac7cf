#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include "device/gk_hooks.h"
#include "device/gk_omp.h"

static gk_interrupt_fn interrupt_hook = NULL;
static gk_progress_fn progress_hook = NULL;
static gk_steps_fn steps_hook = NULL;
static _Thread_local int (*worker_stop)(void *) = NULL;
static _Thread_local void *worker_ctx = NULL;

void gk_set_hooks(gk_interrupt_fn interrupt_pending, gk_progress_fn progress)
{
  interrupt_hook = interrupt_pending;
  progress_hook = progress;
}

void gk_set_steps_hook(gk_steps_fn steps)
{
  steps_hook = steps;
}

int gk_steps_hook_set(void)
{
  return steps_hook != NULL && worker_stop == NULL;
}

void gk_progress_steps(size_t done, size_t total, const char *line)
{
  if (steps_hook && !worker_stop) steps_hook(done, total, line ? line : "");
}

void gk_hooks_bind_worker(int (*stop)(void *ctx), void *ctx)
{
  worker_stop = stop;
  worker_ctx = ctx;
}

int gk_interrupt_pending(void)
{
  if (worker_stop) return worker_stop(worker_ctx);
  return interrupt_hook ? interrupt_hook() : 0;
}

double gk_seconds_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

void gk_stop_flag_init(gk_stop_flag *f)
{
  f->stop = 0;
  f->next_poll = gk_seconds_now() + 0.1;
}

int gk_stop_requested(gk_stop_flag *f)
{
  if (__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) return 1;
  if (gk_omp_thread_id() != 0) return 0;
  double now = gk_seconds_now();
  if (now < f->next_poll) return 0;
  f->next_poll = now + 0.1;
  if (!gk_interrupt_pending()) return 0;
  __atomic_store_n(&f->stop, 1, __ATOMIC_RELAXED);
  return 1;
}

void gk_progress(const char *fmt, ...)
{
  if (!progress_hook || worker_stop) return;
  char line[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  progress_hook(line);
}
