/*
 * Orthogonalization and compression of an H2 matrix on the host (see
 * h2_compress.h): level by level, with the nodes (or blocks) of a level in
 * parallel and LAPACK (R's dgeqrf / dorgqr / dgesvd) on each small matrix.
 * Everything is computed in double; single-precision matrices are widened by
 * the backend's export and rounded by its import.
 */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "h2/h2_compress.h"
#include "device/gk_blas.h"
#include "device/gk_omp.h"
#include "device/gk_hooks.h"

static int imin(int a, int b) { return a < b ? a : b; }

/* Householder QR of the m x n matrix a (R in the upper triangle). */
static int qr_factor(int m, int n, double *a, int lda, double *tau)
{
  int info = 0, lwork = -1;
  double size;
  if (m == 0 || n == 0) return 0;
  dgeqrf_(&m, &n, a, &lda, tau, &size, &lwork, &info);
  lwork = size > 1 ? (int) size : 1;
  double *work = (double *) malloc((size_t) lwork * sizeof(double));
  if (!work) return -1000;
  dgeqrf_(&m, &n, a, &lda, tau, work, &lwork, &info);
  free(work);
  return info;
}

/* The first n columns of Q from the reflectors of qr_factor (n <= m). */
static int qr_form_q(int m, int n, double *a, int lda, const double *tau)
{
  int info = 0, lwork = -1;
  double size;
  if (m == 0 || n == 0) return 0;
  dorgqr_(&m, &n, &n, a, &lda, tau, &size, &lwork, &info);
  lwork = size > 1 ? (int) size : 1;
  double *work = (double *) malloc((size_t) lwork * sizeof(double));
  if (!work) return -1000;
  dorgqr_(&m, &n, &n, a, &lda, tau, work, &lwork, &info);
  free(work);
  return info;
}

/* Singular values s (descending) and the min(m, n) left singular vectors u
 * (m x min(m, n)) of the m x n matrix a (destroyed). */
static int svd_left(int m, int n, double *a, double *s, double *u)
{
  int info = 0, lwork = -1, one = 1;
  double size, vt;
  if (m == 0 || n == 0) return 0;
  dgesvd_("S", "N", &m, &n, a, &m, s, u, &m, &vt, &one, &size, &lwork, &info, 1, 1);
  lwork = size > 1 ? (int) size : 1;
  double *work = (double *) malloc((size_t) lwork * sizeof(double));
  if (!work) return -1000;
  dgesvd_("S", "N", &m, &n, a, &m, s, u, &m, &vt, &one, work, &lwork, &info, 1, 1);
  free(work);
  return info;
}

/* The R factor (first min(m, n) rows of the upper triangle of a, m x n with
 * leading dimension lda) into r, rows x n, zero below. */
static void take_r(int m, int n, const double *a, int lda, double *r, int rows)
{
  for (int j = 0; j < n; j++)
    for (int i = 0; i < rows; i++)
      r[i + (size_t) j * rows] = (i <= j && i < m) ? a[i + (size_t) j * lda] : 0.0;
}

static gk_status lapack_failed(int info, gk_error *err)
{
  if (info == -1000) return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
  return gk_fail(err, GK_ERR_INTERNAL, "LAPACK failed in the H2 compression (info = %d)", info);
}

/* After a level's parallel loop: GK_OK, or the error of a failed LAPACK call
 * (info) or of a failed allocation in the H2 `what`. */
static gk_status level_status(int failed, int info, const char *what, gk_error *err)
{
  if (!failed) return GK_OK;
  if (info) return lapack_failed(info, err);
  return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 %s", what);
}

/* Per-level arrays of one matrix per node. */
static void free_levels(double **a, int levels)
{
  if (!a) return;
  for (int l = 0; l < levels; l++) free(a[l]);
  free(a);
}

static double **alloc_levels(int q, int top, const int *rows, const int *cols)
{
  double **a = (double **) calloc((size_t) q + 1, sizeof(double *));
  if (!a) return NULL;
  for (int l = top; l <= q; l++) {
    a[l] = (double *) calloc(((size_t) 1 << l) * rows[l] * cols[l] + 1, sizeof(double));
    if (!a[l]) {
      free_levels(a, q + 1);
      return NULL;
    }
  }
  return a;
}

