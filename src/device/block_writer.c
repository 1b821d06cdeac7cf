#include "device/block_writer.h"
#include "device/gk_omp.h"

gk_block_mode gk_block_writer_mode(gk_write_kind kind)
{
  return kind == GK_WRITE_DENSE ? GK_BLOCKS_FULL : GK_BLOCKS_LOWER;
}

/* write_column into a float output: the dense or symmetric layout of a
 * float file (pcf_dist_file); the mirror of a symmetric one included. */
static void write_column_float(const gk_block_writer *w, const void *col, int single, size_t j,
                               size_t first, size_t end)
{
  size_t n = w->n_rows;
  float *dst = w->out_float + j * n;
  for (size_t i = first; i < end; i++) {
    float v = single ? ((const float *) col)[i] : (float) ((const double *) col)[i];
    dst[i] = v;
    if (w->layout == GK_WRITE_SYMMETRIC) w->out_float[j + i * n] = v;
  }
}

/* Column c of the block: the rows the engine computed (kind, local indices)
 * that the output holds (layout, global indices), contiguous in the source
 * and, for dense and dist layouts, in the destination too. */
static void write_column(const gk_block_writer *w, const gk_block *b, const void *src,
                         int single, size_t c)
{
  size_t jl = b->col0 + c, j = w->col0 + jl, n = w->n_rows;
  size_t r0 = w->row0 + b->row0, end = r0 + b->rows, first = r0;
  size_t computed = w->row0 + gk_write_first_row(w->kind, jl), held = gk_write_first_row(w->layout, j);
  if (first < computed) first = computed;
  if (first < held) first = held;
  if (first >= end) return;
  const void *col = single ? (const void *) ((const float *) src + c * b->rows - r0)
                           : (const void *) ((const double *) src + c * b->rows - r0);
  /* source index of output row i is i (col is shifted by r0) */
  if (w->out_float) {
    write_column_float(w, col, single, j, first, end);
    return;
  }
  if (w->layout == GK_WRITE_DENSE || w->layout == GK_WRITE_DIST) {
    double *dst = w->layout == GK_WRITE_DENSE ? w->out + j * n
                                              : w->out + (j * n - j * (j + 1) / 2 - j - 1);
    if (single) {
      const float *s = (const float *) col;
      for (size_t i = first; i < end; i++) dst[i] = (double) s[i];
    } else {
      const double *s = (const double *) col;
      for (size_t i = first; i < end; i++) dst[i] = s[i];
    }
  } else {
    for (size_t i = first; i < end; i++) {
      double v = single ? (double) ((const float *) col)[i] : ((const double *) col)[i];
      w->out[i + j * n] = v;
      w->out[j + i * n] = v;
    }
  }
}

gk_block_writer gk_block_writer_make(gk_write_kind kind, double *out, size_t n_rows, int threads)
{
  return gk_block_writer_band(kind, kind, out, n_rows, 0, 0, threads);
}

gk_block_writer gk_block_writer_band(gk_write_kind kind, gk_write_kind layout, double *out,
                                     size_t n_rows, size_t row0, size_t col0, int threads)
{
  gk_block_writer w = {kind, out, n_rows, threads, NULL, NULL, layout, row0, col0, NULL};
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
  /* Small blocks are not worth waking a thread team for. */
  if (block->rows * block->cols < 65536) threads = 1;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
  for (long long c = 0; c < cols; c++) write_column(writer, block, src, single, (size_t) c);
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
