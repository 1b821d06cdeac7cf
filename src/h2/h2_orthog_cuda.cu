/*
 * The QR upsweep of the GPU orthogonalization (h2_compress_cuda.cuh): the
 * leaf bases, then the stacked transfers [T_c1 E_c1; T_c2 E_c2] of each
 * level, with the nodes of a level as one batch. small_qr_kernel
 * (h2_small_qr.cuh) writes R and the first columns of Q in one launch (Q's
 * halves straight into the children's transfers), in shared memory or, for
 * stacks beyond it, in place in their workspace; shapes beyond it (more
 * than 256 rows, leaves beyond a block's shared memory) take cuBLAS
 * geqrfBatched, take_r and form_q (cuBLAS and cuSOLVER have no batched
 * orgqr). A matrix with fewer rows than columns is padded with zero rows,
 * which leaves R and the used part of Q unchanged.
 */
#include <stdlib.h>
#include <string.h>
#include "h2/h2_compress_cuda.cuh"
#include "h2/h2_small_qr.cuh"

template <typename T>
__global__ void strided_ptrs(T **p, T *base, size_t stride, int count)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) p[i] = base + (size_t) i * stride;
}

/* r_b = the first `rows` rows of the upper triangle of a_b (n columns), zero
 * below the diagonal; rows <= lda. */
template <typename T>
__global__ void take_r(const T *a, int lda, size_t sa, int n, T *r, int rows, size_t sr,
                       size_t total)
{
  size_t per = (size_t) rows * n;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    size_t b = e / per, rem = e % per;
    int i = (int) (rem % rows), j = (int) (rem / rows);
    r[b * sr + i + (size_t) j * rows] = i <= j ? a[b * sa + i + (size_t) j * lda] : (T) 0;
  }
}

/* The first r columns of Q = H_0 ... H_{p-1} (rows 0..m-1) from the
 * reflectors of geqrf (below the diagonal of a_b, scalars in tau_b), one
 * thread block per matrix and one thread per column of Q. */
template <typename T>
__global__ void form_q(const T *a, int lda, size_t sa, const T *tau, int ntau, int m, int p,
                       int r, T *q, int ldq, size_t sq)
{
  const T *A = a + blockIdx.x * sa;
  const T *tb = tau + (size_t) blockIdx.x * ntau;
  T *Q = q + blockIdx.x * sq;
  for (int c = threadIdx.x; c < r; c += blockDim.x) {
    T *col = Q + (size_t) c * ldq;
    for (int i = 0; i < m; i++) col[i] = i == c ? (T) 1 : (T) 0;
    for (int j = p - 1; j >= 0; j--) {
      T t = tb[j];
      if (t == (T) 0) continue;
      const T *v = A + (size_t) j * lda;   // v = [1; a(j+1:m, j)]
      T dot = col[j];
      for (int i = j + 1; i < m; i++) dot += v[i] * col[i];
      dot *= t;
      col[j] -= dot;
      for (int i = j + 1; i < m; i++) col[i] -= dot * v[i];
    }
  }
}

/* The halves of each stacked Q (rows = 2 kc, r columns) into the transfers of
 * the two children (kc x r each, consecutive). */
template <typename T>
__global__ void split_halves(const T *q, int kc, int r, T *e, size_t total)
{
  size_t per = (size_t) 2 * kc * r;
  for (size_t x = blockIdx.x * (size_t) blockDim.x + threadIdx.x; x < total;
       x += (size_t) gridDim.x * blockDim.x) {
    size_t node = x / per, rem = x % per;
    int c = (int) (rem / ((size_t) kc * r)), rr = (int) (rem % ((size_t) kc * r));
    int a = rr % kc, j = rr / kc;
    e[node * per + (size_t) c * kc * r + a + (size_t) j * kc] =
      q[node * per + (size_t) c * kc + a + (size_t) j * 2 * kc];
  }
}

template <typename T>
gk_status split_halves_launch(gpu_transform<T> &ctx, const T *q, int nodes, int kc, int r, T *e,
                              const char *what)
{
  size_t total = (size_t) nodes * 2 * kc * r;
  split_halves<T><<<h2_grid_for(total), 256, 0, ctx.s>>>(q, kc, r, e, total);
  return ctx.launched(what);
}

