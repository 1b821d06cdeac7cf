/*
 * The GPU's batched operations of the HMV (h2_ops, written once in
 * h2_hmv.c). Blocks of at most 64 x 64 with at most 4 right-hand sides go
 * through the small-block kernels of h2_gemv.cuh (one launch per transfer
 * level, per dense phase and for every coupling level at once, long block
 * rows split over several thread blocks by the plan made at construction);
 * larger ones through cuBLAS strided-batched GEMMs and, for the block-sparse
 * phases, pointer arrays filled by a marshaling kernel and run slot by slot
 * with batched GEMMs. The dense phase runs on a low-priority stream, the
 * low-rank phases on a high-priority one, each with its own cuBLAS lane.
 */
#include <string.h>
#include <algorithm>
#include "h2/h2_gemv.cuh"
#include "h2/h2_blas_cuda.cuh"
#include "h2/h2_cuda_impl.cuh"

/* Pointers of block-sparse products: A_b = values + b bs^2, B_b = x + col_b bs,
 * C_b = y + row_b bs (one thread per block). */
template <typename T>
__global__ void marshal_bsr(const int *row, const int *col, int n_blocks, int bs, const T *values,
                            const T *x, T *y, const T **a_ptr, const T **b_ptr, T **c_ptr)
{
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  a_ptr[b] = values + (size_t) b * bs * bs;
  b_ptr[b] = x + (size_t) col[b] * bs;
  c_ptr[b] = y + (size_t) row[b] * bs;
}

struct gpu_ctx {
  h2_gpu *g;
  const h2_tree *t;
  cublasHandle_t blas_low_rank, blas_dense;   // the device's lanes, bound to g's streams
};

static cublasHandle_t blas_of(const gpu_ctx *cx, int stream)
{
  return stream == H2_STREAM_DENSE ? cx->blas_dense : cx->blas_low_rank;
}

static cudaStream_t stream_of(h2_gpu *g, int stream)
{
  return (cudaStream_t) (stream == H2_STREAM_DENSE ? g->dense : g->low_rank);
}

template <typename T>
static gk_status strided_t(const gpu_ctx *cx, int stream, int trans_a, int m, int n, int k,
                           const void *a, int lda, size_t sa, const void *b, int ldb, size_t sb,
                           double beta, void *c, int ldc, size_t sc, int count, gk_error *err)
{
  h2_gpu *g = cx->g;
  if (!g->force_cublas && h2_rows_fits(m, k, n) && lda == (trans_a ? k : m) &&
      (beta == 0.0 || beta == 1.0)) {
    h2_strided_args<T> p = {count, lda, trans_a ? m : k, n, beta != 0.0, trans_a, 1, 1,
                            (const T *) a, sa, (const T *) b, ldb, sb, (T *) c, ldc, sc};
    return gk_cuda_status(h2_strided_launch<T>(p, stream_of(g, stream)),
                          "the H2 small-block batched product", err);
  }
  for (int first = 0; first < count; first += H2_MAX_BATCH) {
    int chunk = std::min(H2_MAX_BATCH, count - first);
    cublasStatus_t st = h2_gemm_strided_batched(
      blas_of(cx, stream), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 1.0,
      (const T *) a + first * sa, lda, (long long) sa, (const T *) b + first * sb, ldb,
      (long long) sb, beta, (T *) c + first * sc, ldc, (long long) sc, chunk);
    if (gk_cublas_status(st, "the H2 strided batched product", err)) return err->status;
  }
  return GK_OK;
}

static gk_status gpu_gemm_strided(void *ctx, int stream, int trans_a, int m, int n, int k,
                                  const void *a, int lda, size_t sa, const void *b, int ldb,
                                  size_t sb, double beta, void *c, int ldc, size_t sc, int count,
                                  gk_error *err)
{
  const gpu_ctx *cx = (const gpu_ctx *) ctx;
  return cx->g->single
    ? strided_t<float>(cx, stream, trans_a, m, n, k, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count, err)
    : strided_t<double>(cx, stream, trans_a, m, n, k, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count, err);
}

