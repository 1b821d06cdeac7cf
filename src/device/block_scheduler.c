#include <math.h>
#include <stdlib.h>
#include "device/block_scheduler.h"

size_t gk_block_side(const gk_block_plan_config *cfg)
{
  size_t longest = cfg->n_rows > cfg->n_cols ? cfg->n_rows : cfg->n_cols;
  if (cfg->side) return cfg->side < longest || !longest ? cfg->side : longest;
  size_t hint = cfg->split_hint ? cfg->split_hint : 1;
  size_t budget = cfg->max_elements ? cfg->max_elements : 1;
  size_t side = (size_t) floor(sqrt((double) (budget / hint)));
  size_t ceiling = (size_t) floor(sqrt((double) budget));
  if (side < cfg->min_side) side = cfg->min_side;
  if (side > ceiling) side = ceiling;
  if (side > longest) side = longest;
  return side ? side : 1;
}

size_t gk_block_take(gk_block_queue *q)
{
  return __atomic_fetch_add(&q->next, 1, __ATOMIC_RELAXED);
}

void gk_block_close(gk_block_queue *q)
{
  /* Far past any list, and far from wrapping around however many take after it. */
  __atomic_store_n(&q->next, (size_t) -1 / 2, __ATOMIC_RELAXED);
}

int gk_block_left(const gk_block_queue *q)
{
  size_t count = __atomic_load_n(&q->count, __ATOMIC_ACQUIRE);
  return !count || __atomic_load_n(&q->next, __ATOMIC_RELAXED) < count;
}

size_t gk_block_next(const gk_block_queue *q)
{
  return __atomic_load_n(&q->next, __ATOMIC_RELAXED);
}

size_t gk_block_agree_side(gk_block_queue *q, size_t own, size_t max_elements)
{
  size_t agreed = 0;
  if (__atomic_compare_exchange_n(&q->side, &agreed, own, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return own;
  return agreed <= max_elements / agreed ? agreed : 0;
}

/* Bands of [from, n) cut at origin + k side (from <= origin <= n): a first
 * band of the remainder (origin - from) mod side where that is not 0, then
 * bands of side, the last one the remainder (so no block is larger than
 * side x side, which the budget allows). */
typedef struct {
  size_t from, n, side, lead;
} band_cuts;

static band_cuts cuts_of(size_t from, size_t n, size_t side, size_t origin)
{
  band_cuts c = {from, n, side, (origin - from) % side};
  return c;
}

static size_t band_count(const band_cuts *c)
{
  if (c->from >= c->n) return 0;
  return (c->lead > 0) + (c->n - c->from - c->lead + c->side - 1) / c->side;
}

static void band(const band_cuts *c, size_t b, size_t *first, size_t *len)
{
  if (c->lead > 0 && b == 0) {
    *first = c->from;
    *len = c->lead;
    return;
  }
  *first = c->from + c->lead + (b - (c->lead > 0)) * c->side;
  *len = c->n - *first < c->side ? c->n - *first : c->side;
}

/* A block's work: its entries, half of them (and the diagonal) for a block on
 * the diagonal of a lower-triangle plan, where only pairs i >= j are computed
 * (block_scheduler.h). */
typedef struct {
  size_t work;
  gk_block block;
} weighted_block;

static size_t block_work(const gk_block *b, gk_block_mode mode)
{
  if (mode == GK_BLOCKS_LOWER && b->row0 == b->col0) return b->rows * (b->rows + 1) / 2;
  return b->rows * b->cols;
}

static int by_work_descending(const void *pa, const void *pb)
{
  const weighted_block *a = (const weighted_block *) pa, *b = (const weighted_block *) pb;
  if (a->work != b->work) return a->work > b->work ? -1 : 1;
  if (a->block.row0 != b->block.row0) return a->block.row0 < b->block.row0 ? -1 : 1;
  if (a->block.col0 != b->block.col0) return a->block.col0 < b->block.col0 ? -1 : 1;
  return 0;
}

gk_status gk_block_plan(const gk_block_plan_config *cfg, gk_block **blocks, size_t *count,
                        gk_error *err)
{
  *blocks = NULL;
  *count = 0;
  if (cfg->mode == GK_BLOCKS_LOWER && cfg->n_rows != cfg->n_cols)
    return gk_fail(err, GK_ERR_INTERNAL, "lower-triangle block plan of a non-square matrix");
  if (cfg->row_start > cfg->n_rows)
    return gk_fail(err, GK_ERR_INTERNAL, "block plan starting past its last row");
  if (cfg->n_rows == 0 || cfg->n_cols == 0) return GK_OK;
  size_t side = gk_block_side(cfg);
  /* Columns cut at the rows' offsets: row_start is within them (or at their end). */
  size_t origin = cfg->row_start < cfg->n_cols ? cfg->row_start : cfg->n_cols;
  band_cuts rc = cuts_of(cfg->row_start, cfg->n_rows, side, cfg->row_start),
            cc = cuts_of(0, cfg->n_cols, side, origin);
  size_t row_bands = band_count(&rc), col_bands = band_count(&cc);
  if (!row_bands) return GK_OK;
  weighted_block *list = (weighted_block *) malloc(row_bands * col_bands * sizeof(weighted_block));
  if (!list) return gk_fail(err, GK_ERR_NOMEM, "could not allocate the block list");
  size_t k = 0;
  for (size_t rb = 0; rb < row_bands; rb++) {
    for (size_t cb = 0; cb < col_bands; cb++) {
      gk_block b;
      band(&rc, rb, &b.row0, &b.rows);
      band(&cc, cb, &b.col0, &b.cols);
      if (cfg->mode == GK_BLOCKS_LOWER && b.col0 > b.row0 + b.rows - 1) continue;
      list[k].work = block_work(&b, cfg->mode);
      list[k++].block = b;
    }
  }
  qsort(list, k, sizeof(weighted_block), by_work_descending);
  /* The blocks alone, in place (a gk_block is the smaller; each is read
   * before its place is written). */
  gk_block *out = (gk_block *) list;
  for (size_t q = 0; q < k; q++) {
    gk_block b = list[q].block;
    out[q] = b;
  }
  *blocks = out;
  *count = k;
  return GK_OK;
}

gk_status gk_block_plan_queued(const gk_block_plan_config *cfg, gk_block_queue *queue,
                               gk_block **blocks, size_t *count, int *taking, gk_error *err)
{
  gk_block_plan_config agreed = *cfg;
  *blocks = NULL;
  *count = 0;
  if (taking) *taking = 1;
  if (queue) {
    agreed.side = gk_block_agree_side(queue, gk_block_side(cfg), cfg->max_elements);
    if (!agreed.side) {
      if (taking) *taking = 0;
      return GK_OK;
    }
  }
  if (gk_block_plan(&agreed, blocks, count, err)) return err->status;
  /* Every planner stores the same length: all plan the same list. */
  if (queue) __atomic_store_n(&queue->count, *count, __ATOMIC_RELEASE);
  return GK_OK;
}

void gk_block_extents(const gk_block *blocks, size_t count, size_t *max_rows,
                      size_t *max_cols, size_t *max_elements)
{
  *max_rows = *max_cols = *max_elements = 0;
  for (size_t k = 0; k < count; k++) {
    if (blocks[k].rows > *max_rows) *max_rows = blocks[k].rows;
    if (blocks[k].cols > *max_cols) *max_cols = blocks[k].cols;
    if (blocks[k].rows * blocks[k].cols > *max_elements)
      *max_elements = blocks[k].rows * blocks[k].cols;
  }
}
