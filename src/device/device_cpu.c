/* The device layer of a CPU-only build: no devices, and every request for one
 * fails with the same clear message. Compiled only without CUDA. */
#ifndef GK_HAVE_CUDA
#include <stdio.h>
#include "device/gk_device.h"
#include "device/gk_resident.h"

int gk_cuda_built(void) { return 0; }
int gk_cuda_runtime_version(void) { return 0; }
int gk_cuda_driver_version(void) { return 0; }

int gk_device_count(char *why, size_t why_size)
{
  if (why) snprintf(why, why_size, "this build of gpukernels has no CUDA support");
  return 0;
}

gk_status gk_device_query(int device, gk_device_info *info, gk_error *err)
{
  (void) device; (void) info;
  return gk_fail_no_cuda(err);
}

gk_status gk_device_select(int device, gk_error *err)
{
  (void) device;
  return gk_fail_no_cuda(err);
}

int gk_device_current(void) { return -1; }

gk_status gk_device_bind_thread(int device, gk_error *err)
{
  if (device < 0) return GK_OK;
  return gk_fail_no_cuda(err);
}

int gk_device_active(void) { return -1; }
int gk_device_in_use(void) { return -1; }

gk_status gk_device_enter(int device, gk_error *err)
{
  (void) device;
  return gk_fail_no_cuda(err);
}

size_t gk_memory_budget_of(size_t free_bytes)
{
  return (size_t) ((double) free_bytes * GK_MEMORY_BUDGET_FRACTION);
}

gk_status gk_device_memory_budget(size_t *bytes, gk_error *err)
{
  *bytes = 0;
  return gk_fail_no_cuda(err);
}

int gk_device_sm_count(void) { return 1; }

size_t gk_device_shared_optin(void) { return 0; }

gk_status gk_device_scratch(gk_scratch_slot slot, size_t bytes, const char *what, void **ptr,
                            gk_error *err)
{
  (void) slot; (void) bytes; (void) what;
  *ptr = NULL;
  return gk_fail_no_cuda(err);
}

gk_status gk_pinned_scratch(gk_pinned_slot slot, size_t bytes, const char *what, void **ptr,
                            gk_error *err)
{
  (void) slot; (void) bytes; (void) what;
  *ptr = NULL;
  return gk_fail_no_cuda(err);
}

gk_status gk_pinned_scratch_shared(gk_pinned_slot slot, size_t bytes, const char *what,
                                   void **ptr, gk_error *err)
{
  return gk_pinned_scratch(slot, bytes, what, ptr, err);
}

gk_status gk_staged_upload(void *device_dst, const void *host_src, size_t bytes,
                           gk_stream stream, gk_error *err)
{
  (void) device_dst; (void) host_src; (void) bytes; (void) stream;
  return gk_fail_no_cuda(err);
}

gk_status gk_staged_download(void *host_dst, const void *device_src, size_t bytes,
                             gk_stream stream, gk_error *err)
{
  (void) host_dst; (void) device_src; (void) bytes; (void) stream;
  return gk_fail_no_cuda(err);
}

void gk_resident_init(gk_resident *r, gk_resident_kind kind)
{
  r->kind = kind;
  r->device = -1;
  r->bytes = 0;
}

gk_status gk_resident_enter(const gk_resident *r, gk_error *err)
{
  (void) r;
  return gk_fail_no_cuda(err);
}

int gk_resident_release_begin(const gk_resident *r)
{
  (void) r;
  return -1;
}

void gk_resident_release_end(int previous) { (void) previous; }

gk_status gk_buffer_alloc(gk_device_buffer *buf, size_t bytes, const char *what, gk_error *err)
{
  (void) buf; (void) bytes; (void) what;
  return gk_fail_no_cuda(err);
}

void gk_buffer_free(gk_device_buffer *buf) { buf->ptr = NULL; buf->bytes = 0; }

gk_status gk_buffer_upload(gk_device_buffer *dst, const void *src, size_t bytes,
                           gk_stream stream, gk_error *err)
{
  (void) dst; (void) src; (void) bytes; (void) stream;
  return gk_fail_no_cuda(err);
}

gk_status gk_buffer_download(void *dst, const gk_device_buffer *src, size_t bytes,
                             gk_stream stream, gk_error *err)
{
  (void) dst; (void) src; (void) bytes; (void) stream;
  return gk_fail_no_cuda(err);
}

gk_status gk_pinned_alloc(gk_pinned_buffer *buf, size_t bytes, const char *what, gk_error *err)
{
  (void) buf; (void) bytes; (void) what;
  return gk_fail_no_cuda(err);
}

gk_status gk_pinned_alloc_shared(gk_pinned_buffer *buf, size_t bytes, const char *what,
                                 gk_error *err)
{
  return gk_pinned_alloc(buf, bytes, what, err);
}

void gk_pinned_free(gk_pinned_buffer *buf)
{
  buf->ptr = NULL;
  buf->bytes = 0;
  buf->segment = NULL;
}

gk_status gk_stream_create(gk_stream *stream, int high_priority, gk_error *err)
{
  (void) high_priority;
  *stream = NULL;
  return gk_fail_no_cuda(err);
}

void gk_stream_destroy(gk_stream *stream) { *stream = NULL; }

gk_status gk_stream_sync(gk_stream stream, const char *what, gk_error *err)
{
  (void) stream; (void) what;
  return gk_fail_no_cuda(err);
}

void gk_device_release_all(void) {}
#else
/* ISO C forbids an empty translation unit. */
typedef int gk_device_cpu_unused;
#endif
