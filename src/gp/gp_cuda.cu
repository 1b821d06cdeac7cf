/*
 * Block conjugate gradients of the GP engine on the GPU (gp.h): the right-hand
 * sides, iterates and residuals stay on the device; each iteration applies
 * G' (a gather over the transposed pattern), Sigma (the caller's operator: an
 * H2 matrix or the tiled reductions) and G, then one fused CG step per column.
 * Only the step lengths and residual norms (k numbers each) come back to the
 * host, which decides which columns go on. The column operations (dots,
 * the step, the layout changes) are in gp_cg_cuda.cu, the kernels of G and
 * G' in gp_precond_cuda.cuh; their transposed pattern is built here.
 *
 * The vectors and G may be kept in the operator's row order
 * (gp_gpu_operator.order): G's rows then add their terms as gp_vecchia_apply
 * does, G' its terms in that order's row order, which differs from the CPU's
 * only by rounding.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <cub/cub.cuh>
#include "gp/gp.h"
#include "gp/gp_cg_cuda.cuh"
#include "gp/gp_precond_cuda.cuh"
#include "device/gk_cuda.h"
#include "device/gk_hooks.h"
#include "device/gk_memory.h"

using gp_cg::blocks_for;
using gp_cg::kThreads;
using gp_precond::apply_columns;
using gp_precond::apply_rows_major;
using gp_precond::g_terms;
using gp_precond::gt_terms;
using gp_precond::kCols;

namespace {

/* From this many active columns the preconditioner's products run on
 * row-major copies of the vectors (apply_rows_major); below, column-major.
 * Per term a row-major row of k doubles is about k / 4 + 1 memory sectors
 * and the terms themselves two per lane load, against k sectors of
 * column-major gathers: at 8 columns 4.5 against 8, and fewer sectors as the
 * columns grow (the GP's solves multiply 50 and more). */
const int kRowsMajorColumns = 8;

/* Storage order (the operator's, gp_gpu_operator.order): row e of the
 * solver's vectors is the point order[e]; pos is the inverse. */
__global__ void invert_order(int n, const int *order, int *pos)
{
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < (size_t) n;
       e += (size_t) gridDim.x * blockDim.x)
    pos[order[e]] = (int) e;
}

/* G in storage order: row e is the point's row order[e], its neighbours
 * renumbered (pos) and its coefficients moved along; the terms keep their
 * order, so G x is the same sum. */
__global__ void relabel_factor(int n, int m, const int *order, const int *pos, const int *nbr_in,
                               const double *coef_in, int *nbr, double *coef)
{
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < (size_t) n;
       e += (size_t) gridDim.x * blockDim.x) {
    size_t i = (size_t) order[e];
    coef[e] = coef_in[i];
    for (int s = 0; s < m; s++) {
      int j = nbr_in[i + (size_t) s * n];
      nbr[e + (size_t) s * n] = j > 0 ? pos[j - 1] + 1 : 0;
      coef[e + (size_t) (s + 1) * n] = coef_in[i + (size_t) (s + 1) * n];
    }
  }
}

/* dst[e, c] = src[order[e], c] (to storage order); with back, dst[order[e], c]
 * = src[e, c] (back to the points' order). */
__global__ void permute_rows(size_t n, int k, const int *order, int back, const double *src,
                             double *dst)
{
  size_t total = n * k;
  for (size_t t = blockIdx.x * (size_t) blockDim.x + threadIdx.x; t < total;
       t += (size_t) gridDim.x * blockDim.x) {
    size_t e = t % n, c = t / n, i = (size_t) order[e];
    if (back) dst[i + c * n] = src[t];
    else dst[t] = src[i + c * n];
  }
}

/* The transposed pattern is built on the device, once per solve: every slot
 * (i, s) of nbr, enumerated row by row, becomes (key = column j, value = its
 * coefficient's index i + n (s + 1)); empty slots get key n and sort last. A
 * stable radix sort by key then lists each column's rows in increasing order
 * (with the points' order, the order gp_vecchia_apply adds them in). */
