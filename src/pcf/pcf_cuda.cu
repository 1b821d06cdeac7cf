// The PCF policy of the GPU block pipeline (device/block_pipeline.h): the
// bands of functions that blocks need, packed once per call on the host and
// kept on each GPU in slots of a band cache (every band where memory allows,
// so that each goes up once per GPU; fewer for sets larger than GPU memory),
// uploaded while the block before computes; and the tiled integration kernel.
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
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>
#include "pcf/pcf.h"
#include "pcf/pcf_integrate.h"
#include "device/block_pipeline.h"
#include "device/gk_cuda.h"
#include "device/gk_hooks.h"
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
// The packed bands of a call up to this size go to page-locked memory that
// the device layer keeps between calls: the packing then writes pages that
// exist (first writes to fresh pages, one fault each, cost most of it) and
// the uploads are asynchronous. Larger sets take memory of their own per
// call, so as not to keep that much of the host's memory locked.
const size_t kMostPinnedBandBytes = (size_t) 1 << 30;

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

// Where a band's arrays lie in a GPU's band slot, and in its packed image on
// the host: its intervals, plus one of padding (walk_merged), the offsets of
// its functions (count + 1) and the map back to the original order (count).
struct slot_layout {
  size_t data_bytes, offsets_at, orig_at, bytes;
};

// A band of the block list: functions [first, first + count) of a set,
// packed by decreasing length (the slots), as the image of a GPU's slot, so
// that one copy uploads it. Packed once per call, on the host: by a thread of
// its own as the GPUs start, for their first blocks, else by the first GPU
// thread that needs it; every GPU uploads it from there.
struct packed_band {
  const pcf_set *set = nullptr;
  size_t first = 0, count = 0;
  slot_layout layout = {};           // where its parts lie in its image and slot
  unsigned char *image = nullptr;    // in the call's band memory (place_bands)
  std::once_flag packed;
};

struct pcf_ctx {
  pcf_op op;
  const pcf_set *x, *y;
  int single, tri;
  size_t shared_bytes;   // shared memory per thread block for staged columns
  const gk_block *blocks;                // the pipeline's list
  std::vector<int> row_band, col_band;   // per block: its bands
  std::unique_ptr<packed_band[]> bands;
  size_t n_bands;
  size_t slot_bytes;                     // the largest band's slot_layout
  std::unique_ptr<unsigned char[]> own_band_memory;   // when not page-locked
  int pack_threads;                      // a GPU thread's share of the host threads
};

size_t interval_bytes(const pcf_ctx *ctx)
{
  return ctx->single ? sizeof(pcf_interval_f) : sizeof(pcf_interval_d);
}

size_t align_up(size_t bytes)
{
  return (bytes + 255) / 256 * 256;
}

slot_layout layout_of(const pcf_ctx *ctx, const pcf_set *s, size_t first, size_t count)
{
  slot_layout l;
  l.data_bytes = (pcf_packed_size(s, first, count) + 1) * interval_bytes(ctx);
  l.offsets_at = align_up(l.data_bytes);
  l.orig_at = l.offsets_at + align_up((count + 1) * sizeof(size_t));
  l.bytes = l.orig_at + align_up(count * sizeof(int));
  return l;
}

// The band table: each distinct (set, first, count) of the blocks' row and
// column bands once (a symmetric plan cuts rows and columns alike, so x's
// bands serve both).
void find_bands(pcf_ctx *ctx, const gk_block *blocks, size_t count)
{
  std::map<std::tuple<const pcf_set *, size_t, size_t>, int> index;
  auto band_of = [&](const pcf_set *s, size_t first, size_t n) {
    auto key = std::make_tuple(s, first, n);
    auto it = index.find(key);
    if (it != index.end()) return it->second;
    int b = (int) index.size();
    index.emplace(key, b);
    return b;
  };
  ctx->blocks = blocks;
  ctx->row_band.resize(count);
  ctx->col_band.resize(count);
  for (size_t k = 0; k < count; k++) {
    ctx->row_band[k] = band_of(ctx->x, blocks[k].row0, blocks[k].rows);
    ctx->col_band[k] = band_of(ctx->y, blocks[k].col0, blocks[k].cols);
  }
  ctx->n_bands = index.size();
  ctx->bands.reset(new packed_band[ctx->n_bands]);
  ctx->slot_bytes = 0;
  for (const auto &entry : index) {
    packed_band &b = ctx->bands[entry.second];
    b.set = std::get<0>(entry.first);
    b.first = std::get<1>(entry.first);
    b.count = std::get<2>(entry.first);
    b.layout = layout_of(ctx, b.set, b.first, b.count);
    ctx->slot_bytes = std::max(ctx->slot_bytes, b.layout.bytes);
  }
}

