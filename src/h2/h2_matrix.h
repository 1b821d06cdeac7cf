/*
 * An H2 matrix as the package holds it (the object behind an R h2matrix):
 * its structure, its data on one backend, its form and why that form was
 * taken, and the bytes it holds registered with the memory policy
 * (device/gk_memory.h). The engine owns the policy: which form a build takes
 * (h2_otf_choose), which form a compression's result takes, which backend
 * works, and what is counted. The host program only passes its
 * collect-garbage hook and the user's choices.
 */
#ifndef GK_H2_MATRIX_H
#define GK_H2_MATRIX_H

#include "h2/h2.h"
#include "h2/h2_compress.h"
#include "device/gk_memory.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The forms of an H2 matrix: every block stored; couplings and dense blocks
 * on the fly (h2_otf_build); dense blocks on the fly with stored couplings
 * (h2_otf_build_dense: the compression of an on-the-fly matrix). */
typedef enum {
  H2_FORM_STORED = 0,
  H2_FORM_ON_THE_FLY = 1,
  H2_FORM_DENSE_ON_THE_FLY = 2
} h2_form;

/* What the user asked a build to store. */
typedef enum {
  H2_STORE_BLOCKS = 0,      /* every block stored                          */
  H2_STORE_ON_THE_FLY = 1,  /* couplings and dense blocks on the fly       */
  H2_STORE_AUTO = 2,        /* the storage model's choice (h2_otf_choose)  */
  H2_STORE_IF_FITS = 3      /* stored unless it would not fit the memory
                               budget: for products of many columns, where
                               the on-the-fly form's per-column cost loses */
} h2_storage_request;

/* Asks the host program to free unreachable objects before `bytes` are
 * allocated on `where` (GK_MEMORY_HOST or a device) when the memory policy
 * says so; persistent: bytes that outlive the call. NULL: nothing to ask. */
typedef void (*h2_make_room_fn)(int where, size_t bytes, int persistent);

typedef struct h2_matrix {
  h2_tree tree;
  int single;
  double build_seconds, tree_seconds;
  h2_cpu *cpu;            /* exactly one of cpu / gpu / parts is set         */
  h2_gpu *gpu;
  /* A matrix split over GPUs (h2_matrix_build_split): part p holds the
   * blocks of a range of leaves' rows (h2_tree_restrict) on GPU devices[p],
   * every basis and transfer on each, and computes those rows of a product. */
  int n_parts;
  struct h2_matrix **parts;
  int *part_rows;             /* n_parts + 1: each part's rows in tree_order     */
  int *tree_order;            /* n: the point at each row (h2_tree_point_order)  */
  int *tree_row;              /* n: each point's row (tree_order's inverse)      */
  h2_split_work *split_work;  /* the products' vectors, kept between calls       */
  gk_memory_hold mem;     /* the bytes registered with device/gk_memory.h    */
  h2_form form;
  int storage_reason;     /* why the form (H2_STORAGE_*, h2_otf.h)           */
  double ms_stored, ms_otf, kernel_pairs;   /* the model's predictions; NaN: not known */
  size_t otf_bytes;       /* host bytes of the on-the-fly data               */
} h2_matrix;

/* Builds the matrix of the (scaled) points xs (n x dim, column-major) in the
 * form `storage` asks for, on the GPU in use or the host. With `from` (a
 * tree built for the same points, leaf_size, eta and kernel, at any order;
 * else NULL) its copy for `order` is taken (h2_tree_for_order) and xs is not
 * read. *out is NULL on failure. */
gk_status h2_matrix_build(const double *xs, int n, int dim, int leaf_size, int order, double eta,
                          const gk_kernel *kernel, double nugget, int single, int gpu,
                          h2_storage_request storage, int threads, h2_make_room_fn make_room,
                          const h2_tree *from, h2_matrix **out, gk_error *err);

/* The matrix of h2_matrix_build, every block stored, split over the GPUs
 * devices[0 .. n_devices - 1] (0-based; fewer parts when the top coupling
 * level has fewer nodes, h2_tree_split_leaves): each holds the blocks of
 * about an equal share of the entries, so that products run on all of them
 * at once and a matrix larger than one GPU's memory fits their sum. */
gk_status h2_matrix_build_split(const double *xs, int n, int dim, int leaf_size, int order,
                                double eta, const gk_kernel *kernel, double nugget, int single,
                                const int *devices, int n_devices, int threads,
                                h2_make_room_fn make_room, h2_matrix **out, gk_error *err);

/* y = A x (host n x nrhs doubles) for a matrix split over GPUs: x in the
 * tree's order on host threads (GK_ERR_INPUT when it holds NA, NaN or Inf),
 * every part's rows at once on its GPU, then back to the points' order. */
gk_status h2_matrix_matmul_split(h2_matrix *h, const double *x, int nrhs, double *y,
                                 gk_error *err);

/* A new matrix from h: orthogonalized (orthogonalize set) or compressed to
 * tol, on h's backend (on the host when on_gpu is 0: a GPU matrix goes there
 * and back). The result's form follows from h's: with h's dense blocks on
 * the fly its dense blocks stay on the fly and its compressed couplings are
 * stored (H2_FORM_DENSE_ON_THE_FLY), else everything is stored. */
gk_status h2_matrix_compress(h2_matrix *h, int orthogonalize, double tol, int threads,
                             int on_gpu, h2_make_room_fn make_room, h2_matrix **out,
                             h2_compress_stats *st, gk_error *err);

/* h's data in double on the host, of every form: the blocks it does not
 * store are evaluated as built (h2.h). */
gk_status h2_matrix_export(h2_matrix *h, h2_host_data *d, int threads, gk_error *err);

/* A GPU matrix keeps its product workspace between calls (grown for the most
 * right-hand sides asked so far): its registered bytes follow, so that the
 * collection policy sees what the matrix really holds. */
void h2_matrix_recount(h2_matrix *h);

void h2_matrix_free(h2_matrix *h);

#ifdef __cplusplus
}
#endif
#endif
