/* Shared result memory (see gk_shared.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* memfd_create */
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#if defined(__linux__)
#include <sys/vfs.h>
#endif
#include <time.h>
#include <unistd.h>
#include "device/gk_shared.h"
#include "device/gk_device.h"
#include "device/gk_omp.h"
#include "device/gk_tunables.h"

#define GK_SHARED_MAGIC 0x676b73686d303031ULL   /* "gkshm001" */
#define GK_SHARED_HEADER 4096                   /* one page: values stay aligned */

typedef struct {
  uint64_t magic, token, bytes;
} shared_header;

static void shared_clear(gk_shared *s)
{
  memset(s, 0, sizeof(*s));
  s->fd = -1;
}

/* A token no other segment has: time, address and process mixed. */
static uint64_t new_token(const void *salt)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = ((uint64_t) ts.tv_sec << 32) ^ (uint64_t) ts.tv_nsec ^
               ((uint64_t) getpid() << 16) ^ (uint64_t) (uintptr_t) salt;
  x ^= x >> 33;   /* splitmix64 finaliser */
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static gk_status map_fd(gk_shared *s, gk_error *err)
{
  void *map = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
  if (map == MAP_FAILED)
    return gk_fail(err, GK_ERR_NOMEM, "could not map %zu bytes of shared result memory: %s",
                   s->map_bytes, strerror(errno));
  gk_host_huge_pages(map, s->map_bytes);   /* fewer faults where shmem allows it */
  s->map = map;
  s->values = (double *) ((char *) map + GK_SHARED_HEADER);
  return GK_OK;
}

gk_status gk_shared_create(size_t bytes, gk_shared *s, gk_error *err)
{
  shared_clear(s);
#if defined(__linux__) && defined(MFD_CLOEXEC)
  s->fd = memfd_create("gpukernels-result", MFD_CLOEXEC);
  if (s->fd < 0)
    return gk_fail(err, GK_ERR_INPUT, "memfd_create failed: %s", strerror(errno));
  s->bytes = bytes;
  s->map_bytes = bytes + GK_SHARED_HEADER;
  if (ftruncate(s->fd, (off_t) s->map_bytes) != 0) {
    int e = errno;
    gk_shared_release(s);
    return gk_fail(err, GK_ERR_NOMEM, "could not size shared result memory (%zu bytes): %s",
                   bytes, strerror(e));
  }
  s->token = new_token(s);
  shared_header h = {GK_SHARED_MAGIC, s->token, (uint64_t) bytes};
  if (pwrite(s->fd, &h, sizeof(h), 0) != (ssize_t) sizeof(h)) {
    int e = errno;
    gk_shared_release(s);
    return gk_fail(err, GK_ERR_NOMEM, "could not write shared memory header: %s", strerror(e));
  }
  snprintf(s->path, sizeof(s->path), "/proc/%ld/fd/%d", (long) getpid(), s->fd);
  return GK_OK;
#else
  (void) bytes;
  return gk_fail(err, GK_ERR_INPUT, "shared result memory needs Linux (memfd_create)");
#endif
}

gk_status gk_shared_private(size_t bytes, gk_shared *s, gk_error *err)
{
  shared_clear(s);
  s->bytes = bytes;
  s->map_bytes = bytes + GK_SHARED_HEADER;
  void *map = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED)
    return gk_fail(err, GK_ERR_NOMEM, "could not allocate %zu bytes for PCF inputs: %s", bytes,
                   strerror(errno));
  s->map = map;
  s->values = (double *) ((char *) map + GK_SHARED_HEADER);
  gk_result_huge_pages(map, s->map_bytes);
  s->token = new_token(s);
  return GK_OK;
}

/* Makes and maps in the pages of [p, p + len). The fallback touches each
 * page with an atomic add of nothing: other processes may be writing there. */
static void populate(char *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
  if (madvise(p, len, MADV_POPULATE_WRITE) == 0) return;
#endif
  for (size_t k = 0; k < len; k += 4096) __atomic_fetch_add(p + k, 0, __ATOMIC_RELAXED);
}

void gk_shared_populate(void *at, size_t len, int threads)
{
  if (!len) return;
  /* The whole pages around the range: madvise takes page-aligned ranges. */
  uintptr_t first = (uintptr_t) at / 4096 * 4096;
  len = ((uintptr_t) at + len + 4095) / 4096 * 4096 - first;
  at = (void *) first;
  /* Page faults in parallel: one 2 MiB piece (whole pages) per step. */
  const size_t piece = (size_t) 1 << 21;
  long long pieces = (long long) ((len + piece - 1) / piece);
  int team = len < ((size_t) 64 << 20) ? 1 : gk_omp_threads(threads);
#ifdef _OPENMP
#pragma omp parallel for num_threads(team) schedule(dynamic, 16)
#endif
  for (long long k = 0; k < pieces; k++) {
    size_t from = (size_t) k * piece, n = len - from < piece ? len - from : piece;
    populate((char *) at + from, n);
  }
  (void) team;
}

