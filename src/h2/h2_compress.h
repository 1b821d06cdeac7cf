/*
 * Algebraic operations on an H2 matrix (Section 5 of Boukaram, Turkiyyah &
 * Keyes): orthogonalization of the nested basis tree (a QR upsweep, then the
 * couplings projected into the new bases) and compression to a tolerance
 * (orthogonalize; a downsweep of R factors of the stacked block rows; a
 * truncation upsweep of SVDs of the weighted bases; the couplings projected).
 * The matrix is symmetric, so one basis tree serves rows and columns. The
 * host backend (h2_compress_cpu.c) and the GPU one (h2_compress_cuda.cu)
 * follow the plan of h2_compress_plan.c; the input is never changed.
 */
#ifndef GK_H2_COMPRESS_H
#define GK_H2_COMPRESS_H

#include "h2/h2.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  double norm_frobenius;      /* ||A||_F of the input (from the orthogonal form)      */
  double error_frobenius;     /* estimated ||A - A'||_F / ||A||_F (compress only):
                                 sqrt(2 * sum of the discarded squared singular values) */
  double seconds_orthogonalize, seconds_generate, seconds_truncate, seconds_project;
  double seconds_generate_qr; /* of seconds_generate, the batched QRs (GPU only, timed
                                 by events; 0 where not measured)                     */
  double flops;               /* floating-point operations of the QR, SVD and products */
} h2_compress_stats;

/* out_tree / out get the new structure and data (free with h2_tree_free /
 * h2_host_data_free); on failure both are left empty. */
gk_status h2_orthogonalize_host(const h2_tree *t, const h2_host_data *in, int threads,
                                h2_tree *out_tree, h2_host_data *out, h2_compress_stats *st,
                                gk_error *err);

/* tol: the relative Frobenius error ||A - A'||_F / ||A||_F allowed (> 0). */
gk_status h2_compress_host(const h2_tree *t, const h2_host_data *in, double tol, int threads,
                           h2_tree *out_tree, h2_host_data *out, h2_compress_stats *st,
                           gk_error *err);

/* The same operations on a GPU matrix (h2_compress_cuda.cu): the QR
 * factorizations and products run on the GPU (cuBLAS batched), the small SVDs
 * of the truncation too (one-sided Jacobi, h2_svd_cuda.cuh; cuSOLVER's
 * batched SVDs stop at 32 x 32, the weighted bases are up to 2k x k with
 * k = 64 in 3D), except those too large for a block's shared memory, which
 * take the host path (h2_svd_left_batch).
 * The result shares the dense leaf blocks with `in`, which stays valid; the
 * structure goes to out_tree, the data to *out (free with h2_gpu_free).
 * An input computed on the fly (h2_otf.h) is transformed without storing its
 * blocks: its couplings (when they are on the fly) are evaluated chunk by
 * chunk where the projections read them, its dense blocks where their norm
 * is taken; the result stores its new couplings and keeps the dense blocks
 * on the fly (a dense-only h2_otf of its own).
 * tol = 0: orthogonalize only. A CPU-only build fails with GK_ERR_NO_CUDA. */
gk_status h2_transform_gpu(const h2_tree *t, h2_gpu *in, double tol, int threads,
                           h2_tree *out_tree, h2_gpu **out, h2_compress_stats *st,
                           gk_error *err);

/* Device bytes of g that are its own (dense blocks shared with another
 * matrix not counted); 0 in a CPU-only build. */
size_t h2_gpu_own_bytes(const h2_gpu *g);

/* ---- the plan both backends follow (h2_compress_plan.c) ------------------ */

/* The ranks of t's orthogonal form (depth + 1 entries): at most the leaf size
 * at the leaves, the children's two ranks above, never more than t's own;
 * 1 above the top coupling level. */
void h2_orthogonal_ranks(const h2_tree *t, int *rank);

