/*
 * The Vecchia neighbour search (gp_neighbors.h) in one C call: the block
 * schedule, the grid cells (cell numbers, a radix sort, cluster ranges), the
 * cluster pairs and the keep-preceding step around KMIN reductions of the
 * reduction engine, asked for exactly as knn() asks for them (squared
 * distance, the points divided by reduce_knn_scale, the same row and point
 * orders), so that the candidates are those the R implementation found; rows
 * with too few preceding candidates are searched again in full. No
 * n x k result passes through R, and the host arrays are allocated once, for
 * the largest block. Pure C.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "gp/gp.h"
#include "gp/gp_neighbors.h"
#include "reduce/reduce.h"
#include "reduce/reduce_klist.h"
#include "device/gk_hooks.h"
#include "device/gk_omp.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Radix sort digits: 2048 buckets stay in the L1 cache. */
#define RADIX_BITS 11
#define RADIX_BUCKETS (1 << RADIX_BITS)

/* Kept cell pairs beyond which a block is searched by brute force instead
 * (only points spread over many dimensions get there). */
#define GRID_MAX_PAIRS ((double) (1 << 27))
#define GRID_MAX_OPEN_DIMS 20

typedef struct {
  const double *x;            /* the caller's points, n x dim                          */
  int n, dim, m, k_most;
  const gp_neighbors_options *opt;
  int *nbr;                   /* the result, n x m                                    */
  double *ones;               /* dim: the kernel's range (coordinates as they are)     */
  double *low, *span, *extent;/* dim: the block's grid (see block_grid)                */
  uint64_t *radix;            /* dim: cell number = sum of cell coordinates x radix    */
  int64_t *coord;             /* dim: one cell's coordinates                           */
  double *prefix;             /* end x dim: points 1..end in their order, divided by
                                 the scale (the brute-force searches' points)          */
  double *sorted;             /* end x dim: the same sorted by cell                    */
  double *rows_x;             /* rows x dim: the rows searched                         */
  uint64_t *key, *key_tmp;    /* n: cell numbers, and the radix sort's other half      */
  int *id, *id_tmp;           /* n: the point (1-based) at each sorted position        */
  int *row_of, *skip, *redo;  /* most_rows: block row (1-based) of each sorted row,
                                 rows to search again, and those rows in order         */
  double *values;             /* most_rows x k_most: squared distances, then distances */
  int *index;                 /* most_rows x k_most: 1-based, 0 for none               */
  uint64_t *cell_key;         /* n: the number of each non-empty cell, increasing      */
  int *cell_range, *row_range;/* 2 n: half-open ranges of each cell's points and rows  */
  int *pair_x, *pair_y;       /* kept cell pairs (0-based), pair_cap of each           */
  size_t pair_cap;
  char *block;                /* one allocation holding every array but the pairs      */
} nb_work;

/* Points the arrays into `base` (NULL: only measures) for blocks of at most
 * most_rows rows; returns the bytes they take, every array 8-byte aligned. */
static size_t work_layout(nb_work *w, char *base, int most_rows)
{
  size_t used = 0, n = (size_t) w->n, dim = (size_t) w->dim, rows = (size_t) most_rows;
  size_t kr = rows * (size_t) w->k_most;
#define TAKE(field, count)                                              \
  (w->field = base ? (void *) (base + used) : NULL,                     \
   used += ((count) * sizeof *w->field + 7) & ~(size_t) 7)
  TAKE(ones, dim);
  TAKE(low, dim);
  TAKE(span, dim);
  TAKE(extent, dim);
  TAKE(radix, dim);
  TAKE(coord, dim);
  TAKE(prefix, n * dim);
  TAKE(sorted, n * dim);
  TAKE(rows_x, rows * dim);
  TAKE(key, n);
  TAKE(key_tmp, n);
  TAKE(id, n);
  TAKE(id_tmp, n);
  TAKE(row_of, rows);
  TAKE(skip, rows);
  TAKE(redo, rows);
  TAKE(values, kr);
  TAKE(index, kr);
  TAKE(cell_key, n);
  TAKE(cell_range, 2 * n);
  TAKE(row_range, 2 * n);
#undef TAKE
  return used;
}

int gp_neighbors_block_end(int first, int n, int m)
{
  long long end = first == 0 ? 4LL * m : (long long) first + first / 2;
  if (end < first + 1) end = first + 1;
  return end < n ? (int) end : n;
}

