/* Write rates of a file as pcf_dist_file() writes it (issue 37): fallocated
 * first (not on tmpfs), then its first writes in 2 MiB pieces by PROCS
 * processes (each its share of the file) of T threads each, four ways:
 *   mapped    memset through a shared mapping: a page fault per 4 KiB page
 *             (the engine's block writer without pages made first);
 *   mapped2m  the same through a mapping that asks for 2 MiB pages
 *             (MADV_HUGEPAGE, as gk_file_map): a fault per 2 MiB where the
 *             file system has large folios (ext4 from Linux 6.16, XFS);
 *   populate  madvise(MADV_POPULATE_WRITE) per piece, then the memset (the
 *             pages made first, GK_FILE_POPULATE);
 *   pwrite    pwrite() from a private buffer (the file's lock lets one
 *             writer in at a time).
 * Page-cache rates: nothing is synced. Not part of the package's build:
 *   gcc -O2 -fopenmp inst/bench/file_rate.c -o /tmp/file_rate
 *   /tmp/file_rate GB FILE THREADS...        (FR_PROCS=2: two processes)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define PIECE ((size_t) 1 << 21)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
enum { MAPPED, MAPPED_2M, POPULATE, PWRITE };
static const char *mode_name[] = {"mapped", "mapped2m", "populate", "pwrite"};

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

/* Pieces [first, end) of the file written by this process on `threads` threads. */
static void write_share(int fd, char *map, long long first, long long end, int threads, int mode)
{
  if (mode == PWRITE) {
#pragma omp parallel num_threads(threads)
    {
      char *buf = malloc(PIECE);
      memset(buf, 1, PIECE);
#pragma omp for schedule(dynamic, 4)
      for (long long k = first; k < end; k++)
        if (pwrite(fd, buf, PIECE, (off_t) (k * PIECE)) != (ssize_t) PIECE) perror("pwrite");
      free(buf);
    }
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
  for (long long k = first; k < end; k++) {
    if (mode == POPULATE && madvise(map + k * PIECE, PIECE, MADV_POPULATE_WRITE) != 0) perror("madvise");
    memset(map + k * PIECE, 1, PIECE);
  }
}

static double run(const char *path, size_t len, int procs, int threads, int mode)
{
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  struct statfs fs;
  int tmpfs = fd >= 0 && fstatfs(fd, &fs) == 0 && (unsigned long) fs.f_type == 0x01021994UL;
  if (fd < 0 || (tmpfs ? ftruncate(fd, (off_t) len) : fallocate(fd, 0, 0, (off_t) len)) != 0) {
    perror(path);
    exit(1);
  }
  char *map = mode == PWRITE ? NULL : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mode == MAPPED_2M && madvise(map, len, MADV_HUGEPAGE) != 0) perror("madvise");
  long long n = (long long) (len / PIECE);
  double t0 = now();
  for (int p = 0; p < procs; p++) {
    long long first = n * p / procs, end = n * (p + 1) / procs;
    if (procs == 1) {
      write_share(fd, map, first, end, threads, mode);
    } else if (fork() == 0) {
      write_share(fd, map, first, end, threads, mode);
      _exit(0);
    }
  }
  if (procs > 1) while (wait(NULL) > 0) {}
  double t = now() - t0;
  if (map) munmap(map, len);
  close(fd);
  unlink(path);
  return t;
}

int main(int argc, char **argv)
{
  if (argc < 4) { fprintf(stderr, "usage: file_rate GB FILE THREADS...\n"); return 1; }
  size_t len = (size_t) (atof(argv[1]) * (1 << 30)) / PIECE * PIECE;
  int procs = getenv("FR_PROCS") ? atoi(getenv("FR_PROCS")) : 1;
  if (procs < 1) procs = 1;
  for (int a = 3; a < argc; a++) {
    int threads = atoi(argv[a]);
    printf("file %s, %.1f GB, %d process(es) x %d threads:", argv[2], len / 1e9, procs, threads);
    for (int mode = MAPPED; mode <= PWRITE; mode++)
      printf(" %s %.2f GB/s", mode_name[mode], len / 1e9 / run(argv[2], len, procs, threads, mode));
    printf("\n");
    fflush(stdout);
  }
  return 0;
}
