/*
 * The Vecchia / FSAI factor of the GP engine on the GPU (gp.h): the rows of
 * gp_vecchia_rows(), one warp per row (in the conditional form the row's
 * variance and weights are written instead, with no statistics).
 *
 * A warp gathers its row's kept neighbours and their coordinates into shared
 * memory, fills Sigma[c, c] (lower triangle) and Sigma[c, i], factors the
 * system by a left-looking Cholesky (lane r computes rows r and r + 32 of each
 * column, in the CPU's order of terms), solves with the right-hand side in
 * registers, and writes the row of coef (unless only the statistics are
 * wanted) and its three statistics. The upper
 * triangle of the system keeps the pairs' squared distances for trace(G D G').
 *
 * Rows go in chunks (bounded memory, an interrupt check between chunks) on two
 * streams: a chunk's neighbours go up and the previous chunk's coefficients
 * come down while its rows are factored. The statistics are summed in a fixed
 * order (a block per statistic, then the chunks in order), so a run repeats
 * to the bit; they differ from the CPU's (an OpenMP reduction) by rounding.
 */
#include <math.h>
#include <string.h>
#include "gp/gp.h"
#include "device/gk_cuda.h"
#include "device/gk_memory.h"
#include "device/gk_hooks.h"

namespace {

const unsigned kFull = 0xffffffffu;
const int kMaxNeighbors = 64;        // a lane holds two rows of a row's system
const int kMaxRowsPerBlock = 8;
const int kChunkRows = 1 << 17;      // rows between interrupt checks
const int kSumThreads = 256;
const size_t kDefaultShared = 48 * 1024;

/* Shared memory of one row, in doubles: the system (m x m, leading dimension
 * m | 1: odd, so that a warp reading along a row of it hits distinct banks),
 * the points ((m + 1) x dim: the neighbours, then the row's own), the squared
 * distances to the row's point (m) and the right-hand side, later the
 * solution (m). The kept neighbours' indices (m ints per row) follow the
 * doubles of all the block's rows. */
__host__ __device__ size_t row_doubles(int m, int dim)
{
  return (size_t) m * (m | 1) + (size_t) (m + 1) * dim + 2 * (size_t) m;
}

size_t row_shared_bytes(int m, int dim)
{
  return row_doubles(m, dim) * sizeof(double) + (size_t) m * sizeof(int);
}

/* The warp's sum, the same in every lane (a butterfly adds each pair in both
 * lanes in the same order). */
__device__ inline double warp_sum(double v)
{
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

/* Moves (s, t) forward to an entry of the lower triangle (t >= s) of a q x q
 * matrix, walked column by column; s = q past the end. */
__device__ inline void lower_entry(int q, int &s, int &t)
{
  while (t >= q && s < q) {
    s++;
    t += s - q;
  }
}

/* Squared distance between points s and t of the row's np points. */
__device__ inline double pair_stat(const double *pts, int np, int dim, int s, int t)
{
  return gk_sqdist(pts + s, np, pts + t, np, dim);
}

/* Rows first .. first + rows - 1 of G. nbr: this chunk's rows (rows x m,
 * leading dimension ldg); coef: rows x (m + 1), ldg too; row_stats: rows x 3.
 * (ldg, not ld: the row's system has its own leading dimension ld.)
 * A row whose system is singular writes nothing to coef and lowers *failed
 * to its index + 1. coef NULL (the factor form only): the statistics alone. */
__global__ void factor_rows(const double *xs, int n, int dim, const int *nbr, int m, int first,
                            int rows, size_t ldg, gk_kernel kernel, gk_kernel dkernel, int has_d,
                            double nugget, int noisy, int form, double *coef, double *row_stats,
                            int *failed)
{
  extern __shared__ double smem[];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  double *a = smem + row_doubles(m, dim) * warp;
  double *pts = a + (size_t) m * (m | 1);
  double *to_i = pts + (size_t) (m + 1) * dim;
  double *sol = to_i + m;
  int *cols = (int *) (smem + row_doubles(m, dim) * warps) + m * warp;
  const double k0 = gk_kernel_eval(&kernel, 0.0);

  for (int r = blockIdx.x * warps + warp; r < rows; r += gridDim.x * warps) {
    const int i = first + r;
    const double var_i = k0 + (i < noisy ? nugget : 0.0);
    // the kept neighbours (slots lane and lane + 32), packed in slot order
    int j0 = lane < m ? nbr[r + lane * ldg] : 0;
    int j1 = lane + 32 < m ? nbr[r + (lane + 32) * ldg] : 0;
    bool keep0 = j0 > 0 && j0 - 1 < i, keep1 = j1 > 0 && j1 - 1 < i;
    unsigned mask0 = __ballot_sync(kFull, keep0), mask1 = __ballot_sync(kFull, keep1);
    unsigned below = (1u << lane) - 1u;
    int at0 = __popc(mask0 & below), at1 = __popc(mask0) + __popc(mask1 & below);
    const int q = __popc(mask0) + __popc(mask1), ld = q | 1, np = q + 1;
    if (keep0) cols[at0] = j0 - 1;
    if (keep1) cols[at1] = j1 - 1;
    __syncwarp();
    for (int e = lane; e < np * dim; e += 32) {
      int s = e % np, k = e / np;
      pts[e] = xs[(s < q ? cols[s] : i) + (size_t) k * n];
    }
    __syncwarp();

    // Sigma[c, c]: the lower triangle; the upper keeps the squared distances
    int s = 0, t = lane;
    for (lower_entry(q, s, t); s < q; t += 32, lower_entry(q, s, t)) {
      double st = pair_stat(pts, np, dim, s, t);
      a[t + s * ld] = gk_kernel_eval(&kernel, st) + (s == t && cols[s] < noisy ? nugget : 0.0);
      if (t > s) a[s + t * ld] = st;
    }
    for (int c = lane; c < q; c += 32) {
      double st = pair_stat(pts, np, dim, c, q);
      to_i[c] = st;
      sol[c] = gk_kernel_eval(&kernel, st);   // Sigma[c, i]
    }
    __syncwarp();

    // left-looking Cholesky: column j's rows j + lane and j + lane + 32
    bool ok = true;
    for (int j = 0; j < q && ok; j++) {
      const bool two = j + 32 < q;
      int i0 = min(j + lane, q - 1), i1 = min(j + lane + 32, q - 1);
      double t0 = a[i0 + j * ld], t1 = a[i1 + j * ld];
      for (int k = 0; k < j; k++) {
        double ljk = a[j + k * ld];
        t0 -= a[i0 + k * ld] * ljk;
        if (two) t1 -= a[i1 + k * ld] * ljk;
      }
      double diag = __shfl_sync(kFull, t0, 0);
      if (diag > 0.0) {
        double l = sqrt(diag);
        if (j + lane < q) a[j + lane + j * ld] = lane == 0 ? l : t0 / l;
        if (two && j + lane + 32 < q) a[j + lane + 32 + j * ld] = t1 / l;
      } else {
        ok = false;   // the same in every lane
      }
      __syncwarp();
    }

    // b = L'^-1 L^-1 Sigma[c, i], row c in lane c % 32 (y0: c < 32, y1: c >= 32)
    double g0 = lane < q ? sol[lane] : 0.0, g1 = lane + 32 < q ? sol[lane + 32] : 0.0;
    double y0 = g0, y1 = g1;
    for (int k = 0; k < q && ok; k++) {
      double yk = __shfl_sync(kFull, k < 32 ? y0 : y1, k & 31) / a[k + k * ld];
      if (lane == (k & 31)) (k < 32 ? y0 : y1) = yk;
      if (lane > k && lane < q) y0 -= a[lane + k * ld] * yk;
      if (lane + 32 > k && lane + 32 < q) y1 -= a[lane + 32 + k * ld] * yk;
    }
    for (int k = q - 1; k >= 0 && ok; k--) {
      double xk = __shfl_sync(kFull, k < 32 ? y0 : y1, k & 31) / a[k + k * ld];
      if (lane == (k & 31)) (k < 32 ? y0 : y1) = xk;
      if (lane < k) y0 -= a[k + lane * ld] * xk;
      if (lane + 32 < k) y1 -= a[k + (lane + 32) * ld] * xk;
    }
    double d = var_i - warp_sum(g0 * y0 + g1 * y1);
    if (ok && form == GP_ROWS_CONDITIONAL) {
      // d (0 where rounding took it below) and b, in neighbour slot order
      if (lane == 0) coef[r] = d > 0.0 ? d : 0.0;
      if (lane < q) sol[lane] = y0;
      if (lane + 32 < q) sol[lane + 32] = y1;
      __syncwarp();
      if (lane < m) coef[r + (lane + 1) * ldg] = keep0 ? sol[at0] : 0.0;
      if (lane + 32 < m) coef[r + (lane + 33) * ldg] = keep1 ? sol[at1] : 0.0;
      __syncwarp();
      continue;
    }
    if (!ok || !(d > 1e-12 * var_i)) {
      if (lane == 0) {
        atomicMin(failed, i + 1);
        row_stats[r] = row_stats[r + rows] = row_stats[r + 2 * (size_t) rows] = 0.0;
      }
      __syncwarp();
      continue;
    }
    if (lane < q) sol[lane] = y0;
    if (lane + 32 < q) sol[lane + 32] = y1;
    __syncwarp();

    // the row of coef: neighbour slot k keeps its column (zeros where skipped)
    double inv = 1.0 / sqrt(d);
    if (coef) {
      if (lane == 0) coef[r] = inv;
      if (lane < m) coef[r + (lane + 1) * ldg] = keep0 ? -sol[at0] * inv : 0.0;
      if (lane + 32 < m) coef[r + (lane + 33) * ldg] = keep1 ? -sol[at1] * inv : 0.0;
    }

    double gg = inv * inv + warp_sum(y0 * y0 * inv * inv + y1 * y1 * inv * inv);
    double gdg = 0.0;
    if (has_d) {
      // g' D[S, S] g over S = {i, c}, g = (inv, -b inv); D(i, i) times 0
      double part = 0.0;
      for (int c = lane; c < q; c += 32)
        part += 2.0 * inv * (-sol[c] * inv) * gk_kernel_eval(&dkernel, to_i[c]);
      int s2 = 0, t2 = lane;
      for (lower_entry(q, s2, t2); s2 < q; t2 += 32, lower_entry(q, s2, t2)) {
        double st = s2 == t2 ? 0.0 : a[s2 + t2 * ld];
        part += (s2 == t2 ? 1.0 : 2.0) * (-sol[s2] * inv) * (-sol[t2] * inv) *
                gk_kernel_eval(&dkernel, st);
      }
      gdg = warp_sum(part);
    }
    if (lane == 0) {
      row_stats[r] = log(d);
      row_stats[r + rows] = gg;
      row_stats[r + 2 * (size_t) rows] = gdg;
    }
    __syncwarp();
  }
}

/* out[b] = the sum of column b of row_stats (rows x 3), in a fixed order. */
__global__ void sum_columns(const double *row_stats, int rows, double *out)
{
  __shared__ double part[kSumThreads];
  const double *col = row_stats + (size_t) blockIdx.x * rows;
  double v = 0.0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) v += col[r];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

/* Everything the factor holds on the GPU: the points, and per stream one
 * chunk's neighbours, coefficients, row statistics, their sums and the
 * smallest failing row. */
struct factor_state {
  gk_device_buffer xs;
  gk_device_buffer nbr[2], coef[2], row_stats[2], sums[2], failed[2];
  gk_stream stream[2];
};

void factor_free(factor_state *st)
{
  for (int b = 0; b < 2; b++)
    if (st->stream[b]) cudaStreamSynchronize((cudaStream_t) st->stream[b]);
  gk_buffer_free(&st->xs);
  for (int b = 0; b < 2; b++) {
    gk_device_buffer *all[] = {&st->nbr[b], &st->coef[b], &st->row_stats[b], &st->sums[b],
                               &st->failed[b]};
    for (gk_device_buffer *buf : all) gk_buffer_free(buf);
    gk_stream_destroy(&st->stream[b]);
  }
}

/* Device bytes of one chunk of `rows` rows: its statistics, and its own
 * neighbours (nbr) and coefficients (coef) where it has them (kept: both are
 * in the whole factor's buffers; statistics only: no coefficients). */
size_t chunk_bytes(size_t rows, int m, bool nbr, bool coef)
{
  return rows * ((nbr ? (size_t) m * sizeof(int) : 0) +
                 (coef ? (size_t) (m + 1) * sizeof(double) : 0) + 3 * sizeof(double));
}

}  // namespace

extern "C" gk_status gp_gpu_factor_download(const gp_gpu_factor *f, double *coef, gk_error *err)
{
  size_t bytes = (size_t) f->n * (f->m + 1) * sizeof(double);
  if (bytes == 0) return GK_OK;
  if (gk_resident_enter(&f->res, err)) return err->status;
  if (gk_buffer_download(coef, &f->coef, bytes, NULL, err)) return err->status;
  return gk_stream_sync(NULL, "downloading the Vecchia factor", err);
}

extern "C" void gp_gpu_factor_free(gp_gpu_factor *f)
{
  if (!f->nbr.ptr && !f->coef.ptr) return;
  int previous = gk_resident_release_begin(&f->res);
  gk_buffer_free(&f->nbr);
  gk_buffer_free(&f->coef);
  f->res.bytes = 0;
  gk_resident_release_end(previous);
}

extern "C" gk_status gp_gpu_vecchia_rows(const double *xs, int n, int dim, const int *nbr,
                                         int m, const gk_kernel *kernel,
                                         const gk_kernel *dkernel, double nugget,
                                         const gp_rows_options *rows_opt, double *coef,
                                         double *stats, gp_gpu_factor *keep, gk_error *err)
{
  const int first0 = rows_opt ? rows_opt->first : 0, noisy = rows_opt ? rows_opt->noisy : n;
  const int form = rows_opt ? rows_opt->form : GP_ROWS_FACTOR, nrows = n - first0;
  factor_state st;
  memset(&st, 0, sizeof st);
  const size_t nn = (size_t) n;
  // kept on the GPU: the whole factor's buffers, each chunk at its rows
  const bool kept = keep && form == GP_ROWS_FACTOR && first0 == 0 && nrows > 0;
  // statistics only: no coefficients are written, kept or brought down
  const bool stats_only = !keep && !coef && form == GP_ROWS_FACTOR;
  const bool own_nbr = !kept, own_coef = !kept && !stats_only;
  const size_t whole = kept ? nn * m * sizeof(int) + nn * (m + 1) * sizeof(double) : 0;
  size_t row_bytes = row_shared_bytes(m, dim), smem = 0, budget = 0, need = 0;
  int per_block = 1, chunk = kChunkRows, chunks = 0, failed = 0;
  size_t optin = 0;
  unsigned grid = 1;
  gk_kernel dk = dkernel ? *dkernel : *kernel;

  stats[0] = stats[1] = stats[2] = 0.0;
  if (nrows <= 0) return GK_OK;
  if (!coef && !keep && form != GP_ROWS_FACTOR)
    return gk_fail(err, GK_ERR_INPUT, "internal: the Vecchia conditionals need their output");
  if (m < 0 || m > kMaxNeighbors)
    return gk_fail(err, GK_ERR_INPUT,
                   "the GPU Vecchia factor takes at most %d neighbours per point, not %d",
                   kMaxNeighbors, m);
  if (gk_device_enter(GK_DEVICE_ACTIVE, err)) return err->status;
  optin = gk_device_shared_optin();
  if (row_bytes > optin)
    return gk_fail(err, GK_ERR_NOMEM,
                   "the GPU Vecchia factor needs %zu bytes of shared memory per point for %d "
                   "neighbours in %d dimensions, more than the GPU's %zu: use fewer neighbours "
                   "or backend = \"cpu\"", row_bytes, m, dim, optin);
  per_block = (int) (kDefaultShared / row_bytes);
  per_block = per_block < 1 ? 1 : (per_block > kMaxRowsPerBlock ? kMaxRowsPerBlock : per_block);
  smem = per_block * row_bytes;

  if (gk_device_memory_budget(&budget, err)) return err->status;
  if (chunk > nrows) chunk = nrows;
  for (;;) {
    need = nn * dim * sizeof(double) + whole + 2 * chunk_bytes(chunk, m, own_nbr, own_coef) +
           1024;
    if (need <= budget || chunk <= 1024) break;
    chunk = (chunk + 1) / 2;
  }
  if (kept && need > budget) return GK_OK;   // not kept: the caller asks again without
  if (need > budget &&
      gk_memory_check_device((double) need, "the GPU Vecchia factor", "use backend = \"cpu\"",
                             NULL, err))
    return err->status;
  chunks = (nrows + chunk - 1) / chunk;
  grid = (unsigned) ((chunk + per_block - 1) / per_block);

  if (smem > kDefaultShared)
    GK_CUDA_TRY(cudaFuncSetAttribute(factor_rows, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int) smem), "the Vecchia factor", err);
  GK_TRY(gk_buffer_alloc(&st.xs, nn * dim * sizeof(double), "the points", err));
  if (kept) {
    gk_resident_init(&keep->res, GK_RESIDENT_GP_FACTOR);
    keep->n = n;
    keep->m = m;
    keep->nonzeros = gp_vecchia_nonzeros(n, m, nbr);
    GK_TRY(gk_buffer_alloc(&keep->nbr, nn * m * sizeof(int) + sizeof(int), "the neighbours", err));
    GK_TRY(gk_buffer_alloc(&keep->coef, nn * (m + 1) * sizeof(double), "the Vecchia factor", err));
    keep->res.bytes = keep->nbr.bytes + keep->coef.bytes;
  }
  for (int b = 0; b < 2 && b < chunks; b++) {
    size_t rows = (size_t) chunk;
    GK_TRY(gk_stream_create(&st.stream[b], 0, err));
    if (own_nbr)
      GK_TRY(gk_buffer_alloc(&st.nbr[b], rows * m * sizeof(int) + sizeof(int), "the neighbours",
                             err));
    if (own_coef)
      GK_TRY(gk_buffer_alloc(&st.coef[b], rows * (m + 1) * sizeof(double), "the Vecchia factor",
                             err));
    GK_TRY(gk_buffer_alloc(&st.row_stats[b], rows * 3 * sizeof(double), "the Vecchia factor", err));
    GK_TRY(gk_buffer_alloc(&st.sums[b], 3 * sizeof(double), "the Vecchia factor", err));
    GK_TRY(gk_buffer_alloc(&st.failed[b], sizeof(int), "the Vecchia factor", err));
  }
  GK_TRY(gk_buffer_upload(&st.xs, xs, nn * dim * sizeof(double), st.stream[0], err));
  // kept: the neighbours go up at once, staged (the driver copies pageable
  // memory on one thread; the staging spreads the host side over several)
  if (kept && m > 0)
    GK_TRY(gk_staged_upload(keep->nbr.ptr, nbr, nn * m * sizeof(int), st.stream[0], err));
  GK_TRY(gk_stream_sync(st.stream[0], "the points", err));   // both streams read them