/* KMIN of the squared distance over the points y (ny x dim) for the rows xq
 * (rows x dim), as knn() asks the engine for it, into w->values / w->index:
 * knn()'s distances (times the scale), finished by the engine (root_scale). */
static gk_status knn_search(nb_work *w, const double *xq, int rows, const double *y, int ny,
                            int k, const gk_reduce_ranges *ranges, double scale, gk_error *err)
{
  gk_reduce_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.kernel = gk_kernel_make(GK_KERNEL_SQUARED_DISTANCE, 1.0, NAN);   /* R's smoothness is NA */
  spec.range = w->ones;
  spec.reduction = GK_REDUCE_KMIN;
  spec.k = k;
  spec.method = GK_REDUCE_AUTO;
  spec.ranges = ranges;
  spec.root_scale = scale;
  gk_reduce_operand a = {xq, NULL, 0, -1, (size_t) rows, w->dim, NULL};
  gk_reduce_operand b = {y, NULL, 0, -1, (size_t) ny, w->dim, NULL};
  if (w->opt->gpu) reduce_cuda(&spec, &a, &b, NULL, w->values, w->index, err);
  else reduce_cpu(&spec, &a, &b, NULL, w->values, w->index, w->opt->threads, err);
  return err->status;
}

/* The volume of the unit ball in dim dimensions, as R's pi^(d/2) / gamma(d/2 + 1). */
static double unit_ball(int dim)
{
  double half = dim / 2.0;
  return (half == 2.0 ? M_PI * M_PI : pow(M_PI, half)) / tgamma(half + 1.0);
}

/* The grid of the block's points 1..end (grid_cluster() in R, anchored at
 * their smallest coordinates): side *side such that a ball of radius *side
 * holds about 4k of them on average, in the extent of the dimensions with
 * any. Products are taken in long double as R's prod() takes them, so the
 * cells are R's to the last bit. Returns 0 when cells do not pay (no side,
 * no dimension of 4 cells or more, too many cells to number): then brute
 * force. */
static int block_grid(nb_work *w, int end, int k, double *side)
{
  int dim = w->dim, n = w->n, live = 0;
  long double volume = 1.0L;
  for (int d = 0; d < dim; d++) {
    const double *xd = w->x + (size_t) d * n;
    double lo = xd[0], hi = xd[0];
    for (int i = 1; i < end; i++) {
      if (xd[i] < lo) lo = xd[i];
      if (xd[i] > hi) hi = xd[i];
    }
    w->low[d] = lo;
    w->span[d] = hi - lo;
    if (w->span[d] > 0) {
      volume *= w->span[d];
      live++;
    }
  }
  if (live == 0) return 0;
  double s = pow(4.0 * k * (double) volume / (end * unit_ball(dim)), 1.0 / live);
  if (!(isfinite(s) && s > 0)) return 0;
  long double cells = 1.0L;
  int wide = 0;
  for (int d = 0; d < dim; d++) {
    w->extent[d] = floor(w->span[d] / s) + 1;
    wide += w->extent[d] >= 4;
    cells *= w->extent[d];
  }
  if (!wide || (double) cells >= 0x1p52) return 0;
  uint64_t radix = 1;
  for (int d = 0; d < dim; d++) {
    w->radix[d] = radix;
    radix *= (uint64_t) w->extent[d];
  }
  *side = s;
  return 1;
}

/* Stable LSD radix sort of w->key[0..len) (every key at most `most`),
 * carrying w->id; digits that all keys share are skipped. The sorted arrays
 * end up in w->key and w->id (the halves are swapped, not copied). */
static void sort_by_cell(nb_work *w, int len, uint64_t most)
{
  size_t count[RADIX_BUCKETS + 1];
  for (int shift = 0; shift < 64 && (most >> shift) != 0; shift += RADIX_BITS) {
    memset(count, 0, sizeof count);
    for (int i = 0; i < len; i++) count[((w->key[i] >> shift) & (RADIX_BUCKETS - 1)) + 1]++;
    if (count[((w->key[0] >> shift) & (RADIX_BUCKETS - 1)) + 1] == (size_t) len) continue;
    for (int b = 0; b < RADIX_BUCKETS; b++) count[b + 1] += count[b];
    for (int i = 0; i < len; i++) {
      size_t to = count[(w->key[i] >> shift) & (RADIX_BUCKETS - 1)]++;
      w->key_tmp[to] = w->key[i];
      w->id_tmp[to] = w->id[i];
    }
    uint64_t *kt = w->key;
    w->key = w->key_tmp;
    w->key_tmp = kt;
    int *it = w->id;
    w->id = w->id_tmp;
    w->id_tmp = it;
  }
}

