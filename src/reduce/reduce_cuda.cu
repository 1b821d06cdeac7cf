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

// ---- the workspace kept between calls (small calls then allocate nothing) ----
gk_device_buffer workspace = GK_DEVICE_BUFFER_EMPTY;
int workspace_device = -1;

// The 2D scheme's partial results, sized per launch once the split is known.
gk_device_buffer partials = GK_DEVICE_BUFFER_EMPTY;

void workspace_free()
{
  if (!workspace.ptr && !partials.ptr) return;
  if (workspace_device >= 0) cudaSetDevice(workspace_device);
  gk_buffer_free(&workspace);
  gk_buffer_free(&partials);
  workspace_device = -1;
  cudaSetDevice(gk_device_current());
}

gk_status workspace_reserve(size_t bytes, gk_error *err)
{
  int device = gk_device_current();
  if (workspace.ptr && workspace.bytes >= bytes && workspace_device == device) return GK_OK;
  workspace_free();
  if (gk_cuda_status(cudaSetDevice(device), "cudaSetDevice", err)) return err->status;
  // Grow with headroom so that slowly growing sizes do not reallocate every call.
  if (gk_buffer_alloc(&workspace, bytes + bytes / 4, "the reduction workspace", err))
    return err->status;
  workspace_device = device;
  return GK_OK;
}

gk_status partials_reserve(size_t bytes, gk_error *err)
{
  if (partials.ptr && partials.bytes >= bytes && workspace_device == gk_device_current())
    return GK_OK;
  gk_buffer_free(&partials);
  return gk_buffer_alloc(&partials, bytes + bytes / 4, "the 2D scheme's partial results", err);
}

// Page-locked host staging, also kept: inputs are packed into it and go up in
// one copy, results come down into it (pageable copies cost far more per call).
gk_pinned_buffer staging = {NULL, 0};

gk_status staging_reserve(size_t bytes, gk_error *err)
{
  if (staging.ptr && staging.bytes >= bytes) return GK_OK;
  gk_pinned_free(&staging);
  return gk_pinned_alloc(&staging, bytes + bytes / 4, "the reduction's staging buffer", err);
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

// Rows per thread of the gaussian-sum fast path: more rows share each shared-
// memory load of y_j. GK_REDUCE_ROWS=1, 2 or 4 overrides it (for tuning); 4
// is compiled for one weight column only.
int fast_rows(int e)
{
  const char *env = getenv("GK_REDUCE_ROWS");
  int rows = env ? atoi(env) : 2;
  if (rows == 4 && e != 1) rows = 2;
  return rows == 1 || rows == 4 ? rows : 2;
}

// How F is evaluated: any kernel, or the gaussian sum's fast paths.
enum ValuePath { VALUE_KERNEL, VALUE_GAUSS2, VALUE_GAUSS2_EXPANDED };

// Largest |u|^2 (u: centred points in exp2 units) for the expanded form: its
// rounding error, about 2^-24 x 4 max|u|^2, then stays near 1e-5 relative.
constexpr double EXPANDED_MAX_NORM2 = 64.0;
constexpr double EXPANDED_MIN_PAIRS = 1e9;   // below this, the host pass is not worth it

bool weighted(gk_reduction r)
{
  return r == GK_REDUCE_SUM || r == GK_REDUCE_LOGSUMEXP || r == GK_REDUCE_SOFTMAX_SUM;
}

void plan_chunks(const gk_reduce_spec *spec, size_t m, size_t n, int rows_per_thread,
                 int blocks_per_sm, Args *a);

// ---- launching one (op, value, dimension) combination ----
template <typename T, class Op, class Val, int DS, int ROWS>
gk_status launch(const gk_reduce_spec *spec, Args a, gk_error *err)
{
  auto kernel = reduce_tiles<T, Op, Val, DS, ROWS>;
  size_t smem = (size_t) a.tile * a.stride * sizeof(T);
  // Blocks that fit on a multiprocessor, for the 2D rule (asked once per kernel).
  static int resident = 0;
  if (!resident && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, BLOCK, smem) != cudaSuccess) {
    cudaGetLastError();
    resident = 4;
  }
  plan_chunks(spec, a.m, a.n, ROWS, resident > 0 ? resident : 1, &a);
  if (a.nchunks > 1) {
    size_t values = (size_t) a.nchunks * Op::slots(a.e, a.k) * a.m * sizeof(double);
    size_t indices = (size_t) a.nchunks * Op::index_slots(a.k) * a.m * sizeof(int);
    if (partials_reserve(values + indices, err)) return err->status;
    a.partial = (double *) partials.ptr;
    a.partial_index = (int *) ((char *) partials.ptr + values);
  }
  dim3 grid((unsigned) ((a.m + BLOCK * ROWS - 1) / (BLOCK * ROWS)), (unsigned) a.nchunks);
  kernel<<<grid, BLOCK, smem>>>(a);
  if (gk_cuda_check_launch("the reduction kernel", err)) return err->status;
  if (a.nchunks > 1) {
    combine_chunks<Op><<<(unsigned) ((a.m + 255) / 256), 256>>>(a);
    if (gk_cuda_check_launch("the 2D combining kernel", err)) return err->status;
  }
  return GK_OK;
}

