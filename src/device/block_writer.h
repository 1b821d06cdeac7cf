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
 * A band writer (gk_block_writer_band) stores the engine's block (i, j) at
 * (row0 + i, col0 + j) of a larger output of layout `layout`: a future worker
 * writes its band of rows straight into the shared result (R/distributed.R).
 * `kind` still says which entries the engine computes (a dense band below
 * the diagonal of a `dist`: kind GK_WRITE_DENSE, layout GK_WRITE_DIST);
 * entries the layout does not hold (i <= j of a `dist`) are skipped.
 *
 * A writer with `out_float` set writes float values there instead of `out`
 * (a float file, pcf_dist_file()).
 *
 * A writer with `make_out` set has no `out` yet: a GPU pipeline calls
 * make_out(make_out_arg) once on the calling thread as its GPUs start, and
 * its first write waits for that output (R's allocation of the result, a
 * collection first, then overlaps the first blocks). make_out returns NULL,
 * with err set, when it fails; the run then stops with that error.
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
#include "device/gk_error.h"

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
  gk_write_kind layout;   /* how `out` is laid out (kind, unless a band writer) */
  size_t row0, col0;      /* where the engine's (0, 0) is in `out`              */
  float *out_float;       /* not NULL: the output is float here, not `out`      */
  double *(*make_out)(void *arg, gk_error *err);   /* NULL: `out` is there */
  void *make_out_arg;
  int hands_over;   /* blocks handed to another process in place (gk_channel_writer):
                     * an engine's block buffers are memory it may map */
} gk_block_writer;

/* The first row of column j that kind `kind` holds: i > j of a `dist`,
 * i >= j of a symmetric matrix, every row of a dense one. */
static inline size_t gk_write_first_row(gk_write_kind kind, size_t j)
{
  return kind == GK_WRITE_DIST ? j + 1 : kind == GK_WRITE_SYMMETRIC ? j : 0;
}

/* A scattering writer of the given kind into out (n_rows rows). */
gk_block_writer gk_block_writer_make(gk_write_kind kind, double *out, size_t n_rows, int threads);

/* A writer of the entries an engine computes as `kind` into the band at
 * (row0, col0) of an output of `layout` with n_rows rows. */
gk_block_writer gk_block_writer_band(gk_write_kind kind, gk_write_kind layout, double *out,
                                     size_t n_rows, size_t row0, size_t col0, int threads);

/* A copy of writer w for one of `parts` threads that write at the same time
 * (the GPUs of a pipeline): its share of w's OpenMP threads, at least one. */
gk_block_writer gk_block_writer_share(const gk_block_writer *w, int parts);

/* src holds block->rows x block->cols values, column-major; single != 0 means
 * float, else double. */
void gk_block_write(const gk_block_writer *writer, const gk_block *block, const void *src,
                    int single);

/* Writes the `dist` vector of functions [first, first + m) (m (m - 1) / 2
 * doubles, R's layout) into a GK_WRITE_DIST writer's output: the diagonal
 * triangle of a band computed on its own. */
void gk_block_write_triangle(const gk_block_writer *writer, size_t first, size_t m,
                             const double *dist);

/* Where column c of a block goes: `count` values from index *src of the
 * block (column-major) to index *dst of the output, contiguous in both; 0
 * when the output holds none of it. Dense and `dist` layouts only (a
 * symmetric layout's mirror is not contiguous). */
size_t gk_block_column_span(const gk_block_writer *w, const gk_block *b, size_t c, size_t *dst,
                            size_t *src);

/* The block mode a writer kind needs from the scheduler. */
gk_block_mode gk_block_writer_mode(gk_write_kind kind);

#ifdef __cplusplus
}
#endif
#endif
