/* The run-time compiler in a CPU-only build: nothing to compile for. */
#ifndef GK_HAVE_CUDA
#include "device/gk_jit.h"

gk_status gk_jit_kernels(const char *source, int count, const char *const *names,
                         const char *what, const void **kernels, gk_error *err)
{
  (void) source; (void) count; (void) names; (void) what; (void) kernels;
  return gk_fail_no_cuda(err);
}

gk_status gk_jit_compile_check(const char *source, int count, const char *const *names,
                               int arch, const char *what, gk_error *err)
{
  (void) source; (void) count; (void) names; (void) arch; (void) what;
  return gk_fail_no_cuda(err);
}

void gk_jit_forget(void) {}
#endif
