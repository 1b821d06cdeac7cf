/*
 * Orthogonalization and compression of a GPU H2 matrix (h2_compress.h): the
 * steps of h2_compress_cpu.c, level by level, with the nodes (or blocks) of a
 * level as one batch, in the matrix's precision. This file is the driver;
 * the steps are in h2_orthog_cuda.cu (QR upsweep), h2_generate_cuda.cu
 * (downsweep), h2_truncate_cuda.cu (truncation upsweep, ranks by the shared
 * plan of h2_compress_plan.c) and h2_project_cuda.cu (couplings).
 * Memory: the result shares the dense leaf blocks with the input, or keeps
 * them on the fly as an on-the-fly input does (whose couplings are evaluated
 * a chunk at a time where they are read, never stored). The other
 * workspaces are per level or chunks (h2_compress_cuda.cuh).
 */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "h2/h2_compress_cuda.cuh"

/* Sum of squares of the input's dense blocks: stored, or evaluated in chunks. */
template <typename T>
static gk_status dense_sum_squares(gpu_transform<T> &ctx, double *out)
{
  const h2_tree *t = ctx.t;
  if (!ctx.dense_otf) return ctx.sum_squares((const T *) ctx.in->D.ptr, h2_dense_entries(t), out);
  size_t mm = (size_t) t->leaf_size * t->leaf_size, blocks = (size_t) t->dense.n_blocks;
  size_t chunk = std::max<size_t>(1, std::min(blocks, WORK_CHUNK_BYTES / (mm * sizeof(T))));
  T *made = ctx.alloc(chunk * mm, "the H2 dense blocks evaluated");
  if (!made) return ctx.err->status;
  double total = 0.0;
  for (size_t first = 0; first < blocks; first += chunk) {
    size_t count = std::min(chunk, blocks - first);
    double part = 0.0;
    if (h2_gpu_fill_as_built(t, ctx.in, &ctx.geo, H2_DENSE, 0, first, count, NULL, made, ctx.s,
                             ctx.err) ||
        ctx.sum_squares(made, count * mm, &part))   // nrm2 returns to the host: made is free again
      return ctx.err->status;
    total += part;
  }
  ctx.release(made);
  *out = total;
  return GK_OK;
}

/* ||A||_F: the dense blocks (the input's) and, when asked, the couplings of
 * the orthogonal form (a compression adds them as the downsweep makes them). */
template <typename T>
static gk_status norm_of(gpu_transform<T> &ctx, const orthogonal_form<T> &orth, bool couplings,
                         double *norm)
{
  double s2 = 0.0, d2 = 0.0;
  if ((couplings && ctx.sum_squares((const T *) orth.data->S.ptr,
                                    h2_coupling_entries(&orth.tree), &s2)) ||
      dense_sum_squares(ctx, &d2))
    return ctx.err->status;
  *norm = sqrt(s2 + d2);
  return GK_OK;
}

/* The result's leaf bases U Q(:, 1:r) and transfers (the halves of the
 * parents' kept singular vectors), written into C (structure nt). */
template <typename T>
static gk_status form_new_bases(gpu_transform<T> &ctx, const orthogonal_form<T> &orth,
                                const gpu_truncated<T> &kept, const h2_tree *nt, h2_gpu *C)
{
  const h2_tree *t = &orth.tree;
  gk_error *err = ctx.err;
  int q = t->depth, top = t->top_level, m = t->leaf_size;
  int kq = t->level_rank[q], r = kept.rank[q], nodes = t->n_leaves;
  const T *Uo = (const T *) orth.data->U.ptr;
  T *En = (T *) C->E.ptr;
  if (ctx.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_N, m, r, kq, Uo, m, (size_t) m * kq, kept.vectors[q],
                       kq, (size_t) kq * r, (T *) C->U.ptr, m, (size_t) m * r, nodes) ||
      gk_cuda_status(cudaMemsetAsync(En, 0, h2_transfer_entries(nt) * sizeof(T), ctx.s),
                     "the H2 truncation", err))
    return err->status;
  ctx.flops += 2.0 * nodes * m * r * kq;
  for (int l = q - 1; l >= top; l--)
    if (split_halves_launch(ctx, kept.vectors[l], 1 << l, kept.rank[l + 1], kept.rank[l],
                            En + nt->transfer_ptr[l + 1], "the H2 truncation"))
      return err->status;
  if (ctx.synced("the H2 truncation")) return err->status;
  for (int l = top; l <= q; l++) ctx.release(kept.vectors[l]);
  return GK_OK;
}