__global__ void pattern_pairs(int n, int m, const int *nbr, int *key, long long *value)
{
  size_t total = (size_t) n * m;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    size_t i = e / m, s = e % m;
    int j = nbr[i + s * n];
    key[e] = j > 0 ? j - 1 : n;
    value[e] = (long long) (i + (size_t) n * (s + 1));
  }
}

/* From the sorted keys: ptr[j] = the first entry of column j (ptr[n]: the
 * count of non-empty slots), trow and tval of each non-empty slot. */
__global__ void pattern_columns(int n, size_t total, const int *key, const long long *value,
                                const double *coef, size_t *ptr, int *trow, double *tval)
{
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    int k = key[e], before = e ? key[e - 1] : -1;
    for (int j = before + 1; j <= k && j <= n; j++) ptr[j] = e;   // columns starting here
    if (e == total - 1)
      for (int j = k + 1; j <= n; j++) ptr[j] = total;            // and after the last
    if (k < n) {
      trow[e] = (int) (value[e] % n);
      tval[e] = coef[value[e]];
    }
  }
}


/* out (n x k, column-major) = the factor's terms (G's or G''s) applied to
 * the columns cols of x (NULL: its first k). From kRowsMajorColumns columns
 * through row-major copies (rows: n x k of scratch), the result passing
 * through `spare`; below, column-major, with cols gathered into `spare`
 * first. x may be `spare` itself (it is read before spare is written). */
template <typename Terms>
void apply_factor(size_t n, Terms terms, const double *coef, const double *x, const int *cols,
                  int k, unsigned parts, double *spare, double *rows, double *out, cudaStream_t s)
{
  if (k >= kRowsMajorColumns) {
    gp_cg::to_rows(n, x, cols, k, rows, s);
    apply_rows_major<<<blocks_for(n * 32), kThreads, 0, s>>>(n, terms, coef, rows, k, spare);
    gp_cg::from_rows(n, spare, k, out, s);
    return;
  }
  if (cols) {
    gp_cg::gather(n, x, cols, k, parts, spare, s);
    x = spare;
  }
  apply_columns<<<dim3(blocks_for(n), (unsigned) ((k + kCols - 1) / kCols)), kThreads, 0, s>>>(
      n, terms, coef, x, k, out);
}

/* Everything the solver keeps on the GPU, freed together. */
struct solver_state {
  gk_device_buffer nbr, coef, tptr, trow, tval;
  gk_device_buffer x, r, p, w1, w2, w3;   // w3: row-major copies (kRowsMajorColumns)
  gk_device_buffer order, pos;   // the operator's row order and its inverse
  gk_device_buffer cols, partial, small;
  gk_stream stream;
};

void state_free(solver_state *s)
{
  gk_device_buffer *all[] = {&s->nbr, &s->coef, &s->tptr, &s->trow, &s->tval,
                             &s->x, &s->r, &s->p, &s->order, &s->pos,
                             &s->w1, &s->w2, &s->w3, &s->cols, &s->partial, &s->small};
  for (gk_device_buffer *b : all) gk_buffer_free(b);
  gk_stream_destroy(&s->stream);
}

/* G' by rows over the transposed pattern that build_transpose made in st. */
gt_terms transpose_terms(const solver_state *st)
{
  gt_terms t = {(const size_t *) st->tptr.ptr, (const int *) st->trow.ptr,
                (const double *) st->tval.ptr};
  return t;
}


/* dst[r, c] = src[row e of point rows[r], c] for r < nrows, c < k: the
 * rows (in the points' order) of an n x k block in storage order (pos: the
 * storage row of each point, NULL: the same order). */
