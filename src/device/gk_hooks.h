/*
 * The two things a long-running core needs from its host program, without
 * depending on R: "has the user asked to stop?" and "print a progress line".
 * The R glue installs R-aware callbacks at load time (r_util.c); with none
 * installed, nothing is ever interrupted and progress goes nowhere.
 * Call both from the main thread only, between blocks of work.
 */
#ifndef GK_HOOKS_H
#define GK_HOOKS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*gk_interrupt_fn)(void);
typedef void (*gk_progress_fn)(const char *line);

void gk_set_hooks(gk_interrupt_fn interrupt_pending, gk_progress_fn progress);

/* Nonzero when the user has asked to interrupt. Main thread only. */
int gk_interrupt_pending(void);

/*
 * For loops that run long, possibly inside OpenMP regions: every thread calls
 * gk_stop_requested() between chunks of work (a few milliseconds each) and
 * leaves its loop when it returns nonzero. Only the main thread (OpenMP
 * thread 0 of a region entered from it) asks the host program, at most every
 * 0.1 s of wall time; the others read the shared flag.
 */
typedef struct {
  int stop;            /* set once, read by every thread (atomic accesses) */
  double next_poll;    /* main thread only: wall time of the next poll      */
} gk_stop_flag;

void gk_stop_flag_init(gk_stop_flag *f);
int gk_stop_requested(gk_stop_flag *f);

/* Only reads the flag (no poll): cheap enough for every small piece of work. */
static inline int gk_stop_seen(gk_stop_flag *f)
{
  return __atomic_load_n(&f->stop, __ATOMIC_RELAXED);
}

/* Wall-clock seconds (monotonic), for phase times in progress lines. */
double gk_seconds_now(void);

void gk_progress(const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 1, 2)))
#endif
  ;

/* Progress in steps, for hosts that draw their own progress bars: a block
 * engine reports the blocks done of the total (and its progress line, or "")
 * through it, at most ten times a second and once at the end; lines printed
 * through gk_progress() reach it with done = total = (size_t) -1. Main thread
 * only; NULL (the default) turns it off. */
typedef void (*gk_steps_fn)(size_t done, size_t total, const char *line);
void gk_set_steps_hook(gk_steps_fn steps);
int gk_steps_hook_set(void);
void gk_progress_steps(size_t done, size_t total, const char *line);

/* For the extra host threads of a multi-GPU engine, which must not call into
 * the host program: on the calling thread, gk_interrupt_pending() returns
 * stop(ctx) instead (the main thread sets what it reads) and gk_progress()
 * prints nothing. stop = NULL undoes it. */
void gk_hooks_bind_worker(int (*stop)(void *ctx), void *ctx);

#ifdef __cplusplus
}
#endif
#endif
