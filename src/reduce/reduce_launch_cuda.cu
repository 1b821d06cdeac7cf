// Launching one GPU reduction (reduce_cuda.cuh): the kernel specialization
// a reduction runs, compiled on first use; the 2D split of the columns over
// the GPU's waves of blocks; long reductions in slices with an interrupt check
// between them; and compiling specializations ahead of their first calls.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "reduce/reduce_cuda.cuh"
#include "device/gk_cuda.h"
#include "device/gk_hooks.h"
#include "device/gk_jit.h"
#include "device/gk_tunables.h"

namespace reduce_gpu {

namespace {

constexpr size_t MIN_CHUNK_AUTO = 512;    // j per 2D chunk when chosen automatically
constexpr double SLICE_PAIRS = 68719476736.0;   // 2^36 pairs per launch of a long reduction
constexpr size_t MIN_SLICE_COLUMNS = 4096;

// Columns (j) per slice: long reductions run as a sequence of launches of
// about SLICE_PAIRS gaussian-equivalent pairs each (tens of milliseconds),
// with an interrupt check between them. The tunable GK_REDUCE_SLICE_PAIRS
// sets the size (tests use it to exercise slicing on small inputs).
size_t slice_columns(const gk_reduce_spec *spec, size_t m, size_t n, int tile)
{
  const double forced = gk_tunable(GK_TUNE_REDUCE_SLICE_PAIRS);
  const double cost = gk_kernel_relative_cost(&spec->kernel);
  const double pairs = forced > 0 ? forced : SLICE_PAIRS / cost;
  // The floor on the columns keeps slices efficient for very many rows; it
  // scales with the cost too, or a costly kernel over 1e6 rows would go
  // seconds between interrupt checks.
  size_t least = forced > 0 ? (size_t) tile : (size_t) ceil(MIN_SLICE_COLUMNS / cost);
  if (least < (size_t) tile) least = (size_t) tile;
  double want = ceil(pairs / (double) (m > 0 ? m : 1));
  size_t cols = want > (double) n ? n : (size_t) want;
  if (cols < least) cols = least;
  // Slices of equal length: a short last slice would cost a launch, a wait
  // and a combining pass for little work.
  if (cols > 0 && cols < n) {
    size_t count = (n + cols - 1) / cols;
    cols = (n + count - 1) / count;
  }
  cols = (cols + tile - 1) / tile * tile;
  return cols > 0 ? cols : 1;
}

// out[i] += out_scale * transposed[i] (two-way launches, after the rows'
// sums are finished). Here, not in reduce_kernels.cuh: that header has two
// translation units, and a kernel that is no template would be defined twice.
__global__ void add_transposed(Args a)
{
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < a.m;
       i += (size_t) gridDim.x * blockDim.x)
    a.out[i] += a.out_scale * a.transposed[i];
}

const char *const VARIANT_SOURCE = "#include \"gpukernels/reduce_kernels.cuh\"\n";

// The tile kernel and the combining pass of a variant; with check_arch > 0
// only compiled for that architecture (no GPU needed), and no handles.
gk_status variant_kernels(const Variant &v, const void **tiles, const void **combine, gk_error *err,
                          int check_arch = 0)
{
  const std::string names[2] = {v.tiles(), v.combine()};
  const char *const list[2] = {names[0].c_str(), names[1].c_str()};
  const void *kernels[2];
  char what[160];
  snprintf(what, sizeof what, "a %s reduction kernel (%s, %s)", v.type(), v.op_type().c_str() + 10, v.val);
  // A formula's functor comes with its own program (which includes the kernels).
  const char *source = v.source ? v.source : VARIANT_SOURCE;
  if (v.source) snprintf(what, sizeof what, "a %s formula kernel (%s)", v.type(), v.op_type().c_str() + 10);
  if (check_arch > 0) return gk_jit_compile_check(source, 2, list, check_arch, what, err);
  if (gk_jit_kernels(source, 2, list, what, kernels, err))
    return err->status;
  *tiles = kernels[0];
  *combine = kernels[1];
  return GK_OK;
}

gk_status launch_kernel(const void *kernel, dim3 grid, int threads, size_t smem, Args *a, const char *what,
                        gk_error *err)
{
  void *args[1] = {a};
  if (gk_cuda_status(cudaLaunchKernel(kernel, grid, dim3((unsigned) threads), args, smem, 0), what, err))
    return err->status;
  return gk_cuda_check_launch(what, err);
}

// Fraction of the last wave of blocks that is busy, averaged over all waves.
double wave_efficiency(size_t blocks, size_t wave)
{
  size_t waves = (blocks + wave - 1) / wave;
  return (double) blocks / (double) (waves * wave);
}

// The chunk count in [from, to] whose blocks fill their waves best; a larger
// count must do clearly better (2%) to be taken.
size_t best_chunks(size_t blocks_1d, size_t wave, size_t from, size_t to)
{
  size_t want = from;
  double best = wave_efficiency(blocks_1d * from, wave);
  for (size_t c = from + 1; c <= to; c++) {
    double eff = wave_efficiency(blocks_1d * c, wave);
    if (eff > best + 0.02) {
      best = eff;
      want = c;
    }
  }
  return want;
}

// The 2D split of [0, n): how many chunks, and j per chunk (a multiple of the
// tile). The automatic rule (documented in ?kernel_reduce), with a wave = the
// blocks the GPU runs at once (from the kernel's occupancy):
//  - fewer 1D blocks than a wave, and n >= 2 x MIN_CHUNK_AUTO: split j into as
//    many chunks (>= MIN_CHUNK_AUTO each) as fit in one wave, or up to 16 times
//    more when that fills the waves clearly better;
//  - otherwise, 2 to 16 chunks of >= 4 x MIN_CHUNK_AUTO when that fills the last
//    wave clearly better (partial results cost m x chunks doubles, little).
void plan_chunks(const gk_reduce_spec *spec, size_t blocks_1d, size_t n, int blocks_per_sm,
                 Args *a)
{
  a->nchunks = 1;
  a->j_chunk = (int) (n > 0 ? n : 1);
  if (n == 0 || spec->method == GK_REDUCE_1D) return;
  // The lists in local memory (k > KMIN_REGISTER_MAX) fill up anew in every
  // chunk at a cost comparable to the pairs': one chunk.
  if (spec->method == GK_REDUCE_AUTO && spec->reduction == GK_REDUCE_KMIN && spec->k > KMIN_REGISTER_MAX)
    return;
  size_t wave = (size_t) blocks_per_sm * gk_device_sm_count();
  size_t want, min_chunk;
  if (spec->method == GK_REDUCE_2D) {
    want = (wave + blocks_1d - 1) / blocks_1d;
    if (want < 2) want = 2;
    min_chunk = (size_t) a->tile;
  } else if (blocks_1d < wave) {
    if (n < 2 * MIN_CHUNK_AUTO) return;
    min_chunk = MIN_CHUNK_AUTO;
    size_t most = (n + min_chunk - 1) / min_chunk, from = wave / blocks_1d;
    want = from >= most ? most : best_chunks(blocks_1d, wave, from, 16 * from < most ? 16 * from : most);
  } else {
    min_chunk = 4 * MIN_CHUNK_AUTO;
    size_t most = n / min_chunk < 16 ? n / min_chunk : 16;
    want = most >= 2 ? best_chunks(blocks_1d, wave, 1, most) : 1;
    if (want == 1) return;
  }
  size_t most = (n + min_chunk - 1) / min_chunk;
  if (want > most) want = most;
  if (want > 65535) want = 65535;
  if (want < 1) want = 1;
  size_t chunk = (n + want - 1) / want;
  chunk = (chunk + a->tile - 1) / a->tile * a->tile;
  a->j_chunk = (int) chunk;
  a->nchunks = (int) ((n + chunk - 1) / chunk);
}

// Registers hold x_i for the small dimensions (1 to 3 where all_dims, else 3);
// any other dimension reads it from memory.
void set_dim(Variant *v, int dim, bool all_dims)
{
  v->ds = dim == 3 || (all_dims && (dim == 1 || dim == 2)) ? dim : 0;
}

// The value functor of a reduction (reduce_kernels.cuh): the gaussian on
// pre-scaled points, the exponential family without the switch over
// families, the squared distance of knn, or any kernel through the switch.
// Sums leave the variance to the end (out_scale); the reductions that
// exponentiate F take it per pair.
const char *value_functor(const gk_reduce_spec *spec, bool gauss2)
{
  double p1, p2;
  const bool exponentiated = spec->reduction == GK_REDUCE_LOGSUMEXP || spec->reduction == GK_REDUCE_SOFTMAX_SUM;
  if (spec->reduction == GK_REDUCE_SUM) {
    if (gauss2) return "ValGauss2";
    if (exp_poly_of(spec->kernel, &p1, &p2)) return p1 == 0 && p2 == 0 ? "ValExp" : "ValExpPoly";
    return "ValKernel";
  }
  if (exponentiated) {
    if (spec->kernel.family == GK_KERNEL_GAUSSIAN) return "ValGauss2Variance";
    if (exp_poly_of(spec->kernel, &p1, &p2))
      return p1 == 0 && p2 == 0 ? "WithVariance<gkreduce::ValExp>" : "WithVariance<gkreduce::ValExpPoly>";
    return "ValKernel";
  }
  return sqdist_values(spec) ? "ValSqdist" : "ValKernel";
}

// The floor of blocks per multiprocessor (MIN_BLOCKS in reduce_kernels.cuh)
// of a kernel without a cap of its own: none or 1, which lets ptxas take up
// to 255 registers per thread. Float32 kernels run faster with fewer
// registers and more warps, and so do the two-way sums (the H2 products; a
// floor of 1 lets their float32 kernel take far more registers). The other
// float64 kernels keep 1: the gaussian sums and the H2 products of several
// right-hand sides run faster with the registers.
int register_floor(const Variant &v)
{
  return v.single || v.two_way ? 0 : 1;
}

// Blocks per multiprocessor that the k-smallest and min/max kernels are
// compiled to fit (__launch_bounds__; the tunable GK_REDUCE_MIN_BLOCKS
// overrides): the double-precision list of 16 entries takes 112 registers
// uncapped, 2 blocks of 256 threads, too few warps to hide its latencies; 3
// (80 registers, a few bytes spill) hide them. The others run no faster
// capped (k = 1 unfiltered, k = 32: slower); the filtered double minimum
// takes 4 (take_filter).
int min_blocks(const Variant &v)
{
  const int forced = (int) gk_tunable(GK_TUNE_REDUCE_MIN_BLOCKS);
  if (forced > 0) return forced;
  // knn's squared distances only: the generic kernel switch needs its registers.
  if (v.single || v.ranged || v.source || strcmp(v.val, "ValSqdist") != 0) return register_floor(v);
  return v.op == OP_KMIN && v.kmax <= 16 ? 3 : register_floor(v);
}

}  // namespace

