// The PCF policy of the GPU block pipeline (device/block_pipeline.h): per-GPU
// storage for the packed functions of a block's row and column bands, their
// upload (only the functions the block needs, so sets larger than GPU memory
// work), and the tiled integration kernel.
//
// Each band is packed in order of decreasing function length (its "slots"),
// with the map back to the original order: the 32 threads of a warp, and the
// warps of a thread block, then walk about as many steps, so they stay
// converged and do not wait for each other at barriers. The kernel writes
// each result at its original place in the block, so the result writers see
// the usual column-major block.
//
// The kernel: a thread block owns 256 row slots x 32 column slots of a block.
// The column functions of its tile are staged in shared memory, as many whole
// functions at a time as fit (a longer one is read from global memory), and
// each thread walks its row function against every staged column.
//
// The walk of a pair reads both functions interval by interval, each step's
// comparison choosing which one advances. Each thread walks its row function
// against K staged columns at once, as one merged walk over the union of the
// K + 1 functions' breakpoints (walk_merged): the row, a different function
// per thread and so a scattered global load per interval, is then read once
// for K pairs instead of once per pair. Walking K pairs as K interleaved
// chains instead waited on those row loads (long-scoreboard stalls, L1 and L2
// busy); the merged walk runs more instructions but waits far less. K = 3 in
// both precisions: 2 and 4 were slower in float, 2 and 3 equal in double;
// reading the row in 16-byte pairs of intervals or forcing 5 blocks per SM
// was slower, and reading it two intervals ahead no faster.
//
// On a diagonal block of a symmetric result (same band for rows and columns,
// hence the same slots), pair {a, b} is computed once, for slot a > b (or
// a >= b when the diagonal is wanted), and written below the diagonal; whole
// tiles above the slot diagonal are skipped.
#include <algorithm>
#include <new>
#include <numeric>
#include <vector>
#include "pcf/pcf.h"
#include "pcf/pcf_integrate.h"
#include "device/block_pipeline.h"
#include "device/gk_cuda.h"
#include "device/gk_tunables.h"

