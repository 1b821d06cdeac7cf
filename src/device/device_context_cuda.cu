// The per-device context of the device layer (gk_device.h, gk_cuda.h): what
// stays on a GPU between calls without belonging to one object — library
// handles, scratch and staging buffers, facts about the device. One context
// per device, indexed by the device the calling thread has entered; a mutex
// per context guards their lazy creation.
#include <mutex>
#include <vector>
#include "device/gk_cuda.h"
#include "device/gk_memory.h"

#define GK_MAX_DEVICES 64

namespace {

struct occupancy_entry {
  const void *kernel;
  int block;
  size_t smem;
  int blocks;
};

struct device_context {
  std::mutex lock;
  cublasHandle_t cublas[GK_BLAS_LANES] = {};
  cusolverDnHandle_t cusolver = NULL;
  gk_device_buffer scratch[GK_SCRATCH_SLOTS] = {};
  gk_pinned_buffer pinned[GK_PINNED_SLOTS] = {};
  int sm_count = 0;                       // 0: not asked yet
  int arch = 0;                           // 10 major + minor; 0: not asked yet
  int shared_optin = 0;                   // bytes; 0: not asked yet
  std::vector<occupancy_entry> occupancy;
};

device_context contexts[GK_MAX_DEVICES];

// The context of the device in use; enters the active device if the calling
// thread has entered none (every engine enters one first; this is a guard).
device_context *context_of_device_in_use(gk_error *err)
{
  int device = gk_device_in_use();
  if (device < 0) {
    gk_error local;
    gk_error_clear(&local);
    if (gk_device_enter(GK_DEVICE_ACTIVE, err ? err : &local)) return NULL;
    device = gk_device_in_use();
  }
  if (device < 0 || device >= GK_MAX_DEVICES) {
    if (err) gk_fail(err, GK_ERR_INTERNAL, "device %d has no context", device);
    return NULL;
  }
  return &contexts[device];
}

// Attribute `attr` of the device in use, asked once per device and kept in
// the context's `field` (0: not asked yet); 0 when the driver cannot say (not
// kept: asked again next time).
int cached_attribute(int device_context::*field, cudaDeviceAttr attr)
{
  device_context *ctx = context_of_device_in_use(NULL);
  if (!ctx) return 0;
  std::lock_guard<std::mutex> guard(ctx->lock);
  if (!(ctx->*field)) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, attr, gk_device_in_use()) != cudaSuccess || value < 1) {
      cudaGetLastError();
      return 0;
    }
    ctx->*field = value;
  }
  return ctx->*field;
}

}  // namespace

extern "C" {

gk_status gk_cublas_handle(int lane, gk_stream stream, cublasHandle_t *handle, gk_error *err)
{
  *handle = NULL;
  if (lane < 0 || lane >= GK_BLAS_LANES)
    return gk_fail(err, GK_ERR_INTERNAL, "cuBLAS lane %d does not exist", lane);
  device_context *ctx = context_of_device_in_use(err);
  if (!ctx) return err->status;
  std::lock_guard<std::mutex> guard(ctx->lock);
  if (!ctx->cublas[lane]) {
    cublasHandle_t h = NULL;
    if (gk_cublas_status(cublasCreate(&h), "creating a cuBLAS handle", err)) return err->status;
    ctx->cublas[lane] = h;
  }
  if (gk_cublas_status(cublasSetStream(ctx->cublas[lane], (cudaStream_t) stream),
                       "binding a cuBLAS handle to a stream", err))
    return err->status;
  *handle = ctx->cublas[lane];
  return GK_OK;
}

gk_status gk_cusolver_handle(cusolverDnHandle_t *handle, gk_error *err)
{
  *handle = NULL;
  device_context *ctx = context_of_device_in_use(err);
  if (!ctx) return err->status;
  std::lock_guard<std::mutex> guard(ctx->lock);
  if (!ctx->cusolver) {
    cusolverDnHandle_t h = NULL;
    if (gk_cusolver_status(cusolverDnCreate(&h), "creating a cuSOLVER handle", err))
      return err->status;
    ctx->cusolver = h;
  }
  *handle = ctx->cusolver;
  return GK_OK;
}

int gk_device_sm_count(void)
{
  int sms = cached_attribute(&device_context::sm_count, cudaDevAttrMultiProcessorCount);
  return sms > 0 ? sms : 1;
}

size_t gk_device_shared_optin(void)
{
  return (size_t) cached_attribute(&device_context::shared_optin,
                                   cudaDevAttrMaxSharedMemoryPerBlockOptin);
}

int gk_device_arch(void)
{
  device_context *ctx = context_of_device_in_use(NULL);
  if (!ctx) return 0;
  std::lock_guard<std::mutex> guard(ctx->lock);
  if (!ctx->arch) {
    int major = 0, minor = 0, device = gk_device_in_use();
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      cudaGetLastError();
      return 0;   // not cached: asked again next time
    }
    ctx->arch = 10 * major + minor;
  }
  return ctx->arch;
}