bool filterable(const Variant &v)
{
  if (gk_tunable(GK_TUNE_REDUCE_FLOAT_FILTER) == 0) return false;
  return !v.single && !v.ranged && !v.two_way && !v.source && v.ds > 0 &&
         v.ds <= FILTER_ENTRY_FLOATS && strcmp(v.val, "ValSqdist") == 0 &&
         ((v.op == OP_KMIN && v.kmax <= 16) || v.op == OP_MIN);
}

void take_filter(Variant *v)
{
  v->filter = true;
  if (v->op != OP_MIN) return;
  // The filtered minimum by one row per thread: a warp's group of pairs is
  // evaluated in double when any of its rows may improve, which with 4 rows
  // per thread (and the shorter j chunks of fewer row blocks) is most
  // groups. Its float loop waits on shared-memory loads: 4 blocks per
  // multiprocessor (64 registers) hide them better than 3 (80).
  if (!gk_tunable_is_set(GK_TUNE_REDUCE_ROWS)) v->rows = 1;
  if (!gk_tunable_is_set(GK_TUNE_REDUCE_MIN_BLOCKS)) v->min_blocks = 4;
}

int fast_rows(size_t m, size_t n, int e)
{
  const int forced = (int) gk_tunable(GK_TUNE_REDUCE_ROWS);
  if (forced > 0) return forced == 4 && e != 1 ? 2 : forced == 3 ? 2 : forced;
  // Blocks the 2D scheme could make (chunks of MIN_CHUNK_AUTO), against two
  // waves of 8 blocks per multiprocessor.
  double chunks = n / (double) MIN_CHUNK_AUTO < 1 ? 1 : n / (double) MIN_CHUNK_AUTO;
  double waves2 = 2.0 * 8 * gk_device_sm_count();
  for (int rows = (e == 1 ? 4 : 2); rows > 1; rows /= 2)
    if (ceil(m / (double) (BLOCK * rows)) * chunks >= waves2) return rows;
  return 1;
}

