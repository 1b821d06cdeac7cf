/*
 * The projections of the GPU transform's couplings into new bases,
 * S' = P_row S P_col^T per block (h2_compress_cuda.cuh): cuBLAS batched GEMMs
 * through pointer arrays, marshaled per chunk of blocks, so that the
 * temporaries stay within WORK_CHUNK_BYTES. The input's couplings are read
 * where they are stored or, for an input computed on the fly, evaluated a
 * chunk at a time just before they are projected.
 */
#include "h2/h2_compress_cuda.cuh"

/* Entry i of the pointer arrays of the projection S' = (T_row(s) S) T_col(s)^T
 * of block s (level-local storage index; tmp: kn x k per entry), its S at
 * `from` and its S' to `to` (the two batched GEMMs of projection_gemms). */
template <typename T>
__device__ void projection_pointers(int i, int s, const int *row, const int *col, const T *Tl,
                                    int kn, int k, const T *from, T *tmp, T *to, const T **a1,
                                    const T **b1, T **c1, const T **a2, const T **b2, T **c2)
{
  size_t tk = (size_t) kn * k;
  a1[i] = Tl + (size_t) row[s] * tk;
  b1[i] = from;
  c1[i] = tmp + (size_t) i * tk;
  a2[i] = tmp + (size_t) i * tk;
  b2[i] = Tl + (size_t) col[s] * tk;
  c2[i] = to;
}

/* Pointers of the projection for the blocks list[first .. first + count - 1]
 * of a level (storage indices; S_s at S + s k^2: the level's stored blocks,
 * or, in_order, at S + i k^2: these blocks evaluated one after the other;
 * S'_s at out + s kn^2). */
template <typename T>
__global__ void marshal_projection(const int *list, const int *row, const int *col, int first,
                                   int count, const T *Tl, int kn, int k, const T *S, int in_order,
                                   T *tmp, T *out,
                                   const T **a1, const T **b1, T **c1, const T **a2,
                                   const T **b2, T **c2)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  int s = list[first + i];
  projection_pointers(i, s, row, col, Tl, kn, k, S + (size_t) (in_order ? i : s) * k * k, tmp,
                      out + (size_t) s * kn * kn, a1, b1, c1, a2, b2, c2);
}

/* S'_{mirror[2 p]} = S'_{mirror[2 p + 1]}^T (kn x kn each, at out + s kn^2). */
template <typename T>
__global__ void mirror_blocks(const int *mirror, size_t pairs, int kn, T *out)
{
  size_t kk = (size_t) kn * kn, total = pairs * kk;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    size_t p = e / kk, rem = e % kk;
    int a = (int) (rem % kn), b = (int) (rem / kn);
    out[(size_t) mirror[2 * p] * kk + a + (size_t) b * kn] =
      out[(size_t) mirror[2 * p + 1] * kk + b + (size_t) a * kn];
  }
}

/* A symmetric level's blocks split by the diagonal: `upper` the storage
 * indices s of the blocks (i, j) with i <= j, `mirror` the pairs (s, s') of
 * each other block (i, j) and its transpose (j, i). False when a block has
 * no transpose (not symmetric: every block is then projected). */
static bool split_by_diagonal(const h2_bsr *b, std::vector<int> &upper, std::vector<int> &mirror)
{
  upper.clear();
  mirror.clear();
  for (int s = 0; s < b->n_blocks; s++) {
    int i = b->row[s], j = b->col[s];
    if (i <= j) {
      upper.push_back(s);
      continue;
    }
    int partner = -1;
    for (int p = b->row_ptr[j]; p < b->row_ptr[j + 1] && partner < 0; p++)
      if (b->col[b->row_blocks[p]] == i) partner = b->row_blocks[p];
    if (partner < 0) return false;
    mirror.push_back(s);
    mirror.push_back(partner);
  }
  return true;
}

/* The same for the blocks at row-order positions p_first .. p_first + count - 1
 * of a level (row_blocks: the storage index of each position; out: their
 * S' one after the other, in row order), and the row-order positions' own
 * indices for a stack QR that reads out: iota[p] = p - p_first. S holds the
 * level's stored blocks, or (in_order) just these, evaluated in row order. */
