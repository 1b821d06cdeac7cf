/*
 * Products of a GPU H2 matrix with vectors on the host or on the device: the
 * points' order to the padded leaf slots and back around the HMV
 * (h2_gpu_run_hmv), the workspace kept between calls, and the timing of the
 * HMV for benchmarks.
 */
#include <stdlib.h>
#include <algorithm>
#include <vector>
#include "h2/h2_gemv.cuh"
#include "h2/h2_cuda_impl.cuh"

/* The points' order to the padded leaf slots and back (slot[e]: the slot of
 * row e), one thread per entry of a grid-stride loop. The input's NA, NaN and
 * infinite values set *nonfinite (when given): a check on the GPU, where the
 * entries are read anyway, costs nothing; on the host it would be a pass
 * over R's vector before the upload. */
template <typename T>
__global__ void scatter_input(const double *x, const int *slot, int n, int nrhs, size_t rows, T *xp,
                              int *nonfinite)
{
  size_t total = (size_t) n * nrhs;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x) {
    double v = x[e];
    if (nonfinite && !isfinite(v)) *nonfinite = 1;
    xp[slot[e % n] + rows * (e / n)] = (T) v;
  }
}

template <typename T>
__global__ void gather_output(const T *yp, const int *slot, int n, int nrhs, size_t rows, double *y)
{
  size_t total = (size_t) n * nrhs;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x)
    y[e] = (double) yp[slot[e % n] + rows * (e / n)];
}


/* The workspace for nrhs right-hand sides, kept between calls and grown when
 * a call needs more. */
static gk_status ensure_workspace(const h2_tree *t, h2_gpu *g, int nrhs, int staging,
                                  gk_error *err)
{
  // staging: the host products' n x nrhs copy of x and y on the device (the
  // device products read and write the caller's vectors instead)
  if (g->work_nrhs >= nrhs && (!staging || g->xio_nrhs >= nrhs)) return GK_OK;
  if (g->work_nrhs < nrhs) {
    gk_buffer_free(&g->xp);
    gk_buffer_free(&g->yp);
    gk_buffer_free(&g->xhat);
    gk_buffer_free(&g->yhat);
    g->work_nrhs = 0;
    size_t rows = (size_t) t->n_leaves * t->leaf_size, tree = h2_hat_rows(t);
    gk_buffer_free(&g->partial);
    // partial sums of split rows (h2_gemv.cuh), for up to H2_GEMV_MAX_RHS columns
    int part_nrhs = std::min(nrhs, H2_GEMV_MAX_RHS);
    size_t part = (size_t) g->partial_units * H2_GEMV_MAX_DIM * part_nrhs * g->el;
    if (gk_buffer_alloc(&g->xp, rows * nrhs * g->el, "the H2 product workspace", err) ||
        gk_buffer_alloc(&g->yp, rows * nrhs * g->el, "the H2 product workspace", err) ||
        gk_buffer_alloc(&g->xhat, tree * nrhs * g->el, "the H2 product workspace", err) ||
        gk_buffer_alloc(&g->yhat, tree * nrhs * g->el, "the H2 product workspace", err) ||
        (part && gk_buffer_alloc(&g->partial, part, "the H2 product workspace", err))) {
      g->res.bytes = h2_gpu_bytes_held(g);
      return err->status;
    }
    g->work_nrhs = nrhs;
  }
  if (staging && g->xio_nrhs < nrhs) {
    gk_buffer_free(&g->xio);
    g->xio_nrhs = 0;
    if ((!g->nonfinite.ptr &&
         gk_buffer_alloc(&g->nonfinite, sizeof(int), "the H2 product workspace", err)) ||
        gk_buffer_alloc(&g->xio, (size_t) t->n * nrhs * sizeof(double),
                        "the H2 product workspace", err)) {
      g->res.bytes = h2_gpu_bytes_held(g);
      return err->status;
    }
    g->xio_nrhs = nrhs;
  }
  g->res.bytes = h2_gpu_bytes_held(g);
  return GK_OK;
}

