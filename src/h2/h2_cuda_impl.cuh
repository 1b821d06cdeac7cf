/*
 * The GPU H2 matrix's layout and what the GPU backend's files share (the
 * construction h2_cuda.cu, the HMV h2_cuda_hmv.cu, the products
 * h2_cuda_matmul.cu, the compression h2_compress_cuda.cu); .cu files only.
 */
#ifndef GK_H2_CUDA_IMPL_CUH
#define GK_H2_CUDA_IMPL_CUH

#include <algorithm>
#include "device/gk_cuda.h"
#include "device/gk_resident.h"
#include "h2/h2.h"
#include "h2/h2_otf.h"

// cuBLAS grids are limited in the batch dimension; larger batches are chunked.
#define H2_MAX_BATCH 65535

struct h2_gpu {
  gk_resident res;   // first: its GPU, kind and bytes held
  int single;
  size_t el;
  h2_data data;
  gk_device_buffer U, E, S, D;
  // The dense leaf blocks are the same in a matrix and in its orthogonalized
  // or compressed form, so those share D: the owners' count (NULL: D is g's alone).
  int *dense_refs;
  gk_device_buffer slot_of_point;
  gk_device_buffer cpl_row, cpl_col, dense_row, dense_col;  // local indices, storage order
  gk_device_buffer cpl_ptrs, dense_ptrs;                    // marshaled A, B, C pointers
  gk_device_buffer cpl_row_ptr, cpl_row_blocks, dense_row_blocks;
  // Tasks of the small-block kernels (h2_gemv.cuh): every coupling level's,
  // deepest level first (level l: cpl_task_first[l] .. + cpl_task_count[l],
  // host arrays of depth + 1), and the dense blocks'; arrival counters of the
  // split rows (zero between launches) and their partial sums (partial_units
  // units of H2_GEMV_MAX_DIM x min(work_nrhs, 4) entries, with the workspace).
  gk_device_buffer cpl_tasks, dense_tasks, counters, partial;
  int *cpl_task_first, *cpl_task_count;
  int dense_task_count, partial_units;
  int force_cublas;   // benchmarks: cuBLAS even where the small-block kernels apply
  int work_nrhs, xio_nrhs;   // right-hand sides the workspace / the staging copy hold
  gk_device_buffer xp, yp, xhat, yhat, xio;
  gk_device_buffer nonfinite;   // an int the host products' input permutation sets on NA/NaN/Inf
  gk_device_buffer tree_slots;   // the slots in h2_tree_point_order (made when first asked)
  gk_stream low_rank, dense;  // high and low priority
  cudaEvent_t forked, joined;
  h2_otf *otf;   // owned; set: couplings and dense blocks on the fly (h2_otf.h)
};

/* A GPU matrix for the structure t whose U, E and S are allocated but not
 * filled (the caller writes them) and whose dense blocks are either those of
 * `dense_from` (same tree shape at the leaves), shared, or on the fly through
 * `dense_otf` (h2_otf_build_dense of t, owned from then on, also on failure).
 * On the device in use. */
gk_status h2_gpu_create_for_transform(const h2_tree *t, int single, h2_gpu *dense_from,
                                      h2_otf *dense_otf, h2_gpu **out, gk_error *err);

/* The tree's geometry on the device in use (boxes, leaf points and sizes):
 * what the entries as built (h2_entries.h) are evaluated from. */
struct h2_gpu_geometry {
  gk_device_buffer center, half, points, counts;
};
gk_status h2_gpu_geometry_upload(const h2_tree *t, h2_gpu_geometry *geo, gk_error *err);
void h2_gpu_geometry_free(h2_gpu_geometry *geo);

/* Blocks first .. first + count - 1 (storage order) of g's coupling level
 * `level` (which = H2_COUPLING; t must have the ranks as built) or of its
 * dense blocks (H2_DENSE), as the construction evaluates them, into dst (one
 * after the other, in g's precision) on `stream`: for matrices that do not
 * store them (on the fly). With `list` (a device array of storage indices
 * within the level; couplings only) the blocks list[first .. first + count - 1]
 * instead, e.g. a level's row_blocks for blocks in row order. */
gk_status h2_gpu_fill_as_built(const h2_tree *t, const h2_gpu *g, const h2_gpu_geometry *geo,
                               int which, int level, size_t first, size_t count,
                               const int *list, void *dst, cudaStream_t stream, gk_error *err);

/* The device memory g holds (its buffers and its on-the-fly data), for its
 * resident header. */
size_t h2_gpu_bytes_held(const h2_gpu *g);

/* One HMV of the padded vectors in g's workspace (xp to yp, nrhs columns;
 * h2_hmv.c over the GPU's operations) on g's streams. */
gk_status h2_gpu_run_hmv(const h2_tree *t, h2_gpu *g, int nrhs, gk_error *err);

/* The product of h2_gpu_matmul_device queued on g's low-rank stream and not
 * waited for (the split products of several GPUs, h2_split_cuda.cu, queue
 * them all from one thread). */
gk_status h2_gpu_matmul_queue(const h2_tree *t, h2_gpu *g, const double *x, int nrhs, double *y,
                              int tree_order, gk_error *err);

/* Queues on g's low-rank stream, not waited for: x (n x nrhs, the tree's
 * order, page-locked host memory) up into g's staging copy (xio), the
 * product there in place, and rows first .. first + count - 1 of every
 * column back into y (host, the same layout). */
gk_status h2_gpu_matmul_rows_queue(const h2_tree *t, h2_gpu *g, const double *x, int nrhs,
                                   double *y, size_t first, size_t count, gk_error *err);

/* Blocks of 256 threads for a grid-stride loop over `total` entries: enough
 * to fill an H100 (132 SMs) 64 deep, never more. */
static inline unsigned h2_grid_for(size_t total)
{
  size_t blocks = (total + 255) / 256;
  return (unsigned) std::min<size_t>(std::max<size_t>(blocks, 1), 132 * 64);
}

#endif
