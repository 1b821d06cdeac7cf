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
#include "device/gk_device.h"
#include "gpukernels/gk_kernel.h"

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

/*
 * Block-sparse reductions (KeOps' `ranges`): the six arrays, every index
 * 0-based and every range half-open [start, end), int pairs stored as
 * start0, end0, start1, end1, ...
 *
 * For the reduction over y for each row of x (axis 1):
 *   ranges_i     count_i pairs: clusters of rows of x, sorted and not
 *                overlapping (empty ones allowed); rows of x in no cluster
 *                get the reduction's neutral element, as for an empty y;
 *   slices_i     count_i cumulative ends: cluster q reduces over the pairs
 *                redranges_j[slices_i[q - 1] .. slices_i[q]) (0 for q = 0);
 *   redranges_j  slices_i[count_i - 1] pairs: rows of y, sorted and not
 *                overlapping within one cluster's list.
 * The transposed set (ranges_j, slices_j, redranges_i; count_j) describes the
 * same mask for axis 2 (clusters of y, each with its ranges of x).
 *
 * A reduction reads only the first set: a caller reducing over x for each y
 * swaps x and y and passes reduce_ranges_transpose(r). reduce_ranges_build()
 * makes both sets from cluster ranges and a list of kept cluster pairs (what
 * the R helpers and the H2 near field use); callers may also fill the struct
 * from their own arrays (reduce_ranges_check() says what is wrong with them).
 */
typedef struct {
  int count_i;
  const int *ranges_i, *slices_i, *redranges_j;
  int count_j;
  const int *ranges_j, *slices_j, *redranges_i;
} gk_reduce_ranges;

/* A block-sparse work plan kept between reduce_cuda calls over the same
 * ranges and sizes (the matrix-free H2 products run one per HMV). The first
 * call fills it: the ranges checked, their kept pairs, the pieces cut and
 * sorted, and pieces and reduced ranges resident on the engine's GPU; later
 * calls use it instead of checking, cutting, sorting and uploading again.
 * Start from GK_REDUCE_PLAN_EMPTY; the owner frees it with reduce_plan_free on
 * the same GPU, and must not change the ranges while it holds the plan. */
typedef struct {
  gk_device_buffer buf;    /* the pieces (4 ints each), then the reduced ranges */
  int made;                /* 0 until the first call fills it                */
  size_t m, n;             /* the sizes it was made for                      */
  double kept_pairs;
  int piece_rows, npieces; /* npieces 0: the ranges keep every pair (dense) */
  size_t list_max;
  int symmetric;           /* made for a symmetric spec (each list clipped to j >= its rows) */
} gk_reduce_plan;

#define GK_REDUCE_PLAN_EMPTY {GK_DEVICE_BUFFER_EMPTY, 0, 0, 0, 0.0, 0, 0, 0, 0}

void reduce_plan_free(gk_reduce_plan *plan);

/*
 * A user's formula F(x, y) (gk_formula() in R, which translates it to one C
 * expression body): the kernel of a reduction in place of the vocabulary's
 * families. The CPU engine calls `eval` (the body compiled by R's C compiler)
 * for each pair; the GPU engine runs the value functor `functor` (the same
 * body, for T = float or double) that `source` defines, compiled by NVRTC and
 * cached as the built-in kernels are. Both see the points as they are given:
 * no range, no shift (a formula need not depend on differences only), and
 * neither assumes F symmetric; except a folded formula (scale > 0, R's
 * formula_fold.R), a function of differences written for the points times
 * `scale`: the engines shift and scale them as a built-in kernel's (range
 * 1 / scale).
 */
typedef double (*gk_formula_cpu)(const double *x, const double *y, const double *params);
typedef struct {
  gk_formula_cpu eval;     /* CPU, or NULL where only the GPU runs it           */
  const char *source;      /* GPU: a program defining `functor`, or NULL        */
  const char *functor;     /* its qualified name, e.g. "gkformula::F_1f2e"      */
  int nparams;             /* at most GK_FORMULA_MAX_PARAMS (reduce_args.h)     */
  const double *params;
  double scale;            /* > 0: folded (the points times scale), else 0      */
} gk_formula;

