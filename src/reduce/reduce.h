/*
 * Tiled kernel reductions (the KeOps map-reduce scheme):
 *
 *   a_i = reduce_{j = 1..N} F(x_i, y_j) (x) b_j      for i = 1..M
 *
 * with F(x, y) = k(x / range, y / range) from the kernel vocabulary
 * (kernels/gk_kernel.h), x M x dim, y N x dim, b N x E, all column-major.
 * The transposed reduction (over i for each j) is the same call with x and y
 * swapped, since every kernel of the vocabulary is symmetric.
 *
 * Reductions and what they write (values: `out`, M x cols, column-major;
 * indices: `index`, M x cols, 1-based, 0 when the reduction was empty):
 *   SUM          sum_j F_ij b_je                                  E columns
 *   MIN, MAX     min_j F_ij, max_j F_ij (+Inf / -Inf when N = 0)  1 column
 *   ARGMIN/MAX   the j of the min / max, ties to the smaller j    1 index column
 *   KMIN         the k smallest F_ij in increasing order and their j
 *                (ties to the smaller j)                          k values + k indices
 *   LOGSUMEXP    log sum_j exp(F_ij) b_je, b >= 0 (b = 1: plain)   E columns
 *   SOFTMAX_SUM  sum_j exp(F_ij) b_je / sum_j exp(F_ij)            E columns (NaN if N = 0)
 * LOGSUMEXP and SOFTMAX_SUM keep a running maximum, so exp never overflows.
 *
 * The CPU engine computes in double precision; the GPU engine in double or
 * single (spec->single), with single-precision sums accumulated tile by tile
 * into double so that long sums stay accurate.
 */
#ifndef GK_REDUCE_H
#define GK_REDUCE_H

#include <stddef.h>
#include "device/gk_error.h"
#include "kernels/gk_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  GK_REDUCE_SUM = 0,
  GK_REDUCE_MIN = 1,
  GK_REDUCE_MAX = 2,
  GK_REDUCE_ARGMIN = 3,
  GK_REDUCE_ARGMAX = 4,
  GK_REDUCE_KMIN = 5,
  GK_REDUCE_LOGSUMEXP = 6,
  GK_REDUCE_SOFTMAX_SUM = 7
} gk_reduction;

/* How the GPU splits the (i, j) plane: automatically, one block per row tile
 * (GPU_1D), or blocks over (row tile, j chunk) with a combining pass (GPU_2D). */
typedef enum { GK_REDUCE_AUTO = 0, GK_REDUCE_1D = 1, GK_REDUCE_2D = 2 } gk_reduce_method;

typedef struct {
  gk_kernel kernel;
  const double *range;     /* dim values: coordinates are divided by them          */
  gk_reduction reduction;
  int k;                   /* KMIN only                                              */
  int single;              /* GPU: compute in float32                                */
  gk_reduce_method method; /* GPU only                                               */
} gk_reduce_spec;

/* A matrix operand: host doubles, or memory already on a GPU (a device
 * matrix from R, stored as double or float, on GPU `gpu`). Column-major
 * rows x cols. The GPU engine runs on the GPU of its device operands (they
 * must share one), else on the active device. */
typedef struct {
  const double *host;
  const void *device;
  int device_single;
  int gpu;              /* 0-based; -1 for host operands */
  size_t rows;
  int cols;
} gk_reduce_operand;

/* Columns of `out` and of `index` for a reduction (e = columns of b). */
int reduce_value_columns(gk_reduction r, int e, int k);
int reduce_index_columns(gk_reduction r, int k);

/* b is NULL for the reductions without weights (MIN ... KMIN); for LOGSUMEXP
 * and SOFTMAX_SUM callers pass a column of ones when the user gave none.
 * reduce_cuda keeps its workspace in the device layer's scratch (kept between
 * calls); a CPU-only build's reduce_cuda fails with GK_ERR_NO_CUDA. */
gk_status reduce_cpu(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                     const gk_reduce_operand *y, const gk_reduce_operand *b,
                     double *out, int *index, int threads, gk_error *err);

gk_status reduce_cuda(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                      const gk_reduce_operand *y, const gk_reduce_operand *b,
                      double *out, int *index, gk_error *err);

/* The same reduction with the rows of x split over several GPUs (0-based
 * numbers), one host thread each; x, y and b must be host operands. The
 * calling thread waits and checks for interrupts, which stop every GPU at its
 * next slice. */
gk_status reduce_cuda_devices(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                              const gk_reduce_operand *y, const gk_reduce_operand *b,
                              double *out, int *index, const int *devices, int n_devices,
                              gk_error *err);


#ifdef __cplusplus
}
#endif
#endif
