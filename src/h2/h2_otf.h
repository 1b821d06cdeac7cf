/*
 * Matrix-free ("on the fly") H2 products. A Chebyshev H2 matrix as built
 * (h2_tree_build, before any orthogonalization or compression) has coupling
 * blocks S_ij = k(nodes_i, nodes_j) and dense blocks D_ij = k(points_i,
 * points_j) (+ nugget on the diagonal). Neither is stored: both phases run
 * through the reduction engine (reduce/reduce.h, SUM with block-sparse
 * ranges), and only the bases and transfers are kept. The two products are
 * described below.
 */
#ifndef GK_H2_OTF_H
#define GK_H2_OTF_H

#include <stddef.h>
#include "h2/h2.h"
#include "reduce/reduce.h"

/*
 * - coupling: the xhat / yhat trees are one array (h2_hat_rows rows; node i
 *   of level l at rows hat_ptr[l] + i k .. + k), so the Chebyshev nodes of all
 *   nodes, concatenated in that order, are one point set and the coupling
 *   multiply of every level is ONE block-sparse kernel sum over it: clusters
 *   are the nodes, kept pairs each level's admissible list (node numbers
 *   level_ptr[l] + row / col). Rows of levels without blocks have empty lists
 *   (sum 0) and their xhat rows, which the HMV never fills, are not read.
 *   The HMV makes it in one h2_ops.bsr call (coupling_all_levels), so one
 *   engine call per HMV instead of one per level (each GPU call costs a
 *   synchronization and the engine's work list, much of a small product).
 * - dense: one kernel sum over the padded leaf slots (pairs of the
 *   inadmissible leaf list).
 * Both operands are then contiguous (leading dimension = rows): they go to
 * the engine as they are, without a copy, in double (the CPU engine reads
 * host doubles) or in the GPU's precision.
 *
 * Both products are symmetric (one point set against itself, each level's
 * admissible list and the inadmissible leaf list symmetric, every kernel of
 * the vocabulary symmetric): they run as symmetric sums (reduce.h's
 * `symmetric`), so that the GPU evaluates each coupling and off-diagonal
 * dense block once for both of its uses, about half the kernel evaluations
 * (for one right-hand side).
 *
 * The points are the tree's, already divided by the kernel's range: the
 * reductions use range 1, so both forms evaluate gk_kernel_eval on the same
 * scaled coordinates. The nugget is added as nugget * x after the dense sum
 * (the diagonal of the dense phase only; padding rows of x are zero).
 */

