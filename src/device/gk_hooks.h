/*
 * The two things a long-running core needs from its host program, without
 * depending on R: "has the user asked to stop?" and "print a progress line".
 * The R glue installs R-aware callbacks at load time (r_util.c); with none
 * installed, nothing is ever interrupted and progress goes nowhere.
 * Call both from the main thread only, between blocks of work.
 */
#ifndef GK_HOOKS_H
#define GK_HOOKS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*gk_interrupt_fn)(void);
typedef void (*gk_progress_fn)(const char *line);

void gk_set_hooks(gk_interrupt_fn interrupt_pending, gk_progress_fn progress);

/* Nonzero when the user has asked to interrupt. */
int gk_interrupt_pending(void);

void gk_progress(const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 1, 2)))
#endif
  ;

#ifdef __cplusplus
}
#endif
#endif