// The host memory of every band's image, one after the other: the device
// layer's page-locked scratch where the call's bands fit kMostPinnedBandBytes
// and the driver grants it, else memory of the call's own. Throws
// std::bad_alloc when the host is out of memory.
void place_bands(pcf_ctx *ctx)
{
  size_t total = 0;
  for (size_t b = 0; b < ctx->n_bands; b++) total += ctx->bands[b].layout.bytes;
  void *memory = NULL;
  gk_error ignored;
  gk_error_clear(&ignored);
  if (total > kMostPinnedBandBytes ||
      gk_pinned_scratch(GK_PINNED_INPUTS, total, "packed PCFs", &memory, &ignored)) {
    ctx->own_band_memory.reset(new unsigned char[total]);
    memory = ctx->own_band_memory.get();
  }
  size_t at = 0;
  for (size_t b = 0; b < ctx->n_bands; b++) {
    packed_band &band = ctx->bands[b];
    band.image = (unsigned char *) memory + at;
    at += band.layout.bytes;
  }
}

// Packs a band into its image on `threads` host threads. Its intervals are
// not zeroed first: the packing writes them, on all those threads at once.
void pack_band(const pcf_ctx *ctx, packed_band *band, int threads)
{
  size_t count = band->count, size = interval_bytes(ctx);
  const slot_layout &l = band->layout;
  size_t *offsets = (size_t *) (band->image + l.offsets_at);
  int *orig = (int *) (band->image + l.orig_at);
  memset(band->image + l.data_bytes - size, 0, size);   // the padding interval
  std::iota(orig, orig + count, 0);
  const size_t *off = band->set->offset + band->first;
  std::stable_sort(orig, orig + count, [off](int a, int b) {
    return off[a + 1] - off[a] > off[b + 1] - off[b];
  });
  pcf_pack(band->set, band->first, orig, count, ctx->single, band->image, offsets, threads);
}

// The packed band, packing it first on `threads` host threads if no thread
// has (others wait for it).
const packed_band &packed(const pcf_ctx *ctx, int b, int threads)
{
  packed_band *band = &ctx->bands[b];
  std::call_once(band->packed, pack_band, ctx, band, threads);
  return *band;
}

// One GPU's bands: slots of ctx->slot_bytes, each holding one band, as many
// as the memory budget allows up to every band of the list, so that a band
// goes up once per GPU where memory allows (and sets larger than GPU memory
// still work). Uploads run on a stream of their own, queued while the GPU
// computes the blocks before: an event per slot orders the kernels after its
// upload, and another, recorded after each kernel that reads the slot, orders
// a later upload into it after them (the pipeline keeps several blocks in
// flight).
struct pcf_storage {
  gk_device_buffer slots = GK_DEVICE_BUFFER_EMPTY;
  int n_slots = 0;
  std::vector<int> band_in_slot;     // -1: empty
  std::vector<int> slot_of_band;     // -1: not on this GPU
  std::vector<size_t> used_at;       // when a block last needed the slot
  std::vector<cudaEvent_t> uploaded, read;
  gk_stream upload = NULL;
  size_t clock = 0;
};

