#include <stdatomic.h>
#include <stdlib.h>
#include "pcf/pcf_knn.h"
#include "device/gk_omp.h"

#define KNN_TILE 16   /* rows per lock */

struct pcf_knn_state {
  size_t n_rows;
  int k, symmetric;
  long long exclude_offset;
  int threads;      /* OpenMP threads for folding a block (<= 0: all) */
  double *values;   /* row-major n_rows x k: a row's list is contiguous */
  int *index;       /* 0-based columns */
  int *count;
  atomic_int *locks;
};

static void lock_tile(pcf_knn_state *s, size_t tile)
{
  while (atomic_exchange_explicit(&s->locks[tile], 1, memory_order_acquire)) {
  }
}

static void unlock_tile(pcf_knn_state *s, size_t tile)
{
  atomic_store_explicit(&s->locks[tile], 0, memory_order_release);
}

/* Offers column j at `value` to row i's sorted list. */
static inline void offer(pcf_knn_state *s, size_t i, double value, int j)
{
  int k = s->k, c = s->count[i];
  double *v = s->values + i * (size_t) k;
  int *ix = s->index + i * (size_t) k;
  if (value != value) return;   /* NaN is never a neighbour */
  if (c == k) {
    if (value > v[k - 1] || (value == v[k - 1] && j > ix[k - 1])) return;
    c = k - 1;                  /* the last one drops out */
  } else {
    s->count[i]++;
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

/* Each row of the block takes the block's columns as candidates. */
static void rows_side(pcf_knn_state *s, const gk_block *b, const void *src, int single,
                      int diagonal, int threads)
{
  size_t end = b->row0 + b->rows;
  long long t0 = (long long) (b->row0 / KNN_TILE), t1 = (long long) ((end - 1) / KNN_TILE);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
#endif
  for (long long t = t0; t <= t1; t++) {
    size_t i0 = (size_t) t * KNN_TILE, i1 = i0 + KNN_TILE;
    if (i0 < b->row0) i0 = b->row0;
    if (i1 > end) i1 = end;
    lock_tile(s, (size_t) t);
    for (size_t c = 0; c < b->cols; c++) {
      size_t j = b->col0 + c;
      for (size_t i = i0; i < i1; i++) {
        if (diagonal && j >= i) continue;   /* pairs i > j only */
        if (s->exclude_offset >= 0 && (long long) j == (long long) i + s->exclude_offset) continue;
        offer(s, i, value_at(src, single, c * b->rows + (i - b->row0)), (int) j);
      }
    }
    unlock_tile(s, (size_t) t);
  }
  (void) threads;
}

/* Symmetric mode: each column of the block takes the block's rows. */
static void columns_side(pcf_knn_state *s, const gk_block *b, const void *src, int single,
                         int diagonal, int threads)
{
  size_t end = b->col0 + b->cols;
  long long t0 = (long long) (b->col0 / KNN_TILE), t1 = (long long) ((end - 1) / KNN_TILE);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
#endif
  for (long long t = t0; t <= t1; t++) {
    size_t j0 = (size_t) t * KNN_TILE, j1 = j0 + KNN_TILE;
    if (j0 < b->col0) j0 = b->col0;
    if (j1 > end) j1 = end;
    lock_tile(s, (size_t) t);
    for (size_t j = j0; j < j1; j++) {
      size_t c = j - b->col0;
      for (size_t i = diagonal ? j + 1 : b->row0; i < b->row0 + b->rows; i++)
        offer(s, j, value_at(src, single, c * b->rows + (i - b->row0)), (int) i);
    }
    unlock_tile(s, (size_t) t);
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
  rows_side(s, b, src, single, diagonal, threads);
  if (s->symmetric) columns_side(s, b, src, single, diagonal, threads);
}

gk_status pcf_knn_create(size_t n_rows, int k, int symmetric, long long exclude_offset,
                         pcf_knn_state **state, gk_error *err)
{
  pcf_knn_state *s = (pcf_knn_state *) calloc(1, sizeof *s);
  *state = s;
  if (!s) return gk_fail(err, GK_ERR_NOMEM, "out of memory for the nearest-neighbour lists");
  s->n_rows = n_rows;
  s->k = k;
  s->symmetric = symmetric;
  s->exclude_offset = symmetric ? -1 : exclude_offset;
  size_t cells = (n_rows ? n_rows : 1) * (size_t) (k > 0 ? k : 1);
  s->values = (double *) malloc(cells * sizeof(double));
  s->index = (int *) malloc(cells * sizeof(int));
  s->count = (int *) calloc(n_rows ? n_rows : 1, sizeof(int));
  s->locks = (atomic_int *) calloc(n_rows / KNN_TILE + 1, sizeof(atomic_int));
  if (!s->values || !s->index || !s->count || !s->locks)
    return gk_fail(err, GK_ERR_NOMEM, "out of memory for the nearest-neighbour lists "
                   "(%lu rows x %d)", (unsigned long) n_rows, k);
  for (size_t t = 0; t <= n_rows / KNN_TILE; t++) atomic_init(&s->locks[t], 0);
  return GK_OK;
}

void pcf_knn_destroy(pcf_knn_state *s)
{
  if (!s) return;
  free(s->values);
  free(s->index);
  free(s->count);
  free((void *) s->locks);
  free(s);
}

gk_block_writer pcf_knn_writer(pcf_knn_state *s, int threads)
{
  gk_block_writer w = gk_block_writer_make(s->symmetric ? GK_WRITE_DIST : GK_WRITE_DENSE, NULL,
                                           s->n_rows, threads);
  s->threads = threads;
  w.reduce = reduce_block;
  w.reduce_ctx = s;
  return w;
}

void pcf_knn_result(const pcf_knn_state *s, double *distance, int *index)
{
  size_t n = s->n_rows;
  for (size_t i = 0; i < n; i++) {
    for (int q = 0; q < s->k; q++) {
      int have = q < s->count[i];
      distance[i + q * n] = have ? s->values[i * (size_t) s->k + q] : 0.0;
      index[i + q * n] = have ? s->index[i * (size_t) s->k + q] + 1 : 0;
    }
  }
}
