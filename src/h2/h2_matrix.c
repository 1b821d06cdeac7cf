/*
 * The H2 matrix object and its policy (h2_matrix.h): the form a build takes,
 * the form and backend of a compression's result, and the bytes registered
 * with the memory policy before the data are made.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "h2/h2_matrix.h"
#include "h2/h2_otf.h"
#include "device/gk_device.h"
#include "device/gk_resident.h"
#include "device/gk_omp.h"

static void make_room(h2_make_room_fn fn, int where, size_t bytes, int persistent)
{
  if (fn) fn(where, bytes, persistent);
}

void h2_matrix_free(h2_matrix *h)
{
  if (!h) return;
  gk_memory_unregister(&h->mem);
  for (int p = 0; p < h->n_parts; p++) h2_matrix_free(h->parts[p]);
  free(h->parts);
  h2_split_work_free(h->split_work);
  free(h->part_rows);
  free(h->tree_order);
  free(h->tree_row);
  h2_cpu_free(h->cpu);
  h2_gpu_free(h->gpu);
  h2_tree_free(&h->tree);
  free(h);
}

static h2_matrix *matrix_new(int single, gk_error *err)
{
  h2_matrix *h = (h2_matrix *) calloc(1, sizeof *h);
  if (!h) {
    gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 matrix");
    return NULL;
  }
  h->single = single;
  h->form = H2_FORM_STORED;
  h->storage_reason = H2_STORAGE_REQUESTED;
  return h;
}

/* Before h's data are built (its tree is): collects unreachable matrices
 * first if this one would pass the memory policy, since the host program
 * sees only a handle of each, then counts h's bytes. */
static void make_room_and_register(h2_matrix *h, int gpu, h2_make_room_fn fn)
{
  int device = gpu ? gk_device_current() : GK_MEMORY_HOST;
  size_t data = h2_data_bytes(&h->tree, h->single), host = h2_tree_bytes(&h->tree);
  if (h->form != H2_FORM_STORED) {   // bases, transfers (couplings), nodes and ranges (h2_otf.h)
    size_t entries = h2_basis_entries(&h->tree) + h2_transfer_entries(&h->tree);
    if (h->form == H2_FORM_DENSE_ON_THE_FLY) entries += h2_coupling_entries(&h->tree);
    data = entries * (h->single ? 4 : 8) + h->otf_bytes;
  }
  if (!gpu) host += data;
  make_room(fn, GK_MEMORY_HOST, host, 1);
  if (gpu) make_room(fn, device, data, 1);
  gk_memory_register(&h->mem, device, host, gpu ? data : 0);
}

/* The form of a new matrix: stored unless asked otherwise, or unless the
 * storage model (h2_otf_choose) prefers the on-the-fly form for speed or
 * memory. Sets h's form and model figures; *otf is the on-the-fly data when
 * that form is taken. */
static gk_status choose_storage(h2_matrix *h, h2_storage_request storage, int gpu,
                                h2_make_room_fn fn, h2_otf **otf, gk_error *err)
{
  *otf = NULL;
  h->storage_reason = H2_STORAGE_REQUESTED;
  if (storage == H2_STORE_BLOCKS) return GK_OK;
  if (h2_otf_build(&h->tree, otf, err)) return err->status;
  double cpl, dense;
  h2_otf_pairs(*otf, gpu, &cpl, &dense);
  h->kernel_pairs = cpl + dense;
  // Unreachable matrices do not count against the stored form: collect them
  // first if it would pass the memory policy (this also reads the host budget).
  int where = gpu ? gk_device_current() : GK_MEMORY_HOST;
  make_room(fn, where, h2_data_bytes(&h->tree, h->single), 1);
  double available = gk_memory_available(where);
  int take = h2_otf_choose(&h->tree, *otf, h->single, gpu, available, &h->ms_stored, &h->ms_otf,
                           &h->storage_reason);
  if (storage == H2_STORE_ON_THE_FLY) {
    take = 1;
    h->storage_reason = H2_STORAGE_REQUESTED;
  } else if (storage == H2_STORE_IF_FITS) {
    take = h->storage_reason == H2_STORAGE_MEMORY;
    if (!take) h->storage_reason = H2_STORAGE_REQUESTED;
  }
  if (!take) {
    h2_otf_free(*otf);
    *otf = NULL;
    return GK_OK;
  }
  h->form = H2_FORM_ON_THE_FLY;
  h->otf_bytes = (*otf)->host_bytes;
  return GK_OK;
}