void gk_result_huge_pages(void *at, size_t len)
{
  if (gk_tunable(GK_TUNE_RESULT_HUGE_PAGES) == 2 || len < ((size_t) 64 << 20)) return;
  gk_host_huge_pages(at, len);
}

gk_status gk_shared_map_only(gk_shared *s, gk_error *err)
{
  if (s->map) return GK_OK;
  if (s->fd < 0) return gk_fail(err, GK_ERR_INTERNAL, "shared result memory already closed");
  return map_fd(s, err);
}

gk_status gk_shared_map(gk_shared *s, int threads, gk_error *err)
{
  if (s->map) return GK_OK;
  if (gk_shared_map_only(s, err)) return err->status;
  gk_shared_populate(s->map, s->map_bytes, threads);
  return GK_OK;
}

gk_status gk_shared_attach(const char *path, uint64_t token, size_t bytes, gk_shared *s,
                           gk_error *err)
{
  shared_clear(s);
  shared_header h;
  struct stat st;
  s->fd = open(path, O_RDWR | O_CLOEXEC);
  if (s->fd < 0)
    return gk_fail(err, GK_ERR_INPUT, "cannot open %s: %s", path, strerror(errno));
  if (fstat(s->fd, &st) != 0 || (uint64_t) st.st_size != (uint64_t) bytes + GK_SHARED_HEADER ||
      pread(s->fd, &h, sizeof(h), 0) != (ssize_t) sizeof(h) || h.magic != GK_SHARED_MAGIC ||
      h.token != token || h.bytes != bytes) {
    gk_shared_release(s);
    return gk_fail(err, GK_ERR_INPUT, "%s is not this call's result memory", path);
  }
  s->token = token;
  s->bytes = bytes;
  s->map_bytes = bytes + GK_SHARED_HEADER;
  snprintf(s->path, sizeof(s->path), "%s", path);
  if (map_fd(s, err)) {
    gk_shared_release(s);
    return err->status;
  }
  return GK_OK;
}

/* ---- segments offered in place ---- */

#define OFFERED_MOST 64
static pthread_mutex_t offered_lock = PTHREAD_MUTEX_INITIALIZER;
static const gk_shared *offered[OFFERED_MOST];

void gk_shared_offer(const gk_shared *s)
{
  pthread_mutex_lock(&offered_lock);
  for (int k = 0; k < OFFERED_MOST; k++)
    if (!offered[k]) {
      offered[k] = s;
      break;
    }
  pthread_mutex_unlock(&offered_lock);
}

void gk_shared_withdraw(const gk_shared *s)
{
  pthread_mutex_lock(&offered_lock);
  for (int k = 0; k < OFFERED_MOST; k++)
    if (offered[k] == s) offered[k] = NULL;
  pthread_mutex_unlock(&offered_lock);
}

int gk_shared_place_of(const void *p, size_t bytes, gk_shared_place *place)
{
  int found = 0;
  uintptr_t at = (uintptr_t) p;
  pthread_mutex_lock(&offered_lock);
  for (int k = 0; k < OFFERED_MOST && !found; k++) {
    const gk_shared *s = offered[k];
    uintptr_t values = s ? (uintptr_t) s->values : 0;
    if (!s || at < values || at - values > s->bytes || bytes > s->bytes - (at - values)) continue;
    memcpy(place->path, s->path, sizeof(place->path));
    place->token = s->token;
    place->bytes = s->bytes;
    place->offset = at - values;
    found = 1;
  }
  pthread_mutex_unlock(&offered_lock);
  return found;
}

/* ---- this process's offered scratch for blocks of results ---- */

static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static gk_shared scratch = {-1, NULL, 0, NULL, 0, 0, {0}};   /* mapped and offered, or none */
static int scratch_held;

static void scratch_free(void)
{
  if (!scratch.map) return;
  gk_shared_withdraw(&scratch);
  gk_shared_release(&scratch);
}

void *gk_shared_scratch_take(size_t bytes)
{
  void *values = NULL;
  pthread_mutex_lock(&scratch_lock);
  if (!scratch_held) {
    if (scratch.map && scratch.bytes < bytes) scratch_free();
    if (!scratch.map) {
      gk_error ignored;
      gk_error_clear(&ignored);
      if (gk_shared_create(bytes, &scratch, &ignored) == GK_OK) {
        if (gk_shared_map(&scratch, 1, &ignored) == GK_OK) gk_shared_offer(&scratch);
        else gk_shared_release(&scratch);
      }
    }
    if (scratch.map) {
      values = scratch.values;
      scratch_held = 1;
    }
  }
  pthread_mutex_unlock(&scratch_lock);
  return values;
}

