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

#endif
