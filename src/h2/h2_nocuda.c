/* The GPU backend of the H2 engine in a CPU-only build: none can be built. */
#ifndef GK_HAVE_CUDA
#include "h2/h2.h"
#include "h2/h2_otf.h"

gk_status h2_gpu_build(const h2_tree *t, int single, h2_gpu **out, gk_error *err)
{
  (void) t; (void) single;
  *out = NULL;
  return gk_fail_no_cuda(err);
}

gk_status h2_gpu_matmul(const h2_tree *t, h2_gpu *g, const double *x, int nrhs, double *y,
                        gk_error *err)
{
  (void) t; (void) g; (void) x; (void) nrhs; (void) y;
  return gk_fail_no_cuda(err);
}

gk_status h2_gpu_matmul_device(const h2_tree *t, h2_gpu *g, const double *x, int nrhs,
                               double *y, int tree_order, gk_error *err)
{
  (void) t; (void) g; (void) x; (void) nrhs; (void) y; (void) tree_order;
  return gk_fail_no_cuda(err);
}

gk_status h2_gpu_matmul_rows(const h2_tree *t, h2_gpu *g, int nblocks, const double *const *x,
                             const int *cols, const int *rows, int nrows, double *y,
                             gk_error *err)
{
  (void) t; (void) g; (void) nblocks; (void) x; (void) cols; (void) rows; (void) nrows; (void) y;
  return gk_fail_no_cuda(err);
}

int h2_gpu_device(const h2_gpu *g)
{
  (void) g;
  return -1;
}

gk_status h2_gpu_time_hmv(const h2_tree *t, h2_gpu *g, int nrhs, int reps, int cublas_only,
                          double *ms, gk_error *err)
{
  (void) t; (void) g; (void) nrhs; (void) reps; (void) cublas_only; (void) ms;
  return gk_fail_no_cuda(err);
}

void h2_gpu_free(h2_gpu *g) { (void) g; }

gk_status h2_gpu_export(const h2_tree *t, h2_gpu *g, int threads, h2_host_data *d, gk_error *err)
{
  (void) t; (void) g; (void) threads; (void) d;
  return gk_fail_no_cuda(err);
}

gk_status h2_gpu_import(const h2_tree *t, int single, const h2_host_data *d,
                        struct h2_otf_s *dense_otf, h2_gpu **out, gk_error *err)
{
  (void) t; (void) single; (void) d;
  h2_otf_free(dense_otf);   // owned, also on failure
  *out = NULL;
  return gk_fail_no_cuda(err);
}

gk_status h2_gpu_build_split(const h2_tree *const *trees, int parts, int single,
                             const int *devices, h2_gpu **gpus, gk_error *err)
{
  (void) trees; (void) single; (void) devices;
  for (int p = 0; p < parts; p++) gpus[p] = NULL;
  return gk_fail_no_cuda(err);
}

gk_status h2_gpu_split_host(h2_split_work **work, size_t entries, double **x, double **y,
                            gk_error *err)
{
  (void) work; (void) entries;
  *x = *y = NULL;
  return gk_fail_no_cuda(err);
}

gk_status h2_gpu_matmul_split(const h2_tree *const *trees, h2_gpu *const *gpus, int parts,
                              const int *rows, int nrhs, h2_split_work **work, gk_error *err)
{
  (void) trees; (void) gpus; (void) parts; (void) rows; (void) nrhs; (void) work;
  return gk_fail_no_cuda(err);
}

void h2_split_work_free(h2_split_work *work)
{
  (void) work;
}

size_t h2_gpu_otf_host_bytes(const h2_gpu *g)
{
  (void) g;
  return 0;
}
#else
/* ISO C forbids an empty translation unit. */
typedef int gk_h2_nocuda_unused;
#endif
