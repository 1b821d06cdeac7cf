// The GPU engine of the kernel reductions (semantics in reduce.h): plans the
// 1D or 2D scheme, keeps one workspace between calls, prepares the operands on
// the device and launches the kernels of reduce_kernels.cuh. One synchronize
// per call, after the results are downloaded.
#include <stdlib.h>
#include <string.h>
#include "reduce/reduce.h"
#include "reduce/reduce_kernels.cuh"
#include "device/gk_cuda.h"

using namespace gkreduce;

namespace {

constexpr int WEIGHT_CHUNK = 8;      // columns of b per launch (more: several launches)
constexpr int KMIN_SMALL = 16;       // k-list sizes compiled for KMIN
constexpr int KMIN_LARGE = 64;
constexpr size_t TILE_BYTES = 48 * 1024;
constexpr size_t MIN_CHUNK_AUTO = 1024;   // j per 2D chunk when chosen automatically
constexpr int BLOCKS_PER_SM = 8;          // 2D target: this many blocks per multiprocessor

// ---- the workspace kept between calls (small calls then allocate nothing) ----
gk_device_buffer workspace = GK_DEVICE_BUFFER_EMPTY;
int workspace_device = -1;

gk_status workspace_reserve(size_t bytes, gk_error *err)
{
  int device = gk_device_current();
  if (workspace.ptr && workspace.bytes >= bytes && workspace_device == device) return GK_OK;
  reduce_cuda_release();
  if (gk_cuda_status(cudaSetDevice(device), "cudaSetDevice", err)) return err->status;
  // Grow with headroom so that slowly growing sizes do not reallocate every call.
  if (gk_buffer_alloc(&workspace, bytes + bytes / 4, "the reduction workspace", err))
    return err->status;
  workspace_device = device;
  return GK_OK;
}

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

int sm_count_of_current_device()
{
  static int cached[64] = {0};
  int device = gk_device_current();
  if (device < 0 || device >= 64) return 132;
  if (!cached[device]) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      sms = 132;
    }
    cached[device] = sms;
  }
  return cached[device];
}

// Rows per thread of the gaussian-sum fast path (GK_REDUCE_ROWS=1 or 2 for tuning).
int fast_rows()
{
  const char *env = getenv("GK_REDUCE_ROWS");
  return env && env[0] == '1' ? 1 : 2;
}

bool weighted(gk_reduction r)
{
  return r == GK_REDUCE_SUM || r == GK_REDUCE_LOGSUMEXP || r == GK_REDUCE_SOFTMAX_SUM;
}

// Partial-state slots (doubles, ints) per row and chunk, for e weight columns.
void partial_slots(gk_reduction r, int e, int k, int *slots, int *index_slots)
{
  switch (r) {
  case GK_REDUCE_SUM: *slots = e; *index_slots = 0; break;
  case GK_REDUCE_KMIN: *slots = k; *index_slots = k; break;
  case GK_REDUCE_LOGSUMEXP:
  case GK_REDUCE_SOFTMAX_SUM: *slots = e + 2; *index_slots = 0; break;
  default: *slots = 1; *index_slots = 1; break;
  }
}

// ---- launching one (op, value, dimension) combination ----
template <typename T, class Op, class Val, int DS, int ROWS>
gk_status launch(const Args &a, gk_error *err)
{
  size_t smem = (size_t) a.tile * a.stride * sizeof(T);
  dim3 grid((unsigned) ((a.m + BLOCK * ROWS - 1) / (BLOCK * ROWS)), (unsigned) a.nchunks);
  reduce_tiles<T, Op, Val, DS, ROWS><<<grid, BLOCK, smem>>>(a);
  if (gk_cuda_check_launch("the reduction kernel", err)) return err->status;
  if (a.nchunks > 1) {
    combine_chunks<Op><<<(unsigned) ((a.m + 255) / 256), 256>>>(a);
    if (gk_cuda_check_launch("the 2D combining kernel", err)) return err->status;
  }
  return GK_OK;
}

// Registers hold x_i for the small dimensions; any other reads it from memory.
template <typename T, class Op, class Val, int ROWS, bool ALL_DIMS>
gk_status launch_dim(const Args &a, gk_error *err)
{
  switch (a.dim) {
  case 1: if constexpr (ALL_DIMS) return launch<T, Op, Val, 1, ROWS>(a, err); break;
  case 2: if constexpr (ALL_DIMS) return launch<T, Op, Val, 2, ROWS>(a, err); break;
  case 3: return launch<T, Op, Val, 3, ROWS>(a, err);
  default: break;
  }
  return launch<T, Op, Val, 0, ROWS>(a, err);
}