gk_status h2_matrix_build(const double *xs, int n, int dim, int leaf_size, int order, double eta,
                          const gk_kernel *kernel, double nugget, int single, int gpu,
                          h2_storage_request storage, int threads, h2_make_room_fn fn,
                          const h2_tree *from, h2_matrix **out, gk_error *err)
{
  *out = NULL;
  h2_matrix *h = matrix_new(single, err);
  if (!h) return err->status;
  double start = h2_seconds_now();
  gk_status made = from ? h2_tree_for_order(&h->tree, from, order, nugget, err)
                        : h2_tree_build(&h->tree, xs, n, dim, leaf_size, order, eta, kernel,
                                        nugget, threads, err);
  if (made == GK_OK) {
    h->tree_seconds = h2_seconds_now() - start;
    h2_otf *otf = NULL;
    if (choose_storage(h, storage, gpu, fn, &otf, err) == GK_OK) {
      make_room_and_register(h, gpu, fn);
      if (otf && gpu)
        h2_gpu_build_otf(&h->tree, h->single, otf, &h->gpu, err);
      else if (otf)
        h2_cpu_build_otf(&h->tree, h->single, threads, otf, &h->cpu, err);
      else if (gpu)
        h2_gpu_build(&h->tree, h->single, &h->gpu, err);
      else
        h2_cpu_build(&h->tree, h->single, threads, &h->cpu, err);
    }
  }
  h->build_seconds = h2_seconds_now() - start;
  if (err->status) {
    h2_matrix_free(h);
    return err->status;
  }
  *out = h;
  return GK_OK;
}

gk_status h2_matrix_build_split(const double *xs, int n, int dim, int leaf_size, int order,
                                double eta, const gk_kernel *kernel, double nugget, int single,
                                const int *devices, int n_devices, int threads,
                                h2_make_room_fn fn, h2_matrix **out, gk_error *err)
{
  *out = NULL;
  h2_matrix *h = matrix_new(single, err);
  if (!h) return err->status;
  double start = h2_seconds_now();
  int *bounds = NULL;
  const h2_tree **trees = NULL;
  h2_gpu **gpus = NULL;
  if (h2_tree_build(&h->tree, xs, n, dim, leaf_size, order, eta, kernel, nugget, threads, err))
    goto fail;
  h->tree_seconds = h2_seconds_now() - start;
  gk_memory_register(&h->mem, GK_MEMORY_HOST, h2_tree_bytes(&h->tree), 0);
  bounds = (int *) malloc(((size_t) n_devices + 1) * sizeof(int));
  trees = (const h2_tree **) calloc((size_t) n_devices, sizeof *trees);
  gpus = (h2_gpu **) calloc((size_t) n_devices, sizeof *gpus);
  h->parts = (h2_matrix **) calloc((size_t) n_devices, sizeof *h->parts);
  h->part_rows = (int *) malloc(((size_t) n_devices + 1) * sizeof(int));
  h->tree_order = (int *) malloc((size_t) n * sizeof(int) + 1);
  h->tree_row = (int *) malloc((size_t) n * sizeof(int) + 1);
  if (!bounds || !trees || !gpus || !h->parts || !h->part_rows || !h->tree_order ||
      !h->tree_row || h2_tree_point_order(&h->tree, h->tree_order)) {
    gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 matrix's parts");
    goto fail;
  }
  for (int e = 0; e < n; e++) h->tree_row[h->tree_order[e]] = e;
  int parts = h2_tree_split_leaves(&h->tree, n_devices, bounds);
  {   // each part's rows in the tree's order (by leaf, h2_tree_point_order): its leaves' points
    int row = 0, leaf = 0;
    for (int p = 0; p < parts; p++) {
      for (; leaf < bounds[p]; leaf++) row += h->tree.leaf_count[leaf];
      h->part_rows[p] = row;
    }
    h->part_rows[parts] = h->tree.n;
  }
  for (int p = 0; p < parts; p++) {
    h2_matrix *part = matrix_new(single, err);
    if (!part) goto fail;
    h->parts[h->n_parts++] = part;
    if (h2_tree_restrict(&part->tree, &h->tree, bounds[p], bounds[p + 1], err)) goto fail;
    trees[p] = &part->tree;
    size_t data = h2_data_bytes(&part->tree, single), host = h2_tree_bytes(&part->tree);
    make_room(fn, GK_MEMORY_HOST, host, 1);
    make_room(fn, devices[p], data, 1);
    gk_memory_register(&part->mem, devices[p], host, data);
  }
  if (h2_gpu_build_split(trees, parts, single, devices, gpus, err)) goto fail;
  for (int p = 0; p < parts; p++) h->parts[p]->gpu = gpus[p];
  h->build_seconds = h2_seconds_now() - start;
  free(bounds);
  free(trees);
  free(gpus);
  *out = h;
  return GK_OK;
fail:
  free(bounds);
  free(trees);
  free(gpus);
  h2_matrix_free(h);
  return err->status;
}

