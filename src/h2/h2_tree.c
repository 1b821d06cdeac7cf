/*
 * The H2 structure, built on the host and shared by both backends: KD-tree
 * clustering, interpolation boxes, the dual-tree traversal that sorts block
 * pairs into coupling (admissible) and dense (inadmissible leaf) blocks, and
 * the block-sparse index data of every level.
 */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <limits.h>
#include "h2/h2.h"
#include "h2/h2_cheb.h"
#include "device/gk_hooks.h"
#include "device/gk_omp.h"

#define ALLOC(p, count, type)                                                   \
  do {                                                                          \
    (p) = (type *) calloc((size_t) (count) > 0 ? (size_t) (count) : 1, sizeof(type)); \
    if (!(p)) { gk_fail(err, GK_ERR_NOMEM, "out of host memory building the H2 tree"); goto fail; } \
  } while (0)

/* The points in tree order: the coordinates move with their indices, so that
 * every scan of a cluster is contiguous (gathers through a permutation were
 * most of the construction time at n = 1e6). */
typedef struct {
  int dim;
  int *idx;                  /* original index of each position */
  double *x[H2_MAX_DIM];     /* coordinates, one array per dimension */
} tree_points;

static inline void swap_points(tree_points *tp, int a, int b)
{
  int t = tp->idx[a]; tp->idx[a] = tp->idx[b]; tp->idx[b] = t;
  for (int d = 0; d < tp->dim; d++) {
    double v = tp->x[d][a]; tp->x[d][a] = tp->x[d][b]; tp->x[d][b] = v;
  }
}

/* Rearranges positions start .. start+cnt-1 so that the first k have the k
 * smallest coordinates `d` (quickselect; ties may fall on either side). */
static void select_smallest(tree_points *tp, int start, int cnt, int d, int k)
{
  const double *x = tp->x[d];
  int lo = start, hi = start + cnt - 1;
  k += start;
  while (lo < hi) {
    double pivot = x[lo + (hi - lo) / 2];
    int i = lo, j = hi;
    while (i <= j) {
      while (x[i] < pivot) i++;
      while (x[j] > pivot) j--;
      if (i <= j) swap_points(tp, i++, j--);
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else break;
  }
}

/* Splits a cluster at the mean of its widest coordinate (the KD-tree of the
 * paper) and returns the size of the first child. Because every leaf of the
 * complete tree must hold at most leaf_size points, the split is moved (by
 * quickselect) when a child would exceed its capacity `cap`, and halved when
 * the mean separates nothing (duplicated points). */
static int split_cluster(tree_points *tp, int start, int cnt, int cap, const double *lo,
                         const double *hi, int stride)
{
  int wide = 0;
  for (int d = 1; d < tp->dim; d++)
    if (hi[d * stride] - lo[d * stride] > hi[wide * stride] - lo[wide * stride]) wide = d;
  const double *x = tp->x[wide];
  double mean = 0.0;
  for (int i = start; i < start + cnt; i++) mean += x[i];
  mean /= cnt;
  int i = start, j = start + cnt - 1;
  while (i <= j) {
    if (x[i] < mean) i++;
    else swap_points(tp, i, j--);
  }
  int first = i - start;
  int least = cnt > cap ? cnt - cap : 0, most = cnt < cap ? cnt : cap;
  int target = first;
  if (cnt >= 2 && (target == 0 || target == cnt)) target = cnt / 2;
  if (target < least) target = least;
  if (target > most) target = most;
  if (target != first && target > 0 && target < cnt) select_smallest(tp, start, cnt, wide, target);
  return target;
}

/* Tight bounding box of positions start .. start+cnt-1 into lo/hi (stride n_nodes). */
static void bounding_box(const tree_points *tp, int start, int cnt, double *lo, double *hi,
                         int stride)
{
  for (int d = 0; d < tp->dim; d++) {
    const double *x = tp->x[d];
    double a = INFINITY, b = -INFINITY;
    for (int i = start; i < start + cnt; i++) {
      a = fmin(a, x[i]);
      b = fmax(b, x[i]);
    }
    lo[d * stride] = a;
    hi[d * stride] = b;
  }
}

typedef struct {
  int *i, *j;
  size_t n, cap;
} pair_list;

static int pair_push(pair_list *p, int i, int j)
{
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 64;
    int *a = (int *) realloc(p->i, cap * sizeof(int));
    if (!a) return 0;
    p->i = a;
    int *b = (int *) realloc(p->j, cap * sizeof(int));
    if (!b) return 0;
    p->j = b;
    p->cap = cap;
  }
  p->i[p->n] = i;
  p->j[p->n] = j;
  p->n++;
  return 1;
}

