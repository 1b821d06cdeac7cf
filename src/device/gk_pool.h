/*
 * The device layer's multi-GPU pool (CUDA builds only): one host thread per
 * GPU for engines that split a job over several GPUs (the block pipeline, the
 * multi-GPU reductions). Each thread is bound to its GPU
 * (gk_device_bind_thread) and to the pool's stop flag (gk_hooks_bind_worker:
 * gk_interrupt_pending() on it reads the flag, and it prints nothing), then
 * runs work(ctx, d, &errors[d]) for its index d. The calling (R) thread only
 * waits: every poll_ms it checks for a user interrupt, which sets the flag,
 * and calls tick(ctx) when given (progress), once also as soon as the workers
 * start. A worker that fails sets the flag too, so the others stop at their
 * next check.
 */
#ifndef GK_POOL_H
#define GK_POOL_H

#include "device/gk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*gk_pool_work)(void *ctx, int d, gk_error *err);

/* Runs the pool over devices[0 .. n - 1] (0-based GPUs) and returns when every
 * worker has. errors[d]: worker d's outcome (cleared first); *interrupted: 1
 * when the user stopped the job. The return value and err report only the
 * pool's own failure (a thread that could not start); the workers' outcomes
 * are for the caller to combine. */
gk_status gk_pool_run(const int *devices, int n, gk_pool_work work, void (*tick)(void *ctx),
                      void *ctx, int poll_ms, gk_error *errors, int *interrupted, gk_error *err);

/* The outcome of a pool run for its caller: the first worker's failure
 * other than an interrupt, as "GPU d: message"; else GK_ERR_INTERRUPTED
 * ("<what> was interrupted") when the user stopped it; else GK_OK. */
gk_status gk_pool_outcome(const int *devices, int n, const gk_error *errors, int interrupted,
                          const char *what, gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