// Registers hold x_i for the small dimensions; any other reads it from memory.
template <typename T, class Op, class Val, int ROWS, bool ALL_DIMS>
gk_status launch_dim(const gk_reduce_spec *spec, const Args &a, gk_error *err)
{
  switch (a.dim) {
  case 1: if constexpr (ALL_DIMS) return launch<T, Op, Val, 1, ROWS>(spec, a, err); break;
  case 2: if constexpr (ALL_DIMS) return launch<T, Op, Val, 2, ROWS>(spec, a, err); break;
  case 3: return launch<T, Op, Val, 3, ROWS>(spec, a, err);
  default: break;
  }
  return launch<T, Op, Val, 0, ROWS>(spec, a, err);
}

template <typename T, int EC>
gk_status launch_weighted(const gk_reduce_spec *spec, const Args &a, ValuePath path, int rows,
                          gk_error *err)
{
  switch (spec->reduction) {
  case GK_REDUCE_SUM:
    if (path == VALUE_KERNEL) return launch_dim<T, SumOp<T, EC>, ValKernel, 1, true>(spec, a, err);
    if constexpr (EC == 1 && sizeof(T) == sizeof(float)) {
      if (path == VALUE_GAUSS2_EXPANDED) {
        if (rows == 4) return launch_dim<T, SumOp<T, EC>, ValGauss2Expanded, 4, true>(spec, a, err);
        if (rows == 2) return launch_dim<T, SumOp<T, EC>, ValGauss2Expanded, 2, true>(spec, a, err);
        return launch_dim<T, SumOp<T, EC>, ValGauss2Expanded, 1, true>(spec, a, err);
      }
    }
    if constexpr (EC == 1)
      if (rows == 4) return launch_dim<T, SumOp<T, EC>, ValGauss2, 4, true>(spec, a, err);
    if (rows == 2) return launch_dim<T, SumOp<T, EC>, ValGauss2, 2, true>(spec, a, err);
    return launch_dim<T, SumOp<T, EC>, ValGauss2, 1, true>(spec, a, err);
  case GK_REDUCE_LOGSUMEXP: return launch_dim<T, ExpOp<T, EC, false>, ValKernel, 1, false>(spec, a, err);
  default: return launch_dim<T, ExpOp<T, EC, true>, ValKernel, 1, false>(spec, a, err);
  }
}

