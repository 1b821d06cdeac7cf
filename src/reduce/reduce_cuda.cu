// The GPU engine of the kernel reductions (semantics in reduce.h): plans the
// 1D or 2D scheme, prepares the operands on the device in the device layer's
// scratch (kept between calls) and launches the kernels of reduce_kernels.cuh
// (inst/include/gpukernels), each specialization compiled for the GPU in use
// the first time it is needed (device/gk_jit.h).
// One synchronize per call, after the results are downloaded (and one between
// the slices of a long reduction, for interrupts).
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <string>
#include <utility>
#include <vector>
#include "reduce/reduce.h"
#include "gpukernels/reduce_args.h"
#include "reduce/reduce_kmin_large.cuh"
#include "device/gk_cuda.h"
#include "device/gk_hooks.h"
#include "device/gk_jit.h"
#include "device/gk_tunables.h"

using namespace gkreduce;

namespace {

constexpr int WEIGHT_CHUNK = 8;      // columns of b per launch (more: several launches)
constexpr int KMIN_SMALL = 16;       // k-list sizes compiled for KMIN
constexpr int KMIN_LARGE = KMIN_LIST_MAX;   // beyond: the sorting strategy (reduce_kmin_large.cuh)
constexpr size_t TILE_BYTES = 48 * 1024;
constexpr size_t MIN_CHUNK_AUTO = 512;    // j per 2D chunk when chosen automatically
constexpr double SLICE_PAIRS = 68719476736.0;   // 2^36 pairs per launch of a long reduction
constexpr size_t MIN_SLICE_COLUMNS = 4096;

// Carves 256-byte aligned pieces out of the workspace.
struct Layout {
  size_t used = 0;
  size_t take(size_t bytes)
  {
    size_t at = used;
    used += (bytes + 255) / 256 * 256;
    return at;
  }
};

// Rows per thread of the gaussian-sum fast path. More rows share each shared-
// memory read of y_j (4 rows: about a third faster than 1), but make fewer
// blocks: a small problem keeps 1 row per thread so that, with the 2D split,
// it still fills the GPU. The tunable GK_REDUCE_ROWS (1, 2 or 4) overrides
// the choice; 4 is compiled for one weight column only.
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

bool weighted(gk_reduction r)
{
  return r == GK_REDUCE_SUM || r == GK_REDUCE_LOGSUMEXP || r == GK_REDUCE_SOFTMAX_SUM;
}

void plan_chunks(const gk_reduce_spec *spec, size_t blocks_1d, size_t n, int blocks_per_sm,
                 Args *a);

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

// Shared memory per tile entry of a two-way launch: the column sums of each
// warp of the block (reduce_kernels.cuh).
size_t two_way_entry_bytes(size_t value_bytes)
{
  return (size_t) (threads_per_block<true>() / 32) * value_bytes;
}

// ---- one specialization of the tile kernel, compiled on first use ----

// The template arguments of reduce_tiles and combine_chunks
// (reduce_kernels.cuh) for one launch; the kernels are compiled for the GPU
// in use by the device layer's run-time compiler (device/gk_jit.h) the first
// time a specialization is needed.
struct Variant {
  bool single = false;
  OpKind op = OP_SUM;
  int ec = 1;              // weight columns compiled (SUM, LOGSUMEXP, SOFTMAX)
  int kmax = 0;            // KMIN: the list length compiled
  const char *val = "ValKernel";
  int ds = 0;              // dimension held in registers (0: any, from memory)
  int rows = 1;            // rows per thread
  bool ranged = false, two_way = false;

