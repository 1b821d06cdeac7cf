/* The host ends of downloads into R memory (declared in gk_device.h). */
#include <string.h>
#include "device/gk_device.h"
#include "device/gk_omp.h"

void gk_host_prefault(void *p, size_t bytes)
{
  volatile char *c = (volatile char *) p;
  for (size_t at = 0; at < bytes; at += 4096) c[at] = 0;
}

/* Pieces of 1 MiB on up to 8 threads: a copy out of page-locked staging is
 * bound by one core's bandwidth, and a few cores reach the host's. */
void gk_host_copy(void *dst, const void *src, size_t bytes)
{
  const size_t piece = (size_t) 1 << 20;
  if (bytes < 2 * piece) {
    if (bytes) memcpy(dst, src, bytes);
    return;
  }
  const long pieces = (long) ((bytes + piece - 1) / piece);
  const int threads = gk_omp_threads(pieces < 8 ? (int) pieces : 8);
  (void) threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
  for (long q = 0; q < pieces; q++) {
    const size_t at = (size_t) q * piece, len = bytes - at < piece ? bytes - at : piece;
    memcpy((char *) dst + at, (const char *) src + at, len);
  }
}
