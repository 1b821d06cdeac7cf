/*
 * The CPU backend of the H2 engine: the matrix data in host memory and the
 * batched operations of h2_ops as OpenMP loops over BLAS products (R's
 * reference BLAS is single-threaded, so the parallelism is over blocks).
 * Double precision calls dgemm_; single precision uses a small C product,
 * because R's own BLAS has no sgemm.
 */
#include <stdlib.h>
#include <string.h>
#include "h2/h2.h"
#include "h2/h2_entries.h"
#include "h2/h2_otf.h"
#include "device/gk_blas.h"
#include "device/gk_omp.h"
#include "device/gk_hooks.h"

/* Three forms: stored (otf NULL: U, E, S, D stored); on the fly (otf with
 * couplings_on_the_fly: U, E stored, S and D evaluated in every product);
 * mixed (a dense-only otf: U, E, S stored, D evaluated), the compressed form
 * of an on-the-fly matrix. */
struct h2_cpu {
  int single, threads;
  h2_data data;
  const h2_tree *tree;
  h2_otf *otf;   /* owned; set: the dense blocks (and maybe the couplings) on the fly */
};

static int couplings_on_the_fly(const h2_cpu *h)
{
  return h->otf && h->otf->couplings_on_the_fly;
}

/* C = op(A) B + beta C in float, column-major. */
static void sgemm_small(int trans_a, int m, int n, int k, const float *a, int lda,
                        const float *b, int ldb, float beta, float *c, int ldc)
{
  for (int j = 0; j < n; j++) {
    float *cj = c + (size_t) j * ldc;
    const float *bj = b + (size_t) j * ldb;
    if (trans_a) {
      for (int i = 0; i < m; i++) {
        const float *ai = a + (size_t) i * lda;
        float acc = 0.0f;
        for (int l = 0; l < k; l++) acc += ai[l] * bj[l];
        cj[i] = beta == 0.0f ? acc : acc + beta * cj[i];
      }
    } else {
      for (int i = 0; i < m; i++) cj[i] = beta == 0.0f ? 0.0f : beta * cj[i];
      for (int l = 0; l < k; l++) {
        const float *al = a + (size_t) l * lda;
        float bl = bj[l];
        for (int i = 0; i < m; i++) cj[i] += al[i] * bl;
      }
    }
  }
}

static void gemm_one(int single, int trans_a, int m, int n, int k, const void *a, int lda,
                     const void *b, int ldb, double beta, void *c, int ldc)
{
  if (single)
    sgemm_small(trans_a, m, n, k, (const float *) a, lda, (const float *) b, ldb, (float) beta,
                (float *) c, ldc);
  else
    gk_dgemm(trans_a ? 'T' : 'N', 'N', m, n, k, 1.0, (const double *) a, lda,
             (const double *) b, ldb, beta, (double *) c, ldc);
}

#define AT(base, entries, el) ((void *) ((char *) (base) + (size_t) (entries) * (el)))

static gk_status cpu_gemm_strided(void *ctx, int stream, int trans_a, int m, int n, int k,
                                  const void *a, int lda, size_t stride_a, const void *b,
                                  int ldb, size_t stride_b, double beta, void *c, int ldc,
                                  size_t stride_c, int count, gk_error *err)
{
  (void) stream;
  (void) err;
  h2_cpu *h = (h2_cpu *) ctx;
  size_t el = h->single ? sizeof(float) : sizeof(double);
#pragma omp parallel for schedule(static) num_threads(gk_omp_threads(h->threads))
  for (int i = 0; i < count; i++)
    gemm_one(h->single, trans_a, m, n, k, AT(a, i * stride_a, el), lda,
             AT(b, i * stride_b, el), ldb, beta, AT(c, i * stride_c, el), ldc);
  return GK_OK;
}

/* Both children of each parent, as the two products of the transfer's
 * definition (h2.h): the upsweep's first child overwrites, the second adds. */
static gk_status cpu_transfer(void *ctx, int stream, int up, int kc, int kp, int nrhs,
                              const void *e, const void *x, void *y, int ld, int parents,
                              gk_error *err)
{
  (void) stream;
  (void) err;
  h2_cpu *h = (h2_cpu *) ctx;
  size_t el = h->single ? sizeof(float) : sizeof(double), ek = (size_t) kc * kp;
#pragma omp parallel for schedule(static) num_threads(gk_omp_threads(h->threads))
  for (int p = 0; p < parents; p++)
    for (int c = 0; c < 2; c++) {
      size_t i = 2 * (size_t) p + c;
      if (up)
        gemm_one(h->single, 1, kp, nrhs, kc, AT(e, i * ek, el), kc, AT(x, i * kc, el), ld,
                 c ? 1.0 : 0.0, AT(y, (size_t) p * kp, el), ld);
      else
        gemm_one(h->single, 0, kc, nrhs, kp, AT(e, i * ek, el), kc, AT(x, (size_t) p * kp, el),
                 ld, 1.0, AT(y, i * kc, el), ld);
    }
  return GK_OK;
}