/* S'_s = T_i S_s T_j^T for every coupling block: T of level l is kn x ko per node. */
static int project_couplings(const h2_tree *t, const double *S, const int *ko, double **T,
                             const h2_tree *nt, double *Snew, int threads, double *flops)
{
  int failed = 0;
  double fl = 0.0;
  for (int l = t->top_level; l <= t->depth; l++) {
    const h2_bsr *b = &t->coupling[l];
    int kn = nt->level_rank[l], k = ko[l];
#pragma omp parallel num_threads(threads) reduction(+ : fl)
    {
      double *tmp = (double *) malloc((size_t) kn * k * sizeof(double) + 1);
      if (!tmp) failed = 1;
#pragma omp for schedule(static)
      for (int s = 0; s < b->n_blocks; s++) {
        if (!tmp) continue;
        const double *ti = T[l] + (size_t) b->row[s] * kn * k, *tj = T[l] + (size_t) b->col[s] * kn * k;
        gk_dgemm('N', 'N', kn, k, k, 1.0, ti, kn, S + t->coupling_ptr[l] + (size_t) s * k * k, k,
                 0.0, tmp, kn);
        gk_dgemm('N', 'T', kn, kn, k, 1.0, tmp, kn, tj, kn, 0.0,
                 Snew + nt->coupling_ptr[l] + (size_t) s * kn * kn, kn);
        fl += 2.0 * kn * k * k + 2.0 * kn * kn * k;
      }
      free(tmp);
    }
  }
  *flops += fl;
  return failed;
}

static double sum_squares(const double *a, size_t count)
{
  double s = 0.0;
  for (size_t i = 0; i < count; i++) s += a[i] * a[i];
  return s;
}

/* The host backend of the orthogonalization's upsweep (h2_level_ops):
 * orthonormal leaf bases and transfers into out, the projections T[l]
 * (kn x k per node; old basis = new basis * T). */
typedef struct {
  const h2_tree *t, *ot;     /* the input's structure, the orthogonal form's */
  const h2_host_data *in;
  h2_host_data *out;
  double **T;
  int threads;
  double *flops;             /* the running count, added to */
} cpu_orthogonalization;

/* Leaves: U_i = Q_i T_i. */
static gk_status cpu_orthogonalize_leaves(void *ctx, gk_error *err)
{
  cpu_orthogonalization *c = (cpu_orthogonalization *) ctx;
  const h2_tree *t = c->t;
  int q = t->depth, m = t->leaf_size, kq = t->level_rank[q], r = c->ot->level_rank[q];
  int failed = 0, info = 0;
  double fl = 0.0;
#pragma omp parallel num_threads(c->threads) reduction(+ : fl)
  {
    double *w = (double *) malloc((size_t) m * kq * sizeof(double) + 1);
    double *tau = (double *) malloc((size_t) kq * sizeof(double) + sizeof(double) * m + 1);
#pragma omp for schedule(static)
    for (int i = 0; i < t->n_leaves; i++) {
      if (!w || !tau) { failed = 1; continue; }
      memcpy(w, c->in->U + (size_t) i * m * kq, (size_t) m * kq * sizeof(double));
      int e = qr_factor(m, kq, w, m, tau);
      take_r(m, kq, w, m, c->T[q] + (size_t) i * r * kq, r);
      if (!e) e = qr_form_q(m, r, w, m, tau);
      if (e) { failed = 1; info = e; continue; }
      memcpy(c->out->U + (size_t) i * m * r, w, (size_t) m * r * sizeof(double));
      fl += 2 * h2_qr_flops(m, kq);
    }
    free(w);
    free(tau);
  }
  *c->flops += fl;
  return level_status(failed, info, "orthogonalization", err);
}

/* Inner level l: [T_c1 E_c1; T_c2 E_c2] = Q T_parent; Q's halves are the
 * children's new transfers. */