/* A backend's work on one level of a sweep (ctx: the backend's own state). */
typedef struct {
  void *ctx;
  gk_status (*leaves)(void *ctx, gk_error *err);          /* upsweeps only */
  gk_status (*level)(void *ctx, int level, gk_error *err);
} h2_level_ops;

/* The orthogonalization's QR upsweep: the leaf bases, then each inner level
 * from its children's projections, from depth - 1 up to the top coupling
 * level (t: the input's structure, with low-rank blocks); the user's
 * interrupt is checked between levels. */
gk_status h2_orthogonalize_upsweep(const h2_tree *t, const h2_level_ops *ops, gk_error *err);

/* The compression's downsweep: each level's R factors from the top coupling
 * level down (a level reads its parents'); interrupts checked between levels. */
gk_status h2_generate_downsweep(const h2_tree *t, const h2_level_ops *ops, gk_error *err);

/* The smallest rank r (1 <= r <= kmax) whose discarded energy, the sum over
 * nodes of sigma_{i,j}^2 for j >= r (sig: kmax per node), stays within
 * budget; *discarded gets that energy. */
int h2_choose_rank(const double *sig, int nodes, int kmax, double budget, double *discarded);

/* What a backend does in the truncation upsweep, level by level from the
 * leaves (ctx: the backend's own state; the backend knows the ranks chosen
 * so far through the `rank` array it passed to h2_truncate_upsweep). */
typedef struct {
  void *ctx;
  /* The SVDs of level l's weighted bases W_i (rows x k_l per node; W_i =
   * R_i^T at the leaves, else Z_i R_i^T with Z_i the children's projected
   * transfers stacked): min(rows, k_l) singular values per node, descending,
   * into the host array sig; the left singular vectors stay with the backend. */
  gk_status (*weighted_svd)(void *ctx, int level, int rows, double *sig, gk_error *err);
  /* Level l keeps its first `rank` left singular vectors: the backend forms
   * the projection of the old basis onto them (rank x k_l per node). */
  gk_status (*keep_rank)(void *ctx, int level, int rows, int rank, gk_error *err);
} h2_truncation_ops;

/* The truncation upsweep of the orthogonal form t to the relative Frobenius
 * error tol, from st->norm_frobenius: rank[l] (depth + 1 entries) gets each
 * level's new rank (1 above the top level), rows[l] the rows of its weighted
 * bases, st->error_frobenius the estimate sqrt(2 * discarded) / ||A||_F. */
gk_status h2_truncate_upsweep(const h2_tree *t, double tol, const h2_truncation_ops *ops,
                              int *rank, int *rows, h2_compress_stats *st, gk_error *err);

/* Wall-clock seconds (monotonic) for the stats' phase times. */
double h2_seconds_now(void);

/* The model flop counts (LAPACK Working Note 41) of one SVD (singular values
 * and left vectors) and of the QR factorization of an m x n matrix. */
double h2_svd_flops(int rows, int cols);
double h2_qr_flops(double m, double n);

/* ---- SVD batches (h2_compress_cpu.c, h2_svd_cuda.cu) --------------------- */

/* Singular values (descending, min(rows, cols) per node) and left singular
 * vectors (rows x min(rows, cols) per node) of `nodes` rows x cols matrices
 * stored one after the other; LAPACK, OpenMP over the nodes. 0 on success, a
 * LAPACK info or -1000 (out of memory) otherwise. */
int h2_svd_left_batch(int nodes, int rows, int cols, const double *w, double *sig, double *u,
                      int threads, double *flops);
/* The GPU's batched SVD (h2_svd_cuda.cuh, the kernel its shape chooses) on
 * host data, for tests: h2_svd_left_batch's inputs and outputs, the matrices
 * rounded to float and the vectors computed in float where single is set;
 * nodes * rows * cols entries must fit the GPU. A CPU-only build fails with
 * GK_ERR_NO_CUDA, one too large for a block's shared memory with
 * GK_ERR_INTERNAL. */
gk_status h2_svd_left_gpu_host(int nodes, int rows, int cols, const double *w, int single,
                               double *sig, double *u, gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