/* Row-parallel block-sparse product: each thread owns whole block rows. */
static gk_status cpu_bsr(void *ctx, int stream, int which, int level, const void *values, int bs,
                         const void *x, int ldx, void *y, int ldy, int nrhs, gk_error *err)
{
  (void) stream;
  (void) err;
  h2_cpu *h = (h2_cpu *) ctx;
  // On the fly: the dense blocks, and every level's couplings in one call
  // (coupling_all_levels) unless they are stored (the mixed form).
  if (h->otf && (which == H2_DENSE || h->otf->couplings_on_the_fly))
    return h2_otf_cpu_product(h->otf, h->tree, h->single, h->threads, which, x, ldx, y, ldy,
                              nrhs, err);
  const h2_bsr *b = which == H2_DENSE ? &h->tree->dense : &h->tree->coupling[level];
  size_t el = h->single ? sizeof(float) : sizeof(double), bb = (size_t) bs * bs;
#pragma omp parallel for schedule(dynamic, 16) num_threads(gk_omp_threads(h->threads))
  for (int r = 0; r < b->n_rows; r++)
    for (int e = b->row_ptr[r]; e < b->row_ptr[r + 1]; e++) {
      int s = b->row_blocks[e];
      gemm_one(h->single, 0, bs, nrhs, bs, AT(values, s * bb, el), bs,
               AT(x, (size_t) b->col[s] * bs, el), ldx, 1.0, AT(y, (size_t) r * bs, el), ldy);
    }
  return GK_OK;
}

static gk_status cpu_zero(void *ctx, int stream, void *p, size_t entries, gk_error *err)
{
  (void) stream;
  (void) err;
  memset(p, 0, entries * (((h2_cpu *) ctx)->single ? sizeof(float) : sizeof(double)));
  return GK_OK;
}

static gk_status cpu_nothing(void *ctx, gk_error *err)
{
  (void) ctx;
  (void) err;
  return GK_OK;
}

static void put(void *p, size_t i, int single, double v)
{
  if (single) ((float *) p)[i] = (float) v;
  else ((double *) p)[i] = v;
}

/* The matrix as built into the arrays given (h2.h): the same entry functions
 * as the GPU kernels. Returns nonzero when the user interrupted (checked
 * between blocks of entries by every thread). */
int h2_fill_as_built(const h2_tree *t, int single, int threads, void *U, void *E, void *S, void *D)
{
  h2_geometry g = h2_geometry_of(t, t->center, t->half, t->leaf_points, t->leaf_count);
  int m = t->leaf_size, k = t->rank;
  size_t kk = (size_t) k * k, mm = (size_t) m * m;
  // Loop bounds of 0 for the arrays not asked (the same in every thread).
  int leaves = U ? t->n_leaves : 0, nodes = E ? t->n_nodes : 0;
  int first_level = S ? t->top_level : t->depth + 1, dense = D ? t->dense.n_blocks : 0;
  gk_stop_flag stop;
  gk_stop_flag_init(&stop);
#pragma omp parallel num_threads(gk_omp_threads(threads))
  {
#pragma omp for schedule(static)
    for (int i = 0; i < leaves; i++) {
      if (gk_stop_requested(&stop)) continue;
      for (int a = 0; a < k; a++)
        for (int r = 0; r < m; r++)
          put(U, (size_t) i * m * k + (size_t) a * m + r, single, h2_basis_entry(&g, i, r, a));
    }
#pragma omp for schedule(static)
    for (int c = 1; c < nodes; c++) {
      if (gk_stop_requested(&stop)) continue;
      for (int b = 0; b < k; b++)
        for (int a = 0; a < k; a++)
          put(E, c * kk + (size_t) b * k + a, single, h2_transfer_entry(&g, c, a, b));
    }
    for (int l = first_level; l <= t->depth; l++) {
      const h2_bsr *bl = &t->coupling[l];
#pragma omp for schedule(static)
      for (int s = 0; s < bl->n_blocks; s++) {
        if (gk_stop_requested(&stop)) continue;
        int i = t->level_ptr[l] + bl->row[s], j = t->level_ptr[l] + bl->col[s];
        size_t base = (t->coupling_offset[l] + s) * kk;
        for (int b = 0; b < k; b++)
          for (int a = 0; a < k; a++)
            put(S, base + (size_t) b * k + a, single, h2_coupling_entry(&g, i, j, a, b));
      }
    }
#pragma omp for schedule(dynamic, 8)
    for (int s = 0; s < dense; s++) {
      if (gk_stop_requested(&stop)) continue;
      for (int c = 0; c < m; c++)
        for (int r = 0; r < m; r++)
          put(D, s * mm + (size_t) c * m + r, single,
              h2_dense_entry(&g, t->dense.row[s], t->dense.col[s], r, c));
    }
  }
  return stop.stop;
}

