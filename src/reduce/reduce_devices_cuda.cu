// Multi-GPU kernel reductions (reduce.h): the rows of x are cut into one
// contiguous range per GPU, each run by reduce_cuda() on a thread of the
// device layer's pool (device/gk_pool.h); y and b are read by all. Each
// thread copies its rows of x into a contiguous matrix and its results
// back into their rows of `out` and `index`, in parallel with the others.
#include <string.h>
#include <new>
#include <vector>
#include "reduce/reduce.h"
#include "device/gk_device.h"
#include "device/gk_pool.h"

namespace {

struct job {
  const gk_reduce_spec *spec;
  const gk_reduce_operand *x, *y, *b;
  double *out;
  int *index;
  int vcols, icols;
  size_t per;   // rows per GPU
};

// GPU d's rows of x (a thread of the device pool, bound to that GPU).
void run_worker(void *ctx, int d, gk_error *err)
{
  const job *j = (const job *) ctx;
  const gk_reduce_operand *x = j->x;
  size_t m = x->rows, row0 = j->per * (size_t) d < m ? j->per * (size_t) d : m;
  size_t r = row0 + j->per < m ? j->per : m - row0;
  if (r == 0) return;
  try {
    std::vector<double> xs(r * (size_t) x->cols), vs(r * (size_t) j->vcols);
    std::vector<int> is(r * (size_t) j->icols);
    for (int c = 0; c < x->cols; c++)
      memcpy(xs.data() + (size_t) c * r, x->host + (size_t) c * m + row0, r * sizeof(double));
    gk_reduce_operand xo = *x;
    xo.host = xs.data();
    xo.rows = r;
    if (reduce_cuda(j->spec, &xo, j->y, j->b, vs.data(), is.data(), err) == GK_OK) {
      for (int c = 0; c < j->vcols; c++)
        memcpy(j->out + (size_t) c * m + row0, vs.data() + (size_t) c * r, r * sizeof(double));
      for (int c = 0; c < j->icols; c++)
        memcpy(j->index + (size_t) c * m + row0, is.data() + (size_t) c * r, r * sizeof(int));
    }
  } catch (const std::bad_alloc &) {
    gk_fail(err, GK_ERR_NOMEM, "out of host memory splitting a reduction over GPUs");
  }
}

}  // namespace

// Each GPU's scratch and staging live in its own device context (device
// layer), so threads on different GPUs share no workspace.
extern "C" gk_status reduce_cuda_devices(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                                         const gk_reduce_operand *y, const gk_reduce_operand *b,
                                         double *out, int *index, const int *devices,
                                         int n_devices, gk_error *err)
{
  if (n_devices == 1) {   // R's thread, bound to that GPU for this call only
    if (gk_device_bind_thread(devices[0], err)) return err->status;
    reduce_cuda(spec, x, y, b, out, index, err);
    gk_device_bind_thread(-1, NULL);
    return err->status;
  }
  if (n_devices < 1) return reduce_cuda(spec, x, y, b, out, index, err);
  if (!x->host || !y->host || (b && !b->host))
    return gk_fail(err, GK_ERR_INPUT, "a reduction over several GPUs needs host matrices (a "
                   "device matrix lives on one GPU): use as.matrix() or one GPU");
  job j = {spec, x, y, b, out, index, reduce_value_columns(spec->reduction, b ? b->cols : 1, spec->k),
           reduce_index_columns(spec->reduction, spec->k),
           (x->rows + (size_t) n_devices - 1) / (size_t) n_devices};
  std::vector<gk_error> errors((size_t) n_devices);
  int interrupted = 0;
  gk_pool_run(devices, n_devices, run_worker, NULL, &j, 5, errors.data(), &interrupted, err);
  if (err->status != GK_OK) return err->status;
  return gk_pool_outcome(devices, n_devices, errors.data(), interrupted, "the reduction", err);
}