  const char *type() const { return single ? "float" : "double"; }
  std::string op_type() const
  {
    const std::string t = type();
    switch (op) {
    case OP_SUM: return "gkreduce::SumOp<" + t + ", " + std::to_string(ec) + ">";
    case OP_LOGSUMEXP: return "gkreduce::ExpOp<" + t + ", " + std::to_string(ec) + ", false>";
    case OP_SOFTMAX: return "gkreduce::ExpOp<" + t + ", " + std::to_string(ec) + ", true>";
    case OP_MIN: return "gkreduce::ExtremeOp<" + t + ", false>";
    case OP_MAX: return "gkreduce::ExtremeOp<" + t + ", true>";
    case OP_KMIN: return "gkreduce::KMinOp<" + t + ", " + std::to_string(kmax) + ">";
    }
    return "";
  }
  std::string tiles() const
  {
    return "gkreduce::reduce_tiles<" + std::string(type()) + ", " + op_type() + ", gkreduce::" + val +
           ", " + std::to_string(ds) + ", " + std::to_string(rows) + ", " + (ranged ? "true" : "false") +
           ", " + (two_way ? "true" : "false") + ">";
  }
  std::string combine() const { return "gkreduce::combine_chunks<" + op_type() + ">"; }
  int queue() const { return op == OP_KMIN ? KMIN_QUEUE : 0; }
  size_t value_bytes() const { return single ? sizeof(float) : sizeof(double); }
};

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
  if (check_arch > 0) return gk_jit_compile_check(VARIANT_SOURCE, 2, list, check_arch, what, err);
  if (gk_jit_kernels(VARIANT_SOURCE, 2, list, what, kernels, err))
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

// Registers hold x_i for the small dimensions (1 to 3 where all_dims, else 3);
// any other dimension reads it from memory.
void set_dim(Variant *v, int dim, bool all_dims)
{
  v->ds = dim == 3 || (all_dims && (dim == 1 || dim == 2)) ? dim : 0;
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
  v->val = value_functor(spec, gauss2);
  switch (spec->reduction) {
  case GK_REDUCE_SUM:
  case GK_REDUCE_LOGSUMEXP:
  case GK_REDUCE_SOFTMAX_SUM:
    v->op = spec->reduction == GK_REDUCE_SUM ? OP_SUM
            : spec->reduction == GK_REDUCE_LOGSUMEXP ? OP_LOGSUMEXP : OP_SOFTMAX;
    v->ec = e == 1 ? 1 : WEIGHT_CHUNK;
    // Plain sums: every dimension up to 3 in registers, and for the
    // gaussian several rows per thread (4 only with one weight column).
    if (v->op == OP_SUM) v->rows = gauss2 ? (rows == 4 && v->ec == 1 ? 4 : rows == 2 ? 2 : 1) : 1;
    set_dim(v, dim, v->op == OP_SUM);
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
    v->kmax = spec->k <= KMIN_SMALL ? KMIN_SMALL : KMIN_LARGE;
    set_dim(v, dim, true);
    return true;
  }
  set_dim(v, dim, false);
  return true;
}

template <typename T>
gk_status launch_reduction(const gk_reduce_spec *spec, const Args &a, int rows, bool two_way, gk_error *err)
{
  Variant v;
  if (choose_variant(spec, sizeof(T) == 4, a.dim, a.e, a.pieces != NULL, two_way, rows, &v))
    return launch(spec, a, v, err);
  if (a.pieces)
    return gk_fail(err, GK_ERR_INPUT, "with block-sparse `ranges` the GPU engine finds at most %d "
                   "smallest values (k = %d); use backend = \"cpu\" or k <= %d", KMIN_LARGE, a.k,
                   KMIN_LARGE);
  return kmin_large<T>(a, err);
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

// dst = src (double or float) with column c shifted by shift[c], then
// multiplied by scale[c] (each if given), in double, then rounded to the
// compute precision: a device matrix's centre moved to the common point of
// the call before scaling (reduce.h), so differences keep their digits.
template <typename T>
__global__ void prepare_operand(const void *src, int src_single, size_t rows, int cols,
                                const double *shift, const double *scale, T *dst)
{
  size_t count = rows * (size_t) cols;
  for (size_t q = (size_t) blockIdx.x * blockDim.x + threadIdx.x; q < count;
       q += (size_t) gridDim.x * blockDim.x) {
    double v = src_single ? (double) static_cast<const float *>(src)[q]
                          : static_cast<const double *>(src)[q];
    if (shift) v += shift[q / rows];
    if (scale) v *= scale[q / rows];
    dst[q] = (T) v;
  }
}

// A device-matrix operand in the compute precision, shifted and scaled by
// column (device pointers; either may be NULL).
template <typename T>
gk_status prepare(const gk_reduce_operand *op, const double *shift_dev, const double *scale_dev,
                  T *dst, gk_error *err)
{
  size_t count = op->rows * (size_t) op->cols;
  if (count == 0) return GK_OK;
  unsigned blocks = (unsigned) ((count + 255) / 256 < 4096 ? (count + 255) / 256 : 4096);
  prepare_operand<T><<<blocks, 256>>>(op->device, op->device_single, op->rows, op->cols,
                                      shift_dev, scale_dev, dst);
  return gk_cuda_check_launch("preparing the operands", err);
}

// The common point of a call in dimension d, a point of the data, that x and
// y are shifted to before they are scaled: y_1 for host y (as the CPU
// engine), else the centre of a device y (its first row when it is centred),
// else the same from x; 0 when no operand is far from the origin.
double common_point(const gk_reduce_operand *x, const gk_reduce_operand *y, int d)
{
  if (y->host && y->rows) return y->host[(size_t) d * y->rows];
  if (y->device_centre && y->device_centre[d] != 0.0) return y->device_centre[d];
  if (x->host && x->rows) return x->host[(size_t) d * x->rows];
  return x->device_centre ? x->device_centre[d] : 0.0;
}

// The shift a device operand's stored values need to be relative to the
// point origin[] (NULL: the origin), in double: its centre minus origin.
void device_shift(const gk_reduce_operand *op, const double *origin, double *shift)
{
  for (int d = 0; d < op->cols; d++)
    shift[d] = (op->device_centre ? op->device_centre[d] : 0.0) - (origin ? origin[d] : 0.0);
}

// Writes host points into the staging buffer in the compute precision, minus
// the point origin[] (when given, in double), scaled by column: the same
// arithmetic as prepare_operand, done on the host so that only T-sized data
// is uploaded and no conversion kernel is launched (small calls are
// latency-bound). False when a value does not fit T (finite doubles beyond
// float's range, relative to the range of the kernel): their differences
// would be Inf - Inf.
template <typename T>
bool pack_points(T *dst, const gk_reduce_operand *p, const double *origin, const double *scale)
{
  size_t rows = p->rows;
  bool fits = true;
  for (int d = 0; d < p->cols; d++) {
    const double *src = p->host + (size_t) d * rows;
    double o = origin ? origin[d] : 0.0, s = scale ? scale[d] : 1.0;
    T *out = dst + (size_t) d * rows;
    for (size_t i = 0; i < rows; i++) {
      out[i] = (T) ((src[i] - o) * s);
      fits &= isfinite(out[i]);
    }
  }
  return fits;
}

// The block-sparse work pieces of a call (reduce_ranges_pieces), on the host
// until they are packed into the upload, with the reduced ranges their lists
// index (`red`: the caller's, or for two-way pieces their own); list_max is
// the longest list in j, pairs the pairs they evaluate.
struct HostPieces {
  int *data = NULL;
  int count = 0;
  const int *red = NULL;
  int *clipped = NULL;
  size_t nred = 0, list_max = 0;
  double pairs = 0.0;
  // Two-way pieces (symmetric sums, reduce_kernels.cuh): each piece's own
  // list, clipped to j >= its first row; the pairs before it are those of
  // earlier pieces, which evaluate them for both.
  gk_status clip(gk_error *err)
  {
    size_t total = 0;
    for (int p = 0; p < count; p++) total += (size_t) (data[4 * p + 3] - data[4 * p + 2]);
    if (total > (size_t) INT_MAX)
      return gk_fail(err, GK_ERR_INPUT, "too many block-sparse ranges for a symmetric reduction");
    clipped = (int *) malloc((2 * total + 1) * sizeof(int));
    if (!clipped) return gk_fail(err, GK_ERR_NOMEM, "out of memory for the block-sparse work list");
    int at = 0;
    for (int p = 0; p < count; p++) {
      int *piece = data + 4 * p;
      const int first = at;
      for (int l = piece[2]; l < piece[3]; l++) {
        const int s = red[2 * l] > piece[0] ? red[2 * l] : piece[0], e = red[2 * l + 1];
        if (e <= s) continue;
        clipped[2 * at] = s;
        clipped[2 * at + 1] = e;
        at++;
      }
      piece[2] = first;
      piece[3] = at;
    }
    red = clipped;
    nred = (size_t) at;
    return GK_OK;
  }
  gk_status build(const gk_reduce_ranges *r, size_t m, int max_rows, bool two_way, gk_error *err)
  {
    if (reduce_ranges_pieces(r, m, max_rows, &data, &count, err)) return err->status;
    red = r->redranges_j;
    nred = r->count_i > 0 ? (size_t) r->slices_i[r->count_i - 1] : 0;
    if (two_way && clip(err)) return err->status;
    std::vector<std::pair<double, int>> work;   // (pairs, piece)
    std::vector<int> sorted;
    try {
      work.resize((size_t) count);
      sorted.resize((size_t) count * 4);
    } catch (...) {
      return gk_fail(err, GK_ERR_NOMEM, "out of memory for the block-sparse work list");
    }
    for (int p = 0; p < count; p++) {
      size_t len = 0;
      for (int l = data[4 * p + 2]; l < data[4 * p + 3]; l++) len += (size_t) (red[2 * l + 1] - red[2 * l]);
      if (len > list_max) list_max = len;
      work[p] = std::make_pair((double) len * (data[4 * p + 1] - data[4 * p]), p);
      pairs += work[p].first;
    }
    // Heaviest pieces first (blocks start in grid order): the last wave then
    // holds the light ones, instead of a long list starting last.
    std::stable_sort(work.begin(), work.end(),
                     [](const std::pair<double, int> &u, const std::pair<double, int> &v) {
                       return u.first > v.first;
                     });
    for (int p = 0; p < count; p++) memcpy(&sorted[4 * (size_t) p], data + 4 * work[p].second, 4 * sizeof(int));
    if (count) memcpy(data, sorted.data(), sorted.size() * sizeof(int));
    return GK_OK;
  }
  // Every row reduces over all of [0, n): the dense reduction (an all-true
  // mask over clusters that cover the points) takes the dense path.
  bool is_dense(const gk_reduce_ranges *r, size_t n) const
  {
    for (int p = 0; p < count; p++) {
      const int *piece = data + 4 * p;
      if (piece[3] - piece[2] != 1 || r->redranges_j[2 * piece[2]] != 0 ||
          (size_t) r->redranges_j[2 * piece[2] + 1] != n)
        return false;
    }
    return true;
  }
  size_t bytes() const { return 4 * (size_t) count * sizeof(int); }
  size_t redrange_bytes() const { return count ? 2 * nred * sizeof(int) : 0; }
  ~HostPieces()
  {
    free(data);
    free(clipped);
  }
};

// Fills `plan` with the pieces just cut (sorted, on the host) and the reduced
// ranges, uploaded once into the plan's own buffer.
gk_status keep_plan(gk_reduce_plan *plan, const HostPieces &pieces, bool two_way, size_t m,
                    size_t n, double kept_pairs, int piece_rows, gk_error *err)
{
  reduce_plan_free(plan);
  const size_t bytes = pieces.bytes() + pieces.redrange_bytes();
  if (pieces.count) {
    char *host = (char *) malloc(bytes);
    if (!host) return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the block-sparse plan");
    memcpy(host, pieces.data, pieces.bytes());
    memcpy(host + pieces.bytes(), pieces.red, pieces.redrange_bytes());
    gk_status st = gk_buffer_alloc(&plan->buf, bytes, "the block-sparse plan", err);
    if (st == GK_OK) st = gk_buffer_upload(&plan->buf, host, bytes, NULL, err);
    free(host);
    if (st) {
      reduce_plan_free(plan);
      return st;
    }
  }
  plan->made = 1;
  plan->m = m;
  plan->n = n;
  plan->kept_pairs = kept_pairs;
  plan->piece_rows = piece_rows;
  plan->npieces = pieces.count;
  plan->list_max = pieces.list_max;
  plan->symmetric = two_way;
  return GK_OK;
}

template <typename T>
gk_status reduce_cuda_typed(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                            const gk_reduce_operand *y, const gk_reduce_operand *b,
                            double *out, int *index, gk_error *err)
{
  const size_t m = x->rows, n = y->rows;
  const int dim = x->cols;
  const bool has_w = weighted(spec->reduction);
  const int e_total = has_w ? b->cols : 0;
  const int e_chunk = has_w ? (e_total < WEIGHT_CHUNK ? e_total : WEIGHT_CHUNK) : 0;
  const int ec_template = has_w ? (e_total == 1 ? 1 : WEIGHT_CHUNK) : 1;
  const bool gauss2 = spec->reduction == GK_REDUCE_SUM && spec->kernel.family == GK_KERNEL_GAUSSIAN;
  // Points pre-scaled so that the gaussian is 2^(-stat) (ValGauss2, ValGauss2Variance).
  const bool exp2_points = spec->kernel.family == GK_KERNEL_GAUSSIAN && has_w;
  // Symmetric sums evaluate each pair once for one weight column. With more,
  // every pair is evaluated as without the flag: the columns' sums would cost
  // a transpose-reduce per weight column, more than the kernel values saved.
  const bool two_way = spec->symmetric && e_total == 1;
  const int vcols = reduce_value_columns(spec->reduction, e_total, spec->k);
  const int icols = reduce_index_columns(spec->reduction, spec->k);
  const size_t vbytes = m * vcols * sizeof(double), ibytes = m * icols * sizeof(int);

  Args a;
  memset(&a, 0, sizeof a);
  a.m = m;
  a.n = n;
  a.dim = dim;
  a.k = spec->k;
  a.kernel = spec->kernel;
  a.inner = gk_kernel_uses_inner_product(&spec->kernel);
  // Values without their variance, which the results take once (out_scale):
  // the gaussian sums, knn's squared distances and the exponential family's
  // sums (ValExp, ValExpPoly).
  const bool exp_sum = exp_poly_of(spec->kernel, &a.poly1, &a.poly2) &&
                       spec->reduction == GK_REDUCE_SUM;
  a.out_scale = gauss2 || exp_sum || sqdist_values(spec) ? spec->kernel.variance : 1.0;
  a.root_scale = spec->root_scale;
  a.pieces = NULL;   // dense unless ranges are given
  a.stride = padded<T>(dim + ec_template);
  size_t tile = TILE_BYTES / ((size_t) a.stride * sizeof(T) + (spec->ranges ? sizeof(int) : 0) +
                              (two_way ? two_way_entry_bytes(sizeof(T)) : 0));
  if (tile == 0)
    return gk_fail(err, GK_ERR_INPUT, "points of dimension %d with %d weight columns do not fit "
                   "the GPU engine's shared-memory tile; use backend = \"cpu\"", dim, e_chunk);
  a.tile = (int) (tile < (size_t) BLOCK ? tile : BLOCK);
  // A plan made for these sizes (and two-way or not) stands for checked
  // ranges and their kept pairs.
  gk_reduce_plan *plan = spec->ranges ? spec->plan : NULL;
  const bool planned = plan && plan->made && plan->m == m && plan->n == n && (plan->symmetric != 0) == two_way;
  if (spec->ranges && !planned && reduce_ranges_check(spec->ranges, m, n, err)) return err->status;
  if (spec->symmetric && !planned && reduce_check_symmetric(spec, x, y, err)) return err->status;
  if (m == 0) return GK_OK;
  // Block-sparse: the rows per thread follow the kept pairs per row.
  a.kept_pairs = planned ? plan->kept_pairs
                         : spec->ranges ? reduce_ranges_pairs(spec->ranges) : (double) m * n;
  const size_t n_work = (size_t) ceil(a.kept_pairs / (double) m);
  const int rows_per_thread = gauss2 && !two_way ? fast_rows(m, n_work, e_total) : 1;
  HostPieces pieces;
  const int piece_rows = threads_per_block<true>() * rows_per_thread;
  // The plan's pieces serve when they were cut for these rows per thread;
  // otherwise they are cut here, and kept in the plan for the next call.
  const bool plan_pieces = planned && plan->piece_rows == piece_rows;
  if (spec->ranges && !plan_pieces) {
    if (pieces.build(spec->ranges, m, piece_rows, two_way, err)) return err->status;
    if (two_way) a.kept_pairs = pieces.pairs;   // the pairs evaluated
    else if (pieces.is_dense(spec->ranges, n)) pieces.count = 0;
    if (plan && keep_plan(plan, pieces, two_way, m, n, a.kept_pairs, piece_rows, err))
      return err->status;
  }
  if (plan) {   // the pieces come from the plan, already on the GPU
    pieces.count = 0;
    if (plan->npieces) {
      a.pieces = (const int *) plan->buf.ptr;
      a.redranges = a.pieces + 4 * (size_t) plan->npieces;
      a.npieces = plan->npieces;
      a.piece_rows = plan->piece_rows;
      a.list_max = plan->list_max;
    }
  }

  // Host inputs packed in one upload, already in the compute precision: the
  // column scales and the shifts of device operands (and the common point,
  // only read on the host), then x, y, b.
  const bool y_is_x = reduce_same_operand(x, y);
  const bool b_direct = has_w && b->device && !b->device_centre &&
                        (b->device_single != 0) == (sizeof(T) == 4);
  Layout up;
  size_t at_scale = up.take(dim * sizeof(double));
  size_t at_origin = up.take(dim * sizeof(double));
  size_t at_xshift = up.take(!x->host ? dim * sizeof(double) : 0);
  size_t at_yshift = up.take(!y->host && !y_is_x ? dim * sizeof(double) : 0);
  size_t at_bshift = up.take(has_w && b->device_centre ? e_total * sizeof(double) : 0);
  size_t at_xhost = up.take(x->host ? m * dim * sizeof(T) : 0);
  size_t at_yhost = up.take(y->host && !y_is_x ? n * dim * sizeof(T) : 0);
  size_t at_bhost = up.take(has_w && b->host ? n * e_total * sizeof(T) : 0);
  size_t at_pieces = up.take(pieces.bytes());
  size_t at_redranges = up.take(pieces.redrange_bytes());
  const size_t up_bytes = up.used;
  // Device-only pieces: operands converted from device matrices, and the
  // results (downloaded together).
  Layout lay = up;
  size_t at_xp = x->host ? at_xhost : lay.take(m * dim * sizeof(T));
  size_t at_yp = y_is_x ? at_xp : y->host ? at_yhost : lay.take(n * dim * sizeof(T));
  size_t at_bp = has_w && !b->host && !b_direct ? lay.take(n * e_total * sizeof(T)) : at_bhost;
  size_t at_transposed = lay.take(two_way ? m * sizeof(double) : 0);
  size_t at_out = lay.take(vbytes);
  size_t at_idx = at_out + vbytes;   // right after the values: one download
  lay.used = at_idx + ibytes;
  void *workspace = NULL, *staging = NULL;
  if (gk_device_scratch(GK_SCRATCH_WORKSPACE, lay.used, "the reduction workspace", &workspace,
                        err) ||
      gk_pinned_scratch(up_bytes + vbytes + ibytes, "the reduction's staging buffer", &staging,
                        err))
    return err->status;
  char *base = (char *) workspace, *host = (char *) staging;

  // Coordinates are divided by the range (and, for the fast gaussian, scaled so
  // that exp(-d^2/2) becomes 2^(-d'^2 / EXP2_UNIT): times a power of two more
  // in float64, exactly).
  double *scale_host = (double *) (host + at_scale);
  const double exp2_scale = sqrt(0.5 / log(2.0)) * sqrt((double) EXP2_UNIT<T>);
  for (int d = 0; d < dim; d++) scale_host[d] = (exp2_points ? exp2_scale : 1.0) / spec->range[d];
  // Coordinates far from the origin (relative to the range) lose the digits
  // that distances need when they are scaled first: points are shifted to a
  // common point of the data (subtracted in double, then scaled) when the
  // kernel depends on differences only, in both precisions (as the CPU engine
  // does); device matrices, stored minus their own centre, are shifted by the
  // difference of the two. Inner-product kernels see the points themselves.
  double *origin = a.inner ? NULL : (double *) (host + at_origin);
  for (int d = 0; origin && d < dim; d++) origin[d] = common_point(x, y, d);
  if ((x->host && !pack_points((T *) (host + at_xhost), x, origin, scale_host)) ||
      (y->host && !y_is_x && !pack_points((T *) (host + at_yhost), y, origin, scale_host)))
    return gk_fail(err, GK_ERR_INPUT, "the points lie too far apart for single precision "
                   "(relative to the kernel's range, differences beyond 3.4e38): use "
                   "precision = \"double\"");
  if (has_w && b->host && !pack_points((T *) (host + at_bhost), b, NULL, NULL))
    return gk_fail(err, GK_ERR_INPUT, "the weights `b` hold values beyond single precision's "
                   "range (3.4e38): use precision = \"double\"");
  if (!x->host) device_shift(x, origin, (double *) (host + at_xshift));
  if (!y->host && !y_is_x) device_shift(y, origin, (double *) (host + at_yshift));
  if (has_w && b->device_centre) device_shift(b, NULL, (double *) (host + at_bshift));
  if (pieces.count) {
    memcpy(host + at_pieces, pieces.data, pieces.bytes());
    memcpy(host + at_redranges, pieces.red, pieces.redrange_bytes());
    a.pieces = (const int *) (base + at_pieces);
    a.redranges = (const int *) (base + at_redranges);
    a.npieces = pieces.count;
    a.piece_rows = piece_rows;
    a.list_max = pieces.list_max;
  }
  if (gk_cuda_status(cudaMemcpyAsync(base, host, up_bytes, cudaMemcpyHostToDevice, 0),
                     "copy to the GPU", err))
    return err->status;

  const double *scale = (const double *) (base + at_scale);
  T *xp = (T *) (base + at_xp);
  T *yp = (T *) (base + at_yp);
  const double *xshift = (const double *) (base + at_xshift);
  const double *yshift = (const double *) (base + at_yshift);
  const double *bshift = has_w && b->device_centre ? (const double *) (base + at_bshift) : NULL;
  if (!x->host && prepare<T>(x, xshift, scale, xp, err)) return err->status;
  if (!y_is_x && !y->host && prepare<T>(y, yshift, scale, yp, err)) return err->status;
  const T *bp = NULL;
  if (b_direct) bp = (const T *) b->device;
  else if (has_w) {
    if (!b->host && prepare<T>(b, bshift, NULL, (T *) (base + at_bp), err)) return err->status;
    bp = (const T *) (base + at_bp);
  }
  a.x = xp;
  a.y = yp;
  a.index = icols ? (int *) (base + at_idx) : NULL;
  // Two-way launches (always block-sparse: an all-true mask is not made dense).
  a.transposed = two_way ? (double *) (base + at_transposed) : NULL;

  // Weight columns in chunks of WEIGHT_CHUNK; unweighted reductions run once.
  for (int c0 = 0; c0 < (has_w ? e_total : 1); c0 += WEIGHT_CHUNK) {
    a.e = has_w ? (e_total - c0 < WEIGHT_CHUNK ? e_total - c0 : WEIGHT_CHUNK) : 0;
    a.b = has_w ? bp + (size_t) c0 * n : NULL;
    double *values = spec->device_out ? spec->device_out : (double *) (base + at_out);
    a.out = vcols ? values + (size_t) c0 * m : NULL;
    if (launch_reduction<T>(spec, a, rows_per_thread, two_way, err)) return err->status;
  }
  // Resident results: nothing to download, but the staging buffer and the
  // workspace are reused by the next call, so this one finishes first.
  if (spec->device_out) return gk_stream_sync(NULL, "the reduction", err);
  if (gk_cuda_status(cudaMemcpyAsync(host + up_bytes, base + at_out, vbytes + ibytes,
                                     cudaMemcpyDeviceToHost, 0), "copy from the GPU", err))
    return err->status;
  gk_host_prefault(out, vbytes);
  gk_host_prefault(index, ibytes);
  if (gk_stream_sync(NULL, "the reduction", err)) return err->status;
  gk_host_copy(out, host + up_bytes, vbytes);
  gk_host_copy(index, host + up_bytes + vbytes, ibytes);
  return GK_OK;
}

}  // namespace

extern "C" void reduce_plan_free(gk_reduce_plan *plan)
{
  gk_buffer_free(&plan->buf);
  const gk_reduce_plan empty = GK_REDUCE_PLAN_EMPTY;
  *plan = empty;
}

// The GPU of the device operands (which must share one), else the active one.
static gk_status reduce_device(const gk_reduce_operand *const ops[3], int *device, gk_error *err)
{
  *device = GK_DEVICE_ACTIVE;
  for (int q = 0; q < 3; q++) {
    if (!ops[q] || !ops[q]->device) continue;
    if (*device >= 0 && ops[q]->gpu != *device)
      return gk_fail(err, GK_ERR_INPUT, "the device matrices of this reduction are on different "
                     "GPUs (%d and %d): make them on one GPU", *device + 1, ops[q]->gpu + 1);
    *device = ops[q]->gpu;
  }
  return GK_OK;
}

extern "C" gk_status reduce_cuda(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                                 const gk_reduce_operand *y, const gk_reduce_operand *b,
                                 double *out, int *index, gk_error *err)
{
  const gk_reduce_operand *const ops[3] = {x, y, b};
  int device = GK_DEVICE_ACTIVE;
  if (reduce_device(ops, &device, err) || gk_device_enter(device, err)) return err->status;
  if (spec->single) return reduce_cuda_typed<float>(spec, x, y, b, out, index, err);
  return reduce_cuda_typed<double>(spec, x, y, b, out, index, err);
}

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
