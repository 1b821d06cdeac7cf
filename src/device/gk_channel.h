/*
 * Results of future workers on this machine, handed to the caller
 * (R/distributed.R). Pure host C, no R.
 *
 * Inputs read directly (GK_CHANNEL_DIRECT = 1, the default, Linux): the
 * caller offers a table of where its PCFs are, R's own matrices
 * (gk_channel_offer_input); each worker reads the segment's token back from
 * the caller's memory first, so that it never reads another process of the
 * same number (another pid namespace), and copies out what its part needs
 * (every function, where the workers share one list of blocks) with
 * process_vm_readv (gk_channel_read_columns) while the caller checks them,
 * and computes once they passed (gk_channel_inputs_checked). A copy made
 * first, in a shared segment or in the caller's memory, put 404 MB of writes
 * (at 5e4 functions) before every worker's reading. On this route the
 * channel is made before the result (gk_channel_create, then
 * gk_channel_open) and the table offered before the workers are launched;
 * one launched earlier waits for the offer (gk_channel_await_input). The
 * offer comes first, the result after it, so that the result's allocation
 * (and R's collection before it) overlaps the workers' reading and first
 * blocks; a block waits until the result exists.
 *
 * Blocks handed over in place: a worker's engine puts its blocks in memory
 * that is a shared segment it offers (gk_shared_offer; a GPU's page-locked
 * staging, gk_pinned_alloc_shared, or the CPU engine's block buffer,
 * gk_shared_scratch_take); the worker hands each block to the caller as a
 * place in that segment, the caller's writer threads map it (once, kept for
 * later calls, gk_shared_peer_values: a call's start unmaps those of
 * workers gone) and write the block into the result with the block writer,
 * then free the slot, and the worker's thread, which waited as it waits for
 * its own scatter, goes on. So the result is written as in one process
 * (inst/bench/scatter_rate.cu: shared staging as fast as private), where
 * a worker's own writes into the caller's result (process_vm_writev, which
 * also needs the right to ptrace the caller) ran more slowly or alike
 * (inst/bench/RESULTS.md). It needs no permission to
 * trace the caller, and takes every layout and float blocks. A block in
 * memory the worker does not offer, one the caller cannot map (its slot
 * marked refused), and every block where GK_CHANNEL_HANDOVER is 0 go
 * through slots.
 *
 * Slots: the caller's channel is one shared segment (gk_shared.h) holding a
 * ring of a few slots for each chunk of the work, and threads of its own
 * that scatter every slot a worker fills into the result with the block
 * writer, then free the slot.
 * A worker attaches its chunk's ring and runs its engine with
 * gk_channel_writer: each block of results (float or double) is copied into
 * a free slot, piece by piece of whole columns.
 *
 * On every route the result asks for 2 MiB pages (gk_result_huge_pages),
 * and the workers take their blocks from one list in the segment's head
 * (gk_channel_queue); the caller closes it when it stops them.
 *
 * Why not a result in shared memory that workers write: shared memory
 * (memfd) gets no huge pages on most systems, and its first writes fault in
 * 4 KiB pages several times more slowly than private memory's, which can
 * have 2 MiB pages (inst/bench/pages.c measures both).
 *
 * A slot: state 0 free, 1 being filled, 2 full, 3 being scattered, 4
 * refused (a handed-over block the caller could not map). Workers claim a
 * free slot of their ring (compare-and-swap: several GPUs of one worker may
 * send at once) and mark it full; the caller's writer threads
 * (GK_CHANNEL_WRITERS; by default one per ring, two at least: as in one
 * process, where each GPU's thread scatters its own blocks) claim full
 * slots the same way, scatter them and mark them free. A worker whose ring
 * is full, or whose handed-over block is being written, waits; it gives up
 * when the caller aborts (an error elsewhere, an interrupt) or is gone.
 */
#ifndef GK_CHANNEL_H
#define GK_CHANNEL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "device/block_scheduler.h"
#include "device/block_writer.h"
#include "device/gk_error.h"
#include "device/gk_shared.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gk_channel_head gk_channel_head;
typedef struct gk_channel_slot gk_channel_slot;

#define GK_CHANNEL_MAX_WRITERS 8

typedef struct gk_channel gk_channel;

/* One of the caller's writer threads. */
typedef struct {
  gk_channel *c;
  int index;
  pthread_t thread;
  double busy_s;          /* seconds spent scattering                    */
  size_t pieces;          /* slots scattered                             */
} gk_channel_writer_thread;

/* The caller's side. */
struct gk_channel {
  gk_shared seg;
  gk_channel_head *head;
  double *out;            /* the result the slots are scattered into     */
  gk_write_kind layout;
  size_t n_rows;
  int threads;            /* OpenMP threads of each writer               */
  int writers, running;   /* writer threads made, still to be joined     */
  gk_channel_writer_thread writer[GK_CHANNEL_MAX_WRITERS];
  volatile int finishing;
  double busy_s;          /* seconds the writers spent scattering (summed) */
  size_t pieces;          /* slots scattered                              */
  uint64_t direct_token;  /* read back by workers before they read inputs */
  size_t values;          /* of the result                                */
};

/* Bytes of one slot for a result of `values` doubles with columns of at most
 * `n_rows` entries cut into `rings` chunks: 32 MiB, less for small results,
 * never less than one column of doubles. */
size_t gk_channel_slot_bytes(double values, size_t n_rows, size_t rings);

