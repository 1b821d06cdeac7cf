/*
 * Distance and kernel matrices between piecewise-constant functions (PCFs).
 *
 * A PCF has breakpoints 0 <= t_1 < ... < t_n and values v_1 ... v_n: it is 0
 * on [0, t_1), v_k on [t_k, t_{k+1}) and v_n on [t_n, inf). A set of PCFs is
 * flattened into one breakpoint array with offsets (function f owns entries
 * offset[f] .. offset[f+1]-1 of t and v).
 *
 * The pair integrals (pcf_integrate.h) walk the union of two functions'
 * breakpoints; the matrices are computed blockwise by the device layer's
 * scheduler (device/block_scheduler.h), on the CPU (pcf_cpu.c, OpenMP) or on
 * GPUs (pcf_cuda.cu, a policy of device/block_pipeline.h), and written by a
 * result writer (device/block_writer.h) into R's `dist` vector or a matrix.
 */
#ifndef GK_PCF_H
#define GK_PCF_H

#include <stddef.h>
#include "device/gk_error.h"
#include "device/block_writer.h"
#include "device/block_scheduler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  size_t n;               /* number of functions                */
  const size_t *offset;   /* n + 1 offsets into t and v          */
  const double *t, *v;
} pcf_set;

typedef enum {
  PCF_OP_L1 = 0,      /* int |f - g|                    */
  PCF_OP_L2 = 1,      /* (int |f - g|^2)^(1/2)          */
  PCF_OP_LP = 2,      /* (int |f - g|^p)^(1/p)          */
  PCF_OP_LINF = 3,    /* max |f - g| over intervals of positive length */
  PCF_OP_INNER = 4    /* int f g                        */
} pcf_op_kind;

typedef struct {
  pcf_op_kind kind;
  double p;           /* for PCF_OP_LP */
} pcf_op;

typedef struct {
  int single;             /* compute in float instead of double          */
  int threads;            /* CPU threads (<= 0: all)                      */
  double budget_bytes;    /* output bytes per device (0: from free memory) */
  int progress;           /* print progress lines                         */
  const int *devices;     /* GPUs to use (0-based), for the CUDA engine   */
  int n_devices;
  size_t first_row;       /* rows of x before it are not computed (0: all) */
  /* NULL: the call's own block list. Else a queue shared with the other
   * processes computing the same result (block_scheduler.h): each plans the
   * whole list (first_row 0) and takes blocks from it until none is left;
   * `sharers` of them, for the plan's side. */
  gk_block_queue *queue;
  int sharers;
} pcf_options;

/* The operation for an R `p` (p >= 1, or Inf), or the inner product. */
pcf_op pcf_op_for_p(double p);
pcf_op pcf_op_inner(void);

/* The checks of a set's functions (at least one row; finite; t_1 >= 0;
 * strictly increasing t; in single precision, values float can hold), one
 * function at a time, for the glue that checks each function as it flattens
 * it, while its values are in cache: nonzero when function f (0-based)
 * fails them. pcf_validate_known: the set's verdict, with the first failing
 * function already known (`bad`, or s->n for none); it makes the message,
 * naming the set `arg` (e.g. "x"), and rejects an empty set. */
int pcf_function_bad(const pcf_set *s, size_t f, int single);
gk_status pcf_validate_known(const pcf_set *s, const char *arg, int single, size_t bad,
                             gk_error *err);

/* In single precision breakpoints are rounded to float: the first row
 * (1-based) of function f whose rounded breakpoint is no longer above the
 * one before (or whose positive first breakpoint becomes 0), or 0 when
 * float keeps every interval of f. */
size_t pcf_float_collapse_row(const pcf_set *s, size_t f);

/* Checks that every pair's result is finite: equal last values for finite-p
 * distances, last values 0 for the inner product. y may equal x. */
gk_status pcf_check_tails(const pcf_op *op, const pcf_set *x, const char *arg_x,
                          const pcf_set *y, const char *arg_y, gk_error *err);

/* Result matrix between the functions of x (rows) and y (columns), written by
 * `writer`: GK_WRITE_DIST and GK_WRITE_SYMMETRIC need y == x. With
 * options->first_row > 0 only rows first_row.. are computed (the block
 * plan's row_start): with y == x, a future worker's band of a symmetric
 * result (rows a..b against functions 1..b, lower triangle) as one call.
 * With options->queue, the blocks this process takes from the shared list. */
gk_status pcf_matrix_cpu(const pcf_op *op, const pcf_set *x, const pcf_set *y,
                         const gk_block_writer *writer, const pcf_options *options,
                         gk_error *err);
gk_status pcf_matrix_cuda(const pcf_op *op, const pcf_set *x, const pcf_set *y,
                          const gk_block_writer *writer, const pcf_options *options,
                          gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