void gk_shared_scratch_put(void)
{
  pthread_mutex_lock(&scratch_lock);
  scratch_held = 0;
  pthread_mutex_unlock(&scratch_lock);
}

void gk_shared_scratch_release(void)
{
  pthread_mutex_lock(&scratch_lock);
  if (!scratch_held) scratch_free();
  pthread_mutex_unlock(&scratch_lock);
}

/* ---- other processes' offered segments, mapped here ---- */

/* A mapping is kept from one call to the next, as its process keeps the
 * segment: a worker's blocks are read through page tables made once, not
 * faulted in and unmapped again each call. The file's identity tells
 * whether its process still has it (the descriptor's number and the process
 * id may come again for another file). */
typedef struct {
  gk_shared seg;   /* mapped, descriptor closed */
  dev_t dev;
  ino_t ino;
} peer_mapping;

#define PEERS_MOST 32
static pthread_mutex_t peers_lock = PTHREAD_MUTEX_INITIALIZER;
static peer_mapping peers[PEERS_MOST];
static int n_peers;

static void drop_peer(int k)
{
  gk_shared_release(&peers[k].seg);
  peers[k] = peers[--n_peers];
}

static int peer_gone(const peer_mapping *m)
{
  struct stat st;
  return stat(m->seg.path, &st) != 0 || st.st_dev != m->dev || st.st_ino != m->ino;
}

const void *gk_shared_peer_values(const gk_shared_place *at, size_t bytes)
{
  const void *values = NULL;
  char path[sizeof(at->path)];
  memcpy(path, at->path, sizeof(path));
  path[sizeof(path) - 1] = 0;
  pthread_mutex_lock(&peers_lock);
  int k = 0;
  while (k < n_peers && (peers[k].seg.token != at->token || strcmp(peers[k].seg.path, path))) k++;
  if (k == n_peers) {
    for (int j = n_peers - 1; j >= 0; j--)   /* its descriptor now names another file */
      if (!strcmp(peers[j].seg.path, path)) drop_peer(j);
    k = n_peers;
    gk_error ignored;
    struct stat st;
    gk_error_clear(&ignored);
    if (k < PEERS_MOST &&
        gk_shared_attach(path, at->token, at->bytes, &peers[k].seg, &ignored) == GK_OK) {
      if (fstat(peers[k].seg.fd, &st) == 0) {
        peers[k].dev = st.st_dev;
        peers[k].ino = st.st_ino;
        gk_shared_close(&peers[k].seg);
        n_peers++;
      } else {
        gk_shared_release(&peers[k].seg);
      }
    }
  }
  if (k < n_peers && at->offset <= peers[k].seg.bytes && bytes <= peers[k].seg.bytes - at->offset)
    values = (const char *) peers[k].seg.values + at->offset;
  pthread_mutex_unlock(&peers_lock);
  return values;
}

void gk_shared_peers_prune(int all)
{
  pthread_mutex_lock(&peers_lock);
  for (int k = n_peers - 1; k >= 0; k--)
    if (all || peer_gone(&peers[k])) drop_peer(k);
  pthread_mutex_unlock(&peers_lock);
}

int gk_shared_peers_mapped(void)
{
  pthread_mutex_lock(&peers_lock);
  int n = n_peers;
  pthread_mutex_unlock(&peers_lock);
  return n;
}

void gk_shared_close(gk_shared *s)
{
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
}

void gk_shared_release(gk_shared *s)
{
  if (s->map) munmap(s->map, s->map_bytes);
  gk_shared_close(s);
  s->map = NULL;
  s->values = NULL;
}

gk_status gk_file_map(const char *path, size_t bytes, void **map, gk_error *err)
{
  *map = NULL;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return gk_fail(err, GK_ERR_INPUT, "cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t) st.st_size < (uint64_t) bytes) {
    close(fd);
    return gk_fail(err, GK_ERR_INPUT, "%s is smaller than its matrix (%zu bytes)", path, bytes);
  }
  void *m = bytes ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : NULL;
  close(fd);   /* the mapping stays */
  if (m == MAP_FAILED)
    return gk_fail(err, GK_ERR_NOMEM, "could not map %s: %s", path, strerror(errno));
  /* File systems with large folios (ext4 from Linux 6.16, XFS) make a
   * 2 MiB folio per fault: far fewer faults, made and freed faster. */
  if (m) gk_result_huge_pages(m, bytes);
  *map = m;
  return GK_OK;
}

int gk_file_in_memory(const char *path)
{
#if defined(__linux__)
  struct statfs fs;
  return statfs(path, &fs) == 0 && (unsigned long) fs.f_type == 0x01021994UL /* TMPFS_MAGIC */;
#else
  (void) path;
  return 0;
#endif
}

