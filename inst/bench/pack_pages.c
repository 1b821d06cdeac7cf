/* What a PCF band's packing costs on the host (issue 37, inst/bench/RESULTS.md):
 * pcf_pack() of one band of the 5e4 benchmark (5792 functions of 10..1000
 * breakpoints, float intervals, 23.5 MB) into fresh memory of 4 KiB pages, of
 * 2 MiB pages (MADV_HUGEPAGE), and into memory already in use. Linked against
 * the installed package's library, not part of its build:
 *   lib=$(Rscript -e 'cat(system.file("libs", package = "gpukernels"))')
 *   gcc -O2 -fopenmp inst/bench/pack_pages.c -o /tmp/pack_pages $lib/gpukernels.so \
 *     -Wl,-rpath,$lib
 *   /tmp/pack_pages THREADS
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* As in src/pcf/pcf.h and pcf_pack.h. */
typedef struct {
  size_t n;
  const size_t *offset;
  const double *t, *v;
} pcf_set;
void pcf_pack(const pcf_set *s, size_t first, const int *order, size_t count, int single,
              void *out, size_t *offsets, int threads);

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
  const size_t n = 5792, huge = (size_t) 2 << 20;
  const int reps = 20, threads = argc > 1 ? atoi(argv[1]) : 1;
  size_t *offset = malloc((n + 1) * sizeof(size_t));
  offset[0] = 0;
  srand(1);
  for (size_t i = 0; i < n; i++) offset[i + 1] = offset[i] + 10 + (size_t) (rand() % 991);
  size_t total = offset[n];
  double *t = malloc(total * sizeof(double)), *v = malloc(total * sizeof(double));
  for (size_t i = 0; i < total; i++) {
    t[i] = (double) i;
    v[i] = 0.5 * (double) i;
  }
  pcf_set s = {n, offset, t, v};
  size_t *offsets = malloc((n + 1) * sizeof(size_t));
  size_t bytes = (total + n + 1) * 8, mapped = (bytes + huge - 1) / huge * huge;
  unsigned char *in_use = malloc(bytes);
  memset(in_use, 1, bytes);
  double seconds[3] = {0, 0, 0};   /* 4 KiB pages, 2 MiB pages, memory in use */
  for (int rep = 0; rep < reps; rep++) {
    for (int kind = 0; kind < 3; kind++) {
      unsigned char *out = in_use;
      if (kind < 2) {
        out = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (kind == 1) madvise(out, mapped, MADV_HUGEPAGE);
      }
      double t0 = now();
      pcf_pack(&s, 0, NULL, n, 1, out, offsets, threads);
      seconds[kind] += now() - t0;
      if (kind < 2) munmap(out, mapped);
    }
  }
  printf("%zu intervals (%.1f MB), %d threads, mean of %d: fresh 4 KiB pages %.1f ms, "
         "fresh 2 MiB pages %.1f ms, memory in use %.1f ms\n", total, bytes / 1e6, threads, reps,
         seconds[0] / reps * 1e3, seconds[1] / reps * 1e3, seconds[2] / reps * 1e3);
  return 0;
}
