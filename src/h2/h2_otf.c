/*
 * Matrix-free H2 products (h2_otf.h): the nodes and ranges made once at build,
 * the CPU product through reduce_cpu, and the storage choice. Host C, no R.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "h2/h2_otf.h"
#include "h2/h2_cheb.h"

/* Ranges of one block-sparse product: cluster c holds rows
 * [c * stride, c * stride + size(c)), pairs (row[b], col[b]) of the level. */
static gk_status make_ranges(h2_otf_product *p, int clusters, int stride, const int *sizes,
                             const h2_bsr *blocks, gk_error *err)
{
  int *cr = (int *) malloc((2 * (size_t) clusters + 1) * sizeof(int));
  if (!cr) return gk_fail(err, GK_ERR_NOMEM, "out of memory for the H2 block-sparse ranges");
  for (int c = 0; c < clusters; c++) {
    cr[2 * c] = c * stride;
    cr[2 * c + 1] = c * stride + (sizes ? sizes[c] : stride);
  }
  gk_status st = reduce_ranges_build(clusters, cr, clusters, cr, (size_t) blocks->n_blocks,
                                     blocks->row, blocks->col, &p->ranges, &p->ranges_storage,
                                     err);
  free(cr);
  if (st) return st;
  p->pairs = reduce_ranges_pairs(&p->ranges);
  return GK_OK;
}

static size_t ranges_bytes(int clusters, const h2_bsr *blocks)
{
  return (6 * (size_t) clusters + 4 * (size_t) blocks->n_blocks + 2) * sizeof(int);
}

gk_status h2_otf_build(const h2_tree *t, h2_otf **out, gk_error *err)
{
  *out = NULL;
  int k = t->rank;
  for (int l = 0; l <= t->depth; l++)
    if (t->level_rank[l] != k)
      return gk_fail(err, GK_ERR_INPUT, "an H2 matrix computed on the fly needs the Chebyshev "
                     "bases as built (rank %d on every level), not orthogonalized or compressed ones",
                     k);
  h2_otf *o = (h2_otf *) calloc(1, sizeof *o);
  if (!o) return gk_fail(err, GK_ERR_NOMEM, "out of memory for the on-the-fly H2 matrix");
  o->depth = t->depth;
  o->dim = t->dim;
  o->coupling = (h2_otf_product *) calloc((size_t) t->depth + 1, sizeof(h2_otf_product));
  if (!o->coupling) {
    free(o);
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for the on-the-fly H2 matrix");
  }
  h2_cheb cheb = h2_cheb_make(t->order);
  for (int l = t->top_level; l <= t->depth; l++) {
    const h2_bsr *b = &t->coupling[l];
    if (b->n_blocks == 0) continue;
    h2_otf_product *p = &o->coupling[l];
    int count = t->level_ptr[l + 1] - t->level_ptr[l];
    p->rows = (size_t) count * k;
    p->owned = (double *) malloc(p->rows * t->dim * sizeof(double) + 1);
    if (!p->owned) {
      h2_otf_free(o);
      return gk_fail(err, GK_ERR_NOMEM, "out of memory for the Chebyshev nodes of the on-the-fly "
                     "H2 matrix");
    }
    p->points = p->owned;
    // Row i * k + a: node a of the i-th cluster of the level (h2_coupling_entry's order).
    for (int i = 0; i < count; i++) {
      int v = t->level_ptr[l] + i;
      for (int a = 0; a < k; a++) {
        double x[H2_MAX_DIM];
        h2_box_node(&cheb, a, t->dim, t->center + v, t->half + v, t->n_nodes, x);
        for (int d = 0; d < t->dim; d++) p->owned[(size_t) i * k + a + d * p->rows] = x[d];
      }
    }
    if (make_ranges(p, count, k, NULL, b, err)) {
      h2_otf_free(o);
      return err->status;
    }
    o->host_bytes += p->rows * t->dim * sizeof(double) + ranges_bytes(count, b);
  }
  // Dense: the padded leaf slots; a leaf's cluster is its filled rows.
  o->dense.rows = (size_t) t->n_leaves * t->leaf_size;
  o->dense.points = t->leaf_points;
  if (make_ranges(&o->dense, t->n_leaves, t->leaf_size, t->leaf_count, &t->dense, err)) {
    h2_otf_free(o);
    return err->status;
  }
  o->host_bytes += ranges_bytes(t->n_leaves, &t->dense);
  *out = o;
  return GK_OK;
}

void h2_otf_free(h2_otf *o)
{
  if (!o) return;
  h2_otf_device_free(o);
  if (o->coupling)
    for (int l = 0; l <= o->depth; l++) {
      free(o->coupling[l].owned);
      free(o->coupling[l].ranges_storage);
    }
  free(o->coupling);
  free(o->dense.ranges_storage);
  free(o);
}

void h2_otf_pairs(const h2_otf *o, double *coupling, double *dense)
{
  double c = 0.0;
  for (int l = 0; l <= o->depth; l++) c += o->coupling[l].pairs;
  *coupling = c;
  *dense = o->dense.pairs;
}

