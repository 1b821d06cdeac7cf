/*
 * The Vecchia neighbour search in 1 to 3 dimensions (gp_neighbors.h): cell
 * lists on the host, exact by construction. The rows are taken in the same
 * growing blocks as the candidate search of higher dimensions; the points
 * 1..end of a block are divided by knn()'s scale and sorted into a grid of
 * cells (a counting sort that keeps the point order within a cell), and each
 * row of the block walks the cells around its own in growing rings, keeping
 * its min(m, i) nearest preceding points (squared distance, ties to the
 * smaller index). A ring ends the walk once the m-th distance is below the
 * distance to every cell not yet walked; cells and faces of a ring that
 * cannot hold a nearer point are not opened. Rows run in parallel, in cell
 * order (neighbouring rows read the same cells).
 *
 * The result is the textbook rule the candidate search also gives, without
 * candidates: no row is searched twice. The duplicates are counted as the
 * candidate search counts them: a row's preceding points at distance 0 (all
 * in its own cell) up to its block's k = min(end, k_most) candidates.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "gp/gp_neighbors.h"
#include "reduce/reduce.h"
#include "device/gk_hooks.h"
#include "device/gk_omp.h"

/* Points per cell on average: small cells keep the walk close to the ball
 * of the m nearest; below about 2 the cells' own cost dominates. */
#define CELL_POINTS(m) ((m) < 10 ? 2.0 : (m) / 5.0)

typedef struct {
  int n, dim, end, cells;
  double lo[GP_NEIGHBORS_CELL_DIMS], side, margin;
  int extent[GP_NEIGHBORS_CELL_DIMS], stride[GP_NEIGHBORS_CELL_DIMS];
  double *xs;        /* n x dim point-major: the points divided by the block's scale  */
  double *sorted;    /* end x dim point-major: the same in cell order                */
  int *pid;          /* end: the point (0-based) at each sorted position             */
  int *cell_of;      /* n: each point's cell                                         */
  int *start;        /* cells + 1: each cell's first sorted position                 */
  size_t start_cap;
} cell_grid;

/* The cell coordinate of value v in dimension d (clamped: rounding may put
 * the largest coordinate one cell beyond). */
static inline int cell_coord(const cell_grid *g, int d, double v)
{
  double c = floor((v - g->lo[d]) / g->side);
  if (!(c > 0)) return 0;
  return c >= g->extent[d] ? g->extent[d] - 1 : (int) c;
}

/* The grid of the points 0..end - 1 (g->xs) with about CELL_POINTS points
 * per cell over the dimensions with extent, and at most about twice as many
 * cells as that; the points sorted into it. Returns 0, or -1 out of memory. */
static int build_grid(cell_grid *g, int end, int m)
{
  int dim = g->dim, live = 0;
  double hi[GP_NEIGHBORS_CELL_DIMS], volume = 1.0, widest = 0.0;
  for (int d = 0; d < dim; d++) {
    g->lo[d] = hi[d] = g->xs[d];
    for (int i = 1; i < end; i++) {
      double v = g->xs[(size_t) i * dim + d];
      if (v < g->lo[d]) g->lo[d] = v;
      if (v > hi[d]) hi[d] = v;
    }
    double span = hi[d] - g->lo[d];
    if (span > 0) {
      volume *= span;
      live++;
    }
    if (span > widest) widest = span;
  }
  double per = CELL_POINTS(m);
  double side = live ? pow(per * volume / end, 1.0 / live) : 1.0;
  if (!(side > 0 && isfinite(side))) side = widest > 0 ? widest : 1.0;
  double most = 2.0 * end / per + 64;
  for (;;) {
    double cells = 1;
    for (int d = 0; d < dim; d++) {
      double e = floor((hi[d] - g->lo[d]) / side) + 1;
      cells *= e;
      g->extent[d] = e < 2e9 ? (int) e : 2000000000;
    }
    if (cells <= most) break;
    side *= 1.25;
  }
  g->side = side;
  /* rounding of the cell coordinates: far below any distance that decides */
  g->margin = 1e-12 * (widest + side);
  g->cells = 1;
  for (int d = 0; d < dim; d++) {
    g->stride[d] = g->cells;
    g->cells *= g->extent[d];
  }
  if ((size_t) g->cells + 1 > g->start_cap) {
    free(g->start);
    g->start = (int *) malloc(((size_t) g->cells + 1) * sizeof(int));
    g->start_cap = g->start ? (size_t) g->cells + 1 : 0;
    if (!g->start) return -1;
  }
  memset(g->start, 0, ((size_t) g->cells + 1) * sizeof(int));
  for (int i = 0; i < end; i++) {
    int c = 0;
    for (int d = 0; d < dim; d++) c += cell_coord(g, d, g->xs[(size_t) i * dim + d]) * g->stride[d];
    g->cell_of[i] = c;
    g->start[c + 1]++;
  }
  for (int c = 0; c < g->cells; c++) g->start[c + 1] += g->start[c];
  /* stable: the points of a cell stay in index order (a row stops reading
   * a cell at its first point that does not precede it) */
  for (int i = 0; i < end; i++) {
    int to = g->start[g->cell_of[i]]++;
    g->pid[to] = i;
    memcpy(g->sorted + (size_t) to * dim, g->xs + (size_t) i * dim, (size_t) dim * sizeof(double));
  }
  for (int c = g->cells; c > 0; c--) g->start[c] = g->start[c - 1];
  g->start[0] = 0;
  return 0;
}

