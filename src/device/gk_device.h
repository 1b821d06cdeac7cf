/*
 * The shared device layer: device query and choice, the memory budget, device
 * and pinned host buffers, streams, and the per-device context (library
 * handles, scratch kept between calls, cached device facts). Plain C
 * declarations, callable from the R glue and from every engine; the CUDA build
 * implements them in device_cuda.cu and device_context_cuda.cu, the CPU-only
 * build in device_cpu.c (no devices; every GPU request fails with a clear
 * message).
 *
 * Which GPU a call runs on. gk_device_select() (R's gk_set_device()) chooses
 * the device new work and new objects use; a host thread driving one GPU of a
 * multi-GPU job binds itself to it instead (gk_device_bind_thread()). Every
 * engine entry point starts with gk_device_enter(): with the device of the
 * resident object it works on (device/gk_resident.h), or GK_DEVICE_ACTIVE for
 * new work. The layer calls that follow on that thread (buffers, streams,
 * handles, scratch) work on the device entered and never switch devices
 * themselves, so an object made on GPU 1 keeps using GPU 1 after the user
 * selects GPU 2.
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

/* Makes the calling host thread use `device` (0-based) for its new work,
 * whatever gk_device_select() chose, and enters it; -1 undoes the binding. For
 * engines that drive several GPUs, one host thread each (err may be NULL with
 * -1). */
gk_status gk_device_bind_thread(int device, gk_error *err);

/* The device new work of the calling thread goes to: its bound device, else
 * the selected one. */
int gk_device_active(void);

#define GK_DEVICE_ACTIVE (-1)

/* Makes `device` (0-based; GK_DEVICE_ACTIVE: gk_device_active()) the GPU of
 * the calling thread's following layer calls. Every engine entry point calls
 * it first. */
gk_status gk_device_enter(int device, gk_error *err);

/* The device the calling thread entered last (-1: none yet). */
int gk_device_in_use(void);

/* The memory budget, one rule for every engine: an engine may hold at most
 * GK_MEMORY_BUDGET_FRACTION of the device's free memory (measured when it
 * plans its allocations; what it already holds counts as free if it frees it
 * first). An engine whose plan does not fit fails with GK_ERR_NOMEM and a
 * message saying what to change; engines that work in blocks size the blocks
 * so that everything they allocate at once stays within it (the PCF pipeline:
 * two output buffers per GPU, each half of the budget). The 20% left covers
 * the CUDA libraries' own workspaces and other processes' growth. */
#define GK_MEMORY_BUDGET_FRACTION 0.8

/* The budget for a device with `free_bytes` free. */
size_t gk_memory_budget_of(size_t free_bytes);

/* The budget on the device in use (one cudaMemGetInfo: call it when planning,
 * not on every call). */
gk_status gk_device_memory_budget(size_t *bytes, gk_error *err);

/* Facts about the device in use, asked once per device and cached: its
 * multiprocessors (1 when unknown), and the most shared memory a block may
 * opt in to (cudaFuncAttributeMaxDynamicSharedMemorySize; 0 when unknown, so
 * that "does it fit" answers no). Every engine reads these, never the driver. */
int gk_device_sm_count(void);
size_t gk_device_shared_optin(void);

/* Scratch kept between calls, per device (small calls then allocate
 * nothing): device memory by slot, and page-locked host memory by slot.
 * A request that needs more frees the old buffer (its contents are lost) and
 * allocates the size asked for plus a quarter, within the memory budget.
 * Owned by the layer, freed by gk_device_release_all(). Device scratch is for
 * calls made from the R thread (one at a time); each of the pipeline's
 * workers takes the staging of its own GPU. Page-locked memory is slow to get
 * (the driver allocates and pins every page) and, under unified addressing,
 * every GPU copies from it. */
typedef enum {
  GK_SCRATCH_WORKSPACE = 0,   /* a call's operands and results            */
  GK_SCRATCH_PARTIALS = 1,    /* partial results combined by a second pass */
  GK_SCRATCH_SLOTS = 2
} gk_scratch_slot;