/* QR of `count` matrices a_b (ld x n, stride ld n, rows >= `rows` zero
 * beyond the data: ld = max(rows, n)), tau: n per matrix. */
template <typename T>
static gk_status batched_qr(gpu_transform<T> &ctx, T *a, int ld, int n, T *tau, int count)
{
  gk_error *err = ctx.err;
  T **ap = (T **) ctx.ptrs.ptr, **tp = ap + ctx.ptr_count;
  for (int first = 0; first < count; first += ctx.ptr_count) {
    int chunk = std::min(ctx.ptr_count, count - first);
    strided_ptrs<T><<<(chunk + 255) / 256, 256, 0, ctx.s>>>(ap, a + (size_t) first * ld * n,
                                                            (size_t) ld * n, chunk);
    strided_ptrs<T><<<(chunk + 255) / 256, 256, 0, ctx.s>>>(tp, tau + (size_t) first * n,
                                                            (size_t) n, chunk);
    if (ctx.launched("the H2 QR pointer arrays")) return err->status;
    int info = 0;
    if (ctx.blas(h2_geqrf_batched(ctx.h, ld, n, ap, ld, tp, &info, chunk), "the H2 batched QR"))
      return err->status;
    if (info != 0)
      return gk_fail(err, GK_ERR_INTERNAL, "the H2 batched QR rejected argument %d", -info);
  }
  return GK_OK;
}

/* The fallback for the leaves (shapes beyond small_qr_fits): U0_i (m x kq) =
 * Q_i R_i by geqrfBatched on copies padded to ld = max(m, kq) rows, in chunks;
 * Q_i(:, 1:r) to U (m x r per leaf), R_i's first r rows to P (r x kq per
 * leaf). */
template <typename T>
static gk_status leaf_qr_cublas(gpu_transform<T> &ctx, const T *U0, T *U, T *P, int m, int kq,
                                int r, int nodes)
{
  gk_error *err = ctx.err;
  int ld = std::max(m, kq);
  int chunk = (int) std::max<size_t>(1, std::min<size_t>(WORK_CHUNK_BYTES / ((size_t) ld * kq * sizeof(T)), nodes));
  T *a = ctx.alloc((size_t) chunk * ld * kq, "the H2 orthogonalization workspace");
  T *tau = ctx.alloc((size_t) chunk * kq, "the H2 orthogonalization workspace");
  if (!a || !tau) return err->status;
  for (int first = 0; first < nodes; first += chunk) {
    int cnt = std::min(chunk, nodes - first);
    // column j of leaf i: m entries to a pitch of ld (rows m..ld-1 zero)
    if ((ld > m && gk_cuda_status(cudaMemsetAsync(a, 0, (size_t) cnt * ld * kq * sizeof(T), ctx.s),
                                  "the H2 orthogonalization", err)) ||
        gk_cuda_status(cudaMemcpy2DAsync(a, ld * sizeof(T), U0 + (size_t) first * m * kq,
                                         m * sizeof(T), m * sizeof(T), (size_t) cnt * kq,
                                         cudaMemcpyDeviceToDevice, ctx.s),
                       "the H2 orthogonalization", err) ||
        batched_qr(ctx, a, ld, kq, tau, cnt))
      return err->status;
    size_t total = (size_t) cnt * r * kq;
    take_r<T><<<h2_grid_for(total), 256, 0, ctx.s>>>(a, ld, (size_t) ld * kq, kq,
                                                     P + (size_t) first * r * kq, r,
                                                     (size_t) r * kq, total);
    form_q<T><<<cnt, 64, 0, ctx.s>>>(a, ld, (size_t) ld * kq, tau, kq, m, std::min(m, kq), r,
                                    U + (size_t) first * m * r, m, (size_t) m * r);
    if (ctx.launched("the H2 orthogonalization kernels")) return err->status;
  }
  if (ctx.synced("the H2 orthogonalization")) return err->status;
  ctx.release(a);
  ctx.release(tau);
  return GK_OK;
}

