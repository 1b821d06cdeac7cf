/*
 * The shared device layer: device query, the free-memory budget, device and
 * pinned host buffers, and streams. Plain C declarations, callable from the R
 * glue and from every engine; the CUDA build implements them in
 * device_cuda.cu, the CPU-only build in device_cpu.c (no devices; every GPU
 * request fails with a clear message).
 *
 * Engines keep device memory in gk_device_buffer and streams in gk_stream so
 * that error handling and messages (which allocation ran out of memory, how
 * much was free) are the same everywhere.
 */
#ifndef GK_DEVICE_H
#define GK_DEVICE_H

#include <stddef.h>
#include "device/gk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int index;
  char name[256];
  int major, minor;                /* compute capability          */
  int sm_count;
  size_t total_memory, free_memory;
  size_t l2_bytes;
  size_t shared_per_block_optin;   /* largest shared memory a block may ask for */
  int max_threads_per_block;
} gk_device_info;

/* 1 when this build has CUDA. */
int gk_cuda_built(void);

/* CUDA runtime and driver versions as 1000*major + 10*minor (0 when unknown). */
int gk_cuda_runtime_version(void);
int gk_cuda_driver_version(void);

/* Number of usable GPUs. No GPU, no driver, or a CPU-only build give 0 and a
 * reason in `why` (which may be NULL); that is not an error. */
int gk_device_count(char *why, size_t why_size);

gk_status gk_device_query(int device, gk_device_info *info, gk_error *err);

/* The device the engines use from now on (0-based), and its index. */
gk_status gk_device_select(int device, gk_error *err);
int gk_device_current(void);

/* Makes the calling host thread use `device` (0-based) for every later call of
 * this layer, whatever gk_device_select() chose; -1 undoes it. For engines
 * that drive several GPUs, one host thread each (err may be NULL with -1). */
gk_status gk_device_bind_thread(int device, gk_error *err);

/* Bytes an engine may use on the current device: free memory x fraction. */
gk_status gk_device_memory_budget(double fraction, size_t *bytes, gk_error *err);

/* Device memory. An allocation that fails reports `what` and the sizes. */
typedef struct {
  void *ptr;
  size_t bytes;
} gk_device_buffer;

#define GK_DEVICE_BUFFER_EMPTY {NULL, 0}

typedef void *gk_stream;   /* a cudaStream_t; NULL is the default stream */

gk_status gk_buffer_alloc(gk_device_buffer *buf, size_t bytes, const char *what, gk_error *err);
void gk_buffer_free(gk_device_buffer *buf);
gk_status gk_buffer_upload(gk_device_buffer *dst, const void *src, size_t bytes,
                           gk_stream stream, gk_error *err);
gk_status gk_buffer_download(void *dst, const gk_device_buffer *src, size_t bytes,
                             gk_stream stream, gk_error *err);

/* Page-locked host memory, for asynchronous copies. */
typedef struct {
  void *ptr;
  size_t bytes;
} gk_pinned_buffer;

gk_status gk_pinned_alloc(gk_pinned_buffer *buf, size_t bytes, const char *what, gk_error *err);
void gk_pinned_free(gk_pinned_buffer *buf);

/* Streams; high_priority selects the device's highest stream priority. */
gk_status gk_stream_create(gk_stream *stream, int high_priority, gk_error *err);
void gk_stream_destroy(gk_stream *stream);
gk_status gk_stream_sync(gk_stream stream, const char *what, gk_error *err);

/* Releases cached library handles on every device (at package unload). */
void gk_device_release_all(void);

#ifdef __cplusplus
}
#endif
#endif
