/*
 * H2 covariance matrices (Boukaram, Turkiyyah & Keyes, "Hierarchical matrix
 * operations on GPUs"): the structure built on the host (h2_tree.c), the
 * matrix data evaluated by a backend (h2_cpu.c / h2_cuda.cu), and the
 * mat-vec written once (h2_hmv.c) over a small batched-BLAS interface
 * (h2_ops) that each backend implements.
 */
#ifndef GK_H2_H
#define GK_H2_H

#include <stddef.h>
#include "device/gk_error.h"
#include "gpukernels/gk_kernel.h"

/*
 * Layout (all column-major, 0-based):
 * - The cluster tree is a complete binary tree of depth q: level l holds the
 *   2^l nodes level_ptr[l] .. level_ptr[l+1]-1, flattened as head / next /
 *   parent arrays. Every leaf (level q) has a padded slot of leaf_size rows;
 *   point slots that hold no point are zero in every leaf basis and dense block,
 *   so all leaf products have one size (uniform batches, as in the paper).
 * - Bases are tensor Chebyshev interpolants of `order` points per dimension,
 *   rank order^dim when built; orthogonalization and compression (h2_compress.h)
 *   give every level l its own rank k_l (level_rank). Leaf bases U (m x k_q
 *   per leaf), transfer matrices E (k_l x k_{l-1} per node of level l >= 1:
 *   U_parent = [U_c1 E_c1; U_c2 E_c2]; level 0 keeps an unused k_0 x k_0 slot).
 * - Coupling matrices S (k_l x k_l) of the admissible blocks of level l and the
 *   m x m dense leaf blocks are stored per level as block-sparse rows (h2_bsr).
 * - Offsets of each level in E, S and the xhat / yhat trees: transfer_ptr,
 *   coupling_ptr, hat_ptr (in entries; with one rank they are the uniform layout).
 */

