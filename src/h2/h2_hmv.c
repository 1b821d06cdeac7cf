/*
 * The H2 matrix-vector product (HMV), written once for both backends over
 * the batched operations of h2_ops (Section 4 of the paper):
 *   dense:      yp = D xp                                  (low-priority stream)
 *   upsweep:    xhat_leaf = U^T xp, xhat_parent = sum_c E_c^T xhat_c
 *   multiply:   yhat_l = S_l xhat_l, level by level (block-sparse rows), or
 *               every level in one call (h2_ops.coupling_all_levels)
 *   downsweep:  yhat_c += E_c yhat_parent, then yp += U yhat_leaf
 * Because the cluster tree is complete, the children of parent p are nodes
 * 2p and 2p + 1 of the next level: each level of a transfer phase is one
 * h2_ops.transfer call over both children.
 */
#include "h2/h2.h"

#define AT(base, entries) ((void *) ((char *) (base) + (size_t) (entries) * ops->elsize))

static gk_status dense_product(const h2_tree *t, const h2_ops *ops, const h2_data *data,
                               const h2_work *w, int nrhs, gk_error *err)
{
  int m = t->leaf_size, ldp = t->n_leaves * m;
  if (t->dense.n_blocks == 0) return GK_OK;
  return ops->bsr(ops->ctx, H2_STREAM_DENSE, H2_DENSE, t->depth, data->D, m, w->xp, ldp, w->yp,
                  ldp, nrhs, err);
}

/* The nodes of level l above the leaves whose rows the product expands:
 * first .. end - 1 (every node of a whole tree). */
static void expanded_nodes(const h2_tree *t, int l, int *first, int *end)
{
  int shift = t->depth - l;
  int first_leaf = t->part_end_leaf ? t->part_first_leaf : 0;
  int end_leaf = t->part_end_leaf ? t->part_end_leaf : t->n_leaves;
  *first = first_leaf >> shift;
  *end = (end_leaf + (1 << shift) - 1) >> shift;
}

gk_status h2_hmv(const h2_tree *t, const h2_ops *ops, const h2_data *data, const h2_work *w,
                 int nrhs, gk_error *err)
{
  int q = t->depth, m = t->leaf_size;
  int ldp = t->n_leaves * m;          // padded vectors
  int ldh = (int) h2_hat_rows(t);     // xhat / yhat trees
  const int *k = t->level_rank;
  void *ctx = ops->ctx;
  const int *lp = t->level_ptr;

  if (ops->fork(ctx, err)) return err->status;
  if (ops->zero(ctx, H2_STREAM_DENSE, w->yp, (size_t) ldp * nrhs, err)) return err->status;
  if (!ops->dense_last && dense_product(t, ops, data, w, nrhs, err)) return err->status;

  int top = t->top_level;
  if (top <= q) {
    int S = H2_STREAM_LOWRANK, kq = k[q];
    if (ops->zero(ctx, S, w->yhat, (size_t) ldh * nrhs, err)) return err->status;
    // Upsweep: leaves, then each level from its two children.
    if (ops->gemm_strided(ctx, S, 1, kq, nrhs, m, data->U, m, (size_t) m * kq, w->xp, ldp,
                          (size_t) m, 0.0, AT(w->xhat, t->hat_ptr[q]), ldh, (size_t) kq,
                          t->n_leaves, err))
      return err->status;
    for (int l = q - 1; l >= top; l--) {
      if (ops->transfer(ctx, S, 1, k[l + 1], k[l], nrhs, AT(data->E, t->transfer_ptr[l + 1]),
                        AT(w->xhat, t->hat_ptr[l + 1]), AT(w->xhat, t->hat_ptr[l]), ldh,
                        lp[l + 1] - lp[l], err))
        return err->status;
    }
    // Tree multiply: every level's coupling blocks (top <= q: some level has
    // blocks), in one call where the backend can.
    if (ops->coupling_all_levels) {
      if (ops->bsr(ctx, S, H2_COUPLING, H2_ALL_LEVELS, data->S, 0, w->xhat, ldh, w->yhat, ldh,
                   nrhs, err))
        return err->status;
    } else {
      for (int l = top; l <= q; l++) {
        if (t->coupling[l].n_blocks == 0) continue;
        if (ops->bsr(ctx, S, H2_COUPLING, l, AT(data->S, t->coupling_ptr[l]), k[l],
                     AT(w->xhat, t->hat_ptr[l]), ldh, AT(w->yhat, t->hat_ptr[l]), ldh, nrhs, err))
          return err->status;
      }
    }
    // Downsweep: push each level's partial sums to its children (of the
    // nodes the product expands: a split matrix's part has no others).
    for (int l = top + 1; l <= q; l++) {
      int first, end;
      expanded_nodes(t, l - 1, &first, &end);
      size_t kc = (size_t) k[l], kp = (size_t) k[l - 1];
      if (ops->transfer(ctx, S, 0, k[l], k[l - 1], nrhs,
                        AT(data->E, t->transfer_ptr[l] + 2 * (size_t) first * kc * kp),
                        AT(w->yhat, t->hat_ptr[l - 1] + first * kp),
                        AT(w->yhat, t->hat_ptr[l] + 2 * (size_t) first * kc), ldh, end - first,
                        err))
        return err->status;
    }
  }
  if (ops->dense_last && dense_product(t, ops, data, w, nrhs, err)) return err->status;
  if (ops->join(ctx, err)) return err->status;
  // Leaf expansion into the dense result.
  int first, end;
  expanded_nodes(t, q, &first, &end);
  size_t kq = (size_t) k[q];
  if (top <= q && end > first &&
      ops->gemm_strided(ctx, H2_STREAM_LOWRANK, 0, m, nrhs, k[q],
                        AT(data->U, (size_t) first * m * kq), m, (size_t) m * kq,
                        AT(w->yhat, t->hat_ptr[q] + first * kq), ldh, kq, 1.0,
                        AT(w->yp, (size_t) first * m), ldp, (size_t) m, end - first, err))
    return err->status;
  return GK_OK;
}