gk_status h2_matrix_matmul_split(h2_matrix *h, const double *x, int nrhs, double *y,
                                 gk_error *err)
{
  int parts = h->n_parts;
  size_t n = (size_t) h->tree.n, entries = n * (size_t) nrhs;
  const int *order = h->tree_order;
  double *tx = NULL, *ty = NULL;
  const h2_tree **trees = (const h2_tree **) calloc((size_t) parts, sizeof *trees);
  h2_gpu **gpus = (h2_gpu **) calloc((size_t) parts, sizeof *gpus);
  if (!trees || !gpus) {
    gk_fail(err, GK_ERR_NOMEM, "out of host memory for the H2 product's parts");
  } else if (h2_gpu_split_host(&h->split_work, entries, &tx, &ty, err) == GK_OK) {
    for (int p = 0; p < parts; p++) {
      trees[p] = &h->parts[p]->tree;
      gpus[p] = h->parts[p]->gpu;
    }
    // x into the tree's order, where each part's rows are contiguous; the
    // pass also checks that x is finite (x * 0 is 0 exactly then). Column
    // by column: the random reads stay within one column's pages.
    double poison = 0.0;
    int threads = gk_omp_pass_threads(entries);
#pragma omp parallel num_threads(threads) reduction(+ : poison)
    for (int c = 0; c < nrhs; c++) {
      const double *from = x + n * (size_t) c;
      double *to = tx + n * (size_t) c;
#pragma omp for schedule(static)
      for (size_t e = 0; e < n; e++) {
        to[e] = from[order[e]];
        poison += to[e] * 0.0;
      }
    }
    if (!(poison == 0.0)) {
      gk_fail(err, GK_ERR_INPUT, "x contains NA, NaN or infinite values");
    } else if (h2_gpu_matmul_split(trees, gpus, parts, h->part_rows, nrhs, &h->split_work,
                                   err) == GK_OK) {
      // back to the points' order, as a gather too: writes in order, which
      // random writes (each a read of its line first) are not
      const int *row = h->tree_row;
#pragma omp parallel num_threads(threads)
      for (int c = 0; c < nrhs; c++) {
        const double *from = ty + n * (size_t) c;
        double *to = y + n * (size_t) c;
#pragma omp for schedule(static)
        for (size_t i = 0; i < n; i++) to[i] = from[row[i]];
      }
    }
  }
  free(trees);
  free(gpus);
  for (int p = 0; p < parts; p++) h2_matrix_recount(h->parts[p]);
  return err->status;
}

void h2_matrix_recount(h2_matrix *h)
{
  if (!h->gpu) return;
  size_t now = h2_gpu_own_bytes(h->gpu);
  if (now == h->mem.device_bytes || h->mem.device < 0) return;
  int device = h->mem.device;
  size_t host = h->mem.host_bytes;
  gk_memory_unregister(&h->mem);
  gk_memory_register(&h->mem, device, host, now);
}

gk_status h2_matrix_export(h2_matrix *h, h2_host_data *d, int threads, gk_error *err)
{
  if (h->gpu) return h2_gpu_export(&h->tree, h->gpu, threads, d, err);
  return h2_cpu_export(&h->tree, h->cpu, d, err);
}

/* The storage model's figures for nh in the dense-on-the-fly form (couplings
 * stored) from its dense-only product o (NULL: one is made for the count and
 * freed): the kernel pairs of a product and the predicted times of the
 * stored and the mixed form (h2_otf_choose). NaN where none can be made. */
static void set_dense_otf_model(h2_matrix *nh, const h2_otf *o, int gpu)
{
  h2_otf *own = NULL;
  nh->ms_stored = nh->ms_otf = nh->kernel_pairs = NAN;
  if (!o) {
    gk_error ignored;
    gk_error_clear(&ignored);
    if (h2_otf_build_dense(&nh->tree, &own, &ignored)) return;
    o = own;
  }
  double cpl, dense;
  int reason;
  h2_otf_pairs(o, gpu, &cpl, &dense);
  nh->kernel_pairs = cpl + dense;   // cpl is 0: the couplings are stored
  h2_otf_choose(&nh->tree, o, nh->single, gpu, INFINITY, &nh->ms_stored, &nh->ms_otf, &reason);
  h2_otf_free(own);
}

/* On the GPU (h2_compress_cuda.cu): the new matrix shares h's dense blocks
 * or, with h's dense blocks on the fly, gets a dense-only on-the-fly product
 * of its own (the couplings of an on-the-fly h evaluated chunk by chunk,
 * never stored); room for at most h's low-rank part is made first, its own
 * bytes counted after. */