/* Evaluates the arrays h stores. */
static int fill_data(const h2_tree *t, h2_cpu *h)
{
  return h2_fill_as_built(t, h->single, h->threads, h->data.U, h->data.E,
                          couplings_on_the_fly(h) ? NULL : h->data.S, h->otf ? NULL : h->data.D);
}

static gk_status cpu_alloc(const h2_tree *t, int single, int threads, h2_otf *otf,
                           h2_cpu **out, gk_error *err)
{
  *out = NULL;
  h2_cpu *h = (h2_cpu *) calloc(1, sizeof *h);
  if (!h) {
    h2_otf_free(otf);
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 matrix");
  }
  h->single = single;
  h->threads = threads;
  h->tree = t;
  h->otf = otf;
  size_t el = single ? sizeof(float) : sizeof(double);
  h->data.U = malloc(h2_basis_entries(t) * el + 1);
  h->data.E = malloc(h2_transfer_entries(t) * el + 1);
  h->data.S = malloc((couplings_on_the_fly(h) ? 0 : h2_coupling_entries(t)) * el + 1);
  h->data.D = malloc((otf ? 0 : h2_dense_entries(t)) * el + 1);
  if (!h->data.U || !h->data.E || !h->data.S || !h->data.D) {
    double entries = (double) (h2_basis_entries(t) + h2_transfer_entries(t));
    if (!couplings_on_the_fly(h)) entries += (double) h2_coupling_entries(t);
    if (!otf) entries += (double) h2_dense_entries(t);
    h2_cpu_free(h);
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 matrix data (%.3g GB)",
                   entries * el / 1e9);
  }
  *out = h;
  return GK_OK;
}

gk_status h2_cpu_build(const h2_tree *t, int single, int threads, h2_cpu **out, gk_error *err)
{
  return h2_cpu_build_otf(t, single, threads, NULL, out, err);
}

gk_status h2_cpu_build_otf(const h2_tree *t, int single, int threads, h2_otf *otf, h2_cpu **out,
                           gk_error *err)
{
  if (cpu_alloc(t, single, threads, otf, out, err)) return err->status;
  if (fill_data(t, *out)) {
    h2_cpu_free(*out);
    *out = NULL;
    return gk_fail(err, GK_ERR_INTERRUPTED, "the H2 construction was interrupted");
  }
  return GK_OK;
}

gk_status h2_host_data_alloc(const h2_tree *t, h2_host_data *d, gk_error *err)
{
  d->U = (double *) malloc(h2_basis_entries(t) * sizeof(double) + 1);
  d->E = (double *) malloc(h2_transfer_entries(t) * sizeof(double) + 1);
  d->S = (double *) malloc(h2_coupling_entries(t) * sizeof(double) + 1);
  d->D = (double *) malloc(h2_dense_entries(t) * sizeof(double) + 1);
  if (d->U && d->E && d->S && d->D) return GK_OK;
  h2_host_data_free(d);
  return gk_fail(err, GK_ERR_NOMEM, "out of host memory for a copy of the H2 matrix data");
}

void h2_host_data_free(h2_host_data *d)
{
  free(d->U);
  free(d->E);
  free(d->S);
  free(d->D);
  d->U = d->E = d->S = d->D = NULL;
}

static void convert(void *dst, int dst_single, const void *src, int src_single, size_t count)
{
  if (dst_single == src_single) {
    memcpy(dst, src, count * (dst_single ? sizeof(float) : sizeof(double)));
  } else if (dst_single) {
    for (size_t i = 0; i < count; i++) ((float *) dst)[i] = (float) ((const double *) src)[i];
  } else {
    for (size_t i = 0; i < count; i++) ((double *) dst)[i] = ((const float *) src)[i];
  }
}

static void round_to_float(double *p, size_t count)
{
  for (size_t i = 0; i < count; i++) p[i] = (double) (float) p[i];
}