gk_status gk_device_scratch(gk_scratch_slot slot, size_t bytes, const char *what, void **ptr,
                            gk_error *err);
typedef enum {
  GK_PINNED_STAGING = 0,   /* copies staged through it; blocks of results */
  GK_PINNED_INPUTS = 1,    /* a call's inputs packed for upload (PCF bands) */
  GK_PINNED_SLOTS = 2
} gk_pinned_slot;

gk_status gk_pinned_scratch(gk_pinned_slot slot, size_t bytes, const char *what, void **ptr,
                            gk_error *err);
/* The same in memory other processes of this machine may map
 * (gk_pinned_alloc_shared), made again where the slot holds private memory:
 * a future worker's pipeline staging, whose blocks it hands over in place. */
gk_status gk_pinned_scratch_shared(gk_pinned_slot slot, size_t bytes, const char *what,
                                   void **ptr, gk_error *err);

/* The host ends of downloads into R memory (host_copy.c). gk_host_prefault
 * writes one byte per page of memory that a download will fill, such as a
 * fresh R result (on several threads for large blocks), so that its page
 * faults happen while the GPU works, not in the copy after the work.
 * gk_host_copy is memcpy on a few threads for large blocks: one core's copy
 * out of staging memory is slower than the transfer that filled it. */
void gk_host_prefault(void *p, size_t bytes);
/* Asks for large pages (madvise MADV_HUGEPAGE) on the whole
 * GK_HOST_HUGE_PAGE pages of [at, at + len): where the system grants them,
 * first writes fault 512 times fewer pages, and page-locking has fewer pages
 * to pin. A hint only. */
#define GK_HOST_HUGE_PAGE ((size_t) 2 << 20)
void gk_host_huge_pages(void *at, size_t len);
void gk_host_copy(void *dst, const void *src, size_t bytes);

/* Device memory on the device in use. An allocation that fails reports `what`
 * and the sizes. */
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

/* Page-locked host memory, for asynchronous copies: private memory, or with
 * gk_pinned_alloc_shared, where the system has memory files, a shared
 * segment offered to other processes of this machine (gk_shared_offer: a
 * future worker's caller writes the blocks its GPUs download there into its
 * result itself). Shared memory has 4 KiB pages on most systems, and takes
 * longer to make than private memory in 2 MiB pages. */
typedef struct {
  void *ptr;
  size_t bytes;
  void *segment;   /* the gk_shared it lives in, or NULL */
} gk_pinned_buffer;

gk_status gk_pinned_alloc(gk_pinned_buffer *buf, size_t bytes, const char *what, gk_error *err);
gk_status gk_pinned_alloc_shared(gk_pinned_buffer *buf, size_t bytes, const char *what,
                                 gk_error *err);
void gk_pinned_free(gk_pinned_buffer *buf);

/* Streams on the device in use; high_priority selects its highest priority. */
gk_status gk_stream_create(gk_stream *stream, int high_priority, gk_error *err);
void gk_stream_destroy(gk_stream *stream);
gk_status gk_stream_sync(gk_stream stream, const char *what, gk_error *err);

/* Copies between host memory that is not page-locked (R's vectors) and the
 * device, on `stream`, through the per-device pinned staging (of which they
 * take at most two pieces of 8 MiB, so that it stays bounded; nothing is
 * allocated after the first call): the host side by gk_host_copy (several
 * threads, fresh pages faulted in parallel), each piece's DMA overlapping the
 * host copy of the next, where the driver stages pageable copies on one
 * thread. Both return once the copy is done; a download is ordered after the
 * work queued on `stream`. For calls from the R thread, as the staging is. */
gk_status gk_staged_upload(void *device_dst, const void *host_src, size_t bytes,
                           gk_stream stream, gk_error *err);
gk_status gk_staged_download(void *host_dst, const void *device_src, size_t bytes,
                             gk_stream stream, gk_error *err);

/* Releases what the per-device contexts keep (library handles, scratch,
 * staging, cached facts) on every device; made again when needed. */
void gk_device_release_all(void);

#ifdef __cplusplus
}
#endif
#endif
