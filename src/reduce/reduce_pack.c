/* Host points written into the GPU engine's staging buffer (reduce.h:
 * reduce_pack_points), on several threads when they are many: the upload
 * waits for the packing, so its time adds to every call's, and one core
 * converts and writes them more slowly than several. */
#include <float.h>
#include <math.h>
#include "reduce/reduce.h"
#include "device/gk_omp.h"

/* One piece of a column: its values, the largest |value| written. A value
 * that is not finite (beyond float's range) makes the largest +Inf. */
static double pack_piece(void *dst, int single, const double *src, size_t count, double origin,
                         double scale)
{
  double big = 0.0;
  if (single) {
    float *out = (float *) dst;
    for (size_t i = 0; i < count; i++) {
      const float v = (float) ((src[i] - origin) * scale);
      const double a = fabs((double) v);
      out[i] = v;
      big = a > big ? a : big;
    }
  } else {
    double *out = (double *) dst;
    for (size_t i = 0; i < count; i++) {
      const double v = (src[i] - origin) * scale, a = fabs(v);
      out[i] = v;
      big = a > big ? a : big;
    }
  }
  return big;
}

int reduce_pack_points(void *dst, int single, const double *src, size_t rows, int cols,
                       const double *origin, const double *scale, double *largest)
{
  const size_t piece = GK_OMP_PASS_PIECE, per_column = (rows + piece - 1) / piece;
  const long pieces = (long) (per_column * (size_t) cols);
  const size_t bytes = single ? sizeof(float) : sizeof(double);
  const int threads = gk_omp_pass_threads(rows * (size_t) cols);
  double big = 0.0;
  (void) threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) reduction(max : big) if (threads > 1)
#endif
  for (long p = 0; p < pieces; p++) {
    const int d = (int) ((size_t) p / per_column);
    const size_t at = (size_t) p % per_column * piece, count = rows - at < piece ? rows - at : piece;
    const size_t offset = (size_t) d * rows + at;
    const double b = pack_piece((char *) dst + offset * bytes, single, src + offset, count,
                                origin ? origin[d] : 0.0, scale ? scale[d] : 1.0);
    big = b > big ? b : big;
  }
  if (largest && big > *largest) *largest = big;
  return big <= (single ? (double) FLT_MAX : DBL_MAX);
}
