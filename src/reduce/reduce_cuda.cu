// The GPU engine of the kernel reductions (semantics in reduce.h; its files in
// reduce_cuda.cuh): a call's operands prepared on the device in the device
// layer's scratch (kept between calls), uploaded in one copy, reduced by
// weight-column chunks, and the results downloaded. One synchronize per call,
// after the download (and one between the slices of a long reduction, for
// interrupts).
#include <math.h>
#include <string.h>
#include "reduce/reduce_cuda.cuh"
#include "reduce/reduce_kmin_large.cuh"
#include "device/gk_cuda.h"

using namespace reduce_gpu;

namespace {

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

bool weighted(gk_reduction r)
{
  return r == GK_REDUCE_SUM || r == GK_REDUCE_LOGSUMEXP || r == GK_REDUCE_SOFTMAX_SUM;
}

template <typename T>
gk_status launch_reduction(const gk_reduce_spec *spec, const Args &a, int rows, bool two_way, gk_error *err)
{
  Variant v;
  if (choose_variant(spec, sizeof(T) == 4, a.dim, a.e, a.pieces != NULL, two_way, rows, &v)) {
    if (a.filter_error > 0 && filterable(v)) take_filter(&v);
    return launch(spec, a, v, err);
  }
  if (spec->formula)   // kmin_large evaluates the vocabulary's kernels only
    return gk_fail(err, GK_ERR_INPUT, "with a formula the GPU engine finds at most %d smallest "
                   "values (k = %d); use backend = \"cpu\" or k <= %d", KMIN_LARGE, a.k, KMIN_LARGE);
  if (a.pieces)
    return gk_fail(err, GK_ERR_INPUT, "with block-sparse `ranges` the GPU engine finds at most %d "
                   "smallest values (k = %d); use backend = \"cpu\" or k <= %d", KMIN_LARGE, a.k,
                   KMIN_LARGE);
  return kmin_large<T>(a, err);
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
// the point origin[] (when given, in double), scaled by column
// (reduce_pack_points, on several host threads for large inputs): the same
// arithmetic as prepare_operand, done on the host so that only T-sized data
// is uploaded and no conversion kernel is launched (small calls are
// latency-bound). False when a value does not fit T (finite doubles beyond
// float's range, relative to the range of the kernel): their differences
// would be Inf - Inf.
// *largest (when given) becomes at least the largest |value| written.
template <typename T>
bool pack_points(T *dst, const gk_reduce_operand *p, const double *origin, const double *scale,
                 double *largest = nullptr)
{
  return reduce_pack_points(dst, sizeof(T) == 4, p->host, p->rows, p->cols, origin, scale, largest) != 0;
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
  a.inner = gk_reduce_sees_points(spec);
  if (spec->formula) {
    if (!spec->formula->source || spec->formula->nparams > GK_FORMULA_MAX_PARAMS)
      return gk_fail(err, GK_ERR_INPUT, "this formula was not prepared for the GPU");
    for (int q = 0; q < spec->formula->nparams; q++) a.params[q] = spec->formula->params[q];
  }
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
  // Rows per thread: the gaussian's and the formulas' sums, and the dense
  // minimum of the squared distance (knn with k = 1, argmin: 4 rows are no
  // slower than 1, and share each loaded point).
  const bool sqdist_min = sqdist_values(spec) && !spec->formula &&
                          (spec->reduction == GK_REDUCE_MIN || spec->reduction == GK_REDUCE_ARGMIN ||
                           (spec->reduction == GK_REDUCE_KMIN && spec->k == 1));
  const int rows_per_thread = ((gauss2 || (spec->formula && spec->reduction == GK_REDUCE_SUM)) && !two_way) ||
                              (sqdist_min && !spec->ranges)
                              ? fast_rows(m, n_work, has_w ? e_total : 1) : 1;
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
      gk_pinned_scratch(GK_PINNED_STAGING, up_bytes + vbytes + ibytes,
                        "the reduction's staging buffer", &staging, err))
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
  double largest = 0.0;   // the largest |coordinate| of host x and y, for filter_error
  if ((x->host && !pack_points((T *) (host + at_xhost), x, origin, scale_host, &largest)) ||
      (y->host && !y_is_x && !pack_points((T *) (host + at_yhost), y, origin, scale_host, &largest)))
    return gk_fail(err, GK_ERR_INPUT, "the points lie too far apart for single precision "
                   "(relative to the kernel's range, differences beyond 3.4e38): use "
                   "precision = \"double\"");
  if (has_w && b->host && !pack_points((T *) (host + at_bhost), b, NULL, NULL))
    return gk_fail(err, GK_ERR_INPUT, "the weights `b` hold values beyond single precision's "
                   "range (3.4e38): use precision = \"double\"");
  // The float pre-filter of knn's double distances (filterable): each float
  // copy of a coordinate c is within 2^-24 |c| (plus underflow), their
  // difference rounds once more, so the distance of the copies is within
  // sqrt(dim) 4 2^-24 largest of the exact one. Host points only (their
  // largest coordinate is known here), and only where floats hold them.
  a.filter_error = -1.0;
  if (sizeof(T) == 8 && x->host && y->host && largest <= 1e30)
    a.filter_error = sqrt((double) dim) * 4.0001 * 0x1p-24 * largest + 0x1p-140;
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