/* Cells of the points 1..end: their numbers, sorted (stable: ties keep the
 * point order, as sort_clusters() does), the sorted points in w->sorted, the
 * block's rows first..end - 1 in the same order in w->rows_x (w->row_of: the
 * block row of each), and each cell's ranges of points and of rows. Returns
 * the number of non-empty cells. */
static int sort_into_cells(nb_work *w, int first, int end, double side)
{
  int dim = w->dim, n = w->n, rows = end - first;
#ifdef _OPENMP
#pragma omp parallel for num_threads(gk_omp_threads(w->opt->threads)) schedule(static)
#endif
  for (int i = 0; i < end; i++) {
    uint64_t key = 0;
    for (int d = 0; d < dim; d++)
      key += (uint64_t) floor((w->x[i + (size_t) d * n] - w->low[d]) / side) * w->radix[d];
    w->key[i] = key;
    w->id[i] = i + 1;
  }
  uint64_t most = 0;
  for (int d = 0; d < dim; d++) most += (uint64_t) (w->extent[d] - 1) * w->radix[d];
  sort_by_cell(w, end, most);
  int cells = 0, r = 0;
  for (int q = 0; q < end; q++) {
    if (q == 0 || w->key[q] != w->key[q - 1]) {
      if (cells > 0) {
        w->cell_range[2 * cells - 1] = q;
        w->row_range[2 * cells - 1] = r;
      }
      w->cell_key[cells] = w->key[q];
      w->cell_range[2 * cells] = q;
      w->row_range[2 * cells] = r;
      cells++;
    }
    int p = w->id[q] - 1;
    for (int d = 0; d < dim; d++) w->sorted[q + (size_t) d * end] = w->prefix[p + (size_t) d * end];
    if (p >= first) {
      for (int d = 0; d < dim; d++) w->rows_x[r + (size_t) d * rows] = w->prefix[p + (size_t) d * end];
      w->row_of[r++] = p - first + 1;
    }
  }
  w->cell_range[2 * cells - 1] = end;
  w->row_range[2 * cells - 1] = r;
  return cells;
}

/* The cell numbered `key` among the `cells` increasing w->cell_key, or -1. */
static int find_cell(const nb_work *w, int cells, uint64_t key)
{
  int lo = 0, hi = cells - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    if (w->cell_key[mid] == key) return mid;
    if (w->cell_key[mid] < key) lo = mid + 1; else hi = mid - 1;
  }
  return -1;
}

/* The kept cell pairs: each cell holding rows with every non-empty cell of
 * the 3^dim around it (dimensions of one cell add nothing, so only the
 * others are stepped). Returns the number of pairs, or -1 when there would be
 * too many (then brute force), -2 when out of memory. */
static long long cell_pairs(nb_work *w, int cells)
{
  int dim = w->dim, open = 0, with_rows = 0;
  for (int d = 0; d < dim; d++) open += w->extent[d] > 1;
  for (int c = 0; c < cells; c++) with_rows += w->row_range[2 * c + 1] > w->row_range[2 * c];
  if (open > GRID_MAX_OPEN_DIMS) return -1;
  long long around = 1;
  for (int j = 0; j < open; j++) around *= 3;
  if ((double) around * with_rows > GRID_MAX_PAIRS) return -1;
  size_t need = (size_t) around * with_rows;
  if (need > w->pair_cap) {
    free(w->pair_x);
    free(w->pair_y);
    w->pair_x = (int *) malloc(need * sizeof(int));
    w->pair_y = (int *) malloc(need * sizeof(int));
    w->pair_cap = w->pair_x && w->pair_y ? need : 0;
    if (!w->pair_cap) return -2;
  }
  long long pairs = 0;
  for (int c = 0; c < cells; c++) {
    if (w->row_range[2 * c + 1] == w->row_range[2 * c]) continue;
    for (int d = 0; d < dim; d++)
      w->coord[d] = (int64_t) ((w->cell_key[c] / w->radix[d]) % (uint64_t) w->extent[d]);
    for (long long o = 0; o < around; o++) {
      long long rest = o;
      int64_t key = (int64_t) w->cell_key[c];
      int inside = 1;
      for (int d = 0; d < dim && inside; d++) {
        if (w->extent[d] <= 1) continue;
        int step = (int) (rest % 3) - 1;
        rest /= 3;
        int64_t to = w->coord[d] + step;
        inside = to >= 0 && (double) to < w->extent[d];
        key += step * (int64_t) w->radix[d];
      }
      int hit = inside ? find_cell(w, cells, (uint64_t) key) : -1;
      if (hit < 0) continue;
      w->pair_x[pairs] = c;
      w->pair_y[pairs++] = hit;
    }
  }
  return pairs;
}

