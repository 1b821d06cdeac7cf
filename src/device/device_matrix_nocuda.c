/* Device matrices in a CPU-only build: none can be made. */
#ifndef GK_HAVE_CUDA
#include <stdlib.h>
#include "device/device_matrix.h"

gk_status device_matrix_upload(gk_device_matrix *dm, const double *x, size_t rows, int cols,
                               int single, int may_centre, gk_error *err)
{
  (void) dm; (void) x; (void) rows; (void) cols; (void) single; (void) may_centre;
  return gk_fail_no_cuda(err);
}

gk_status device_matrix_download(const gk_device_matrix *dm, double *out, gk_error *err)
{
  (void) dm; (void) out;
  return gk_fail_no_cuda(err);
}

void device_matrix_free(gk_device_matrix *dm)
{
  free(dm->centre);   /* never set here; for symmetry with the CUDA build */
  dm->centre = NULL;
}
#else
/* ISO C forbids an empty translation unit. */
typedef int gk_device_matrix_nocuda_unused;
#endif
