/*
 * Matrices that stay on a GPU between calls (R's gk_device_matrix): points
 * or weights uploaded once and reused by many calls of any engine.
 * Column-major, stored as double or as float, on the GPU that was selected
 * when they were made; every use and the free go to that GPU.
 *
 * Far from the origin a column is stored centred: the GPU holds x - c (then
 * rounded to float for single storage, so that the digits of differences
 * survive) with c kept in double on the host; users of the GPU copy add c
 * back (the reductions: as a shift to a common point, in double).
 */
#ifndef GK_DEVICE_MATRIX_H
#define GK_DEVICE_MATRIX_H

#include <stddef.h>
#include "device/gk_device.h"
#include "device/gk_resident.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  gk_resident res;    /* first: the GPU that holds it, its kind, its bytes */
  gk_device_buffer buf;
  size_t rows;
  int cols;
  int single;         /* stored as float */
  double min_value;   /* smallest entry (+Inf when empty): checks such as
                         "weights must be non-negative" need no download */
  double *centre;     /* cols values subtracted before storing (malloc'd), or
                         NULL when every column is stored as it is */
} gk_device_matrix;

/* The centre c[cols] of the rows x cols matrix x: per column, its first entry
 * when every entry lies within a factor 2 of it (same sign), else 0. Then
 * x - c is exact in double (Sterbenz), so (x - c) + c gives x back, and c is
 * not 0 exactly where the column's spread is small against its magnitude,
 * which is where centring keeps digits. Returns whether some c is not 0.
 * Plain host code, in every build (R rounds saved single matrices with it). */
int device_matrix_centre(const double *x, size_t rows, int cols, double *c);

/* Uploads the rows x cols doubles x to the active device, centred
 * (device_matrix_centre) when `may_centre` and converted to float when
 * `single`. Blocks of vectors that callers copy straight from the buffer
 * (the GP probes) are uploaded as they are (may_centre = 0). dm must be
 * zeroed. */
gk_status device_matrix_upload(gk_device_matrix *dm, const double *x, size_t rows, int cols,
                               int single, int may_centre, gk_error *err);

/* Copies the matrix back into out (rows x cols doubles), its centre added
 * back in double: x itself for double storage. */
gk_status device_matrix_download(const gk_device_matrix *dm, double *out, gk_error *err);

/* Frees its GPU memory on its GPU and its centre (not the struct itself). */
void device_matrix_free(gk_device_matrix *dm);

#ifdef __cplusplus
}
#endif
#endif
