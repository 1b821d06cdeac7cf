/*
 * Matrix-free H2 products (h2_otf.h): the nodes and ranges made once at build,
 * the CPU product through reduce_cpu, and the storage choice. Host C, no R.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "h2/h2_otf.h"
#include "h2/h2_cheb.h"

/* The ranges of product p: `clusters` clusters of its rows (cr: start, end
 * of each, sorted) and the kept cluster pairs (pair_row[b], pair_col[b]). */
static gk_status make_ranges(h2_otf_product *p, int clusters, const int *cr, size_t npairs,
                             const int *pair_row, const int *pair_col, gk_error *err)
{
  gk_status st = reduce_ranges_build(clusters, cr, clusters, cr, npairs, pair_row, pair_col,
                                     &p->ranges, &p->ranges_storage, err);
  if (st) return st;
  // The symmetric GPU sums rely on it (the tree's lists are symmetric by
  // construction): checked once here rather than in every product.
  if (reduce_ranges_check_symmetric(&p->ranges, err)) {
    char why[GK_MESSAGE_SIZE];
    memcpy(why, err->message, sizeof why);
    return gk_fail(err, GK_ERR_INTERNAL, "the on-the-fly H2 block lists are not symmetric (%s)", why);
  }
  p->pairs = reduce_ranges_pairs(&p->ranges);
  p->pairs_symmetric = reduce_ranges_pairs_symmetric(&p->ranges);
  return GK_OK;
}

static size_t ranges_bytes(int clusters, size_t pairs)
{
  return (6 * (size_t) clusters + 4 * pairs + 2) * sizeof(int);
}

static gk_status no_memory(gk_error *err)
{
  return gk_fail(err, GK_ERR_NOMEM, "out of memory for the on-the-fly H2 matrix");
}

/* The coupling product of every level: the Chebyshev nodes of all nodes in
 * the xhat order, one cluster per node, each level's admissible pairs. */
static gk_status build_coupling(const h2_tree *t, h2_otf_product *p, size_t *bytes,
                                gk_error *err)
{
  int k = t->rank, nodes = t->n_nodes, dim = t->dim;
  size_t npairs = t->coupling_offset[t->depth + 1];
  p->rows = h2_hat_rows(t);
  p->owned = (double *) malloc(p->rows * dim * sizeof(double) + 1);
  int *cr = (int *) malloc((2 * (size_t) nodes + 1) * sizeof(int));
  int *pr = (int *) malloc((2 * npairs + 1) * sizeof(int));
  if (!p->owned || !cr || !pr) {
    free(cr);
    free(pr);
    return no_memory(err);
  }
  p->points = p->owned;
  h2_cheb cheb = h2_cheb_make(t->order);
  for (int l = 0; l <= t->depth; l++)
    for (int v = t->level_ptr[l]; v < t->level_ptr[l + 1]; v++) {
      // Rows of node v: the HMV's xhat rows of it (h2_tree_set_ranks).
      size_t r0 = t->hat_ptr[l] + (size_t) (v - t->level_ptr[l]) * k;
      cr[2 * v] = (int) r0;
      cr[2 * v + 1] = (int) r0 + k;
      // Row r0 + a: node a of the cluster (h2_coupling_entry's order).
      for (int a = 0; a < k; a++) {
        double x[H2_MAX_DIM];
        h2_box_node(&cheb, a, dim, t->center + v, t->half + v, nodes, x);
        for (int d = 0; d < dim; d++) p->owned[r0 + a + d * p->rows] = x[d];
      }
    }
  int *pc = pr + npairs;
  for (int l = t->top_level; l <= t->depth; l++) {
    const h2_bsr *b = &t->coupling[l];
    size_t at = t->coupling_offset[l];
    for (int s = 0; s < b->n_blocks; s++) {
      pr[at + s] = t->level_ptr[l] + b->row[s];
      pc[at + s] = t->level_ptr[l] + b->col[s];
    }
  }
  gk_status st = make_ranges(p, nodes, cr, npairs, pr, pc, err);
  free(cr);
  free(pr);
  *bytes += p->rows * dim * sizeof(double) + ranges_bytes(nodes, npairs);
  return st;
}