template <typename T>
__global__ void marshal_projection_rows(const int *row_blocks, const int *row, const int *col,
                                        size_t p_first, int count, const T *Tl, int kn, int k,
                                        const T *S, int in_order, T *tmp, T *out, int *iota,
                                        const T **a1, const T **b1, T **c1, const T **a2,
                                        const T **b2, T **c2)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  size_t p = p_first + i;
  int s = row_blocks[p];
  projection_pointers(i, s, row, col, Tl, kn, k, S + (size_t) (in_order ? i : s) * k * k, tmp,
                      out + (size_t) i * kn * kn, a1, b1, c1, a2, b2, c2);
  iota[p] = i;
}

// iota[i] += by, i < count (marshal_projection_rows writes sub-chunk indices).
__global__ void shift_iota(int *iota, int count, int by)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) iota[i] += by;
}

/* The two batched GEMMs of marshaled projections f .. f + count - 1
 * (count <= H2_MAX_BATCH): tmp = T_row S, then S' = tmp T_col^T. */
template <typename T>
static gk_status projection_gemms(gpu_transform<T> &ctx, int kn, int k, int f, int count)
{
  const T **p = (const T **) ctx.ptrs.ptr;
  const int ptr_count = ctx.ptr_count;
  if (ctx.blas(h2_gemm_pointer_batched(ctx.h, CUBLAS_OP_N, CUBLAS_OP_N, kn, k, k, 1.0, p + f,
                                       kn, p + ptr_count + f, k, 0.0,
                                       (T **) (p + 2 * ptr_count) + f, kn, count),
               "the H2 coupling projection") ||
      ctx.blas(h2_gemm_pointer_batched(ctx.h, CUBLAS_OP_N, CUBLAS_OP_T, kn, kn, k, 1.0,
                                       p + 3 * ptr_count + f, kn, p + 4 * ptr_count + f, kn, 0.0,
                                       (T **) (p + 5 * ptr_count) + f, kn, count),
               "the H2 coupling projection"))
    return ctx.err->status;
  ctx.flops += (double) count * (2.0 * kn * k * k + 2.0 * kn * kn * k);
  return GK_OK;
}

/* S' of level l's blocks at row-order positions [p0, p1) (the rows of a
 * chunk of nodes), from the input's couplings (structure st, ranks k) into
 * out (kn x kn each, in row order); iota[p] = p - p0 there (see
 * marshal_projection_rows); *sq gets the sum of their squares. An input
 * computed on the fly has its blocks evaluated here, in row order. */
template <typename T>
gk_status project_rows(gpu_transform<T> &ctx, const h2_tree *nt, T *const *P, int l, size_t p0,
                       size_t p1, T *out, int *iota, double *sq)
{
  int k = ctx.t->level_rank[l], kn = nt->level_rank[l];
  size_t per = (size_t) kn * k + (ctx.couplings_otf ? (size_t) k * k : 0);
  int most = (int) std::max<size_t>(1, std::min<size_t>(WORK_CHUNK_BYTES / (per * sizeof(T)),
                                                        std::min<size_t>(ctx.ptr_count, p1 - p0)));
  T *tmp = ctx.alloc((size_t) most * kn * k, "the H2 projection workspace");
  T *made =
    ctx.couplings_otf ? ctx.alloc((size_t) most * k * k, "the H2 couplings evaluated") : NULL;
  if (!tmp || (ctx.couplings_otf && !made)) return ctx.err->status;
  const int *row = (const int *) ctx.in->cpl_row.ptr + ctx.t->coupling_offset[l];
  const int *col = (const int *) ctx.in->cpl_col.ptr + ctx.t->coupling_offset[l];
  const int *row_blocks = (const int *) ctx.in->cpl_row_blocks.ptr + ctx.t->coupling_offset[l];
  const T *S = (const T *) ctx.in->S.ptr + ctx.t->coupling_ptr[l];
  const T **p = (const T **) ctx.ptrs.ptr;
  for (size_t first = p0; first < p1; first += most) {
    int cnt = (int) std::min<size_t>(most, p1 - first);
    if (ctx.couplings_otf &&
        h2_gpu_fill_as_built(ctx.t, ctx.in, &ctx.geo, H2_COUPLING, l, first, cnt, row_blocks,
                             made, ctx.s, ctx.err))
      return ctx.err->status;
    marshal_projection_rows<T><<<(cnt + 255) / 256, 256, 0, ctx.s>>>(
      row_blocks, row, col, first, cnt, P[l], kn, k, ctx.couplings_otf ? made : S,
      ctx.couplings_otf ? 1 : 0, tmp, out + (first - p0) * kn * kn,
      iota, p, p + ctx.ptr_count, (T **) (p + 2 * ctx.ptr_count), p + 3 * ctx.ptr_count,
      p + 4 * ctx.ptr_count, (T **) (p + 5 * ctx.ptr_count));
    if (ctx.launched("the H2 projection pointer arrays") || projection_gemms(ctx, kn, k, 0, cnt))
      return ctx.err->status;
    if (first > p0) {   // the marshaling wrote indices within this sub-chunk
      shift_iota<<<(cnt + 255) / 256, 256, 0, ctx.s>>>(iota + first, cnt, (int) (first - p0));
      if (ctx.launched("the H2 projection indices")) return ctx.err->status;
    }
  }
  ctx.release(tmp);
  if (made) ctx.release(made);
  return ctx.sum_squares(out, (p1 - p0) * kn * kn, sq);
}

