/* The host ends of downloads into R memory (declared in gk_device.h). */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include "device/gk_device.h"
#include "device/gk_omp.h"

#define HOST_PAGE ((size_t) 4096)
#define HOST_PIECE ((size_t) 1 << 20)   /* the unit of work of one thread */

/* Threads for `bytes` of host memory work: one per MiB piece, at most 8 (a
 * few cores reach the host's bandwidth; more only wait for each other). */
static int host_threads(size_t bytes)
{
  const size_t pieces = (bytes + HOST_PIECE - 1) / HOST_PIECE;
  return gk_omp_threads(pieces < 8 ? (int) pieces : 8);
}

/* A fresh page costs a fault, and faults on several threads overlap: large
 * blocks are touched on several threads (2 MiB pages asked for with madvise
 * did no better for these blocks, inst/bench/RESULTS.md). */
void gk_host_prefault(void *p, size_t bytes)
{
  const long pages = (long) ((bytes + HOST_PAGE - 1) / HOST_PAGE);
  const int threads = bytes < 2 * HOST_PIECE ? 1 : host_threads(bytes);
  (void) threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
  for (long q = 0; q < pages; q++) ((volatile char *) p)[(size_t) q * HOST_PAGE] = 0;
}

void gk_host_huge_pages(void *at, size_t len)
{
#ifdef MADV_HUGEPAGE
  const size_t huge = GK_HOST_HUGE_PAGE;
  uintptr_t from = ((uintptr_t) at + huge - 1) / huge * huge,
            to = ((uintptr_t) at + len) / huge * huge;
  if (to > from) madvise((void *) from, to - from, MADV_HUGEPAGE);
#else
  (void) at;
  (void) len;
#endif
}

/* Pieces of 1 MiB on up to 8 threads: a copy out of page-locked staging is
 * bound by one core's bandwidth, and a few cores reach the host's. */
void gk_host_copy(void *dst, const void *src, size_t bytes)
{
  if (bytes < 2 * HOST_PIECE) {
    if (bytes) memcpy(dst, src, bytes);
    return;
  }
  const long pieces = (long) ((bytes + HOST_PIECE - 1) / HOST_PIECE);
  const int threads = host_threads(bytes);
  (void) threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
  for (long q = 0; q < pieces; q++) {
    const size_t at = (size_t) q * HOST_PIECE, len = bytes - at < HOST_PIECE ? bytes - at : HOST_PIECE;
    memcpy((char *) dst + at, (const char *) src + at, len);
  }
}