void storage_destroy(void *ctx, void *storage)
{
  (void) ctx;
  pcf_storage *s = (pcf_storage *) storage;
  if (s->upload) cudaStreamSynchronize((cudaStream_t) s->upload);
  for (const auto *events : {&s->uploaded, &s->read})
    for (cudaEvent_t e : *events)
      if (e) cudaEventDestroy(e);
  gk_stream_destroy(&s->upload);
  gk_buffer_free(&s->slots);
  delete s;
}

gk_status storage_create(void *ctx_, const gk_block *blocks, size_t count, void **storage,
                         gk_error *err)
{
  (void) blocks;
  (void) count;
  const pcf_ctx *ctx = (const pcf_ctx *) ctx_;
  size_t budget = 0, most;
  pcf_storage *s = new (std::nothrow) pcf_storage;
  *storage = s;
  if (!s) return gk_fail(err, GK_ERR_NOMEM, "out of memory for PCF storage");
  // Four slots at least: the two bands of the block computing and the two of
  // the next one, uploaded meanwhile. At most half the memory budget, so that
  // a set larger than that leaves room for other calls on the GPU (future
  // workers sharing it).
  GK_TRY(gk_device_memory_budget(&budget, err));
  most = std::max((size_t) 4, budget / 2 / ctx->slot_bytes);
  if (gk_tunable(GK_TUNE_PCF_BAND_SLOTS) > 0)
    most = std::max((size_t) 4, (size_t) gk_tunable(GK_TUNE_PCF_BAND_SLOTS));
  s->n_slots = (int) std::min(ctx->n_bands, most);
  try {
    s->band_in_slot.assign((size_t) s->n_slots, -1);
    s->slot_of_band.assign(ctx->n_bands, -1);
    s->used_at.assign((size_t) s->n_slots, 0);
    s->uploaded.assign((size_t) s->n_slots, NULL);
    s->read.assign((size_t) s->n_slots, NULL);
  } catch (const std::bad_alloc &) {
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory for PCF storage");
  }
  GK_TRY(gk_buffer_alloc(&s->slots, (size_t) s->n_slots * ctx->slot_bytes, "the PCFs of a block",
                         err));
  GK_TRY(gk_stream_create(&s->upload, 0, err));
  for (auto *events : {&s->uploaded, &s->read})
    for (cudaEvent_t &e : *events)
      GK_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", err);
fail:
  return err->status;
}

// Band b on this GPU: its slot, uploading it there (on the upload stream) if
// it is not there yet, into an empty slot or the one least recently needed
// other than `keep`, once the kernels that read it are done.
gk_status band_slot(const pcf_ctx *ctx, pcf_storage *s, int b, int keep, int *slot,
                    gk_error *err)
{
  s->clock++;
  int at = s->slot_of_band[(size_t) b];
  if (at < 0) {
    for (int k = 0; k < s->n_slots; k++) {
      if (k == keep) continue;
      if (s->band_in_slot[(size_t) k] < 0) {
        at = k;
        break;
      }
      if (at < 0 || s->used_at[(size_t) k] < s->used_at[(size_t) at]) at = k;
    }
    if (at < 0) return gk_fail(err, GK_ERR_INTERNAL, "no free slot for a PCF band");
    const packed_band &band = packed(ctx, b, ctx->pack_threads);
    if (s->band_in_slot[(size_t) at] >= 0) s->slot_of_band[(size_t) s->band_in_slot[(size_t) at]] = -1;
    s->band_in_slot[(size_t) at] = -1;
    gk_device_buffer slot_buffer = {(char *) s->slots.ptr + (size_t) at * ctx->slot_bytes,
                                    ctx->slot_bytes};
    size_t bytes = band.layout.bytes;
    // (an event never recorded, a slot no kernel read yet, waits for nothing)
    if (gk_cuda_status(cudaStreamWaitEvent((cudaStream_t) s->upload, s->read[(size_t) at], 0),
                       "cudaStreamWaitEvent", err) ||
        gk_buffer_upload(&slot_buffer, band.image, bytes, s->upload, err))
      return err->status;
    if (gk_cuda_status(cudaEventRecord(s->uploaded[(size_t) at], (cudaStream_t) s->upload),
                       "cudaEventRecord", err))
      return err->status;
    s->band_in_slot[(size_t) at] = b;
    s->slot_of_band[(size_t) b] = at;
  }
  s->used_at[(size_t) at] = s->clock;
  *slot = at;
  return GK_OK;
}

