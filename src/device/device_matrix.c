/* The host-side rule of device matrices (device_matrix.h), in every build. */
#include "device/device_matrix.h"

/* Sterbenz: for a, c of one sign with |c| / 2 <= |a| <= 2 |c|, a - c is exact. */
static int within_factor_two(double a, double c)
{
  return c > 0 ? a >= 0.5 * c && a <= 2.0 * c : a <= 0.5 * c && a >= 2.0 * c;
}

int device_matrix_centre(const double *x, size_t rows, int cols, double *c)
{
  int any = 0;
  for (int k = 0; k < cols; k++) {
    const double *col = x + (size_t) k * rows;
    c[k] = 0.0;
    if (rows == 0 || col[0] == 0.0) continue;
    size_t i = 1;
    while (i < rows && within_factor_two(col[i], col[0])) i++;
    if (i == rows) {
      c[k] = col[0];
      any = 1;
    }
  }
  return any;
}