#ifdef __cplusplus
extern "C" {
#endif

/* One block-sparse matrix (a level of coupling blocks, or the dense blocks).
 * Blocks are stored "slot-major": slot t holds the t-th block of every row
 * that has more than t, so the blocks of one slot write distinct rows and
 * can run as one conflict-free batch. row_ptr / row_blocks list each row's
 * blocks (storage indices) for row-parallel loops. Row and column indices are
 * local to the level. */
typedef struct {
  int n_rows;
  int n_blocks;
  int n_slots;
  int *row;          /* n_blocks: block row of each stored block    */
  int *col;          /* n_blocks: block column                        */
  int *slot_ptr;     /* n_slots + 1: storage range of each slot        */
  int *row_ptr;      /* n_rows + 1                                     */
  int *row_blocks;   /* n_blocks: storage index, grouped by row        */
} h2_bsr;

typedef struct {
  int n, dim, order, rank, leaf_size, depth;  /* rank = order^dim (as built); depth q */
  double eta;                                 /* admissibility parameter        */
  double nugget;
  gk_kernel kernel;
  int n_nodes, n_leaves;
  int top_level;        /* first level with coupling blocks (depth+1 if none)  */
  int *level_ptr;       /* depth + 2                                            */
  int *head, *next, *parent;                 /* n_nodes; -1 for none            */
  int *node_start, *node_count;              /* each node's range of tree order */
  double *center, *half;                     /* n_nodes x dim: interpolation box*/
  int *slot_of_point;   /* n: padded slot (leaf * leaf_size + row) of each point */
  double *leaf_points;  /* (n_leaves * leaf_size) x dim, scaled coordinates   */
  int *leaf_count;      /* n_leaves: points in each leaf                        */
  h2_bsr *coupling;     /* depth + 1 levels                                     */
  size_t *coupling_offset;  /* depth + 2: first block of each level in S        */
  h2_bsr dense;         /* leaf level                                           */
  int *level_rank;      /* depth + 1: rank k_l of the bases of level l          */
  size_t *transfer_ptr; /* depth + 2: first entry of level l's transfers in E   */
  size_t *coupling_ptr; /* depth + 2: first entry of level l's couplings in S   */
  size_t *hat_ptr;      /* depth + 2: first row of level l in the xhat/yhat trees */
  /* A part of a split matrix (h2_tree_restrict) has blocks only in the rows
   * of leaves part_first_leaf .. part_end_leaf - 1, and its product only
   * expands those; part_end_leaf 0 (a whole tree): every leaf. */
  int part_first_leaf, part_end_leaf;
} h2_tree;

/* The kernels an H2 matrix can represent: covariances that are smooth
 * functions of the distance away from 0 (not `linear`, a function of the
 * inner product, nor `squared_distance`, which grows with the distance). */
static inline int h2_kernel_supported(gk_kernel_family family)
{
  /* The covariances and their range derivatives (GP gradients): smooth away
   * from d = 0. The great-circle exponential is also not smooth at
   * antipodal pairs (d = 2 rho), where it is exp(-pi rho): tiny unless the
   * range is a sizeable part of the radius, and then in the measured error. */
  int base = (int) family >= (int) GK_KERNEL_DLOGRANGE ? (int) family - (int) GK_KERNEL_DLOGRANGE
                                                       : (int) family;
  return gk_kernel_code_valid((int) family) && gk_kernel_has_dlogrange(base);
}

/* Builds the structure for n points (n x dim, column-major, already divided
 * by the kernel's range). Blocks (i, j) are admissible when
 *   max(diam B_i, diam B_j) <= eta * dist(B_i, B_j)
 * for the bounding boxes B of the clusters. */
gk_status h2_tree_build(h2_tree *t, const double *points, int n, int dim, int leaf_size,
                        int order, double eta, const gk_kernel *kernel, double nugget,
                        int threads, gk_error *err);
void h2_tree_free(h2_tree *t);
/* Sets the rank of every level (depth + 1 values >= 1) and the offsets that follow. */
void h2_tree_set_ranks(h2_tree *t, const int *ranks);
/* A deep copy of the structure (ranks included). */
gk_status h2_tree_copy(h2_tree *dst, const h2_tree *src, gk_error *err);
/* The tree h2_tree_build makes at `order` (with `nugget`), copied from src,
 * built by it for the same points, leaf_size, eta and kernel at any order:
 * a search over orders clusters and traverses once (h2_tree_copy.c). */
gk_status h2_tree_for_order(h2_tree *dst, const h2_tree *src, int order, double nugget,
                            gk_error *err);
/* A copy of src with only the coupling and dense blocks whose row node's
 * first leaf is in [first_leaf, end_leaf) (bases, transfers, nodes and ranks
 * unchanged): the part of the matrix whose products that range of leaves
 * owns. Summed over a partition of the leaves, the parts' products are the
 * matrix's (a matrix split over GPUs, h2_matrix.h). */
gk_status h2_tree_restrict(h2_tree *dst, const h2_tree *src, int first_leaf, int end_leaf,
                           gk_error *err);
/* Cuts t's leaves into at most `parts` consecutive ranges (bounds[p] ..
 * bounds[p + 1]; returns their count) of whole nodes of the top coupling
 * level, with about equal shares of the stored block entries: every block's
 * rows then lie in one range, so each part's product is zero outside its
 * own rows (contiguous in h2_tree_point_order). */
int h2_tree_split_leaves(const h2_tree *t, int parts, int *bounds);
/* Fails (GK_ERR_INPUT) when t's depth, leaf_size and rank are too large for
 * the int indices of the padded vectors and the xhat / yhat trees. */
gk_status h2_tree_check_size(const h2_tree *t, gk_error *err);

/* Sizes in entries. */
size_t h2_basis_entries(const h2_tree *t);     /* U          */
size_t h2_transfer_entries(const h2_tree *t);  /* E          */
size_t h2_coupling_entries(const h2_tree *t);  /* S          */
size_t h2_dense_entries(const h2_tree *t);     /* dense      */
size_t h2_hat_rows(const h2_tree *t);          /* rows of the xhat / yhat trees */

/* Bytes of the structure (host), and of the matrix data U, E, S, D in a
 * backend's memory: what an h2matrix holds, for memory accounting. */
size_t h2_tree_bytes(const h2_tree *t);
size_t h2_data_bytes(const h2_tree *t, int single);

/* Pointers to the matrix data in a backend's memory (host or device). */
typedef struct {
  void *U, *E, *S, *D;
} h2_data;

/* HMV workspace for nrhs right-hand sides in a backend's memory: padded
 * permuted vectors (n_leaves*m x nrhs) and the trees xhat, yhat (n_nodes*k x nrhs). */
typedef struct {
  void *xp, *yp, *xhat, *yhat;
} h2_work;

enum { H2_STREAM_LOWRANK = 0, H2_STREAM_DENSE = 1 };
enum { H2_COUPLING = 0, H2_DENSE = 1 };
/* The `level` of an h2_ops.bsr call that multiplies the coupling blocks of
 * every level at once (backends with coupling_all_levels set). */
enum { H2_ALL_LEVELS = -1 };

/* The batched linear algebra a backend provides to the HMV. */
typedef struct {
  void *ctx;
  size_t elsize;   /* 8 (double) or 4 (float) */
  /* C_i = op(A_i) B_i + beta C_i, i < count, pointers advancing by the strides
   * (in elements). op = transpose when trans_a. */
  gk_status (*gemm_strided)(void *ctx, int stream, int trans_a, int m, int n, int k,
                            const void *a, int lda, size_t stride_a,
                            const void *b, int ldb, size_t stride_b, double beta,
                            void *c, int ldc, size_t stride_c, int count, gk_error *err);
  /* One level of transfers, both children of each of `parents` nodes: child
   * i = 2p + c (c = 0, 1) of parent p has the kc x kp transfer E_i = e + i kc kp
   * and the rows child + i kc, parent p the rows parent + p kp (leading dim ld):
   *   up:    x = children, y = parents:  y_p = E_2p^T x_2p + E_2p+1^T x_2p+1
   *   down:  x = parents, y = children:  y_i += E_i x_(i / 2)                 */
  gk_status (*transfer)(void *ctx, int stream, int up, int kc, int kp, int nrhs, const void *e,
                        const void *x, void *y, int ld, int parents, gk_error *err);
  /* y_row += sum over the blocks of `which` at `level` of A_b x_col (blocks of
   * size bs x bs; x and y hold rows * bs entries per column, leading dims ld). */
  gk_status (*bsr)(void *ctx, int stream, int which, int level, const void *values, int bs,
                   const void *x, int ldx, void *y, int ldy, int nrhs, gk_error *err);
  gk_status (*zero)(void *ctx, int stream, void *p, size_t entries, gk_error *err);
  gk_status (*fork)(void *ctx, gk_error *err);   /* dense stream waits for the input  */
  gk_status (*join)(void *ctx, gk_error *err);   /* low-rank stream waits for dense   */
  /* Nonzero: the tree multiply is one bsr call (H2_COUPLING, level
   * H2_ALL_LEVELS, values = data->S, bs = 0) over the whole xhat / yhat trees
   * (x = xhat, y = yhat, ldx = ldy = h2_hat_rows), rows of levels without
   * blocks left as they are, instead of one call per level (the on-the-fly
   * backends, h2_otf.h: one kernel sum over the nodes of every level; the GPU
   * with small blocks: one launch of h2_gemv.cuh over every level's rows). */
  int coupling_all_levels;
  /* Nonzero: the dense product is issued after the low-rank phases, which
   * then run on the GPU while it keeps the host (the on-the-fly dense
   * product waits for the reduction engine). */
  int dense_last;
} h2_ops;

/* yp = A xp for the padded permuted vectors in `w` (the algorithm of the
 * paper: dense product overlapped with upsweep, tree multiply, downsweep). */
gk_status h2_hmv(const h2_tree *t, const h2_ops *ops, const h2_data *data, const h2_work *w,
                 int nrhs, gk_error *err);

/* CPU backend: data in host memory, filled by h2_cpu_build. */
typedef struct h2_cpu h2_cpu;
gk_status h2_cpu_build(const h2_tree *t, int single, int threads, h2_cpu **out, gk_error *err);
gk_status h2_cpu_matmul(const h2_tree *t, h2_cpu *c, const double *x, int nrhs, double *y,
                        gk_error *err);
void h2_cpu_free(h2_cpu *c);

/* The matrix data in double on the host (each array sized by h2_*_entries),
 * for orthogonalization and compression (h2_compress.h). export copies a
 * backend's data out (widening floats); import builds a backend from such
 * data (rounding to float for single precision). */
typedef struct {
  double *U, *E, *S, *D;
} h2_host_data;
struct h2_otf_s;   /* h2_otf.h */
gk_status h2_host_data_alloc(const h2_tree *t, h2_host_data *d, gk_error *err);
void h2_host_data_free(h2_host_data *d);
/* Export gives every array, also of a matrix computed on the fly (h2_otf.h),
 * whose missing blocks are then evaluated as built (h2_fill_as_built). Import
 * with dense_otf (a dense-only struct h2_otf of h2_otf.h, owned from then on,
 * also on failure; NULL for none) keeps the dense blocks on the fly and
 * ignores d->D. */
gk_status h2_cpu_export(const h2_tree *t, const h2_cpu *c, h2_host_data *d, gk_error *err);
gk_status h2_cpu_import(const h2_tree *t, int single, int threads, const h2_host_data *d,
                        struct h2_otf_s *dense_otf, h2_cpu **out, gk_error *err);
/* The entries of the matrix as built (Chebyshev bases and couplings, kernel
 * dense blocks; t must have rank order^dim on every level where U, E or S is
 * asked) into the arrays given (NULL: not wanted), in double or float
 * (single), OpenMP over blocks. Returns nonzero when the user interrupted. */
int h2_fill_as_built(const h2_tree *t, int single, int threads, void *U, void *E, void *S, void *D);
/* For the exports: the couplings (fill_s) and dense blocks (fill_d) a matrix
 * computes on the fly, evaluated as built into d and rounded through float
 * for a single-precision matrix, as its stored form would hold them (so that
 * every form of one matrix exports the same data). On failure (an interrupt)
 * d is freed. */
gk_status h2_export_fill_missing(const h2_tree *t, int single, int threads, int fill_s, int fill_d,
                                 h2_host_data *d, gk_error *err);

/* GPU backend: data resident on the GPU selected when it was built (an
 * h2_gpu starts with a gk_resident header); products and the free run there.
 * A CPU-only build's h2_gpu_build fails with GK_ERR_NO_CUDA. */
typedef struct h2_gpu h2_gpu;
gk_status h2_gpu_build(const h2_tree *t, int single, h2_gpu **out, gk_error *err);
/* y = A x for host x, y (n x nrhs doubles); fails with GK_ERR_INPUT when x
 * holds NA, NaN or infinite values (checked on the GPU). */
gk_status h2_gpu_matmul(const h2_tree *t, h2_gpu *g, const double *x, int nrhs, double *y,
                        gk_error *err);
/* The same product for vectors already on g's GPU (x, y: n x nrhs doubles;
 * they may not overlap), in the points' order, or with tree_order in the order
 * of h2_tree_point_order (the permutations into the leaves then read and write
 * memory in order). Returns with the work finished. Callers that keep their
 * vectors on the GPU (the GP solver) use it. */
gk_status h2_gpu_matmul_device(const h2_tree *t, h2_gpu *g, const double *x, int nrhs,
                               double *y, int tree_order, gk_error *err);
/* The points in the order of the tree's leaves (order[e]: the point, 0-based,
 * at row e; clusters contiguous): an order in which near points are near in
 * memory. Returns nonzero when out of host memory. */
int h2_tree_point_order(const h2_tree *t, int *order);
/* Rows `rows` (nrows, 0-based) of A [x_1 ... x_nblocks] for host column
 * blocks x_b (n x cols[b] each; a block may also be in the GPU's memory):
 * the product runs whole on the GPU and only
 * the rows come back (y: nrows x sum(cols)). For callers that check a sample
 * of rows (the GP engine's H2 error estimate). */
gk_status h2_gpu_matmul_rows(const h2_tree *t, h2_gpu *g, int nblocks, const double *const *x,
                             const int *cols, const int *rows, int nrows, double *y,
                             gk_error *err);
/* The GPU (0-based) that holds g. */
int h2_gpu_device(const h2_gpu *g);
/* Device-only timing of the HMV (vectors already resident): median ms of reps;
 * cublas_only skips the small-block kernels (for comparison). */
gk_status h2_gpu_time_hmv(const h2_tree *t, h2_gpu *g, int nrhs, int reps, int cublas_only,
                          double *ms, gk_error *err);
void h2_gpu_free(h2_gpu *g);
/* The parts of a matrix split over GPUs (h2_matrix.h): builds part p of
 * trees[p] on GPU devices[p], all at once (gpus[p]: NULL on failure, the
 * others freed). A product: h2_gpu_split_host gives page-locked x and y of
 * `entries` doubles (kept in *work, NULL at first, between calls), the
 * caller writes x in the tree's order (h2_tree_point_order, n x nrhs), and
 * h2_gpu_matmul_split fills rows rows[p] .. rows[p + 1] - 1 of y (the same
 * order) from part p, each on its GPU at once. h2_split_work_free frees *work. */
typedef struct h2_split_work h2_split_work;
gk_status h2_gpu_build_split(const h2_tree *const *trees, int parts, int single,
                             const int *devices, h2_gpu **gpus, gk_error *err);
gk_status h2_gpu_split_host(h2_split_work **work, size_t entries, double **x, double **y,
                            gk_error *err);
gk_status h2_gpu_matmul_split(const h2_tree *const *trees, h2_gpu *const *gpus, int parts,
                              const int *rows, int nrhs, h2_split_work **work, gk_error *err);
void h2_split_work_free(h2_split_work *work);
gk_status h2_gpu_export(const h2_tree *t, h2_gpu *g, int threads, h2_host_data *d, gk_error *err);
gk_status h2_gpu_import(const h2_tree *t, int single, const h2_host_data *d,
                        struct h2_otf_s *dense_otf, h2_gpu **out, gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