// The slots of block b's row and column bands.
gk_status block_slots(const pcf_ctx *ctx, pcf_storage *s, const gk_block *b, int slot[2],
                      gk_error *err)
{
  size_t k = (size_t) (b - ctx->blocks);
  if (band_slot(ctx, s, ctx->row_band[k], -1, &slot[0], err) ||
      band_slot(ctx, s, ctx->col_band[k], slot[0], &slot[1], err))
    return err->status;
  return GK_OK;
}

template <typename I>
void launch_typed(const pcf_ctx *ctx, pcf_storage *s, const gk_block *b, const int slot[2],
                  int tri, void *out, cudaStream_t stream)
{
  dim3 grid((unsigned) ((b->rows + kTileRows - 1) / kTileRows),
            (unsigned) ((b->cols + kTileCols - 1) / kTileCols));
  size_t k = (size_t) (b - ctx->blocks);
  const packed_band &rb = ctx->bands[(size_t) ctx->row_band[k]], &cb = ctx->bands[(size_t) ctx->col_band[k]];
  const slot_layout &rl = rb.layout, &cl = cb.layout;
  const char *rbase = (const char *) s->slots.ptr + (size_t) slot[0] * ctx->slot_bytes;
  const char *cbase = (const char *) s->slots.ptr + (size_t) slot[1] * ctx->slot_bytes;
  const I *rows = (const I *) rbase, *cols = (const I *) cbase;
  const size_t *ro = (const size_t *) (rbase + rl.offsets_at), *co = (const size_t *) (cbase + cl.offsets_at);
  const int *rorig = (const int *) (rbase + rl.orig_at), *corig = (const int *) (cbase + cl.orig_at);
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
  int slot[2];
  cudaStream_t st = (cudaStream_t) stream;
  // The scheduler cuts a symmetric result into the same bands for rows and
  // columns: a block is on the diagonal or entirely below it.
  int diagonal = ctx->tri && b->row0 == b->col0;
  if (ctx->tri && !diagonal && b->col0 + b->cols > b->row0)
    return gk_fail(err, GK_ERR_INTERNAL, "PCF block straddles the diagonal off its bands");
  if ((b->cols + kTileCols - 1) / kTileCols > 65535 || b->rows > (size_t) 1 << 30)
    return gk_fail(err, GK_ERR_INTERNAL, "PCF block too large for one launch");
  if (block_slots(ctx, s, b, slot, err)) return err->status;
  for (int k = 0; k < 2; k++)
    if (gk_cuda_status(cudaStreamWaitEvent(st, s->uploaded[(size_t) slot[k]], 0),
                       "cudaStreamWaitEvent", err))
      return err->status;
  int tri = diagonal ? ctx->tri : 0;
  if (ctx->single) launch_typed<pcf_interval_f>(ctx, s, b, slot, tri, out, st);
  else launch_typed<pcf_interval_d>(ctx, s, b, slot, tri, out, st);
  if (gk_cuda_check_launch("the PCF integration kernel", err)) return err->status;
  for (int k = 0; k < 2; k++)
    if (gk_cuda_status(cudaEventRecord(s->read[(size_t) slot[k]], st), "cudaEventRecord", err))
      return err->status;
  return GK_OK;
}

