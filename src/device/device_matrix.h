/*
 * Matrices that stay on a GPU between calls (R's gk_device_matrix): points
 * or weights uploaded once and reused by many calls of any engine.
 * Column-major, stored as double or as float, on the GPU that was selected
 * when they were made; every use and the free go to that GPU.
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
} gk_device_matrix;

/* Uploads the rows x cols doubles x to the active device, converted to float
 * when `single`. dm must be zeroed. */
gk_status device_matrix_upload(gk_device_matrix *dm, const double *x, size_t rows, int cols,
                               int single, gk_error *err);

/* Copies the matrix back into out (rows x cols doubles). */
gk_status device_matrix_download(const gk_device_matrix *dm, double *out, gk_error *err);

/* Frees its GPU memory on its GPU (not the struct itself). */
void device_matrix_free(gk_device_matrix *dm);

#ifdef __cplusplus
}
#endif
#endif
