/*
 * Result writers of the block engine: scatter one block's results (a
 * column-major rows x cols buffer of float or double, as the device or CPU
 * produced it) straight into the caller's double output, with no copy of the
 * whole matrix. Blocks never overlap, so writers of different blocks may run
 * at the same time without locks. Pure host C.
 *
 *   GK_WRITE_DENSE      out is an n_rows x n_cols column-major matrix.
 *   GK_WRITE_DIST       out is R's `dist` vector of an n x n symmetric matrix:
 *                       entries i > j only, lower triangle by columns, at
 *                       j*n - j*(j+1)/2 + i - j - 1.
 *   GK_WRITE_SYMMETRIC  out is a full n x n matrix: entries i >= j are written
 *                       at (i, j) and mirrored to (j, i).
 * The writers read only the entries their kind needs, so a device kernel may
 * leave the others (above the diagonal) unwritten.
 *
 * A writer with a `reduce` callback stores nothing: each block goes to the
 * callback instead (e.g. running k-nearest lists), which may be called for
 * several blocks at once from different threads. `kind` then only says which
 * entries are computed (GK_WRITE_DIST: i > j of a lower-triangle plan).
 */
#ifndef GK_BLOCK_WRITER_H
#define GK_BLOCK_WRITER_H

#include <stddef.h>
#include "device/block_scheduler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GK_WRITE_DENSE = 0, GK_WRITE_DIST = 1, GK_WRITE_SYMMETRIC = 2 } gk_write_kind;

typedef struct {
  gk_write_kind kind;
  double *out;
  size_t n_rows;      /* rows of the output matrix (n for dist and symmetric) */
  int threads;        /* OpenMP threads for the scatter (<= 0: all)           */
  void (*reduce)(void *ctx, const gk_block *block, const void *src, int single);
  void *reduce_ctx;   /* NULL reduce: scatter into `out`                      */
} gk_block_writer;

/* A scattering writer of the given kind into out (n_rows rows). */
gk_block_writer gk_block_writer_make(gk_write_kind kind, double *out, size_t n_rows, int threads);

/* src holds block->rows x block->cols values, column-major; single != 0 means
 * float, else double. */
void gk_block_write(const gk_block_writer *writer, const gk_block *block, const void *src,
                    int single);

/* Writes the `dist` vector of functions [first, first + m) (m (m - 1) / 2
 * doubles, R's layout) into a GK_WRITE_DIST writer's output: the diagonal
 * triangle of a band computed on its own. */
void gk_block_write_triangle(const gk_block_writer *writer, size_t first, size_t m,
                             const double *dist);

/* The block mode a writer kind needs from the scheduler. */
gk_block_mode gk_block_writer_mode(gk_write_kind kind);

#ifdef __cplusplus
}
#endif
#endif
