/*
 * The block scheduler of the device layer: turns an n_rows x n_cols output
 * matrix and a budget (output elements per device) into a list of rectangular
 * blocks, largest first. Pure host C, function-type agnostic; the GPU pipeline
 * (block_pipeline.h) and the CPU engines walk the same list.
 *
 *   side = floor(sqrt(max_elements / split_hint)), at least min_side, but never
 *          more than floor(sqrt(max_elements)) (the budget wins over the floor)
 *          nor than max(n_rows, n_cols);
 *   rows and columns are cut into bands of `side` (the last band is the
 *   remainder, possibly shorter); every (row band, column band) pair is a block, except in
 *   GK_BLOCKS_LOWER mode (symmetric results) where blocks lying entirely above
 *   the diagonal (first column > last row) are dropped;
 *   blocks are sorted by their work, descending (ties: by position), so that
 *   several devices pulling from the list finish at about the same time: rows
 *   x cols, or rows (rows + 1) / 2 for a diagonal block of GK_BLOCKS_LOWER
 *   mode, of which the engines compute only the lower triangle.
 *
 * With row_start > 0 only rows [row_start, n_rows) are planned: a future
 * worker's band of a symmetric result (rows a..b against every column up to
 * b, lower triangle) in one plan, so one engine call with one pipeline fill
 * and drain instead of a triangle and a rectangle as two. Rows are cut from
 * row_start on, and columns at the same offsets (row_start + k side; the
 * first column band is the remainder of row_start), so that in
 * GK_BLOCKS_LOWER mode a block still lies on the diagonal with equal row
 * and column bands (the GPU kernel's diagonal tiles need that) or entirely
 * below it. row_start = 0 gives the plan of the whole matrix.
 *
 * A list's devices take their blocks from a gk_block_queue: the GPUs of one
 * process, or future workers of one machine (each planning the same list,
 * the queue in their result channel's shared memory), so that all of them
 * pull from one list, largest first, and finish together wherever one is
 * slower (its host's writes, a late start). Workers agree on the list by
 * its side: the first to plan sets it, the others plan with it.
 */
#ifndef GK_BLOCK_SCHEDULER_H
#define GK_BLOCK_SCHEDULER_H

#include <stddef.h>
#include "device/gk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GK_BLOCKS_FULL = 0, GK_BLOCKS_LOWER = 1 } gk_block_mode;

typedef struct {
  size_t row0, rows;   /* rows [row0, row0 + rows)    */
  size_t col0, cols;   /* columns [col0, col0 + cols) */
} gk_block;

typedef struct {
  size_t n_rows, n_cols;
  gk_block_mode mode;        /* GK_BLOCKS_LOWER needs n_rows == n_cols       */
  size_t max_elements;       /* output elements one block may hold (>= 1)    */
  size_t split_hint;         /* how many blocks the budget is split into     */
  size_t min_side;           /* occupancy floor for the side (0: none)       */
  size_t row_start;          /* first row planned (0: all; see above)        */
  size_t side;               /* the band side, agreed on a shared queue (0: the rules above) */
} gk_block_plan_config;

/* The next block of a list to take, for the devices running it. Lives in
 * memory every taker sees (the pipeline's state, a shared segment): zeroed
 * before the first takes, advanced atomically, lock-free across processes. */
typedef struct {
  size_t next;    /* index of the next block to take                  */
  size_t side;    /* a shared list's band side (0: nobody planned yet) */
  size_t count;   /* a shared list's length, once planned (0: not yet) */
} gk_block_queue;

/* The index of the next block (>= the list's count: none left). */
size_t gk_block_take(gk_block_queue *q);

/* Closes the list: every later take returns past its end, so that its
 * takers stop after the blocks they hold (a call that stopped). */
void gk_block_close(gk_block_queue *q);

/* 0 when the shared list was planned and every block of it is taken (or
 * it was closed): a taker that comes now need not read its inputs. */
int gk_block_left(const gk_block_queue *q);

/* The index the next take returns, as far as this taker knows (others may
 * take it first): where to begin host work ahead of the first take. */
size_t gk_block_next(const gk_block_queue *q);

/* The side to plan a shared list with: `own` (gk_block_side of this
 * taker's config) when it is the first, else the first one's; 0 when that
 * side's blocks exceed this taker's max_elements (it then takes none). */
size_t gk_block_agree_side(gk_block_queue *q, size_t own, size_t max_elements);

/* The band side length the rules above give. */
size_t gk_block_side(const gk_block_plan_config *cfg);

/* Fills *blocks (malloc'd; free() it) and *count. An empty matrix gives no blocks. */
gk_status gk_block_plan(const gk_block_plan_config *cfg, gk_block **blocks, size_t *count,
                        gk_error *err);

/* gk_block_plan of a list whose blocks are taken from `queue` (NULL: the
 * caller's own, planned by the rules): on a shared queue with the side its
 * takers agree on (gk_block_agree_side), its length then recorded for
 * takers that come late (gk_block_left). *taking (may be NULL) is 0 where
 * this taker cannot hold the agreed side: no blocks, the others take them. */
gk_status gk_block_plan_queued(const gk_block_plan_config *cfg, gk_block_queue *queue,
                               gk_block **blocks, size_t *count, int *taking, gk_error *err);

/* Largest rows, columns and rows x cols over a block list (for sizing buffers). */
void gk_block_extents(const gk_block *blocks, size_t count, size_t *max_rows,
                      size_t *max_cols, size_t *max_elements);

#ifdef __cplusplus
}
#endif
#endif
