/*
 * Device buffers and GPU timers of one H2 transform (h2_compress_cuda.cuh):
 * a pool that keeps released buffers for the next request they can hold, and
 * a clock that sums stretches of one stream between pairs of events.
 */
#ifndef GK_H2_GPU_POOL_CUH
#define GK_H2_GPU_POOL_CUH

#include <vector>
#include "device/gk_cuda.h"

/* GPU time of stretches of one stream, from pairs of events (read after the
 * stream is synchronized): a phase's share without synchronizing inside it. */
struct stream_clock {
  std::vector<cudaEvent_t> ev;
  size_t used = 0;
  ~stream_clock()
  {
    for (auto e : ev) cudaEventDestroy(e);
  }
  cudaError_t mark(cudaStream_t s)
  {
    if (used == ev.size()) {
      cudaEvent_t e;
      cudaError_t st = cudaEventCreate(&e);
      if (st != cudaSuccess) return st;
      ev.push_back(e);
    }
    return cudaEventRecord(ev[used++], s);
  }
  double take_seconds()
  {
    double ms = 0.0;
    for (size_t i = 0; i + 1 < used; i += 2) {
      float d = 0.0f;
      if (cudaEventElapsedTime(&d, ev[i], ev[i + 1]) == cudaSuccess) ms += d;
    }
    used = 0;
    return 1e-3 * ms;
  }
};

/* Device buffers of one transform, freed together. A released buffer is
 * kept for the next request it can hold: cudaFree synchronizes the device
 * and unmaps the pages, and the levels ask for buffers of the same sizes
 * again and again. */
struct gpu_pool {
  struct entry {
    gk_device_buffer buf;
    bool in_use;
  };
  std::vector<entry> bufs;
  ~gpu_pool() { free_all(); }
  void free_all()
  {
    for (auto &e : bufs) gk_buffer_free(&e.buf);
    bufs.clear();
  }
  // The smallest released buffer of at least `bytes`, taken; NULL if none.
  void *reuse(size_t bytes)
  {
    entry *best = NULL;
    for (auto &e : bufs)
      if (!e.in_use && e.buf.ptr && e.buf.bytes >= bytes && (!best || e.buf.bytes < best->buf.bytes))
        best = &e;
    if (!best) return NULL;
    best->in_use = true;
    return best->buf.ptr;
  }
  // Frees the released buffers (before a new allocation: their memory may
  // be what it needs).
  void trim()
  {
    for (auto &e : bufs)
      if (!e.in_use) gk_buffer_free(&e.buf);
  }
  void keep(gk_device_buffer b) { bufs.push_back({b, true}); }
  void release(const void *p)
  {
    for (auto &e : bufs)
      if (e.buf.ptr == p) e.in_use = false;
  }
};

#endif