gk_status h2_otf_cpu_product(const h2_otf *o, const h2_tree *t, int single, int threads,
                             int which, int level, const void *x, int ldx, void *y, int ldy,
                             int nrhs, gk_error *err)
{
  const h2_otf_product *p = which == H2_DENSE ? &o->dense : &o->coupling[level];
  size_t rows = p->rows;
  if (rows == 0 || nrhs == 0) return GK_OK;
  // The engine reads host doubles with leading dimension `rows`.
  double *b = (double *) malloc(rows * nrhs * sizeof(double));
  double *sum = (double *) malloc(rows * nrhs * sizeof(double));
  if (!b || !sum) {
    free(b);
    free(sum);
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for an on-the-fly H2 product");
  }
  for (int c = 0; c < nrhs; c++)
    for (size_t i = 0; i < rows; i++)
      b[i + c * rows] = single ? ((const float *) x)[i + (size_t) c * ldx]
                               : ((const double *) x)[i + (size_t) c * ldx];
  const double ones[H2_MAX_DIM] = {1.0, 1.0, 1.0};
  gk_reduce_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.kernel = t->kernel;
  spec.range = ones;   // the points are already scaled
  spec.reduction = GK_REDUCE_SUM;
  spec.ranges = &p->ranges;
  gk_reduce_operand pts = {p->points, NULL, 0, -1, rows, t->dim};
  gk_reduce_operand w = {b, NULL, 0, -1, rows, nrhs};
  gk_status st = reduce_cpu(&spec, &pts, &pts, &w, sum, NULL, threads, err);
  if (st == GK_OK) {
    double nugget = which == H2_DENSE ? t->nugget : 0.0;
    for (int c = 0; c < nrhs; c++)
      for (size_t i = 0; i < rows; i++) {
        double v = sum[i + c * rows] + nugget * b[i + c * rows];
        size_t at = i + (size_t) c * ldy;
        if (single) ((float *) y)[at] += (float) v;
        else ((double *) y)[at] += v;
      }
  }
  free(b);
  free(sum);
  return st;
}

gk_status h2_otf_refuse_export(gk_error *err)
{
  return gk_fail(err, GK_ERR_INPUT, "this H2 matrix is computed on the fly (storage = \"on_the_fly\"): "
                 "its coupling and dense blocks are not stored, so it cannot be orthogonalized or "
                 "compressed; build it with storage = \"stored\"");
}

/* ---- the storage choice -------------------------------------------------- */

/* Rates of the timing model. GPU: measured on an H100 (inst/bench/h2.R,
 * RESULTS.md, 2026-11-23): the stored HMV streams its blocks at about 2.5e12
 * B/s (40 GB in 15.7 ms at n = 2^20, 3D); the block-sparse products of the
 * on-the-fly form (clusters of 64 rows) evaluate 9.5e10 kernel pairs/s in
 * float64 and 1.55e11 in float32 at n = 2^20, far below the dense engine's
 * 5.3e11 / 3e12, plus about 0.1 ms per product (two per level) of launches
 * and synchronization. With these rates the stored form wins whenever it fits
 * (3.5x at 2^20, eta = 3). CPU: estimates for a few cores (stored: 5e9 B/s; a
 * kernel pair with an exp: 2e8/s). */
#define GPU_STORED_BYTES_PER_S 2.5e12
#define GPU_PAIRS_PER_S_DOUBLE 9.5e10
#define GPU_PAIRS_PER_S_SINGLE 1.55e11
#define GPU_MS_PER_PRODUCT 0.1
#define CPU_STORED_BYTES_PER_S 5.0e9
#define CPU_PAIRS_PER_S 2.0e8

int h2_otf_choose(const h2_tree *t, const h2_otf *o, int single, int gpu, double available,
                  double *ms_stored, double *ms_otf, int *reason)
{
  double el = single ? 4.0 : 8.0;
  double low = (double) (h2_basis_entries(t) + h2_transfer_entries(t)) * el;
  double blocks = (double) (h2_coupling_entries(t) + h2_dense_entries(t)) * el;
  double cpl, dense;
  h2_otf_pairs(o, &cpl, &dense);
  double bw = gpu ? GPU_STORED_BYTES_PER_S : CPU_STORED_BYTES_PER_S;
  double rate = gpu ? (single ? GPU_PAIRS_PER_S_SINGLE : GPU_PAIRS_PER_S_DOUBLE) : CPU_PAIRS_PER_S;
  *ms_stored = 1e3 * (low + blocks) / bw;
  int products = o->dense.rows > 0;
  for (int l = 0; l <= o->depth; l++) products += o->coupling[l].rows > 0;
  *ms_otf = 1e3 * (low / bw + (cpl + dense) / rate) + (gpu ? GPU_MS_PER_PRODUCT * products : 0.0);
  if (low + blocks > available) {
    *reason = H2_STORAGE_MEMORY;
    return 1;
  }
  *reason = H2_STORAGE_FASTER;
  return *ms_otf < *ms_stored;
}