/* The fallback for an inner level: the stacks z_i = [T_c1 E_c1; T_c2 E_c2]
 * (2 kc x kp, leading dimension ld = max(2 kc, kp), zero below row 2 kc) =
 * Q_i R_i by geqrfBatched (z overwritten); Q_i(:, 1:r)'s halves to the
 * children's transfers En (kc x r each), R_i's first r rows to P. */
template <typename T>
static gk_status inner_qr_cublas(gpu_transform<T> &ctx, T *z, int ld, T *En, T *P, int kc,
                                 int kp, int r, int nodes)
{
  gk_error *err = ctx.err;
  int rows = 2 * kc;
  T *tau = ctx.alloc((size_t) nodes * kp, "the H2 orthogonalization workspace");
  T *qs = ctx.alloc((size_t) nodes * rows * r, "the H2 orthogonalization workspace");
  if (!tau || !qs || batched_qr(ctx, z, ld, kp, tau, nodes)) return err->status;
  size_t total = (size_t) nodes * r * kp;
  take_r<T><<<h2_grid_for(total), 256, 0, ctx.s>>>(z, ld, (size_t) ld * kp, kp, P, r,
                                                   (size_t) r * kp, total);
  form_q<T><<<nodes, 64, 0, ctx.s>>>(z, ld, (size_t) ld * kp, tau, kp, rows, std::min(rows, kp),
                                    r, qs, rows, (size_t) rows * r);
  total = (size_t) nodes * rows * r;
  split_halves<T><<<h2_grid_for(total), 256, 0, ctx.s>>>(qs, kc, r, En, total);
  if (ctx.launched("the H2 orthogonalization kernels") || ctx.synced("the H2 orthogonalization"))
    return err->status;
  ctx.release(tau);
  ctx.release(qs);
  return GK_OK;
}

/* Within a compression the orthogonal form is a working copy: new bases and
 * transfers in the pool, everything else (the block lists on the GPU, the
 * dense blocks, the streams) the input's, which has the same blocks, and no
 * product plan of its own. It has no couplings: the downsweep projects them
 * a chunk at a time. Making a whole matrix for it (index uploads, product
 * plan, pointer arrays) would cost tens of milliseconds at 2^20 points. */
