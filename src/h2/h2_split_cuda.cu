/*
 * The GPU parts of an H2 matrix split over GPUs (h2_matrix.h): each part is
 * an ordinary GPU matrix of its restricted tree (h2_tree_restrict), built on
 * its own GPU by the device layer's pool, all at once. A product goes up
 * once, to the first part's GPU, and is copied from there to the others'
 * (peer copies); every part's product is queued on its GPU from this thread,
 * the results come back to the first GPU, are summed there and go down
 * once: the host copies are those of a matrix on one GPU.
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

/* The products' vectors on the GPUs, kept between calls: x and y of each
 * part on its GPU, and the other parts' results on the first part's GPU. */
struct h2_split_work {
  int parts = 0, nrhs = 0;
  std::vector<int> device;
  std::vector<gk_device_buffer> x, y, incoming;
  gk_device_buffer table = GK_DEVICE_BUFFER_EMPTY;   // incoming's pointers, on the first GPU
  std::vector<cudaEvent_t> done;   // per part, on its GPU: its result copied back (x: part 0)
};

namespace {

// Entered GPU `device` (the calling thread's in-use GPU changes).
gk_status enter(int device, gk_error *err)
{
  return gk_device_enter(device, err);
}

// Lets `device` copy to and from `peer` directly where the two can (an
// already enabled pair is no error); else peer copies go through the host.
void allow_peer(int device, int peer)
{
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, device, peer) == cudaSuccess && can &&
      cudaDeviceEnablePeerAccess(peer, 0) != cudaSuccess)
    cudaGetLastError();
}

// Buffers are freed on their own GPU.
void free_work(h2_split_work *w)
{
  gk_error ignored;
  for (int p = 0; p < w->parts; p++) {
    if (gk_device_enter(w->device[(size_t) p], &ignored) != GK_OK) continue;
    gk_buffer_free(&w->x[(size_t) p]);
    gk_buffer_free(&w->y[(size_t) p]);
    if (w->done[(size_t) p]) cudaEventDestroy(w->done[(size_t) p]);
    w->done[(size_t) p] = NULL;
  }
  if (w->parts > 0 && gk_device_enter(w->device[0], &ignored) == GK_OK) {
    for (auto &b : w->incoming) gk_buffer_free(&b);
    gk_buffer_free(&w->table);
  }
  w->nrhs = 0;
}

// Buffers for nrhs columns on every part's GPU (grown when more are asked).
gk_status ensure_work(h2_split_work *w, h2_gpu *const *gpus, int parts, size_t bytes, int nrhs,
                      gk_error *err)
{
  if (w->nrhs >= nrhs) return GK_OK;
  free_work(w);
  w->parts = parts;
  w->device.resize((size_t) parts);
  w->x.assign((size_t) parts, GK_DEVICE_BUFFER_EMPTY);
  w->y.assign((size_t) parts, GK_DEVICE_BUFFER_EMPTY);
  w->incoming.assign((size_t) parts, GK_DEVICE_BUFFER_EMPTY);
  w->done.assign((size_t) parts, NULL);
  for (int p = 0; p < parts; p++) {
    int d = h2_gpu_device(gpus[p]);
    w->device[(size_t) p] = d;
    if (enter(d, err) || gk_buffer_alloc(&w->x[(size_t) p], bytes, "the H2 product's input", err) ||
        gk_buffer_alloc(&w->y[(size_t) p], bytes, "the H2 product", err) ||
        gk_cuda_status(cudaEventCreateWithFlags(&w->done[(size_t) p], cudaEventDisableTiming),
                       "the H2 product's events", err))
      return err->status;
    if (p > 0) {
      allow_peer(d, w->device[0]);
      if (enter(w->device[0], err)) return err->status;
      allow_peer(w->device[0], d);
      if (gk_buffer_alloc(&w->incoming[(size_t) p], bytes, "the H2 product's parts", err))
        return err->status;
    }
  }
  if (parts > 1) {
    std::vector<const double *> others;
    for (int p = 1; p < parts; p++) others.push_back((const double *) w->incoming[(size_t) p].ptr);
    size_t table_bytes = others.size() * sizeof(double *);
    if (enter(w->device[0], err) ||
        gk_buffer_alloc(&w->table, table_bytes, "the H2 product's parts", err) ||
        gk_buffer_upload(&w->table, others.data(), table_bytes, gpus[0]->low_rank, err) ||
        gk_stream_sync(gpus[0]->low_rank, "the H2 product's parts", err))
      return err->status;
  }
  w->nrhs = nrhs;
  return GK_OK;
}

