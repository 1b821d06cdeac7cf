#include "device/block_writer.h"
#include "device/gk_omp.h"

gk_block_mode gk_block_writer_mode(gk_write_kind kind)
{
  return kind == GK_WRITE_DENSE ? GK_BLOCKS_FULL : GK_BLOCKS_LOWER;
}

static inline double value_at(const void *src, int single, size_t k)
{
  return single ? (double) ((const float *) src)[k] : ((const double *) src)[k];
}

/* Output column j of the block: rows [first, block end), contiguous in the
 * source and, for dense and dist outputs, in the destination too. */
static void write_column(const gk_block_writer *w, const gk_block *b, const void *src,
                         int single, size_t c)
{
  size_t j = b->col0 + c, n = w->n_rows, end = b->row0 + b->rows;
  size_t first = b->row0;
  if (w->kind == GK_WRITE_DIST && first < j + 1) first = j + 1;
  if (w->kind == GK_WRITE_SYMMETRIC && first < j) first = j;
  const size_t src0 = c * b->rows - b->row0;   /* source index of row i is src0 + i */
  if (w->kind == GK_WRITE_DENSE) {
    double *dst = w->out + j * n;
    for (size_t i = first; i < end; i++) dst[i] = value_at(src, single, src0 + i);
  } else if (w->kind == GK_WRITE_DIST) {
    if (first >= end) return;
    double *dst = w->out + (j * n - j * (j + 1) / 2 - j - 1);
    for (size_t i = first; i < end; i++) dst[i] = value_at(src, single, src0 + i);
  } else {
    for (size_t i = first; i < end; i++) {
      double v = value_at(src, single, src0 + i);
      w->out[i + j * n] = v;
      w->out[j + i * n] = v;
    }
  }
}

gk_block_writer gk_block_writer_make(gk_write_kind kind, double *out, size_t n_rows, int threads)
{
  gk_block_writer w = {kind, out, n_rows, threads, NULL, NULL};
  return w;
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
