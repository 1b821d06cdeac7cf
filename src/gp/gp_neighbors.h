/*
 * The Vecchia neighbour search of the GP engine (pure C): for points in a
 * fixed (random) order, up to m nearest points that come before each one.
 *
 * In 1 to 3 dimensions the host walks grid cells (gp_neighbors_cells.c, on
 * either backend: the same code, so the same answer). Beyond, rows are
 * searched in growing blocks: the rows start..end look among the
 * points 1..end (of which at least about two thirds precede them) for their
 * k = min(GP_NEIGHBORS_MAX_CANDIDATES, 2m + 2, end) nearest, and keep the
 * first m that precede the row (gp_keep_preceding, gp.h). Every search is a
 * KMIN reduction of the squared distance by the reduction engine (reduce.h),
 * exactly as knn() asks for it: small blocks by brute force, larger ones
 * block-sparse, with the points in grid cells of side s (a ball of radius s
 * holds about 4k points on average) and each cell holding rows searching the
 * 3^dim cells around it. A row whose k-th distance is not within s may have a
 * nearer point outside those cells and is searched again in full.
 *
 * A row i (0-based) where fewer than min(m, i) of its k candidates precede
 * it (many early rows of the first block, with few predecessors among 4m
 * points; beyond it about 1 row in 200 at m = 1 and fewer at larger m) is
 * searched again by brute force among all the points before it. Every row
 * thus gets exactly its min(m, i) nearest preceding points (the textbook
 * Vecchia rule; ties to the earlier point).
 */
#ifndef GK_GP_NEIGHBORS_H
#define GK_GP_NEIGHBORS_H

#include "device/gk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Candidates per row on both backends (so that they agree): up to 64 the
 * GPU's KMIN keeps them in registers, and its block-sparse path takes no
 * more. R's gp_max_neighbors is the same number. */
#define GP_NEIGHBORS_MAX_CANDIDATES 64

typedef struct {
  int gpu;              /* 1: reduce_cuda on the active GPU; 0: reduce_cpu          */
  int threads;          /* CPU threads (<= 0: all): the CPU engine and the host work */
  double dense_pairs;   /* a block of at most this many rows x points is searched
                           by brute force, a larger one in grid cells              */
} gp_neighbors_options;

/* Dimensions up to which the cell walk (gp_neighbors_cells) searches. */
#define GP_NEIGHBORS_CELL_DIMS 3

/* x: n x dim column-major, finite; m at most GP_NEIGHBORS_MAX_CANDIDATES.
 * Fills nbr (n x m column-major, 1-based indices of earlier points, nearest
 * first, 0 pads: only in the first m rows) and *duplicates (the
 * candidates at distance 0 that precede their row: duplicated locations).
 * Interrupts are checked between blocks (GK_ERR_INTERRUPTED). */
gk_status gp_neighbors(const double *x, int n, int dim, int m, const gp_neighbors_options *opt,
                       int *nbr, int *duplicates, gk_error *err);

/* The search of gp_neighbors() in dim <= GP_NEIGHBORS_CELL_DIMS on a host
 * thread of its own (gp_neighbors_job.c), so that the caller can work
 * meanwhile; x and nbr must stay valid until the job is joined. */
typedef struct gp_neighbors_job gp_neighbors_job;
gk_status gp_neighbors_start(const double *x, int n, int dim, int m, int threads, int *nbr,
                             gp_neighbors_job **job, gk_error *err);

/* Waits for the job (cancel: asks it to stop first; while waiting, an
 * interrupt of the host program does too) and frees it: the search's status,
 * *duplicates and error. Call it from the thread that started the job. */
gk_status gp_neighbors_join(gp_neighbors_job *job, int cancel, int *duplicates, gk_error *err);

/* Internal to the search. The rows of a block: from `first` (0-based) to
 * this (exclusive): 4m rows first, then each block's prefix half as long
 * again as the last. */
int gp_neighbors_block_end(int first, int n, int m);

/* The search in dim <= GP_NEIGHBORS_CELL_DIMS: nbr as gp_neighbors() fills
 * it (zeroed by the caller), *dup increased by the duplicates; k_most: the
 * candidates per row of the block search, which the count of duplicates
 * follows. */
gk_status gp_neighbors_cells(const double *x, int n, int dim, int m, int k_most, int threads,
                             int *nbr, long long *dup, gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
