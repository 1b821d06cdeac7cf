/*
 * What both backends of the H2 compression share (h2_compress.h): the ranks
 * of the orthogonal form, the schedules of the sweeps over a table of backend
 * operations (as h2_hmv.c does for the product), the error budget and the
 * rank choice of the truncation, and the flop model. Written once here so
 * that the CPU and the GPU visit the levels in the same order and choose the
 * same ranks from the same singular values.
 */
#include <stdlib.h>
#include <math.h>
#include <time.h>
#include "h2/h2_compress.h"
#include "device/gk_hooks.h"

double h2_seconds_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Model flop counts (LAPACK Working Note 41) for the GFLOP/s figures. */
double h2_qr_flops(double m, double n)
{
  return m >= n ? 2 * m * n * n - 2 * n * n * n / 3 : 2 * n * m * m - 2 * m * m * m / 3;
}
double h2_svd_flops(int rows, int cols)  /* singular values and left vectors */
{
  double a = rows >= cols ? rows : cols, b = rows >= cols ? cols : rows;
  return 4 * a * b * b + 8 * b * b * b;
}

void h2_orthogonal_ranks(const h2_tree *t, int *rank)
{
  int q = t->depth, top = t->top_level, m = t->leaf_size;
  for (int l = 0; l <= q; l++) rank[l] = t->level_rank[l];
  if (top > q) return;
  // An orthonormal basis has no more columns than rows: m at the leaves, and
  // the two children's columns stacked above.
  rank[q] = m < rank[q] ? m : rank[q];
  for (int l = q - 1; l >= 0; l--) {
    int stacked = 2 * rank[l + 1];
    rank[l] = l >= top ? (stacked < t->level_rank[l] ? stacked : t->level_rank[l]) : 1;
  }
}

static gk_status interrupted(gk_error *err)
{
  return gk_fail(err, GK_ERR_INTERRUPTED, "H2 compression interrupted");
}

gk_status h2_orthogonalize_upsweep(const h2_tree *t, const h2_level_ops *ops, gk_error *err)
{
  if (ops->leaves(ops->ctx, err)) return err->status;
  for (int l = t->depth - 1; l >= t->top_level; l--) {
    if (ops->level(ops->ctx, l, err)) return err->status;
    if (gk_interrupt_pending()) return interrupted(err);
  }
  return GK_OK;
}

gk_status h2_generate_downsweep(const h2_tree *t, const h2_level_ops *ops, gk_error *err)
{
  for (int l = t->top_level; l <= t->depth; l++) {
    if (ops->level(ops->ctx, l, err)) return err->status;
    if (gk_interrupt_pending()) return interrupted(err);
  }
  return GK_OK;
}

int h2_choose_rank(const double *sig, int nodes, int kmax, double budget, double *discarded)
{
  double tail = 0.0;
  int r = kmax;
  double *energy = (double *) calloc((size_t) kmax + 1, sizeof(double));
  if (!energy) { *discarded = 0.0; return kmax; }
  for (int i = 0; i < nodes; i++)
    for (int j = 0; j < kmax; j++) energy[j] += sig[(size_t) i * kmax + j] * sig[(size_t) i * kmax + j];
  while (r > 1 && tail + energy[r - 1] <= budget) tail += energy[--r];
  free(energy);
  *discarded = tail;
  return r;
}

/* The budget of discarded energy is (tol ||A||_F)^2 / 2, since the two-sided
 * projection at most doubles the one-sided error. It is shared evenly by the
 * levels, and what a level leaves unused passes to the next one up: so every
 * level may truncate, and the total never exceeds the budget. */
gk_status h2_truncate_upsweep(const h2_tree *t, double tol, const h2_truncation_ops *ops,
                              int *rank, int *rows, h2_compress_stats *st, gk_error *err)
{
  int q = t->depth, top = t->top_level, levels = q - top + 1;
  const double budget_all = 0.5 * (tol * st->norm_frobenius) * (tol * st->norm_frobenius);
  double carry = 0.0, discarded_total = 0.0;
  for (int l = q; l >= top; l--) {
    int nodes = 1 << l, kl = t->level_rank[l];
    // rows of the weighted basis: k_q at the leaves (U is orthonormal, so the
    // left singular vectors of U R^T are U times those of R^T), else the
    // children's new ranks stacked, 2 r_{l+1}.
    rows[l] = l == q ? kl : 2 * rank[l + 1];
    int kmax = rows[l] < kl ? rows[l] : kl;
    double *sig = (double *) malloc((size_t) nodes * kmax * sizeof(double) + 1);
    if (!sig) return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
    if (ops->weighted_svd(ops->ctx, l, rows[l], sig, err)) {
      free(sig);
      return err->status;
    }
    double discarded;
    rank[l] = h2_choose_rank(sig, nodes, kmax, budget_all / levels + carry, &discarded);
    free(sig);
    carry += budget_all / levels - discarded;
    discarded_total += discarded;
    if (ops->keep_rank(ops->ctx, l, rows[l], rank[l], err)) return err->status;
    if (gk_interrupt_pending()) return interrupted(err);
  }
  for (int l = 0; l < top; l++) rank[l] = 1;
  st->error_frobenius =
    st->norm_frobenius > 0 ? sqrt(2.0 * discarded_total) / st->norm_frobenius : 0.0;
  return GK_OK;
}
