/*
 * The GPU backend of the compression's truncation upsweep (the schedule and
 * the rank choice are h2_truncate_upsweep, h2_compress_plan.c): per level the
 * weighted bases W_i and their SVDs, then the projections onto the kept
 * singular vectors. The SVDs run on the GPU (a batched one-sided Jacobi in
 * double, h2_svd_cuda.cu; cuSOLVER's batched SVDs take matrices up to
 * 32 x 32 only, and its Gram-based gesvdaStridedBatched loses the small
 * singular values that the rank choice sums). Only the singular values cross
 * the bus; the vectors stay on the GPU. A level whose matrices do not fit one
 * block's shared memory is done on the host (h2_svd_left_batch, LAPACK).
 */
#include "h2/h2_compress_cuda.cuh"
#include "h2/h2_svd_cuda.cuh"

/* b_i = a_i^T for the rows x cols matrices a_i (consecutive; b_i: cols x rows). */
template <typename T>
__global__ void transpose_each(const T *a, int rows, int cols, T *b, size_t total)
{
  size_t per = (size_t) rows * cols;
  for (size_t x = blockIdx.x * (size_t) blockDim.x + threadIdx.x; x < total;
       x += (size_t) gridDim.x * blockDim.x) {
    size_t node = x / per, rem = x % per;
    int i = (int) (rem % rows), j = (int) (rem / rows);
    b[node * per + j + (size_t) i * cols] = a[x];
  }
}

/* The upsweep's state: what the plan's two operations share. */
template <typename T>
struct gpu_truncation {
  gpu_transform<T> *ctx;
  const orthogonal_form<T> *orth;
  std::vector<T *> *R;      // the downsweep's R factors, released level by level
  gpu_truncated<T> *out;    // the kept singular vectors and the projections
  const int *rank;          // the new ranks chosen so far
  T *Z;                     // this level's children's projected transfers, stacked
  T *Qd;                    // this level's left singular vectors, rows x min(rows, k_l)
  std::vector<double> Wh, Qh;   // the host path only
};

template <typename T>
static gk_status to_host(gpu_transform<T> &ctx, double *dst, const T *src, size_t count)
{
  gk_error *err = ctx.err;
  if (!count) return GK_OK;
  std::vector<T> tmp;
  T *stage = (T *) dst;
  if (sizeof(T) != sizeof(double)) {
    try { tmp.resize(count); } catch (...) {
      return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
    }
    stage = tmp.data();
  }
  if (gk_cuda_status(cudaMemcpyAsync(stage, src, count * sizeof(T), cudaMemcpyDeviceToHost, ctx.s),
                     "copying the H2 truncation to the host", err) ||
      ctx.synced("the H2 compression"))
    return err->status;
  if (sizeof(T) != sizeof(double))
    for (size_t i = count; i-- > 0;) dst[i] = (double) tmp[i];
  return GK_OK;
}

template <typename T>
static gk_status to_device(gpu_transform<T> &ctx, T *dst, const double *src, size_t count)
{
  gk_error *err = ctx.err;
  if (!count) return GK_OK;
  std::vector<T> tmp;
  const T *stage = (const T *) src;
  if (sizeof(T) != sizeof(double)) {
    try { tmp.resize(count); } catch (...) {
      return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
    }
    for (size_t i = 0; i < count; i++) tmp[i] = (T) src[i];
    stage = tmp.data();
  }
  if (gk_cuda_status(cudaMemcpyAsync(dst, stage, count * sizeof(T), cudaMemcpyHostToDevice, ctx.s),
                     "copying the H2 truncation to the GPU", err) ||
      ctx.synced("the H2 compression"))
    return err->status;
  return GK_OK;
}

/* The host path of one level's SVDs: W (or, at the leaves, R, whose
 * transposes are the weighted bases) to the host, LAPACK, the vectors back. */
