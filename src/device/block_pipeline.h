/*
 * The GPU block pipeline of the device layer (CUDA builds only): runs a block
 * list from the scheduler on one or more GPUs, one host thread per GPU (the
 * device layer's pool, gk_pool.h), each with options->depth blocks in
 * flight (a device output buffer and a part of pinned host staging each), a
 * compute stream and a download stream, so that the CPU scatters block k
 * (through a gk_block_writer) while the GPU computes blocks k + 1, k + 2, ...
 * Threads take the next block from the shared list (largest first), so
 * GPUs finish together; with options->queue, a queue shared with other
 * processes running the same list (block_scheduler.h). Near the list's end
 * a GPU takes a block only when it can start it soon (one kernel running,
 * one queued), so that the last blocks go to the GPUs that run out first.
 *
 * The pipeline knows nothing of what is computed: a gk_block_policy supplies
 * per-GPU storage and a launch function that uploads what one block needs and
 * starts its computation, asynchronously, on the given stream, writing a
 * column-major rows x cols buffer of float or double; and optionally a
 * prepare function, called for the GPU's next block while the current one
 * computes, so that host work for a block (packing its inputs) is off the
 * GPU's critical path.
 *
 * With several GPUs, each GPU thread scatters with its share of the writer's
 * threads (all threads / GPUs), so that the teams do not oversubscribe the
 * cores.
 *
 * The calling (R) thread makes the writer's output as the GPUs start when the
 * writer asks for that (make_out, block_writer.h), then waits: it checks for
 * a user interrupt and prints progress between blocks; an interrupt stops the
 * GPUs after their current block and returns GK_ERR_INTERRUPTED.
 */
#ifndef GK_BLOCK_PIPELINE_H
#define GK_BLOCK_PIPELINE_H

#include <stddef.h>
#include "device/gk_device.h"
#include "device/block_scheduler.h"
#include "device/block_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  void *ctx;     /* the engine's read-only host data */
  int single;    /* the launch writes float (1) or double (0) */
  /* Allocates one GPU's storage, sized for every block of the list. Called in
   * that GPU's thread, with the device already selected. */
  gk_status (*storage_create)(void *ctx, const gk_block *blocks, size_t count, void **storage,
                              gk_error *err);
  void (*storage_destroy)(void *ctx, void *storage);
  /* Uploads the block's data and launches its computation into `out`. The
   * GPU's earlier blocks, up to options->depth - 1 of them, may still
   * be queued or computing on `stream`: what they read must not be
   * overwritten before they finish (order uploads after them by events). */
  gk_status (*launch)(void *ctx, void *storage, const gk_block *block, void *out,
                      gk_stream stream, gk_error *err);
  /* NULL, or host work for the GPU's next block, done while the current one
   * computes (its launch must then find it done). */
  void (*prepare)(void *ctx, void *storage, const gk_block *block);
} gk_block_policy;

typedef struct {
  const int *devices;   /* 0-based GPU numbers */
  int n_devices;
  int depth;            /* blocks in flight per GPU: gk_pipeline_depth(), read
                         * once by the engine, whose output budget counts them */
  int progress;         /* print progress lines */
  const char *label;    /* names the job in progress lines */
  gk_block_queue *queue;   /* where the GPUs take blocks (NULL: a queue of this run) */
  int takers;              /* GPUs taking from that list, this run's and other processes'
                            * (0, or any count below n_devices: this run's GPUs alone) */
} gk_pipeline_options;

/* Blocks one GPU has in flight (GK_PIPELINE_DEPTH): each holds a device
 * output buffer, and two at a time also as much page-locked host memory. */
int gk_pipeline_depth(void);

gk_status gk_block_pipeline_run(const gk_block_policy *policy, const gk_block *blocks,
                                size_t count, const gk_block_writer *writer,
                                const gk_pipeline_options *options, gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
