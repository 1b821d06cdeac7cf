/*
 * The exact (dense) Gaussian likelihood and kriging on the GPU (gp.h): Sigma
 * is formed on the device by the kernel-matrix engine, factored by cuSOLVER's
 * Cholesky, and everything of size n^2 stays there; only the n x q solutions
 * and a few numbers per derivative come back.
 *
 * The gradient's traces tr(Sigma^-1 D) use Sigma^-1 itself (potri, read from
 * its lower triangle). The Fisher information needs
 * tr(Sigma^-1 D_s Sigma^-1 D_t) for every pair: with R_t = L^-1 D_t L^-T
 * (two triangular solves) this is sum(R_s * R_t) over symmetric matrices, and
 * tr(R_t) is the gradient's trace.
 *
 * Sums over n^2 entries are made in a fixed order (per block, then the blocks
 * in order on the host), so a call repeats to the bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>
#include "gp/gp.h"
#include "gpukernels/reduce_args.h"
#include "device/gk_jit.h"
#include "kernels/kernel_matrix.h"
#include "device/gk_cuda.h"
#include "device/gk_hooks.h"
#include "device/gk_memory.h"

namespace {

const int kThreads = 256;
const int kDotBlocks = 1024;

__global__ void add_to_diagonal(int n, double value, double *a)
{
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    a[i + (size_t) i * n] += value;
}

__global__ void set_diagonal(int n, double value, double *a)
{
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < (size_t) n * n;
       e += (size_t) gridDim.x * blockDim.x)
    a[e] = (e % (n + 1) == 0) ? value : 0.0;
}

/* Per block partial sums of a . b over n x n matrices (leading dimension n):
 * all entries, or (lower_sym) the lower triangles of two symmetric matrices
 * with the off-diagonal entries counted twice. */
__global__ void dot_partials(int n, const double *a, const double *b, int lower_sym,
                             double *partial)
{
  __shared__ double sums[kThreads];
  double acc = 0.0;
  size_t total = (size_t) n * n;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    if (lower_sym) {
      size_t i = e % n, j = e / n;
      if (i < j) continue;
      acc += (i == j ? 1.0 : 2.0) * a[e] * b[e];
    } else {
      acc += a[e] * b[e];
    }
  }
  sums[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

/* out[j] = sum_i v[i, j]^2 for the columns of v (rows x cols). */
__global__ void column_squares(int rows, int cols, const double *v, double *out)
{
  __shared__ double sums[kThreads];
  for (int j = blockIdx.x; j < cols; j += gridDim.x) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
      double x = v[i + (size_t) j * rows];
      acc += x * x;
    }
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[j] = sums[0];
    __syncthreads();
  }
}