template <typename T>
static gk_status working_copy_of(gpu_transform<T> &ctx, const h2_tree *ot, h2_gpu **O)
{
  h2_gpu *c = (h2_gpu *) malloc(sizeof *c);
  if (!c) return gk_fail(ctx.err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
  *c = *ctx.in;
  c->dense_refs = NULL;   // not one of the dense blocks' owners
  c->otf = NULL;          // nor of the input's on-the-fly data
  *O = c;
  c->S = GK_DEVICE_BUFFER_EMPTY;
  const size_t counts[2] = {h2_basis_entries(ot), h2_transfer_entries(ot)};
  gk_device_buffer *bufs[2] = {&c->U, &c->E};
  for (int i = 0; i < 2; i++) {
    T *p = ctx.alloc(counts[i], "the H2 orthogonal form");
    if (!p) return ctx.err->status;
    bufs[i]->ptr = p;
    bufs[i]->bytes = (counts[i] ? counts[i] : 1) * sizeof(T);
  }
  return GK_OK;
}

template <typename T>
gk_status create_result(gpu_transform<T> &ctx, const h2_tree *nt, h2_gpu **out)
{
  h2_otf *dense = NULL;
  if (ctx.dense_otf && h2_otf_build_dense(nt, &dense, ctx.err)) return ctx.err->status;
  return h2_gpu_create_for_transform(nt, ctx.in->single, ctx.dense_otf ? NULL : ctx.in, dense,
                                     out, ctx.err);
}

/* Leaves: U_i = Q_i P_i, P_i = R_i (r x kq, r = min(m, kq)). */
template <typename T>
static gk_status orthogonalize_leaves(gpu_transform<T> &ctx, orthogonal_form<T> &orth)
{
  const h2_tree *t = ctx.t;
  gk_error *err = ctx.err;
  int q = t->depth, m = t->leaf_size, kq = t->level_rank[q], r = orth.tree.level_rank[q];
  int nodes = t->n_leaves;
  const T *U0 = (const T *) ctx.in->U.ptr;
  T *U = (T *) orth.data->U.ptr;
  T *&P = orth.projection[q];
  P = ctx.alloc((size_t) nodes * r * kq, "the H2 projection tree");
  if (!P) return err->status;
  if (r == std::min(m, kq) && small_qr_fits<T>(m, kq)) {
    small_qr_batch<T> b = {U0, (size_t) m * kq, m, kq, P, (size_t) r * kq,
                           U, (size_t) m * r, m, m, 0};
    if (gk_cuda_status(small_qr_launch<T>(nodes, b, ctx.s), "the H2 orthogonalization QR", err) ||
        ctx.launched("the H2 orthogonalization QR"))
      return err->status;
  } else if (leaf_qr_cublas(ctx, U0, U, P, m, kq, r, nodes)) {
    return err->status;
  }
  ctx.flops += 2 * h2_qr_flops(m, kq) * nodes;
  return ctx.synced("the H2 orthogonalization");
}

/* Inner level l: Z = [P_c1 E_c1; P_c2 E_c2] = Q P_parent; Q's halves are the
 * children's new transfers. */
template <typename T>
static gk_status orthogonalize_level(gpu_transform<T> &ctx, orthogonal_form<T> &orth, int l)
{
  const h2_tree *t = ctx.t, *ot = &orth.tree;
  gk_error *err = ctx.err;
  const int *k = t->level_rank, *kn = ot->level_rank;
  int kc = kn[l + 1], ko = k[l + 1], kp = k[l], r = kn[l], rows = 2 * kc, nodes = 1 << l;
  // The stacks in shared memory, else (250 x 125 in double: order 5 in 3D)
  // in place in z, else geqrfBatched.
  const bool thin = r == std::min(rows, kp);
  const bool fused = thin && small_qr_fits<T>(rows, kp);
  const bool in_place = thin && !fused && small_qr_fits_global(rows, kp);
  int ld = fused || in_place ? rows : std::max(rows, kp);   // geqrfBatched: zero rows to kp
  T *z = ctx.alloc((size_t) nodes * ld * kp, "the H2 orthogonalization workspace", ld > rows);
  T *&P = orth.projection[l];
  const T *P_children = orth.projection[l + 1];
  P = ctx.alloc((size_t) nodes * r * kp, "the H2 projection tree");
  if (!z || !P) return err->status;
  const T *E0 = (const T *) ctx.in->E.ptr + t->transfer_ptr[l + 1];
  for (int c = 0; c < 2; c++)
    if (ctx.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_N, kc, kp, ko, P_children + (size_t) c * kc * ko,
                         kc, (size_t) 2 * kc * ko, E0 + (size_t) c * ko * kp, ko,
                         (size_t) 2 * ko * kp, z + c * kc, ld, (size_t) ld * kp, nodes))
      return err->status;
  T *En = (T *) orth.data->E.ptr + ot->transfer_ptr[l + 1];   // kc x r each
  if (fused || in_place) {
    small_qr_batch<T> b = {z, (size_t) rows * kp, rows, kp, P, (size_t) r * kp,
                           En, (size_t) rows * r, kc, kc, (size_t) kc * r};
    if (in_place) small_qr_launch_global<T>(nodes, b, ctx.s);
    if ((fused && gk_cuda_status(small_qr_launch<T>(nodes, b, ctx.s),
                                 "the H2 orthogonalization QR", err)) ||
        ctx.launched("the H2 orthogonalization QR"))
      return err->status;
  } else if (inner_qr_cublas(ctx, z, ld, En, P, kc, kp, r, nodes)) {
    return err->status;
  }
  ctx.flops += nodes * (4.0 * kc * ko * kp + 2 * h2_qr_flops(rows, kp));
  if (ctx.synced("the H2 orthogonalization")) return err->status;
  ctx.release(z);
  return GK_OK;
}

