/*
 * The downsweep of the GPU compression (h2_compress_cuda.cuh): per level the
 * R factor of each node's stack [R_parent E_i^T; S_e^T ...] (Q not formed).
 * stack_qr_kernel (h2_stack_qr.cuh) takes one thread block per node, R in
 * shared memory, the rows streamed from the heads and the coupling blocks
 * where they lie, so no stack is formed. Levels whose rank exceeds the
 * kernel's limit, or the tunable GK_H2_STACK_QR_MAX_RANK, take the fallback:
 * passes of P blocks (the tunable GK_H2_STACK_PIECES), each handing
 * geqrfBatched pointer arrays of the nodes that take part. Either way the
 * orthogonal couplings are projected chunk by chunk of clusters just before
 * their QRs (coupling_chunks), so they are never all allocated.
 */
#include "h2/h2_compress_cuda.cuh"
#include "h2/h2_stack_qr.cuh"
#include "device/gk_tunables.h"

/* Bytes of one chunk of a level's orthogonal couplings, projected just before
 * its stack QRs (generate_level): larger chunks mean fewer QR launches (each
 * ends with a partly idle wave), smaller ones less memory to allocate and
 * free. The tunable GK_H2_PROJECT_CHUNK_MB (default in gk_tunables.c): large
 * enough that a chunk is as fast as a whole level at a time. */
static size_t project_chunk_bytes(void)
{
  return (size_t) gk_tunable(GK_TUNE_H2_PROJECT_CHUNK_MB) << 20;
}

/* The downsweep factors node i's stack in passes of at most P coupling blocks
 * (P = the stack pieces): pass 0 takes the first `first_pieces` blocks under
 * R_parent E_i^T (the remainder, so that every later pass is full), pass
 * p >= 1 the next P under the R factor of the pass before. A node with no
 * blocks has one pass of its head alone. */
__host__ __device__ static inline int stack_passes(int blocks, int P)
{
  return blocks ? (blocks + P - 1) / P : 1;
}
__host__ __device__ static inline int first_pieces(int blocks, int P)
{
  return blocks - (stack_passes(blocks, P) - 1) * P;
}

/* The pointers of the listed stacks (slot list_j - first of the chunk). */
template <typename T>
__global__ void stack_ptrs(T **a, T **tau, const int *list, int count, int first, T *M,
                           size_t per, T *taus, int ntau)
{
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= count) return;
  size_t slot = (size_t) (list[j] - first);
  a[j] = M + slot * per;
  tau[j] = taus + slot * ntau;
}

/* Rows head .. rows-1 of the listed stacks (leading dimension ld, slot stride
 * per): S_e^T for the blocks of the node's block row that pass `pass` takes,
 * kl rows each, zero below them (a stack padded to kl rows). */
template <typename T>
__global__ void fill_stack(const T *S, const int *row_ptr, const int *row_blocks, const int *list,
                           int first, int pass, int P, int kl, int head, int rows, int ld,
                           size_t per, T *M, size_t total)
{
  size_t kk = (size_t) kl * kl, height = (size_t) (rows - head), each = height * kl;
  for (size_t x = blockIdx.x * (size_t) blockDim.x + threadIdx.x; x < total;
       x += (size_t) gridDim.x * blockDim.x) {
    size_t b = x / each, rem = x % each;
    int r = (int) (rem % height), c = (int) (rem / height), e = r / kl, rr = r % kl;
    int node = list[b], begin = row_ptr[node], blocks = row_ptr[node + 1] - begin;
    int lead = first_pieces(blocks, P);
    int pieces = pass == 0 ? lead : P, e_first = pass == 0 ? 0 : lead + (pass - 1) * P;
    T v = (T) 0;
    if (e < pieces) v = S[(size_t) row_blocks[begin + e_first + e] * kk + c + (size_t) rr * kl];
    M[(size_t) (node - first) * per + head + r + (size_t) c * ld] = v;
  }
}

/* After a pass: the R factor (kl x kl, top of each listed stack) stays in
 * place for the node's next pass (zero below the diagonal) or, after its
 * last pass, goes to R (kl x kl per node of the level). */