/* A row's nearest preceding points so far: the candidates read since the
 * list was last cut to its `want` best, unsorted, and the worst of those
 * best (cut, d2 and who: nothing after it in (squared distance, index)
 * order can be among the row's neighbours). Cutting once per ring costs
 * O(count) where keeping the list sorted cost a shift per entry. */
#define NEAR_CAP (4 * GP_NEIGHBORS_MAX_CANDIDATES)
typedef struct {
  double d2[NEAR_CAP];
  int who[NEAR_CAP];
  int got, want, zeros, cut;
  double cut_d2;
  int cut_who;
} near_list;

static inline int near_less(double a, int ja, double b, int jb)
{
  return a < b || (a == b && ja < jb);
}

static inline void near_swap(near_list *l, int a, int b)
{
  double t = l->d2[a];
  l->d2[a] = l->d2[b];
  l->d2[b] = t;
  int u = l->who[a];
  l->who[a] = l->who[b];
  l->who[b] = u;
}

/* Keeps the `want` best of the candidates (unsorted; quickselect with
 * Hoare's partition) and notes the worst of them. */
static void near_cut(near_list *l)
{
  if (l->got < l->want) return;
  int kth = l->want - 1;
  if (l->got > l->want) {
    int lo = 0, hi = l->got - 1;
    while (lo < hi) {
      int mid = lo + (hi - lo) / 2;
      double pd = l->d2[mid];
      int pj = l->who[mid], a = lo, b = hi;
      while (a <= b) {
        while (near_less(l->d2[a], l->who[a], pd, pj)) a++;
        while (near_less(pd, pj, l->d2[b], l->who[b])) b--;
        if (a <= b) near_swap(l, a++, b--);
      }
      if (kth <= b) hi = b;
      else if (kth >= a) lo = a;
      else break;
    }
    l->got = l->want;
  }
  /* the worst of the kept ones */
  int w = 0;
  for (int p = 1; p <= kth; p++)
    if (near_less(l->d2[w], l->who[w], l->d2[p], l->who[p])) w = p;
  l->cut = 1;
  l->cut_d2 = l->d2[w];
  l->cut_who = l->who[w];
}

static inline void near_push(near_list *l, double d2, int j)
{
  if (l->cut && !near_less(d2, j, l->cut_d2, l->cut_who)) return;
  if (l->got == NEAR_CAP) near_cut(l);
  l->d2[l->got] = d2;
  l->who[l->got++] = j;
}

/* Whether nothing at squared distance `gap2` or more can be among the
 * row's neighbours (as far as the last cut shows). */
static inline int beyond(const near_list *l, double gap2)
{
  return l->cut && gap2 > l->cut_d2;
}

/* The neighbours in order: cut, then sorted by insertion (at most 64). */
static void near_sort(near_list *l)
{
  if (l->got > l->want) near_cut(l);
  for (int p = 1; p < l->got; p++) {
    double v = l->d2[p];
    int j = l->who[p], q = p;
    while (q > 0 && near_less(v, j, l->d2[q - 1], l->who[q - 1])) {
      l->d2[q] = l->d2[q - 1];
      l->who[q] = l->who[q - 1];
      q--;
    }
    l->d2[q] = v;
    l->who[q] = j;
  }
}