/* The GPU's operations of the shared upsweep (h2_orthogonalize_upsweep). */
template <typename T>
struct gpu_orthogonalization {
  gpu_transform<T> *ctx;
  orthogonal_form<T> *orth;
};
template <typename T>
static gk_status gpu_orthogonalize_leaves(void *state, gk_error *)
{
  gpu_orthogonalization<T> *go = (gpu_orthogonalization<T> *) state;
  return orthogonalize_leaves(*go->ctx, *go->orth);
}
template <typename T>
static gk_status gpu_orthogonalize_level(void *state, int l, gk_error *)
{
  gpu_orthogonalization<T> *go = (gpu_orthogonalization<T> *) state;
  return orthogonalize_level(*go->ctx, *go->orth, l);
}

/* Input without low-rank blocks: the orthogonal form is the same data. */
template <typename T>
static gk_status copy_input(gpu_transform<T> &ctx, h2_gpu *O)
{
  const h2_tree *t = ctx.t;
  const size_t entries[3] = {h2_basis_entries(t), h2_transfer_entries(t), h2_coupling_entries(t)};
  const gk_device_buffer *from[3] = {&ctx.in->U, &ctx.in->E, &ctx.in->S};
  gk_device_buffer *to[3] = {&O->U, &O->E, &O->S};
  for (int i = 0; i < 3; i++)
    if (gk_cuda_status(cudaMemcpyAsync(to[i]->ptr, from[i]->ptr, entries[i] * sizeof(T),
                                       cudaMemcpyDeviceToDevice, ctx.s), "the H2 copy", ctx.err))
      return ctx.err->status;
  return GK_OK;
}

template <typename T>
gk_status orthogonalize_gpu(gpu_transform<T> &ctx, orthogonal_form<T> &orth, bool working_copy,
                            h2_compress_stats *st)
{
  const h2_tree *t = ctx.t;
  gk_error *err = ctx.err;
  int q = t->depth, top = t->top_level;
  std::vector<int> kn(q + 1);
  double start = h2_seconds_now();
  h2_orthogonal_ranks(t, kn.data());
  if (h2_tree_copy(&orth.tree, t, err)) return err->status;
  h2_tree_set_ranks(&orth.tree, kn.data());
  orth.working_copy = working_copy;
  if (working_copy ? working_copy_of(ctx, &orth.tree, &orth.data)
                   : create_result(ctx, &orth.tree, &orth.data))
    return err->status;
  orth.projection.assign(q + 1, (T *) NULL);
  if (top > q) return copy_input(ctx, orth.data);
  gpu_orthogonalization<T> go = {&ctx, &orth};
  h2_level_ops ops = {&go, gpu_orthogonalize_leaves<T>, gpu_orthogonalize_level<T>};
  if (gk_cuda_status(cudaMemsetAsync(orth.data->E.ptr, 0,
                                     h2_transfer_entries(&orth.tree) * sizeof(T), ctx.s),
                     "the H2 orthogonalization", err) ||
      h2_orthogonalize_upsweep(t, &ops, err))
    return err->status;
  st->seconds_orthogonalize = h2_seconds_now() - start;
  if (working_copy) return GK_OK;   // the compression projects the couplings as it needs them
  start = h2_seconds_now();
  if (project_couplings(ctx, &orth.tree, orth.projection.data(), (const T *) ctx.in->S.ptr,
                        (T *) orth.data->S.ptr))
    return err->status;
  st->seconds_project = h2_seconds_now() - start;
  return GK_OK;
}

#define H2_ORTHOG_INSTANCES(T)                                                                    \
  template gk_status orthogonalize_gpu<T>(gpu_transform<T> &, orthogonal_form<T> &, bool,        \
                                          h2_compress_stats *);                                  \
  template gk_status create_result<T>(gpu_transform<T> &, const h2_tree *, h2_gpu **);           \
  template gk_status split_halves_launch<T>(gpu_transform<T> &, const T *, int, int, int, T *,   \
                                            const char *);
H2_ORTHOG_INSTANCES(float)
H2_ORTHOG_INSTANCES(double)