template <typename T>
__global__ void finish_pass(T *M, int ld, size_t per, const int *list, int first,
                            const int *row_ptr, int pass, int P, int kl, T *R, size_t total)
{
  size_t kk = (size_t) kl * kl;
  for (size_t x = blockIdx.x * (size_t) blockDim.x + threadIdx.x; x < total;
       x += (size_t) gridDim.x * blockDim.x) {
    size_t b = x / kk, rem = x % kk;
    int i = (int) (rem % kl), j = (int) (rem / kl), node = list[b];
    T *a = M + (size_t) (node - first) * per + i + (size_t) j * ld;
    if (pass + 1 < stack_passes(row_ptr[node + 1] - row_ptr[node], P)) {
      if (i > j) *a = (T) 0;
    } else {
      R[node * kk + i + (size_t) j * kl] = i <= j ? *a : (T) 0;
    }
  }
}

/* QR of the stacks of the listed nodes (rows x n, leading dimension ld;
 * node list_j in slot list_j - first, slots `per` apart, tau n per slot):
 * a pass factors only the nodes that take part in it. */
template <typename T>
static gk_status qr_listed(gpu_transform<T> &ctx, T *a, int ld, size_t per, int rows, int n,
                           T *tau, const int *list, int count, int first, stream_clock &clock)
{
  gk_error *err = ctx.err;
  const cudaStream_t s = ctx.s;
  const int ptr_count = ctx.ptr_count;
  T **ap = (T **) ctx.ptrs.ptr, **tp = ap + ptr_count;
  for (int f = 0; f < count; f += ptr_count) {
    int chunk = std::min(ptr_count, count - f);
    stack_ptrs<T><<<(chunk + 255) / 256, 256, 0, s>>>(ap, tp, list + f, chunk, first, a, per,
                                                      tau, n);
    if (ctx.launched("the H2 QR pointer arrays")) return err->status;
    int info = 0;
    if (gk_cuda_status(clock.mark(s), "the H2 compression's timer", err) ||
        ctx.blas(h2_geqrf_batched(ctx.h, rows, n, ap, ld, tp, &info, chunk), "the H2 batched QR") ||
        gk_cuda_status(clock.mark(s), "the H2 compression's timer", err))
      return err->status;
    if (info != 0)
      return gk_fail(err, GK_ERR_INTERNAL, "the H2 batched QR rejected argument %d", -info);
  }
  return GK_OK;
}

/* The chunks of a level's orthogonal couplings that the downsweep makes just
 * before their QRs (generate_level and generate_level_passes, from the
 * orthogonalization's projections Tl): buffers for the most blocks a chunk
 * holds (project_chunk_bytes(), two rows at least, no more than the level)
 * and the per-chunk index (see marshal_projection_rows). */
template <typename T>
struct coupling_chunks {
  size_t fit = 0;   // blocks a chunk may hold
  T *Sc = NULL;
  int *iota = NULL;

  gk_status alloc(gpu_transform<T> &ctx, const h2_tree *t, int l)
  {
    const h2_bsr *b = &t->coupling[l];
    int nodes = 1 << l;
    size_t block = (size_t) t->level_rank[l] * t->level_rank[l], most = 0;
    fit = std::max<size_t>(1, project_chunk_bytes() / (block * sizeof(T)));
    for (int i = 0; i < nodes; i += 2)
      most = std::max(most, (size_t) (b->row_ptr[std::min(i + 2, nodes)] - b->row_ptr[i]));
    Sc = ctx.alloc(std::max(std::min(fit, (size_t) b->n_blocks), most) * block,
                 "a chunk of the H2 orthogonal couplings");
    iota = ctx.template alloc<int>((size_t) b->n_blocks, "the H2 stack QR's block indices");
    return Sc && iota ? GK_OK : ctx.err->status;
  }
  /* The rows first .. first + *cnt - 1 (*cnt shortened to the longest even
   * run, two rows at least, whose blocks fit) projected into Sc. */
  gk_status make(gpu_transform<T> &ctx, const h2_tree *t, int l, T *const *Tl, int first,
                 int *cnt, double *couplings_sq)
  {
    const h2_bsr *b = &t->coupling[l];
    auto blocks_of = [&](int c) { return (size_t) (b->row_ptr[first + c] - b->row_ptr[first]); };
    if (*cnt >= 2) {
      int lo = 1, hi = *cnt / 2;   // in pairs of rows
      while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (blocks_of(2 * mid) <= fit) lo = mid;
        else hi = mid - 1;
      }
      *cnt = 2 * lo;
    }
    double sq = 0.0;
    if (project_rows(ctx, t, Tl, l, b->row_ptr[first], b->row_ptr[first + *cnt], Sc, iota, &sq))
      return ctx.err->status;
    *couplings_sq += sq;
    return GK_OK;
  }
  void release(gpu_transform<T> &ctx)
  {
    if (Sc) ctx.release(Sc);
    if (iota) ctx.release(iota);
  }
};

