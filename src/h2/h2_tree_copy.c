/*
 * Copies of the H2 structure (h2.h): a deep copy, for the orthogonalization
 * and compression that give a matrix new ranks, and a copy for another
 * Chebyshev order, for h2_matrix(tol = )'s search, which builds one set of
 * points at several orders (h2_tree_for_order).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "h2/h2.h"

static gk_status copy_ints(int **dst, const int *src, size_t count, gk_error *err)
{
  *dst = (int *) malloc((count ? count : 1) * sizeof(int));
  if (!*dst) return gk_fail(err, GK_ERR_NOMEM, "out of host memory copying the H2 tree");
  if (count) memcpy(*dst, src, count * sizeof(int));
  return GK_OK;
}

static gk_status copy_bytes(void **dst, const void *src, size_t bytes, gk_error *err)
{
  *dst = malloc(bytes ? bytes : 1);
  if (!*dst) return gk_fail(err, GK_ERR_NOMEM, "out of host memory copying the H2 tree");
  if (bytes) memcpy(*dst, src, bytes);
  return GK_OK;
}

static gk_status bsr_copy(h2_bsr *d, const h2_bsr *s, gk_error *err)
{
  *d = *s;
  d->row = d->col = d->slot_ptr = d->row_ptr = d->row_blocks = NULL;
  if (copy_ints(&d->row, s->row, s->n_blocks, err) ||
      copy_ints(&d->col, s->col, s->n_blocks, err) ||
      copy_ints(&d->slot_ptr, s->slot_ptr, (size_t) s->n_slots + 1, err) ||
      copy_ints(&d->row_ptr, s->row_ptr, (size_t) s->n_rows + 1, err) ||
      copy_ints(&d->row_blocks, s->row_blocks, s->n_blocks, err))
    return err->status;
  return GK_OK;
}

gk_status h2_tree_copy(h2_tree *d, const h2_tree *s, gk_error *err)
{
  int q = s->depth, nn = s->n_nodes;
  size_t rows = (size_t) s->n_leaves * s->leaf_size;
  *d = *s;
  d->level_ptr = d->head = d->next = d->parent = d->node_start = d->node_count = NULL;
  d->slot_of_point = d->leaf_count = d->level_rank = NULL;
  d->center = d->half = d->leaf_points = NULL;
  d->coupling = NULL;
  d->coupling_offset = d->transfer_ptr = d->coupling_ptr = d->hat_ptr = NULL;
  memset(&d->dense, 0, sizeof d->dense);
  if (copy_ints(&d->level_ptr, s->level_ptr, (size_t) q + 2, err) ||
      copy_ints(&d->head, s->head, nn, err) || copy_ints(&d->next, s->next, nn, err) ||
      copy_ints(&d->parent, s->parent, nn, err) ||
      copy_ints(&d->node_start, s->node_start, nn, err) ||
      copy_ints(&d->node_count, s->node_count, nn, err) ||
      copy_ints(&d->slot_of_point, s->slot_of_point, s->n, err) ||
      copy_ints(&d->leaf_count, s->leaf_count, s->n_leaves, err) ||
      copy_ints(&d->level_rank, s->level_rank, (size_t) q + 1, err) ||
      copy_bytes((void **) &d->center, s->center, (size_t) nn * s->dim * sizeof(double), err) ||
      copy_bytes((void **) &d->half, s->half, (size_t) nn * s->dim * sizeof(double), err) ||
      copy_bytes((void **) &d->leaf_points, s->leaf_points, rows * s->dim * sizeof(double), err) ||
      copy_bytes((void **) &d->coupling_offset, s->coupling_offset, (q + 2) * sizeof(size_t), err) ||
      copy_bytes((void **) &d->transfer_ptr, s->transfer_ptr, (q + 2) * sizeof(size_t), err) ||
      copy_bytes((void **) &d->coupling_ptr, s->coupling_ptr, (q + 2) * sizeof(size_t), err) ||
      copy_bytes((void **) &d->hat_ptr, s->hat_ptr, (q + 2) * sizeof(size_t), err) ||
      bsr_copy(&d->dense, &s->dense, err))
    goto fail;
  d->coupling = (h2_bsr *) calloc((size_t) q + 1, sizeof(h2_bsr));
  if (!d->coupling) {
    gk_fail(err, GK_ERR_NOMEM, "out of host memory copying the H2 tree");
    goto fail;
  }
  for (int l = 0; l <= q; l++)
    if (bsr_copy(&d->coupling[l], &s->coupling[l], err)) goto fail;
  return GK_OK;
fail:
  h2_tree_free(d);
  return err->status;
}

gk_status h2_tree_for_order(h2_tree *d, const h2_tree *s, int order, double nugget, gk_error *err)
{
  /* Nothing h2_tree_build makes depends on the order but the ranks and the
   * offsets that follow from them (the clusters, boxes, leaf slots and block
   * lists are those of the points, leaf_size, eta and kernel): a copy with
   * rank order^dim on every level is the tree a build at `order` makes, to
   * the bit, without its clustering and dual traversal. */
  memset(d, 0, sizeof *d);
  if (order < 1 || order > 16)
    return gk_fail(err, GK_ERR_INPUT, "invalid H2 parameters (order = %d)", order);
  h2_tree sized = *s;   // the size check of the build, at this order's rank
  sized.order = order;
  sized.rank = order * order * (s->dim == 3 ? order : 1);
  if (h2_tree_check_size(&sized, err) || h2_tree_copy(d, s, err)) return err->status;
  d->order = sized.order;
  d->rank = sized.rank;
  d->nugget = nugget;
  for (int l = 0; l <= d->depth; l++) d->level_rank[l] = d->rank;
  h2_tree_set_ranks(d, d->level_rank);
  return GK_OK;
}