size_t two_way_entry_bytes(size_t value_bytes)
{
  return (size_t) (threads_per_block<true>() / 32) * value_bytes;
}

gk_status launch(const gk_reduce_spec *spec, Args a, const Variant &v, gk_error *err)
{
  const bool ranged = a.pieces != NULL;
  const bool two_way = a.transposed != NULL;
  const int threads = ranged ? threads_per_block<true>() : threads_per_block<false>();
  if (ranged && a.piece_rows != threads * v.rows)
    return gk_fail(err, GK_ERR_INTERNAL, "block-sparse pieces of %d rows for blocks of %d", a.piece_rows,
                   threads * v.rows);
  // Two-way launches exist for the sums of one weight column, one row per thread.
  if (two_way != v.two_way || (two_way && (v.op != OP_SUM || v.ec != 1 || v.rows != 1 || !ranged)))
    return gk_fail(err, GK_ERR_INTERNAL, "a two-way launch of a reduction that has none");
  const void *kernel = NULL, *combine = NULL;
  if (variant_kernels(v, &kernel, &combine, err)) return err->status;
  // The tile (and, block-sparse, the j of each entry: tiles gather ranges).
  size_t smem = queue_offset(a.tile, a.stride * (int) v.value_bytes(), ranged);
  smem += queue_bytes(v.queue(), threads, v.rows, v.value_bytes());
  if (v.filter) smem += (size_t) a.tile * FILTER_ENTRY_FLOATS * sizeof(float);
  if (two_way) smem += (size_t) a.tile * two_way_entry_bytes(v.value_bytes());
  if (smem > 48 * 1024 &&
      gk_cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) smem),
                     "allowing the reduction's shared memory", err))
    return err->status;
  // Blocks that fit on a multiprocessor, for the 2D rule (cached per device,
  // kernel and shared-memory size by the device layer).
  const int per_sm = gk_device_occupancy(kernel, threads, smem);
  // The columns to slice: j in [0, n), or block-sparse, the positions in
  // each piece's list of kept columns (a slice then gives every piece with a
  // long enough list the same work; slices of j would give each piece its
  // kept columns in that slice, unevenly).
  const size_t columns = ranged ? a.list_max : a.n;
  // Rows per column position: every row in the first positions of the lists,
  // fewer after, as the shorter lists end; the average is the kept pairs over
  // the longest list.
  const size_t rows_per_column = ranged ? (size_t) ceil(a.kept_pairs / (double) (columns > 0 ? columns : 1)) : a.m;
  const size_t slice = slice_columns(spec, rows_per_column, columns, a.tile);
  const size_t nslices = columns == 0 ? 1 : (columns + slice - 1) / slice;
  const unsigned row_blocks = ranged ? (unsigned) a.npieces
                                     : (unsigned) ((a.m + BLOCK * v.rows - 1) / (BLOCK * v.rows));
  a.sliced = nslices > 1;
  a.chunk0 = a.sliced ? 1 : 0;
  // The columns' sums gather over every slice and chunk from zero.
  if (two_way && gk_cuda_status(cudaMemsetAsync(a.transposed, 0, a.m * sizeof(double), 0),
                                "clearing the reduction's column sums", err))
    return err->status;

  // Every slice but the last has the first one's length, so two plans cover
  // them all. Partial results: slot 0 carries the state between slices, then
  // the chunks of one slice; the layout must not change between slices, so it
  // is sized for the larger plan.
  Args first = a, last = a;
  plan_chunks(spec, row_blocks, columns < slice ? columns : slice, per_sm, &first);
  plan_chunks(spec, row_blocks, columns - (nslices - 1) * slice, per_sm, &last);
  const size_t slots = (size_t) a.chunk0 + (first.nchunks > last.nchunks ? first.nchunks : last.nchunks);
  if (a.sliced || first.nchunks > 1 || last.nchunks > 1) {
    size_t values = slots * partial_value_slots(v.op, a.e, a.k) * a.m * sizeof(double);
    size_t indices = slots * partial_index_slots(v.op, a.k) * a.m * sizeof(int);
    void *partials = NULL;
    if (gk_device_scratch(GK_SCRATCH_PARTIALS, values + indices,
                          "the 2D scheme's partial results", &partials, err))
      return err->status;
    a.partial = (double *) partials;
    a.partial_index = (int *) ((char *) partials + values);
  }

  for (size_t s = 0; s < nslices; s++) {
    a.j_begin = s * slice;
    a.j_end = columns - a.j_begin < slice ? columns : a.j_begin + slice;
    const Args &plan = s + 1 < nslices ? first : last;
    a.j_chunk = plan.j_chunk;
    a.nchunks = plan.nchunks;
    a.carry_in = s > 0;
    a.carry_out = s + 1 < nslices;
    if (launch_kernel(kernel, dim3(row_blocks, (unsigned) a.nchunks), threads, smem, &a,
                      "the reduction kernel", err))
      return err->status;
    if ((a.nchunks > 1 || a.sliced) &&
        launch_kernel(combine, dim3((unsigned) ((a.m + 255) / 256)), 256, 0, &a, "the combining kernel", err))
      return err->status;
    if (a.carry_out) {
      // Waiting here costs nothing measurable (a slice is tens of milliseconds)
      // and lets the user stop a long call between slices.
      if (gk_stream_sync(NULL, "the reduction", err)) return err->status;
      if (gk_interrupt_pending())
        return gk_fail(err, GK_ERR_INTERRUPTED, "the reduction was interrupted");
    }
  }
  if (two_way) {   // after the rows are finished (by the kernel or combine_chunks)
    add_transposed<<<(unsigned) std::min<size_t>((a.m + 255) / 256, 4096), 256>>>(a);
    if (gk_cuda_check_launch("adding the column sums", err)) return err->status;
  }
  return GK_OK;
}

