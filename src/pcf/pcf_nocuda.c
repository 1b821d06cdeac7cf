/* The GPU PCF engine in a CPU-only build: fails with the no-CUDA error. */
#ifndef GK_HAVE_CUDA
#include "pcf/pcf.h"

gk_status pcf_matrix_cuda(const pcf_op *op, const pcf_set *x, const pcf_set *y,
                          const gk_block_writer *writer, const pcf_options *options,
                          gk_error *err)
{
  (void) op; (void) x; (void) y; (void) writer; (void) options;
  return gk_fail_no_cuda(err);
}
#else
/* ISO C forbids an empty translation unit. */
typedef int gk_pcf_nocuda_unused;
#endif
