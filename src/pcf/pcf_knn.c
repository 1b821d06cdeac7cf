#include <stdatomic.h>
#include <stdlib.h>
#include "pcf/pcf_knn.h"
#include "device/gk_omp.h"

#define KNN_TILE 16   /* rows per lock */

/* Sorted lists of the k smallest values offered to each of n items. */
typedef struct {
  size_t n;
  double *values;   /* row-major n x k: an item's list is contiguous */
  int *index;       /* 0-based candidates */
  int *count;
  atomic_int *locks;
} knn_lists;

struct pcf_knn_state {
  int k, symmetric;
  int threads;      /* OpenMP threads for folding a block (<= 0: all) */
  knn_lists rows;   /* one list per row of the block plan */
  knn_lists cols;   /* one per column (column lists only; else n = 0) */
};

static void lock_tile(knn_lists *L, size_t tile)
{
  while (atomic_exchange_explicit(&L->locks[tile], 1, memory_order_acquire)) {
  }
}

static void unlock_tile(knn_lists *L, size_t tile)
{
  atomic_store_explicit(&L->locks[tile], 0, memory_order_release);
}

/* Offers candidate j at `value` to item i's sorted list. */
static inline void offer(knn_lists *L, int k, size_t i, double value, int j)
{
  int c = L->count[i];
  double *v = L->values + i * (size_t) k;
  int *ix = L->index + i * (size_t) k;
  if (value != value) return;   /* NaN is never a neighbour */
  if (c == k) {
    if (value > v[k - 1] || (value == v[k - 1] && j > ix[k - 1])) return;
    c = k - 1;                  /* the last one drops out */
  } else {
    L->count[i]++;
  }
  int q = c;
  while (q > 0 && (v[q - 1] > value || (v[q - 1] == value && ix[q - 1] > j))) {
    v[q] = v[q - 1];
    ix[q] = ix[q - 1];
    q--;
  }
  v[q] = value;
  ix[q] = j;
}

static inline double value_at(const void *src, int single, size_t q)
{
  return single ? (double) ((const float *) src)[q] : ((const double *) src)[q];
}

/* Folds a block into the lists of one side: each row takes the block's
 * columns as candidates, or (by_column) each column takes its rows. Threads
 * take tiles of that side's items, so each list has one writer at a time;
 * both loops read the column-major block contiguously. */
static void fold_side(pcf_knn_state *s, knn_lists *L, int by_column, const gk_block *b,
                      const void *src, int single, int diagonal, int threads)
{
  size_t first = by_column ? b->col0 : b->row0;
  size_t end = first + (by_column ? b->cols : b->rows);
  long long t0 = (long long) (first / KNN_TILE), t1 = (long long) ((end - 1) / KNN_TILE);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
#endif
  for (long long t = t0; t <= t1; t++) {
    size_t lo = (size_t) t * KNN_TILE, hi = lo + KNN_TILE;
    if (lo < first) lo = first;
    if (hi > end) hi = end;
    /* block-local column and row ranges of this tile */
    size_t c0 = by_column ? lo - b->col0 : 0, c1 = by_column ? hi - b->col0 : b->cols;
    size_t r0 = by_column ? 0 : lo - b->row0, r1 = by_column ? b->rows : hi - b->row0;
    lock_tile(L, (size_t) t);
    for (size_t c = c0; c < c1; c++) {
      size_t j = b->col0 + c;
      for (size_t r = r0; r < r1; r++) {
        size_t i = b->row0 + r;
        if (diagonal && j >= i) continue;   /* pairs i > j only */
        double value = value_at(src, single, c * b->rows + r);
        if (by_column) offer(L, s->k, j, value, (int) i);
        else offer(L, s->k, i, value, (int) j);
      }
    }
    unlock_tile(L, (size_t) t);
  }
  (void) threads;
}

static void reduce_block(void *ctx, const gk_block *b, const void *src, int single)
{
  pcf_knn_state *s = (pcf_knn_state *) ctx;
  if (b->rows == 0 || b->cols == 0) return;
  int diagonal = s->symmetric && b->row0 == b->col0;
  /* Small blocks are not worth waking a thread team for. */
  int threads = b->rows * b->cols < 65536 ? 1 : gk_omp_threads(s->threads);
  fold_side(s, &s->rows, 0, b, src, single, diagonal, threads);
  /* symmetric: the columns are rows too; else their own lists, if kept */
  if (s->symmetric) fold_side(s, &s->rows, 1, b, src, single, diagonal, threads);
  else if (s->cols.n) fold_side(s, &s->cols, 1, b, src, single, 0, threads);
}

static int lists_alloc(knn_lists *L, size_t n, int k)
{
  L->n = n;
  size_t cells = (n ? n : 1) * (size_t) (k > 0 ? k : 1);
  L->values = (double *) malloc(cells * sizeof(double));
  L->index = (int *) malloc(cells * sizeof(int));
  L->count = (int *) calloc(n ? n : 1, sizeof(int));
  L->locks = (atomic_int *) calloc(n / KNN_TILE + 1, sizeof(atomic_int));
  if (!L->values || !L->index || !L->count || !L->locks) return 1;
  for (size_t t = 0; t <= n / KNN_TILE; t++) atomic_init(&L->locks[t], 0);
  return 0;
}

static void lists_free(knn_lists *L)
{
  free(L->values);
  free(L->index);
  free(L->count);
  free((void *) L->locks);
}

static void lists_result(const knn_lists *L, int k, double *distance, int *index)
{
  size_t n = L->n;
  for (size_t i = 0; i < n; i++) {
    for (int q = 0; q < k; q++) {
      int have = q < L->count[i];
      distance[i + q * n] = have ? L->values[i * (size_t) k + q] : 0.0;
      index[i + q * n] = have ? L->index[i * (size_t) k + q] + 1 : 0;
    }
  }
}

gk_status pcf_knn_create(size_t n_rows, size_t n_cols, int k, int symmetric,
                         pcf_knn_state **state, gk_error *err)
{
  pcf_knn_state *s = (pcf_knn_state *) calloc(1, sizeof *s);
  *state = s;
  if (!s) return gk_fail(err, GK_ERR_NOMEM, "out of memory for the nearest-neighbour lists");
  s->k = k;
  s->symmetric = symmetric;
  if (lists_alloc(&s->rows, n_rows, k) || (!symmetric && n_cols && lists_alloc(&s->cols, n_cols, k)))
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for the nearest-neighbour lists "
                   "(%lu rows x %d)", (unsigned long) (n_rows + n_cols), k);
  return GK_OK;
}

void pcf_knn_destroy(pcf_knn_state *s)
{
  if (!s) return;
  lists_free(&s->rows);
  lists_free(&s->cols);
  free(s);
}

gk_block_writer pcf_knn_writer(pcf_knn_state *s, int threads)
{
  gk_block_writer w = gk_block_writer_make(s->symmetric ? GK_WRITE_DIST : GK_WRITE_DENSE, NULL,
                                           s->rows.n, threads);
  s->threads = threads;
  w.reduce = reduce_block;
  w.reduce_ctx = s;
  return w;
}

void pcf_knn_result(const pcf_knn_state *s, double *distance, int *index)
{
  lists_result(&s->rows, s->k, distance, index);
}

void pcf_knn_column_result(const pcf_knn_state *s, double *distance, int *index)
{
  lists_result(&s->cols, s->k, distance, index);
}