/* y = A x for device vectors (n x nrhs doubles) on g's stream: the
 * permutation into padded leaf slots, the HMV, and back. Row e of x and y is
 * at slot slots[e] (g->slot_of_point: the points' order). nonfinite (device,
 * or NULL): set when x holds NA, NaN or Inf. */
static gk_status matmul_on_stream(const h2_tree *t, h2_gpu *g, const double *x, int nrhs,
                                  double *y, const int *slots, int *nonfinite, gk_error *err)
{
  cudaStream_t s = (cudaStream_t) g->low_rank;
  size_t rows = (size_t) t->n_leaves * t->leaf_size, total = (size_t) t->n * nrhs;
  GK_CUDA_TRY(cudaMemsetAsync(g->xp.ptr, 0, rows * nrhs * g->el, s), "the H2 input", err);
  if (g->single)
    scatter_input<float><<<h2_grid_for(total), 256, 0, s>>>(x, slots, t->n, nrhs, rows,
                                                         (float *) g->xp.ptr, nonfinite);
  else
    scatter_input<double><<<h2_grid_for(total), 256, 0, s>>>(x, slots, t->n, nrhs, rows,
                                                          (double *) g->xp.ptr, nonfinite);
  GK_TRY(gk_cuda_check_launch("the H2 input permutation", err));
  GK_TRY(h2_gpu_run_hmv(t, g, nrhs, err));
  if (g->single)
    gather_output<float><<<h2_grid_for(total), 256, 0, s>>>((const float *) g->yp.ptr, slots,
                                                         t->n, nrhs, rows, y);
  else
    gather_output<double><<<h2_grid_for(total), 256, 0, s>>>((const double *) g->yp.ptr, slots,
                                                          t->n, nrhs, rows, y);
  GK_TRY(gk_cuda_check_launch("the H2 output permutation", err));
  return GK_OK;
fail:
  return err->status;
}

/* y = A x for host vectors in R's memory. The upload finishes before the
 * HMV starts, and the download is queued after it: the on-the-fly HMV's
 * reductions take the same pinned staging on the way (gk_pinned_scratch). */
extern "C" gk_status h2_gpu_matmul(const h2_tree *t, h2_gpu *g, const double *x, int nrhs,
                                   double *y, gk_error *err)
{
  cudaStream_t s = (cudaStream_t) g->low_rank;
  size_t bytes = (size_t) t->n * nrhs * sizeof(double);
  int nonfinite = 0;
  if (gk_resident_enter(&g->res, err)) return err->status;
  GK_TRY(ensure_workspace(t, g, nrhs, 1, err));
  GK_CUDA_TRY(cudaMemsetAsync(g->nonfinite.ptr, 0, sizeof(int), s), "the H2 input", err);
  GK_TRY(gk_staged_upload(g->xio.ptr, x, bytes, g->low_rank, err));
  GK_TRY(matmul_on_stream(t, g, (const double *) g->xio.ptr, nrhs, (double *) g->xio.ptr,
                          (const int *) g->slot_of_point.ptr, (int *) g->nonfinite.ptr, err));
  GK_TRY(gk_staged_download(y, g->xio.ptr, bytes, g->low_rank, err));
  // the download has waited for everything on s, the flag's writer included
  GK_CUDA_TRY(cudaMemcpy(&nonfinite, g->nonfinite.ptr, sizeof(int), cudaMemcpyDeviceToHost),
              "the H2 input check", err);
  if (nonfinite) return gk_fail(err, GK_ERR_INPUT, "x contains NA, NaN or infinite values");
  return GK_OK;
fail:
  cudaDeviceSynchronize();
  return err->status;
}