/* The dense product: the padded leaf slots; a leaf's cluster is its filled rows. */
static gk_status build_dense(const h2_tree *t, h2_otf_product *p, size_t *bytes, gk_error *err)
{
  int leaves = t->n_leaves, m = t->leaf_size;
  int *cr = (int *) malloc((2 * (size_t) leaves + 1) * sizeof(int));
  if (!cr) return no_memory(err);
  for (int c = 0; c < leaves; c++) {
    cr[2 * c] = c * m;
    cr[2 * c + 1] = c * m + t->leaf_count[c];
  }
  p->rows = (size_t) leaves * m;
  p->points = t->leaf_points;
  gk_status st = make_ranges(p, leaves, cr, (size_t) t->dense.n_blocks, t->dense.row,
                             t->dense.col, err);
  free(cr);
  *bytes += ranges_bytes(leaves, (size_t) t->dense.n_blocks);
  return st;
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
  // The engine's ranges are ints (so are the HMV's leading dimensions).
  if (h2_hat_rows(t) > INT_MAX || (size_t) t->n_leaves * t->leaf_size > INT_MAX)
    return gk_fail(err, GK_ERR_INPUT, "this H2 matrix is too large to be computed on the fly "
                   "(%.0f rows of Chebyshev nodes, at most %d); use a smaller order or larger leaves",
                   (double) h2_hat_rows(t), INT_MAX);
  h2_otf *o = (h2_otf *) calloc(1, sizeof *o);
  if (!o) return no_memory(err);
  o->depth = t->depth;
  o->dim = t->dim;
  o->couplings_on_the_fly = 1;
  if ((t->top_level <= t->depth && build_coupling(t, &o->coupling, &o->host_bytes, err)) ||
      build_dense(t, &o->dense, &o->host_bytes, err)) {
    h2_otf_free(o);
    return err->status;
  }
  *out = o;
  return GK_OK;
}

gk_status h2_otf_build_dense(const h2_tree *t, h2_otf **out, gk_error *err)
{
  *out = NULL;
  // The ranks do not matter (the couplings are stored); the leaf slots are
  // the engine's rows, ints.
  if ((size_t) t->n_leaves * t->leaf_size > INT_MAX)
    return gk_fail(err, GK_ERR_INPUT, "this H2 matrix is too large for its dense blocks to be "
                   "computed on the fly (%.0f leaf slots, at most %d)",
                   (double) t->n_leaves * t->leaf_size, INT_MAX);
  h2_otf *o = (h2_otf *) calloc(1, sizeof *o);   // the coupling product empty: rows 0
  if (!o) return no_memory(err);
  o->depth = t->depth;
  o->dim = t->dim;
  o->couplings_on_the_fly = 0;
  if (build_dense(t, &o->dense, &o->host_bytes, err)) {
    h2_otf_free(o);
    return err->status;
  }
  *out = o;
  return GK_OK;
}

void h2_otf_free(h2_otf *o)
{
  if (!o) return;
  h2_otf_device_free(o);
  free(o->coupling.owned);
  free(o->coupling.ranges_storage);
  free(o->dense.ranges_storage);
  free(o);
}

void h2_otf_pairs(const h2_otf *o, int gpu, double *coupling, double *dense)
{
  *coupling = gpu ? o->coupling.pairs_symmetric : o->coupling.pairs;
  *dense = gpu ? o->dense.pairs_symmetric : o->dense.pairs;
}

gk_status h2_otf_cpu_product(const h2_otf *o, const h2_tree *t, int single, int threads,
                             int which, const void *x, int ldx, void *y, int ldy, int nrhs,
                             gk_error *err)
{
  const h2_otf_product *p = which == H2_DENSE ? &o->dense : &o->coupling;
  size_t rows = p->rows;
  if (rows == 0 || nrhs == 0) return GK_OK;
  // The engine reads host doubles with leading dimension `rows`: x itself
  // when it is so (the HMV's), else a copy.
  int direct = !single && (size_t) ldx == rows;
  double *b = direct ? NULL : (double *) malloc(rows * nrhs * sizeof(double));
  double *sum = (double *) malloc(rows * nrhs * sizeof(double));
  if ((!direct && !b) || !sum) {
    free(b);
    free(sum);
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for an on-the-fly H2 product");
  }
  for (int c = 0; !direct && c < nrhs; c++)
    for (size_t i = 0; i < rows; i++)
      b[i + c * rows] = single ? ((const float *) x)[i + (size_t) c * ldx]
                               : ((const double *) x)[i + (size_t) c * ldx];
  const double *w_host = direct ? (const double *) x : b;
  const double ones[H2_MAX_DIM] = {1.0, 1.0, 1.0};
  gk_reduce_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.kernel = t->kernel;
  spec.range = ones;   // the points are already scaled
  spec.reduction = GK_REDUCE_SUM;
  spec.ranges = &p->ranges;   // symmetric (make_ranges): the CPU engine evaluates every pair
  gk_reduce_operand pts = {p->points, NULL, 0, -1, rows, t->dim};
  gk_reduce_operand w = {w_host, NULL, 0, -1, rows, nrhs};
  gk_status st = reduce_cpu(&spec, &pts, &pts, &w, sum, NULL, threads, err);
  if (st == GK_OK) {
    // Only the dense phase has a nugget; the coupling's x has rows the HMV
    // never fills (levels above the top), so they are not read here.
    double nugget = which == H2_DENSE ? t->nugget : 0.0;
    for (int c = 0; c < nrhs; c++)
      for (size_t i = 0; i < rows; i++) {
        double v = sum[i + c * rows];
        if (nugget != 0.0) v += nugget * w_host[i + c * rows];
        size_t at = i + (size_t) c * ldy;
        if (single) ((float *) y)[at] += (float) v;
        else ((double *) y)[at] += v;
      }
  }
  free(b);
  free(sum);
  return st;
}