/* The result's couplings, projected from the input's with the product of
 * both projections (input basis -> orthogonal -> truncated: r x k per node),
 * so that the orthogonal couplings are never stored. */
template <typename T>
static gk_status project_new_couplings(gpu_transform<T> &ctx, const orthogonal_form<T> &orth,
                                       const gpu_truncated<T> &kept, const h2_tree *nt,
                                       h2_gpu *C)
{
  const h2_tree *t = &orth.tree;
  int q = t->depth;
  const int *k = t->level_rank;
  std::vector<T *> both(q + 1, (T *) NULL);
  for (int l = t->top_level; l <= q; l++) {
    int nodes = 1 << l, kin = ctx.t->level_rank[l], r = kept.rank[l];
    both[l] = ctx.alloc((size_t) nodes * r * kin, "the H2 projection tree");
    if (!both[l] ||
        ctx.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_N, r, kin, k[l], kept.projection[l], r,
                         (size_t) r * k[l], orth.projection[l], k[l], (size_t) k[l] * kin,
                         both[l], r, (size_t) r * kin, nodes))
      return ctx.err->status;
    ctx.flops += 2.0 * nodes * r * k[l] * kin;
  }
  if (project_couplings(ctx, nt, both.data(), (const T *) ctx.in->S.ptr, (T *) C->S.ptr))
    return ctx.err->status;
  return ctx.synced("the H2 compression");
}

/* Compression of the orthogonal form (a working copy without couplings) to
 * tol into (nt, *C): the downsweep's R factors, the truncation, the new
 * bases and the new couplings. st->norm_frobenius (the dense part on entry,
 * norm_of) gets the orthogonal couplings' part as the downsweep makes them. */
template <typename T>
static gk_status compress_gpu(gpu_transform<T> &ctx, const orthogonal_form<T> &orth, double tol,
                              h2_tree *nt, h2_gpu **C, h2_compress_stats *st)
{
  gk_error *err = ctx.err;
  std::vector<T *> R;
  gpu_truncated<T> kept;
  double start = h2_seconds_now(), couplings_sq = 0.0;
  if (generate_r_factors(ctx, orth, R, &couplings_sq, st)) return err->status;
  st->norm_frobenius = sqrt(st->norm_frobenius * st->norm_frobenius + couplings_sq);
  st->seconds_generate = h2_seconds_now() - start - st->seconds_project;
  start = h2_seconds_now();
  if (truncate_gpu(ctx, orth, R, tol, kept, st) || h2_tree_copy(nt, &orth.tree, err))
    return err->status;
  h2_tree_set_ranks(nt, kept.rank.data());
  if (create_result(ctx, nt, C) || form_new_bases(ctx, orth, kept, nt, *C)) return err->status;
  st->seconds_truncate = h2_seconds_now() - start;
  start = h2_seconds_now();
  if (project_new_couplings(ctx, orth, kept, nt, *C)) return err->status;
  st->seconds_project += h2_seconds_now() - start;
  return GK_OK;
}

/* A QR or SVD that went wrong shows as a non-finite result: an error, not a
 * silent one. */
template <typename T>
static gk_status check_finite(gpu_transform<T> &ctx, const h2_tree *nt, const h2_gpu *out,
                              double tol)
{
  double couplings = 0.0, basis = 0.0;
  if (ctx.sum_squares((const T *) out->S.ptr, h2_coupling_entries(nt), &couplings) ||
      ctx.sum_squares((const T *) out->U.ptr, h2_basis_entries(nt), &basis))
    return ctx.err->status;
  if (isfinite(couplings) && isfinite(basis)) return GK_OK;
  return gk_fail(ctx.err, GK_ERR_INTERNAL, "the H2 %s on the GPU gave non-finite values",
                 tol > 0 ? "compression" : "orthogonalization");
}