/* Keeps the blocks of b whose row is in [row_lo, row_hi): whole rows, so that
 * slot t still holds the t-th block of every row kept, and the storage
 * order is b's with the other rows' blocks left out. */
static gk_status bsr_keep_rows(h2_bsr *b, int row_lo, int row_hi, gk_error *err)
{
  int *index = (int *) malloc(((size_t) b->n_blocks + 1) * sizeof(int));
  if (!index) return gk_fail(err, GK_ERR_NOMEM, "out of host memory splitting the H2 tree");
  int kept = 0, slots = 0;
  for (int t = 0; t < b->n_slots; t++) {
    int first = kept;
    for (int s = b->slot_ptr[t]; s < b->slot_ptr[t + 1]; s++) {
      int keep = b->row[s] >= row_lo && b->row[s] < row_hi;
      index[s] = keep ? kept : -1;
      if (keep) {
        b->row[kept] = b->row[s];
        b->col[kept] = b->col[s];
        kept++;
      }
    }
    b->slot_ptr[t] = first;
    if (kept > first) slots = t + 1;
  }
  b->slot_ptr[slots] = kept;
  int at = 0;
  for (int r = 0; r < b->n_rows; r++) {
    int from = b->row_ptr[r], to = b->row_ptr[r + 1];
    b->row_ptr[r] = at;
    if (r >= row_lo && r < row_hi)
      for (int e = from; e < to; e++) b->row_blocks[at++] = index[b->row_blocks[e]];
  }
  b->row_ptr[b->n_rows] = at;
  b->n_blocks = kept;
  b->n_slots = slots;
  free(index);
  return GK_OK;
}

gk_status h2_tree_restrict(h2_tree *d, const h2_tree *s, int first_leaf, int end_leaf,
                           gk_error *err)
{
  if (h2_tree_copy(d, s, err)) return err->status;
  int q = d->depth;
  for (int l = 0; l <= q; l++) {
    // the nodes of level l whose first leaf is in the range
    int shift = q - l, lo = (first_leaf + (1 << shift) - 1) >> shift;
    int hi = (end_leaf + (1 << shift) - 1) >> shift;
    if (bsr_keep_rows(&d->coupling[l], lo, hi, err)) goto fail;
    d->coupling_offset[l + 1] = d->coupling_offset[l] + (size_t) d->coupling[l].n_blocks;
  }
  if (bsr_keep_rows(&d->dense, first_leaf, end_leaf, err)) goto fail;
  d->part_first_leaf = first_leaf;
  d->part_end_leaf = end_leaf;
  h2_tree_set_ranks(d, d->level_rank);
  return GK_OK;
fail:
  h2_tree_free(d);
  return err->status;
}

int h2_tree_split_leaves(const h2_tree *t, int parts, int *bounds)
{
  // The cut level: the top coupling level (the leaves when there is none).
  // Its nodes and those below lie within one part, and the nodes above have
  // no coupling blocks, so every block's rows are in one part.
  int q = t->depth, level = t->top_level <= q ? t->top_level : q;
  int nodes = 1 << level, shift = q - level;
  if (parts > nodes) parts = nodes;
  // before[i]: the work of the nodes before node i
  double *before = (double *) calloc((size_t) nodes + 1, sizeof(double));
  bounds[0] = 0;
  bounds[parts] = t->n_leaves;
  if (!before) {   // out of memory for the weights: equal node counts
    for (int p = 1; p < parts; p++) bounds[p] = (int) ((long long) nodes * p / parts) << shift;
    return parts;
  }
  // A block's stored entries count for its row node's cut-level ancestor.
  double m = t->leaf_size;
  for (int e = 0; e < t->dense.n_blocks; e++) before[(t->dense.row[e] >> shift) + 1] += m * m;
  for (int l = level; l <= q; l++) {
    double k = t->level_rank[l];
    for (int e = 0; e < t->coupling[l].n_blocks; e++)
      before[(t->coupling[l].row[e] >> (l - level)) + 1] += k * k;
  }
  for (int i = 0; i < nodes; i++) before[i + 1] += before[i];
  // Each cut at the node boundary nearest its share of the work, leaving
  // every part at least one node.
  int cut = 0;
  for (int p = 1; p < parts; p++) {
    double share = before[nodes] * p / parts;
    int best = cut + 1;
    for (int b = best + 1; b <= nodes - (parts - p); b++)
      if (fabs(before[b] - share) < fabs(before[best] - share)) best = b;
    bounds[p] = best << shift;
    cut = best;
  }
  free(before);
  return parts;
}
