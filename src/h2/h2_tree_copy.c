/*
 * Copies of the H2 structure (h2.h): a deep copy, for the orthogonalization
 * and compression that give a matrix new ranks, and a copy for another
 * Chebyshev order, for h2_matrix(tol = )'s search, which builds one set of
 * points at several orders (h2_tree_for_order).
 */
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
