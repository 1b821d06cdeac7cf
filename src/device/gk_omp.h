/* OpenMP behind one small shim, so the cores build with or without it. */
#ifndef GK_OMP_H
#define GK_OMP_H

#ifdef _OPENMP
#include <omp.h>
static inline int gk_omp_max_threads(void) { return omp_get_max_threads(); }
static inline int gk_omp_thread_id(void) { return omp_get_thread_num(); }
#else
static inline int gk_omp_max_threads(void) { return 1; }
static inline int gk_omp_thread_id(void) { return 0; }
#endif

/* Threads a core should use: the caller's request (<= 0 means "all"). */
static inline int gk_omp_threads(int requested)
{
  int most = gk_omp_max_threads();
  return (requested <= 0 || requested > most) ? most : requested;
}

/* Threads for one pass over `count` host values in pieces of
 * GK_OMP_PASS_PIECE: one below 2^17 values (the small calls' latency would
 * pay the threads' start), else one per piece, at most 8 (a few cores reach
 * the host's bandwidth). */
#define GK_OMP_PASS_PIECE ((size_t) 1 << 15)
static inline int gk_omp_pass_threads(size_t count)
{
  if (count < ((size_t) 1 << 17)) return 1;
  size_t pieces = (count + GK_OMP_PASS_PIECE - 1) / GK_OMP_PASS_PIECE;
  return gk_omp_threads(pieces < 8 ? (int) pieces : 8);
}

#endif