namespace {

const int kTileRows = 256;
const int kTileCols = 32;
// Columns per merged walk by interval type. The shared memory per thread block
// for staged columns is the tunable GK_PCF_SHARED_BYTES (device/gk_tunables.c):
// 40 KiB by default.
template <typename I> struct columns_of;
template <> struct columns_of<pcf_interval_f> { static const int value = 3; };
template <> struct columns_of<pcf_interval_d> { static const int value = 3; };
// Largest block: bounds the pinned host buffers (allocating them costs time)
// and keeps blocks many enough (45 at n = 5e4) for four GPUs to end together.
const size_t kMaxBlockElements = (size_t) 1 << 25;

// Overloads so that the templates below pick the shared finish by interval
// type. All arithmetic and every result is double (pcf_integrate.h).
__device__ __forceinline__ double finish(int op, double acc, double a, double b, double p,
                                         const pcf_interval_d *f, const pcf_interval_d *g)
{ return pcf_finish_d(op, acc, a, b, p, f, g); }
__device__ __forceinline__ double finish(int op, double acc, double a, double b, double p,
                                         const pcf_interval_f *f, const pcf_interval_f *g)
{ return pcf_finish_f(op, acc, a, b, p, f, g); }

// Row function f against columns g[0..K-1] in one walk: each iteration ends
// at the next breakpoint of any of the K + 1 functions, and pair k takes a
// step only where that breakpoint is its own (f's or g[k]'s): the same steps,
// with the same arithmetic, as pcf_walk_step's (pcf_integrate_impl.h) for that
// pair alone, so the results are those of pcf_pair. Each value is converted to
// double once per interval, and the row is read one interval ahead (its
// global load overlaps the next steps). The row band ends with a padding
// interval (band_alloc), so reading ahead of a function's last interval needs
// no bounds check: the row never advances past its (.., inf) interval, as the
// walk ends when every function is in its last one.
template <typename I, int OP, int K>
__device__ __forceinline__ void walk_merged(const I *f, const I *const (&g)[K], double p,
                                            double (&value)[K])
{
  typedef decltype(I::t) scalar;   // float or double: how the inputs are stored
  const I *ahead = f;
  I a = *f, next = *++ahead;
  double av = a.v;
  const I *gk[K];
  I b[K];
  double bv[K], pos[K], acc[K];
#pragma unroll
  for (int k = 0; k < K; k++) {
    gk[k] = g[k];
    b[k] = *gk[k];
    bv[k] = b[k].v;
    pos[k] = acc[k] = 0;
  }
  for (;;) {
    scalar t = a.t;
#pragma unroll
    for (int k = 0; k < K; k++) t = b[k].t < t ? b[k].t : t;
    if (t == (scalar) INFINITY) break;
    double td = t;
    bool row_ends = a.t == t;
#pragma unroll
    for (int k = 0; k < K; k++) {
      bool col_ends = b[k].t == t;
      if (row_ends || col_ends) {
        acc[k] = pcf_accumulate(OP, acc[k], td - pos[k], av, bv[k], p);
        pos[k] = td;
      }
      if (col_ends) {
        b[k] = *++gk[k];
        bv[k] = b[k].v;
      }
    }
    if (row_ends) {
      a = next;
      next = *++ahead;
      av = a.v;
    }
  }
#pragma unroll
  for (int k = 0; k < K; k++) value[k] = finish(OP, acc[k], av, bv[k], p, f, g[k]);
}

// Column slots [cc, stop) of a staged batch against row function f, K at a
// time; the remainder (a count not a multiple of K, or a diagonal tile's row
// limit) K / 2, ..., 1 at a time. `staged` stays visibly a shared-memory
// pointer down to the loads (all inlined), so they compile to shared loads,
// not generic ones.
template <typename I, int OP, int K, typename Store>
__device__ __forceinline__ void walk_staged(const I *f, const I *staged, const size_t *col_off,
                                            size_t base, int cc, int stop, double p,
                                            const Store &store)
{
  for (; cc + K <= stop; cc += K) {
    const I *g[K];
    double value[K];
#pragma unroll
    for (int k = 0; k < K; k++) g[k] = staged + (col_off[cc + k] - base);
    walk_merged<I, OP, K>(f, g, p, value);
#pragma unroll
    for (int k = 0; k < K; k++) store(cc + k, value[k]);
  }
  if constexpr (K > 1) walk_staged<I, OP, K / 2>(f, staged, col_off, base, cc, stop, p, store);
}

// tri: 0 no triangle (dense result or a block below the diagonal);
// 1 a diagonal block needing pairs i > j (dist); 2 one needing i >= j.
template <typename I, int OP>
__global__ void __launch_bounds__(kTileRows)
pcf_tile_kernel(const I *rows, const size_t *row_off, const int *row_orig, int n_rows,
                const I *cols, const size_t *col_off, const int *col_orig, int n_cols,
                int tri, double p, double *out, size_t capacity)
{
  extern __shared__ __align__(16) unsigned char shared_raw[];
  I *staged = reinterpret_cast<I *>(shared_raw);
  int tile_r0 = blockIdx.x * kTileRows, r = tile_r0 + threadIdx.x;
  int c0 = blockIdx.y * kTileCols, c1 = min(c0 + kTileCols, n_cols);
  if (tri) {  // column slots past the tile's last row slot are not needed
    int limit = min(tile_r0 + kTileRows, n_rows) - 1 + (tri == 2 ? 1 : 0);
    c1 = min(c1, limit);
  }
  if (c1 <= c0) return;  // the same for every thread of the block
  const int K = columns_of<I>::value;
  bool active = r < n_rows;
  const I *f = active ? rows + row_off[r] : rows;
  size_t ri = active ? (size_t) row_orig[r] : 0;
  // The columns this thread needs: all, or on a diagonal block the slots
  // before its row slot (up to it for tri == 2).
  int r_limit = tri ? r + (tri == 2 ? 1 : 0) : n_cols;
  auto store = [&](int cc, double value) {
    size_t ci = (size_t) col_orig[cc];
    size_t i = tri && ci > ri ? ci : ri, j = tri && ci > ri ? ri : ci;
    out[i + j * (size_t) n_rows] = value;
  };
  for (int c = c0; c < c1;) {
    size_t base = col_off[c];
    int c_end = c;
    while (c_end < c1 && col_off[c_end + 1] - base <= capacity) c_end++;
    bool in_shared = c_end > c;
    if (in_shared) {
      // Stage a multiple of K columns where possible, so that no column of
      // a full tile is walked alone.
      if (c_end < c1 && c_end - c > K) c_end -= (c_end - c) % K;
      __syncthreads();  // everyone is done with the previous batch
      size_t len = col_off[c_end] - base;
      for (size_t k = threadIdx.x; k < len; k += kTileRows) staged[k] = cols[base + k];
      __syncthreads();
    } else {
      c_end = c + 1;    // too long for shared memory: read it from global memory
    }
    int stop = active ? min(c_end, r_limit) : c;
    if (in_shared) {
      walk_staged<I, OP, K>(f, staged, col_off, base, c, stop, p, store);
    } else if (c < stop) {
      const I *g[1] = {cols + col_off[c]};
      double value[1];
      walk_merged<I, OP, 1>(f, g, p, value);
      store(c, value[0]);
    }
    c = c_end;
  }
}

struct pcf_ctx {
  pcf_op op;
  const pcf_set *x, *y;
  int single, tri;
  size_t shared_bytes;   // shared memory per thread block for staged columns
};

// One band of functions on one GPU, packed by decreasing length, and which
// band was last uploaded to it.
struct band_storage {
  gk_device_buffer data = GK_DEVICE_BUFFER_EMPTY, offsets = GK_DEVICE_BUFFER_EMPTY,
                   orig = GK_DEVICE_BUFFER_EMPTY;
  std::vector<unsigned char> host_data;
  std::vector<size_t> host_offsets;
  std::vector<int> host_orig;
  size_t first = (size_t) -1, count = 0;     // the band on the GPU
  size_t packed_first = (size_t) -1, packed_count = 0;   // the band in host_*
};

struct pcf_storage {
  band_storage rows, cols;
};

size_t interval_bytes(const pcf_ctx *ctx)
{
  return ctx->single ? sizeof(pcf_interval_f) : sizeof(pcf_interval_d);
}

// One interval more than the band's functions hold: walk_merged reads the row
// one interval ahead, past the last function's last interval.
gk_status band_alloc(band_storage *band, size_t functions, size_t intervals, size_t isize,
                     gk_error *err)
{
  intervals += 1;
  band->host_data.resize(intervals * isize);
  band->host_offsets.resize(functions + 1);
  band->host_orig.resize(functions);
  if (gk_buffer_alloc(&band->data, intervals * isize, "the PCFs of a block", err) ||
      gk_buffer_alloc(&band->offsets, (functions + 1) * sizeof(size_t), "PCF offsets", err) ||
      gk_buffer_alloc(&band->orig, functions * sizeof(int), "PCF order", err))
    return err->status;
  return GK_OK;
}

// Packs functions [first, first + count) of s, longest first, into the
// band's host arrays (unless they hold them already).
void band_pack(const pcf_ctx *ctx, band_storage *band, const pcf_set *s, size_t first,
               size_t count)
{
  if (band->packed_first == first && band->packed_count == count) return;
  band->packed_first = first;
  band->packed_count = count;
  std::vector<int> &orig = band->host_orig;
  std::iota(orig.begin(), orig.begin() + count, 0);
  const size_t *off = s->offset + first;
  std::stable_sort(orig.begin(), orig.begin() + count, [off](int a, int b) {
    return off[a + 1] - off[a] > off[b + 1] - off[b];
  });
  size_t isize = interval_bytes(ctx), one[2];
  band->host_offsets[0] = 0;
  for (size_t k = 0; k < count; k++) {
    pcf_pack(s, first + orig[k], 1, ctx->single,
             band->host_data.data() + band->host_offsets[k] * isize, one);
    band->host_offsets[k + 1] = band->host_offsets[k] + one[1];
  }
}

// The host side of a band's upload, ahead of time (the pipeline's prepare):
// nothing when the GPU has that band already.
void band_prepare(const pcf_ctx *ctx, band_storage *band, const pcf_set *s, size_t first,
                  size_t count)
{
  if (band->first == first && band->count == count) return;
  band_pack(ctx, band, s, first, count);
}

gk_status band_upload(const pcf_ctx *ctx, band_storage *band, const pcf_set *s, size_t first,
                      size_t count, gk_stream stream, gk_error *err)
{
  if (band->first == first && band->count == count) return GK_OK;  // already there
  band_pack(ctx, band, s, first, count);
  band->first = first;
  band->count = count;
  size_t intervals = band->host_offsets[count] + 1;   // with band_alloc's padding
  if (gk_buffer_upload(&band->data, band->host_data.data(), intervals * interval_bytes(ctx),
                       stream, err) ||
      gk_buffer_upload(&band->offsets, band->host_offsets.data(), (count + 1) * sizeof(size_t),
                       stream, err) ||
      gk_buffer_upload(&band->orig, band->host_orig.data(), count * sizeof(int), stream, err))
    return err->status;
  return GK_OK;
}

void storage_destroy(void *ctx, void *storage)
{
  (void) ctx;
  pcf_storage *s = (pcf_storage *) storage;
  for (band_storage *b : {&s->rows, &s->cols}) {
    gk_buffer_free(&b->data);
    gk_buffer_free(&b->offsets);
    gk_buffer_free(&b->orig);
  }
  delete s;
}

gk_status storage_create(void *ctx_, const gk_block *blocks, size_t count, void **storage,
                         gk_error *err)
{
  const pcf_ctx *ctx = (const pcf_ctx *) ctx_;
  size_t row_fns = 0, col_fns = 0, row_iv = 0, col_iv = 0;
  for (size_t k = 0; k < count; k++) {
    const gk_block &b = blocks[k];
    row_fns = std::max(row_fns, b.rows);
    col_fns = std::max(col_fns, b.cols);
    row_iv = std::max(row_iv, pcf_packed_size(ctx->x, b.row0, b.rows));
    col_iv = std::max(col_iv, pcf_packed_size(ctx->y, b.col0, b.cols));
  }
  pcf_storage *s = new (std::nothrow) pcf_storage;
  *storage = s;
  if (!s) return gk_fail(err, GK_ERR_NOMEM, "out of memory for PCF storage");
  try {
    if (band_alloc(&s->rows, row_fns, row_iv, interval_bytes(ctx), err) ||
        band_alloc(&s->cols, col_fns, col_iv, interval_bytes(ctx), err))
      return err->status;
  } catch (const std::bad_alloc &) {
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory staging PCFs");
  }
  return GK_OK;
}

template <typename I>
void launch_typed(const pcf_ctx *ctx, pcf_storage *s, const gk_block *b, int tri, void *out,
                  cudaStream_t stream)
{
  dim3 grid((unsigned) ((b->rows + kTileRows - 1) / kTileRows),
            (unsigned) ((b->cols + kTileCols - 1) / kTileCols));
  const I *rows = (const I *) s->rows.data.ptr, *cols = (const I *) s->cols.data.ptr;
  const size_t *ro = (const size_t *) s->rows.offsets.ptr, *co = (const size_t *) s->cols.offsets.ptr;
  const int *rorig = (const int *) s->rows.orig.ptr, *corig = (const int *) s->cols.orig.ptr;
  int nr = (int) b->rows, nc = (int) b->cols;
  double p = ctx->op.p;
  size_t capacity = ctx->shared_bytes / sizeof(I);
#define PCF_LAUNCH(OP)                                                                       \
  pcf_tile_kernel<I, OP><<<grid, kTileRows, ctx->shared_bytes, stream>>>(                   \
      rows, ro, rorig, nr, cols, co, corig, nc, tri, p, (double *) out, capacity)
  switch (ctx->op.kind) {
  case PCF_OP_L1: PCF_LAUNCH(PCF_OP_L1); break;
  case PCF_OP_L2: PCF_LAUNCH(PCF_OP_L2); break;
  case PCF_OP_LP: PCF_LAUNCH(PCF_OP_LP); break;
  case PCF_OP_LINF: PCF_LAUNCH(PCF_OP_LINF); break;
  default: PCF_LAUNCH(PCF_OP_INNER); break;
  }
#undef PCF_LAUNCH
}

gk_status launch(void *ctx_, void *storage, const gk_block *b, void *out, gk_stream stream,
                 gk_error *err)
{
  const pcf_ctx *ctx = (const pcf_ctx *) ctx_;
  pcf_storage *s = (pcf_storage *) storage;
  // The scheduler cuts a symmetric result into the same bands for rows and
  // columns: a block is on the diagonal or entirely below it.
  int diagonal = ctx->tri && b->row0 == b->col0;
  if (ctx->tri && !diagonal && b->col0 + b->cols > b->row0)
    return gk_fail(err, GK_ERR_INTERNAL, "PCF block straddles the diagonal off its bands");
  if ((b->cols + kTileCols - 1) / kTileCols > 65535 || b->rows > (size_t) 1 << 30)
    return gk_fail(err, GK_ERR_INTERNAL, "PCF block too large for one launch");
  if (band_upload(ctx, &s->rows, ctx->x, b->row0, b->rows, stream, err) ||
      band_upload(ctx, &s->cols, ctx->y, b->col0, b->cols, stream, err))
    return err->status;
  int tri = diagonal ? ctx->tri : 0;
  cudaStream_t st = (cudaStream_t) stream;
  if (ctx->single) launch_typed<pcf_interval_f>(ctx, s, b, tri, out, st);
  else launch_typed<pcf_interval_d>(ctx, s, b, tri, out, st);
  return gk_cuda_check_launch("the PCF integration kernel", err);
}

// The pipeline's prepare: packs the next block's bands while the GPU works.
// The band uploaded last stays packed (the pageable upload copied it out
// before returning), so a row band shared by consecutive blocks is packed once.
void prepare(void *ctx_, void *storage, const gk_block *b)
{
  const pcf_ctx *ctx = (const pcf_ctx *) ctx_;
  pcf_storage *s = (pcf_storage *) storage;
  band_prepare(ctx, &s->rows, ctx->x, b->row0, b->rows);
  band_prepare(ctx, &s->cols, ctx->y, b->col0, b->cols);
}

}  // namespace