template <typename T, int EC>
gk_status launch_weighted(const gk_reduce_spec *spec, const Args &a, bool gauss2, gk_error *err)
{
  switch (spec->reduction) {
  case GK_REDUCE_SUM:
    if (!gauss2) return launch_dim<T, SumOp<T, EC>, ValKernel, 1, true>(a, err);
    if (fast_rows() == 2) return launch_dim<T, SumOp<T, EC>, ValGauss2, 2, true>(a, err);
    return launch_dim<T, SumOp<T, EC>, ValGauss2, 1, true>(a, err);
  case GK_REDUCE_LOGSUMEXP: return launch_dim<T, ExpOp<T, EC, false>, ValKernel, 1, false>(a, err);
  default: return launch_dim<T, ExpOp<T, EC, true>, ValKernel, 1, false>(a, err);
  }
}

template <typename T>
gk_status launch_reduction(const gk_reduce_spec *spec, const Args &a, bool gauss2, gk_error *err)
{
  switch (spec->reduction) {
  case GK_REDUCE_SUM:
  case GK_REDUCE_LOGSUMEXP:
  case GK_REDUCE_SOFTMAX_SUM:
    return a.e == 1 ? launch_weighted<T, 1>(spec, a, gauss2, err)
                    : launch_weighted<T, WEIGHT_CHUNK>(spec, a, gauss2, err);
  case GK_REDUCE_MIN:
  case GK_REDUCE_ARGMIN: return launch_dim<T, ExtremeOp<T, false>, ValKernel, 1, false>(a, err);
  case GK_REDUCE_MAX:
  case GK_REDUCE_ARGMAX: return launch_dim<T, ExtremeOp<T, true>, ValKernel, 1, false>(a, err);
  case GK_REDUCE_KMIN:
    if (a.k <= KMIN_SMALL) return launch_dim<T, KMinOp<T, KMIN_SMALL>, ValKernel, 1, true>(a, err);
    return launch_dim<T, KMinOp<T, KMIN_LARGE>, ValKernel, 1, true>(a, err);
  }
  return gk_fail(err, GK_ERR_INTERNAL, "unknown reduction %d", (int) spec->reduction);
}