int gk_device_occupancy(const void *kernel, int block, size_t smem)
{
  device_context *ctx = context_of_device_in_use(NULL);
  if (!ctx) return 1;
  std::lock_guard<std::mutex> guard(ctx->lock);
  for (const occupancy_entry &e : ctx->occupancy)
    if (e.kernel == kernel && e.block == block && e.smem == smem) return e.blocks;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, block, smem) != cudaSuccess) {
    cudaGetLastError();
    return 1;   // not cached: asked again next time
  }
  if (blocks < 1) blocks = 1;
  try {
    ctx->occupancy.push_back({kernel, block, smem, blocks});
  } catch (...) {
    // not cached; the answer is still right
  }
  return blocks;
}

gk_status gk_device_scratch(gk_scratch_slot slot, size_t bytes, const char *what, void **ptr,
                            gk_error *err)
{
  *ptr = NULL;
  if (slot < 0 || slot >= GK_SCRATCH_SLOTS)
    return gk_fail(err, GK_ERR_INTERNAL, "scratch slot %d does not exist", (int) slot);
  device_context *ctx = context_of_device_in_use(err);
  if (!ctx) return err->status;
  std::lock_guard<std::mutex> guard(ctx->lock);
  gk_device_buffer *buf = &ctx->scratch[slot];
  if (buf->ptr && buf->bytes >= bytes) {
    *ptr = buf->ptr;
    return GK_OK;
  }
  gk_buffer_free(buf);
  // Grow with headroom so that slowly growing sizes do not reallocate every call.
  size_t want = bytes + bytes / 4;
  size_t budget = 0;
  if (gk_memory_check_device((double) bytes, what, "use smaller inputs or the CPU", &budget, err))
    return err->status;
  if (want > budget) want = budget;
  if (gk_buffer_alloc(buf, want, what, err)) return err->status;
  *ptr = buf->ptr;
  return GK_OK;
}

// Shared scratch serves private requests too; a shared request finding
// private memory makes it again, shared.
static gk_status pinned_scratch(gk_pinned_slot slot, size_t bytes, const char *what, int shared,
                                void **ptr, gk_error *err)
{
  *ptr = NULL;
  device_context *ctx = context_of_device_in_use(err);
  if (!ctx) return err->status;
  std::lock_guard<std::mutex> guard(ctx->lock);
  if (slot < 0 || slot >= GK_PINNED_SLOTS)
    return gk_fail(err, GK_ERR_INTERNAL, "no pinned scratch slot %d", (int) slot);
  gk_pinned_buffer *buf = &ctx->pinned[slot];
  if (!buf->ptr || buf->bytes < bytes || (shared && !buf->segment)) {
    gk_pinned_free(buf);
    size_t want = bytes + bytes / 4 + 1;
    if ((shared ? gk_pinned_alloc_shared : gk_pinned_alloc)(buf, want, what, err))
      return err->status;
  }
  *ptr = buf->ptr;
  return GK_OK;
}

gk_status gk_pinned_scratch(gk_pinned_slot slot, size_t bytes, const char *what, void **ptr,
                            gk_error *err)
{
  return pinned_scratch(slot, bytes, what, 0, ptr, err);
}

gk_status gk_pinned_scratch_shared(gk_pinned_slot slot, size_t bytes, const char *what,
                                   void **ptr, gk_error *err)
{
  return pinned_scratch(slot, bytes, what, 1, ptr, err);
}

// Pieces of a staged copy: large enough that gk_host_copy runs on all its
// threads (one per MiB), small enough that the staging stays bounded (two
// pieces) whatever the size of the copy.
#define GK_STAGE_PIECE ((size_t) 8 << 20)