static gk_status compress_on_gpu(h2_matrix *h, double tol, int threads, h2_make_room_fn fn,
                                 h2_matrix *nh, h2_compress_stats *st, gk_error *err)
{
  int device = ((const gk_resident *) h->gpu)->device;   // an h2_gpu starts with it
  size_t el = h->single ? sizeof(float) : sizeof(double);
  size_t low = (h2_basis_entries(&h->tree) + h2_transfer_entries(&h->tree) +
                h2_coupling_entries(&h->tree)) * el;
  make_room(fn, device, low, 1);
  if (h2_transform_gpu(&h->tree, h->gpu, tol, threads, &nh->tree, &nh->gpu, st, err))
    return err->status;
  int dense_otf = nh->form == H2_FORM_DENSE_ON_THE_FLY;
  if (dense_otf) nh->otf_bytes = h2_gpu_otf_host_bytes(nh->gpu);
  gk_memory_register(&nh->mem, device, h2_tree_bytes(&nh->tree) + nh->otf_bytes,
                     h2_gpu_own_bytes(nh->gpu));
  if (dense_otf) set_dense_otf_model(nh, NULL, 1);
  return GK_OK;
}

/* On the host with LAPACK; a GPU matrix goes there and back. An on-the-fly
 * h's export evaluates the blocks it does not store, so the copy in double
 * can be far larger than h: checked against the host budget before it is
 * made (malloc may promise what the pages cannot keep). */
static gk_status compress_on_host(h2_matrix *h, int orthogonalize, double tol, int threads,
                                  h2_make_room_fn fn, h2_matrix *nh, h2_compress_stats *st,
                                  gk_error *err)
{
  const h2_tree *t = &h->tree;
  h2_host_data in = {0}, out = {0};
  double copy = 8.0 * (double) (h2_basis_entries(t) + h2_transfer_entries(t) +
                                h2_coupling_entries(t) + h2_dense_entries(t));
  make_room(fn, GK_MEMORY_HOST, (size_t) copy, 0);
  double available = gk_memory_available(GK_MEMORY_HOST);
  if (copy > available)
    return gk_fail(err, GK_ERR_NOMEM, "compressing this H2 matrix on the host needs its blocks in "
                   "double precision, %.1f GB of host memory, and %.1f GB are available "
                   "(options(gpukernels.host_memory_budget)); on a GPU it is compressed without "
                   "that copy", copy / 1e9, available / 1e9);
  if (h2_matrix_export(h, &in, threads, err) == GK_OK) {
    if (orthogonalize) h2_orthogonalize_host(t, &in, threads, &nh->tree, &out, st, err);
    else h2_compress_host(t, &in, tol, threads, &nh->tree, &out, st, err);
  }
  h2_host_data_free(&in);
  h2_otf *o = NULL;
  if (!err->status && nh->form == H2_FORM_DENSE_ON_THE_FLY &&
      h2_otf_build_dense(&nh->tree, &o, err) == GK_OK) {
    nh->otf_bytes = o->host_bytes;
    set_dense_otf_model(nh, o, h->gpu != NULL);
  }
  if (!err->status) {
    make_room_and_register(nh, h->gpu != NULL, fn);
    // o is owned by the import from here, also on failure
    if (h->gpu) h2_gpu_import(&nh->tree, nh->single, &out, o, &nh->gpu, err);
    else h2_cpu_import(&nh->tree, nh->single, threads, &out, o, &nh->cpu, err);
    o = NULL;
  }
  h2_otf_free(o);
  h2_host_data_free(&out);
  return err->status;
}

gk_status h2_matrix_compress(h2_matrix *h, int orthogonalize, double tol, int threads,
                             int on_gpu, h2_make_room_fn fn, h2_matrix **out,
                             h2_compress_stats *st, gk_error *err)
{
  *out = NULL;
  memset(st, 0, sizeof *st);
  h2_matrix *nh = matrix_new(h->single, err);
  if (!nh) return err->status;
  // The form follows from the input (summary() says so), not from a choice.
  nh->form = h->form != H2_FORM_STORED ? H2_FORM_DENSE_ON_THE_FLY : H2_FORM_STORED;
  nh->ms_stored = nh->ms_otf = NAN;   // no model for a stored result
  nh->kernel_pairs = 0.0;             // a stored product evaluates no kernel
  double start = h2_seconds_now();
  if (h->gpu && on_gpu)
    compress_on_gpu(h, orthogonalize ? 0.0 : tol, threads, fn, nh, st, err);
  else
    compress_on_host(h, orthogonalize, tol, threads, fn, nh, st, err);
  nh->build_seconds = h2_seconds_now() - start;
  if (err->status) {
    h2_matrix_free(nh);
    return err->status;
  }
  *out = nh;
  return GK_OK;
}