template <typename T>
gk_status launch_reduction(const gk_reduce_spec *spec, const Args &a, ValuePath path, int rows,
                           gk_error *err)
{
  switch (spec->reduction) {
  case GK_REDUCE_SUM:
  case GK_REDUCE_LOGSUMEXP:
  case GK_REDUCE_SOFTMAX_SUM:
    return a.e == 1 ? launch_weighted<T, 1>(spec, a, path, rows, err)
                    : launch_weighted<T, WEIGHT_CHUNK>(spec, a, path, rows, err);
  case GK_REDUCE_MIN:
  case GK_REDUCE_ARGMIN: return launch_dim<T, ExtremeOp<T, false>, ValKernel, 1, false>(spec, a, err);
  case GK_REDUCE_MAX:
  case GK_REDUCE_ARGMAX: return launch_dim<T, ExtremeOp<T, true>, ValKernel, 1, false>(spec, a, err);
  case GK_REDUCE_KMIN:
    if (a.k <= KMIN_SMALL) return launch_dim<T, KMinOp<T, KMIN_SMALL>, ValKernel, 1, true>(spec, a, err);
    return launch_dim<T, KMinOp<T, KMIN_LARGE>, ValKernel, 1, true>(spec, a, err);
  }
  return gk_fail(err, GK_ERR_INTERNAL, "unknown reduction %d", (int) spec->reduction);
}

// Fraction of the last wave of blocks that is busy, averaged over all waves.
double wave_efficiency(size_t blocks, size_t wave)
{
  size_t waves = (blocks + wave - 1) / wave;
  return (double) blocks / (double) (waves * wave);
}