// The pipeline's prepare, while the GPU computes: packs and uploads the next
// block's bands. A failure here is met again, and reported, by its launch.
void prepare(void *ctx_, void *storage, const gk_block *b)
{
  gk_error ignored;
  gk_error_clear(&ignored);
  int slot[2];
  block_slots((const pcf_ctx *) ctx_, (pcf_storage *) storage, b, slot, &ignored);
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
  int depth = gk_pipeline_depth();   // blocks in flight per GPU
  size_t free_bytes = (size_t) -1, count = 0;
  int sm = 1 << 30;
  gk_block *blocks = NULL;
  // The GPUs taking from the list: this call's, in every process that shares it.
  int takers = options->n_devices * (options->queue ? std::max(1, options->sharers) : 1);
  // Split 32 ways per GPU.
  gk_block_plan_config cfg = {x->n, y->n, gk_block_writer_mode(writer->kind), 1,
                              (size_t) 32 * (size_t) takers, 0, options->first_row};
  gk_block_policy policy = {&ctx, 0, storage_create, storage_destroy, launch, prepare};
  gk_pipeline_options popt = {options->devices, options->n_devices, depth, options->progress,
                              "pcf (GPU)", options->queue, takers};
  double start = gk_seconds_now();

  // Output budget: the device layer's memory budget of the emptiest GPU,
  // shared by the output buffers of the blocks each GPU has in flight, split 32 ways per
  // GPU, no block over kMaxBlockElements. Occupancy floor: each thread
  // computes kTileCols pairs, so a block side of sqrt(2048 threads x SMs x
  // kTileCols) fills every SM of the smallest GPU.
  for (int d = 0; d < options->n_devices; d++) {
    gk_device_info info;
    GK_TRY(gk_device_query(options->devices[d], &info, err));
    free_bytes = std::min(free_bytes, info.free_memory);
    sm = std::min(sm, info.sm_count);
  }
  cfg.max_elements = gk_memory_budget_of(free_bytes) / (size_t) depth / elem;
  if (options->budget_bytes > 0)
    cfg.max_elements = (size_t) (options->budget_bytes / (double) depth / elem);
  cfg.max_elements = std::max((size_t) 1, std::min(cfg.max_elements, kMaxBlockElements * cfg.split_hint));
  cfg.min_side = (size_t) std::sqrt((double) sm * 2048.0 * kTileCols);
  {
    int taking;
    GK_TRY(gk_block_plan_queued(&cfg, options->queue, &blocks, &count, &taking, err));
    if (!taking) {   // the list's blocks are too large for this GPU: others take them
      if (options->progress)
        gk_progress("pcf (GPU): the shared list's blocks exceed this GPU's budget; none taken");
      return GK_OK;
    }
  }
  ctx.pack_threads = gk_block_writer_share(writer, options->n_devices).threads;
  try {
    find_bands(&ctx, blocks, count);
    place_bands(&ctx);
  } catch (const std::bad_alloc &) {
    gk_fail(err, GK_ERR_NOMEM, "out of host memory planning PCF bands");
    goto fail;
  }
  if (options->progress)
    gk_progress("pcf (GPU): %zu blocks over %zu bands%s, planned and the bands' host memory "
                "ready in %.3f s", count, ctx.n_bands,
                options->queue ? " (a list shared with other processes)" : "",
                gk_seconds_now() - start);
  {
    // The bands of each GPU's first block, packed on every host thread by a
    // thread of their own while this one starts the GPUs and makes the
    // result: a GPU thread packs with its share of the threads, and the GPUs'
    // first blocks share bands, so that they would wait for each other. A
    // GPU thread waits for a band being packed and packs one not begun.
    // From a shared list, the blocks next in it (others may take them).
    int all_threads = gk_block_writer_share(writer, 1).threads;
    size_t first = options->queue ? std::min(count, gk_block_next(options->queue)) : 0;
    size_t firsts = std::min(count, first + (size_t) options->n_devices);
    auto pack_firsts = [&ctx, first, firsts, all_threads] {
      for (size_t k = first; k < firsts; k++)
        for (int b : {ctx.row_band[k], ctx.col_band[k]}) packed(&ctx, b, all_threads);
    };
    std::thread early;
    try {
      early = std::thread(pack_firsts);
    } catch (const std::system_error &) {
      pack_firsts();
    }
    gk_block_pipeline_run(&policy, blocks, count, writer, &popt, err);
    if (early.joinable()) early.join();
  }
fail:
  free(blocks);
  return err->status;
}
