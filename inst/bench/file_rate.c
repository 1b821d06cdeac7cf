/* Write rates of a file on disk as pcf_dist_file() writes it (issue 37):
 * fallocated first, then its first writes by T threads in 2 MiB pieces,
 * either through a shared mapping (the engine's block writer) or with
 * pwrite() from a private buffer (large runs; a writer that pwrites each
 * block column, runs of a few KB, was slower than the mapping). Page-cache
 * rates: nothing is synced. Not part of the package's build:
 *   gcc -O2 -fopenmp inst/bench/file_rate.c -o /tmp/file_rate
 *   /tmp/file_rate GB FILE THREADS...
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#define PIECE ((size_t) 1 << 21)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

static double run(const char *path, size_t len, int threads, int mapped) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || fallocate(fd, 0, 0, (off_t) len) != 0) { perror(path); exit(1); }
  long long n = (long long) (len / PIECE);
  double t0 = now();
  if (mapped) {
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
    for (long long k = 0; k < n; k++) memset(p + k * PIECE, 1, PIECE);
    munmap(p, len);
  } else {
#pragma omp parallel num_threads(threads)
    {
      char *buf = malloc(PIECE);
      memset(buf, 1, PIECE);
#pragma omp for schedule(dynamic, 4)
      for (long long k = 0; k < n; k++)
        if (pwrite(fd, buf, PIECE, (off_t) (k * PIECE)) != (ssize_t) PIECE) perror("pwrite");
      free(buf);
    }
  }
  double t = now() - t0;
  close(fd);
  unlink(path);
  return t;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: file_rate GB FILE THREADS...\n"); return 1; }
  size_t len = (size_t) (atof(argv[1]) * (1 << 30)) / PIECE * PIECE;
  for (int a = 3; a < argc; a++) {
    int threads = atoi(argv[a]);
    double m = run(argv[2], len, threads, 1), w = run(argv[2], len, threads, 0);
    printf("file %s, %.1f GB, %d threads: mapped %.2f GB/s, pwrite %.2f GB/s\n", argv[2],
           len / 1e9, threads, len / 1e9 / m, len / 1e9 / w);
    fflush(stdout);
  }
  return 0;
}