/* Coupling blocks per pass of the downsweep: the tunable GK_H2_STACK_PIECES
 * (default in gk_tunables.c). More pieces re-factor the carried R less often
 * (fewer flops) but make taller stacks, on which cuBLAS's batched QR is
 * slower; tests set 1 and 3 for many passes. */
static int stack_pieces(void)
{
  return (int) gk_tunable(GK_TUNE_H2_STACK_PIECES);
}

/* R[l] by geqrfBatched (the fallback, stack_qr_takes): node i's stack in
 * passes of at most P blocks, R <- R of [R; next P blocks] (stack_passes()).
 * A pass factors only the nodes that take part, grouped by stack height (pass
 * 0: by the number of its blocks; later passes: all (P + 1) kl rows), so no
 * zero rows are factored. Each pass re-factors the k_l rows of R carried over,
 * so a larger P does less work but takes more memory per stack. */
template <typename T>
static gk_status generate_level_passes(gpu_transform<T> &ctx, const h2_tree *t, h2_gpu *O,
                                       int l, int P, std::vector<T *> &R, stream_clock &qr_clock,
                                       T *const *Tl, double *couplings_sq)
{
  gk_error *err = ctx.err;
  const T *Eo = (const T *) O->E.ptr;
  const int *row_ptr_all = (const int *) O->cpl_row_ptr.ptr;
  const h2_bsr *b = &t->coupling[l];
  int top = t->top_level, kl = t->level_rank[l], nodes = 1 << l, passes = 1;
  int kp = l > top ? t->level_rank[l - 1] : 0;
  int ld = std::max(kp, kl) + P * kl;
  size_t per = (size_t) ld * kl;
  int chunk = (int) std::max<size_t>(2, std::min<size_t>(WORK_CHUNK_BYTES / (per * sizeof(T)), nodes));
  chunk = std::min(chunk - chunk % 2, nodes);   // even: both children of a parent
  if (chunk < 1) chunk = 1;
  // The groups of one height: pass 0 with r = 0 .. P blocks, then passes 1, 2, ...
  // (ascending node lists, concatenated in `lists`, group g at group_ptr[g]).
  std::vector<int> lists, group_ptr, group_pass, group_pieces;
  try {
    for (int i = 0; i < nodes; i++)
      passes = std::max(passes, stack_passes(b->row_ptr[i + 1] - b->row_ptr[i], P));
    for (int r = 0; r <= P; r++) {
      group_ptr.push_back((int) lists.size());
      group_pass.push_back(0);
      group_pieces.push_back(r);
      for (int i = 0; i < nodes; i++)
        if (first_pieces(b->row_ptr[i + 1] - b->row_ptr[i], P) == r) lists.push_back(i);
    }
    for (int p = 1; p < passes; p++) {
      group_ptr.push_back((int) lists.size());
      group_pass.push_back(p);
      group_pieces.push_back(P);
      for (int i = 0; i < nodes; i++)
        if (stack_passes(b->row_ptr[i + 1] - b->row_ptr[i], P) > p) lists.push_back(i);
    }
    group_ptr.push_back((int) lists.size());
  } catch (...) {
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
  }
  R[l] = ctx.alloc((size_t) nodes * kl * kl, "the H2 compression's R factors");
  T *M = ctx.alloc((size_t) chunk * per, "the H2 compression's stacks");
  T *tau = ctx.alloc((size_t) chunk * kl, "the H2 compression's stacks");
  int *dlists = ctx.template alloc<int>(lists.size(), "the H2 compression's stack lists");
  if (!R[l] || !M || !tau || !dlists ||
      gk_cuda_status(cudaMemcpyAsync(dlists, lists.data(), lists.size() * sizeof(int),
                                     cudaMemcpyHostToDevice, ctx.s),
                     "the H2 compression's stack lists", err))
    return err->status;
  const int *row_ptr = row_ptr_all + t->level_ptr[l] + l;
  // Each chunk of rows has its orthogonal couplings projected first
  // (coupling_chunks), and the stacks read them there.
  coupling_chunks<T> cc;
  if (cc.alloc(ctx, t, l)) return err->status;
  for (int first = 0, cnt = 0; first < nodes; first += cnt) {
    cnt = std::min(chunk, nodes - first);
    if (cc.make(ctx, t, l, Tl, first, &cnt, couplings_sq)) return err->status;
    if (kp) {   // the heads R_parent E_i^T of every node of the chunk
      for (int c = 0; c < 2; c++) {   // nodes first + c + 2j have the parents first/2 + j
        int count = (cnt - c + 1) / 2;
        if (ctx.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_T, kp, kl, kp,
                           R[l - 1] + (size_t) (first / 2) * kp * kp, kp, (size_t) kp * kp,
                           Eo + t->transfer_ptr[l] + (size_t) (first + c) * kl * kp, kl,
                           (size_t) 2 * kl * kp, M + (size_t) c * per, ld, 2 * per, count))
          return err->status;
      }
    }
    for (size_t g = 0; g + 1 < group_ptr.size(); g++) {
      const int *gb = lists.data() + group_ptr[g], *ge = lists.data() + group_ptr[g + 1];
      int lo = (int) (std::lower_bound(gb, ge, first) - lists.data());
      int count = (int) (std::lower_bound(gb, ge, first + cnt) - lists.data()) - lo;
      if (count <= 0) continue;
      int pass = group_pass[g], head = pass == 0 ? kp : kl;
      int rows = std::max(head + group_pieces[g] * kl, kl);
      if (rows > head) {
        size_t total = (size_t) count * (rows - head) * kl;
        fill_stack<T><<<h2_grid_for(total), 256, 0, ctx.s>>>(cc.Sc, row_ptr, cc.iota, dlists + lo,
                                                        first, pass, P, kl, head, rows, ld, per,
                                                        M, total);
        if (ctx.launched("the H2 compression's stacks")) return err->status;
      }
      if (qr_listed(ctx, M, ld, per, rows, kl, tau, dlists + lo, count, first, qr_clock))
        return err->status;
      size_t total = (size_t) count * kl * kl;
      finish_pass<T><<<h2_grid_for(total), 256, 0, ctx.s>>>(M, ld, per, dlists + lo, first, row_ptr,
                                                       pass, P, kl, R[l], total);
      if (ctx.launched("the H2 compression's R factors")) return err->status;
      // the work done: the carried R factors re-factored included
      ctx.flops += count * (h2_qr_flops(rows, kl) + (pass == 0 ? 2.0 * kp * kp * kl : 0.0));
    }
  }
  if (gk_cuda_status(cudaStreamSynchronize(ctx.s), "the H2 compression", err))
    return err->status;
  ctx.release(M);
  ctx.release(tau);
  ctx.release(dlists);
  cc.release(ctx);
  return GK_OK;
}

