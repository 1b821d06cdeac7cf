// The multi-GPU block pipeline, several blocks in flight per GPU (see
// block_pipeline.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>
#include "device/block_pipeline.h"
#include "device/block_progress.h"
#include "device/gk_cuda.h"
#include "device/gk_hooks.h"
#include "device/gk_pool.h"
#include "device/gk_tunables.h"

namespace {

struct shared_state {
  const gk_block_policy *policy;
  const gk_block *blocks;
  size_t count;
  gk_block_writer writer;           // each GPU's share of the scatter threads
  int depth;                        // blocks in flight per GPU (options->depth)
  gk_block_queue own{};             // the run's queue, where none is shared
  gk_block_queue *queue;            // where the GPUs take their blocks
  size_t tail;                      // untaken blocks below which the list's end is near
  std::atomic<size_t> done{0};      // blocks scattered
  // The writer's output: there from the start, or made by the calling thread
  // as the GPUs start (writer.make_out); a failure to make it stops the run.
  std::atomic<int> output_ready{1}, output_failed{0};
  double output_ready_s = 0;   // when it was made (from `start`); set before output_ready
  gk_error output_err;
  gk_block_progress progress;
  struct worker *workers;
  std::chrono::steady_clock::time_point start;   // of the run, for the GPUs' timelines
};

// For the closing progress lines: where each GPU's time went, when it
// queued its first block and finished its last one (from the run's start:
// GPUs that end apart show the list's end imbalance), how long it waited for
// the host between blocks (the part of it before the output was made), and
// the host's work after its last kernel.
struct worker {
  double setup_s = 0, gpu_s = 0, prepare_s = 0, scatter_s = 0, first_s = 0, end_s = 0;
  double idle_s = 0, idle_unmade_s = 0, drain_s = 0;
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

// Scatters a block once its download (event `downloaded`) is done.
gk_status scatter_block(shared_state *s, worker *w, const gk_block *b, const char *host,
                        cudaEvent_t downloaded, int single, gk_error *err)
{
  GK_CUDA_TRY(cudaEventSynchronize(downloaded), "the download of a block", err);
  {
    auto clock = std::chrono::steady_clock::now();
    gk_block_write(&s->writer, b, host, single);
    w->scatter_s += seconds_since(clock);
  }
  s->done.fetch_add(1);
fail:
  return err->status;
}

// Queues the download of `block`, once its kernel (event `finished`) is
// done, from its output buffer into page-locked `host`; `downloaded` marks
// its end.
gk_status queue_download(char *host, const gk_device_buffer *out, const gk_block *block,
                         size_t elem, cudaEvent_t finished, cudaEvent_t downloaded,
                         gk_stream download, gk_error *err)
{
  GK_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t) download, finished, 0), "cudaStreamWaitEvent",
              err);
  GK_TRY(gk_buffer_download(host, out, block->rows * block->cols * elem, download, err));
  GK_CUDA_TRY(cudaEventRecord(downloaded, (cudaStream_t) download), "cudaEventRecord", err);
fail:
  return err->status;
}

// Whether the work before `event` is done (cudaErrorNotReady is an answer,
// not an error: cleared, so that the next launch's check does not report it).
gk_status event_done(cudaEvent_t event, const char *what, bool *done, gk_error *err)
{
  cudaError_t e = cudaEventQuery(event);
  *done = e != cudaErrorNotReady;
  if (!*done) (void) cudaGetLastError();
  else gk_cuda_status(e, what, err);
  return err->status;
}

// How many of the blocks launched and not yet scattered, [retired,
// launched), still have their kernel queued or running (the compute stream
// finishes them in order).
gk_status kernels_unfinished(const std::vector<cudaEvent_t> &finished, size_t retired,
                             size_t launched, size_t *count, gk_error *err)
{
  *count = 0;
  for (size_t i = retired; i < launched; i++) {
    bool done;
    if (event_done(finished[i % finished.size()], "the block computation", &done, err))
      return err->status;
    if (!done) {
      *count = launched - i;
      break;
    }
  }
  return GK_OK;
}

