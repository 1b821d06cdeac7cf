/* The GPU solver and factor of the GP engine in a CPU-only build: none can run. */
#ifndef GK_HAVE_CUDA
#include "gp/gp.h"

gk_status gp_gpu_block_cg(const gp_gpu_operator *op, int n, int m, const int *nbr,
                          const double *coef, const gp_gpu_factor *fac, int nblocks,
                          const double *const *b, const int *b_cols, int g_blocks,
                          const double *tol, int maxit, gp_cg_result *res, gk_error *err)
{
  (void) op; (void) n; (void) m; (void) nbr; (void) coef; (void) fac; (void) nblocks; (void) b;
  (void) b_cols; (void) g_blocks; (void) tol; (void) maxit; (void) res;
  return gk_fail_no_cuda(err);
}

gk_status gp_gpu_factor_download(const gp_gpu_factor *f, double *coef, gk_error *err)
{
  (void) f; (void) coef;
  return gk_fail_no_cuda(err);
}

void gp_gpu_factor_free(gp_gpu_factor *f) { (void) f; }

gk_status gp_gpu_vecchia_rows(const double *xs, int n, int dim, const int *nbr, int m,
                              const gk_kernel *kernel, const gk_kernel *dkernel, double nugget,
                              const gp_rows_options *rows, double *out, double *stats,
                              gp_gpu_factor *keep, gk_error *err)
{
  (void) xs; (void) n; (void) dim; (void) nbr; (void) m; (void) kernel; (void) dkernel;
  (void) nugget; (void) rows; (void) out; (void) stats; (void) keep;
  return gk_fail_no_cuda(err);
}

gk_status gp_tiled_sigma_apply(void *ctx, const double *x, int nrhs, double *y, gk_error *err)
{
  (void) ctx; (void) x; (void) nrhs; (void) y;
  return gk_fail_no_cuda(err);
}

gk_status gp_gpu_dense(const double *xs, int n, int dim, const gk_kernel *kernel,
                       const gk_formula *formula, double nugget, const double *rhs, int q,
                       int nterms, const gp_dense_term *terms, int want_info,
                       gp_dense_result *res, gk_error *err)
{
  (void) xs; (void) n; (void) dim; (void) kernel; (void) formula; (void) nugget; (void) rhs; (void) q;
  (void) nterms; (void) terms; (void) want_info; (void) res;
  return gk_fail_no_cuda(err);
}

gk_status gp_gpu_dense_krige(const double *xs, int n, int dim, const gk_kernel *kernel,
                             double nugget, const double *X, int p, const double *xnew, int m,
                             double *vq, double *xsc, double *xsx, gk_error *err)
{
  (void) xs; (void) n; (void) dim; (void) kernel; (void) nugget; (void) X; (void) p;
  (void) xnew; (void) m; (void) vq; (void) xsc; (void) xsx;
  return gk_fail_no_cuda(err);
}
#else
typedef int gp_nocuda_unused;   /* ISO C wants a declaration in every file */
#endif