/* Whether level rank kl takes the stack QR kernel: where it fits, up to the
 * tunable GK_H2_STACK_QR_MAX_RANK (the kernel's limit by default; tests set 0
 * so that small matrices take the passes of generate_level_passes, which
 * otherwise only ranks beyond the kernel reach). */
template <typename T>
static bool stack_qr_takes(int kl)
{
  return kl <= (int) gk_tunable(GK_TUNE_H2_STACK_QR_MAX_RANK) &&
         stack_qr_fits<T, STACK_QR_ROWS>(kl);
}

/* R[l] by stack_qr_kernel: per chunk of nodes the heads as H_i^T = E_i R_parent^T
 * (kl x kp, so that each of the stack's rows is contiguous, as in S_e), then
 * one thread block per node reads them and its coupling blocks in place. */
template <typename T>
static gk_status generate_level(gpu_transform<T> &ctx, const h2_tree *t, h2_gpu *O, int l,
                                std::vector<T *> &R, stream_clock &qr_clock, T *const *Tl,
                                double *couplings_sq)
{
  gk_error *err = ctx.err;
  const h2_bsr *b = &t->coupling[l];
  int top = t->top_level, kl = t->level_rank[l], nodes = 1 << l;
  int kp = l > top ? t->level_rank[l - 1] : 0;
  size_t per = (size_t) kl * kp;
  // Chunks of nodes (even: both children of a parent). The heads' buffer is
  // sized for the leaf level, so that every level reuses one buffer.
  auto chunk_of = [&](int count) {
    int c = (int) std::max<size_t>(2, std::min<size_t>(WORK_CHUNK_BYTES / (per * sizeof(T)), count));
    return std::min(c - c % 2, count);
  };
  int chunk = per ? chunk_of(nodes) : nodes;
  R[l] = ctx.alloc((size_t) nodes * kl * kl, "the H2 compression's R factors");
  T *H = per ? ctx.alloc((size_t) chunk_of(t->n_leaves) * per, "the H2 compression's stack heads")
             : NULL;
  if (!R[l] || (per && !H)) return err->status;
  const T *E = (const T *) O->E.ptr + t->transfer_ptr[l];
  const int *row_ptr = (const int *) O->cpl_row_ptr.ptr + t->level_ptr[l] + l;
  // Each chunk of rows has its orthogonal couplings projected first
  // (coupling_chunks), and the stack QR reads them there.
  coupling_chunks<T> cc;
  if (cc.alloc(ctx, t, l)) return err->status;
  for (int first = 0; first < nodes;) {
    int cnt = std::min(chunk, nodes - first);
    if (cc.make(ctx, t, l, Tl, first, &cnt, couplings_sq)) return err->status;
    for (int c = 0; per && c < 2; c++)   // nodes first + c + 2j have the parents first/2 + j
      if (ctx.gemm_strided(CUBLAS_OP_N, CUBLAS_OP_T, kl, kp, kp, E + (first + c) * per, kl, 2 * per,
                         R[l - 1] + (size_t) (first / 2) * kp * kp, kp, (size_t) kp * kp,
                         H + c * per, kl, 2 * per, (cnt - c + 1) / 2))
        return err->status;
    if (gk_cuda_status(qr_clock.mark(ctx.s), "the H2 compression's timer", err) ||
        gk_cuda_status(stack_qr_launch<T, STACK_QR_ROWS>(cnt, H, kp, cc.Sc, row_ptr, cc.iota, kl,
                                                         first, R[l], ctx.s),
                       "the H2 stack QR", err) ||
        ctx.launched("the H2 stack QR") ||
        gk_cuda_status(qr_clock.mark(ctx.s), "the H2 compression's timer", err))
      return err->status;
    first += cnt;
  }
  for (int i = 0; i < nodes; i++) {
    double rows = kp + (double) (b->row_ptr[i + 1] - b->row_ptr[i]) * kl;
    ctx.flops += 2.0 * kp * kp * kl + h2_qr_flops(rows, kl);
  }
  if (gk_cuda_status(cudaStreamSynchronize(ctx.s), "the H2 compression", err)) return err->status;
  ctx.release(H);
  cc.release(ctx);
  return GK_OK;
}