template <typename T>
static gk_status svd_on_host(gpu_truncation<T> &tr, int l, int rows, const T *Wd, double *sig)
{
  gpu_transform<T> &ctx = *tr.ctx;
  gk_error *err = ctx.err;
  int q = tr.orth->tree.depth, nodes = 1 << l, kl = tr.orth->tree.level_rank[l];
  int n_vectors = std::min(rows, kl);
  try {
    tr.Wh.resize((size_t) nodes * rows * kl);
    tr.Qh.resize((size_t) nodes * rows * n_vectors);
  } catch (...) {
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
  }
  if (l == q) {   // R_i^T
    if (to_host(ctx, tr.Qh.data(), (*tr.R)[q], (size_t) nodes * kl * kl)) return err->status;
    for (int i = 0; i < nodes; i++) {
      const double *ri = tr.Qh.data() + (size_t) i * kl * kl;
      double *wi = tr.Wh.data() + (size_t) i * kl * kl;
      for (int c = 0; c < kl; c++)
        for (int r = 0; r < kl; r++) wi[r + (size_t) c * kl] = ri[c + (size_t) r * kl];
    }
  } else if (to_host(ctx, tr.Wh.data(), Wd, (size_t) nodes * rows * kl)) {
    return err->status;
  }
  int e = h2_svd_left_batch(nodes, rows, kl, tr.Wh.data(), sig, tr.Qh.data(), ctx.threads,
                            &ctx.flops);
  if (e == -1000) return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
  if (e) return gk_fail(err, GK_ERR_INTERNAL, "LAPACK failed in the H2 compression (info = %d)", e);
  return to_device(ctx, tr.Qd, tr.Qh.data(), (size_t) nodes * rows * n_vectors);
}

/* h2_truncation_ops.weighted_svd: W_i = Z_i R_i^T with Z_i the children's
 * projected transfers stacked (at the leaves W_i = U_i R_i^T, factored as
 * R_i^T since U is orthonormal). */
template <typename T>
static gk_status gpu_weighted_svd(void *state, int l, int rows, double *sig, gk_error *err)
{
  gpu_truncation<T> &tr = *(gpu_truncation<T> *) state;
  gpu_transform<T> &ctx = *tr.ctx;
  const h2_tree *t = &tr.orth->tree;
  std::vector<T *> &R = *tr.R;
  int q = t->depth, nodes = 1 << l, kl = t->level_rank[l], n_vectors = std::min(rows, kl);
  T *Wd = R[l];
  tr.Z = NULL;
  if (l < q) {
    int kc = tr.rank[l + 1], ko = t->level_rank[l + 1];
    const T *E = (const T *) tr.orth->data->E.ptr + t->transfer_ptr[l + 1];
    const T *P = tr.out->projection[l + 1];
    tr.Z = ctx.alloc((size_t) nodes * rows * kl, "the H2 truncation workspace");
    Wd = ctx.alloc((size_t) nodes * rows * kl, "the H2 truncation workspace");
    if (!tr.Z || !Wd) return err->status;
    for (int c = 0; c < 2; c++)
      if (ctx.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_N, kc, kl, ko, P + (size_t) c * kc * ko, kc,
                           (size_t) 2 * kc * ko, E + (size_t) c * ko * kl, ko,
                           (size_t) 2 * ko * kl, tr.Z + c * kc, rows, (size_t) rows * kl, nodes))
        return err->status;
    if (ctx.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_T, rows, kl, kl, tr.Z, rows, (size_t) rows * kl,
                         R[l], kl, (size_t) kl * kl, Wd, rows, (size_t) rows * kl, nodes))
      return err->status;
    ctx.flops += nodes * (4.0 * kc * ko * kl + 2.0 * rows * kl * kl);
  }
  tr.Qd = ctx.alloc((size_t) nodes * rows * n_vectors, "the H2 truncation workspace");
  if (!tr.Qd) return err->status;
  if (h2_svd_gpu_fits(rows, kl)) {
    size_t count = (size_t) nodes * n_vectors;
    double *sd = ctx.template alloc<double>(count, "the H2 truncation workspace");
    if (!sd || h2_svd_left_gpu(nodes, rows, kl, Wd, l == q, sd, tr.Qd, ctx.s, err) ||
        gk_cuda_status(cudaMemcpyAsync(sig, sd, count * sizeof(double), cudaMemcpyDeviceToHost,
                                       ctx.s),
                       "copying the H2 singular values to the host", err) ||
        ctx.synced("the H2 compression"))
      return err->status;
    ctx.release(sd);
    ctx.flops += nodes * h2_svd_flops(rows, kl);
  } else if (svd_on_host(tr, l, rows, Wd, sig)) {
    return err->status;
  }
  if (l < q) ctx.release(Wd);
  ctx.release(R[l]);
  return GK_OK;
}