static void pair_free(pair_list *p)
{
  free(p->i);
  free(p->j);
  memset(p, 0, sizeof *p);
}

static int node_level(int node)
{
  int l = 0;
  while ((2 << l) - 1 <= node) l++;
  return l;
}

/* The admissibility condition: max(diam_i, diam_j) <= eta * dist(box_i, box_j).
 * The great-circle kernels are also singular where the chord reaches the
 * sphere's `diameter` (antipodal pairs: a cone, like the exponential's at
 * d = 0, and clamped beyond), so there the same condition holds for the
 * distance of the boxes' farthest points from the diameter; 0: no sphere. */
static int admissible(const double *lo, const double *hi, int stride, int dim, int a, int b,
                      double eta, double diameter)
{
  double da = 0.0, db = 0.0, dist = 0.0, far = 0.0;
  for (int d = 0; d < dim; d++) {
    double la = lo[a + d * stride], ha = hi[a + d * stride];
    double lb = lo[b + d * stride], hb = hi[b + d * stride];
    da += (ha - la) * (ha - la);
    db += (hb - lb) * (hb - lb);
    double gap = fmax(0.0, fmax(lb - ha, la - hb)), span = fmax(hb - la, ha - lb);
    dist += gap * gap;
    far += span * span;
  }
  double diam = sqrt(fmax(da, db));
  if (diameter > 0.0 && !(diam <= eta * (diameter - sqrt(far)))) return 0;
  return dist > 0.0 && diam <= eta * sqrt(dist);
}

/* The sphere's diameter for admissible(), or 0 where antipodal pairs need no
 * care: a great-circle kernel's kink there is exp(-pi rho) (its value at the
 * antipode, in units of the variance) times O(sqrt(rho diam)) across a block,
 * so below ANTIPODAL_NEGLIGIBLE interpolating over it costs about that much
 * per entry, far below any H2 tolerance, while keeping those pairs dense
 * (the cap within about 0.8 rad of each cluster's antipode at 1e5 points,
 * rho = 6.4) made 28 times the dense blocks. On the Earth: ranges below
 * about 1090 km. */
#define ANTIPODAL_NEGLIGIBLE 1e-8

static double antipodal_diameter(const gk_kernel *k)
{
  if (!gk_kernel_on_sphere(k->family)) return 0.0;
  double rho = k->sphere_radius;
  return exp(-3.14159265358979323846 * rho) > ANTIPODAL_NEGLIGIBLE ? 2.0 * rho : 0.0;
}

/* Block-sparse index data of one level from its block pairs (global node
 * indices; `base` is the level's first node). */
static gk_status bsr_build(h2_bsr *b, int n_rows, const pair_list *p, int base, gk_error *err)
{
  int *fill = NULL, *by_row = NULL;
  memset(b, 0, sizeof *b);
  b->n_rows = n_rows;
  b->n_blocks = (int) p->n;
  ALLOC(b->row, p->n, int);
  ALLOC(b->col, p->n, int);
  ALLOC(b->row_ptr, n_rows + 1, int);
  ALLOC(b->row_blocks, p->n, int);
  ALLOC(fill, n_rows, int);
  ALLOC(by_row, p->n, int);
  for (size_t e = 0; e < p->n; e++) b->row_ptr[p->i[e] - base + 1]++;
  for (int r = 0; r < n_rows; r++) {
    b->row_ptr[r + 1] += b->row_ptr[r];
    int len = b->row_ptr[r + 1] - b->row_ptr[r];
    if (len > b->n_slots) b->n_slots = len;
  }
  for (size_t e = 0; e < p->n; e++) {
    int r = p->i[e] - base;
    by_row[b->row_ptr[r] + fill[r]++] = (int) e;
  }
  ALLOC(b->slot_ptr, b->n_slots + 1, int);
  int s = 0;
  for (int t = 0; t < b->n_slots; t++) {
    b->slot_ptr[t] = s;
    for (int r = 0; r < n_rows; r++) {
      if (b->row_ptr[r + 1] - b->row_ptr[r] <= t) continue;
      int e = by_row[b->row_ptr[r] + t];
      b->row[s] = r;
      b->col[s] = p->j[e] - base;
      b->row_blocks[b->row_ptr[r] + t] = s;
      s++;
    }
  }
  b->slot_ptr[b->n_slots] = s;
  free(fill);
  free(by_row);
  return GK_OK;
fail:
  free(fill);
  free(by_row);
  return err->status;
}

static void bsr_free(h2_bsr *b)
{
  free(b->row);
  free(b->col);
  free(b->slot_ptr);
  free(b->row_ptr);
  free(b->row_blocks);
  memset(b, 0, sizeof *b);
}