static gk_status cpu_orthogonalize_level(void *ctx, int l, gk_error *err)
{
  cpu_orthogonalization *c = (cpu_orthogonalization *) ctx;
  const h2_tree *t = c->t, *ot = c->ot;
  const int *k = t->level_rank, *kn = ot->level_rank;
  int kc = kn[l + 1], ko = k[l + 1], kp = k[l], r = kn[l], rows = 2 * kc;
  int failed = 0, info = 0;
  double fl = 0.0;
#pragma omp parallel num_threads(c->threads) reduction(+ : fl)
  {
    double *z = (double *) malloc((size_t) rows * kp * sizeof(double) + 1);
    double *tau = (double *) malloc(((size_t) rows + kp) * sizeof(double));
#pragma omp for schedule(static)
    for (int i = 0; i < (1 << l); i++) {
      if (!z || !tau) { failed = 1; continue; }
      for (int h = 0; h < 2; h++) {
        int child = 2 * i + h;
        gk_dgemm('N', 'N', kc, kp, ko, 1.0, c->T[l + 1] + (size_t) child * kc * ko, kc,
                 c->in->E + t->transfer_ptr[l + 1] + (size_t) child * ko * kp, ko, 0.0,
                 z + (size_t) h * kc, rows);
      }
      int e = qr_factor(rows, kp, z, rows, tau);
      take_r(rows, kp, z, rows, c->T[l] + (size_t) i * r * kp, r);
      if (!e) e = qr_form_q(rows, r, z, rows, tau);
      if (e) { failed = 1; info = e; continue; }
      for (int h = 0; h < 2; h++) {
        double *en = c->out->E + ot->transfer_ptr[l + 1] + (size_t) (2 * i + h) * kc * r;
        for (int j = 0; j < r; j++)
          memcpy(en + (size_t) j * kc, z + (size_t) h * kc + (size_t) j * rows,
                 kc * sizeof(double));
      }
      fl += 4.0 * kc * ko * kp + 2 * h2_qr_flops(rows, kp);
    }
    free(z);
    free(tau);
  }
  *c->flops += fl;
  return level_status(failed, info, "orthogonalization", err);
}

gk_status h2_orthogonalize_host(const h2_tree *t, const h2_host_data *in, int threads,
                                h2_tree *ot, h2_host_data *out, h2_compress_stats *st,
                                gk_error *err)
{
  int q = t->depth, top = t->top_level, nth = gk_omp_threads(threads);
  const int *k = t->level_rank;
  int *kn = NULL;
  double **T = NULL, start = h2_seconds_now(), fl = 0.0;
  memset(out, 0, sizeof *out);
  memset(st, 0, sizeof *st);
  if (h2_tree_copy(ot, t, err)) return err->status;
  kn = (int *) malloc(((size_t) q + 1) * sizeof(int));
  if (!kn) goto nomem;
  h2_orthogonal_ranks(t, kn);
  h2_tree_set_ranks(ot, kn);
  if (h2_host_data_alloc(ot, out, err)) goto fail;
  memcpy(out->D, in->D, h2_dense_entries(t) * sizeof(double));
  if (top > q) {  // no low-rank blocks: nothing to orthogonalize
    memcpy(out->U, in->U, h2_basis_entries(t) * sizeof(double));
    memcpy(out->E, in->E, h2_transfer_entries(t) * sizeof(double));
    goto done;
  }
  memset(out->E, 0, h2_transfer_entries(ot) * sizeof(double));
  T = alloc_levels(q, top, kn, k);
  if (!T) goto nomem;

  {
    cpu_orthogonalization co = {t, ot, in, out, T, nth, &fl};
    h2_level_ops up = {&co, cpu_orthogonalize_leaves, cpu_orthogonalize_level};
    if (h2_orthogonalize_upsweep(t, &up, err)) goto fail;
  }
  st->seconds_orthogonalize = h2_seconds_now() - start;
  start = h2_seconds_now();
  if (project_couplings(t, in->S, k, T, ot, out->S, nth, &fl)) goto nomem;
  st->seconds_project = h2_seconds_now() - start;
done:
  st->flops = fl;
  st->norm_frobenius = sqrt(sum_squares(out->S, h2_coupling_entries(ot)) +
                            sum_squares(out->D, h2_dense_entries(ot)));
  free(kn);
  free_levels(T, q + 1);
  return GK_OK;
nomem:
  gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 orthogonalization");
fail:
  free(kn);
  free_levels(T, q + 1);
  h2_host_data_free(out);
  h2_tree_free(ot);
  return err->status;
}

/* The host backend of the compression's downsweep (h2_level_ops): R[l] gets
 * the R factor of each node's stack [R_parent E_i^T; S_ij^T, j in row i] of
 * the orthogonal form od (Q not formed). */
