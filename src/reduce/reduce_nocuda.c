/* The GPU reduction engine in a CPU-only build: fails with the no-CUDA error. */
#ifndef GK_HAVE_CUDA
#include "reduce/reduce.h"

gk_status reduce_cuda(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                      const gk_reduce_operand *y, const gk_reduce_operand *b,
                      double *out, int *index, gk_error *err)
{
  (void) spec; (void) x; (void) y; (void) b; (void) out; (void) index;
  return gk_fail_no_cuda(err);
}

gk_status reduce_cuda_devices(const gk_reduce_spec *spec, const gk_reduce_operand *x,
                              const gk_reduce_operand *y, const gk_reduce_operand *b,
                              double *out, int *index, const int *devices, int n_devices,
                              gk_error *err)
{
  (void) spec; (void) x; (void) y; (void) b; (void) out; (void) index; (void) devices;
  (void) n_devices;
  return gk_fail_no_cuda(err);
}

gk_status reduce_cuda_warmup(int count, const gk_reduce_spec *specs, const int *dims,
                             const int *cols, const int *ranged, const int *rows, int threads,
                             int check_arch, gk_error *err)
{
  (void) count; (void) specs; (void) dims; (void) cols; (void) ranged; (void) rows; (void) threads;
  (void) check_arch;
  return gk_fail_no_cuda(err);
}

/* A CPU-only build never fills a plan: nothing to free. */
void reduce_plan_free(gk_reduce_plan *plan)
{
  (void) plan;
}
#else
/* ISO C forbids an empty translation unit. */
typedef int gk_reduce_nocuda_unused;
#endif