gk_status h2_gpu_matmul_queue(const h2_tree *t, h2_gpu *g, const double *x, int nrhs, double *y,
                              int tree_order, gk_error *err)
{
  if (gk_resident_enter(&g->res, err)) return err->status;
  GK_TRY(ensure_workspace(t, g, nrhs, 0, err));
  if (tree_order && !g->tree_slots.ptr) {   // once per matrix: slots in increasing order
    int *order = (int *) malloc((size_t) t->n * sizeof(int) + 1);
    if (!order) return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 point order");
    if (h2_tree_point_order(t, order)) {
      free(order);
      return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 point order");
    }
    for (int e = 0; e < t->n; e++) order[e] = t->slot_of_point[order[e]];
    gk_status st = gk_buffer_alloc(&g->tree_slots, (size_t) t->n * sizeof(int) + 1,
                                   "the H2 point order", err);
    if (st == GK_OK)
      st = gk_buffer_upload(&g->tree_slots, order, (size_t) t->n * sizeof(int), g->low_rank, err);
    if (st == GK_OK) st = gk_stream_sync(g->low_rank, "the H2 point order", err);
    free(order);
    g->res.bytes = h2_gpu_bytes_held(g);
    if (st) goto fail;
  }
  GK_TRY(matmul_on_stream(t, g, x, nrhs, y,
                          (const int *) (tree_order ? g->tree_slots.ptr : g->slot_of_point.ptr),
                          NULL, err));
  return GK_OK;
fail:
  cudaDeviceSynchronize();
  return err->status;
}

gk_status h2_gpu_matmul_rows_queue(const h2_tree *t, h2_gpu *g, const double *x, int nrhs,
                                   double *y, size_t first, size_t count, gk_error *err)
{
  cudaStream_t s = (cudaStream_t) g->low_rank;
  size_t n = (size_t) t->n;
  if (gk_resident_enter(&g->res, err)) return err->status;
  GK_TRY(ensure_workspace(t, g, nrhs, 1, err));
  GK_CUDA_TRY(cudaMemcpyAsync(g->xio.ptr, x, n * nrhs * sizeof(double), cudaMemcpyHostToDevice,
                              s), "copying the H2 product's input to a GPU", err);
  GK_TRY(h2_gpu_matmul_queue(t, g, (const double *) g->xio.ptr, nrhs, (double *) g->xio.ptr, 1,
                             err));
  if (count > 0)
    GK_CUDA_TRY(cudaMemcpy2DAsync(y + first, n * sizeof(double), (double *) g->xio.ptr + first,
                                  n * sizeof(double), count * sizeof(double), (size_t) nrhs,
                                  cudaMemcpyDeviceToHost, s),
                "copying the H2 product from a GPU", err);
  return GK_OK;
fail:
  cudaDeviceSynchronize();
  return err->status;
}

extern "C" gk_status h2_gpu_matmul_device(const h2_tree *t, h2_gpu *g, const double *x,
                                          int nrhs, double *y, int tree_order, gk_error *err)
{
  if (h2_gpu_matmul_queue(t, g, x, nrhs, y, tree_order, err) ||
      gk_stream_sync(g->low_rank, "the H2 product", err))
    return err->status;
  return GK_OK;
}

/* out[r + nrows c] = y[rows[r] + n c] */
__global__ void gather_rows(const double *y, size_t n, int nrhs, const int *rows, int nrows,
                            double *out)
{
  size_t total = (size_t) nrows * nrhs;
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < total;
       e += (size_t) gridDim.x * blockDim.x)
    out[e] = y[(size_t) rows[e % nrows] + n * (e / nrows)];
}