/* Dual-tree traversal from (root, root): admissible pairs become coupling
 * blocks of their level, inadmissible leaf pairs dense blocks, the rest are
 * refined into their four child pairs. */
static gk_status traverse(h2_tree *t, const double *lo, const double *hi, pair_list *coupling,
                          pair_list *dense, gk_error *err)
{
  pair_list stack = {0};
  const double diameter = antipodal_diameter(&t->kernel);
  if (!pair_push(&stack, 0, 0)) goto nomem;
  while (stack.n > 0) {
    stack.n--;
    int a = stack.i[stack.n], b = stack.j[stack.n];
    if (t->node_count[a] == 0 || t->node_count[b] == 0) continue;
    int l = node_level(a);
    if (admissible(lo, hi, t->n_nodes, t->dim, a, b, t->eta, diameter)) {
      if (!pair_push(&coupling[l], a, b)) goto nomem;
    } else if (l == t->depth) {
      if (!pair_push(dense, a, b)) goto nomem;
    } else {
      for (int ca = t->head[a]; ca >= 0; ca = t->next[ca])
        for (int cb = t->head[b]; cb >= 0; cb = t->next[cb])
          if (!pair_push(&stack, ca, cb)) goto nomem;
    }
  }
  pair_free(&stack);
  return GK_OK;
nomem:
  pair_free(&stack);
  return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 dual-tree traversal");
}