template <typename T>
static gk_status transform(const h2_tree *t, h2_gpu *in, double tol, int threads, h2_tree *nt,
                           h2_gpu **out, h2_compress_stats *st, gk_error *err)
{
  gpu_transform<T> ctx;
  ctx.t = t;
  ctx.in = in;
  ctx.h = NULL;
  ctx.s = (cudaStream_t) in->low_rank;
  ctx.threads = threads;
  ctx.flops = 0.0;
  ctx.err = err;
  ctx.ptrs = GK_DEVICE_BUFFER_EMPTY;
  ctx.ptr_count = H2_MAX_BATCH;
  ctx.couplings_otf = in->otf && in->otf->couplings_on_the_fly;
  ctx.dense_otf = in->otf != NULL;
  ctx.geo = {GK_DEVICE_BUFFER_EMPTY, GK_DEVICE_BUFFER_EMPTY, GK_DEVICE_BUFFER_EMPTY,
             GK_DEVICE_BUFFER_EMPTY};
  orthogonal_form<T> orth;
  memset(&orth.tree, 0, sizeof orth.tree);
  gk_status status = GK_OK;
  // A compression's orthogonal form is a working copy; an orthogonalization's is the result.
  const bool working_copy = tol > 0 && t->top_level <= t->depth;
  if (gk_cublas_handle(GK_BLAS_LANE_0, in->low_rank, &ctx.h, err) ||
      gk_buffer_alloc(&ctx.ptrs, 6 * (size_t) ctx.ptr_count * sizeof(void *),
                      "the H2 compression's pointer arrays", err)) {
    status = err->status;
  } else {
    ctx.pool.keep(ctx.ptrs);
    if ((ctx.couplings_otf || ctx.dense_otf) && h2_gpu_geometry_upload(t, &ctx.geo, err))
      status = err->status;
    if (!status) status = orthogonalize_gpu<T>(ctx, orth, working_copy, st);
    if (!status) status = norm_of<T>(ctx, orth, !working_copy, &st->norm_frobenius);
    if (!status && working_copy) {
      status = compress_gpu<T>(ctx, orth, tol, nt, out, st);
    } else if (!status) {   // orthogonalization (or nothing to truncate): the result
      *nt = orth.tree;
      memset(&orth.tree, 0, sizeof orth.tree);
      *out = orth.data;
      orth.data = NULL;
      st->error_frobenius = 0.0;
    }
  }
  if (!status) status = ctx.synced("the H2 compression");
  if (!status) status = check_finite(ctx, nt, *out, tol);
  ctx.pool.free_all();   // the work buffers, before the geometry and the orthogonal form
  h2_gpu_geometry_free(&ctx.geo);
  st->flops = ctx.flops;
  if (orth.working_copy) free(orth.data);
  else h2_gpu_free(orth.data);
  h2_tree_free(&orth.tree);
  if (status) {
    h2_gpu_free(*out);
    *out = NULL;
    h2_tree_free(nt);
  }
  return status;
}

extern "C" gk_status h2_transform_gpu(const h2_tree *t, h2_gpu *in, double tol, int threads,
                                      h2_tree *out_tree, h2_gpu **out, h2_compress_stats *st,
                                      gk_error *err)
{
  *out = NULL;
  memset(out_tree, 0, sizeof *out_tree);
  memset(st, 0, sizeof *st);
  if (tol < 0 || tol != tol)
    return gk_fail(err, GK_ERR_INPUT, "the compression tolerance must be positive");
  if (gk_resident_enter(&in->res, err)) return err->status;
  if (gk_cuda_status(cudaDeviceSynchronize(), "the H2 matrix", err)) return err->status;
  return in->single ? transform<float>(t, in, tol, threads, out_tree, out, st, err)
                    : transform<double>(t, in, tol, threads, out_tree, out, st, err);
}