typedef struct {
  const h2_tree *t;
  const h2_host_data *od;
  double **R;
  int threads;
  double *flops;             /* the running count, added to */
} cpu_downsweep;

static gk_status cpu_generate_level(void *ctx, int l, gk_error *err)
{
  cpu_downsweep *c = (cpu_downsweep *) ctx;
  const h2_tree *t = c->t;
  const h2_bsr *b = &t->coupling[l];
  double **R = c->R;
  int kl = t->level_rank[l], kp = l > t->top_level ? t->level_rank[l - 1] : 0;
  int failed = 0, info = 0;
  double fl = 0.0;
#pragma omp parallel for schedule(dynamic, 4) num_threads(c->threads) reduction(+ : fl)
  for (int i = 0; i < (1 << l); i++) {
    int nb = b->row_ptr[i + 1] - b->row_ptr[i], rows = kp + nb * kl;
    if (rows == 0 || failed) continue;
    double *mt = (double *) malloc((size_t) rows * kl * sizeof(double));
    double *tau = (double *) malloc(((size_t) rows + kl) * sizeof(double));
    if (!mt || !tau) { failed = 1; free(mt); free(tau); continue; }
    if (kp)
      gk_dgemm('N', 'T', kp, kl, kp, 1.0, R[l - 1] + (size_t) (i / 2) * kp * kp, kp,
               t->transfer_ptr[l] + (size_t) i * kl * kp + c->od->E, kl, 0.0, mt, rows);
    for (int e = 0; e < nb; e++) {
      const double *s =
        c->od->S + t->coupling_ptr[l] + (size_t) b->row_blocks[b->row_ptr[i] + e] * kl * kl;
      double *dst = mt + kp + (size_t) e * kl;
      for (int col = 0; col < kl; col++)
        for (int r = 0; r < kl; r++) dst[r + (size_t) col * rows] = s[col + (size_t) r * kl];
    }
    int ei = qr_factor(rows, kl, mt, rows, tau);
    if (ei) { failed = 1; info = ei; }
    else take_r(rows, kl, mt, rows, R[l] + (size_t) i * kl * kl, kl);
    fl += 2.0 * kp * kp * kl + h2_qr_flops(rows, kl);
    free(mt);
    free(tau);
  }
  *c->flops += fl;
  return level_status(failed, info, "compression", err);
}

/* The host backend of the truncation upsweep (h2_truncation_ops): per level
 * the weighted bases, their SVDs (Q[l]: the left singular vectors, rows x
 * min(rows, k_l) per node) and, once the plan has chosen the rank, the
 * projections T[l] (rank x k_l per node). Z[l] keeps the children's
 * projected transfers stacked (rows x k_l per node) for the projection. */
typedef struct {
  const h2_tree *t;          /* the orthogonal form            */
  const h2_host_data *od;    /* its data                       */
  double **R, **T, **Q, **Z;
  const int *rank;           /* the new ranks chosen so far    */
  int threads;
  double *flops;             /* the running count, added to */
} cpu_truncation;

static gk_status cpu_weighted_svd(void *ctx, int l, int rows, double *sig, gk_error *err)
{
  cpu_truncation *c = (cpu_truncation *) ctx;
  const h2_tree *t = c->t;
  int q = t->depth, nodes = 1 << l, kl = t->level_rank[l], n_vectors = imin(rows, kl);
  int failed = 0, info = 0;
  double fl = 0.0;
  c->Q[l] = (double *) malloc((size_t) nodes * rows * n_vectors * sizeof(double) + 1);
  if (l < q) c->Z[l] = (double *) malloc((size_t) nodes * rows * kl * sizeof(double) + 1);
  if (!c->Q[l] || (l < q && !c->Z[l]))
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
#pragma omp parallel num_threads(c->threads) reduction(+ : fl)
  {
    double *w = (double *) malloc((size_t) rows * kl * sizeof(double) + 1);
#pragma omp for schedule(static)
    for (int i = 0; i < nodes; i++) {
      if (!w) { failed = 1; continue; }
      const double *ri = c->R[l] + (size_t) i * kl * kl;
      if (l == q) {
        for (int col = 0; col < kl; col++)
          for (int r = 0; r < kl; r++) w[r + (size_t) col * kl] = ri[col + (size_t) r * kl];
      } else {
        int kc = c->rank[l + 1], ko = t->level_rank[l + 1];
        double *zi = c->Z[l] + (size_t) i * rows * kl;
        for (int h = 0; h < 2; h++) {
          int child = 2 * i + h;
          gk_dgemm('N', 'N', kc, kl, ko, 1.0, c->T[l + 1] + (size_t) child * kc * ko, kc,
                   c->od->E + t->transfer_ptr[l + 1] + (size_t) child * ko * kl, ko, 0.0,
                   zi + (size_t) h * kc, rows);
        }
        gk_dgemm('N', 'T', rows, kl, kl, 1.0, zi, rows, ri, kl, 0.0, w, rows);
        fl += 4.0 * kc * ko * kl + 2.0 * rows * kl * kl;
      }
      int e = svd_left(rows, kl, w, sig + (size_t) i * n_vectors,
                       c->Q[l] + (size_t) i * rows * n_vectors);
      if (e) { failed = 1; info = e; }
      fl += h2_svd_flops(rows, kl);
    }
    free(w);
  }
  *c->flops += fl;
  return level_status(failed, info, "compression", err);
}