gk_status h2_tree_build(h2_tree *t, const double *points, int n, int dim, int leaf_size,
                        int order, double eta, const gk_kernel *kernel, double nugget,
                        int threads, gk_error *err)
{
  int *idx = NULL;
  double *coords = NULL, *lo = NULL, *hi = NULL;
  pair_list *coupling = NULL, dense = {0};
  memset(t, 0, sizeof *t);
  if (!h2_kernel_supported(kernel->family)) {
    const char *name = kernel->family == GK_KERNEL_LINEAR ? "\"linear\""
                     : kernel->family == GK_KERNEL_SQUARED_DISTANCE ? "\"squared_distance\""
                     : "this kernel";
    return gk_fail(err, GK_ERR_INPUT, "h2_matrix() supports the \"gaussian\", \"exponential\", "
                   "\"matern\", \"cauchy\", \"inverse_multiquadric\", \"exponential_great_circle\" "
                   "kernels, not %s", name);
  }
  if (n < 1 || dim < 2 || dim > 3 || leaf_size < 1 || order < 1 || order > 16 || !(eta > 0))
    return gk_fail(err, GK_ERR_INPUT, "invalid H2 parameters (n = %d, dim = %d, leaf_size = %d, "
                   "order = %d)", n, dim, leaf_size, order);
  t->n = n;
  t->dim = dim;
  t->order = order;
  t->rank = order * order * (dim == 3 ? order : 1);
  t->leaf_size = leaf_size;
  t->eta = eta;
  t->nugget = nugget;
  t->kernel = *kernel;
  while ((size_t) leaf_size << t->depth < (size_t) n) t->depth++;
  int q = t->depth;
  if (h2_tree_check_size(t, err)) return err->status;
  t->n_leaves = 1 << q;
  t->n_nodes = 2 * t->n_leaves - 1;
  int nn = t->n_nodes, m = leaf_size;

  ALLOC(t->level_ptr, q + 2, int);
  ALLOC(t->head, nn, int);
  ALLOC(t->next, nn, int);
  ALLOC(t->parent, nn, int);
  ALLOC(t->node_start, nn, int);
  ALLOC(t->node_count, nn, int);
  ALLOC(t->center, (size_t) nn * dim, double);
  ALLOC(t->half, (size_t) nn * dim, double);
  ALLOC(t->slot_of_point, n, int);
  ALLOC(t->leaf_points, (size_t) t->n_leaves * m * dim, double);
  ALLOC(t->leaf_count, t->n_leaves, int);
  ALLOC(t->coupling, q + 1, h2_bsr);
  ALLOC(t->coupling_offset, q + 2, size_t);
  ALLOC(t->level_rank, q + 1, int);
  ALLOC(t->transfer_ptr, q + 2, size_t);
  ALLOC(t->coupling_ptr, q + 2, size_t);
  ALLOC(t->hat_ptr, q + 2, size_t);
  ALLOC(idx, n, int);
  ALLOC(coords, (size_t) n * dim, double);
  ALLOC(lo, (size_t) nn * dim, double);
  ALLOC(hi, (size_t) nn * dim, double);
  ALLOC(coupling, q + 1, pair_list);

  // The flattened complete binary tree: level l is nodes 2^l - 1 .. 2^(l+1) - 2.
  for (int l = 0; l <= q + 1; l++) t->level_ptr[l] = (1 << l) - 1;
  for (int v = 0; v < nn; v++) {
    int c = 2 * v + 1;
    t->head[v] = c < nn ? c : -1;
    t->next[v] = (v > 0 && v % 2 == 1) ? v + 1 : -1;
    t->parent[v] = v > 0 ? (v - 1) / 2 : -1;
  }

  tree_points tp;
  tp.dim = dim;
  tp.idx = idx;
  for (int i = 0; i < n; i++) idx[i] = i;
  memcpy(coords, points, (size_t) n * dim * sizeof(double));
  for (int d = 0; d < dim; d++) tp.x[d] = coords + (size_t) d * n;
  t->node_start[0] = 0;
  t->node_count[0] = n;
  for (int l = 0; l <= q; l++) {
    // The clusters of a level are disjoint ranges of tp: split them in parallel.
#pragma omp parallel for schedule(dynamic, 1) num_threads(gk_omp_threads(threads))
    for (int v = t->level_ptr[l]; v < t->level_ptr[l + 1]; v++) {
      int start = t->node_start[v], cnt = t->node_count[v];
      if (cnt > 0) bounding_box(&tp, start, cnt, lo + v, hi + v, nn);
      else
        for (int d = 0; d < dim; d++) {  // empty: its parent's box (never used for blocks)
          lo[v + d * nn] = lo[t->parent[v] + d * nn];
          hi[v + d * nn] = hi[t->parent[v] + d * nn];
        }
      if (l == q) continue;
      int c = t->head[v];
      int first = cnt > 0 ? split_cluster(&tp, start, cnt, m << (q - l - 1), lo + v, hi + v, nn)
                          : 0;
      t->node_start[c] = t->node_start[v];
      t->node_count[c] = first;
      t->node_start[c + 1] = t->node_start[v] + first;
      t->node_count[c + 1] = cnt - first;
    }
    if (gk_interrupt_pending()) {
      gk_fail(err, GK_ERR_INTERRUPTED, "H2 construction interrupted");
      goto fail;
    }
  }

  // Interpolation boxes: the bounding box, widened where it is flat so that
  // the Chebyshev points stay distinct (points on a line, duplicates).
  double extent = 0.0;
  for (int d = 0; d < dim; d++) extent = fmax(extent, hi[d * nn] - lo[d * nn]);
  double min_half = 1e-6 * fmax(extent, 1.0);
  for (int v = 0; v < nn; v++)
    for (int d = 0; d < dim; d++) {
      t->center[v + d * nn] = 0.5 * (lo[v + d * nn] + hi[v + d * nn]);
      t->half[v + d * nn] = fmax(0.5 * (hi[v + d * nn] - lo[v + d * nn]), min_half);
    }

  // Padded leaf slots: leaf i, row r < leaf_count holds point idx[start + r].
  size_t rows = (size_t) t->n_leaves * m;
  for (int i = 0; i < t->n_leaves; i++) {
    int v = t->level_ptr[q] + i;
    t->leaf_count[i] = t->node_count[v];
    for (int r = 0; r < m; r++) {
      size_t slot = (size_t) i * m + r;
      int p = r < t->node_count[v] ? idx[t->node_start[v] + r] : -1;
      if (p >= 0) t->slot_of_point[p] = (int) slot;
      for (int d = 0; d < dim; d++)
        t->leaf_points[slot + d * rows] = p >= 0 ? tp.x[d][t->node_start[v] + r] : t->center[v + d * nn];
    }
  }

  if (traverse(t, lo, hi, coupling, &dense, err)) goto fail;
  t->top_level = q + 1;
  for (int l = 0; l <= q; l++) {
    if (coupling[l].n > 0 && t->top_level > q) t->top_level = l;
    if (bsr_build(&t->coupling[l], 1 << l, &coupling[l], t->level_ptr[l], err)) goto fail;
    t->coupling_offset[l + 1] = t->coupling_offset[l] + coupling[l].n;
  }
  if (bsr_build(&t->dense, t->n_leaves, &dense, t->level_ptr[q], err)) goto fail;
  for (int l = 0; l <= q; l++) t->level_rank[l] = t->rank;
  h2_tree_set_ranks(t, t->level_rank);

  free(idx);
  free(coords);
  free(lo);
  free(hi);
  for (int l = 0; l <= q; l++) pair_free(&coupling[l]);
  free(coupling);
  pair_free(&dense);
  return GK_OK;
fail:
  free(idx);
  free(coords);
  free(lo);
  free(hi);
  if (coupling)
    for (int l = 0; l <= q; l++) pair_free(&coupling[l]);
  free(coupling);
  pair_free(&dense);
  h2_tree_free(t);
  return err->status;
}