// The 2D split of [0, n): how many chunks, and j per chunk (a multiple of the
// tile). The automatic rule (documented in ?kernel_reduce):
//  - fewer 1D blocks than fit on the GPU at once (one wave), and n >= 2 x MIN_CHUNK_AUTO:
//    split j so that about one wave of blocks runs, chunks >= MIN_CHUNK_AUTO;
//  - otherwise, up to 8 chunks of >= 4 x MIN_CHUNK_AUTO when that fills the last
//    wave of blocks noticeably better (at least 2%).
void plan_chunks(const gk_reduce_spec *spec, size_t m, size_t n, int rows_per_thread,
                 int blocks_per_sm, Args *a)
{
  a->nchunks = 1;
  a->j_chunk = (int) (n > 0 ? n : 1);
  if (n == 0 || spec->method == GK_REDUCE_1D) return;
  size_t blocks_1d = (m + (size_t) BLOCK * rows_per_thread - 1) / ((size_t) BLOCK * rows_per_thread);
  size_t target = (size_t) blocks_per_sm * sm_count_of_current_device();
  size_t want, min_chunk;
  if (spec->method == GK_REDUCE_2D) {
    want = (target + blocks_1d - 1) / blocks_1d;
    if (want < 2) want = 2;
    min_chunk = (size_t) a->tile;
  } else if (blocks_1d < target) {
    if (n < 2 * MIN_CHUNK_AUTO) return;
    want = (target + blocks_1d - 1) / blocks_1d;
    min_chunk = MIN_CHUNK_AUTO;
  } else {
    min_chunk = 4 * MIN_CHUNK_AUTO;
    want = 1;
    double best = wave_efficiency(blocks_1d, target);
    for (size_t c = 2; c <= 8 && n / c >= min_chunk; c++) {
      double eff = wave_efficiency(blocks_1d * c, target);
      if (eff > best + 0.02) {
        best = eff;
        want = c;
      }
    }
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

// An operand in the compute precision, scaled by column: from its raw doubles
// already uploaded (`raw`), or from a device matrix.
template <typename T>
gk_status prepare(const gk_reduce_operand *op, const double *raw, const double *center_dev,
                  const double *scale_dev, T *dst, gk_error *err)
{
  size_t count = op->rows * (size_t) op->cols;
  if (count == 0) return GK_OK;
  const void *src = op->host ? (const void *) raw : op->device;
  int src_single = op->host ? 0 : op->device_single;
  unsigned blocks = (unsigned) ((count + 255) / 256 < 4096 ? (count + 255) / 256 : 4096);
  prepare_operand<T><<<blocks, 256>>>(src, src_single, op->rows, op->cols, center_dev, scale_dev, dst);
  return gk_cuda_check_launch("preparing the operands", err);
}

bool same_operand(const gk_reduce_operand *a, const gk_reduce_operand *b)
{
  return a->rows == b->rows && a->cols == b->cols &&
         ((a->host && a->host == b->host) || (a->device && a->device == b->device));
}

// The expanded gaussian form for float sums over host points: centre at the
// middle of the joint bounding box and check that every centred point has
// |u|^2 <= EXPANDED_MAX_NORM2 (u in exp2 units). Fills center[dim]; false when
// the points are too spread for the form to stay accurate.
bool expanded_form_fits(const gk_reduce_operand *x, const gk_reduce_operand *y,
                        const double *scale, double *center)
{
  double norm2 = 0.0;
  for (int d = 0; d < x->cols; d++) {
    double lo = INFINITY, hi = -INFINITY;
    const gk_reduce_operand *ops[2] = {x, y};
    for (int o = 0; o < 2; o++) {
      const double *col = ops[o]->host + (size_t) d * ops[o]->rows;
      for (size_t i = 0; i < ops[o]->rows; i++) {
        lo = col[i] < lo ? col[i] : lo;
        hi = col[i] > hi ? col[i] : hi;
      }
    }
    center[d] = 0.5 * (lo + hi);
    double half = 0.5 * (hi - lo) * scale[d];
    norm2 += half * half;
  }
  return norm2 <= EXPANDED_MAX_NORM2;
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
  const char *expanded_env = getenv("GK_REDUCE_EXPANDED");
  const bool may_expand = gauss2 && sizeof(T) == sizeof(float) && e_total == 1 && x->host &&
                          y->host && x->cols <= 3 && (double) x->rows * y->rows >= EXPANDED_MIN_PAIRS &&
                          !(expanded_env && expanded_env[0] == '0');
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
  a.stride = padded<T>(dim + 1 + ec_template);   // + 1: room for the expanded form's |v|^2
  size_t tile = TILE_BYTES / ((size_t) a.stride * sizeof(T));
  if (tile == 0)
    return gk_fail(err, GK_ERR_INPUT, "points of dimension %d with %d weight columns do not fit "
                   "the GPU engine's shared-memory tile; use backend = \"cpu\"", dim, e_chunk);
  a.tile = (int) (tile < (size_t) BLOCK ? tile : BLOCK);
  if (spec->reduction == GK_REDUCE_KMIN && spec->k > KMIN_LARGE)
    return gk_fail(err, GK_ERR_INPUT, "the GPU engine finds at most %d smallest values (k = %d); "
                   "use backend = \"cpu\" for larger k", KMIN_LARGE, spec->k);
  if (m == 0) return GK_OK;
  const int rows_per_thread = gauss2 ? fast_rows(e_total) : 1;

  // Host inputs packed in one upload: the column scales, then raw x, y, b.
  // Column scales (and centre): coordinates are divided by the range and, for
  // the fast gaussian, scaled so that exp(-d^2/2) becomes 2^(-d'^2).
  double *scale_host = (double *) malloc(2 * dim * sizeof(double) + 1);
  if (!scale_host) return gk_fail(err, GK_ERR_NOMEM, "out of host memory");
  double *center_host = scale_host + dim;
  for (int d = 0; d < dim; d++)
    scale_host[d] = (gauss2 ? sqrt(0.5 / log(2.0)) : 1.0) / spec->range[d];
  const ValuePath path = !gauss2 ? VALUE_KERNEL
                         : may_expand && expanded_form_fits(x, y, scale_host, center_host)
                             ? VALUE_GAUSS2_EXPANDED : VALUE_GAUSS2;
  const bool expanded = path == VALUE_GAUSS2_EXPANDED;
  const bool y_is_x = same_operand(x, y);
  const bool share_xy = y_is_x && !expanded;
  const bool b_direct = has_w && b->device && (b->device_single != 0) == (sizeof(T) == 4);
  Layout up;
  size_t at_scale = up.take(2 * dim * sizeof(double));
  size_t at_xraw = up.take(x->host ? m * dim * sizeof(double) : 0);
  size_t at_yraw = up.take(y->host && !y_is_x ? n * dim * sizeof(double) : 0);
  size_t at_braw = up.take(has_w && b->host ? n * e_total * sizeof(double) : 0);
  const size_t up_bytes = up.used;
  // Device-only pieces: prepared operands and results (downloaded together).
  Layout lay = up;
  size_t at_xp = lay.take(m * dim * sizeof(T));
  size_t at_yp = lay.take(share_xy ? 0 : n * (dim + (expanded ? 1 : 0)) * sizeof(T));
  const bool b_raw_usable = has_w && b->host && sizeof(T) == sizeof(double);
  size_t at_bp = lay.take(has_w && !b_direct && !b_raw_usable ? n * e_total * sizeof(T) : 0);
  size_t at_out = lay.take(vbytes);
  size_t at_idx = at_out + vbytes;   // right after the values: one download
  lay.used = at_idx + ibytes;
  if (workspace_reserve(lay.used, err) || staging_reserve(up_bytes + vbytes + ibytes, err)) {
    free(scale_host);
    return err->status;
  }
  char *base = (char *) workspace.ptr, *host = (char *) staging.ptr;
  memcpy(host + at_scale, scale_host, 2 * dim * sizeof(double));
  free(scale_host);
  if (x->host) memcpy(host + at_xraw, x->host, m * dim * sizeof(double));
  if (y->host && !y_is_x) memcpy(host + at_yraw, y->host, n * dim * sizeof(double));
  if (has_w && b->host) memcpy(host + at_braw, b->host, n * e_total * sizeof(double));
  if (gk_cuda_status(cudaMemcpyAsync(base, host, up_bytes, cudaMemcpyHostToDevice, 0),
                     "copy to the GPU", err))
    return err->status;

  const double *scale = (const double *) (base + at_scale);
  const double *center = expanded ? scale + dim : NULL;
  const double *xraw = (const double *) (base + at_xraw);
  const double *yraw = y_is_x ? xraw : (const double *) (base + at_yraw);
  T *xp = (T *) (base + at_xp);
  T *yp = share_xy ? xp : (T *) (base + at_yp);
  if (prepare<T>(x, xraw, center, scale, xp, err)) return err->status;
  if (expanded) {
    unsigned blocks = (unsigned) ((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    prepare_expanded<T><<<blocks, 256>>>(yraw, n, dim, center, scale, yp);
    if (gk_cuda_check_launch("preparing the operands", err)) return err->status;
  } else if (!share_xy && prepare<T>(y, yraw, NULL, scale, yp, err)) {
    return err->status;
  }
  const T *bp = NULL;
  if (b_direct) bp = (const T *) b->device;
  else if (b_raw_usable) bp = (const T *) (base + at_braw);
  else if (has_w) {
    if (prepare<T>(b, (const double *) (base + at_braw), NULL, NULL, (T *) (base + at_bp), err))
      return err->status;
    bp = (const T *) (base + at_bp);
  }
  a.x = xp;
  a.y = yp;
  a.index = icols ? (int *) (base + at_idx) : NULL;

  // Weight columns in chunks of WEIGHT_CHUNK; unweighted reductions run once.
  for (int c0 = 0; c0 < (has_w ? e_total : 1); c0 += WEIGHT_CHUNK) {
    a.e = has_w ? (e_total - c0 < WEIGHT_CHUNK ? e_total - c0 : WEIGHT_CHUNK) : 0;
    a.b = has_w ? bp + (size_t) c0 * n : NULL;
    a.out = vcols ? (double *) (base + at_out) + (size_t) c0 * m : NULL;
    if (launch_reduction<T>(spec, a, path, rows_per_thread, err)) return err->status;
  }
  if (gk_cuda_status(cudaMemcpyAsync(host + up_bytes, base + at_out, vbytes + ibytes,
                                     cudaMemcpyDeviceToHost, 0), "copy from the GPU", err))
    return err->status;
  if (gk_stream_sync(NULL, "the reduction", err)) return err->status;
  memcpy(out, host + up_bytes, vbytes);
  memcpy(index, host + up_bytes + vbytes, ibytes);
  return GK_OK;
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
  gk_pinned_free(&staging);
  workspace_free();
}