/* Distance from q to the cell's slab [lo + c side, lo + (c + 1) side] in
 * dimension d, less the rounding margin (0 inside). */
static inline double slab_gap(const cell_grid *g, int d, int c, double q)
{
  double a = g->lo[d] + c * g->side, b = a + g->side;
  double gap = q < a ? a - q : (q > b ? q - b : 0.0);
  gap -= g->margin;
  return gap > 0 ? gap : 0.0;
}

/* The points of cell c that precede row i, into the list. */
static inline void read_cell(const cell_grid *g, int c, int i, const double *q, near_list *l)
{
  int dim = g->dim;
  for (int p = g->start[c], stop = g->start[c + 1]; p < stop; p++) {
    int j = g->pid[p];
    if (j >= i) break;
    const double *y = g->sorted + (size_t) p * dim;
    double d2 = 0.0;
    for (int d = 0; d < dim; d++) {
      double t = q[d] - y[d];
      d2 += t * t;
    }
    if (d2 == 0.0) l->zeros++;
    near_push(l, d2, j + 1);
  }
}

/* Row i (0-based, cell coordinates cq): the cells of Chebyshev distance r
 * from cq, a face at a time (dimension f at cq[f] -+ r; dimensions before f
 * strictly inside the ring, those after it anywhere in it), each clipped to
 * the grid; a face or a cell too far for the list is skipped. */
static void walk_ring(const cell_grid *g, const int *cq, int r, int i, const double *q,
                      near_list *l)
{
  int dim = g->dim;
  if (r == 0) {
    int c = 0;
    for (int d = 0; d < dim; d++) c += cq[d] * g->stride[d];
    read_cell(g, c, i, q, l);
    return;
  }
  for (int f = 0; f < dim; f++) {
    for (int side = -1; side <= 1; side += 2) {
      int cf = cq[f] + side * r;
      if (cf < 0 || cf >= g->extent[f]) continue;
      double gf = slab_gap(g, f, cf, q[f]);
      if (beyond(l, gf * gf)) continue;
      int from[GP_NEIGHBORS_CELL_DIMS] = {0, 0, 0}, to[GP_NEIGHBORS_CELL_DIMS] = {0, 0, 0};
      int empty = 0;
      for (int d = 0; d < dim; d++) {
        int inner = d < f ? r - 1 : r;
        from[d] = d == f ? cf : cq[d] - inner;
        to[d] = d == f ? cf : cq[d] + inner;
        if (from[d] < 0) from[d] = 0;
        if (to[d] > g->extent[d] - 1) to[d] = g->extent[d] - 1;
        empty |= from[d] > to[d];
      }
      if (empty) continue;
      /* the face's cells, up to 3 dimensions (unused ones are [0, 0]) */
      for (int c2 = from[2]; c2 <= to[2]; c2++) {
        double g2 = dim > 2 ? slab_gap(g, 2, c2, q[2]) : 0.0;
        double s2 = g2 * g2;
        if (beyond(l, s2)) continue;
        for (int c1 = from[1]; c1 <= to[1]; c1++) {
          double g1 = dim > 1 ? slab_gap(g, 1, c1, q[1]) : 0.0;
          double s1 = s2 + g1 * g1;
          if (beyond(l, s1)) continue;
          for (int c0 = from[0]; c0 <= to[0]; c0++) {
            double g0 = slab_gap(g, 0, c0, q[0]);
            if (beyond(l, s1 + g0 * g0)) continue;
            int c = c0 * g->stride[0] + (dim > 1 ? c1 * g->stride[1] : 0) +
                    (dim > 2 ? c2 * g->stride[2] : 0);
            read_cell(g, c, i, q, l);
          }
        }
      }
    }
  }
}

/* After the rings 0..r around cq: whether no cell beyond them can hold a
 * point that enters the full list (or none is left). */
