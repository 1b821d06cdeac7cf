// The GPU side of matrix-free H2 products (h2_otf.h): the nodes and points
// resident on the H2 matrix's GPU (uploaded once), and each block-sparse
// product as a reduce_cuda call on those device operands with its result left
// on the device (spec.device_out). Nothing goes through the host per level but
// the engine's small work list of ranges.
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include "device/gk_cuda.h"
#include "h2/h2_otf.h"

namespace {

struct OtfDevice {
  gk_device_buffer *nodes;      // depth + 1 levels (empty where no blocks)
  gk_device_buffer points;      // the padded leaf points
  // Per product kind (coupling, dense: they run on different H2 streams):
  // the right-hand sides made contiguous (the engine's leading dimension is
  // its row count) and the sums.
  gk_device_buffer rhs[2], sums[2];
  int depth;
};

// b[i + c rows] = x[i + c ldx]
template <typename T>
__global__ void gather_rhs(const T *x, int ldx, size_t rows, int nrhs, T *b)
{
  size_t total = rows * nrhs;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x)
    b[e] = x[e % rows + (size_t) ldx * (e / rows)];
}

// y[i + c ldy] += sum[i + c rows] + nugget b[i + c rows]
template <typename T>
__global__ void add_sums(const double *sum, const T *b, double nugget, size_t rows, int nrhs,
                         T *y, int ldy)
{
  size_t total = rows * nrhs;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    double v = sum[e] + nugget * (double) b[e];
    T *at = y + e % rows + (size_t) ldy * (e / rows);
    *at = (T) ((double) *at + v);
  }
}

unsigned grid_of(size_t total)
{
  size_t blocks = (total + 255) / 256;
  return (unsigned) std::min<size_t>(std::max<size_t>(blocks, 1), 132 * 32);
}

gk_status grow(gk_device_buffer *buf, size_t bytes, gk_error *err)
{
  if (buf->bytes >= bytes) return GK_OK;
  gk_buffer_free(buf);
  return gk_buffer_alloc(buf, bytes, "the on-the-fly H2 product workspace", err);
}

template <typename T>
gk_status product(OtfDevice *dev, const h2_otf_product *p, const double *points, int dim,
                  const gk_kernel *kernel, double nugget, int gpu, cudaStream_t stream, int kind,
                  const T *x, int ldx, T *y, int ldy, int nrhs, gk_error *err)
{
  size_t rows = p->rows, total = rows * nrhs;
  if (grow(&dev->rhs[kind], total * sizeof(T), err) ||
      grow(&dev->sums[kind], total * sizeof(double), err))
    return err->status;
  T *b = (T *) dev->rhs[kind].ptr;
  double *sums = (double *) dev->sums[kind].ptr;
  gather_rhs<T><<<grid_of(total), 256, 0, stream>>>(x, ldx, rows, nrhs, b);
  if (gk_cuda_check_launch("the on-the-fly H2 right-hand sides", err)) return err->status;
  // The engine runs on its own stream: x must be ready, and y is not touched
  // until the sums are added below (on `stream`, after the engine returns).
  if (gk_stream_sync((gk_stream) stream, "the on-the-fly H2 product", err)) return err->status;
  const double ones[3] = {1.0, 1.0, 1.0};
  gk_reduce_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.kernel = *kernel;
  spec.range = ones;   // the points are already scaled
  spec.reduction = GK_REDUCE_SUM;
  spec.single = sizeof(T) == 4;
  spec.method = GK_REDUCE_AUTO;
  spec.ranges = &p->ranges;
  spec.device_out = sums;
  gk_reduce_operand pts = {NULL, points, 0, gpu, rows, dim};
  gk_reduce_operand w = {NULL, b, sizeof(T) == 4, gpu, rows, nrhs};
  if (reduce_cuda(&spec, &pts, &pts, &w, NULL, NULL, err)) return err->status;
  add_sums<T><<<grid_of(total), 256, 0, stream>>>(sums, b, nugget, rows, nrhs, y, ldy);
  return gk_cuda_check_launch("the on-the-fly H2 sums", err);
}

}  // namespace

extern "C" gk_status h2_otf_upload(h2_otf *o, gk_error *err)
{
  OtfDevice *dev = (OtfDevice *) calloc(1, sizeof *dev);
  if (!dev) return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the on-the-fly H2 matrix");
  dev->depth = o->depth;
  dev->nodes = (gk_device_buffer *) calloc((size_t) o->depth + 1, sizeof(gk_device_buffer));
  o->device = dev;
  if (!dev->nodes) return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the on-the-fly H2 matrix");
  for (int l = 0; l <= o->depth; l++) {
    const h2_otf_product *p = &o->coupling[l];
    if (p->rows == 0) continue;
    size_t bytes = p->rows * o->dim * sizeof(double);
    if (gk_buffer_alloc(&dev->nodes[l], bytes, "the H2 Chebyshev nodes", err) ||
        gk_buffer_upload(&dev->nodes[l], p->points, bytes, NULL, err))
      return err->status;
  }
  size_t bytes = o->dense.rows * o->dim * sizeof(double);
  if (gk_buffer_alloc(&dev->points, bytes ? bytes : 1, "the H2 points", err) ||
      (bytes && gk_buffer_upload(&dev->points, o->dense.points, bytes, NULL, err)))
    return err->status;
  return GK_OK;
}

extern "C" size_t h2_otf_device_bytes(const h2_otf *o)
{
  const OtfDevice *dev = (const OtfDevice *) o->device;
  if (!dev) return 0;
  size_t total = dev->points.bytes;
  for (int k = 0; k < 2; k++) total += dev->rhs[k].bytes + dev->sums[k].bytes;
  if (dev->nodes)
    for (int l = 0; l <= dev->depth; l++) total += dev->nodes[l].bytes;
  return total;
}

// Called with the matrix's GPU entered (h2_gpu_free).
extern "C" void h2_otf_device_free(h2_otf *o)
{
  OtfDevice *dev = (OtfDevice *) o->device;
  if (!dev) return;
  if (dev->nodes) {
    for (int l = 0; l <= dev->depth; l++) gk_buffer_free(&dev->nodes[l]);
    free(dev->nodes);
  }
  gk_buffer_free(&dev->points);
  for (int k = 0; k < 2; k++) {
    gk_buffer_free(&dev->rhs[k]);
    gk_buffer_free(&dev->sums[k]);
  }
  free(dev);
  o->device = NULL;
}

extern "C" gk_status h2_otf_gpu_product(h2_otf *o, const h2_tree *t, int single, int gpu,
                                        void *stream, int which, int level, const void *x,
                                        int ldx, void *y, int ldy, int nrhs, gk_error *err)
{
  OtfDevice *dev = (OtfDevice *) o->device;
  if (!dev) return gk_fail(err, GK_ERR_INTERNAL, "the on-the-fly H2 matrix has no GPU data");
  int kind = which == H2_DENSE ? 1 : 0;
  const h2_otf_product *p = kind ? &o->dense : &o->coupling[level];
  if (p->rows == 0 || nrhs == 0) return GK_OK;
  const double *points = (const double *) (kind ? dev->points.ptr : dev->nodes[level].ptr);
  double nugget = kind ? t->nugget : 0.0;
  cudaStream_t s = (cudaStream_t) stream;
  if (single)
    return product<float>(dev, p, points, t->dim, &t->kernel, nugget, gpu, s, kind,
                          (const float *) x, ldx, (float *) y, ldy, nrhs, err);
  return product<double>(dev, p, points, t->dim, &t->kernel, nugget, gpu, s, kind,
                         (const double *) x, ldx, (double *) y, ldy, nrhs, err);
}
