/*
 * The CPU engine: the same block list as the GPU (device/block_scheduler.h),
 * with cache-sized blocks, OpenMP over the columns of a block, a check for a
 * user interrupt and a progress line between blocks, and the same result
 * writers. Every pair runs the shared walk of pcf_integrate.h.
 */
#include <stdlib.h>
#include "pcf/pcf.h"
#include "pcf/pcf_integrate.h"
#include "device/block_progress.h"
#include "device/gk_hooks.h"
#include "device/gk_omp.h"
#include "device/gk_shared.h"

/* 256 x 256 pairs: both bands' functions (~2 x 256 x 8 KB for average
 * lengths in double) stay in a core's L2 while the block is computed. */
#define PCF_CPU_BLOCK_ELEMENTS ((size_t) 256 * 256)

typedef struct {
  int op;
  double p;
  const void *x, *y;              /* packed intervals */
  const size_t *x_off, *y_off;
  gk_write_kind kind;
} cpu_job;

/* Column c of a block, rows from the first the writer needs; op is a constant
 * at each call site below, so each case compiles to its own loop. */
#define PCF_DEFINE_COLUMN(SUFFIX, INTERVAL)                                        \
  static inline __attribute__((always_inline)) void column_##SUFFIX(                     \
      int op, const cpu_job *job, const gk_block *b, size_t c, double *out)                \
  {                                                                                      \
    size_t j = b->col0 + c, first = gk_write_first_row(job->kind, j);                    \
    const INTERVAL *g = (const INTERVAL *) job->y + job->y_off[j];                       \
    const INTERVAL *xs = (const INTERVAL *) job->x;                                      \
    for (size_t i = first > b->row0 ? first : b->row0; i < b->row0 + b->rows; i++)       \
      out[i - b->row0 + c * b->rows] =                                                   \
          pcf_pair_##SUFFIX(op, xs + job->x_off[i], g, job->p);                   \
  }                                                                                      \
  static void block_##SUFFIX(const cpu_job *job, const gk_block *b, double *out,           \
                             int threads)                                                \
  {                                                                                      \
    long long cols = (long long) b->cols;                                                \
    _Pragma("omp parallel for num_threads(threads) schedule(dynamic, 1)")                \
    for (long long c = 0; c < cols; c++) {                                               \
      switch (job->op) {                                                                 \
      case PCF_OP_L1: column_##SUFFIX(PCF_OP_L1, job, b, (size_t) c, out); break;        \
      case PCF_OP_L2: column_##SUFFIX(PCF_OP_L2, job, b, (size_t) c, out); break;        \
      case PCF_OP_LP: column_##SUFFIX(PCF_OP_LP, job, b, (size_t) c, out); break;        \
      case PCF_OP_LINF: column_##SUFFIX(PCF_OP_LINF, job, b, (size_t) c, out); break;    \
      default: column_##SUFFIX(PCF_OP_INNER, job, b, (size_t) c, out); break;            \
      }                                                                                  \
    }                                                                                    \
    (void) threads;                                                                      \
  }

PCF_DEFINE_COLUMN(d, pcf_interval_d)
PCF_DEFINE_COLUMN(f, pcf_interval_f)

/* Packs a whole set; *data and *offsets are malloc'd. */
static gk_status pack_all(const pcf_set *s, int single, int threads, void **data,
                          size_t **offsets, gk_error *err)
{
  size_t size = single ? sizeof(pcf_interval_f) : sizeof(pcf_interval_d);
  *data = malloc(pcf_packed_size(s, 0, s->n) * size);
  *offsets = (size_t *) malloc((s->n + 1) * sizeof(size_t));
  if (!*data || !*offsets) return gk_fail(err, GK_ERR_NOMEM, "out of memory packing the PCFs");
  pcf_pack(s, 0, NULL, s->n, single, *data, *offsets, threads);
  return GK_OK;
}

gk_status pcf_matrix_cpu(const pcf_op *op, const pcf_set *x, const pcf_set *y,
                         const gk_block_writer *writer, const pcf_options *options,
                         gk_error *err)
{
  int single = options->single, threads = gk_omp_threads(options->threads);
  size_t elem = sizeof(double);   // results are double in both precisions
  void *xp = NULL, *yp = NULL, *buf = NULL, *handed = NULL;
  size_t *xo = NULL, *yo = NULL, count = 0, max_rows, max_cols, max_elements;
  gk_block *blocks = NULL;
  gk_block_plan_config cfg = {x->n, y->n, gk_block_writer_mode(writer->kind),
                              PCF_CPU_BLOCK_ELEMENTS, 1, 0, options->first_row};
  gk_block_progress progress;
  gk_block_queue own = {0, 0, 0}, *queue = options->queue ? options->queue : &own;
  size_t taken = 0;
  cpu_job job;

  if (options->budget_bytes > 0) cfg.max_elements = (size_t) (options->budget_bytes / 2 / elem);
  if (cfg.max_elements < 1) cfg.max_elements = 1;
  /* Planned first: a taker of a shared list whose blocks are too large here packs nothing. */
  if (gk_block_plan_queued(&cfg, options->queue, &blocks, &count, NULL, err) || !count ||
      pack_all(x, single, threads, &xp, &xo, err) ||
      (y != x && pack_all(y, single, threads, &yp, &yo, err)))
    goto fail;
  gk_block_extents(blocks, count, &max_rows, &max_cols, &max_elements);
  size_t buf_bytes = (max_elements ? max_elements : 1) * elem;
  /* A future worker's blocks go to its caller in place, from memory it offers. */
  handed = writer->hands_over ? gk_shared_scratch_take(buf_bytes) : NULL;
  buf = handed ? handed : malloc(buf_bytes);
  if (!buf) {
    gk_fail(err, GK_ERR_NOMEM, "out of memory for a block of results");
    goto fail;
  }

  job.op = op->kind;
  job.p = op->p;
  job.x = xp;
  job.x_off = xo;
  job.y = y != x ? yp : xp;
  job.y_off = y != x ? yo : xo;
  job.kind = writer->kind;
  gk_block_progress_start(&progress, "pcf (CPU)", count, options->progress);
  for (size_t k = gk_block_take(queue); k < count; k = gk_block_take(queue)) {
    if (gk_interrupt_pending()) {
      gk_fail(err, GK_ERR_INTERRUPTED, "stopped after %lu of %lu blocks", (unsigned long) taken,
              (unsigned long) count);
      goto fail;
    }
    if (single) block_f(&job, &blocks[k], (double *) buf, threads);
    else block_d(&job, &blocks[k], (double *) buf, threads);
    gk_block_write(writer, &blocks[k], buf, 0);
    gk_block_progress_update(&progress, ++taken, 0);
  }
  if (taken) gk_block_progress_update(&progress, taken, 1);
fail:
  free(xp);
  free(yp);
  free(xo);
  free(yo);
  if (handed) gk_shared_scratch_put();
  else free(buf);
  free(blocks);
  return err->status;
}
