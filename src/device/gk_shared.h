/*
 * Memory shared between processes of one machine (R/distributed.R): the
 * calling R process creates a segment (the functions of a distributed call,
 * the result channel of gk_channel.h), the future workers on the same
 * machine attach it: nothing travels through sockets. Pure host C, no R.
 *
 * A segment is an anonymous memory file (Linux memfd_create): it is memory,
 * not disk, and not limited by the size of /dev/shm (64 MB in many
 * containers). Other processes of the same user open it as
 * /proc/<pid>/fd/<fd>. Its first page holds a header with a random token,
 * which an attaching process checks, so a worker on another machine (where
 * that path is something else or nothing) never writes into a wrong file: it
 * simply cannot attach. The values start one page in.
 *
 * Elsewhere (no memfd_create) gk_shared_create fails with GK_ERR_INPUT and
 * the caller takes the results through the futures instead.
 */
#ifndef GK_SHARED_H
#define GK_SHARED_H

#include <stddef.h>
#include <stdint.h>
#include "device/gk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int fd;              /* -1 once closed (the mapping stays valid)  */
  void *map;           /* the whole segment, header included          */
  size_t map_bytes;
  double *values;      /* the result: map + one page                  */
  size_t bytes;        /* of the values                               */
  uint64_t token;
  char path[64];       /* how other processes open it (attached: how it was) */
} gk_shared;

/* Creates a segment for `bytes` of values, not yet mapped here (gk_shared_map). */
gk_status gk_shared_create(size_t bytes, gk_shared *s, gk_error *err);

/* A region of this process only (anonymous private memory, 2 MiB pages
 * asked for), laid out as a segment (values one page in, no path): the
 * table of the caller's PCF inputs that future workers read with
 * process_vm_readv (gk_channel.h), and a worker's copy of them. Private
 * memory takes its first writes several times faster than a memfd. Mapped,
 * its pages made on first use; released with gk_shared_release. */
gk_status gk_shared_private(size_t bytes, gk_shared *s, gk_error *err);

/* Maps a created segment here and makes and maps in its pages with `threads`
 * threads (<= 0: all), rather than one page fault at a time on first use. */
gk_status gk_shared_map(gk_shared *s, int threads, gk_error *err);

/* Maps a created segment here, its pages not made yet. */
gk_status gk_shared_map_only(gk_shared *s, gk_error *err);

/* Makes and maps in the pages of [at, at + len) (the whole pages around it)
 * of a mapped segment or file with `threads` threads, where first writes
 * would fault them in one at a time; safe while other processes write there
 * (their contents are kept). */
void gk_shared_populate(void *at, size_t len, int threads);

/* Asks for 2 MiB pages (madvise MADV_HUGEPAGE) on the whole 2 MiB pages of
 * a large result of this process (64 MB or more) that its engines or the
 * writes of future workers fill, unless GK_RESULT_HUGE_PAGES is 2: where the
 * system grants them, the first writes make 512 times fewer page faults (a
 * 10 GB result has 2.5 million at 4 KiB), and the faults, not the copies,
 * bound how fast a fresh result is first written (inst/bench/pages.c
 * compares the page sizes). */
void gk_result_huge_pages(void *at, size_t len);

/* Opens and maps the segment at `path` if it is the one with `token` and
 * `bytes` of values; returns GK_ERR_INPUT (with a message) when it cannot. */
gk_status gk_shared_attach(const char *path, uint64_t token, size_t bytes, gk_shared *s,
                           gk_error *err);

/* Where memory of this process lies in a segment it offers (below): the
 * segment's path, token and bytes of values (what gk_shared_attach checks),
 * and the offset from its values. */
typedef struct {
  char path[64];
  uint64_t token, bytes, offset;
} gk_shared_place;

/* Segments of this process whose memory it may hand to others in place: a
 * future worker's page-locked staging (gk_pinned_alloc_shared), into which
 * its GPUs download blocks of results that its caller maps and writes into
 * its result itself (gk_channel.h). A segment offered (mapped, its
 * descriptor open) is withdrawn before it is released; at most 64 at once
 * (more are not offered). */
void gk_shared_offer(const gk_shared *s);
void gk_shared_withdraw(const gk_shared *s);

/* 1, with *place, where [p, p + bytes) lies in an offered segment; else 0. */
int gk_shared_place_of(const void *p, size_t bytes, gk_shared_place *place);

/* Memory this process offers (above) for blocks of results that an engine
 * without page-locked staging (the CPU's) hands to a future worker's caller
 * in place (gk_channel.h): one segment of at least `bytes`, kept from call
 * to call as a GPU's staging is, so that the caller's mapping of it stays
 * valid; made again when a call needs more. NULL where it cannot be made or
 * another engine of this process holds it (then private memory serves).
 * gk_shared_scratch_put gives it back; gk_shared_scratch_release frees it
 * when no engine holds it. */