gk_status h2_tree_check_size(const h2_tree *t, gk_error *err)
{
  // The padded vectors and the xhat / yhat trees are indexed by int (BLAS).
  int q = t->depth;
  if (q > 29 || ((size_t) 2 << q) * t->rank >= INT_MAX ||
      ((size_t) 1 << q) * t->leaf_size >= INT_MAX)
    return gk_fail(err, GK_ERR_INPUT, "the H2 matrix would be too large for n = %d with "
                   "leaf_size = %d and rank %d: use a larger leaf_size or a smaller order",
                   t->n, t->leaf_size, t->rank);
  return GK_OK;
}

void h2_tree_free(h2_tree *t)
{
  if (t->coupling)
    for (int l = 0; l <= t->depth; l++) bsr_free(&t->coupling[l]);
  bsr_free(&t->dense);
  free(t->level_ptr);
  free(t->head);
  free(t->next);
  free(t->parent);
  free(t->node_start);
  free(t->node_count);
  free(t->center);
  free(t->half);
  free(t->slot_of_point);
  free(t->leaf_points);
  free(t->leaf_count);
  free(t->coupling);
  free(t->coupling_offset);
  free(t->level_rank);
  free(t->transfer_ptr);
  free(t->coupling_ptr);
  free(t->hat_ptr);
  memset(t, 0, sizeof *t);
}

void h2_tree_set_ranks(h2_tree *t, const int *ranks)
{
  int q = t->depth;
  if (t->level_rank != ranks)
    for (int l = 0; l <= q; l++) t->level_rank[l] = ranks[l];
  t->transfer_ptr[0] = t->coupling_ptr[0] = t->hat_ptr[0] = 0;
  for (int l = 0; l <= q; l++) {
    size_t k = (size_t) t->level_rank[l], kp = l > 0 ? (size_t) t->level_rank[l - 1] : k;
    size_t nodes = (size_t) 1 << l;
    t->transfer_ptr[l + 1] = t->transfer_ptr[l] + nodes * k * kp;
    t->coupling_ptr[l + 1] = t->coupling_ptr[l] + (size_t) t->coupling[l].n_blocks * k * k;
    t->hat_ptr[l + 1] = t->hat_ptr[l] + nodes * k;
  }
}

size_t h2_basis_entries(const h2_tree *t)
{
  return (size_t) t->n_leaves * t->leaf_size * t->level_rank[t->depth];
}

size_t h2_transfer_entries(const h2_tree *t)
{
  return t->transfer_ptr[t->depth + 1];
}

size_t h2_coupling_entries(const h2_tree *t)
{
  return t->coupling_ptr[t->depth + 1];
}

size_t h2_hat_rows(const h2_tree *t)
{
  return t->hat_ptr[t->depth + 1];
}

size_t h2_dense_entries(const h2_tree *t)
{
  return (size_t) t->dense.n_blocks * t->leaf_size * t->leaf_size;
}

size_t h2_tree_bytes(const h2_tree *t)
{
  size_t nn = (size_t) t->n_nodes, blocks = (size_t) t->dense.n_blocks + t->coupling_offset[t->depth + 1];
  return nn * (5 * sizeof(int) + 2 * (size_t) t->dim * sizeof(double)) +
         (size_t) t->n * sizeof(int) +
         (size_t) t->n_leaves * ((size_t) t->leaf_size * t->dim * sizeof(double) + sizeof(int)) +
         blocks * 3 * sizeof(int);
}

size_t h2_data_bytes(const h2_tree *t, int single)
{
  return (h2_basis_entries(t) + h2_transfer_entries(t) + h2_coupling_entries(t) +
          h2_dense_entries(t)) * (single ? sizeof(float) : sizeof(double));
}

int h2_tree_point_order(const h2_tree *t, int *order)
{
  /* slots are distinct: the points sorted by slot, by one pass over the slots */
  size_t slots = (size_t) t->n_leaves * t->leaf_size;
  int *at = (int *) malloc(slots * sizeof(int) + 1);
  if (!at) return 1;
  for (size_t q = 0; q < slots; q++) at[q] = -1;
  for (int p = 0; p < t->n; p++) at[t->slot_of_point[p]] = p;
  int e = 0;
  for (size_t q = 0; q < slots; q++)
    if (at[q] >= 0) order[e++] = at[q];
  free(at);
  return 0;
}