/* fallocate of the file's first `bytes` (see gk_file_make): 1 when done. */
static int allocate_file_blocks(int fd, const char *path, size_t bytes)
{
#if defined(__linux__)
  if (!bytes || gk_file_in_memory(path)) return 0;
  return fallocate(fd, 0, 0, (off_t) bytes) == 0;
#else
  (void) fd;
  (void) path;
  (void) bytes;
  return 0;
#endif
}

gk_status gk_file_make(const char *path, size_t bytes, int allocate, int *allocated,
                       gk_error *err)
{
  *allocated = 0;
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return gk_fail(err, GK_ERR_INPUT, "cannot create %s: %s", path, strerror(errno));
  int sized = ftruncate(fd, (off_t) bytes) == 0;
  int e = errno;
  if (sized && allocate) *allocated = allocate_file_blocks(fd, path, bytes);
  close(fd);
  if (!sized) {
    unlink(path);
    return gk_fail(err, GK_ERR_INPUT, "cannot make %s %zu bytes long: %s", path, bytes,
                   strerror(e));
  }
  return GK_OK;
}

/* The kB of file pages this process maps in 2 MiB pages (0 where the
 * system does not say). */
static long long file_pmd_mapped_kb(void)
{
  long long kb = 0;
#if defined(__linux__)
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  char line[128];
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "FilePmdMapped: %lld", &kb) == 1) break;
  if (f) fclose(f);
#endif
  return kb;
}

/* Makes the first whole 2 MiB page of [from, from + len) of a mapped file
 * and says whether the kernel made and mapped it as one 2 MiB page: a file
 * system with large folios (ext4 from Linux 6.16, XFS) where the mapping
 * asked for them (gk_file_map). */
static int file_makes_huge_pages(char *map, size_t from, size_t len)
{
  const size_t huge = GK_HOST_HUGE_PAGE;
  uintptr_t first = ((uintptr_t) map + from + huge - 1) / huge * huge;
  if (first + huge > (uintptr_t) map + from + len) return 0;
  long long before = file_pmd_mapped_kb();
  populate((char *) first, huge);
  return file_pmd_mapped_kb() - before >= (long long) (huge >> 10);
}

/* Makes [from, from + len) of a mapped file, where GK_FILE_POPULATE asks
 * for it. With 2 MiB pages the engines' first writes make them faster than
 * a pass before them: a fault per 2 MiB, spread over the engines' work.
 * Made pages are dirty: when the `dirty_bytes` made at once (this
 * range, or the whole file where several processes make their shares of it
 * together) are beyond the kernel's background writeback threshold (10% of
 * memory by default), they would be written to disk before the engines fill
 * them, and then again. */
static void populate_file_range(void *map, int in_memory, size_t dirty_bytes, size_t from,
                                size_t len, int threads)
{
  int mode = gk_tunable(GK_TUNE_FILE_POPULATE);
  if (mode == 0 || (mode == 1 && in_memory) || !len) return;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && (double) dirty_bytes > 0.1 * (double) pages * (double) page)
    return;
  if (mode == 1 && file_makes_huge_pages(map, from, len)) return;
  gk_shared_populate((char *) map + from, len, threads);
}

void gk_file_populate(void *map, int in_memory, size_t elem, int symmetric, size_t n_rows,
                      size_t row0, size_t rows, size_t col0, size_t cols, int threads)
{
  size_t from, len;
  if (symmetric) {
    from = row0 * n_rows * elem;
    len = rows * n_rows * elem;
  } else if (row0 == 0 && rows == n_rows) {
    from = col0 * n_rows * elem;
    len = cols * n_rows * elem;
  } else {
    return;
  }
  populate_file_range(map, in_memory, len, from, len, threads);
}

void gk_file_populate_share(void *map, int in_memory, size_t bytes, int symmetric, size_t n_rows,
                            size_t first_row, size_t end_row, int threads)
{
  if (!n_rows || end_row <= first_row) return;
  /* The fraction of the file's work done before a row: rows against the
   * rows before them for a symmetric file, a row at a time for a dense one. */
  double a = (double) first_row / (double) n_rows, b = (double) end_row / (double) n_rows;
  if (symmetric) {
    a *= a;
    b *= b;
  }
  size_t from = (size_t) (a * (double) bytes),
         to = end_row == n_rows ? bytes : (size_t) (b * (double) bytes);
  populate_file_range(map, in_memory, bytes, from, to - from, threads);
}

gk_status gk_file_unmap(void *map, size_t bytes, int sync, gk_error *err)
{
  if (!map) return GK_OK;
  int failed = sync && msync(map, bytes, MS_SYNC) != 0;
  int e = errno;
  munmap(map, bytes);
  if (failed) return gk_fail(err, GK_ERR_INPUT, "could not write the file back: %s", strerror(e));
  return GK_OK;
}
