// The double-buffered, multi-GPU block pipeline (see block_pipeline.h).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>
#include "device/block_pipeline.h"
#include "device/block_progress.h"
#include "device/gk_cuda.h"
#include "device/gk_hooks.h"
#include "device/gk_pool.h"

namespace {

struct shared_state {
  const gk_block_policy *policy;
  const gk_block *blocks;
  size_t count;
  gk_block_writer writer;           // each GPU's share of the scatter threads
  std::atomic<size_t> next{0};      // next block to take
  std::atomic<size_t> done{0};      // blocks scattered
  // The writer's output: there from the start, or made by the calling thread
  // as the GPUs start (writer.make_out); a failure to make it stops the run.
  std::atomic<int> output_ready{1}, output_failed{0};
  gk_error output_err;
  gk_block_progress progress;
  struct worker *workers;
  std::chrono::steady_clock::time_point start;   // of the run, for the GPUs' timelines
};

// For the closing progress lines: where each GPU's time went, when it
// queued its first block and finished its last one (from the run's start:
// GPUs that end apart show the list's end imbalance), how long it waited for
// the host between blocks, and the host's work after its last kernel.
struct worker {
  double setup_s = 0, gpu_s = 0, prepare_s = 0, scatter_s = 0, first_s = 0, end_s = 0;
  double idle_s = 0, drain_s = 0;
  size_t blocks = 0;
};

double seconds_since(std::chrono::steady_clock::time_point start)
{
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Before a GPU's first write: waits for the writer's output. 0 once it is
// there, 1 when the run stops first.
int await_output(shared_state *s)
{
  while (!s->output_ready.load(std::memory_order_acquire)) {
    if (s->output_failed.load() || gk_interrupt_pending()) return 1;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return 0;
}

// Scatters the block downloaded into `host` once its download is done.
gk_status scatter_block(shared_state *s, worker *w, const gk_block *b, const char *host,
                        gk_stream download, int single, gk_error *err)
{
  auto clock = std::chrono::steady_clock::now();
  if (gk_stream_sync(download, "the download of a block", err)) return err->status;
  gk_block_write(&s->writer, b, host, single);
  w->scatter_s += seconds_since(clock);
  s->done.fetch_add(1);
  return GK_OK;
}

// One GPU (a thread of the device pool, bound to it): takes blocks until the
// list is empty or the pool stops, scattering each on the host while the next
// one computes.
void run_worker(void *ctx, int d, gk_error *err)
{
  shared_state *s = (shared_state *) ctx;
  worker *w = &s->workers[d];
  const gk_block_policy *policy = s->policy;
  gk_stream compute = NULL, download = NULL;
  gk_device_buffer out[2] = {GK_DEVICE_BUFFER_EMPTY, GK_DEVICE_BUFFER_EMPTY};
  char *host[2] = {NULL, NULL};   // halves of the GPU's cached pinned staging
  void *staging = NULL;
  void *storage = NULL;
  size_t max_rows, max_cols, max_elements, iteration = 0, k = 0;
  const gk_block *previous = NULL;   // downloaded into host[the other slot], not scattered
  size_t elem = policy->single ? sizeof(float) : sizeof(double);
  // Per slot: around the block's kernels (the time between one block's end
  // and the next one's start is the GPU waiting for this thread).
  cudaEvent_t started[2] = {NULL, NULL}, finished[2] = {NULL, NULL};
  auto clock = std::chrono::steady_clock::now();

  gk_block_extents(s->blocks, s->count, &max_rows, &max_cols, &max_elements);
  GK_TRY(gk_stream_create(&compute, 1, err));
  GK_TRY(gk_stream_create(&download, 0, err));
  for (int b = 0; b < 2; b++)
    GK_TRY(gk_buffer_alloc(&out[b], max_elements * elem, "a block of results", err));
  // Page-locked memory is slow to get (the driver allocates and pins every
  // page; GPUs getting theirs at once wait on each other): the device layer
  // keeps it between calls.
  GK_TRY(gk_pinned_scratch(GK_PINNED_STAGING, 2 * max_elements * elem, "blocks of results",
                           &staging, err));
  host[0] = (char *) staging;
  host[1] = host[0] + max_elements * elem;
  GK_TRY(policy->storage_create(policy->ctx, s->blocks, s->count, &storage, err));
  for (int b = 0; b < 2; b++) {
    GK_CUDA_TRY(cudaEventCreate(&started[b]), "cudaEventCreate", err);
    GK_CUDA_TRY(cudaEventCreate(&finished[b]), "cudaEventCreate", err);
  }
  w->setup_s = seconds_since(clock);

  k = s->next.fetch_add(1);
  for (;; iteration++) {
    if (gk_interrupt_pending()) break;   // the pool's stop: interrupt or a failure
    if (k >= s->count) break;
    const gk_block *block = &s->blocks[k];
    int slot = (int) (iteration % 2);
    // 1. start block k (asynchronous)
    GK_CUDA_TRY(cudaEventRecord(started[slot], (cudaStream_t) compute), "cudaEventRecord", err);
    GK_TRY(policy->launch(policy->ctx, storage, block, out[slot].ptr, compute, err));
    GK_TRY(gk_cuda_check_launch("the block computation", err));
    GK_CUDA_TRY(cudaEventRecord(finished[slot], (cudaStream_t) compute), "cudaEventRecord", err);
    if (iteration == 0) w->first_s = seconds_since(s->start);
    // 2. meanwhile, the host work of this GPU's next block, and the scatter
    // of the previous one (its download done)
    size_t next = s->next.fetch_add(1);
    clock = std::chrono::steady_clock::now();
    if (next < s->count && policy->prepare)
      policy->prepare(policy->ctx, storage, &s->blocks[next]);
    w->prepare_s += seconds_since(clock);
    if (previous) {
      if (await_output(s)) break;
      GK_TRY(scatter_block(s, w, previous, host[1 - slot], download, policy->single, err));
      previous = NULL;
    }
    // 3. wait for block k, then start its download on the other stream
    GK_TRY(gk_stream_sync(compute, "the block computation", err));
    {
      float ms = 0;
      GK_CUDA_TRY(cudaEventElapsedTime(&ms, started[slot], finished[slot]),
                  "cudaEventElapsedTime", err);
      w->gpu_s += ms / 1000.0;
      if (iteration > 0) {
        GK_CUDA_TRY(cudaEventElapsedTime(&ms, finished[1 - slot], started[slot]),
                    "cudaEventElapsedTime", err);
        w->idle_s += ms / 1000.0;
      }
    }
    GK_TRY(gk_buffer_download(host[slot], &out[slot], block->rows * block->cols * elem,
                              download, err));
    previous = block;
    w->blocks++;
    k = next;
  }
  if (previous && err->status == GK_OK && !await_output(s)) {
    clock = std::chrono::steady_clock::now();
    GK_TRY(scatter_block(s, w, previous, host[iteration % 2 == 0 ? 1 : 0], download,
                         policy->single, err));
    w->drain_s = seconds_since(clock);
  }
  w->end_s = seconds_since(s->start);
fail:
  if (compute) cudaStreamSynchronize((cudaStream_t) compute);
  if (download) cudaStreamSynchronize((cudaStream_t) download);
  for (int b = 0; b < 2; b++) {
    if (started[b]) cudaEventDestroy(started[b]);
    if (finished[b]) cudaEventDestroy(finished[b]);
  }
  if (storage) policy->storage_destroy(policy->ctx, storage);
  for (int b = 0; b < 2; b++) gk_buffer_free(&out[b]);
  gk_stream_destroy(&compute);
  gk_stream_destroy(&download);
}

void show_progress(void *ctx)
{
  shared_state *s = (shared_state *) ctx;
  if (!s->output_ready.load() && !s->output_failed.load()) {
    double *out = s->writer.make_out(s->writer.make_out_arg, &s->output_err);
    if (out) {
      s->writer.out = out;
      s->output_ready.store(1, std::memory_order_release);
    } else {
      s->output_failed.store(1);
    }
  }
  gk_block_progress_update(&s->progress, s->done.load(), 0);
}

}  // namespace

extern "C" gk_status gk_block_pipeline_run(const gk_block_policy *policy, const gk_block *blocks,
                                           size_t count, const gk_block_writer *writer,
                                           const gk_pipeline_options *options, gk_error *err)
{
  if (count == 0) return GK_OK;
  if (options->n_devices < 1) return gk_fail(err, GK_ERR_INTERNAL, "block pipeline without GPUs");
  shared_state s;
  s.policy = policy;
  s.blocks = blocks;
  s.count = count;
  s.writer = gk_block_writer_share(writer, options->n_devices);
  gk_error_clear(&s.output_err);
  if (writer->make_out) s.output_ready.store(0);
  std::vector<worker> workers((size_t) options->n_devices);
  std::vector<gk_error> errors((size_t) options->n_devices);
  s.workers = workers.data();
  s.start = std::chrono::steady_clock::now();
  gk_block_progress_start(&s.progress, options->label, count, options->progress);
  int interrupted = 0;
  gk_pool_run(options->devices, options->n_devices, run_worker, show_progress, &s, 20,
              errors.data(), &interrupted, err);
  gk_block_progress_update(&s.progress, s.done.load(), 1);
  double total_s = seconds_since(s.start);
  if (options->progress) {
    for (int d = 0; d < options->n_devices; d++)
      gk_progress("%s: GPU %d: setup %.3f s, upload + kernels %.2f s, host prepare %.2f s, "
                  "host scatter %.2f s (%d threads); %zu blocks, the first queued at %.3f s, "
                  "the GPU waiting for the host %.3f s between them, the last scattered "
                  "%.3f s after its kernel, done at %.3f s of %.3f",
                  options->label, options->devices[d] + 1, workers[d].setup_s, workers[d].gpu_s,
                  workers[d].prepare_s, workers[d].scatter_s, s.writer.threads, workers[d].blocks,
                  workers[d].first_s, workers[d].idle_s, workers[d].drain_s, workers[d].end_s,
                  total_s);
  }
  if (s.output_failed.load()) gk_fail(err, s.output_err.status, "%s", s.output_err.message);
  for (const gk_error &e : errors)
    if (e.status != GK_OK) gk_fail(err, e.status, "%s", e.message);
  if (interrupted) gk_fail(err, GK_ERR_INTERRUPTED, "stopped after %zu of %zu blocks",
                           s.done.load(), count);
  return err->status;
}