/* Makes the segment (`rings` rings of slots of `slot_bytes`), with no
 * result yet: its path and token can go to the workers at once, so that
 * they start while the caller allocates the result and stages the inputs.
 * Workers that read the inputs wait for them (gk_channel_await_input). */
gk_status gk_channel_create(gk_channel *c, size_t rings, size_t slot_bytes, gk_error *err);

/* Points the channel at its result `out` (`result_bytes`; layout and rows of
 * the result) and starts the caller's writer threads, which scatter into it
 * with `threads` OpenMP threads among them. The first writer makes the
 * slots' pages before it looks for full slots: the call returns at once.
 * Last, the workers' blocks waiting for the result go on. On failure the
 * workers are told to give up; the owner releases. */
gk_status gk_channel_open(gk_channel *c, double *out, size_t result_bytes, gk_write_kind layout,
                          size_t n_rows, int threads, gk_error *err);

/* Once every worker is done: scatters what is left, stops the threads. */
void gk_channel_finish(gk_channel *c);

/* Stops the threads (telling waiting workers to give up) and frees the segment. */
void gk_channel_release(gk_channel *c);

/* Whether workers may be offered reads of the inputs offered below
 * (GK_CHANNEL_DIRECT = 1 and the system has process_vm_readv). */
int gk_channel_direct(const gk_channel *c);

/* Offers workers `bytes` of this process at `at` to read with
 * gk_channel_read_input (a table of where the PCF inputs are, which they
 * then read with gk_channel_read_columns; kept until the channel is
 * released), where gk_channel_direct says so: what waiting workers go on
 * at. Before or after gk_channel_open; the workers' blocks wait for it. */
void gk_channel_offer_input(gk_channel *c, const void *at, size_t bytes);

/* Tells the workers that the offered inputs passed this process's checks:
 * until then they read them but do not compute (gk_channel_await_checked).
 * Inputs that fail are never marked: the caller stops the call instead. */
void gk_channel_inputs_checked(gk_channel *c);

/* The worker's side: its chunk's ring of an attached segment. */
typedef struct {
  gk_shared seg;
  gk_channel_head *head;
  gk_channel_slot *ring;
  char *data;             /* the ring's first slot's values                */
  size_t slot_bytes, slots;
  gk_write_kind kind;     /* what the engine computes                      */
  size_t band_row0, band_col0;   /* where the engine's (0, 0) is in the result */
  int threads;
  volatile int failed;    /* the caller stopped taking blocks              */
  double wait_s;          /* seconds spent waiting for a free slot         */
  volatile int handover;  /* blocks handed over in place: 0 untried, 1 yes, -1 no */
  size_t blocks;          /* blocks sent (of a shared list: the ones taken) */
} gk_channel_port;

/* Attaches ring `ring` of the segment at `path` (gk_shared_attach's checks). */
gk_status gk_channel_attach(const char *path, uint64_t token, size_t bytes, size_t ring,
                            gk_channel_port *p, gk_error *err);

/* A writer sending the engine's blocks of kind `kind` through the port; the
 * caller scatters them at (row0, col0) of its result. */
gk_block_writer gk_channel_writer(gk_channel_port *p, gk_write_kind kind, size_t row0,
                                  size_t col0, int threads);

void gk_channel_detach(gk_channel_port *p);

/* The block list the workers of one call share (block_scheduler.h): each
 * plans the whole result and takes blocks from it, so that they finish
 * together. */
gk_block_queue *gk_channel_queue(gk_channel_port *p);

/* Whether the caller stopped the call (an error, an interrupt, finished):
 * checked after reading its inputs, which it frees only after that. */
int gk_channel_aborted(gk_channel_port *p);

/* Waits until the caller offers its inputs;
 * GK_ERR_ABANDONED when it stops (abort) or is gone, GK_ERR_INTERRUPTED when
 * this process is interrupted. On the main thread. */
gk_status gk_channel_await_input(gk_channel_port *p, gk_error *err);

/* Waits, as gk_channel_await_input does, until the caller says that its
 * inputs passed its checks (gk_channel_inputs_checked). */
gk_status gk_channel_await_checked(gk_channel_port *p, gk_error *err);

/* A piece of the caller's offered inputs: `bytes` from `offset` into `local`. */
typedef struct {
  void *local;
  size_t offset, bytes;
} gk_channel_range;

/* Copies the ranges out of the caller's offered inputs (process_vm_readv, on
 * `threads` threads), after the token check (above). GK_ERR_INPUT when this process may not (Yama,
 * another user or namespace, this worker's GK_CHANNEL_DIRECT = 0): the
 * caller then shares the inputs through a segment instead. */
gk_status gk_channel_read_input(gk_channel_port *p, const gk_channel_range *ranges, size_t count,
                                int threads, gk_error *err);

/* A two-column matrix of `rows` rows at `remote` in the caller's memory
 * (column-major: a PCF's t, then its v), its columns copied to `first` and
 * `second`. */
typedef struct {
  uint64_t remote;
  size_t rows;
  double *first, *second;
} gk_channel_columns;

/* Copies the matrices out of the caller's memory as gk_channel_read_input
 * copies its ranges (the same permission rule and GK_ERR_INPUT), several
 * matrices per process_vm_readv, on `threads` threads. Their addresses come
 * from the offered inputs. */
gk_status gk_channel_read_columns(gk_channel_port *p, const gk_channel_columns *matrices,
                                  size_t count, int threads, gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