typedef struct {
  gk_kernel kernel;        /* with a formula: the linear family (no shift)            */
  const double *range;     /* dim values: coordinates are divided by them          */
  gk_reduction reduction;
  int k;                   /* KMIN only                                              */
  int single;              /* GPU: compute in float32                                */
  gk_reduce_method method; /* GPU only                                               */
  const gk_reduce_ranges *ranges;   /* NULL: dense (every pair)                     */
  /* reduce_cuda only, NULL for none: the values (M x cols doubles, column-major)
   * stay in this array on the engine's GPU instead of being downloaded to `out`
   * (callers whose operands are resident, such as the matrix-free H2 product).
   * The call still returns with its work finished. */
  double *device_out;
  /* reduce_cuda only, NULL for none: with `ranges`, the plan to use or fill. */
  gk_reduce_plan *plan;
  /* 0: the values are F itself. > 0 (MIN and KMIN of the squared distance):
   * root_scale * sqrt(max(F, 0)), knn's distances, computed where the values
   * are finished instead of in a pass over the results. */
  double root_scale;
  /* SUM with `ranges` only: x and y are the same operand and the ranges'
   * mask is symmetric ((i, j) kept iff (j, i) kept; every kernel of the
   * vocabulary is symmetric), so each kernel value off the diagonal blocks
   * serves two sums: a_i += F_ij b_j and a_j += F_ij b_i. The GPU engine
   * evaluates each such pair once for one weight column (about half the
   * kernel evaluations of a product whose clusters are small against their
   * lists, as the H2 products'; reduce_ranges_pairs_symmetric); with more
   * columns, and in the CPU engine, every pair is evaluated as without the
   * flag. Both engines check the preconditions (reduce_check_symmetric). The
   * GPU adds the transposed contributions in an order that varies between
   * runs (atomic adds): its sums are equal to rounding, not bit for bit. */
  int symmetric;
  /* NULL, or the formula that replaces the kernel (range all ones, or
   * 1 / scale when folded). */
  const gk_formula *formula;
} gk_reduce_spec;

/* Whether the engines hand the points to the kernel as given, without the
 * shift to a common point: a formula that is not folded, or a kernel of
 * inner products. */
static inline int gk_reduce_sees_points(const gk_reduce_spec *spec)
{
  return spec->formula ? !(spec->formula->scale > 0) : gk_kernel_uses_inner_product(&spec->kernel);
}

/* A matrix operand: host doubles, or memory already on a GPU (a device
 * matrix from R, stored as double or float, on GPU `gpu`, minus its
 * device_centre: device/device_matrix.h). Column-major rows x cols. The GPU
 * engine runs on the GPU of its device operands (they must share one), else
 * on the active device. Far from the origin the engines shift points to a
 * common point of the data in double before scaling them (device operands
 * by the difference of their centre and that point), so that differences
 * keep their digits. */
typedef struct {
  const double *host;
  const void *device;
  int device_single;
  int gpu;              /* 0-based; -1 for host operands */
  size_t rows;
  int cols;
  const double *device_centre;   /* cols values added back, or NULL: none */
} gk_reduce_operand;

/* Columns of `out` and of `index` for a reduction (e = columns of b). */
int reduce_value_columns(gk_reduction r, int e, int k);
int reduce_index_columns(gk_reduction r, int k);

/* knn's distances from the k smallest squared distances: out = sqrt(max(sq, 0))
 * times scale (the power of two the points were divided by), in one pass. */
void reduce_distances_from_squares(const double *squares, size_t n, double scale, double *out);

/* knn's scale for column-major points x (m x dim) and y (n x dim): 1, or the
 * power of two near their largest coordinate spread when that spread is
 * beyond 2^399 or below 2^-401 (squared distances would overflow or
 * underflow); dividing by it is exact, so neighbours do not change. */
double reduce_knn_scale(const double *x, size_t m, const double *y, size_t n, int dim);
/* The same from the largest of the dimensions' spreads, each (hi / 2 - lo / 2). */
double reduce_knn_scale_of(double spread);

/* Writes host points (rows x cols, column-major, finite) into dst as floats
 * (single) or doubles: column d minus origin[d], in double, times scale[d]
 * (each when given), then rounded. *largest (when given) becomes at least the
 * largest |value| written. False when a value does not fit (beyond float's
 * range). */
int reduce_pack_points(void *dst, int single, const double *src, size_t rows, int cols,
                       const double *origin, const double *scale, double *largest);