__global__ void gather_rows(size_t n, int k, int nrows, const int *rows, const int *pos,
                            const double *src, double *dst)
{
  size_t total = (size_t) nrows * k;
  for (size_t t = blockIdx.x * (size_t) blockDim.x + threadIdx.x; t < total;
       t += (size_t) gridDim.x * blockDim.x) {
    size_t r = t % nrows, c = t / nrows;
    int i = rows[r];
    dst[t] = src[(size_t) (pos ? pos[i] : i) + c * n];
  }
}

/* Downloads the first `cols` columns of the n x k block `from` (storage
 * order) to host `to` (NULL: none) in the points' order, through `spare`
 * when there is an order (NULL: none); and, when `rows` (nrows, 0-based
 * points, host), those rows of all k columns to `to_rows` (nrows x k):
 * gathered on the device, or from `to` when it holds every column (they
 * come down once). Synchronous. */
gk_status download_rows(double *to, int cols, const int *rows, int nrows, double *to_rows,
                        double *from, double *spare, size_t n, int k, const int *order,
                        solver_state *st, gk_error *err)
{
  cudaStream_t s = (cudaStream_t) st->stream;
  const bool whole = to && cols == k;
  if (rows && nrows > 0 && k > 0 && !whole) {
    gk_device_buffer d_rows = GK_DEVICE_BUFFER_EMPTY, d_out = GK_DEVICE_BUFFER_EMPTY;
    gk_status up = gk_buffer_alloc(&d_rows, (size_t) nrows * sizeof(int), "the solutions' rows",
                                   err);
    if (up == GK_OK)
      up = gk_buffer_alloc(&d_out, (size_t) nrows * k * sizeof(double), "the solutions' rows",
                           err);
    if (up == GK_OK)
      up = gk_buffer_upload(&d_rows, rows, (size_t) nrows * sizeof(int), st->stream, err);
    if (up == GK_OK) {
      gather_rows<<<blocks_for((size_t) nrows * k), kThreads, 0, s>>>(
          n, k, nrows, (const int *) d_rows.ptr, order ? (const int *) st->pos.ptr : NULL, from,
          (double *) d_out.ptr);
      up = gk_cuda_check_launch("the solutions' rows", err);
    }
    if (up == GK_OK)
      up = gk_buffer_download(to_rows, &d_out, (size_t) nrows * k * sizeof(double), st->stream,
                              err);
    if (up == GK_OK) up = gk_stream_sync(st->stream, "downloading the solutions' rows", err);
    gk_buffer_free(&d_rows);
    gk_buffer_free(&d_out);
    if (up) return err->status;
  }
  if (!to || cols <= 0) return GK_OK;
  if (order) {
    permute_rows<<<blocks_for(n * cols), kThreads, 0, s>>>(n, cols, order, 1, from, spare);
    if (gk_cuda_check_launch("the solutions' order", err)) return err->status;
    from = spare;
  }
  // staged: R's fresh pages are faulted in on several threads, not the driver's one
  if (gk_staged_download(to, from, n * cols * sizeof(double), st->stream, err))
    return err->status;
  if (rows && whole)
    for (int c = 0; c < k; c++)
      for (int r = 0; r < nrows; r++)
        to_rows[r + (size_t) c * nrows] = to[(size_t) rows[r] + (size_t) c * n];
  return GK_OK;
}

/* G's transposed pattern (ptr, trow, tval) from st->nbr and st->coef, on the
 * device (the scratch for the sort is freed before returning). */