static int walk_done(const cell_grid *g, const int *cq, int r, const double *q,
                     const near_list *l)
{
  double bound = INFINITY;
  for (int d = 0; d < g->dim; d++) {
    if (cq[d] - r > 0) {
      double gap = q[d] - (g->lo[d] + (cq[d] - r) * g->side);
      if (gap < bound) bound = gap;
    }
    if (cq[d] + r < g->extent[d] - 1) {
      double gap = g->lo[d] + (cq[d] + r + 1) * g->side - q[d];
      if (gap < bound) bound = gap;
    }
  }
  if (bound == INFINITY) return 1;   /* every cell walked */
  bound -= g->margin;
  return bound > 0 && beyond(l, bound * bound);
}

/* The block's rows first..end - 1 against the points 0..end - 1 in cells;
 * returns the block's duplicates. */
static long long search_rows(const cell_grid *g, int first, int end, int m, int k, int threads,
                             int *nbr)
{
  long long dup = 0;
  int dim = g->dim, n = g->n;
#ifdef _OPENMP
#pragma omp parallel for num_threads(gk_omp_threads(threads)) schedule(dynamic, 512) \
    reduction(+ : dup)
#endif
  for (int p = 0; p < end; p++) {
    int i = g->pid[p];
    if (i < first || i == 0) continue;
    near_list l;
    l.got = l.zeros = l.cut = 0;
    l.want = i < m ? i : m;
    const double *q = g->sorted + (size_t) p * dim;
    int cq[GP_NEIGHBORS_CELL_DIMS];
    for (int d = 0; d < dim; d++) cq[d] = cell_coord(g, d, q[d]);
    for (int r = 0;; r++) {
      walk_ring(g, cq, r, i, q, &l);
      if (l.got > l.want || (!l.cut && l.got == l.want)) near_cut(&l);
      if (walk_done(g, cq, r, q, &l)) break;
    }
    near_sort(&l);
    for (int s = 0; s < l.got; s++) nbr[i + (size_t) s * n] = l.who[s];
    dup += l.zeros < k ? l.zeros : k;
  }
  (void) threads;
  return dup;
}

gk_status gp_neighbors_cells(const double *x, int n, int dim, int m, int k_most, int threads,
                             int *nbr, long long *dup, gk_error *err)
{
  cell_grid g;
  memset(&g, 0, sizeof g);
  g.n = n;
  g.dim = dim;
  g.xs = (double *) malloc((size_t) n * dim * sizeof(double));
  g.sorted = (double *) malloc((size_t) n * dim * sizeof(double));
  g.pid = (int *) malloc((size_t) n * sizeof(int));
  g.cell_of = (int *) malloc((size_t) n * sizeof(int));
  double scale = 0, lo[GP_NEIGHBORS_CELL_DIMS], hi[GP_NEIGHBORS_CELL_DIMS];
  if (!g.xs || !g.sorted || !g.pid || !g.cell_of) goto nomem;
  for (int d = 0; d < dim; d++) lo[d] = hi[d] = x[(size_t) d * n];
  for (int first = 0, end; first < n; first = end) {
    if (first > 0 && gk_interrupt_pending()) {
      gk_fail(err, GK_ERR_INTERRUPTED, "the neighbour search was interrupted");
      goto done;
    }
    end = gp_neighbors_block_end(first, n, m);
    /* knn()'s scale of the points 0..end - 1 (a power of two: distances
     * keep their order); the points are divided again only when it changes */
    double spread = 0;
    for (int d = 0; d < dim; d++) {
      for (int i = first; i < end; i++) {
        double v = x[i + (size_t) d * n];
        if (v < lo[d]) lo[d] = v;
        if (v > hi[d]) hi[d] = v;
      }
      double s = hi[d] / 2 - lo[d] / 2;
      if (s > spread) spread = s;
    }
    double now = reduce_knn_scale_of(spread);
    int from = now == scale ? first : 0;
    scale = now;
    for (int i = from; i < end; i++)
      for (int d = 0; d < dim; d++) g.xs[(size_t) i * dim + d] = x[i + (size_t) d * n] / scale;
    if (build_grid(&g, end, m)) goto nomem;
    *dup += search_rows(&g, first, end, m, end < k_most ? end : k_most, threads, nbr);
  }
  goto done;
nomem:
  gk_fail(err, GK_ERR_NOMEM, "out of memory for the neighbour search of %d points", n);
done:
  free(g.xs);
  free(g.sorted);
  free(g.pid);
  free(g.cell_of);
  free(g.start);
  return err->status;
}