extern "C" gk_status pcf_matrix_cuda(const pcf_op *op, const pcf_set *x, const pcf_set *y,
                                     const gk_block_writer *writer, const pcf_options *options,
                                     gk_error *err)
{
  pcf_ctx ctx = {*op, x, y, options->single,
                 writer->kind == GK_WRITE_DIST ? 1 : writer->kind == GK_WRITE_SYMMETRIC ? 2 : 0,
                 (size_t) gk_tunable(GK_TUNE_PCF_SHARED_BYTES)};
  size_t elem = sizeof(double);   // results are double in both precisions
  size_t free_bytes = (size_t) -1, count = 0;
  int sm = 1 << 30;
  gk_block *blocks = NULL;
  gk_block_plan_config cfg = {x->n, y->n, gk_block_writer_mode(writer->kind), 1,
                              (size_t) 32 * (size_t) options->n_devices, 0,
                              options->first_row};
  gk_block_policy policy = {&ctx, 0, storage_create, storage_destroy, launch, prepare};
  gk_pipeline_options popt = {options->devices, options->n_devices, options->progress, "pcf (GPU)"};

  // Output budget: the device layer's memory budget of the emptiest GPU,
  // shared by the two output buffers each GPU holds at once, split 32 ways per
  // GPU, no block over kMaxBlockElements. Occupancy floor: each thread
  // computes kTileCols pairs, so a block side of sqrt(2048 threads x SMs x
  // kTileCols) fills every SM of the smallest GPU.
  for (int d = 0; d < options->n_devices; d++) {
    gk_device_info info;
    GK_TRY(gk_device_query(options->devices[d], &info, err));
    free_bytes = std::min(free_bytes, info.free_memory);
    sm = std::min(sm, info.sm_count);
  }
  cfg.max_elements = gk_memory_budget_of(free_bytes) / 2 / elem;
  if (options->budget_bytes > 0) cfg.max_elements = (size_t) (options->budget_bytes / 2 / elem);
  cfg.max_elements = std::max((size_t) 1, std::min(cfg.max_elements, kMaxBlockElements * cfg.split_hint));
  cfg.min_side = (size_t) std::sqrt((double) sm * 2048.0 * kTileCols);
  GK_TRY(gk_block_plan(&cfg, &blocks, &count, err));
  GK_TRY(gk_block_pipeline_run(&policy, blocks, count, writer, &popt, err));
fail:
  free(blocks);
  return err->status;
}