gk_status build_transpose(int n, int m, solver_state *st, gk_error *err)
{
  cudaStream_t s = (cudaStream_t) st->stream;
  size_t total = (size_t) n * m, temp_bytes = 0;
  int end_bit = 1;
  while (end_bit < 31 && ((size_t) 1 << end_bit) <= (size_t) n) end_bit++;
  gk_device_buffer keys = GK_DEVICE_BUFFER_EMPTY, values = GK_DEVICE_BUFFER_EMPTY,
                   temp = GK_DEVICE_BUFFER_EMPTY;
  if (total > (size_t) INT_MAX)   // the sort counts items in an int
    return gk_fail(err, GK_ERR_INPUT, "the GPU solver takes at most %d neighbour slots "
                   "(n x neighbors); use fewer neighbours or backend = \"cpu\"", INT_MAX);
  if (total == 0) {
    GK_CUDA_TRY(cudaMemsetAsync(st->tptr.ptr, 0, ((size_t) n + 1) * sizeof(size_t), s),
                "the preconditioner's transpose", err);
    return GK_OK;
  }
  GK_TRY(gk_buffer_alloc(&keys, 2 * total * sizeof(int), "the preconditioner's transpose", err));
  GK_TRY(gk_buffer_alloc(&values, 2 * total * sizeof(long long), "the preconditioner's transpose",
                         err));
  {
    int *k0 = (int *) keys.ptr, *k1 = k0 + total;
    long long *v0 = (long long *) values.ptr, *v1 = v0 + total;
    cub::DoubleBuffer<int> kb(k0, k1);
    cub::DoubleBuffer<long long> vb(v0, v1);
    GK_CUDA_TRY(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, kb, vb, (int) total, 0, end_bit, s),
                "the preconditioner's transpose", err);
    GK_TRY(gk_buffer_alloc(&temp, temp_bytes + 1, "the preconditioner's transpose", err));
    pattern_pairs<<<blocks_for(total), kThreads, 0, s>>>(n, m, (const int *) st->nbr.ptr, k0, v0);
    GK_TRY(gk_cuda_check_launch("the preconditioner's transpose", err));
    GK_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp.ptr, temp_bytes, kb, vb, (int) total, 0,
                                                end_bit, s),
                "the preconditioner's transpose", err);
    pattern_columns<<<blocks_for(total), kThreads, 0, s>>>(
        n, total, kb.Current(), vb.Current(), (const double *) st->coef.ptr,
        (size_t *) st->tptr.ptr, (int *) st->trow.ptr, (double *) st->tval.ptr);
    GK_TRY(gk_cuda_check_launch("the preconditioner's transpose", err));
    GK_TRY(gk_stream_sync(st->stream, "the preconditioner's transpose", err));
  }
  gk_buffer_free(&keys);
  gk_buffer_free(&values);
  gk_buffer_free(&temp);
  return GK_OK;
fail:
  cudaStreamSynchronize(s);
  gk_buffer_free(&keys);
  gk_buffer_free(&values);
  gk_buffer_free(&temp);
  return err->status;
}

}  // namespace

extern "C" gk_status gp_tiled_sigma_apply(void *ctx, const double *x, int nrhs, double *y,
                                          gk_error *err)
{
  gp_tiled_sigma *a = (gp_tiled_sigma *) ctx;
  size_t n = a->points.rows, count = n * nrhs;
  gk_reduce_spec spec = a->spec;
  spec.reduction = GK_REDUCE_SUM;
  spec.device_out = y;
  gk_reduce_operand b = {NULL, x, 0, a->points.gpu, n, nrhs, NULL};
  if (reduce_cuda(&spec, &a->points, &a->points, &b, NULL, NULL, err)) return err->status;
  if (a->nugget != 0.0 && count > 0) {
    gp_cg::add_scaled(count, a->nugget, x, y);
    if (gk_cuda_check_launch("the nugget", err)) return err->status;
    return gk_stream_sync(NULL, "the nugget", err);
  }
  return GK_OK;
}

