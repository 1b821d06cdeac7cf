// Device matrices (device_matrix.h). Centring and float conversion happen on
// the host, so nothing here launches a kernel; copies are synchronous on the
// default stream.
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
                                          int cols, int single, int may_centre, gk_error *err)
{
  size_t count = rows * (size_t) cols;
  void *staging = NULL;
  if (gk_device_enter(GK_DEVICE_ACTIVE, err)) return err->status;
  gk_resident_init(&dm->res, GK_RESIDENT_DEVICE_MATRIX);
  dm->rows = rows;
  dm->cols = cols;
  dm->single = single;
  dm->min_value = smallest(x, count);
  dm->centre = (double *) malloc((cols > 0 ? cols : 1) * sizeof(double));
  if (!dm->centre) return gk_fail(err, GK_ERR_NOMEM, "out of host memory for a device matrix");
  if (!may_centre || !device_matrix_centre(x, rows, cols, dm->centre)) {
    free(dm->centre);
    dm->centre = NULL;
  }
  GK_TRY(gk_buffer_alloc(&dm->buf, count * (single ? sizeof(float) : sizeof(double)),
                         "a device matrix", err));
  if (single || dm->centre) {
    // x - c in double, then rounded (single): the rounding keeps the digits
    // of differences far from the origin.
    staging = malloc(dm->buf.bytes + 1);
    if (!staging) {
      gk_fail(err, GK_ERR_NOMEM, "out of host memory converting a device matrix");
      goto fail;
    }
    for (int k = 0; k < cols; k++) {
      const double c = dm->centre ? dm->centre[k] : 0.0, *src = x + (size_t) k * rows;
      size_t at = (size_t) k * rows;
      if (single)
        for (size_t i = 0; i < rows; i++) ((float *) staging)[at + i] = (float) (src[i] - c);
      else
        for (size_t i = 0; i < rows; i++) ((double *) staging)[at + i] = src[i] - c;
    }
    GK_TRY(gk_buffer_upload(&dm->buf, staging, dm->buf.bytes, NULL, err));
  } else {
    // staged: the GP's probes are 0.4 GB at n = 1e6, which the driver would
    // copy as pageable memory on one thread
    GK_TRY(gk_staged_upload(dm->buf.ptr, x, dm->buf.bytes, NULL, err));
  }
  GK_TRY(gk_stream_sync(NULL, "uploading a device matrix", err));
  dm->res.bytes = dm->buf.bytes;
fail:
  free(staging);
  if (err->status) {
    gk_buffer_free(&dm->buf);
    free(dm->centre);
    dm->centre = NULL;
  }
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
  // The centre back, in double (exact for double storage: device_matrix.h).
  for (int k = 0; dm->centre && k < dm->cols; k++) {
    const double c = dm->centre[k];
    double *col = out + (size_t) k * dm->rows;
    if (c != 0.0)
      for (size_t i = 0; i < dm->rows; i++) col[i] += c;
  }
fail:
  free(staging);
  return err->status;
}

extern "C" void device_matrix_free(gk_device_matrix *dm)
{
  free(dm->centre);
  dm->centre = NULL;
  if (!dm->buf.ptr) return;
  int previous = gk_resident_release_begin(&dm->res);
  gk_buffer_free(&dm->buf);
  dm->res.bytes = 0;
  gk_resident_release_end(previous);
}
