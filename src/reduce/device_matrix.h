/*
 * Matrices that stay on the GPU between calls (R's gk_device_matrix): points
 * or weights uploaded once and reused by many reductions. Column-major,
 * stored as double or as float.
 */
#ifndef GK_DEVICE_MATRIX_H
#define GK_DEVICE_MATRIX_H

#include <stddef.h>
#include "device/gk_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  gk_device_buffer buf;
  size_t rows;
  int cols;
  int single;   /* stored as float */
  int device;   /* the GPU that holds it (0-based) */
} gk_device_matrix;

/* Uploads the rows x cols doubles x, converted to float when `single`. */
gk_status device_matrix_upload(gk_device_matrix *dm, const double *x, size_t rows, int cols,
                               int single, gk_error *err);

/* Copies the matrix back into out (rows x cols doubles). */
gk_status device_matrix_download(const gk_device_matrix *dm, double *out, gk_error *err);

void device_matrix_free(gk_device_matrix *dm);

#ifdef __cplusplus
}
#endif
#endif