// The exponential-family coefficients (poly1, poly2) of a kernel, or false.
bool exp_poly_of(const gk_kernel &k, double *poly1, double *poly2)
{
  *poly1 = *poly2 = 0.0;
  if (k.family == GK_KERNEL_EXPONENTIAL) return true;
  if (k.family != GK_KERNEL_MATERN) return false;
  switch (k.matern_twice_nu) {
  case 1: return true;
  case 3: *poly1 = 1.0; return true;
  case 5: *poly1 = 1.0; *poly2 = 1.0 / 3.0; return true;
  default: return false;
  }
}

// The squared distance (knn's kernel) without the generic switch and without
// its variance (ValSqdist): the smallest values and their j do not change
// (the variance is positive), and finish multiplies them by it (out_scale).
bool sqdist_values(const gk_reduce_spec *spec)
{
  if (spec->kernel.family != GK_KERNEL_SQUARED_DISTANCE) return false;
  return spec->reduction == GK_REDUCE_MIN || spec->reduction == GK_REDUCE_ARGMIN ||
         (spec->reduction == GK_REDUCE_KMIN && spec->k <= KMIN_LARGE);
}

// The kernel specialization a reduction runs: for `dim` coordinates, `e`
// weight columns in this launch, block-sparse or not, two-way or not, and
// `rows` rows per thread (the gaussian sums). False for KMIN beyond the
// register lists (kmin_large, compiled with the package).
bool choose_variant(const gk_reduce_spec *spec, bool single, int dim, int e, bool ranged, bool two_way,
                    int rows, Variant *v)
{
  const bool gauss2 = spec->reduction == GK_REDUCE_SUM && spec->kernel.family == GK_KERNEL_GAUSSIAN;
  *v = Variant();
  v->single = single;
  v->ranged = ranged;
  v->two_way = two_way;
  v->val = spec->formula ? spec->formula->functor : value_functor(spec, gauss2);
  v->source = spec->formula ? spec->formula->source : nullptr;
  // A formula's sums take several rows per thread as the gaussian's do (one
  // read of y_j from shared memory serves them all).
  const bool row_groups = gauss2 || spec->formula;
  switch (spec->reduction) {
  case GK_REDUCE_SUM:
  case GK_REDUCE_LOGSUMEXP:
  case GK_REDUCE_SOFTMAX_SUM:
    v->op = spec->reduction == GK_REDUCE_SUM ? OP_SUM
            : spec->reduction == GK_REDUCE_LOGSUMEXP ? OP_LOGSUMEXP : OP_SOFTMAX;
    v->ec = e == 1 ? 1 : WEIGHT_CHUNK;
    // Plain sums: every dimension up to 3 in registers, and for the
    // gaussian several rows per thread (4 only with one weight column).
    if (v->op == OP_SUM) v->rows = row_groups ? (rows == 4 && v->ec == 1 ? 4 : rows == 2 ? 2 : 1) : 1;
    set_dim(v, dim, v->op == OP_SUM);
    v->min_blocks = register_floor(*v);
    return true;
  case GK_REDUCE_MIN:
  case GK_REDUCE_ARGMIN:
    v->op = OP_MIN;
    break;
  case GK_REDUCE_MAX:
  case GK_REDUCE_ARGMAX:
    v->op = OP_MAX;
    break;
  case GK_REDUCE_KMIN:
    // k = 1: the smallest value and its j, without a list.
    if (spec->k == 1) {
      v->op = OP_MIN;
      break;
    }
    if (spec->k > KMIN_LARGE) return false;
    // One row per thread: two (one shared-memory read of y_j for two lists)
    // is slower (more registers and queue memory, fewer blocks).
    v->op = OP_KMIN;
    for (int length : KMIN_LIST_LENGTHS) {
      v->kmax = length;
      if (spec->k <= length) break;
    }
    set_dim(v, dim, true);
    v->min_blocks = min_blocks(*v);
    return true;
  }
  // knn with k = 1 (the squared distance's minimum) takes several rows per
  // thread as the gaussian sums do: one shared-memory read of y_j and one
  // loop step serve them all.
  v->rows = rows == 4 ? 4 : rows == 2 ? 2 : 1;
  set_dim(v, dim, false);
  v->min_blocks = min_blocks(*v);
  return true;
}

}  // namespace reduce_gpu