// Takes the GPU's next block from the list into *k and does its host work
// (policy->prepare); *k = count and *list_empty where none is left.
void take_block(shared_state *s, void *storage, worker *w, size_t *k, bool *list_empty)
{
  *k = gk_block_take(s->queue);
  if (*k >= s->count) {
    *k = s->count;
    *list_empty = true;
    return;
  }
  if (!s->policy->prepare) return;
  auto clock = std::chrono::steady_clock::now();
  s->policy->prepare(s->policy->ctx, storage, &s->blocks[*k]);
  w->prepare_s += seconds_since(clock);
}

// Blocks no GPU has taken yet (others may take them first).
size_t blocks_untaken(const shared_state *s)
{
  size_t next = gk_block_next(s->queue);
  return next < s->count ? s->count - next : 0;
}

// Near the list's end: too few blocks left for every taker to fill its
// depth, so a block taken now could wait behind a busy GPU.
bool near_list_end(const shared_state *s)
{
  return blocks_untaken(s) < s->tail;
}

// Kernels a GPU has queued or running near the list's end: the one running
// and one behind it, so that the GPU does not wait for this thread's next
// launch. Away from the end it fills its depth, which covers a slow
// scatter; near the end a block taken early would wait behind the GPU's
// others while other GPUs run out of work, and the last GPU to finish sets
// the run's time.
constexpr size_t kTailAhead = 2;

// Milliseconds from `origin` to `event` (both recorded on the GPU, and done).
double ms_since(cudaEvent_t origin, cudaEvent_t event, gk_error *err)
{
  float ms = 0;
  gk_cuda_status(cudaEventElapsedTime(&ms, origin, event), "cudaEventElapsedTime", err);
  return ms;
}

// Page-locked host slots per GPU: one block downloading while this thread
// scatters another. Each slot holds a whole block (hundreds of MB), and
// page-locking memory maps it into the context of every GPU of the process,
// one GPU after the other: a slot per block in flight made a process's first
// call on four GPUs wait for 4 x 4 slots to be mapped into 4 contexts.
constexpr int kHostSlots = 2;

