/*
 * The k nearest PCFs of each PCF without the distance matrix: a reducing
 * result writer (device/block_writer.h) that folds each block of distances,
 * as the CPU or GPU PCF engine hands it over, into running sorted lists of
 * the k smallest distances per row (ties to the smaller index). Blocks may
 * arrive from several threads at once (one per GPU): rows are locked in
 * tiles of 16 while their lists change. Pure host C.
 *
 * Symmetric mode (the k nearest among X itself): the engine runs a lower-
 * triangle plan (writer kind GK_WRITE_DIST, pairs i > j only); every pair is
 * offered to both rows, and a function is never its own neighbour.
 * Dense mode (rows of X against the functions of Y): every entry is offered
 * to its row. With column lists (n_cols > 0, dense mode only), every entry is
 * also offered to its column's list: one pass over a block of X against
 * other functions gives the k nearest in both directions (a distributed
 * chunk of the triangle: its band against the functions before it).
 */
#ifndef GK_PCF_KNN_H
#define GK_PCF_KNN_H

#include <stddef.h>
#include "device/gk_error.h"
#include "device/block_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcf_knn_state pcf_knn_state;

gk_status pcf_knn_create(size_t n_rows, size_t n_cols, int k, int symmetric,
                         pcf_knn_state **state, gk_error *err);
void pcf_knn_destroy(pcf_knn_state *state);

/* The writer to hand to pcf_matrix_cpu / pcf_matrix_cuda. */
gk_block_writer pcf_knn_writer(pcf_knn_state *state, int threads);

/* The lists as n_rows x k column-major matrices: distances, and 1-based
 * column numbers (0 where a row has fewer than k candidates). */
void pcf_knn_result(const pcf_knn_state *state, double *distance, int *index);
/* The column lists the same way (n_cols x k; candidates are rows). */
void pcf_knn_column_result(const pcf_knn_state *state, double *distance, int *index);

#ifdef __cplusplus
}
#endif
#endif
