/* The GPU mirror of on-the-fly H2 matrices in a CPU-only build: none. */
#ifndef GK_HAVE_CUDA
#include "h2/h2_otf.h"

gk_status h2_otf_upload(h2_otf *o, gk_error *err)
{
  (void) o;
  return gk_fail_no_cuda(err);
}

size_t h2_otf_device_bytes(const h2_otf *o)
{
  (void) o;
  return 0;
}

void h2_otf_device_free(h2_otf *o) { (void) o; }

gk_status h2_otf_gpu_product(h2_otf *o, const h2_tree *t, int single, int gpu, void *stream,
                             int which, const void *x, int ldx, void *y, int ldy, int nrhs,
                             gk_error *err)
{
  (void) o; (void) t; (void) single; (void) gpu; (void) stream; (void) which;
  (void) x; (void) ldx; (void) y; (void) ldy; (void) nrhs;
  return gk_fail_no_cuda(err);
}
gk_status h2_gpu_build_otf(const h2_tree *t, int single, h2_otf *otf, h2_gpu **out,
                           gk_error *err)
{
  (void) t; (void) single;
  h2_otf_free(otf);
  *out = NULL;
  return gk_fail_no_cuda(err);
}
#else
/* ISO C forbids an empty translation unit. */
typedef int gk_h2_otf_nocuda_unused;
#endif