// One GPU (a thread of the device pool, bound to it): takes blocks until the
// list is empty or the pool stops. Up to depth blocks are in flight, each in
// a slot of its own (a device output buffer, its events): the compute
// stream runs their kernels one after the other, the download stream brings
// each down into a host slot once its kernel is done and the slot is free
// (block i into host slot i % kHostSlots, free once block i - kHostSlots is
// scattered), and this thread scatters the oldest while the GPU computes the
// others, so that the GPU does not wait when one scatter is slow, or when
// the result is not made yet.
void run_worker(void *ctx, int d, gk_error *err)
{
  shared_state *s = (shared_state *) ctx;
  worker *w = &s->workers[d];
  const gk_block_policy *policy = s->policy;
  const int depth = s->depth;
  const size_t host_slots = (size_t) std::min(depth, kHostSlots);
  gk_stream compute = NULL, download = NULL;
  std::vector<gk_device_buffer> out((size_t) depth, GK_DEVICE_BUFFER_EMPTY);
  std::vector<char *> host(host_slots, nullptr);   // parts of the GPU's cached staging
  std::vector<const gk_block *> block_in((size_t) depth, nullptr);
  // Per slot: around its block's kernels, and after its download; `origin`
  // dates them all, so that the time between one block's end and the next
  // one's start (the GPU waiting for this thread) can be summed.
  std::vector<cudaEvent_t> started((size_t) depth, nullptr), finished((size_t) depth, nullptr),
      downloaded((size_t) depth, nullptr);
  cudaEvent_t origin = NULL;
  void *staging = NULL;
  void *storage = NULL;
  size_t max_rows, max_cols, max_elements, launched = 0, retired = 0;
  size_t k = s->count;       // the block taken and prepared, not yet launched (count: none)
  bool list_empty = false;   // a take found no block left
  double last_end_ms = 0, origin_s = 0;
  size_t elem = policy->single ? sizeof(float) : sizeof(double);
  auto clock = std::chrono::steady_clock::now();

  gk_block_extents(s->blocks, s->count, &max_rows, &max_cols, &max_elements);
  GK_TRY(gk_stream_create(&compute, 1, err));
  GK_TRY(gk_stream_create(&download, 0, err));
  for (int b = 0; b < depth; b++)
    GK_TRY(gk_buffer_alloc(&out[(size_t) b], max_elements * elem, "a block of results", err));
  // Page-locked memory costs time to get (every page made and pinned): the
  // device layer keeps it between calls. A writer that hands blocks over to
  // another process in place needs it where that process can map it.
  GK_TRY((s->writer.hands_over ? gk_pinned_scratch_shared : gk_pinned_scratch)(
      GK_PINNED_STAGING, host_slots * max_elements * elem, "blocks of results", &staging, err));
  for (size_t h = 0; h < host_slots; h++) host[h] = (char *) staging + h * max_elements * elem;
  GK_TRY(policy->storage_create(policy->ctx, s->blocks, s->count, &storage, err));
  GK_CUDA_TRY(cudaEventCreate(&origin), "cudaEventCreate", err);
  for (int b = 0; b < depth; b++) {
    GK_CUDA_TRY(cudaEventCreate(&started[(size_t) b]), "cudaEventCreate", err);
    GK_CUDA_TRY(cudaEventCreate(&finished[(size_t) b]), "cudaEventCreate", err);
    GK_CUDA_TRY(cudaEventCreateWithFlags(&downloaded[(size_t) b], cudaEventDisableTiming),
                "cudaEventCreate", err);
  }
  GK_CUDA_TRY(cudaEventRecord(origin, (cudaStream_t) compute), "cudaEventRecord", err);
  w->setup_s = seconds_since(clock);
  origin_s = seconds_since(s->start);   // the idle stream records `origin` at once

  take_block(s, storage, w, &k, &list_empty);
  for (;;) {
    if (gk_interrupt_pending()) break;   // the pool's stop: interrupt or a failure
    bool near_end = near_list_end(s);
    size_t unfinished = 0;
    if (near_end) GK_TRY(kernels_unfinished(finished, retired, launched, &unfinished, err));
    bool may_launch = launched - retired < (size_t) depth && (!near_end || unfinished < kTailAhead);
    if (may_launch && k == s->count && !list_empty) take_block(s, storage, w, &k, &list_empty);
    if (may_launch && k < s->count) {
      // Start block k in a free slot, its download queued after its kernel
      // where a host slot is free (else once one is), then, away from the
      // list's end, the host work of the GPU's next block.
      size_t slot = launched % (size_t) depth;
      const gk_block *block = &s->blocks[k];
      GK_CUDA_TRY(cudaEventRecord(started[slot], (cudaStream_t) compute), "cudaEventRecord", err);
      GK_TRY(policy->launch(policy->ctx, storage, block, out[slot].ptr, compute, err));
      GK_TRY(gk_cuda_check_launch("the block computation", err));
      GK_CUDA_TRY(cudaEventRecord(finished[slot], (cudaStream_t) compute), "cudaEventRecord", err);
      if (launched - retired < host_slots)
        GK_TRY(queue_download(host[launched % host_slots], &out[slot], block, elem, finished[slot],
                              downloaded[slot], download, err));
      if (launched == 0) w->first_s = seconds_since(s->start);
      block_in[slot] = block;
      launched++;
      k = s->count;
      if (!near_list_end(s)) take_block(s, storage, w, &k, &list_empty);
      continue;
    }
    if (launched == retired) break;
    // Every slot busy, no block left, or the GPU busy enough near the end:
    // the oldest block, once downloaded, into the result.
    size_t slot = retired % (size_t) depth;
    bool last = list_empty && launched - retired == 1;
    if (near_end && !list_empty) {
      // Its kernel's end frees the GPU's queue: launch the next block
      // before scattering this one, so that the GPU has it queued meanwhile.
      bool done;
      GK_TRY(event_done(downloaded[slot], "the download of a block", &done, err));
      if (!done) {
        GK_CUDA_TRY(cudaEventSynchronize(downloaded[slot]), "the download of a block", err);
        continue;
      }
    }
    if (last) {   // the GPU's last block: the host's tail after its kernel
      GK_CUDA_TRY(cudaEventSynchronize(finished[slot]), "the block computation", err);
      clock = std::chrono::steady_clock::now();
    }
    if (await_output(s)) break;
    GK_TRY(scatter_block(s, w, block_in[slot], host[retired % host_slots], downloaded[slot],
                         policy->single, err));
    if (retired + host_slots < launched) {   // its host slot is free: the next one waiting
      size_t next = (retired + host_slots) % (size_t) depth;
      GK_TRY(queue_download(host[retired % host_slots], &out[next], block_in[next], elem,
                            finished[next], downloaded[next], download, err));
    }
    if (last) w->drain_s = seconds_since(clock);
    {
      double begin_ms = ms_since(origin, started[slot], err);
      double end_ms = ms_since(origin, finished[slot], err);
      if (err->status) goto fail;
      w->gpu_s += (end_ms - begin_ms) / 1000.0;
      if (retired > 0 && begin_ms > last_end_ms) {
        w->idle_s += (begin_ms - last_end_ms) / 1000.0;
        // The part of the gap before the output was made, on the run's clock.
        double gap_start = origin_s + last_end_ms / 1000.0;
        double gap_end = origin_s + begin_ms / 1000.0;
        w->idle_unmade_s += std::max(0.0, std::min(gap_end, s->output_ready_s) - gap_start);
      }
      last_end_ms = end_ms;
    }
    w->blocks++;
    retired++;
  }
  w->end_s = seconds_since(s->start);
fail:
  if (compute) cudaStreamSynchronize((cudaStream_t) compute);
  if (download) cudaStreamSynchronize((cudaStream_t) download);
  if (origin) cudaEventDestroy(origin);
  for (int b = 0; b < depth; b++)
    for (cudaEvent_t e : {started[(size_t) b], finished[(size_t) b], downloaded[(size_t) b]})
      if (e) cudaEventDestroy(e);
  if (storage) policy->storage_destroy(policy->ctx, storage);
  for (gk_device_buffer &b : out) gk_buffer_free(&b);
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
      s->output_ready_s = seconds_since(s->start);
      s->output_ready.store(1, std::memory_order_release);
    } else {
      s->output_failed.store(1);
    }
  }
  gk_block_progress_update(&s->progress, s->done.load(), 0);
}

}  // namespace