/* Both children of every parent in one launch where the small-block kernels
 * apply (the upsweep sums the two children's products, the downsweep reads
 * parent 2i / 2 for child i), else two strided batches as before. */
template <typename T>
static gk_status transfer_t(const gpu_ctx *cx, int stream, int up, int kc, int kp, int nrhs,
                            const void *e, const void *x, void *y, int ld, int parents,
                            gk_error *err)
{
  h2_gpu *g = cx->g;
  size_t ek = (size_t) kc * kp;
  if (!g->force_cublas && h2_rows_fits(kc, kp, nrhs)) {
    h2_strided_args<T> p = {up ? parents : 2 * parents, kc, kp, nrhs, !up, up, up ? 2 : 1,
                            up ? 1 : 2, (const T *) e, ek, (const T *) x, ld,
                            (size_t) (up ? kc : kp), (T *) y, ld, (size_t) (up ? kp : kc)};
    return gk_cuda_status(h2_strided_launch<T>(p, stream_of(g, stream)),
                          "the H2 transfer product", err);
  }
  for (int c = 0; c < 2; c++) {
    gk_status st = up
      ? strided_t<T>(cx, stream, 1, kp, nrhs, kc, (const T *) e + c * ek, kc, 2 * ek,
                     (const T *) x + (size_t) c * kc, ld, 2 * (size_t) kc, c ? 1.0 : 0.0, y, ld,
                     (size_t) kp, parents, err)
      : strided_t<T>(cx, stream, 0, kc, nrhs, kp, (const T *) e + c * ek, kc, 2 * ek, x, ld,
                     (size_t) kp, 1.0, (T *) y + (size_t) c * kc, ld, 2 * (size_t) kc, parents,
                     err);
    if (st) return st;
  }
  return GK_OK;
}

static gk_status gpu_transfer(void *ctx, int stream, int up, int kc, int kp, int nrhs,
                              const void *e, const void *x, void *y, int ld, int parents,
                              gk_error *err)
{
  const gpu_ctx *cx = (const gpu_ctx *) ctx;
  return cx->g->single
    ? transfer_t<float>(cx, stream, up, kc, kp, nrhs, e, x, y, ld, parents, err)
    : transfer_t<double>(cx, stream, up, kc, kp, nrhs, e, x, y, ld, parents, err);
}

/* Whether one small-block launch can multiply every coupling level (the
 * HMV then makes one bsr call with H2_ALL_LEVELS). */
static int small_all_levels(const h2_tree *t, const h2_gpu *g, int nrhs)
{
  if (g->otf && g->otf->couplings_on_the_fly) return 1;
  if (g->force_cublas || nrhs > H2_GEMV_MAX_RHS || t->depth + 1 > H2_GEMV_MAX_LEVELS ||
      !g->cpl_task_first)
    return 0;
  for (int l = t->top_level; l <= t->depth; l++)
    if (t->coupling[l].n_blocks > 0 && t->level_rank[l] > H2_GEMV_MAX_DIM) return 0;
  return 1;
}

/* The operands of a block-sparse product y += A x, and the workspace where
 * split rows meet (h2_gemv.cuh). */
template <typename T>
static void bsr_operands(const h2_gpu *g, const void *values, const void *x, int ldx, void *y,
                         int ldy, int nrhs, h2_bsr_args<T> *p)
{
  p->nrhs = nrhs;
  p->accumulate = 1;
  p->a = (const T *) values;
  p->x = (const T *) x;
  p->ldx = ldx;
  p->y = (T *) y;
  p->ldy = ldy;
  p->partial = (T *) g->partial.ptr;
  p->counters = (int *) g->counters.ptr;
}

/* One marshaling launch for the level, then one batched GEMM per slot (the
 * blocks of a slot write distinct rows, so a batch never races). */