/* h2_truncation_ops.keep_rank: Q_i(:, 1:r) kept, and the projection
 * T_i = Q_i(:, 1:r)^T Z_i (old basis onto the new), r x k_l. */
template <typename T>
static gk_status gpu_keep_rank(void *state, int l, int rows, int r, gk_error *err)
{
  gpu_truncation<T> &tr = *(gpu_truncation<T> *) state;
  gpu_transform<T> &ctx = *tr.ctx;
  const h2_tree *t = &tr.orth->tree;
  int q = t->depth, nodes = 1 << l, kl = t->level_rank[l], n_vectors = std::min(rows, kl);
  T *&Q = tr.out->vectors[l], *&P = tr.out->projection[l];
  if (r < n_vectors) {   // only Q_i(:, 1:r) is used from here on
    Q = ctx.alloc((size_t) nodes * rows * r, "the H2 truncation's singular vectors");
    if (!Q ||
        gk_cuda_status(cudaMemcpy2DAsync(Q, (size_t) rows * r * sizeof(T), tr.Qd,
                                         (size_t) rows * n_vectors * sizeof(T),
                                         (size_t) rows * r * sizeof(T), nodes,
                                         cudaMemcpyDeviceToDevice, ctx.s),
                       "the H2 truncation", err))
      return err->status;
    ctx.release(tr.Qd);
  } else {
    Q = tr.Qd;
  }
  P = ctx.alloc((size_t) nodes * r * kl, "the H2 projection tree");
  if (!P) return err->status;
  if (l == q) {
    size_t total = (size_t) nodes * kl * r;
    transpose_each<T><<<h2_grid_for(total), 256, 0, ctx.s>>>(Q, kl, r, P, total);
    if (ctx.launched("the H2 truncation")) return err->status;
  } else {
    if (ctx.gemm_strided(CUBLAS_OP_T, CUBLAS_OP_N, r, kl, rows, Q, rows, (size_t) rows * r, tr.Z,
                         rows, (size_t) rows * kl, P, r, (size_t) r * kl, nodes))
      return err->status;
    ctx.release(tr.Z);
    ctx.flops += 2.0 * nodes * r * kl * rows;
  }
  return GK_OK;
}

template <typename T>
gk_status truncate_gpu(gpu_transform<T> &ctx, const orthogonal_form<T> &orth, std::vector<T *> &R,
                       double tol, gpu_truncated<T> &out, h2_compress_stats *st)
{
  int levels = orth.tree.depth + 1;
  out.rank.assign(levels, 1);
  out.weighted_rows.assign(levels, 0);
  out.vectors.assign(levels, (T *) NULL);
  out.projection.assign(levels, (T *) NULL);
  gpu_truncation<T> tr = {&ctx, &orth, &R, &out, out.rank.data(), NULL, NULL, {}, {}};
  h2_truncation_ops ops = {&tr, gpu_weighted_svd<T>, gpu_keep_rank<T>};
  return h2_truncate_upsweep(&orth.tree, tol, &ops, out.rank.data(), out.weighted_rows.data(), st,
                             ctx.err);
}

#define H2_TRUNCATE_INSTANCES(T)                                                                  \
  template gk_status truncate_gpu<T>(gpu_transform<T> &, const orthogonal_form<T> &,             \
                                     std::vector<T *> &, double, gpu_truncated<T> &,             \
                                     h2_compress_stats *);
H2_TRUNCATE_INSTANCES(float)
H2_TRUNCATE_INSTANCES(double)
