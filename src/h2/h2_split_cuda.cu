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

/* The products' page-locked host vectors, x and y in the tree's order, kept
 * between calls; each GPU copies x into its part's own staging copy (xio,
 * counted with the part) and its rows of y back. */
struct h2_split_work {
  gk_pinned_buffer host_x = {NULL, 0, NULL}, host_y = {NULL, 0, NULL};   // as many bytes each
};

namespace {

void free_host_vectors(h2_split_work *w)
{
  gk_pinned_free(&w->host_x);
  gk_pinned_free(&w->host_y);
}

size_t host_entries(const h2_split_work *w)
{
  return w->host_x.bytes / sizeof(double);
}

}  // namespace

extern "C" void h2_split_work_free(h2_split_work *w)
{
  if (!w) return;
  free_host_vectors(w);
  delete w;
}

extern "C" gk_status h2_gpu_split_host(h2_split_work **work, size_t entries, double **x,
                                       double **y, gk_error *err)
{
  h2_split_work *w = *work;
  if (!w && !(w = *work = new (std::nothrow) h2_split_work))
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 product's parts");
  if (host_entries(w) < entries) {
    free_host_vectors(w);
    size_t bytes = entries * sizeof(double);
    if (gk_pinned_alloc(&w->host_x, bytes, "the H2 product's x", err) ||
        gk_pinned_alloc(&w->host_y, bytes, "the H2 product's y", err)) {
      free_host_vectors(w);
      return err->status;
    }
  }
  *x = (double *) w->host_x.ptr;
  *y = (double *) w->host_y.ptr;
  return GK_OK;
}

extern "C" gk_status h2_gpu_matmul_split(const h2_tree *const *trees, h2_gpu *const *gpus,
                                         int parts, const int *rows, int nrhs,
                                         h2_split_work **work, gk_error *err)
{
  size_t n = (size_t) trees[0]->n;
  int previous = gk_device_in_use();
  h2_split_work *w = *work;
  if (!w || host_entries(w) < n * (size_t) nrhs)
    return gk_fail(err, GK_ERR_INTERNAL, "the H2 product's host vectors are missing");
  // Every part's product is queued before any is waited for: the GPUs work
  // at once, each on its own rows of host_y.
  for (int p = 0; p < parts; p++)
    if (h2_gpu_matmul_rows_queue(trees[p], gpus[p], (const double *) w->host_x.ptr, nrhs,
                                 (double *) w->host_y.ptr,
                                 (size_t) rows[p], (size_t) (rows[p + 1] - rows[p]), err))
      goto done;
  for (int p = 0; p < parts; p++)
    if (gk_device_enter(h2_gpu_device(gpus[p]), err) ||
        gk_stream_sync(gpus[p]->low_rank, "the H2 product", err))
      goto done;
done:
  if (err->status != GK_OK)
    for (int p = 0; p < parts; p++) {
      gk_error ignored;
      if (gk_device_enter(h2_gpu_device(gpus[p]), &ignored) == GK_OK) cudaDeviceSynchronize();
    }
  if (previous >= 0) {
    gk_error ignored;
    gk_device_enter(previous, &ignored);
  }
  return err->status;
}