/* Brute force for the block rows listed in `rows_of` (1-based, increasing;
 * NULL: all `count` rows from `first`), over the points 1..end. */
static gk_status dense_rows(nb_work *w, int first, int end, int k, double scale,
                            const int *rows_of, int count, long long *dup, gk_error *err)
{
  for (int d = 0; d < w->dim; d++) {
    const double *from = w->prefix + (size_t) d * end;
    double *to = w->rows_x + (size_t) d * count;
    for (int r = 0; r < count; r++) to[r] = from[first + (rows_of ? rows_of[r] - 1 : r)];
  }
  if (knn_search(w, w->rows_x, count, w->prefix, end, k, NULL, scale, err)) return err->status;
  *dup += gp_keep_preceding(w->index, w->values, count, k, first, w->n, w->m, rows_of, NULL,
                            NULL, w->opt->threads, w->nbr);
  return GK_OK;
}

/* The rows first..end - 1 among the points 1..end: brute force for a small
 * block, else in grid cells, with the rows whose k-th distance is beyond the
 * cell side searched again by brute force. */
static gk_status search_candidates(nb_work *w, int first, int end, long long *dup, gk_error *err)
{
  int dim = w->dim, rows = end - first, k = end < w->k_most ? end : w->k_most;
  size_t len = (size_t) end * dim;
  for (int d = 0; d < dim; d++)
    memcpy(w->prefix + (size_t) d * end, w->x + (size_t) d * w->n, (size_t) end * sizeof(double));
  /* knn()'s scale: every search of the block has the points 1..end as its y,
   * and its rows among them */
  double scale = reduce_knn_scale(w->prefix, end, w->prefix, end, dim);
  if (scale != 1)
    for (size_t q = 0; q < len; q++) w->prefix[q] /= scale;
  double side;
  if ((double) rows * end <= w->opt->dense_pairs || !block_grid(w, end, k, &side))
    return dense_rows(w, first, end, k, scale, NULL, rows, dup, err);
  int cells = sort_into_cells(w, first, end, side);
  long long pairs = cell_pairs(w, cells);
  if (pairs == -2)
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for the neighbour search's cell pairs");
  if (pairs < 0) return dense_rows(w, first, end, k, scale, NULL, rows, dup, err);
  gk_reduce_ranges ranges;
  int *storage = NULL;
  if (reduce_ranges_build(cells, w->row_range, cells, w->cell_range, (size_t) pairs, w->pair_x,
                          w->pair_y, &ranges, &storage, err))
    return err->status;
  gk_status status = knn_search(w, w->rows_x, rows, w->sorted, end, k, &ranges, scale, err);
  free(storage);
  if (status) return status;
  /* exact where the k-th distance is within the side, less a rounding margin
   * of the cells: a point outside the cells searched is farther than that */
  double within = side * (1 - 1e-12);
  const double *kth = w->values + (size_t) (k - 1) * rows;
  int redo = 0;
  for (int r = 0; r < rows; r++) {
    w->skip[r] = !(kth[r] <= within);
    redo += w->skip[r];
  }
  *dup += gp_keep_preceding(w->index, w->values, rows, k, first, w->n, w->m, w->row_of, w->id,
                            w->skip, w->opt->threads, w->nbr);
  if (!redo) return GK_OK;
  /* the rows to redo in block order: marked by block row, then listed in
   * place (entry b is read before any later write reaches it) */
  memset(w->redo, 0, (size_t) rows * sizeof(int));
  for (int r = 0; r < rows; r++)
    if (w->skip[r]) w->redo[w->row_of[r] - 1] = 1;
  int count = 0;
  for (int b = 0; b < rows; b++)
    if (w->redo[b]) w->redo[count++] = b + 1;
  return dense_rows(w, first, end, k, scale, count < rows ? w->redo : NULL, count, dup, err);
}