/* S'_s = P_row(s) S_s P_col(s)^T for every coupling block of the levels
 * top..q; P[l] is kn x k per node; the source has ranks k (structure st =
 * ctx.t, the input's couplings: src, or evaluated chunk by chunk when the
 * input computes them on the fly), dst kn (structure nt). Chunks of blocks
 * keep the temporary within WORK_CHUNK_BYTES. The matrix is symmetric, one
 * basis tree for rows and columns: S'_ji = S'_ij^T, so only the blocks on
 * and above the diagonal are evaluated and projected, and the others are
 * their transposes (half the products). */
template <typename T>
gk_status project_couplings(gpu_transform<T> &ctx, const h2_tree *nt, T *const *P, const T *src,
                            T *dst)
{
  // Per level: the blocks projected (`upper`, else all) and the mirrored pairs.
  std::vector<int> lists, mirrors;
  std::vector<size_t> list_at, mirror_at;
  try {
    std::vector<int> upper, mirror;
    for (int l = 0; l <= ctx.t->depth; l++) {
      const h2_bsr *b = &ctx.t->coupling[l];
      list_at.push_back(lists.size());
      mirror_at.push_back(mirrors.size());
      if (l < ctx.t->top_level || !b->n_blocks) continue;
      if (!split_by_diagonal(b, upper, mirror)) {
        upper.resize(b->n_blocks);
        for (int s2 = 0; s2 < b->n_blocks; s2++) upper[s2] = s2;
        mirror.clear();
      }
      lists.insert(lists.end(), upper.begin(), upper.end());
      mirrors.insert(mirrors.end(), mirror.begin(), mirror.end());
    }
    list_at.push_back(lists.size());
    mirror_at.push_back(mirrors.size());
  } catch (...) {
    return gk_fail(ctx.err, GK_ERR_NOMEM, "out of host memory in the H2 compression");
  }
  int *dlists = ctx.template alloc<int>(lists.size() + mirrors.size(), "the H2 projection lists");
  if (!dlists ||
      (lists.size() && gk_cuda_status(cudaMemcpyAsync(dlists, lists.data(),
                                                      lists.size() * sizeof(int),
                                                      cudaMemcpyHostToDevice, ctx.s),
                                      "the H2 projection lists", ctx.err)) ||
      (mirrors.size() && gk_cuda_status(cudaMemcpyAsync(dlists + lists.size(), mirrors.data(),
                                                        mirrors.size() * sizeof(int),
                                                        cudaMemcpyHostToDevice, ctx.s),
                                        "the H2 projection lists", ctx.err)))
    return ctx.err->status;
  int *dmirrors = dlists + lists.size();
  // One workspace for every level: the largest chunk of kn x k products
  // (and of the k x k input blocks evaluated).
  auto chunk_of = [&](int l) {
    size_t k = ctx.t->level_rank[l], per = (size_t) nt->level_rank[l] * k + (ctx.couplings_otf ? k * k : 0);
    int chunk = (int) std::max<size_t>(1, std::min<size_t>(WORK_CHUNK_BYTES / (per * sizeof(T)),
                                                           (size_t) ctx.ptr_count));
    return std::min(chunk, (int) (list_at[l + 1] - list_at[l]));
  };
  size_t most = 0, most_in = 0;
  for (int l = ctx.t->top_level; l <= ctx.t->depth; l++) {
    most = std::max(most, (size_t) chunk_of(l) * nt->level_rank[l] * ctx.t->level_rank[l]);
    most_in = std::max(most_in, (size_t) chunk_of(l) * ctx.t->level_rank[l] * ctx.t->level_rank[l]);
  }
  T *tmp = most ? ctx.alloc(most, "the H2 projection workspace") : NULL;
  T *made = ctx.couplings_otf && most_in ? ctx.alloc(most_in, "the H2 couplings evaluated") : NULL;
  if ((most && !tmp) || (ctx.couplings_otf && most_in && !made)) return ctx.err->status;
  for (int l = ctx.t->top_level; l <= ctx.t->depth; l++) {
    int nb = (int) (list_at[l + 1] - list_at[l]), k = ctx.t->level_rank[l], kn = nt->level_rank[l];
    if (!nb) continue;
    int chunk = chunk_of(l);
    const int *row = (const int *) ctx.in->cpl_row.ptr + ctx.t->coupling_offset[l];
    const int *col = (const int *) ctx.in->cpl_col.ptr + ctx.t->coupling_offset[l];
    const int *list = dlists + list_at[l];
    const T **p = (const T **) ctx.ptrs.ptr;
    for (int first = 0; first < nb; first += chunk) {
      int cnt = std::min(chunk, nb - first);
      const T *from = src + ctx.t->coupling_ptr[l];
      if (ctx.couplings_otf) {
        if (h2_gpu_fill_as_built(ctx.t, ctx.in, &ctx.geo, H2_COUPLING, l, first, cnt, list, made,
                                 ctx.s, ctx.err))
          return ctx.err->status;
        from = made;
      }
      marshal_projection<T><<<(cnt + 255) / 256, 256, 0, ctx.s>>>(
        list, row, col, first, cnt, P[l], kn, k, from, ctx.couplings_otf ? 1 : 0, tmp,
        dst + nt->coupling_ptr[l], p, p + ctx.ptr_count, (T **) (p + 2 * ctx.ptr_count),
        p + 3 * ctx.ptr_count, p + 4 * ctx.ptr_count, (T **) (p + 5 * ctx.ptr_count));
      if (ctx.launched("the H2 projection pointer arrays")) return ctx.err->status;
      for (int f = 0; f < cnt; f += H2_MAX_BATCH)
        if (projection_gemms(ctx, kn, k, f, std::min(H2_MAX_BATCH, cnt - f))) return ctx.err->status;
    }
    size_t pairs = (mirror_at[l + 1] - mirror_at[l]) / 2;
    if (pairs) {
      size_t total = pairs * kn * kn;
      mirror_blocks<T><<<h2_grid_for(total), 256, 0, ctx.s>>>(dmirrors + mirror_at[l], pairs, kn,
                                                             dst + nt->coupling_ptr[l]);
      if (ctx.launched("the H2 coupling transposes")) return ctx.err->status;
    }
    // the next chunk's marshaling must not overwrite pointers still in use
    if (ctx.synced("the H2 coupling projection"))
      return ctx.err->status;
  }
  if (tmp) ctx.release(tmp);
  if (made) ctx.release(made);
  ctx.release(dlists);
  return GK_OK;
}

#define H2_PROJECT_INSTANCES(T)                                                                   \
  template gk_status project_couplings<T>(gpu_transform<T> &, const h2_tree *, T *const *,       \
                                          const T *, T *);                                       \
  template gk_status project_rows<T>(gpu_transform<T> &, const h2_tree *, T *const *, int,       \
                                     size_t, size_t, T *, int *, double *);
H2_PROJECT_INSTANCES(float)
H2_PROJECT_INSTANCES(double)