extern "C" gk_status h2_gpu_matmul_rows(const h2_tree *t, h2_gpu *g, int nblocks,
                                        const double *const *x, const int *cols,
                                        const int *rows, int nrows, double *y, gk_error *err)
{
  cudaStream_t s = (cudaStream_t) g->low_rank;
  gk_device_buffer picked = GK_DEVICE_BUFFER_EMPTY, where = GK_DEVICE_BUFFER_EMPTY;
  int nrhs = 0;
  for (int b = 0; b < nblocks; b++) nrhs += cols[b];
  size_t n = (size_t) t->n, out = (size_t) nrows * nrhs;
  if (gk_resident_enter(&g->res, err)) return err->status;
  if (nrhs == 0 || nrows == 0) return GK_OK;
  GK_TRY(ensure_workspace(t, g, nrhs, 1, err));
  GK_TRY(gk_buffer_alloc(&picked, out * sizeof(double), "the H2 product's rows", err));
  GK_TRY(gk_buffer_alloc(&where, (size_t) nrows * sizeof(int), "the H2 product's rows", err));
  for (int b = 0, at = 0; b < nblocks; at += cols[b], b++)
    // cudaMemcpyDefault: a block may already be on the device (the GP probes)
    GK_CUDA_TRY(cudaMemcpyAsync((double *) g->xio.ptr + n * at, x[b], n * cols[b] * sizeof(double),
                                cudaMemcpyDefault, s), "uploading the H2 product's input", err);
  GK_CUDA_TRY(cudaMemcpyAsync(where.ptr, rows, (size_t) nrows * sizeof(int),
                              cudaMemcpyHostToDevice, s), "the H2 product's rows", err);
  GK_TRY(matmul_on_stream(t, g, (const double *) g->xio.ptr, nrhs, (double *) g->xio.ptr,
                          (const int *) g->slot_of_point.ptr, NULL, err));
  gather_rows<<<h2_grid_for(out), 256, 0, s>>>((const double *) g->xio.ptr, n, nrhs,
                                            (const int *) where.ptr, nrows, (double *) picked.ptr);
  GK_TRY(gk_cuda_check_launch("the H2 product's rows", err));
  GK_CUDA_TRY(cudaMemcpyAsync(y, picked.ptr, out * sizeof(double), cudaMemcpyDeviceToHost, s),
              "downloading the H2 product", err);
  GK_TRY(gk_stream_sync(g->low_rank, "the H2 product", err));
  gk_buffer_free(&picked);
  gk_buffer_free(&where);
  return GK_OK;
fail:
  cudaDeviceSynchronize();
  gk_buffer_free(&picked);
  gk_buffer_free(&where);
  return err->status;
}

extern "C" int h2_gpu_device(const h2_gpu *g)
{
  return g->res.device;
}

extern "C" gk_status h2_gpu_time_hmv(const h2_tree *t, h2_gpu *g, int nrhs, int reps,
                                     int cublas_only, double *ms, gk_error *err)
{
  cudaStream_t s = (cudaStream_t) g->low_rank;
  cudaEvent_t start = NULL, stop = NULL;
  std::vector<double> times;
  size_t rows = (size_t) t->n_leaves * t->leaf_size;
  if (reps < 1) reps = 1;
  if (gk_resident_enter(&g->res, err)) return err->status;
  GK_TRY(ensure_workspace(t, g, nrhs, 0, err));
  GK_CUDA_TRY(cudaMemsetAsync(g->xp.ptr, 0, rows * nrhs * g->el, s), "the H2 input", err);
  GK_CUDA_TRY(cudaEventCreate(&start), "timing events", err);
  GK_CUDA_TRY(cudaEventCreate(&stop), "timing events", err);
  for (int r = -2; r < reps; r++) {  // two warm-up runs
    GK_CUDA_TRY(cudaEventRecord(start, s), "timing events", err);
    g->force_cublas = cublas_only;
    gk_status status = h2_gpu_run_hmv(t, g, nrhs, err);
    g->force_cublas = 0;
    GK_TRY(status);
    GK_CUDA_TRY(cudaEventRecord(stop, s), "timing events", err);
    GK_CUDA_TRY(cudaEventSynchronize(stop), "the timed H2 product", err);
    float elapsed = 0.0f;
    GK_CUDA_TRY(cudaEventElapsedTime(&elapsed, start, stop), "timing events", err);
    if (r >= 0) times.push_back(elapsed);
  }
  std::sort(times.begin(), times.end());
  *ms = times[times.size() / 2];
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return GK_OK;
fail:
  cudaDeviceSynchronize();
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  return err->status;
}