/* The GPU's operation of the shared downsweep (h2_generate_downsweep). */
template <typename T>
struct gpu_downsweep {
  gpu_transform<T> *ctx;
  const orthogonal_form<T> *orth;
  std::vector<T *> *R;
  int pieces;                  // stack_pieces()
  stream_clock qr_clock;
  double *couplings_sq;
  h2_compress_stats *st;
};

template <typename T>
static gk_status gpu_generate_level(void *state, int l, gk_error *err)
{
  gpu_downsweep<T> &d = *(gpu_downsweep<T> *) state;
  const h2_tree *t = &d.orth->tree;
  T *const *P = d.orth->projection.data();
  if (stack_qr_takes<T>(t->level_rank[l])
        ? generate_level(*d.ctx, t, d.orth->data, l, *d.R, d.qr_clock, P, d.couplings_sq)
        : generate_level_passes(*d.ctx, t, d.orth->data, l, d.pieces, *d.R, d.qr_clock, P,
                                d.couplings_sq))
    return err->status;
  d.st->seconds_generate_qr += d.qr_clock.take_seconds();
  return GK_OK;
}

template <typename T>
gk_status generate_r_factors(gpu_transform<T> &ctx, const orthogonal_form<T> &orth,
                             std::vector<T *> &R, double *couplings_sq, h2_compress_stats *st)
{
  R.assign(orth.tree.depth + 1, (T *) NULL);
  gpu_downsweep<T> d;
  d.ctx = &ctx;
  d.orth = &orth;
  d.R = &R;
  d.pieces = stack_pieces();
  d.couplings_sq = couplings_sq;
  d.st = st;
  h2_level_ops ops = {&d, NULL, gpu_generate_level<T>};
  return h2_generate_downsweep(&orth.tree, &ops, ctx.err);
}

#define H2_GENERATE_INSTANCES(T)                                                                  \
  template gk_status generate_r_factors<T>(gpu_transform<T> &, const orthogonal_form<T> &,       \
                                           std::vector<T *> &, double *, h2_compress_stats *);
H2_GENERATE_INSTANCES(float)
H2_GENERATE_INSTANCES(double)