/* knn's squared distances are formed after one common scale
 * (reduce_knn_scale): where the points span many orders of magnitude (1e-300
 * and 1e300 together) the squares of the small distances fall below the
 * smallest normal double and lose their digits, so distinct points may tie at
 * distance 0 in the wrong order. This finds the rows of a knn result (index:
 * m x k, 1-based, na_index where none; distance: m x k) where that can matter
 * -- a listed neighbour whose scaled square is below DBL_MIN and which is not
 * the same point -- and searches them again exactly (ties to the smaller
 * index), in place; *changed says whether any row was. Rows without such a
 * neighbour are already right: any point left out has a square at least the
 * k-th, which is normal. scale: reduce_knn_scale(x, m, y, n, dim) when the
 * caller has it, else 0 (computed here). */
gk_status reduce_knn_refine(const double *x, size_t m, const double *y, size_t n, int dim,
                            size_t k, double scale, int na_index, int *index, double *distance,
                            int *changed, gk_error *err);

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

/* Compiles ahead of their first calls the GPU kernels (run-time compiled,
 * device/gk_jit.h) that `count` reductions would use on the GPU in use:
 * specs[i] (kernel, reduction, k, single, symmetric) over dims[i] coordinates
 * with cols[i] weight columns, block-sparse when ranged[i], rows[i] rows per
 * thread (1, 2 or 4: the gaussian sums), on up to `threads` host threads.
 * check_arch > 0: only compile them for that compute capability (10 major +
 * minor), without a GPU and keeping nothing (a check of the sources). */
gk_status reduce_cuda_warmup(int count, const gk_reduce_spec *specs, const int *dims,
                             const int *cols, const int *ranged, const int *rows, int threads,
                             int check_arch, gk_error *err);

/* ---- block-sparse ranges (reduce_ranges.c) ---- */

/* GK_ERR_INPUT with a message naming the first bad entry when the first set
 * of r is not valid for m rows of x and n rows of y. Both engines call it. */
gk_status reduce_ranges_check(const gk_reduce_ranges *r, size_t m, size_t n, gk_error *err);

/* GK_ERR_INPUT naming what is wrong unless a symmetric reduction (spec->
 * symmetric) may run: SUM, ranges given, x and y one operand, and the first
 * set of the ranges a symmetric mask (checked pair of ranges by pair of
 * ranges, not point by point: about (kept ranges) x log(clusters) steps).
 * Call after reduce_ranges_check. */
gk_status reduce_check_symmetric(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                                 const gk_reduce_operand *y, gk_error *err);
/* The mask part of it alone: GK_ERR_INPUT unless the first set of r (checked
 * by reduce_ranges_check) is a symmetric mask. */
gk_status reduce_ranges_check_symmetric(const gk_reduce_ranges *r, gk_error *err);

/* Whether x and y are one operand (the same host or device memory, same
 * shape): the GPU engine then uploads it once, and symmetric sums need it. */
int reduce_same_operand(const gk_reduce_operand *x, const gk_reduce_operand *y);

/* The same mask for the transposed reduction (the two sets swapped). */
gk_reduce_ranges reduce_ranges_transpose(const gk_reduce_ranges *r);

/* Number of (i, j) pairs the first set of r keeps (cluster rows x list rows). */
double reduce_ranges_pairs(const gk_reduce_ranges *r);

/* The pairs a symmetric sum over r evaluates on the GPU (one weight column):
 * each cluster's rows against its list from its first row on. The
 * engine's pieces clip at their own first row, so clusters of more than 64
 * rows evaluate somewhat fewer. */
double reduce_ranges_pairs_symmetric(const gk_reduce_ranges *r);

/* Both sets from kx clusters of x (pairs ranges_x) and ky clusters of y
 * (pairs ranges_y), each sorted and not overlapping, and npairs kept cluster
 * pairs (pair_x[p], pair_y[p]), 0-based, in any order, repeats allowed.
 * Within a list, ranges of adjacent kept clusters are merged into one.
 * On success *storage holds every array of *out: free it with free(). */
gk_status reduce_ranges_build(int kx, const int *ranges_x, int ky, const int *ranges_y,
                              size_t npairs, const int *pair_x, const int *pair_y,
                              gk_reduce_ranges *out, int **storage, gk_error *err);

/* The engines' work units: the rows [0, m) cut into pieces of at most
 * max_rows rows (0: no limit), 4 ints each (row start, row end, first and
 * end index of its list in redranges_j). Rows in no cluster form pieces with
 * an empty list; adjacent clusters with equal lists share pieces (so an
 * all-true mask gives the dense partition). *pieces is malloc'd. */
gk_status reduce_ranges_pieces(const gk_reduce_ranges *r, size_t m, int max_rows,
                               int **pieces, int *count, gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