gk_status h2_export_fill_missing(const h2_tree *t, int single, int threads, int fill_s, int fill_d,
                                 h2_host_data *d, gk_error *err)
{
  if (!fill_s && !fill_d) return GK_OK;
  // The couplings are on the fly only in a tree of Chebyshev ranks (h2_otf_build).
  for (int l = 0; fill_s && l <= t->depth; l++)
    if (t->level_rank[l] != t->rank) {
      h2_host_data_free(d);
      return gk_fail(err, GK_ERR_INTERNAL, "couplings on the fly with ranks other than "
                     "the Chebyshev ones");
    }
  if (h2_fill_as_built(t, 0, threads, NULL, NULL, fill_s ? d->S : NULL, fill_d ? d->D : NULL)) {
    h2_host_data_free(d);
    return gk_fail(err, GK_ERR_INTERRUPTED, "the export of the H2 matrix was interrupted");
  }
  // Rounded as a stored matrix of this precision holds them, so that every
  // form of one matrix exports the same data (and compresses to the same ranks).
  if (single) {
    if (fill_s) round_to_float(d->S, h2_coupling_entries(t));
    if (fill_d) round_to_float(d->D, h2_dense_entries(t));
  }
  return GK_OK;
}

/* Every form: the arrays h stores converted, the others evaluated. */
gk_status h2_cpu_export(const h2_tree *t, const h2_cpu *h, h2_host_data *d, gk_error *err)
{
  int fill_s = couplings_on_the_fly(h), fill_d = h->otf != NULL;
  if (h2_host_data_alloc(t, d, err)) return err->status;
  convert(d->U, 0, h->data.U, h->single, h2_basis_entries(t));
  convert(d->E, 0, h->data.E, h->single, h2_transfer_entries(t));
  if (!fill_s) convert(d->S, 0, h->data.S, h->single, h2_coupling_entries(t));
  if (!fill_d) convert(d->D, 0, h->data.D, h->single, h2_dense_entries(t));
  return h2_export_fill_missing(t, h->single, h->threads, fill_s, fill_d, d, err);
}

gk_status h2_cpu_import(const h2_tree *t, int single, int threads, const h2_host_data *d,
                        struct h2_otf_s *dense_otf, h2_cpu **out, gk_error *err)
{
  *out = NULL;
  if (dense_otf && dense_otf->couplings_on_the_fly) {
    h2_otf_free(dense_otf);
    return gk_fail(err, GK_ERR_INTERNAL, "an H2 import needs a dense-only on-the-fly product");
  }
  if (cpu_alloc(t, single, threads, dense_otf, out, err)) return err->status;   // frees it on failure
  h2_cpu *h = *out;
  convert(h->data.U, single, d->U, 0, h2_basis_entries(t));
  convert(h->data.E, single, d->E, 0, h2_transfer_entries(t));
  convert(h->data.S, single, d->S, 0, h2_coupling_entries(t));
  if (!dense_otf) convert(h->data.D, single, d->D, 0, h2_dense_entries(t));
  return GK_OK;
}

gk_status h2_cpu_matmul(const h2_tree *t, h2_cpu *h, const double *x, int nrhs, double *y,
                        gk_error *err)
{
  size_t el = h->single ? sizeof(float) : sizeof(double);
  size_t rows = (size_t) t->n_leaves * t->leaf_size, tree = h2_hat_rows(t);
  h2_work w;
  w.xp = calloc(rows * nrhs + 1, el);
  w.yp = malloc(rows * nrhs * el + 1);
  w.xhat = malloc(tree * nrhs * el + 1);
  w.yhat = malloc(tree * nrhs * el + 1);
  gk_status status = GK_OK;
  if (!w.xp || !w.yp || !w.xhat || !w.yhat) {
    status = gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 product workspace");
    goto done;
  }
  for (int j = 0; j < nrhs; j++)
    for (int i = 0; i < t->n; i++)
      put(w.xp, t->slot_of_point[i] + rows * j, h->single, x[i + (size_t) j * t->n]);
  h2_ops ops = {h, el, cpu_gemm_strided, cpu_transfer, cpu_bsr, cpu_zero, cpu_nothing,
                cpu_nothing, couplings_on_the_fly(h)};
  status = h2_hmv(t, &ops, &h->data, &w, nrhs, err);
  if (status == GK_OK)
    for (int j = 0; j < nrhs; j++)
      for (int i = 0; i < t->n; i++) {
        size_t s = t->slot_of_point[i] + rows * j;
        y[i + (size_t) j * t->n] = h->single ? ((float *) w.yp)[s] : ((double *) w.yp)[s];
      }
done:
  free(w.xp);
  free(w.yp);
  free(w.xhat);
  free(w.yhat);
  return status;
}

void h2_cpu_free(h2_cpu *h)
{
  if (!h) return;
  free(h->data.U);
  free(h->data.E);
  free(h->data.S);
  free(h->data.D);
  h2_otf_free(h->otf);
  free(h);
}