/* The projection T_i = Q_i(:, 1:r)^T (old basis), r x k_l. */
static gk_status cpu_keep_rank(void *ctx, int l, int rows, int r, gk_error *err)
{
  cpu_truncation *c = (cpu_truncation *) ctx;
  int q = c->t->depth, nodes = 1 << l, kl = c->t->level_rank[l], n_vectors = imin(rows, kl);
  double fl = 0.0;
  c->T[l] = (double *) malloc((size_t) nodes * r * kl * sizeof(double) + 1);
  if (!c->T[l]) return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
#pragma omp parallel for schedule(static) num_threads(c->threads) reduction(+ : fl)
  for (int i = 0; i < nodes; i++) {
    const double *qi = c->Q[l] + (size_t) i * rows * n_vectors;
    double *ti = c->T[l] + (size_t) i * r * kl;
    if (l == q) {
      for (int col = 0; col < kl; col++)
        for (int a = 0; a < r; a++) ti[a + (size_t) col * r] = qi[col + (size_t) a * rows];
    } else {
      gk_dgemm('T', 'N', r, kl, rows, 1.0, qi, rows, c->Z[l] + (size_t) i * rows * kl, rows, 0.0,
               ti, r);
      fl += 2.0 * r * kl * rows;
    }
  }
  *c->flops += fl;
  return GK_OK;
}