// One staged copy of `bytes` (upload: host to device) through the staging's
// two halves: the host copy of one piece overlaps the DMA of the other.
static gk_status staged_copy(void *dst, const void *src, size_t bytes, int upload,
                             gk_stream stream, gk_error *err)
{
  cudaStream_t s = (cudaStream_t) stream;
  const size_t pieces = (bytes + GK_STAGE_PIECE - 1) / GK_STAGE_PIECE;
  const size_t half = pieces > 1 ? GK_STAGE_PIECE : bytes;
  cudaEvent_t done[2] = {NULL, NULL};   // the last DMA of each half
  char *host = NULL;
  void *staging = NULL;
  if (bytes == 0) return GK_OK;
  GK_TRY(gk_pinned_scratch(GK_PINNED_STAGING, pieces > 1 ? 2 * half : half, "staging host copies",
                           &staging, err));
  host = (char *) staging;
  for (int h = 0; pieces > 1 && h < 2; h++)
    GK_CUDA_TRY(cudaEventCreateWithFlags(&done[h], cudaEventDisableTiming), "staging events", err);
  if (!upload) {   // the first two pieces' DMA start at once
    for (size_t q = 0; q < pieces && q < 2; q++) {
      size_t at = q * half, len = bytes - at < half ? bytes - at : half;
      GK_CUDA_TRY(cudaMemcpyAsync(host + q * half, (const char *) src + at, len,
                                  cudaMemcpyDeviceToHost, s), "copy from the GPU", err);
      if (pieces > 1) GK_CUDA_TRY(cudaEventRecord(done[q], s), "staging events", err);
    }
  }
  for (size_t q = 0; q < pieces; q++) {
    size_t at = q * half, len = bytes - at < half ? bytes - at : half;
    char *piece = host + (q % 2) * half;
    if (pieces > 1 && (!upload || q >= 2))   // this half's previous DMA is done
      GK_CUDA_TRY(cudaEventSynchronize(done[q % 2]), upload ? "copy to the GPU"
                  : "copy from the GPU", err);
    else if (!upload)
      GK_CUDA_TRY(cudaStreamSynchronize(s), "copy from the GPU", err);
    if (upload) {
      gk_host_copy(piece, (const char *) src + at, len);
      GK_CUDA_TRY(cudaMemcpyAsync((char *) dst + at, piece, len, cudaMemcpyHostToDevice, s),
                  "copy to the GPU", err);
      if (pieces > 1) GK_CUDA_TRY(cudaEventRecord(done[q % 2], s), "staging events", err);
    } else {
      gk_host_copy((char *) dst + at, piece, len);
      size_t next = (q + 2) * half;
      if (next < bytes) {
        size_t nlen = bytes - next < half ? bytes - next : half;
        GK_CUDA_TRY(cudaMemcpyAsync(piece, (const char *) src + next, nlen,
                                    cudaMemcpyDeviceToHost, s), "copy from the GPU", err);
        GK_CUDA_TRY(cudaEventRecord(done[q % 2], s), "staging events", err);
      }
    }
  }
  // the staging is reused by the next call: an upload finishes here too
  if (upload) GK_CUDA_TRY(cudaStreamSynchronize(s), "copy to the GPU", err);
  for (int h = 0; h < 2; h++)
    if (done[h]) cudaEventDestroy(done[h]);
  return GK_OK;
fail:
  cudaStreamSynchronize(s);   // no DMA left into or out of the staging
  cudaGetLastError();
  for (int h = 0; h < 2; h++)
    if (done[h]) cudaEventDestroy(done[h]);
  return err->status;
}

gk_status gk_staged_upload(void *device_dst, const void *host_src, size_t bytes,
                           gk_stream stream, gk_error *err)
{
  return staged_copy(device_dst, host_src, bytes, 1, stream, err);
}

gk_status gk_staged_download(void *host_dst, const void *device_src, size_t bytes,
                             gk_stream stream, gk_error *err)
{
  return staged_copy(host_dst, device_src, bytes, 0, stream, err);
}

void gk_device_release_all(void)
{
  int previous = gk_device_in_use();
  for (int d = 0; d < GK_MAX_DEVICES; d++) {
    device_context *ctx = &contexts[d];
    std::lock_guard<std::mutex> guard(ctx->lock);
    bool holds = ctx->cusolver != NULL;
    for (int p = 0; p < GK_PINNED_SLOTS; p++) holds = holds || ctx->pinned[p].ptr;
    for (int l = 0; l < GK_BLAS_LANES; l++) holds = holds || ctx->cublas[l];
    for (int s = 0; s < GK_SCRATCH_SLOTS; s++) holds = holds || ctx->scratch[s].ptr;
    if (!holds) continue;
    // Handles and buffers are freed on the device that made them.
    cudaSetDevice(d);
    cudaDeviceSynchronize();
    for (int l = 0; l < GK_BLAS_LANES; l++) {
      if (ctx->cublas[l]) cublasDestroy(ctx->cublas[l]);
      ctx->cublas[l] = NULL;
    }
    if (ctx->cusolver) cusolverDnDestroy(ctx->cusolver);
    ctx->cusolver = NULL;
    for (int s = 0; s < GK_SCRATCH_SLOTS; s++) gk_buffer_free(&ctx->scratch[s]);
    for (int p = 0; p < GK_PINNED_SLOTS; p++) gk_pinned_free(&ctx->pinned[p]);
  }
  cudaGetLastError();
  if (previous >= 0) cudaSetDevice(previous);
}

}  // extern "C"