extern "C" gk_status gp_gpu_block_cg(const gp_gpu_operator *op, int n, int m, const int *nbr,
                                     const double *coef, const gp_gpu_factor *fac, int nblocks,
                                     const double *const *b, const int *b_cols, int g_blocks,
                                     const double *tol, int maxit, gp_cg_result *res,
                                     gk_error *err)
{
  int k = 0, gk = 0;   // gk: the columns that G multiplies first
  for (int i = 0; i < nblocks; i++) k += b_cols[i];
  for (int i = 0; i < g_blocks && i < nblocks; i++) gk += b_cols[i];
  solver_state st;
  memset(&st, 0, sizeof st);
  size_t nn = (size_t) n, block = nn * k * sizeof(double);
  if (fac && (fac->n != n || fac->m != m || fac->res.device != op->device || !fac->coef.ptr))
    return gk_fail(err, GK_ERR_INTERNAL, "the GPU solver's factor does not match its problem");
  size_t nnz = fac ? fac->nonzeros : gp_vecchia_nonzeros(n, m, nbr);
  std::vector<int> active, next_active;
  std::vector<double> host_small;
  unsigned parts = blocks_for(nn);
  if (parts > 512) parts = 512;
  double *bnorm = NULL, *rr = NULL;
  cudaStream_t s = NULL;
  int it;

  for (size_t e = 0; e < (size_t) maxit * k; e++) res->alpha[e] = res->beta[e] = NAN;
  for (int c = 0; c < k; c++) res->iterations[c] = 0;
  res->converged = 1;
  res->indefinite_at = 0;
  res->gave_up = 0;
  if (n == 0 || k == 0) return GK_OK;

  if (gk_device_enter(op->device, err)) return err->status;
  {
    // the vectors, nbr and coef, the transpose, and the transpose's sort (freed
    // after; it is larger than the copy of nbr and coef that the operator's
    // order needs, and freed before)
    size_t need = (k >= kRowsMajorColumns ? 6 : 5) * block + nn * m * sizeof(int) +
                  nn * (m + 1) * sizeof(double) +
                  (nn + 1) * sizeof(size_t) + nnz * (sizeof(int) + sizeof(double)) +
                  3 * nn * m * (sizeof(int) + sizeof(long long));
    char what[128];
    snprintf(what, sizeof what, "the GPU solver (%d vectors of %d rows and the preconditioner)",
             k, n);
    if (gk_memory_check_device((double) need, what,
                               "use fewer probes (gp_control(probes = )) or backend = \"cpu\"",
                               NULL, err))
      return err->status;
  }
  try {
    host_small.resize(4 * (size_t) k);
  } catch (...) {
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the GPU solver");
  }

  GK_TRY(gk_stream_create(&st.stream, 0, err));
  s = (cudaStream_t) st.stream;
  GK_TRY(gk_buffer_alloc(&st.nbr, nn * m * sizeof(int) + 1, "the preconditioner", err));
  GK_TRY(gk_buffer_alloc(&st.coef, nn * (m + 1) * sizeof(double), "the preconditioner", err));
  GK_TRY(gk_buffer_alloc(&st.tptr, (nn + 1) * sizeof(size_t), "the preconditioner", err));
  GK_TRY(gk_buffer_alloc(&st.trow, nnz * sizeof(int) + 1, "the preconditioner", err));
  GK_TRY(gk_buffer_alloc(&st.tval, nnz * sizeof(double) + 1, "the preconditioner", err));
  GK_TRY(gk_buffer_alloc(&st.x, block, "the solver's vectors", err));
  GK_TRY(gk_buffer_alloc(&st.r, block, "the solver's vectors", err));
  GK_TRY(gk_buffer_alloc(&st.p, block, "the solver's vectors", err));
  GK_TRY(gk_buffer_alloc(&st.w1, block, "the solver's vectors", err));
  GK_TRY(gk_buffer_alloc(&st.w2, block, "the solver's vectors", err));
  if (k >= kRowsMajorColumns)
    GK_TRY(gk_buffer_alloc(&st.w3, block, "the solver's vectors", err));
  GK_TRY(gk_buffer_alloc(&st.cols, k * sizeof(int), "the solver's columns", err));
  GK_TRY(gk_buffer_alloc(&st.partial, (size_t) parts * k * sizeof(double), "the solver's sums", err));
  // pq, next, alpha, beta, rr (k each)
  GK_TRY(gk_buffer_alloc(&st.small, 5 * (size_t) k * sizeof(double), "the solver's sums", err));
  if (!op->order) {
    // cudaMemcpyDefault: from the kept factor on the device, else from the host
    if (nn * m > 0)
      GK_CUDA_TRY(cudaMemcpyAsync(st.nbr.ptr, fac ? fac->nbr.ptr : (const void *) nbr,
                                  nn * m * sizeof(int), cudaMemcpyDefault, s),
                  "the preconditioner", err);
    GK_CUDA_TRY(cudaMemcpyAsync(st.coef.ptr, fac ? fac->coef.ptr : (const void *) coef,
                                nn * (m + 1) * sizeof(double), cudaMemcpyDefault, s),
                "the preconditioner", err);
  } else {
    // G into the operator's order, through the buffers the vectors use later
    GK_TRY(gk_buffer_alloc(&st.order, nn * sizeof(int), "the operator's order", err));
    GK_TRY(gk_buffer_alloc(&st.pos, nn * sizeof(int), "the operator's order", err));
    GK_TRY(gk_buffer_upload(&st.order, op->order, nn * sizeof(int), st.stream, err));
    invert_order<<<blocks_for(nn), kThreads, 0, s>>>(n, (const int *) st.order.ptr,
                                                     (int *) st.pos.ptr);
    // (the kept factor is read where it is; else it goes up first)
    gk_device_buffer nbr_in = GK_DEVICE_BUFFER_EMPTY, coef_in = GK_DEVICE_BUFFER_EMPTY;
    gk_status up = GK_OK;
    if (!fac) {
      up = gk_buffer_alloc(&nbr_in, nn * m * sizeof(int) + 1, "the preconditioner", err);
      if (up == GK_OK)
        up = gk_buffer_alloc(&coef_in, nn * (m + 1) * sizeof(double), "the preconditioner", err);
      if (up == GK_OK && nn * m > 0)
        up = gk_buffer_upload(&nbr_in, nbr, nn * m * sizeof(int), st.stream, err);
      if (up == GK_OK)
        up = gk_buffer_upload(&coef_in, coef, nn * (m + 1) * sizeof(double), st.stream, err);
    }
    if (up == GK_OK) {
      relabel_factor<<<blocks_for(nn), kThreads, 0, s>>>(
          n, m, (const int *) st.order.ptr, (const int *) st.pos.ptr,
          (const int *) (fac ? fac->nbr.ptr : nbr_in.ptr),
          (const double *) (fac ? fac->coef.ptr : coef_in.ptr), (int *) st.nbr.ptr,
          (double *) st.coef.ptr);
      up = gk_cuda_check_launch("the preconditioner's order", err);
    }
    if (up == GK_OK) up = gk_stream_sync(st.stream, "the preconditioner's order", err);
    gk_buffer_free(&nbr_in);
    gk_buffer_free(&coef_in);
    if (up) goto fail;
  }
  GK_TRY(build_transpose(n, m, &st, err));
  {
    double *into = (double *) (op->order ? st.w1.ptr : st.r.ptr);
    for (int i = 0, at = 0; i < nblocks; at += b_cols[i], i++)
      // cudaMemcpyDefault: a block may be on the device already (the probes)
      GK_CUDA_TRY(cudaMemcpyAsync(into + nn * at, b[i], nn * b_cols[i] * sizeof(double),
                                  cudaMemcpyDefault, s), "uploading the right-hand sides", err);
    if (op->order) {
      permute_rows<<<blocks_for(nn * k), kThreads, 0, s>>>(nn, k, (const int *) st.order.ptr, 0,
                                                           into, (double *) st.r.ptr);
      GK_TRY(gk_cuda_check_launch("the right-hand sides' order", err));
    }
  }
  GK_CUDA_TRY(cudaMemcpyAsync(st.p.ptr, st.r.ptr, block, cudaMemcpyDeviceToDevice, s),
              "the solver's vectors", err);
  GK_CUDA_TRY(cudaMemsetAsync(st.x.ptr, 0, block, s), "the solver's vectors", err);
  GK_TRY(gk_stream_sync(st.stream, "the solver's uploads", err));

  {
    double *d_small = (double *) st.small.ptr;
    double *pq = d_small, *next = d_small + k, *ca = d_small + 2 * k, *cb = d_small + 3 * k,
           *d_rr = d_small + 4 * k;
    int *d_cols = (int *) st.cols.ptr;
    double *X = (double *) st.x.ptr, *R = (double *) st.r.ptr, *P = (double *) st.p.ptr;
    double *W1 = (double *) st.w1.ptr, *W2 = (double *) st.w2.ptr, *W3 = (double *) st.w3.ptr;
    rr = host_small.data();           // k: <r, r> of every column
    bnorm = host_small.data() + k;    // k: |b| of every column
    const gt_terms gt = transpose_terms(&st);
    const g_terms g_rows = {nn, m, (const int *) st.nbr.ptr, (const double *) st.coef.ptr};
    if (gk > 0) {   // b's first gk columns become G b (into W1, back into R)
      apply_factor(nn, g_rows, (const double *) st.coef.ptr, R, NULL, gk, parts, W2, W3, W1, s);
      GK_TRY(gk_cuda_check_launch("the preconditioner product", err));
      GK_CUDA_TRY(cudaMemcpyAsync(R, W1, nn * gk * sizeof(double), cudaMemcpyDeviceToDevice, s),
                  "the solver's vectors", err);
      GK_CUDA_TRY(cudaMemcpyAsync(P, W1, nn * gk * sizeof(double), cudaMemcpyDeviceToDevice, s),
                  "the solver's vectors", err);
    }
    if (res->gt_b) {   // G' b, while R still holds b
      apply_factor(nn, gt, (const double *) st.coef.ptr, R, NULL, k, parts, W2, W3, W1, s);
      GK_TRY(gk_cuda_check_launch("the preconditioner product", err));
      GK_TRY(download_rows(res->gt_b, k, NULL, 0, NULL, W1, W2, nn, k,
                           (const int *) st.order.ptr, &st, err));
    }

    // rr = <r, r> of every column, on the device (the same sums as every step)
    active.resize(k);
    for (int c = 0; c < k; c++) active[c] = c;
    GK_CUDA_TRY(cudaMemcpyAsync(d_cols, active.data(), k * sizeof(int), cudaMemcpyHostToDevice, s),
                "the solver's columns", err);
    gp_cg::dots(nn, R, d_cols, R, k, parts, (double *) st.partial.ptr, d_rr, s);
    GK_TRY(gk_cuda_check_launch("the solver's norms", err));
    GK_CUDA_TRY(cudaMemcpyAsync(rr, d_rr, k * sizeof(double), cudaMemcpyDeviceToHost, s),
                "the solver's norms", err);
    GK_TRY(gk_stream_sync(st.stream, "the solver's norms", err));
    active.clear();
    for (int c = 0; c < k; c++) {
      bnorm[c] = sqrt(rr[c]);
      if (bnorm[c] > 0) active.push_back(c);
    }

    for (it = 1; it <= maxit && !active.empty(); it++) {
      int ka = (int) active.size();
      GK_CUDA_TRY(cudaMemcpyAsync(d_cols, active.data(), ka * sizeof(int),
                                  cudaMemcpyHostToDevice, s), "the solver's columns", err);
      // Q = G Sigma G' P[, active]: G' into W2, W1 = Sigma W2, G into W2
      apply_factor(nn, gt, (const double *) st.coef.ptr, P, d_cols, ka, parts, W1, W3, W2, s);
      GK_TRY(gk_cuda_check_launch("the preconditioner product", err));
      GK_TRY(gk_stream_sync(st.stream, "the preconditioner product", err));
      GK_TRY(op->apply(op->ctx, W2, ka, W1, err));
      GK_TRY(gk_device_enter(op->device, err));
      apply_factor(nn, g_rows, (const double *) st.coef.ptr, W1, NULL, ka, parts, W1, W3, W2, s);
      // the CG step on the active columns (Q = W2)
      gp_cg::dots(nn, P, d_cols, W2, ka, parts, (double *) st.partial.ptr, pq, s);
      gp_cg::step(nn, d_cols, ka, parts, pq, W2, X, R, P, d_rr, (double *) st.partial.ptr, next,
                  ca, cb, s);
      GK_TRY(gk_cuda_check_launch("the conjugate-gradient step", err));
      double *h_a = host_small.data() + 2 * k, *h_b = host_small.data() + 3 * k;
      GK_CUDA_TRY(cudaMemcpyAsync(h_a, ca, ka * sizeof(double), cudaMemcpyDeviceToHost, s),
                  "the conjugate-gradient step", err);
      GK_CUDA_TRY(cudaMemcpyAsync(h_b, cb, ka * sizeof(double), cudaMemcpyDeviceToHost, s),
                  "the conjugate-gradient step", err);
      GK_CUDA_TRY(cudaMemcpyAsync(rr, d_rr, k * sizeof(double), cudaMemcpyDeviceToHost, s),
                  "the conjugate-gradient step", err);
      GK_TRY(gk_stream_sync(st.stream, "the conjugate-gradient step", err));

      int bad_step = 0, bad_rr = 0;
      next_active.clear();
      for (int c = 0; c < ka; c++) {
        int j = active[c];
        if (!(isfinite(h_a[c]) && h_a[c] > 0)) bad_step = 1;
        res->alpha[(size_t) (it - 1) + (size_t) maxit * j] = h_a[c];
        res->beta[(size_t) (it - 1) + (size_t) maxit * j] = h_b[c];
        res->iterations[j] = it;
        if (sqrt(rr[j]) > tol[j] * bnorm[j]) {
          next_active.push_back(j);
          if (!isfinite(rr[j])) bad_rr = 1;
        }
      }
      if (bad_step && !res->indefinite_at) res->indefinite_at = it;
      active.swap(next_active);
      if (!active.empty() && res->indefinite_at &&
          (it >= 5 * res->indefinite_at + 50 || bad_rr)) {
        res->gave_up = 1;
        break;
      }
      if (!active.empty() && it < maxit && gk_interrupt_pending()) {
        gk_fail(err, GK_ERR_INTERRUPTED, "interrupted while solving with conjugate gradients");
        goto fail;
      }
    }
    res->converged = active.empty();
  }
  if (res->gt_x || res->rows) {
    apply_factor(nn, transpose_terms(&st), (const double *) st.coef.ptr, (const double *) st.x.ptr,
                 NULL, k, parts, (double *) st.w2.ptr, (double *) st.w3.ptr, (double *) st.w1.ptr, s);
    GK_TRY(gk_cuda_check_launch("the preconditioner product", err));
    GK_TRY(download_rows(res->gt_x, res->gt_x_cols, res->rows, res->nrows, res->gt_x_rows,
                         (double *) st.w1.ptr, (double *) st.w2.ptr, nn, k,
                         (const int *) st.order.ptr, &st, err));
  }
  if (res->x)
    GK_TRY(download_rows(res->x, k, NULL, 0, NULL, (double *) st.x.ptr, (double *) st.w2.ptr, nn,
                         k, (const int *) st.order.ptr, &st, err));
  GK_TRY(gk_stream_sync(st.stream, "the solutions", err));
  state_free(&st);
  return GK_OK;
fail:
  if (s) cudaStreamSynchronize(s);
  state_free(&st);
  return err->status;
}
