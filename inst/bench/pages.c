/* Page costs of a large result (issue 37, inst/bench/RESULTS.md): first
 * writes to private memory (4 KiB and 2 MiB pages) and to shared memory
 * (memfd), pages made first (MADV_POPULATE_WRITE, MAP_POPULATE, fallocate),
 * another process writing into this one's memory (process_vm_writev, the
 * workers' route of R/distributed.R), and a file on disk mapped and written
 * as pcf_dist_file() does. Not part of the package's build:
 *   gcc -O2 -fopenmp -pthread inst/bench/pages.c -o /tmp/pages
 *   /tmp/pages GB THREADS [file on the disk to test]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static size_t LEN; static int T;
#define PIECE ((size_t) 1 << 21)
static double fill(char *p) {   /* the scatter's writes: every byte, 2 MiB pieces, T threads */
  double t0 = now(); long long n = LEN / PIECE;
#pragma omp parallel for num_threads(T) schedule(dynamic, 4)
  for (long long k = 0; k < n; k++) memset(p + k * PIECE, 1, PIECE);
  return now() - t0;
}
static double populate(char *p) {
  double t0 = now(); long long n = LEN / PIECE; int bad = 0;
#pragma omp parallel for num_threads(T) schedule(dynamic, 4) reduction(+:bad)
  for (long long k = 0; k < n; k++) bad += madvise(p + k * PIECE, PIECE, MADV_POPULATE_WRITE) != 0;
  if (bad) printf("  (populate failed on %d pieces)\n", bad);
  return now() - t0;
}
static char *anon(int advice) {
  char *p = mmap(NULL, LEN + PIECE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  p = (char *) (((size_t) p + PIECE - 1) / PIECE * PIECE);
  if (advice >= 0) madvise(p, LEN, advice);
  return p;
}
/* A child process (a worker) writes LEN bytes into this process's memory
 * with process_vm_writev, T pthreads (no OpenMP after fork), 2 MiB per call. */
static char *g_src, *g_dst; static pid_t g_parent; static long long g_next, g_bad;
static void *vm_worker(void *arg) {
  (void) arg; long long n = LEN / PIECE;
  for (;;) {
    long long k = __atomic_fetch_add(&g_next, 1, __ATOMIC_RELAXED);
    if (k >= n) break;
    struct iovec l = {g_src + k * PIECE, PIECE}, r = {g_dst + k * PIECE, PIECE};
    if (process_vm_writev(g_parent, &l, 1, &r, 1, 0) != (ssize_t) PIECE) __atomic_fetch_add(&g_bad, 1, __ATOMIC_RELAXED);
  }
  return NULL;
}
static void vm_write(const char *label, int advice, int prefault) {
  char *dst = anon(advice);
  if (prefault) fill(dst);
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  g_parent = getpid(); g_dst = dst;
  fflush(stdout);
  pid_t c = fork();
  if (c == 0) {
    g_src = anon(-1); memset(g_src, 3, LEN);
    pthread_t th[256]; int nt = T < 256 ? T : 256;
    double t0 = now();
    for (int i = 0; i < nt; i++) pthread_create(&th[i], NULL, vm_worker, NULL);
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
    double t = now() - t0;
    printf("process_vm_writev into %s: %.3f s (%.1f GB/s)%s\n", label, t, LEN / 1e9 / t, g_bad ? " FAILED" : "");
    fflush(stdout); _exit(0);
  }
  int st; waitpid(c, &st, 0);
  munmap(dst, LEN);
}

int main(int argc, char **argv) {
  double gb = atof(argv[1]); T = atoi(argv[2]);
  LEN = (size_t) (gb * (1 << 30)) / PIECE * PIECE;
  printf("pages: %.1f GB, %d threads\n", gb, T);
  char *p; double a, b;
  p = anon(-1); a = fill(p); b = fill(p); printf("private, default THP: first writes %.3f s (%.1f GB/s), again %.3f s\n", a, gb / a, b); munmap(p, LEN);
  p = anon(MADV_NOHUGEPAGE); a = fill(p); printf("private, 4 KiB pages: first writes %.3f s (%.1f GB/s)\n", a, gb / a); munmap(p, LEN);
  p = anon(MADV_HUGEPAGE); a = fill(p); printf("private, MADV_HUGEPAGE: first writes %.3f s (%.1f GB/s)\n", a, gb / a); munmap(p, LEN);
  p = anon(MADV_NOHUGEPAGE); a = populate(p); b = fill(p); printf("private 4 KiB: POPULATE_WRITE %.3f s, then writes %.3f s\n", a, b); munmap(p, LEN);
  p = anon(MADV_HUGEPAGE); a = populate(p); b = fill(p); printf("private 2 MiB: POPULATE_WRITE %.3f s, then writes %.3f s\n", a, b); munmap(p, LEN);
  vm_write("fresh private 4 KiB pages", MADV_NOHUGEPAGE, 0);
  vm_write("fresh private, MADV_HUGEPAGE", MADV_HUGEPAGE, 0);
  vm_write("private pages already made", -1, 1);
  int fd = memfd_create("pages", MFD_CLOEXEC); if (ftruncate(fd, LEN)) return 1;
  p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); madvise(p, LEN, MADV_HUGEPAGE);
  a = fill(p); printf("memfd: first writes %.3f s (%.1f GB/s)\n", a, gb / a);
  char *q = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  a = fill(q); printf("memfd, pages made, 2nd mapping (a worker): writes %.3f s (%.1f GB/s)\n", a, gb / a); munmap(q, LEN);
  double t0 = now(); q = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0); a = now() - t0;
  b = fill(q); printf("memfd, pages made, MAP_POPULATE mapping: mmap %.3f s, writes %.3f s\n", a, b); munmap(q, LEN);
  munmap(p, LEN); close(fd);
  fd = memfd_create("pages2", MFD_CLOEXEC); if (ftruncate(fd, LEN)) return 1;
  t0 = now(); int r = fallocate(fd, 0, 0, LEN); a = now() - t0;
  p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  b = fill(p); printf("memfd fallocate %.3f s (rc %d), then writes %.3f s\n", a, r, b); munmap(p, LEN); close(fd);
  fd = memfd_create("pages3", MFD_CLOEXEC); if (ftruncate(fd, LEN)) return 1;
  p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  a = populate(p); q = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); b = fill(q);
  printf("memfd: caller's POPULATE_WRITE %.3f s, then a worker's writes %.3f s\n", a, b);
  munmap(q, LEN); munmap(p, LEN); close(fd);
  if (argc > 3) {   /* a file on disk: fallocate, mapped shared, written, then msync */
    fd = open(argv[3], O_RDWR | O_CREAT | O_TRUNC, 0600);
    t0 = now(); r = fallocate(fd, 0, 0, LEN); a = now() - t0;
    p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    b = fill(p); t0 = now(); msync(p, LEN, MS_SYNC); double c = now() - t0;
    printf("file %s: fallocate %.3f s (rc %d), mapped writes %.3f s (%.1f GB/s), msync %.3f s (%.2f GB/s to disk overall)\n",
           argv[3], a, r, b, gb / b, c, gb / (b + c));
    munmap(p, LEN); close(fd); unlink(argv[3]);
  }
  return 0;
}
