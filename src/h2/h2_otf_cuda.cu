// The GPU side of matrix-free H2 products (h2_otf.h): the nodes and points
// resident on the H2 matrix's GPU (uploaded once), and each of the two
// block-sparse products (the couplings of every level, the dense blocks) as
// one reduce_cuda call on those device operands with its result left on the
// device (spec.device_out). The HMV's right-hand sides are contiguous, so
// the engine reads them in place, and the engine's work list of ranges is
// made once, by the first product (spec.plan): nothing goes through the host
// per call.
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include "device/gk_cuda.h"
#include "h2/h2_otf.h"

namespace {

enum { COUPLING = 0, DENSE = 1, PRODUCTS = 2 };

struct OtfDevice {
  // Per product: its points (the nodes of every level; the padded leaf
  // points) and its sums. The two products run on different H2 streams, so
  // nothing is shared between them.
  gk_device_buffer points[PRODUCTS], sums[PRODUCTS];
  // The engine's work plan of each product's ranges (made by the first
  // product: the HMV reuses the same ranges every time).
  gk_reduce_plan plans[PRODUCTS];
};

// y[i + c ldy] += sum[i + c rows] (+ nugget b[i + c rows]: b is read only
// with a nugget, as the coupling's x has rows the HMV never fills)
template <typename T>
__global__ void add_sums(const double *sum, const T *b, double nugget, size_t rows, int nrhs,
                         T *y, int ldy)
{
  size_t total = rows * nrhs;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    double v = sum[e];
    if (nugget != 0.0) v += nugget * (double) b[e];
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
gk_status product(OtfDevice *dev, const h2_otf_product *p, int kind, int dim,
                  const gk_kernel *kernel, double nugget, int gpu, cudaStream_t stream,
                  const T *x, int ldx, T *y, int ldy, int nrhs, gk_error *err)
{
  size_t rows = p->rows, total = rows * nrhs;
  // The engine reads weights with leading dimension `rows`, as the HMV's
  // vectors are laid out (h2_otf.h).
  if ((size_t) ldx != rows)
    return gk_fail(err, GK_ERR_INTERNAL, "on-the-fly H2 product with ldx %d for %zu rows", ldx, rows);
  if (grow(&dev->sums[kind], total * sizeof(double), err)) return err->status;
  double *sums = (double *) dev->sums[kind].ptr;
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
  spec.symmetric = 1;   // each block's kernel values used both ways (h2_otf.h)
  spec.device_out = sums;
  spec.plan = &dev->plans[kind];
  gk_reduce_operand pts = {NULL, dev->points[kind].ptr, 0, gpu, rows, dim};
  gk_reduce_operand w = {NULL, x, sizeof(T) == 4, gpu, rows, nrhs};
  if (reduce_cuda(&spec, &pts, &pts, &w, NULL, NULL, err)) return err->status;
  add_sums<T><<<grid_of(total), 256, 0, stream>>>(sums, x, nugget, rows, nrhs, y, ldy);
  return gk_cuda_check_launch("the on-the-fly H2 sums", err);
}

const h2_otf_product *product_of(const h2_otf *o, int kind)
{
  return kind == DENSE ? &o->dense : &o->coupling;
}

}  // namespace

extern "C" gk_status h2_otf_upload(h2_otf *o, gk_error *err)
{
  OtfDevice *dev = (OtfDevice *) calloc(1, sizeof *dev);
  if (!dev) return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the on-the-fly H2 matrix");
  for (int kind = 0; kind < PRODUCTS; kind++) dev->plans[kind] = GK_REDUCE_PLAN_EMPTY;
  o->device = dev;
  const char *what[PRODUCTS] = {"the H2 Chebyshev nodes", "the H2 points"};
  for (int kind = 0; kind < PRODUCTS; kind++) {
    const h2_otf_product *p = product_of(o, kind);
    if (p->rows == 0) continue;
    size_t bytes = p->rows * o->dim * sizeof(double);
    // The sums of one right-hand side too, so that a first product allocates nothing.
    if (gk_buffer_alloc(&dev->points[kind], bytes, what[kind], err) ||
        gk_buffer_upload(&dev->points[kind], p->points, bytes, NULL, err) ||
        gk_buffer_alloc(&dev->sums[kind], p->rows * sizeof(double),
                        "the on-the-fly H2 product workspace", err))
      return err->status;
  }
  return GK_OK;
}

extern "C" size_t h2_otf_device_bytes(const h2_otf *o)
{
  const OtfDevice *dev = (const OtfDevice *) o->device;
  if (!dev) return 0;
  size_t total = 0;
  for (int kind = 0; kind < PRODUCTS; kind++)
    total += dev->points[kind].bytes + dev->sums[kind].bytes + dev->plans[kind].buf.bytes;
  return total;
}

// Called with the matrix's GPU entered (h2_gpu_free).
extern "C" void h2_otf_device_free(h2_otf *o)
{
  OtfDevice *dev = (OtfDevice *) o->device;
  if (!dev) return;
  for (int kind = 0; kind < PRODUCTS; kind++) {
    gk_buffer_free(&dev->points[kind]);
    gk_buffer_free(&dev->sums[kind]);
    reduce_plan_free(&dev->plans[kind]);
  }
  free(dev);
  o->device = NULL;
}

extern "C" gk_status h2_otf_gpu_product(h2_otf *o, const h2_tree *t, int single, int gpu,
                                        void *stream, int which, const void *x, int ldx,
                                        void *y, int ldy, int nrhs, gk_error *err)
{
  OtfDevice *dev = (OtfDevice *) o->device;
  if (!dev) return gk_fail(err, GK_ERR_INTERNAL, "the on-the-fly H2 matrix has no GPU data");
  int kind = which == H2_DENSE ? DENSE : COUPLING;
  const h2_otf_product *p = product_of(o, kind);
  if (p->rows == 0 || nrhs == 0) return GK_OK;
  double nugget = kind == DENSE ? t->nugget : 0.0;
  cudaStream_t s = (cudaStream_t) stream;
  if (single)
    return product<float>(dev, p, kind, t->dim, &t->kernel, nugget, gpu, s, (const float *) x,
                          ldx, (float *) y, ldy, nrhs, err);
  return product<double>(dev, p, kind, t->dim, &t->kernel, nugget, gpu, s, (const double *) x,
                         ldx, (double *) y, ldy, nrhs, err);
}