unsigned grid_for(size_t items)
{
  size_t b = (items + kThreads - 1) / kThreads;
  return (unsigned) (b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

/* out = weight F(x_i, x_j) + beta out over the n points of a formula (x:
 * column-major, then the same points point-major, on the device), by its
 * matrix kernel (gk_formula.h) compiled with it. */
gk_status formula_matrix(const gk_formula *f, const double *x, int n, int dim, double weight,
                         double beta, double *out, gk_error *err)
{
  if (!f->source) return gk_fail(err, GK_ERR_INPUT, "this formula was not prepared for the GPU");
  const std::string name = std::string("gkformula::formula_matrix<") + f->functor + ">";
  const char *names[1] = {name.c_str()};
  const void *kernel = NULL;
  if (gk_jit_kernels(f->source, 1, names, "a formula's covariance matrix", &kernel, err))
    return err->status;
  gkreduce::Args a;
  memset(&a, 0, sizeof a);
  a.m = (size_t) n;
  a.dim = dim;
  for (int q = 0; q < f->nparams; q++) a.params[q] = f->params[q];
  const double *rows = x + (size_t) n * dim;
  size_t count = (size_t) n;
  void *args[] = {&a, &x, &rows, &count, &weight, &beta, &out};
  return gk_cuda_status(cudaLaunchKernel(kernel, dim3(grid_for((size_t) n * n)), dim3(kThreads),
                                         args, 0, 0),
                        "a formula's covariance matrix", err);
}

/* What every call holds: handles, the scaled points and Sigma's factor. */
struct dense_factor {
  cublasHandle_t blas = NULL;
  cusolverDnHandle_t solver = NULL;
  gk_device_buffer points = GK_DEVICE_BUFFER_EMPTY;   /* a formula's: twice (formula_matrix) */
  gk_device_buffer factor = GK_DEVICE_BUFFER_EMPTY;    /* n x n: L below the diagonal */
  gk_device_buffer work = GK_DEVICE_BUFFER_EMPTY;      /* cuSOLVER's workspace        */
  gk_device_buffer info = GK_DEVICE_BUFFER_EMPTY;      /* its int status              */
  gk_device_buffer partial = GK_DEVICE_BUFFER_EMPTY;   /* kDotBlocks sums             */
  int n = 0, dim = 0;

  ~dense_factor()
  {
    gk_buffer_free(&points);
    gk_buffer_free(&factor);
    gk_buffer_free(&work);
    gk_buffer_free(&info);
    gk_buffer_free(&partial);
  }
};

/* A download whose result the host reads next. */
gk_status download_now(void *dst, const gk_device_buffer *src, size_t bytes, gk_error *err)
{
  if (gk_buffer_download(dst, src, bytes, NULL, err)) return err->status;
  return gk_stream_sync(NULL, "a copy from the GPU", err);
}

gk_status solver_info(dense_factor *f, const char *what, int *value, gk_error *err)
{
  if (download_now(value, &f->info, sizeof(int), err)) return err->status;
  if (*value < 0) return gk_fail(err, GK_ERR_INTERNAL, "%s: argument %d was bad", what, -*value);
  return GK_OK;
}

/* Workspace of at least `doubles` entries (cuSOLVER asks per routine). */
gk_status ensure_work(dense_factor *f, int doubles, gk_error *err)
{
  size_t bytes = (size_t) (doubles > 1 ? doubles : 1) * sizeof(double);
  if (f->work.bytes >= bytes) return GK_OK;
  gk_buffer_free(&f->work);
  return gk_buffer_alloc(&f->work, bytes, "the Cholesky workspace", err);
}

/* Memory check before the first allocation: `matrices` n x n buffers. */
gk_status check_room(int n, int matrices, gk_error *err)
{
  double need = (double) matrices * n * (double) n * sizeof(double);
  char what[96];
  snprintf(what, sizeof what, "the dense likelihood at n = %d (%d matrices of n x n)", n,
           matrices);
  return gk_memory_check_device(need, what,
                                "use method = \"tiled\" or \"h2\", or backend = \"cpu\"",
                                NULL, err);
}

/* Sigma = K + nugget I on the device (K: the kernel on the scaled points xs,
 * or the formula on the points as given), factored in place (lower). */
gk_status factor_sigma(dense_factor *f, const double *xs, int n, int dim,
                       const gk_kernel *kernel, const gk_formula *formula, double nugget,
                       gk_error *err)
{
  f->n = n;
  f->dim = dim;
  if (gk_cublas_handle(GK_BLAS_LANE_0, NULL, &f->blas, err) ||
      gk_cusolver_handle(&f->solver, err))
    return err->status;
  if (gk_cusolver_status(cusolverDnSetStream(f->solver, 0), "binding cuSOLVER to a stream", err))
    return err->status;
  // a formula reads its points column-major (x_i) and point-major (x_j)
  const size_t point_bytes = (size_t) n * dim * sizeof(double);
  std::vector<double> both;
  if (!kernel) {
    both.assign(xs, xs + (size_t) n * dim);
    both.resize(2 * (size_t) n * dim);
    for (int i = 0; i < n; i++)
      for (int k = 0; k < dim; k++) both[(size_t) n * dim + (size_t) i * dim + k] = xs[i + (size_t) k * n];
  }
  if (gk_buffer_alloc(&f->points, 2 * point_bytes + 1, "the points", err) ||
      gk_buffer_alloc(&f->factor, (size_t) n * n * sizeof(double), "the covariance matrix", err) ||
      gk_buffer_alloc(&f->info, sizeof(int), "cuSOLVER's status", err) ||
      gk_buffer_alloc(&f->partial, kDotBlocks * sizeof(double), "partial sums", err) ||
      gk_buffer_upload(&f->points, kernel ? xs : both.data(), kernel ? point_bytes : 2 * point_bytes,
                       NULL, err))
    return err->status;
  double *a = (double *) f->factor.ptr;
  const double *x = (const double *) f->points.ptr;
  if (kernel ? kernel_matrix_cuda_device(kernel, x, n, x, n, dim, 1.0, 0.0, a, err)
             : formula_matrix(formula, x, n, dim, 1.0, 0.0, a, err))
    return err->status;
  add_to_diagonal<<<grid_for(n), kThreads>>>(n, nugget, a);
  if (gk_cuda_check_launch("the nugget", err)) return err->status;
  int lwork = 0, status = 0;
  if (gk_cusolver_status(cusolverDnDpotrf_bufferSize(f->solver, CUBLAS_FILL_MODE_LOWER, n, a, n,
                                                     &lwork),
                         "the Cholesky workspace query", err) ||
      ensure_work(f, lwork, err) ||
      gk_cusolver_status(cusolverDnDpotrf(f->solver, CUBLAS_FILL_MODE_LOWER, n, a, n,
                                          (double *) f->work.ptr, lwork, (int *) f->info.ptr),
                         "the Cholesky factorization", err) ||
      solver_info(f, "the Cholesky factorization", &status, err))
    return err->status;
  if (status > 0) return gk_fail(err, GK_ERR_INPUT, GP_NOT_POSITIVE_DEFINITE_MESSAGE);
  if (gk_interrupt_pending())
    return gk_fail(err, GK_ERR_INTERRUPTED, "the dense likelihood was interrupted");
  return GK_OK;
}

/* The diagonal of the n x n device matrix a, to the host. */
gk_status copy_diagonal(const double *a, int n, double *out, gk_error *err)
{
  return gk_cuda_status(cudaMemcpy2D(out, sizeof(double), a, (size_t) (n + 1) * sizeof(double),
                                     sizeof(double), n, cudaMemcpyDeviceToHost),
                        "copying a diagonal", err);
}

/* a . b over n x n device matrices, summed in a fixed order. */
gk_status dot(dense_factor *f, const double *a, const double *b, int lower_sym, double *out,
              gk_error *err)
{
  double partial[kDotBlocks];
  dot_partials<<<kDotBlocks, kThreads>>>(f->n, a, b, lower_sym, (double *) f->partial.ptr);
  if (gk_cuda_check_launch("a sum over the covariance matrix", err) ||
      download_now(partial, &f->partial, sizeof partial, err))
    return err->status;
  double s = 0.0;
  for (int i = 0; i < kDotBlocks; i++) s += partial[i];
  *out = s;
  return GK_OK;
}

/* D_t = sum_k w_k K_k + identity I into d (n x n), or the host's matrix; a
 * kernel with points of its own (gp_term_points()) has them uploaded for its
 * matrix. */
gk_status fill_term(dense_factor *f, const gp_dense_term *term, double *d, gk_error *err)
{
  int n = f->n;
  size_t bytes = (size_t) n * f->dim * sizeof(double);
  set_diagonal<<<grid_for((size_t) n * n), kThreads>>>(n, term->identity, d);
  if (gk_cuda_check_launch("a derivative matrix", err)) return err->status;
  for (int k = 0; k < term->nkernels; k++) {
    if (term->formulas) {   // on Sigma's points as given
      if (formula_matrix(&term->formulas[k], (const double *) f->points.ptr, n, f->dim,
                         term->weights[k], 1.0, d, err))
        return err->status;
      continue;
    }
    gk_device_buffer own = GK_DEVICE_BUFFER_EMPTY;
    const double *x = (const double *) f->points.ptr;
    if (term->points && term->points[k]) {
      if (gk_buffer_alloc(&own, bytes + 1, "the points", err) ||
          gk_buffer_upload(&own, term->points[k], bytes, NULL, err)) {
        gk_buffer_free(&own);
        return err->status;
      }
      x = (const double *) own.ptr;
    }
    gk_status st = kernel_matrix_cuda_device(&term->kernels[k], x, n, x, n, f->dim,
                                             term->weights[k], 1.0, d, err);
    gk_buffer_free(&own);
    if (st) return err->status;
  }
  return GK_OK;
}

/* quad (q x q, host) = W' D W for W (n x q) and D (n x n) on the device;
 * dw (n x q) is scratch. */
gk_status quadratic_form(dense_factor *f, const double *d, const double *w, int q, double *dw,
                         double *quad_dev, double *quad, gk_error *err)
{
  int n = f->n;
  const double one = 1.0, zero = 0.0;
  if (gk_cublas_status(cublasDgemm(f->blas, CUBLAS_OP_N, CUBLAS_OP_N, n, q, n, &one, d, n, w, n,
                                   &zero, dw, n),
                       "a derivative product", err) ||
      gk_cublas_status(cublasDgemm(f->blas, CUBLAS_OP_T, CUBLAS_OP_N, q, q, n, &one, w, n, dw,
                                   n, &zero, quad_dev, q),
                       "a derivative product", err))
    return err->status;
  return gk_cuda_status(cudaMemcpy(quad, quad_dev, (size_t) q * q * sizeof(double),
                                   cudaMemcpyDeviceToHost),
                        "copying a derivative product", err);
}

}  // namespace

extern "C" gk_status gp_gpu_dense(const double *xs, int n, int dim, const gk_kernel *kernel,
                                  const gk_formula *formula, double nugget, const double *rhs,
                                  int q, int nterms, const gp_dense_term *terms, int want_info,
                                  gp_dense_result *res, gk_error *err)
{
  if (n < 1 || n > GP_DENSE_GPU_MAX)
    return gk_fail(err, GK_ERR_INPUT,
                   "the dense likelihood on the GPU takes 1 to %d locations, not %d: use "
                   "method = \"tiled\" or \"h2\"", GP_DENSE_GPU_MAX, n);
  if (gk_device_enter(GK_DEVICE_ACTIVE, err)) return err->status;
  // Sigma's factor (then Sigma^-1), and a derivative matrix, or with the
  // Fisher information one R_t per term
  if (check_room(n, 1 + (nterms == 0 ? 0 : want_info ? nterms : 1), err)) return err->status;
  dense_factor f;
  gk_device_buffer w = GK_DEVICE_BUFFER_EMPTY, dw = GK_DEVICE_BUFFER_EMPTY,
                   quad = GK_DEVICE_BUFFER_EMPTY, work_matrix = GK_DEVICE_BUFFER_EMPTY;
  std::vector<gk_device_buffer> r_terms;
  const double one = 1.0;
  int status = 0;
  size_t nn = (size_t) n * n;
  GK_TRY(factor_sigma(&f, xs, n, dim, kernel, formula, nugget, err));
  {
    // log det Sigma = 2 sum log L_ii, from the factor's diagonal
    std::vector<double> diag(n);
    GK_TRY(copy_diagonal((const double *) f.factor.ptr, n, diag.data(), err));
    double s = 0.0;
    for (int i = 0; i < n; i++) s += log(diag[i]);
    res->logdet = 2.0 * s;
  }
  GK_TRY(gk_buffer_alloc(&w, (size_t) n * q * sizeof(double) + 1, "the solutions", err));
  GK_TRY(gk_buffer_upload(&w, rhs, (size_t) n * q * sizeof(double), NULL, err));
  if (q > 0) {
    GK_TRY(gk_cusolver_status(cusolverDnDpotrs(f.solver, CUBLAS_FILL_MODE_LOWER, n, q,
                                               (const double *) f.factor.ptr, n,
                                               (double *) w.ptr, n, (int *) f.info.ptr),
                              "the Cholesky solve", err));
    GK_TRY(solver_info(&f, "the Cholesky solve", &status, err));
    GK_TRY(download_now(res->solved, &w, (size_t) n * q * sizeof(double), err));
  }
  if (nterms == 0) goto fail;   // done: nothing else was asked
  GK_TRY(gk_buffer_alloc(&dw, (size_t) n * q * sizeof(double) + 1, "derivative products", err));
  GK_TRY(gk_buffer_alloc(&quad, (size_t) q * q * sizeof(double) + 1, "derivative products",
                         err));
  if (!want_info) {
    // Sigma^-1 in place of the factor (lower triangle), then per term
    // tr(Sigma^-1 D_t) and W' D_t W
    int lwork = 0;
    double *a = (double *) f.factor.ptr;
    GK_TRY(gk_buffer_alloc(&work_matrix, nn * sizeof(double), "a derivative matrix", err));
    GK_TRY(gk_cusolver_status(cusolverDnDpotri_bufferSize(f.solver, CUBLAS_FILL_MODE_LOWER, n, a,
                                                          n, &lwork),
                              "the inverse's workspace query", err));
    GK_TRY(ensure_work(&f, lwork, err));
    GK_TRY(gk_cusolver_status(cusolverDnDpotri(f.solver, CUBLAS_FILL_MODE_LOWER, n, a, n,
                                               (double *) f.work.ptr, lwork, (int *) f.info.ptr),
                              "the covariance matrix's inverse", err));
    GK_TRY(solver_info(&f, "the covariance matrix's inverse", &status, err));
    for (int t = 0; t < nterms; t++) {
      double *d = (double *) work_matrix.ptr;
      GK_TRY(fill_term(&f, &terms[t], d, err));
      GK_TRY(dot(&f, a, d, 1, &res->trace[t], err));
      if (q > 0)
        GK_TRY(quadratic_form(&f, d, (const double *) w.ptr, q, (double *) dw.ptr,
                              (double *) quad.ptr, res->quad + (size_t) t * q * q, err));
      if (gk_interrupt_pending()) {
        gk_fail(err, GK_ERR_INTERRUPTED, "the dense likelihood was interrupted");
        goto fail;
      }
    }
    goto fail;   // done
  }
  // With the Fisher information: R_t = L^-1 D_t L^-T for every term
  r_terms.assign(nterms, GK_DEVICE_BUFFER_EMPTY);
  for (int t = 0; t < nterms; t++) {
    GK_TRY(gk_buffer_alloc(&r_terms[t], nn * sizeof(double), "a derivative matrix", err));
    double *d = (double *) r_terms[t].ptr;
    GK_TRY(fill_term(&f, &terms[t], d, err));
    if (q > 0)
      GK_TRY(quadratic_form(&f, d, (const double *) w.ptr, q, (double *) dw.ptr,
                            (double *) quad.ptr, res->quad + (size_t) t * q * q, err));
    const double *l = (const double *) f.factor.ptr;
    GK_TRY(gk_cublas_status(cublasDtrsm(f.blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER,
                                        CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, n, &one, l, n, d,
                                        n),
                            "a triangular solve", err));
    GK_TRY(gk_cublas_status(cublasDtrsm(f.blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER,
                                        CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, n, n, &one, l, n, d,
                                        n),
                            "a triangular solve", err));
    {
      std::vector<double> diag(n);
      GK_TRY(copy_diagonal(d, n, diag.data(), err));
      double s = 0.0;
      for (int i = 0; i < n; i++) s += diag[i];
      res->trace[t] = s;
    }
    if (gk_interrupt_pending()) {
      gk_fail(err, GK_ERR_INTERRUPTED, "the dense likelihood was interrupted");
      goto fail;
    }
  }
  for (int s = 0; s < nterms; s++)
    for (int t = 0; t <= s; t++) {
      double v = 0.0;
      GK_TRY(dot(&f, (const double *) r_terms[s].ptr, (const double *) r_terms[t].ptr, 0, &v,
                 err));
      res->info[s + (size_t) t * nterms] = res->info[t + (size_t) s * nterms] = v;
    }
fail:
  for (size_t t = 0; t < r_terms.size(); t++) gk_buffer_free(&r_terms[t]);
  gk_buffer_free(&w);
  gk_buffer_free(&dw);
  gk_buffer_free(&quad);
  gk_buffer_free(&work_matrix);
  return err->status;
}

extern "C" gk_status gp_gpu_dense_krige(const double *xs, int n, int dim,
                                        const gk_kernel *kernel, double nugget,
                                        const double *X, int p, const double *xnew, int m,
                                        double *vq, double *xsc, double *xsx, gk_error *err)
{
  if (n < 1 || n > GP_DENSE_GPU_MAX)
    return gk_fail(err, GK_ERR_INPUT,
                   "dense kriging on the GPU takes 1 to %d locations, not %d", GP_DENSE_GPU_MAX,
                   n);
  if (gk_device_enter(GK_DEVICE_ACTIVE, err)) return err->status;
  if (check_room(n, 2, err)) return err->status;
  dense_factor f;
  gk_device_buffer z = GK_DEVICE_BUFFER_EMPTY, newpts = GK_DEVICE_BUFFER_EMPTY,
                   cross = GK_DEVICE_BUFFER_EMPTY, sums = GK_DEVICE_BUFFER_EMPTY,
                   prod = GK_DEVICE_BUFFER_EMPTY;
  const double one = 1.0, zero = 0.0;
  // new points per chunk: an n x chunk block of at most n x n entries (the
  // room checked above) and 2^27 entries (1 GB)
  int chunk = (int) ((((size_t) 1 << 27) / (size_t) n) < (size_t) n ? ((size_t) 1 << 27) / n : n);
  if (chunk < 1) chunk = 1;
  if (chunk > m) chunk = m > 0 ? m : 1;
  const double *l = NULL;
  GK_TRY(factor_sigma(&f, xs, n, dim, kernel, NULL, nugget, err));
  l = (const double *) f.factor.ptr;
  GK_TRY(gk_buffer_alloc(&newpts, (size_t) chunk * dim * sizeof(double) + 1, "the new points",
                         err));
  GK_TRY(gk_buffer_alloc(&cross, (size_t) n * chunk * sizeof(double), "the cross covariances",
                         err));
  GK_TRY(gk_buffer_alloc(&sums, (size_t) chunk * sizeof(double), "kriging variances", err));
  if (p > 0) {
    // Z = L^-1 X, and X' Sigma^-1 X = Z'Z
    GK_TRY(gk_buffer_alloc(&z, (size_t) n * p * sizeof(double), "the design matrix", err));
    GK_TRY(gk_buffer_alloc(&prod, (size_t) p * (chunk > p ? chunk : p) * sizeof(double),
                           "kriging products", err));
    GK_TRY(gk_buffer_upload(&z, X, (size_t) n * p * sizeof(double), NULL, err));
    GK_TRY(gk_cublas_status(cublasDtrsm(f.blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER,
                                        CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, p, &one, l, n,
                                        (double *) z.ptr, n),
                            "a triangular solve", err));
    GK_TRY(gk_cublas_status(cublasDgemm(f.blas, CUBLAS_OP_T, CUBLAS_OP_N, p, p, n, &one,
                                        (const double *) z.ptr, n, (const double *) z.ptr, n,
                                        &zero, (double *) prod.ptr, p),
                            "a kriging product", err));
    GK_TRY(download_now(xsx, &prod, (size_t) p * p * sizeof(double), err));
  }
  for (int j0 = 0; j0 < m; j0 += chunk) {
    int cols = m - j0 < chunk ? m - j0 : chunk;
    // the chunk's points, column-major cols x dim, from the m x dim host matrix
    GK_CUDA_TRY(cudaMemcpy2D(newpts.ptr, (size_t) cols * sizeof(double), xnew + j0,
                             (size_t) m * sizeof(double), (size_t) cols * sizeof(double), dim,
                             cudaMemcpyHostToDevice),
                "copying the new points", err);
    double *c = (double *) cross.ptr;
    GK_TRY(kernel_matrix_cuda_device(kernel, (const double *) f.points.ptr, n,
                                     (const double *) newpts.ptr, cols, dim, 1.0, 0.0, c, err));
    GK_TRY(gk_cublas_status(cublasDtrsm(f.blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER,
                                        CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, cols, &one, l, n,
                                        c, n),
                            "a triangular solve", err));
    column_squares<<<cols < 65535 ? cols : 65535, kThreads>>>(n, cols, c, (double *) sums.ptr);
    GK_TRY(gk_cuda_check_launch("the kriging variances", err));
    GK_TRY(download_now(vq + j0, &sums, (size_t) cols * sizeof(double), err));
    if (p > 0) {
      GK_TRY(gk_cublas_status(cublasDgemm(f.blas, CUBLAS_OP_T, CUBLAS_OP_N, p, cols, n, &one,
                                          (const double *) z.ptr, n, c, n, &zero,
                                          (double *) prod.ptr, p),
                              "a kriging product", err));
      GK_TRY(download_now(xsc + (size_t) j0 * p, &prod, (size_t) p * cols * sizeof(double), err));
    }
    if (gk_interrupt_pending()) {
      gk_fail(err, GK_ERR_INTERRUPTED, "kriging was interrupted");
      goto fail;
    }
  }
fail:
  gk_buffer_free(&z);
  gk_buffer_free(&newpts);
  gk_buffer_free(&cross);
  gk_buffer_free(&sums);
  gk_buffer_free(&prod);
  return err->status;
}