template <typename T>
static gk_status bsr_t(gpu_ctx *cx, int stream, int which, int level, const void *values, int bs,
                       const void *x, int ldx, void *y, int ldy, int nrhs, gk_error *err)
{
  h2_gpu *g = cx->g;
  const h2_tree *t = cx->t;
  // On the fly: the dense blocks, and every level's couplings in one call
  // (coupling_all_levels) unless they are stored (a compressed on-the-fly matrix).
  if (g->otf && (which == H2_DENSE || g->otf->couplings_on_the_fly))
    return h2_otf_gpu_product(g->otf, t, g->single, g->res.device, (void *) stream_of(g, stream),
                              which, x, ldx, y, ldy, nrhs, err);
  if (level == H2_ALL_LEVELS) {
    if (!small_all_levels(t, g, nrhs)) {   // not asked for by h2_gpu_run_hmv: level by level
      for (int l = t->top_level; l <= t->depth; l++) {
        if (t->coupling[l].n_blocks == 0) continue;
        size_t el = g->el;
        if (bsr_t<T>(cx, stream, which, l, (const char *) values + t->coupling_ptr[l] * el,
                     t->level_rank[l], (const char *) x + t->hat_ptr[l] * el, ldx,
                     (char *) y + t->hat_ptr[l] * el, ldy, nrhs, err))
          return err->status;
      }
      return GK_OK;
    }
    h2_bsr_args<T> p;
    memset(&p, 0, sizeof p);
    int n_tasks = 0;
    for (int l = 0; l <= t->depth; l++) {
      n_tasks += g->cpl_task_count[l];
      p.levels[l].bs = t->level_rank[l];
      p.levels[l].list = (int) t->coupling_offset[l];
      p.levels[l].values = t->coupling_ptr[l];
      p.levels[l].hat = t->hat_ptr[l];
    }
    p.n_tasks = n_tasks;
    p.tasks = (const h2_task *) g->cpl_tasks.ptr;
    p.row_blocks = (const int *) g->cpl_row_blocks.ptr;
    p.col = (const int *) g->cpl_col.ptr;
    bsr_operands<T>(g, values, x, ldx, y, ldy, nrhs, &p);
    p.n_levels = t->depth + 1;
    return gk_cuda_status(h2_bsr_launch<T>(p, stream_of(g, stream)),
                          "the H2 coupling product", err);
  }
  const h2_bsr *b = which == H2_DENSE ? &t->dense : &t->coupling[level];
  const int *row, *col, *row_blocks;
  void **ptrs;
  if (which == H2_DENSE) {
    row = (const int *) g->dense_row.ptr;
    col = (const int *) g->dense_col.ptr;
    row_blocks = (const int *) g->dense_row_blocks.ptr;
    ptrs = (void **) g->dense_ptrs.ptr;
  } else {
    row = (const int *) g->cpl_row.ptr + t->coupling_offset[level];
    col = (const int *) g->cpl_col.ptr + t->coupling_offset[level];
    row_blocks = (const int *) g->cpl_row_blocks.ptr + t->coupling_offset[level];
    ptrs = (void **) g->cpl_ptrs.ptr;
  }
  if (!g->force_cublas && h2_rows_fits(bs, bs, nrhs) && g->cpl_task_first) {
    h2_bsr_args<T> p;
    memset(&p, 0, sizeof p);
    const h2_task *tasks = (const h2_task *) (which == H2_DENSE ? g->dense_tasks.ptr
                                                                : g->cpl_tasks.ptr);
    p.n_tasks = which == H2_DENSE ? g->dense_task_count : g->cpl_task_count[level];
    p.tasks = which == H2_DENSE ? tasks : tasks + g->cpl_task_first[level];
    p.bs = bs;
    p.row_blocks = row_blocks;
    p.col = col;
    bsr_operands<T>(g, values, x, ldx, y, ldy, nrhs, &p);
    return gk_cuda_status(h2_bsr_launch<T>(p, stream_of(g, stream)),
                          "the H2 block-sparse product", err);
  }
  int nb = b->n_blocks;
  const T **a_ptr = (const T **) ptrs, **b_ptr = (const T **) ptrs + nb;
  T **c_ptr = (T **) ptrs + 2 * (size_t) nb;
  marshal_bsr<T><<<(nb + 255) / 256, 256, 0, stream_of(g, stream)>>>(
    row, col, nb, bs, (const T *) values, (const T *) x, (T *) y, a_ptr, b_ptr, c_ptr);
  if (gk_cuda_check_launch("the H2 marshaling kernel", err)) return err->status;
  for (int s = 0; s < b->n_slots; s++)
    for (int first = b->slot_ptr[s]; first < b->slot_ptr[s + 1]; first += H2_MAX_BATCH) {
      int chunk = std::min(H2_MAX_BATCH, b->slot_ptr[s + 1] - first);
      cublasStatus_t st = h2_gemm_pointer_batched(blas_of(cx, stream), CUBLAS_OP_N, CUBLAS_OP_N,
                                                  bs, nrhs, bs, 1.0, a_ptr + first, bs,
                                                  b_ptr + first, ldx, 1.0, c_ptr + first, ldy,
                                                  chunk);
      if (gk_cublas_status(st, "the H2 block-sparse batched product", err)) return err->status;
    }
  return GK_OK;
}