gk_status h2_compress_host(const h2_tree *t0, const h2_host_data *in0, double tol, int threads,
                           h2_tree *nt, h2_host_data *out, h2_compress_stats *st, gk_error *err)
{
  h2_tree ot;
  h2_host_data od = {0};
  double **R = NULL, **T = NULL, **Q = NULL, **Z = NULL;
  int *new_rank = NULL, *weighted_rows = NULL;
  memset(out, 0, sizeof *out);
  memset(nt, 0, sizeof *nt);
  if (!(tol > 0)) return gk_fail(err, GK_ERR_INPUT, "the compression tolerance must be positive");
  if (h2_orthogonalize_host(t0, in0, threads, &ot, &od, st, err)) return err->status;
  const h2_tree *t = &ot;
  int q = t->depth, top = t->top_level, m = t->leaf_size, nth = gk_omp_threads(threads);
  const int *k = t->level_rank;
  double fl = st->flops, start = h2_seconds_now();
  if (h2_tree_copy(nt, t, err)) goto fail;
  if (top > q) {  // no low-rank blocks: the orthogonal form is the result
    *out = od;
    h2_tree_free(&ot);
    st->error_frobenius = 0.0;
    return GK_OK;
  }
  new_rank = (int *) calloc((size_t) q + 1, sizeof(int));
  weighted_rows = (int *) calloc((size_t) q + 1, sizeof(int));
  if (!new_rank || !weighted_rows) goto nomem;

  // Downsweep: R_i of the stack [R_parent E_i^T; S_ij^T, j in row i] (Q not formed).
  R = alloc_levels(q, top, k, k);
  if (!R) goto nomem;
  {
    cpu_downsweep cd = {t, &od, R, nth, &fl};
    h2_level_ops down = {&cd, NULL, cpu_generate_level};
    if (h2_generate_downsweep(t, &down, err)) goto fail;
  }
  st->seconds_generate = h2_seconds_now() - start;
  start = h2_seconds_now();

  // Truncation upsweep: the ranks by the shared plan (h2_compress_plan.c).
  T = (double **) calloc((size_t) q + 1, sizeof(double *));
  Q = (double **) calloc((size_t) q + 1, sizeof(double *));
  Z = (double **) calloc((size_t) q + 1, sizeof(double *));
  if (!T || !Q || !Z) goto nomem;
  {
    cpu_truncation tr = {t, &od, R, T, Q, Z, new_rank, nth, &fl};
    h2_truncation_ops ops = {&tr, cpu_weighted_svd, cpu_keep_rank};
    if (h2_truncate_upsweep(t, tol, &ops, new_rank, weighted_rows, st, err)) goto fail;
  }
  h2_tree_set_ranks(nt, new_rank);
  if (h2_host_data_alloc(nt, out, err)) goto fail;
  memcpy(out->D, od.D, h2_dense_entries(t) * sizeof(double));
  memset(out->E, 0, h2_transfer_entries(nt) * sizeof(double));
  // New leaf bases U Q(:, 1:r) and transfers (the halves of the parents' Q).
  {
    int kq = k[q], r = new_rank[q];
#pragma omp parallel for schedule(static) num_threads(nth) reduction(+ : fl)
    for (int i = 0; i < t->n_leaves; i++) {
      gk_dgemm('N', 'N', m, r, kq, 1.0, od.U + (size_t) i * m * kq, m,
               Q[q] + (size_t) i * kq * imin(weighted_rows[q], kq), kq, 0.0,
               out->U + (size_t) i * m * r, m);
      fl += 2.0 * m * r * kq;
    }
    for (int l = q - 1; l >= top; l--) {
      int kc = new_rank[l + 1], rp = new_rank[l], rows = weighted_rows[l];
      int n_vectors = imin(rows, k[l]);
      for (int i = 0; i < (1 << l); i++)
        for (int c = 0; c < 2; c++) {
          double *en = out->E + nt->transfer_ptr[l + 1] + (size_t) (2 * i + c) * kc * rp;
          const double *qi = Q[l] + (size_t) i * rows * n_vectors;
          for (int j = 0; j < rp; j++)
            memcpy(en + (size_t) j * kc, qi + (size_t) c * kc + (size_t) j * rows, kc * sizeof(double));
        }
    }
  }
  st->seconds_truncate = h2_seconds_now() - start;
  start = h2_seconds_now();
  if (project_couplings(t, od.S, k, T, nt, out->S, nth, &fl)) goto nomem;
  st->seconds_project += h2_seconds_now() - start;
  st->flops = fl;
  free(new_rank); free(weighted_rows);
  free_levels(R, q + 1); free_levels(T, q + 1); free_levels(Q, q + 1);
  free_levels(Z, q + 1);
  h2_host_data_free(&od);
  h2_tree_free(&ot);
  return GK_OK;
nomem:
  gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
fail:
  free(new_rank); free(weighted_rows);
  free_levels(R, ot.depth + 1); free_levels(T, ot.depth + 1); free_levels(Q, ot.depth + 1);
  free_levels(Z, ot.depth + 1);
  h2_host_data_free(&od);
  h2_host_data_free(out);
  h2_tree_free(&ot);
  h2_tree_free(nt);
  return err->status;
}

int h2_svd_left_batch(int nodes, int rows, int cols, const double *w, double *sig, double *u,
                      int threads, double *flops)
{
  int n_vectors = imin(rows, cols), failed = 0, info = 0, nth = gk_omp_threads(threads);
  double fl = 0.0;
#pragma omp parallel num_threads(nth) reduction(+ : fl)
  {
    double *a = (double *) malloc((size_t) rows * cols * sizeof(double) + 1);
#pragma omp for schedule(static)
    for (int i = 0; i < nodes; i++) {
      if (!a) { failed = 1; continue; }
      memcpy(a, w + (size_t) i * rows * cols, (size_t) rows * cols * sizeof(double));
      int e = svd_left(rows, cols, a, sig + (size_t) i * n_vectors, u + (size_t) i * rows * n_vectors);
      if (e) { failed = 1; info = e; }
      fl += h2_svd_flops(rows, cols);
    }
    free(a);
  }
  *flops += fl;
  return failed ? (info ? info : -1000) : 0;
}
