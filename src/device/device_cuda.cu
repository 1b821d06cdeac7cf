// The device layer of a CUDA build (see gk_device.h for the contract); the
// per-device context is in device_context_cuda.cu.
#include <stdio.h>
#include <stdlib.h>
#include "device/gk_cuda.h"
#include "device/gk_resident.h"
#include "device/gk_shared.h"

#define GK_MAX_DEVICES 64

static int current_device = 0;                // chosen by gk_device_select
static thread_local int thread_device = -1;   // set by gk_device_bind_thread
static thread_local int in_use_device = -1;   // entered last by this thread

extern "C" {

gk_status gk_cuda_status(cudaError_t code, const char *what, gk_error *err)
{
  if (code == cudaSuccess) return GK_OK;
  cudaGetLastError();  // clear a non-sticky error so later calls can go on
  gk_status status = GK_ERR_CUDA;
  if (code == cudaErrorMemoryAllocation) status = GK_ERR_NOMEM;
  if (code == cudaErrorNoDevice || code == cudaErrorInsufficientDriver) status = GK_ERR_NO_DEVICE;
  return gk_fail(err, status, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(code),
                 cudaGetErrorName(code));
}

gk_status gk_cuda_check_launch(const char *what, gk_error *err)
{
  return gk_cuda_status(cudaGetLastError(), what, err);
}

gk_status gk_cublas_status(cublasStatus_t code, const char *what, gk_error *err)
{
  if (code == CUBLAS_STATUS_SUCCESS) return GK_OK;
  gk_status status = code == CUBLAS_STATUS_ALLOC_FAILED ? GK_ERR_NOMEM : GK_ERR_CUDA;
  return gk_fail(err, status, "cuBLAS error in %s: %s", what, cublasGetStatusString(code));
}

gk_status gk_cusolver_status(cusolverStatus_t code, const char *what, gk_error *err)
{
  if (code == CUSOLVER_STATUS_SUCCESS) return GK_OK;
  gk_status status = code == CUSOLVER_STATUS_ALLOC_FAILED ? GK_ERR_NOMEM : GK_ERR_CUDA;
  return gk_fail(err, status, "cuSOLVER error in %s: status %d", what, (int) code);
}

int gk_cuda_built(void) { return 1; }

int gk_cuda_runtime_version(void)
{
  int v = 0;
  return cudaRuntimeGetVersion(&v) == cudaSuccess ? v : 0;
}

int gk_cuda_driver_version(void)
{
  int v = 0;
  return cudaDriverGetVersion(&v) == cudaSuccess ? v : 0;
}

int gk_device_count(char *why, size_t why_size)
{
  int count = 0;
  cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    cudaGetLastError();
    if (why) {
      if (gk_cuda_driver_version() == 0)
        snprintf(why, why_size, "no NVIDIA driver is installed");
      else
        snprintf(why, why_size, "%s", cudaGetErrorString(code));
    }
    return 0;
  }
  if (count == 0 && why) snprintf(why, why_size, "no CUDA-capable device is detected");
  return count > GK_MAX_DEVICES ? GK_MAX_DEVICES : count;
}

static gk_status check_device_index(int device, gk_error *err)
{
  char why[256] = "";
  int count = gk_device_count(why, sizeof why);
  if (count == 0) return gk_fail(err, GK_ERR_NO_DEVICE, "no usable GPU: %s", why);
  if (device < 0 || device >= count)
    return gk_fail(err, GK_ERR_INPUT, "GPU %d does not exist: this machine has %d (numbered 1 to %d)",
                   device + 1, count, count);
  return GK_OK;
}