static gk_status gpu_bsr(void *ctx, int stream, int which, int level, const void *values, int bs,
                         const void *x, int ldx, void *y, int ldy, int nrhs, gk_error *err)
{
  gpu_ctx *cx = (gpu_ctx *) ctx;
  return cx->g->single
    ? bsr_t<float>(cx, stream, which, level, values, bs, x, ldx, y, ldy, nrhs, err)
    : bsr_t<double>(cx, stream, which, level, values, bs, x, ldx, y, ldy, nrhs, err);
}

static gk_status gpu_zero(void *ctx, int stream, void *p, size_t entries, gk_error *err)
{
  h2_gpu *g = ((gpu_ctx *) ctx)->g;
  return gk_cuda_status(cudaMemsetAsync(p, 0, entries * g->el, stream_of(g, stream)),
                        "clearing the H2 workspace", err);
}

/* Makes stream `to` wait for the work queued so far on stream `from`. */
static gk_status stream_wait(gk_stream from, cudaEvent_t event, gk_stream to, const char *what,
                             gk_error *err)
{
  GK_CUDA_TRY(cudaEventRecord(event, (cudaStream_t) from), what, err);
  GK_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t) to, event, 0), what, err);
  return GK_OK;
fail:
  return err->status;
}

static gk_status gpu_fork(void *ctx, gk_error *err)
{
  h2_gpu *g = ((gpu_ctx *) ctx)->g;
  return stream_wait(g->low_rank, g->forked, g->dense, "the H2 fork", err);
}

static gk_status gpu_join(void *ctx, gk_error *err)
{
  h2_gpu *g = ((gpu_ctx *) ctx)->g;
  return stream_wait(g->dense, g->joined, g->low_rank, "the H2 join", err);
}

gk_status h2_gpu_run_hmv(const h2_tree *t, h2_gpu *g, int nrhs, gk_error *err)
{
  // One cuBLAS lane per stream: a handle's workspace must not be shared by
  // two streams running at once.
  gpu_ctx cx = {g, t, NULL, NULL};
  if (gk_cublas_handle(GK_BLAS_LANE_0, g->low_rank, &cx.blas_low_rank, err) ||
      gk_cublas_handle(GK_BLAS_LANE_1, g->dense, &cx.blas_dense, err))
    return err->status;
  h2_work w = {g->xp.ptr, g->yp.ptr, g->xhat.ptr, g->yhat.ptr};
  h2_ops ops = {&cx, g->el, gpu_gemm_strided, gpu_transfer, gpu_bsr, gpu_zero, gpu_fork,
                gpu_join, small_all_levels(t, g, nrhs), g->otf != NULL};
  gk_status st = h2_hmv(t, &ops, &g->data, &w, nrhs, err);
  g->res.bytes = h2_gpu_bytes_held(g);   // the first on-the-fly product makes the engine's plans
  return st;
}
