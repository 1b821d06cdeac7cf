/*
 * The GPU parts of an H2 matrix split over GPUs (h2_matrix.h): each part is
 * an ordinary GPU matrix of its restricted tree (h2_tree_restrict), built on
 * its own GPU by the device layer's pool, all at once. A product is queued
 * on every GPU from the calling thread: x (in the tree's order, page-locked)
 * goes up to each, and each sends back only its own rows, which no other
 * part's blocks touch (h2_tree_split_leaves): nothing is summed.
 */
#include <new>
#include <vector>
#include "h2/h2.h"
#include "device/gk_device.h"
#include "device/gk_pool.h"
#include "h2/h2_cuda_impl.cuh"

namespace {

struct build_job {
  const h2_tree *const *trees;
  h2_gpu **built;
  int single;
};

void build_part(void *ctx, int p, gk_error *err)
{
  const build_job *job = (const build_job *) ctx;
  h2_gpu_build(job->trees[p], job->single, &job->built[p], err);
}

}  // namespace

extern "C" gk_status h2_gpu_build_split(const h2_tree *const *trees, int parts, int single,
                                        const int *devices, h2_gpu **gpus, gk_error *err)
{
  std::vector<gk_error> errors((size_t) parts);
  int interrupted = 0;
  build_job job = {trees, gpus, single};
  for (int p = 0; p < parts; p++) gpus[p] = NULL;
  if (gk_pool_run(devices, parts, build_part, NULL, &job, 20, errors.data(), &interrupted,
                  err) == GK_OK)
    gk_pool_outcome(devices, parts, errors.data(), interrupted, "the H2 construction", err);
  if (err->status != GK_OK)
    for (int p = 0; p < parts; p++) {
      h2_gpu_free(gpus[p]);
      gpus[p] = NULL;
    }
  return err->status;
}

/* The products' vectors, kept between calls: x and y of each part on its
 * GPU, and page-locked host copies of x and y in the tree's order, which
 * every GPU reads and writes directly. */
struct h2_split_work {
  int parts = 0, nrhs = 0;
  std::vector<int> device;
  std::vector<gk_device_buffer> x, y;
  double *host_x = nullptr, *host_y = nullptr;
  size_t host_entries = 0;
};

namespace {

// Buffers are freed on their own GPU.
void free_device_vectors(h2_split_work *w)
{
  gk_error ignored;
  for (int p = 0; p < w->parts; p++) {
    if (gk_device_enter(w->device[(size_t) p], &ignored) != GK_OK) continue;
    gk_buffer_free(&w->x[(size_t) p]);
    gk_buffer_free(&w->y[(size_t) p]);
  }
  w->nrhs = 0;
}

// Vectors of nrhs columns on every part's GPU (grown when more are asked).
gk_status ensure_device_vectors(h2_split_work *w, h2_gpu *const *gpus, int parts, size_t bytes,
                                int nrhs, gk_error *err)
{
  if (w->nrhs >= nrhs) return GK_OK;
  free_device_vectors(w);
  w->parts = parts;
  w->device.resize((size_t) parts);
  w->x.assign((size_t) parts, GK_DEVICE_BUFFER_EMPTY);
  w->y.assign((size_t) parts, GK_DEVICE_BUFFER_EMPTY);
  for (int p = 0; p < parts; p++) {
    w->device[(size_t) p] = h2_gpu_device(gpus[p]);
    if (gk_device_enter(w->device[(size_t) p], err) ||
        gk_buffer_alloc(&w->x[(size_t) p], bytes, "the H2 product's input", err) ||
        gk_buffer_alloc(&w->y[(size_t) p], bytes, "the H2 product", err))
      return err->status;
  }
  w->nrhs = nrhs;
  return GK_OK;
}

void free_host_vectors(h2_split_work *w)
{
  if (w->host_x) cudaFreeHost(w->host_x);
  if (w->host_y) cudaFreeHost(w->host_y);
  w->host_x = w->host_y = nullptr;
  w->host_entries = 0;
}

}  // namespace

extern "C" void h2_split_work_free(h2_split_work *w)
{
  if (!w) return;
  int previous = gk_device_in_use();
  free_device_vectors(w);
  free_host_vectors(w);
  gk_error ignored;
  if (previous >= 0) gk_device_enter(previous, &ignored);
  delete w;
}

extern "C" gk_status h2_gpu_split_host(h2_split_work **work, size_t entries, double **x,
                                       double **y, gk_error *err)
{
  h2_split_work *w = *work;
  if (!w && !(w = *work = new (std::nothrow) h2_split_work))
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 product's parts");
  if (w->host_entries < entries) {
    free_host_vectors(w);
    size_t bytes = entries * sizeof(double);
    if (gk_cuda_status(cudaHostAlloc((void **) &w->host_x, bytes, cudaHostAllocPortable),
                       "page-locked memory for the H2 product", err) ||
        gk_cuda_status(cudaHostAlloc((void **) &w->host_y, bytes, cudaHostAllocPortable),
                       "page-locked memory for the H2 product", err)) {
      free_host_vectors(w);
      return err->status;
    }
    w->host_entries = entries;
  }
  *x = w->host_x;
  *y = w->host_y;
  return GK_OK;
}

extern "C" gk_status h2_gpu_matmul_split(const h2_tree *const *trees, h2_gpu *const *gpus,
                                         int parts, const int *rows, int nrhs,
                                         h2_split_work **work, gk_error *err)
{
  size_t n = (size_t) trees[0]->n, bytes = n * (size_t) nrhs * sizeof(double);
  int previous = gk_device_in_use();
  h2_split_work *w = *work;
  if (!w || w->host_entries < n * (size_t) nrhs)
    return gk_fail(err, GK_ERR_INTERNAL, "the H2 product's host vectors are missing");
  if (ensure_device_vectors(w, gpus, parts, bytes, nrhs, err)) goto done;
  // Every part's product is queued before any is waited for: the GPUs work
  // at once, each on its own rows of host_y.
  for (int p = 0; p < parts; p++) {
    cudaStream_t s = (cudaStream_t) gpus[p]->low_rank;
    size_t first = (size_t) rows[p], count = (size_t) (rows[p + 1] - rows[p]);
    double *y = (double *) w->y[(size_t) p].ptr;
    if (gk_device_enter(w->device[(size_t) p], err) ||
        gk_cuda_status(cudaMemcpyAsync(w->x[(size_t) p].ptr, w->host_x, bytes,
                                       cudaMemcpyHostToDevice, s),
                       "copying the H2 product's input to a GPU", err) ||
        h2_gpu_matmul_queue(trees[p], gpus[p], (const double *) w->x[(size_t) p].ptr, nrhs, y, 1,
                            err))
      goto done;
    if (count > 0 &&
        gk_cuda_status(cudaMemcpy2DAsync(w->host_y + first, n * sizeof(double), y + first,
                                         n * sizeof(double), count * sizeof(double),
                                         (size_t) nrhs, cudaMemcpyDeviceToHost, s),
                       "copying the H2 product from a GPU", err))
      goto done;
  }
  for (int p = 0; p < parts; p++)
    if (gk_device_enter(w->device[(size_t) p], err) ||
        gk_stream_sync(gpus[p]->low_rank, "the H2 product", err))
      goto done;
done:
  if (err->status != GK_OK)
    for (int p = 0; p < (int) w->device.size(); p++) {
      gk_error ignored;
      if (gk_device_enter(w->device[(size_t) p], &ignored) == GK_OK) cudaDeviceSynchronize();
    }
  if (previous >= 0) {
    gk_error ignored;
    gk_device_enter(previous, &ignored);
  }
  return err->status;
}