gk_status gk_device_query(int device, gk_device_info *info, gk_error *err)
{
  cudaDeviceProp prop;
  int previous = 0;
  if (check_device_index(device, err)) return err->status;
  if (gk_cuda_status(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", err))
    return err->status;
  info->index = device;
  snprintf(info->name, sizeof info->name, "%s", prop.name);
  info->major = prop.major;
  info->minor = prop.minor;
  info->sm_count = prop.multiProcessorCount;
  info->total_memory = prop.totalGlobalMem;
  info->l2_bytes = (size_t) prop.l2CacheSize;
  info->shared_per_block_optin = prop.sharedMemPerBlockOptin;
  info->max_threads_per_block = prop.maxThreadsPerBlock;
  // Free memory is per device: ask on that device, then go back.
  size_t free_bytes = 0, total_bytes = 0;
  cudaGetDevice(&previous);
  if (gk_cuda_status(cudaSetDevice(device), "cudaSetDevice", err)) return err->status;
  cudaError_t code = cudaMemGetInfo(&free_bytes, &total_bytes);
  cudaSetDevice(previous);
  if (gk_cuda_status(code, "cudaMemGetInfo", err)) return err->status;
  info->free_memory = free_bytes;
  return GK_OK;
}

gk_status gk_device_select(int device, gk_error *err)
{
  if (check_device_index(device, err)) return err->status;
  if (gk_cuda_status(cudaSetDevice(device), "cudaSetDevice", err)) return err->status;
  current_device = device;
  in_use_device = device;
  return GK_OK;
}

int gk_device_current(void) { return current_device; }

int gk_device_active(void) { return thread_device >= 0 ? thread_device : current_device; }

int gk_device_in_use(void) { return in_use_device; }

// Setting the device every time (not only when it differs from the one
// entered last) keeps the promise even if other code in the process changed
// the CUDA device meanwhile; it costs no synchronization.
gk_status gk_device_enter(int device, gk_error *err)
{
  if (device < 0) device = gk_device_active();
  if (device >= GK_MAX_DEVICES)
    return gk_fail(err, GK_ERR_INTERNAL, "device index %d out of range", device);
  if (gk_cuda_status(cudaSetDevice(device), "cudaSetDevice", err)) return err->status;
  in_use_device = device;
  return GK_OK;
}

gk_status gk_device_bind_thread(int device, gk_error *err)
{
  if (device < 0) {
    thread_device = -1;
    return GK_OK;
  }
  if (check_device_index(device, err)) return err->status;
  thread_device = device;
  return gk_device_enter(device, err);
}

size_t gk_memory_budget_of(size_t free_bytes)
{
  return (size_t) ((double) free_bytes * GK_MEMORY_BUDGET_FRACTION);
}

gk_status gk_device_memory_budget(size_t *bytes, gk_error *err)
{
  size_t free_bytes = 0, total_bytes = 0;
  *bytes = 0;
  if (in_use_device < 0 && gk_device_enter(GK_DEVICE_ACTIVE, err)) return err->status;
  if (gk_cuda_status(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo", err))
    return err->status;
  *bytes = gk_memory_budget_of(free_bytes);
  return GK_OK;
}

/* ---- resident objects (gk_resident.h) ---- */

void gk_resident_init(gk_resident *r, gk_resident_kind kind)
{
  r->kind = kind;
  r->device = in_use_device >= 0 ? in_use_device : gk_device_active();
  r->bytes = 0;
}

gk_status gk_resident_enter(const gk_resident *r, gk_error *err)
{
  if (r->device < 0)
    return gk_fail(err, GK_ERR_INTERNAL, "a GPU object without a device");
  return gk_device_enter(r->device, err);
}

// Set unconditionally: other code in the process may have changed the CUDA
// device since this thread last entered one.
int gk_resident_release_begin(const gk_resident *r)
{
  int previous = in_use_device;
  if (r->device >= 0) {
    if (cudaSetDevice(r->device) == cudaSuccess) in_use_device = r->device;
    else cudaGetLastError();
  }
  return previous;
}

void gk_resident_release_end(int previous)
{
  if (previous >= 0) {
    if (cudaSetDevice(previous) == cudaSuccess) in_use_device = previous;
    else cudaGetLastError();
  }
}

/* ---- buffers and streams, on the device in use ---- */

gk_status gk_buffer_alloc(gk_device_buffer *buf, size_t bytes, const char *what, gk_error *err)
{
  buf->ptr = NULL;
  buf->bytes = 0;
  if (bytes == 0) return GK_OK;
  cudaError_t code = cudaMalloc(&buf->ptr, bytes);
  if (code == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    buf->ptr = NULL;
    return gk_fail(err, GK_ERR_NOMEM,
                   "out of GPU memory allocating %s (%.1f MiB requested, %.1f MiB free of %.1f MiB)",
                   what, bytes / 1048576.0, free_bytes / 1048576.0, total_bytes / 1048576.0);
  }
  if (gk_cuda_status(code, what, err)) {
    buf->ptr = NULL;
    return err->status;
  }
  buf->bytes = bytes;
  return GK_OK;
}

void gk_buffer_free(gk_device_buffer *buf)
{
  if (buf->ptr) cudaFree(buf->ptr);
  buf->ptr = NULL;
  buf->bytes = 0;
}

gk_status gk_buffer_upload(gk_device_buffer *dst, const void *src, size_t bytes,
                           gk_stream stream, gk_error *err)
{
  if (bytes == 0) return GK_OK;
  if (bytes > dst->bytes) return gk_fail(err, GK_ERR_INTERNAL, "upload larger than its buffer");
  return gk_cuda_status(cudaMemcpyAsync(dst->ptr, src, bytes, cudaMemcpyHostToDevice,
                                        (cudaStream_t) stream), "copy to the GPU", err);
}

gk_status gk_buffer_download(void *dst, const gk_device_buffer *src, size_t bytes,
                             gk_stream stream, gk_error *err)
{
  if (bytes == 0) return GK_OK;
  if (bytes > src->bytes) return gk_fail(err, GK_ERR_INTERNAL, "download larger than its buffer");
  return gk_cuda_status(cudaMemcpyAsync(dst, src->ptr, bytes, cudaMemcpyDeviceToHost,
                                        (cudaStream_t) stream), "copy from the GPU", err);
}

// Page-locked host memory. cudaMallocHost faults in and pins every 4 KiB page
// on the calling thread, far slower than the copies the buffer then serves,
// and the first large call of a process waits on it. Memory of our own,
// faulted in on several threads, then registered with the driver, is
// page-locked several times faster.
//
// Our own is private memory in 2 MiB pages where the system grants them,
// starting on a large page's boundary when large so that all its pages can
// be large (small ones take whole pages). Shared, it is a segment
// (gk_shared.h) where the system has memory files, offered to other
// processes of this machine: a future worker's GPUs download its blocks of
// results into it and its caller writes them into its result from there
// (gk_channel.h), at the rate of one process (inst/bench/scatter_rate.cu,
// STAGING=shm: downloads and scatters as fast as from private memory).
static void *pinned_memory(gk_pinned_buffer *buf, size_t bytes, int shared)
{
  gk_shared *segment = shared ? (gk_shared *) calloc(1, sizeof(gk_shared)) : NULL;
  gk_error ignored;
  gk_error_clear(&ignored);
  if (segment && gk_shared_create(bytes, segment, &ignored) == GK_OK) {
    if (gk_shared_map(segment, 0, &ignored) == GK_OK) {
      buf->segment = segment;
      return segment->values;
    }
    gk_shared_release(segment);
  }
  free(segment);
  const size_t huge = GK_HOST_HUGE_PAGE, page = 4096;
  size_t align = bytes >= huge ? huge : page;
  size_t rounded = (bytes + align - 1) / align * align;
  void *memory = NULL;
  if (posix_memalign(&memory, align, rounded) != 0) return NULL;
  gk_host_huge_pages(memory, rounded);
  gk_host_prefault(memory, rounded);
  return memory;
}

static void pinned_memory_free(gk_pinned_buffer *buf)
{
  gk_shared *segment = (gk_shared *) buf->segment;
  if (segment) {
    gk_shared_release(segment);
    free(segment);
  } else {
    free(buf->ptr);
  }
  buf->ptr = NULL;
  buf->segment = NULL;
}

static gk_status pinned_alloc(gk_pinned_buffer *buf, size_t bytes, const char *what, int shared,
                              gk_error *err)
{
  buf->ptr = NULL;
  buf->bytes = 0;
  buf->segment = NULL;
  if (bytes == 0) return GK_OK;
  bytes = (bytes + 4095) / 4096 * 4096;   // whole pages: registered whole
  buf->ptr = pinned_memory(buf, bytes, shared);
  if (!buf->ptr)
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory for %.1f MiB of pinned memory for %s",
                   bytes / 1048576.0, what);
  cudaError_t code = cudaHostRegister(buf->ptr, bytes, cudaHostRegisterPortable);
  if (code != cudaSuccess) {
    cudaGetLastError();
    pinned_memory_free(buf);
    return gk_fail(err, GK_ERR_NOMEM, "could not allocate %.1f MiB of pinned host memory for %s: %s",
                   bytes / 1048576.0, what, cudaGetErrorString(code));
  }
  if (buf->segment) gk_shared_offer((gk_shared *) buf->segment);
  buf->bytes = bytes;
  return GK_OK;
}

gk_status gk_pinned_alloc(gk_pinned_buffer *buf, size_t bytes, const char *what, gk_error *err)
{
  return pinned_alloc(buf, bytes, what, 0, err);
}

gk_status gk_pinned_alloc_shared(gk_pinned_buffer *buf, size_t bytes, const char *what,
                                 gk_error *err)
{
  return pinned_alloc(buf, bytes, what, 1, err);
}

void gk_pinned_free(gk_pinned_buffer *buf)
{
  if (buf->ptr) {
    if (buf->segment) gk_shared_withdraw((gk_shared *) buf->segment);   // before it goes
    cudaHostUnregister(buf->ptr);
    pinned_memory_free(buf);
  }
  buf->bytes = 0;
}

gk_status gk_stream_create(gk_stream *stream, int high_priority, gk_error *err)
{
  int least = 0, greatest = 0;
  cudaStream_t s = NULL;
  *stream = NULL;
  if (gk_cuda_status(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream priorities", err))
    return err->status;
  if (gk_cuda_status(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking,
                                                  high_priority ? greatest : least),
                     "cudaStreamCreate", err))
    return err->status;
  *stream = (gk_stream) s;
  return GK_OK;
}

void gk_stream_destroy(gk_stream *stream)
{
  if (*stream) cudaStreamDestroy((cudaStream_t) *stream);
  *stream = NULL;
}

gk_status gk_stream_sync(gk_stream stream, const char *what, gk_error *err)
{
  return gk_cuda_status(cudaStreamSynchronize((cudaStream_t) stream), what, err);
}

}  // extern "C"