using namespace reduce_gpu;

// Compiles the kernels of `count` reductions ahead of their first calls, on
// up to `threads` host threads (NVRTC compiles programs side by side).
extern "C" gk_status reduce_cuda_warmup(int count, const gk_reduce_spec *specs, const int *dims,
                                        const int *cols, const int *ranged, const int *rows, int threads,
                                        int check_arch, gk_error *err)
{
  if (check_arch <= 0 && gk_device_enter(GK_DEVICE_ACTIVE, err)) return err->status;
  const int device = check_arch > 0 ? 0 : gk_device_in_use();
  std::vector<Variant> variants;
  std::vector<std::string> seen;   // many reductions share a specialization
  for (int i = 0; i < count; i++) {
    Variant v;
    const bool two_way = specs[i].symmetric && ranged[i] && cols[i] == 1;
    if (!choose_variant(&specs[i], specs[i].single != 0, dims[i], cols[i], ranged[i] != 0, two_way, rows[i], &v))
      continue;
    const std::string name = v.tiles();
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.push_back(name);
    variants.push_back(v);
  }
  std::atomic<size_t> next(0);
  std::mutex failed;
  gk_error first;
  gk_error_clear(&first);
  auto work = [&](bool main_thread) {
    if (!main_thread) {
      // Helper threads print nothing and never ask R about interrupts.
      gk_hooks_bind_worker([](void *) { return 0; }, NULL);
      gk_error ignored;
      gk_error_clear(&ignored);
      if (check_arch <= 0 && gk_device_enter(device, &ignored)) return;   // the main thread does the work
    }
    for (size_t i = next++; i < variants.size(); i = next++) {
      const void *tiles, *combine;
      gk_error e;
      gk_error_clear(&e);
      if (variant_kernels(variants[i], &tiles, &combine, &e, check_arch)) {
        std::lock_guard<std::mutex> g(failed);
        if (!first.status) first = e;
        next = variants.size();
      }
    }
  };
  std::vector<std::thread> helpers;
  const int extra = std::min<int>(threads > 0 ? threads : 1, (int) variants.size()) - 1;
  try {
    for (int t = 0; t < extra; t++) helpers.emplace_back(work, false);
  } catch (...) {
    // Fewer threads than asked: the rest is done by those that started.
  }
  work(true);
  for (std::thread &h : helpers) h.join();
  if (first.status) {
    *err = first;
    return first.status;
  }
  return GK_OK;
}