/* ---- the storage choice -------------------------------------------------- */

/* The rates of the storage model (h2_otf_choose): a product of the stored
 * form streams its blocks from memory, one of the on-the-fly form evaluates
 * kernel pairs. The GPU's are an H100's in float64 and float32, measured by
 * inst/bench/h2.R (a stored product, and on-the-fly products at two etas with
 * clusters of 64 rows, the exponential kernel and kept plans); the CPU's are
 * estimates for a few cores. Only their ratios matter: which form is faster,
 * not how fast. Not tunables: a wrong rate picks the slower form, never a
 * wrong result, and the user can ask for a form. */

/* Bytes per second the stored HMV streams (its blocks, read once). */
#define GPU_STORED_BYTES_PER_S 2.5e12
#define CPU_STORED_BYTES_PER_S 5.0e9
/* Kernel pairs per second of the block-sparse on-the-fly products when every
 * pair is evaluated (one-way: each pair adds to its row only). */
#define GPU_PAIRS_PER_S_DOUBLE 3.7e11
#define GPU_PAIRS_PER_S_SINGLE 1.35e12
#define CPU_PAIRS_PER_S 2.0e8   /* a pair with an exp */
/* The fixed cost of one engine call on the GPU (one for the couplings of
 * every level, one for the dense blocks), in ms. */
#define GPU_MS_PER_PRODUCT 0.1
/* Symmetric products (h2_otf.h, one right-hand side) evaluate about half the
 * pairs, each adding to its column too (a transpose-reduce and an atomic add
 * per column and tile): one such pair costs this many one-way pairs. */
#define GPU_TWO_WAY_COST_DOUBLE 1.33
#define GPU_TWO_WAY_COST_SINGLE 1.47

/* With a dense-only o (couplings_on_the_fly = 0: the compressed form of an
 * on-the-fly matrix) the couplings are streamed as stored blocks in both
 * forms: ms_otf is then that mixed form's prediction. */
int h2_otf_choose(const h2_tree *t, const h2_otf *o, int single, int gpu, double available,
                  double *ms_stored, double *ms_otf, int *reason)
{
  double el = single ? 4.0 : 8.0;
  double couplings = (double) h2_coupling_entries(t) * el;
  double low = (double) (h2_basis_entries(t) + h2_transfer_entries(t)) * el;
  double blocks = (double) h2_dense_entries(t) * el;
  if (o->couplings_on_the_fly) blocks += couplings;
  else low += couplings;
  double cpl, dense;
  h2_otf_pairs(o, gpu, &cpl, &dense);
  double bw = gpu ? GPU_STORED_BYTES_PER_S : CPU_STORED_BYTES_PER_S;
  double rate = gpu ? (single ? GPU_PAIRS_PER_S_SINGLE : GPU_PAIRS_PER_S_DOUBLE) : CPU_PAIRS_PER_S;
  if (gpu) rate /= single ? GPU_TWO_WAY_COST_SINGLE : GPU_TWO_WAY_COST_DOUBLE;
  *ms_stored = 1e3 * (low + blocks) / bw;
  int products = (o->dense.rows > 0) + (o->coupling.rows > 0);   // one engine call each
  *ms_otf = 1e3 * (low / bw + (cpl + dense) / rate) + (gpu ? GPU_MS_PER_PRODUCT * products : 0.0);
  if (low + blocks > available) {
    *reason = H2_STORAGE_MEMORY;
    return 1;
  }
  *reason = H2_STORAGE_FASTER;
  return *ms_otf < *ms_stored;
}
