// Multi-GPU kernel reductions (reduce.h): the rows of x are cut into one
// contiguous range per GPU, each run by reduce_cuda() in its own host thread
// bound to its GPU (as the PCF block pipeline does); y and b are read by all.
// Each thread copies its rows of x into a contiguous matrix and its results
// back into their rows of `out` and `index`, in parallel with the others.
#include <atomic>
#include <chrono>
#include <string.h>
#include <thread>
#include <vector>
#include "reduce/reduce.h"
#include "device/gk_device.h"
#include "device/gk_hooks.h"

namespace {

struct shared_state {
  std::atomic<int> stop{0};
  std::atomic<int> running{0};
};

int read_stop(void *ctx) { return ((shared_state *) ctx)->stop.load(); }

struct worker {
  int device;
  size_t row0, rows;
  gk_error err;
};

void run_worker(shared_state *s, worker *w, const gk_reduce_spec *spec,
                const gk_reduce_operand *x, const gk_reduce_operand *y,
                const gk_reduce_operand *b, double *out, int *index, int vcols, int icols)
{
  gk_error *err = &w->err;
  gk_hooks_bind_worker(read_stop, s);
  if (gk_device_bind_thread(w->device, err) == GK_OK && w->rows > 0) {
    size_t m = x->rows, r = w->rows;
    try {
      std::vector<double> xs(r * (size_t) x->cols), vs(r * (size_t) vcols);
      std::vector<int> is(r * (size_t) icols);
      for (int d = 0; d < x->cols; d++)
        memcpy(xs.data() + (size_t) d * r, x->host + (size_t) d * m + w->row0, r * sizeof(double));
      gk_reduce_operand xo = *x;
      xo.host = xs.data();
      xo.rows = r;
      if (reduce_cuda(spec, &xo, y, b, vs.data(), is.data(), err) == GK_OK) {
        for (int c = 0; c < vcols; c++)
          memcpy(out + (size_t) c * m + w->row0, vs.data() + (size_t) c * r, r * sizeof(double));
        for (int c = 0; c < icols; c++)
          memcpy(index + (size_t) c * m + w->row0, is.data() + (size_t) c * r, r * sizeof(int));
      }
    } catch (const std::bad_alloc &) {
      gk_fail(err, GK_ERR_NOMEM, "out of host memory splitting a reduction over GPUs");
    }
  }
  if (err->status != GK_OK) s->stop.store(1);
  gk_device_bind_thread(-1, NULL);
  gk_hooks_bind_worker(NULL, NULL);
  s->running.fetch_sub(1);
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
  const int vcols = reduce_value_columns(spec->reduction, b ? b->cols : 1, spec->k);
  const int icols = reduce_index_columns(spec->reduction, spec->k);
  shared_state s;
  std::vector<worker> workers((size_t) n_devices);
  std::vector<std::thread> threads;
  size_t m = x->rows, per = (m + (size_t) n_devices - 1) / (size_t) n_devices;
  int interrupted = 0;
  try {
    for (int d = 0; d < n_devices; d++) {
      worker &w = workers[(size_t) d];
      w.device = devices[d];
      w.row0 = per * (size_t) d < m ? per * (size_t) d : m;
      w.rows = w.row0 + per < m ? per : m - w.row0;
      gk_error_clear(&w.err);
      s.running.fetch_add(1);
      threads.emplace_back(run_worker, &s, &w, spec, x, y, b, out, index, vcols, icols);
    }
  } catch (...) {
    s.running.fetch_sub(1);
    s.stop.store(1);
    gk_fail(err, GK_ERR_INTERNAL, "could not start a host thread for a GPU");
  }
  // R's thread waits here: interrupts are checked only on it.
  while (s.running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!interrupted && gk_interrupt_pending()) {
      interrupted = 1;
      s.stop.store(1);
    }
  }
  for (auto &t : threads) t.join();
  if (err->status != GK_OK) return err->status;
  for (auto &w : workers)
    if (w.err.status != GK_OK && w.err.status != GK_ERR_INTERRUPTED)
      return gk_fail(err, w.err.status, "GPU %d: %s", w.device + 1, w.err.message);
  if (interrupted) return gk_fail(err, GK_ERR_INTERRUPTED, "the reduction was interrupted");
  for (auto &w : workers)
    if (w.err.status != GK_OK) return gk_fail(err, w.err.status, "%s", w.err.message);
  return GK_OK;
}
