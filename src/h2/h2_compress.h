/*
 * Algebraic operations on an H2 matrix (Section 5 of Boukaram, Turkiyyah &
 * Keyes): orthogonalization of the nested basis tree and compression to a
 * tolerance. They work on the matrix data in double on the host
 * (h2_host_data; a backend exports and imports it, see h2.h) and return a
 * new structure with one rank per level plus new data; the input is not
 * changed. The matrix is symmetric, so one basis tree serves rows and columns.
 *
 * Orthogonalize: QR upsweep (leaf bases, then the stacked transfers
 * [T_c1 E_c1; T_c2 E_c2] of each level), giving orthonormal bases and the
 * projection tree T (old basis = new basis * T); every coupling matrix of a
 * level is then projected, S' = T_i S T_j^T.
 * Compress: orthogonalize; downsweep of R factors of the stacked blocks
 * [R_parent E_i^T; S_ij^T ...] (QR, Q not formed); truncation upsweep with
 * SVDs of the weighted bases U_i R_i^T and Z_i R_i^T, one rank per level
 * chosen so that the discarded singular values fit the error budget; and
 * the projection of the couplings into the new bases.
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

/* Pieces of the truncation that the backends share (h2_compress_cpu.c). */
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
/* The model flop counts (LAPACK Working Note 41) of one such SVD and of the
 * QR factorization of an m x n matrix, for the GFLOP/s figures. */
double h2_svd_flops(int rows, int cols);
double h2_qr_flops(double m, double n);
/* The smallest rank r (1 <= r <= kmax) whose discarded energy, the sum over
 * nodes of sigma_{i,j}^2 for j >= r (sig: kmax per node), stays within
 * budget; *discarded gets that energy. */
int h2_choose_rank(const double *sig, int nodes, int kmax, double budget, double *discarded);

#ifdef __cplusplus
}
#endif
#endif
