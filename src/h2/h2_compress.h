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

#ifdef __cplusplus
}
#endif
#endif
