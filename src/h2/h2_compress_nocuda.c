/* The GPU orthogonalization and compression in a CPU-only build: no GPU matrix exists. */
#ifndef GK_HAVE_CUDA
#include <string.h>
#include "h2/h2_compress.h"

gk_status h2_transform_gpu(const h2_tree *t, h2_gpu *in, double tol, int threads,
                           h2_tree *out_tree, h2_gpu **out, h2_compress_stats *st,
                           gk_error *err)
{
  (void) t; (void) in; (void) tol; (void) threads;
  *out = NULL;
  memset(out_tree, 0, sizeof *out_tree);
  memset(st, 0, sizeof *st);
  return gk_fail_no_cuda(err);
}

gk_status h2_svd_left_gpu_host(int nodes, int rows, int cols, const double *w, int single,
                               double *sig, double *u, gk_error *err)
{
  (void) nodes; (void) rows; (void) cols; (void) w; (void) single; (void) sig; (void) u;
  return gk_fail_no_cuda(err);
}

size_t h2_gpu_own_bytes(const h2_gpu *g)
{
  (void) g;
  return 0;
}
#else
/* ISO C forbids an empty translation unit. */
typedef int gk_h2_compress_nocuda_unused;
#endif