/* Row i (0-based) of the block, searched exactly: its min(m, i) nearest
 * among the points 0..i - 1 (squared distances of the block's scaled points
 * w->prefix, ties to the smaller index), by brute force. */
static void exact_row(nb_work *w, int end, int i)
{
  int dim = w->dim, n = w->n, want = i < w->m ? i : w->m, got = 0;
  double best[GP_NEIGHBORS_MAX_CANDIDATES];
  int who[GP_NEIGHBORS_MAX_CANDIDATES];
  const double *p = w->prefix;
  for (int j = 0; j < i; j++) {
    double d2 = gk_sqdist(p + i, (size_t) end, p + j, (size_t) end, dim);
    klist_push(best, who, &got, want, d2, j + 1);
  }
  for (int q = 0; q < w->m; q++) w->nbr[i + (size_t) q * n] = q < got ? who[q] : 0;
}

/* The block's rows, then those that got fewer than min(m, row) neighbours
 * (fewer of their k candidates precede them) searched exactly: every row
 * ends up with its min(m, row) nearest preceding points. */
static gk_status search_block(nb_work *w, int first, int end, long long *dup, gk_error *err)
{
  if (search_candidates(w, first, end, dup, err)) return err->status;
  int n = w->n, m = w->m, count = 0;
  for (int i = first; i < end; i++) {
    int want = i < m ? i : m;
    if (want > 0 && w->nbr[i + (size_t) (want - 1) * n] == 0) w->redo[count++] = i;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(gk_omp_threads(w->opt->threads)) schedule(dynamic, 4)
#endif
  for (int r = 0; r < count; r++) exact_row(w, end, w->redo[r]);
  return GK_OK;
}

gk_status gp_neighbors(const double *x, int n, int dim, int m, const gp_neighbors_options *opt,
                       int *nbr, int *duplicates, gk_error *err)
{
  *duplicates = 0;
  if (n < 0 || dim < 1 || m < 0 || m > GP_NEIGHBORS_MAX_CANDIDATES)
    return gk_fail(err, GK_ERR_INPUT, "neighbour search: %d points in %d dimensions, %d neighbours",
                   n, dim, m);
  if (m == 0) return GK_OK;
  memset(nbr, 0, (size_t) n * m * sizeof(int));
  if (n < 2) return GK_OK;
  for (size_t q = 0; q < (size_t) n * dim; q++)
    if (!isfinite(x[q]))
      return gk_fail(err, GK_ERR_INPUT, "the locations must be finite (NA, NaN or Inf found)");
  int k_most = 2LL * m + 2 < GP_NEIGHBORS_MAX_CANDIDATES ? 2 * m + 2 : GP_NEIGHBORS_MAX_CANDIDATES;
  long long dup = 0;
  if (dim <= GP_NEIGHBORS_CELL_DIMS) {
    if (!gp_neighbors_cells(x, n, dim, m, k_most, opt->threads, nbr, &dup, err))
      *duplicates = dup > INT32_MAX ? INT32_MAX : (int) dup;
    return err->status;
  }
  nb_work w;
  memset(&w, 0, sizeof w);
  w.x = x;
  w.n = n;
  w.dim = dim;
  w.m = m;
  w.k_most = k_most;
  w.opt = opt;
  w.nbr = nbr;
  int most_rows = 0;
  for (int first = 0, end; first < n; first = end) {
    end = gp_neighbors_block_end(first, n, m);
    if (end - first > most_rows) most_rows = end - first;
  }
  w.block = (char *) malloc(work_layout(&w, NULL, most_rows));
  if (!w.block) {
    gk_fail(err, GK_ERR_NOMEM, "out of memory for the neighbour search of %d points", n);
    goto done;
  }
  work_layout(&w, w.block, most_rows);
  for (int d = 0; d < dim; d++) w.ones[d] = 1.0;
  for (int first = 0, end; first < n; first = end) {
    if (first > 0 && gk_interrupt_pending()) {
      gk_fail(err, GK_ERR_INTERRUPTED, "the neighbour search was interrupted");
      goto done;
    }
    end = gp_neighbors_block_end(first, n, m);
    if (search_block(&w, first, end, &dup, err)) goto done;
  }
  *duplicates = dup > INT32_MAX ? INT32_MAX : (int) dup;
done:
  free(w.block);
  free(w.pair_x);
  free(w.pair_y);
  return err->status;
}