// y[e] += the other parts' results, on the first part's GPU.
__global__ void add_parts(double *y, const double *const *parts, int count, size_t entries)
{
  for (size_t e = blockIdx.x * (size_t) blockDim.x + threadIdx.x; e < entries;
       e += (size_t) gridDim.x * blockDim.x) {
    double sum = y[e];
    for (int p = 0; p < count; p++) sum += parts[p][e];
    y[e] = sum;
  }
}

}  // namespace

extern "C" void h2_split_work_free(h2_split_work *w)
{
  if (!w) return;
  int previous = gk_device_in_use();
  free_work(w);
  gk_error ignored;
  if (previous >= 0) gk_device_enter(previous, &ignored);
  delete w;
}

extern "C" gk_status h2_gpu_matmul_split(const h2_tree *const *trees, h2_gpu *const *gpus,
                                         int parts, const double *x, int nrhs, double *y,
                                         h2_split_work **work, gk_error *err)
{
  size_t entries = (size_t) trees[0]->n * (size_t) nrhs, bytes = entries * sizeof(double);
  int previous = gk_device_in_use();
  h2_split_work *w = *work;
  cudaStream_t s0 = (cudaStream_t) gpus[0]->low_rank;
  if (!w && !(w = *work = new (std::nothrow) h2_split_work))
    return gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 product's parts");
  int d0;
  if (ensure_work(w, gpus, parts, bytes, nrhs, err)) goto done;
  d0 = w->device[0];
  if (enter(d0, err) || gk_staged_upload(w->x[0].ptr, x, bytes, gpus[0]->low_rank, err) ||
      gk_cuda_status(cudaEventRecord(w->done[0], s0), "the H2 product's events", err))
    goto done;
  for (int p = 0; p < parts; p++) {
    cudaStream_t s = (cudaStream_t) gpus[p]->low_rank;
    int d = w->device[(size_t) p];
    if (enter(d, err)) goto done;
    if (p > 0 &&
        (gk_cuda_status(cudaStreamWaitEvent(s, w->done[0], 0), "the H2 product's events", err) ||
         gk_cuda_status(cudaMemcpyPeerAsync(w->x[(size_t) p].ptr, d, w->x[0].ptr, d0, bytes, s),
                        "copying the H2 product's input between GPUs", err)))
      goto done;
    if (h2_gpu_matmul_queue(trees[p], gpus[p], (const double *) w->x[(size_t) p].ptr, nrhs,
                            (double *) w->y[(size_t) p].ptr, err))
      goto done;
    if (p > 0 &&
        (gk_cuda_status(cudaMemcpyPeerAsync(w->incoming[(size_t) p].ptr, d0, w->y[(size_t) p].ptr,
                                            d, bytes, s),
                        "copying the H2 product between GPUs", err) ||
         gk_cuda_status(cudaEventRecord(w->done[(size_t) p], s), "the H2 product's events", err)))
      goto done;
  }
  if (enter(d0, err)) goto done;
  for (int p = 1; p < parts; p++)
    if (gk_cuda_status(cudaStreamWaitEvent(s0, w->done[(size_t) p], 0), "the H2 product's events",
                       err))
      goto done;
  if (parts > 1) {
    add_parts<<<h2_grid_for(entries), 256, 0, s0>>>((double *) w->y[0].ptr,
                                                    (const double *const *) w->table.ptr,
                                                    parts - 1, entries);
    if (gk_cuda_check_launch("the sum of the H2 product's parts", err)) goto done;
  }
  gk_staged_download(y, w->y[0].ptr, bytes, gpus[0]->low_rank, err);
done:
  if (err->status != GK_OK)
    for (int p = 0; w && p < (int) w->device.size(); p++) {
      gk_error ignored;
      if (gk_device_enter(w->device[(size_t) p], &ignored) == GK_OK) cudaDeviceSynchronize();
    }
  if (previous >= 0) {
    gk_error ignored;
    gk_device_enter(previous, &ignored);
  }
  return err->status;
}
