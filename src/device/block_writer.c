#include "device/block_writer.h"
#include "device/gk_omp.h"

gk_block_mode gk_block_writer_mode(gk_write_kind kind)
{
  return kind == GK_WRITE_DENSE ? GK_BLOCKS_FULL : GK_BLOCKS_LOWER;
}

#define MIRROR_TILE 64

/* The output rows [*first, *end) of block column c that the engine computed
 * (kind, local indices) and the output holds (layout, global indices), and
 * its output column *j; 0 when there are none. */
static int column_rows(const gk_block_writer *w, const gk_block *b, size_t c, size_t *j,
                       size_t *first, size_t *end)
{
  size_t jl = b->col0 + c;
  size_t r0 = w->row0 + b->row0;
  size_t computed = w->row0 + gk_write_first_row(w->kind, jl);
  *j = w->col0 + jl;
  size_t held = gk_write_first_row(w->layout, *j);
  *first = r0 > computed ? r0 : computed;
  if (*first < held) *first = held;
  *end = r0 + b->rows;
  return *first < *end;
}

/* Value of output row i of block column c. */
static inline double value_at(const gk_block *b, const void *src, int single, size_t c,
                              size_t i_local)
{
  size_t k = c * b->rows + i_local;
  return single ? (double) ((const float *) src)[k] : ((const double *) src)[k];
}

size_t gk_block_column_span(const gk_block_writer *w, const gk_block *b, size_t c, size_t *dst,
                            size_t *src)
{
  size_t j, first, end, n = w->n_rows;
  if (!column_rows(w, b, c, &j, &first, &end)) return 0;
  *dst = (w->layout == GK_WRITE_DIST ? j * n - j * (j + 1) / 2 - j - 1 : j * n) + first;
  *src = c * b->rows + (first - (w->row0 + b->row0));
  return end - first;
}

/* Column c of the block into the output: contiguous in the source and the
 * destination (a symmetric layout's mirror is mirror_tiles's). */
static void write_column(const gk_block_writer *w, const gk_block *b, const void *src,
                         int single, size_t c)
{
  size_t j, first, end, n = w->n_rows, r0 = w->row0 + b->row0;
  if (!column_rows(w, b, c, &j, &first, &end)) return;
  /* source index of output row i is i (col is shifted by r0) */
  const void *col = single ? (const void *) ((const float *) src + c * b->rows - r0)
                           : (const void *) ((const double *) src + c * b->rows - r0);
  if (w->out_float) {
    float *dst = w->out_float + j * n;
    for (size_t i = first; i < end; i++)
      dst[i] = single ? ((const float *) col)[i] : (float) ((const double *) col)[i];
    return;
  }
  double *dst = w->layout == GK_WRITE_DIST ? w->out + (j * n - j * (j + 1) / 2 - j - 1)
                                           : w->out + j * n;
  if (single) {
    const float *s = (const float *) col;
    for (size_t i = first; i < end; i++) dst[i] = (double) s[i];
  } else {
    const double *s = (const double *) col;
    for (size_t i = first; i < end; i++) dst[i] = s[i];
  }
}

/* The mirror (j, i) of a symmetric layout's entries, in tiles of
 * MIRROR_TILE rows by columns: entry by entry down a column, each write of
 * the mirror lands on another page (a row of the output), and a whole
 * column's worth of pages misses the TLB; a tile touches MIRROR_TILE pages,
 * each MIRROR_TILE values in a row. Parallel over row tiles. */
static void mirror_tiles(const gk_block_writer *w, const gk_block *b, const void *src,
                         int single, int threads)
{
  size_t n = w->n_rows, r0 = w->row0 + b->row0;
  long long tiles = (long long) ((b->rows + MIRROR_TILE - 1) / MIRROR_TILE);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
#endif
  for (long long t = 0; t < tiles; t++) {
    size_t i0 = r0 + (size_t) t * MIRROR_TILE, i1 = i0 + MIRROR_TILE;
    if (i1 > r0 + b->rows) i1 = r0 + b->rows;
    for (size_t c0 = 0; c0 < b->cols; c0 += MIRROR_TILE) {
      size_t c1 = c0 + MIRROR_TILE < b->cols ? c0 + MIRROR_TILE : b->cols;
      for (size_t c = c0; c < c1; c++) {
        size_t j, first, end;
        if (!column_rows(w, b, c, &j, &first, &end)) continue;
        if (first < i0) first = i0;
        if (end > i1) end = i1;
        for (size_t i = first; i < end; i++) {
          double v = value_at(b, src, single, c, i - r0);
          if (w->out_float)
            w->out_float[j + i * n] = (float) v;
          else
            w->out[j + i * n] = v;
        }
      }
    }
  }
  (void) threads;
}

gk_block_writer gk_block_writer_make(gk_write_kind kind, double *out, size_t n_rows, int threads)
{
  return gk_block_writer_band(kind, kind, out, n_rows, 0, 0, threads);
}

gk_block_writer gk_block_writer_band(gk_write_kind kind, gk_write_kind layout, double *out,
                                     size_t n_rows, size_t row0, size_t col0, int threads)
{
  gk_block_writer w = {kind, out, n_rows, threads, NULL, NULL, layout, row0, col0, NULL, NULL,
                       NULL, 0};
  return w;
}

gk_block_writer gk_block_writer_share(const gk_block_writer *w, int parts)
{
  gk_block_writer share = *w;
  int threads = gk_omp_threads(w->threads) / (parts > 0 ? parts : 1);
  share.threads = threads > 0 ? threads : 1;
  return share;
}

void gk_block_write(const gk_block_writer *writer, const gk_block *block, const void *src,
                    int single)
{
  if (writer->reduce) {
    writer->reduce(writer->reduce_ctx, block, src, single);
    return;
  }
  long long cols = (long long) block->cols;
  int threads = gk_omp_threads(writer->threads);
  /* Small blocks are not worth waking a thread team for. Columns in small
   * dynamic chunks: on a diagonal block they shorten along the diagonal. */
  if (block->rows * block->cols < 65536) threads = 1;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16)
#endif
  for (long long c = 0; c < cols; c++) write_column(writer, block, src, single, (size_t) c);
  if (writer->layout == GK_WRITE_SYMMETRIC) mirror_tiles(writer, block, src, single, threads);
  (void) threads;
}

void gk_block_write_triangle(const gk_block_writer *writer, size_t first, size_t m,
                             const double *dist)
{
  long long cols = m > 1 ? (long long) m - 1 : 0;
  size_t n = writer->n_rows;
  int threads = m * m < 131072 ? 1 : gk_omp_threads(writer->threads);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 64)
#endif
  for (long long c = 0; c < cols; c++) {
    /* local column c holds rows c+1 .. m-1; so does global column first + c */
    size_t j = first + (size_t) c, len = m - 1 - (size_t) c;
    const double *src = dist + ((size_t) c * m - (size_t) c * ((size_t) c + 1) / 2);
    double *dst = writer->out + (j * n - j * (j + 1) / 2);
    for (size_t q = 0; q < len; q++) dst[q] = src[q];
  }
  (void) threads;
}
