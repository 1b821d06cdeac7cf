/*
 * The H2 matrix-vector product (HMV), written once for both backends over
 * the batched operations of h2_ops (Section 4 of the paper):
 *   dense:      yp = D xp                                  (low-priority stream)
 *   upsweep:    xhat_leaf = U^T xp, xhat_parent = sum_c E_c^T xhat_c
 *   multiply:   yhat_l = S_l xhat_l, level by level (block-sparse rows)
 *   downsweep:  yhat_c += E_c yhat_parent, then yp += U yhat_leaf
 * Because the cluster tree is complete, the children of the nodes of a level
 * are every other node of the next level: each transfer phase is two strided
 * batched products (first child, second child) per level.
 */
#include "h2/h2.h"

#define AT(base, entries) ((void *) ((char *) (base) + (size_t) (entries) * ops->elsize))

gk_status h2_hmv(const h2_tree *t, const h2_ops *ops, const h2_data *data, const h2_work *w,
                 int nrhs, gk_error *err)
{
  int q = t->depth, k = t->rank, m = t->leaf_size;
  int ldp = t->n_leaves * m;   // padded vectors
  int ldh = t->n_nodes * k;    // xhat / yhat trees
  size_t kk = (size_t) k * k;
  void *ctx = ops->ctx;
  const int *lp = t->level_ptr;

  if (ops->fork(ctx, err)) return err->status;
  if (ops->zero(ctx, H2_STREAM_DENSE, w->yp, (size_t) ldp * nrhs, err)) return err->status;
  if (t->dense.n_blocks > 0 &&
      ops->bsr(ctx, H2_STREAM_DENSE, H2_DENSE, q, data->D, m, w->xp, ldp, w->yp, ldp, nrhs, err))
    return err->status;

  int top = t->top_level;
  if (top <= q) {
    int S = H2_STREAM_LOWRANK;
    if (ops->zero(ctx, S, w->yhat, (size_t) ldh * nrhs, err)) return err->status;
    // Upsweep: leaves, then each level from its two children.
    if (ops->gemm_strided(ctx, S, 1, k, nrhs, m, data->U, m, (size_t) m * k, w->xp, ldp,
                          (size_t) m, 0.0, AT(w->xhat, (size_t) lp[q] * k), ldh, (size_t) k,
                          t->n_leaves, err))
      return err->status;
    for (int l = q - 1; l >= top; l--) {
      int count = lp[l + 1] - lp[l];
      for (int c = 0; c < 2; c++) {
        size_t child = (size_t) lp[l + 1] + c;
        if (ops->gemm_strided(ctx, S, 1, k, nrhs, k, AT(data->E, child * kk), k, 2 * kk,
                              AT(w->xhat, child * k), ldh, 2 * (size_t) k, c ? 1.0 : 0.0,
                              AT(w->xhat, (size_t) lp[l] * k), ldh, (size_t) k, count, err))
          return err->status;
      }
    }
    // Tree multiply: every level's coupling blocks.
    for (int l = top; l <= q; l++) {
      if (t->coupling[l].n_blocks == 0) continue;
      if (ops->bsr(ctx, S, H2_COUPLING, l, AT(data->S, t->coupling_offset[l] * kk), k,
                   AT(w->xhat, (size_t) lp[l] * k), ldh, AT(w->yhat, (size_t) lp[l] * k), ldh,
                   nrhs, err))
        return err->status;
    }
    // Downsweep: push each level's partial sums to its children.
    for (int l = top + 1; l <= q; l++) {
      int count = lp[l] - lp[l - 1];
      for (int c = 0; c < 2; c++) {
        size_t child = (size_t) lp[l] + c;
        if (ops->gemm_strided(ctx, S, 0, k, nrhs, k, AT(data->E, child * kk), k, 2 * kk,
                              AT(w->yhat, (size_t) lp[l - 1] * k), ldh, (size_t) k, 1.0,
                              AT(w->yhat, child * k), ldh, 2 * (size_t) k, count, err))
          return err->status;
      }
    }
  }
  if (ops->join(ctx, err)) return err->status;
  // Leaf expansion into the dense result.
  if (top <= q &&
      ops->gemm_strided(ctx, H2_STREAM_LOWRANK, 0, m, nrhs, k, data->U, m, (size_t) m * k,
                        AT(w->yhat, (size_t) lp[q] * k), ldh, (size_t) k, 1.0, w->yp, ldp,
                        (size_t) m, t->n_leaves, err))
    return err->status;
  return GK_OK;
}