#ifdef __cplusplus
extern "C" {
#endif

/* One block-sparse kernel sum: `rows` points (rows x dim, column-major,
 * sorted by cluster) reduced against themselves over `ranges`. */
typedef struct {
  size_t rows;
  const double *points;   /* the nodes of all levels (owned) or the tree's leaf points */
  double *owned;          /* the nodes, when this product owns them           */
  gk_reduce_ranges ranges;
  int *ranges_storage;
  double pairs;           /* kernel evaluations per right-hand side            */
  double pairs_symmetric; /* the same, symmetric on the GPU (one right-hand side) */
} h2_otf_product;

typedef struct h2_otf_s {
  int depth, dim;
  /* 1: both products (h2_otf_build); 0: the dense product only
   * (h2_otf_build_dense), the couplings being stored by the backend: the
   * compressed form of an on-the-fly matrix (h2_compress.h), whose bases are
   * no longer Chebyshev interpolants but whose dense blocks are the kernel's. */
  int couplings_on_the_fly;
  h2_otf_product coupling;    /* over the hat rows (every level's nodes); empty
                                 when the couplings are stored               */
  h2_otf_product dense;       /* over the padded leaf slots                     */
  size_t host_bytes;          /* nodes and ranges                               */
  void *device;               /* the GPU mirror (h2_otf_cuda.cu); NULL on the CPU */
} h2_otf;

/* The products of t (built as a Chebyshev H2 matrix: rank order^dim on every
 * level). Nodes sorted by cluster and the ranges are made once, here. */
gk_status h2_otf_build(const h2_tree *t, h2_otf **out, gk_error *err);
/* The dense product only, for a tree of any ranks (couplings_on_the_fly = 0). */
gk_status h2_otf_build_dense(const h2_tree *t, h2_otf **out, gk_error *err);
void h2_otf_free(h2_otf *o);   /* the GPU mirror too */

/* Kernel evaluations of one HMV of one right-hand side (coupling, dense) on
 * the GPU (gpu != 0: symmetric) or on the CPU (every pair). */
void h2_otf_pairs(const h2_otf *o, int gpu, double *coupling, double *dense);

/* y += A x for the block-sparse product `which` of h2_ops on the CPU:
 * H2_COUPLING (every level: x, y the whole xhat / yhat trees) or H2_DENSE
 * (x, y the padded vectors); x, y in the HMV's precision (single: float),
 * leading dimensions ldx, ldy >= the product's rows. */
gk_status h2_otf_cpu_product(const h2_otf *o, const h2_tree *t, int single, int threads,
                             int which, const void *x, int ldx, void *y, int ldy, int nrhs,
                             gk_error *err);

/* GPU mirror: the nodes and points uploaded to the device in use (called by
 * the GPU backend after entering its GPU); bytes it holds. */
gk_status h2_otf_upload(h2_otf *o, gk_error *err);
size_t h2_otf_device_bytes(const h2_otf *o);
/* The host bytes of the h2_otf a GPU matrix holds (0 for none, and in a
 * CPU-only build): a compressed matrix's dense-only one is made by the
 * compression (h2_compress.h), so the glue learns its size here. */
size_t h2_gpu_otf_host_bytes(const h2_gpu *g);
void h2_otf_device_free(h2_otf *o);

/* The same product on the GPU `gpu`: x and y are device arrays in the HMV's
 * precision, ordered on `stream` (a cudaStream_t), x contiguous (ldx = the
 * product's rows, as the HMV's vectors are). The reduction runs on the
 * engine's stream after `stream` has drained, reading x in place; its result
 * stays on the GPU and is added into y on `stream`. */
gk_status h2_otf_gpu_product(h2_otf *o, const h2_tree *t, int single, int gpu, void *stream,
                             int which, const void *x, int ldx, void *y, int ldy, int nrhs,
                             gk_error *err);

/* Backends built with an h2_otf (which they own from then on, freed with
 * them, also on failure): bases and transfers stored, the block-sparse
 * products on the fly (their h2_ops set coupling_all_levels). Their export
 * (h2.h) evaluates the blocks that are not stored (h2_fill_as_built). With a
 * dense-only h2_otf (h2_otf_build_dense) the couplings are stored: such a
 * matrix comes from h2_*_import (h2.h) or the GPU compression, not from a
 * build. */
gk_status h2_cpu_build_otf(const h2_tree *t, int single, int threads, h2_otf *otf, h2_cpu **out,
                           gk_error *err);
gk_status h2_gpu_build_otf(const h2_tree *t, int single, h2_otf *otf, h2_gpu **out,
                           gk_error *err);

/* ---- the storage choice ("auto") ---------------------------------------- */

/* Why a storage was chosen (h2_matrix(storage = "auto")); codes shown by summary(). */
enum {
  H2_STORAGE_REQUESTED = 0,      /* the user asked for it                        */
  H2_STORAGE_FASTER = 1,         /* the timing model predicts it is faster        */
  H2_STORAGE_MEMORY = 2          /* the stored form would not fit the memory budget */
};

/* Predicted HMV times (ms, one right-hand side) of both forms on the GPU or
 * the CPU, from the rates in h2_otf.c (measured on an H100 / estimated for
 * the CPU), and the storage "auto" picks: on the fly when the stored data
 * (stored_bytes) exceed `available` bytes, else the faster prediction. */
int h2_otf_choose(const h2_tree *t, const h2_otf *o, int single, int gpu, double available,
                  double *ms_stored, double *ms_otf, int *reason);

#ifdef __cplusplus
}
#endif
#endif
