// Device matrices (device_matrix.h). Float conversion happens on the host, so
// nothing here launches a kernel; copies are synchronous on the default stream.
#include <math.h>
#include <stdlib.h>
#include "device/device_matrix.h"
#include "device/gk_cuda.h"

static double smallest(const double *x, size_t count)
{
  double lo = INFINITY;
  for (size_t i = 0; i < count; i++)
    if (x[i] < lo) lo = x[i];
  return lo;
}

extern "C" gk_status device_matrix_upload(gk_device_matrix *dm, const double *x, size_t rows,
                                          int cols, int single, gk_error *err)
{
  size_t count = rows * (size_t) cols;
  float *staging = NULL;
  if (gk_device_enter(GK_DEVICE_ACTIVE, err)) return err->status;
  gk_resident_init(&dm->res, GK_RESIDENT_DEVICE_MATRIX);
  dm->rows = rows;
  dm->cols = cols;
  dm->single = single;
  dm->min_value = smallest(x, count);
  GK_TRY(gk_buffer_alloc(&dm->buf, count * (single ? sizeof(float) : sizeof(double)),
                         "a device matrix", err));
  if (single) {
    staging = (float *) malloc(count * sizeof(float) + 1);
    if (!staging) {
      gk_fail(err, GK_ERR_NOMEM, "out of host memory converting a device matrix to float");
      goto fail;
    }
    for (size_t i = 0; i < count; i++) staging[i] = (float) x[i];
    GK_TRY(gk_buffer_upload(&dm->buf, staging, dm->buf.bytes, NULL, err));
  } else {
    GK_TRY(gk_buffer_upload(&dm->buf, x, dm->buf.bytes, NULL, err));
  }
  GK_TRY(gk_stream_sync(NULL, "uploading a device matrix", err));
  dm->res.bytes = dm->buf.bytes;
fail:
  free(staging);
  if (err->status) gk_buffer_free(&dm->buf);
  return err->status;
}

extern "C" gk_status device_matrix_download(const gk_device_matrix *dm, double *out, gk_error *err)
{
  size_t count = dm->rows * (size_t) dm->cols;
  float *staging = NULL;
  if (count == 0) return GK_OK;
  if (gk_resident_enter(&dm->res, err)) return err->status;
  if (dm->single) {
    staging = (float *) malloc(count * sizeof(float) + 1);
    if (!staging) return gk_fail(err, GK_ERR_NOMEM, "out of host memory reading a device matrix");
    GK_TRY(gk_buffer_download(staging, &dm->buf, dm->buf.bytes, NULL, err));
  } else {
    GK_TRY(gk_buffer_download(out, &dm->buf, dm->buf.bytes, NULL, err));
  }
  GK_TRY(gk_stream_sync(NULL, "downloading a device matrix", err));
  if (staging)
    for (size_t i = 0; i < count; i++) out[i] = staging[i];
fail:
  free(staging);
  return err->status;
}

extern "C" void device_matrix_free(gk_device_matrix *dm)
{
  if (!dm->buf.ptr) return;
  int previous = gk_resident_release_begin(&dm->res);
  gk_buffer_free(&dm->buf);
  dm->res.bytes = 0;
  gk_resident_release_end(previous);
}