  // chunk c is launched, then chunk c - 1 (on the other stream) comes back
  for (int c = 0; c <= chunks && !failed; c++) {
    if (c < chunks) {
      int b = c & 1, first = c * chunk, rows = nrows - first < chunk ? nrows - first : chunk;
      cudaStream_t s = (cudaStream_t) st.stream[b];
      int *d_nbr = kept ? (int *) keep->nbr.ptr + first : (int *) st.nbr[b].ptr;
      double *d_coef = kept ? (double *) keep->coef.ptr + first : (double *) st.coef[b].ptr;
      size_t ld = kept ? (size_t) nrows : (size_t) rows;
      if (m > 0 && !kept)
        GK_CUDA_TRY(cudaMemcpy2DAsync(d_nbr, ld * sizeof(int), nbr + first,
                                      nrows * sizeof(int), rows * sizeof(int), m,
                                      cudaMemcpyHostToDevice, s), "the neighbours", err);
      GK_CUDA_TRY(cudaMemsetAsync(st.failed[b].ptr, 0x7f, sizeof(int), s), "the Vecchia factor",
                  err);
      factor_rows<<<grid, 32 * per_block, smem, s>>>(
          (const double *) st.xs.ptr, n, dim, d_nbr, m, first0 + first, rows, ld, *kernel, dk,
          dkernel != NULL, nugget, noisy, form, d_coef, (double *) st.row_stats[b].ptr,
          (int *) st.failed[b].ptr);
      sum_columns<<<3, kSumThreads, 0, s>>>((const double *) st.row_stats[b].ptr, rows,
                                            (double *) st.sums[b].ptr);
      GK_TRY(gk_cuda_check_launch("the Vecchia factor", err));
    }
    if (c > 0) {
      int b = (c - 1) & 1, first = (c - 1) * chunk;
      int rows = nrows - first < chunk ? nrows - first : chunk, bad = 0;
      double sums[3];
      cudaStream_t s = (cudaStream_t) st.stream[b];
      if (own_coef)
        GK_CUDA_TRY(cudaMemcpy2DAsync(coef + first, nrows * sizeof(double), st.coef[b].ptr,
                                      rows * sizeof(double), rows * sizeof(double), m + 1,
                                      cudaMemcpyDeviceToHost, s), "the Vecchia factor", err);
      GK_CUDA_TRY(cudaMemcpyAsync(sums, st.sums[b].ptr, sizeof sums, cudaMemcpyDeviceToHost, s),
                  "the Vecchia factor", err);
      GK_CUDA_TRY(cudaMemcpyAsync(&bad, st.failed[b].ptr, sizeof bad, cudaMemcpyDeviceToHost, s),
                  "the Vecchia factor", err);
      GK_TRY(gk_stream_sync(st.stream[b], "the Vecchia factor", err));
      if (bad >= 1 && bad <= n) {
        failed = bad;   // the chunks come back in order: the first failing row
      } else {
        for (int k = 0; k < 3 && form == GP_ROWS_FACTOR; k++) stats[k] += sums[k];
        if (c < chunks && gk_interrupt_pending()) {
          gk_fail(err, GK_ERR_INTERRUPTED, "interrupted while computing the Vecchia conditionals");
          goto fail;
        }
      }
    }
  }
  factor_free(&st);
  if (failed) {
    if (kept) gp_gpu_factor_free(keep);
    return gk_fail(err, GK_ERR_INPUT, GP_SINGULAR_MESSAGE, failed);
  }
  return GK_OK;
fail:
  factor_free(&st);
  if (kept) gp_gpu_factor_free(keep);
  return err->status;
}