extern "C" int gk_pipeline_depth(void)
{
  return (int) gk_tunable(GK_TUNE_PIPELINE_DEPTH);
}

extern "C" gk_status gk_block_pipeline_run(const gk_block_policy *policy, const gk_block *blocks,
                                           size_t count, const gk_block_writer *writer,
                                           const gk_pipeline_options *options, gk_error *err)
{
  if (count == 0) return GK_OK;
  if (options->n_devices < 1) return gk_fail(err, GK_ERR_INTERNAL, "block pipeline without GPUs");
  if (options->depth < 1)
    return gk_fail(err, GK_ERR_INTERNAL, "block pipeline without blocks in flight");
  shared_state s;
  s.policy = policy;
  s.blocks = blocks;
  s.count = count;
  s.writer = gk_block_writer_share(writer, options->n_devices);
  s.depth = options->depth;
  s.queue = options->queue ? options->queue : &s.own;
  // Near the end: fewer blocks untaken than the GPUs would hold with every
  // slot busy and one more prepared.
  s.tail = (size_t) std::max(options->takers, options->n_devices) * (size_t) (s.depth + 1);
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
                  "the GPU waiting for the host %.3f s between them (%.3f s before the result "
                  "was made), the last scattered %.3f s after its kernel, done at %.3f s of %.3f",
                  options->label, options->devices[d] + 1, workers[d].setup_s, workers[d].gpu_s,
                  workers[d].prepare_s, workers[d].scatter_s, s.writer.threads, workers[d].blocks,
                  workers[d].first_s, workers[d].idle_s, workers[d].idle_unmade_s,
                  workers[d].drain_s, workers[d].end_s,
                  total_s);
  }
  if (s.output_failed.load()) gk_fail(err, s.output_err.status, "%s", s.output_err.message);
  for (const gk_error &e : errors)
    if (e.status != GK_OK) gk_fail(err, e.status, "%s", e.message);
  if (interrupted) gk_fail(err, GK_ERR_INTERRUPTED, "stopped after %zu of %zu blocks",
                           s.done.load(), count);
  return err->status;
}