void *gk_shared_scratch_take(size_t bytes);
void gk_shared_scratch_put(void);
void gk_shared_scratch_release(void);

/* Where the `bytes` values another process offers at `at` (its
 * gk_shared_place_of) are in this process; NULL when they cannot be mapped
 * here. A segment is mapped once and kept for later calls, as its process
 * keeps it: until gk_shared_peers_prune finds the process no longer has it.
 * Thread-safe; at most 32 segments at once (more are not mapped). */
const void *gk_shared_peer_values(const gk_shared_place *at, size_t bytes);

/* Unmaps the segments of other processes that those no longer have (freed,
 * or the process ended), or with `all` every one. Not while values of them
 * are being read (gk_shared_peer_values). */
void gk_shared_peers_prune(int all);

/* How many other processes' segments are mapped here. */
int gk_shared_peers_mapped(void);

/* Closes the descriptor: no process can attach any more; the mapping stays. */
void gk_shared_close(gk_shared *s);

/* Unmaps and closes. */
void gk_shared_release(gk_shared *s);

/* A file of at least `bytes` (a file-backed big.matrix's values, written by
 * pcf_dist_file()'s workers) mapped shared for writing. Writes through it are
 * in the file system's cache: visible at once to every process of this
 * machine; other machines see them after gk_file_unmap with `sync`. The
 * mapping asks for 2 MiB pages (gk_result_huge_pages): file systems with
 * large folios make a file's pages several times faster in them. */
gk_status gk_file_map(const char *path, size_t bytes, void **map, gk_error *err);
gk_status gk_file_unmap(void *map, size_t bytes, int sync, gk_error *err);

/* Makes the pages (gk_shared_populate) of a mapped file matrix (n_rows rows,
 * column-major, `elem` bytes a value) that a call writing `rows` rows from
 * row0 and `cols` columns from col0 fills, where they are whole columns: a
 * symmetric matrix's mirror (columns row0 .. row0 + rows - 1), or every
 * column when the call has every row. Other calls' runs (a band's rows of
 * each column) fault in as written. First writes through a file mapping
 * take a page fault per page; on a disk's file system one populate call per
 * 2 MiB is faster. Not for a file `in_memory` (gk_file_in_memory), nor where
 * the file's first 2 MiB page of the range is made and mapped whole (a file
 * system with large folios): there the faults of the engines' writes cost
 * less than making the pages first, which the GPUs would wait for
 * (GK_FILE_POPULATE: 0 never, 1 neither in memory nor in 2 MiB pages, 2
 * always), nor for a range over a tenth of the machine's memory
 * (dirty pages the kernel would write back before they are filled). */
void gk_file_populate(void *map, int in_memory, size_t elem, int symmetric, size_t n_rows,
                      size_t row0, size_t rows, size_t col0, size_t cols, int threads);

/* The same for one of several processes of this machine that write a file
 * of `bytes` bytes at once, each a band of rows [first_row, end_row) of
 * n_rows (against the rows before them, for a `symmetric` file): makes the
 * band's share of the whole file, one range in proportion to its work. The
 * kernel makes one file's pages at one rate however many processes ask, so
 * equal shares are made together in the time of the whole file; the pages
 * a symmetric band fills (gk_file_populate: the first of two bands' mirror
 * columns are 71% of the file) would leave one process making most of them
 * while the other computes. Nothing is made for a file over a tenth of the
 * machine's memory (all shares are dirty at once). */
void gk_file_populate_share(void *map, int in_memory, size_t bytes, int symmetric, size_t n_rows,
                            size_t first_row, size_t end_row, int threads);

/* 1 when the file at `path` lives in memory (tmpfs, e.g. /dev/shm): no disk
 * blocks to allocate, no writeback. */
int gk_file_in_memory(const char *path);

/* Creates the file at `path` (or empties it) `bytes` long: a file-backed
 * big.matrix's values before any is written. With `allocate`, also its disk
 * blocks (fallocate), so that writes through a mapping find them: on a
 * sparse file each first write to a page reserves its block under a lock of
 * the file (ext4's i_data_sem), one page at a time however many threads or
 * processes write. Not on tmpfs, where it would make every page now, on one
 * thread. `allocated`: 1 when allocated, 0 when not asked, skipped or not
 * possible (the writes then allocate as they go). */
gk_status gk_file_make(const char *path, size_t bytes, int allocate, int *allocated,
                       gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
