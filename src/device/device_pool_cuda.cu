// The multi-GPU pool of the device layer (see gk_pool.h).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#include "device/gk_pool.h"
#include "device/gk_device.h"
#include "device/gk_hooks.h"

namespace {

struct pool_state {
  std::atomic<int> stop{0};      // set on interrupt or on any worker's failure
  std::atomic<int> running{0};   // workers still going
  // The calling thread sleeps between its interrupt checks; the last worker
  // wakes it, so that the call does not end up to a poll interval late.
  std::mutex lock;
  std::condition_variable finished;
};

int read_stop(void *ctx) { return ((pool_state *) ctx)->stop.load(); }

void run_worker(pool_state *s, int device, int d, gk_pool_work work, void *ctx, gk_error *err)
{
  gk_hooks_bind_worker(read_stop, s);
  if (gk_device_bind_thread(device, err) == GK_OK) work(ctx, d, err);
  if (err->status != GK_OK) s->stop.store(1);
  gk_device_bind_thread(-1, NULL);
  gk_hooks_bind_worker(NULL, NULL);
  std::lock_guard<std::mutex> hold(s->lock);
  if (s->running.fetch_sub(1) == 1) s->finished.notify_all();
}

}  // namespace

extern "C" gk_status gk_pool_run(const int *devices, int n, gk_pool_work work,
                                 void (*tick)(void *ctx), void *ctx, int poll_ms,
                                 gk_error *errors, int *interrupted, gk_error *err)
{
  pool_state s;
  std::vector<std::thread> threads;
  *interrupted = 0;
  for (int d = 0; d < n; d++) gk_error_clear(&errors[d]);
  try {
    for (int d = 0; d < n; d++) {
      s.running.fetch_add(1);
      threads.emplace_back(run_worker, &s, devices[d], d, work, ctx, &errors[d]);
    }
  } catch (...) {
    s.running.fetch_sub(1);   // the thread that failed to start
    s.stop.store(1);
    gk_fail(err, GK_ERR_INTERNAL, "could not start a host thread for a GPU");
  }
  // The first tick right away: it may start work of the calling thread's
  // (block_pipeline.h: the writer's make_out) that the workers wait for.
  if (tick) tick(ctx);
  // Interrupts are checked on this thread only: R is not thread-safe.
  while (s.running.load() > 0) {
    {
      std::unique_lock<std::mutex> hold(s.lock);
      s.finished.wait_for(hold, std::chrono::milliseconds(poll_ms),
                          [&s] { return s.running.load() == 0; });
    }
    if (!*interrupted && gk_interrupt_pending()) {
      *interrupted = 1;
      s.stop.store(1);
    }
    if (tick) tick(ctx);
  }
  for (auto &t : threads) t.join();
  return err->status;
}

extern "C" gk_status gk_pool_outcome(const int *devices, int n, const gk_error *errors,
                                     int interrupted, const char *what, gk_error *err)
{
  for (int d = 0; d < n; d++)
    if (errors[d].status != GK_OK && errors[d].status != GK_ERR_INTERRUPTED)
      return gk_fail(err, errors[d].status, "GPU %d: %s", devices[d] + 1, errors[d].message);
  if (interrupted) return gk_fail(err, GK_ERR_INTERRUPTED, "%s was interrupted", what);
  for (int d = 0; d < n; d++)
    if (errors[d].status != GK_OK) return gk_fail(err, errors[d].status, "%s", errors[d].message);
  return GK_OK;
}