// The 2D split of [0, n): how many chunks, and j per chunk (a multiple of the tile).
void plan_chunks(const gk_reduce_spec *spec, size_t m, size_t n, int rows_per_thread, Args *a)
{
  a->nchunks = 1;
  a->j_chunk = (int) (n > 0 ? n : 1);
  if (n == 0 || spec->method == GK_REDUCE_1D) return;
  size_t blocks_1d = (m + (size_t) BLOCK * rows_per_thread - 1) / ((size_t) BLOCK * rows_per_thread);
  size_t target = (size_t) BLOCKS_PER_SM * sm_count_of_current_device();
  size_t want, min_chunk;
  if (spec->method == GK_REDUCE_2D) {
    want = (target + blocks_1d - 1) / blocks_1d;
    if (want < 2) want = 2;
    min_chunk = (size_t) a->tile;
  } else {
    if (blocks_1d >= target || n < 2 * MIN_CHUNK_AUTO) return;
    want = (target + blocks_1d - 1) / blocks_1d;
    min_chunk = MIN_CHUNK_AUTO;
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

// Brings an operand to the device in the compute precision, scaled by column.
template <typename T>
gk_status stage_operand(const gk_reduce_operand *op, const double *scale_dev, T *dst,
                        double *raw, gk_error *err)
{
  size_t count = op->rows * (size_t) op->cols;
  if (count == 0) return GK_OK;
  const void *src = op->device;
  int src_single = op->device_single;
  if (op->host) {
    // Double results can be scaled in place; float ones go through `raw`.
    double *landing = sizeof(T) == sizeof(double) ? (double *) dst : raw;
    if (gk_cuda_status(cudaMemcpyAsync(landing, op->host, count * sizeof(double),
                                       cudaMemcpyHostToDevice, 0), "copy to the GPU", err))
      return err->status;
    if (!scale_dev && (void *) landing == (void *) dst) return GK_OK;
    src = landing;
    src_single = 0;
  }
  unsigned blocks = (unsigned) ((count + 255) / 256 < 4096 ? (count + 255) / 256 : 4096);
  prepare_operand<T><<<blocks, 256>>>(src, src_single, op->rows, op->cols, scale_dev, dst);
  return gk_cuda_check_launch("preparing the operands", err);
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
  a.out_scale = gauss2 ? spec->kernel.variance : 1.0;
  a.stride = padded<T>(dim + ec_template);
  size_t tile = TILE_BYTES / ((size_t) a.stride * sizeof(T));
  if (tile == 0)
    return gk_fail(err, GK_ERR_INPUT, "points of dimension %d with %d weight columns do not fit "
                   "the GPU engine's shared-memory tile; use backend = \"cpu\"", dim, e_chunk);
  a.tile = (int) (tile < (size_t) BLOCK ? tile : BLOCK);
  if (spec->reduction == GK_REDUCE_KMIN && spec->k > KMIN_LARGE)
    return gk_fail(err, GK_ERR_INPUT, "the GPU engine finds at most %d smallest values (k = %d); "
                   "use backend = \"cpu\" for larger k", KMIN_LARGE, spec->k);
  if (m == 0) return GK_OK;
  int rows_per_thread = gauss2 && fast_rows() == 2 ? 2 : 1;
  plan_chunks(spec, m, n, rows_per_thread, &a);
  int slots = 0, islots = 0;
  partial_slots(spec->reduction, e_chunk, spec->k, &slots, &islots);

  // Workspace: scale, staged inputs, prepared operands, 2D partials, results.
  bool b_direct = has_w && b->device && (b->device_single != 0) == (sizeof(T) == 4);
  bool stage_raw = sizeof(T) == sizeof(float);
  Layout lay;
  size_t at_scale = lay.take(dim * sizeof(double));
  size_t at_xp = lay.take(m * dim * sizeof(T));
  size_t at_yp = lay.take(n * dim * sizeof(T));
  size_t at_bp = lay.take(has_w && !b_direct ? n * e_total * sizeof(T) : 0);
  size_t raw_count = 0;
  if (stage_raw) {
    if (x->host) raw_count = m * dim;
    if (y->host && n * dim > raw_count) raw_count = n * dim;
    if (has_w && b->host && n * e_total > raw_count) raw_count = n * e_total;
  }
  size_t at_raw = lay.take(raw_count * sizeof(double));
  size_t at_part = lay.take(a.nchunks > 1 ? (size_t) a.nchunks * slots * m * sizeof(double) : 0);
  size_t at_ipart = lay.take(a.nchunks > 1 ? (size_t) a.nchunks * islots * m * sizeof(int) : 0);
  size_t at_out = lay.take(vbytes);
  size_t at_idx = lay.take(ibytes);
  if (workspace_reserve(lay.used, err)) return err->status;
  char *base = (char *) workspace.ptr;
  double *scale = (double *) (base + at_scale);
  double *raw = (double *) (base + at_raw);

  // Coordinates are divided by the range (and, for the fast gaussian, scaled so
  // that exp(-d^2/2) becomes 2^(-d'^2)).
  double *scale_host = (double *) malloc(dim * sizeof(double) + 1);
  if (!scale_host) return gk_fail(err, GK_ERR_NOMEM, "out of host memory");
  for (int d = 0; d < dim; d++)
    scale_host[d] = (gauss2 ? sqrt(0.5 / log(2.0)) : 1.0) / spec->range[d];
  gk_status status = gk_cuda_status(cudaMemcpyAsync(scale, scale_host, dim * sizeof(double),
                                                    cudaMemcpyHostToDevice, 0),
                                    "copy to the GPU", err);
  // Pageable copies are staged by the driver before cudaMemcpyAsync returns.
  free(scale_host);
  if (status) return status;
  if (stage_operand<T>(x, scale, (T *) (base + at_xp), raw, err)) return err->status;
  if (stage_operand<T>(y, scale, (T *) (base + at_yp), raw, err)) return err->status;
  const T *bp = NULL;
  if (has_w) {
    if (b_direct) bp = (const T *) b->device;
    else {
      if (stage_operand<T>(b, NULL, (T *) (base + at_bp), raw, err)) return err->status;
      bp = (const T *) (base + at_bp);
    }
  }
  a.x = base + at_xp;
  a.y = base + at_yp;
  a.partial = (double *) (base + at_part);
  a.partial_index = (int *) (base + at_ipart);
  a.index = icols ? (int *) (base + at_idx) : NULL;

  // Weight columns in chunks of WEIGHT_CHUNK; unweighted reductions run once.
  for (int c0 = 0; c0 < (has_w ? e_total : 1); c0 += WEIGHT_CHUNK) {
    a.e = has_w ? (e_total - c0 < WEIGHT_CHUNK ? e_total - c0 : WEIGHT_CHUNK) : 0;
    a.b = has_w ? bp + (size_t) c0 * n : NULL;
    a.out = vcols ? (double *) (base + at_out) + (size_t) c0 * m : NULL;
    if (launch_reduction<T>(spec, a, gauss2, err)) return err->status;
  }
  if (vbytes && gk_cuda_status(cudaMemcpyAsync(out, base + at_out, vbytes, cudaMemcpyDeviceToHost, 0),
                               "copy from the GPU", err))
    return err->status;
  if (ibytes && gk_cuda_status(cudaMemcpyAsync(index, base + at_idx, ibytes, cudaMemcpyDeviceToHost, 0),
                               "copy from the GPU", err))
    return err->status;
  return gk_stream_sync(NULL, "the reduction", err);
}

}  // namespace

extern "C" gk_status reduce_cuda(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                                 const gk_reduce_operand *y, const gk_reduce_operand *b,
                                 double *out, int *index, gk_error *err)
{
  if (gk_cuda_status(cudaSetDevice(gk_device_current()), "cudaSetDevice", err)) return err->status;
  if (spec->single) return reduce_cuda_typed<float>(spec, x, y, b, out, index, err);
  return reduce_cuda_typed<double>(spec, x, y, b, out, index, err);
}

extern "C" void reduce_cuda_release(void)
{
  if (!workspace.ptr) return;
  cudaSetDevice(workspace_device);
  gk_buffer_free(&workspace);
  workspace_device = -1;
  cudaSetDevice(gk_device_current());
}
