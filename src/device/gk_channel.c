/* Worker results through reusable shared slots (see gk_channel.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <signal.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/uio.h>
#define GK_HAVE_VM_READ 1
#endif
#include "device/gk_channel.h"
#include "device/gk_hooks.h"
#include "device/gk_omp.h"
#include "device/gk_tunables.h"

#define SLOTS_PER_RING 4
#define PAGE 4096

struct gk_channel_head {
  uint64_t rings, slots, slot_bytes, data_offset;
  int64_t caller;           /* the caller's process id                  */
  atomic_int abort;         /* set by the caller: workers give up        */
  /* Where the caller keeps the segment's token, read back by a worker to
   * make sure `caller` is that process before reading its inputs
   * (GK_CHANNEL_DIRECT); 0 when workers may not. */
  uint64_t direct_check;
  /* The caller's offered inputs (gk_channel_offer_input), 0 when none. */
  uint64_t input_at, input_bytes;
  atomic_int opened;        /* the result exists (gk_channel_open)        */
  atomic_int checked;       /* the inputs passed the caller's checks      */
  gk_block_queue queue;     /* the workers' shared block list (gk_channel_queue) */
};

struct gk_channel_slot {
  atomic_int state;         /* 0 free, 1 being filled, 2 full, 3 being scattered, 4 refused */
  int32_t kind, single;
  int32_t handed;           /* the values are at `staged`, not in the slot */
  uint64_t band_row0, band_col0, row0, rows, col0, cols;
  gk_shared_place staged;
};

#define SLOT_REFUSED 4

/* Tells the workers to give up: their waits end, and they take no more
 * blocks of their shared list. */
static void stop_workers(gk_channel_head *h)
{
  atomic_store(&h->abort, 1);
  gk_block_close(&h->queue);
}

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

static double seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

/* 20 us, or 200 us after `idle` empty looks: a slot takes milliseconds. */
static void nap(unsigned idle)
{
  struct timespec ts = {0, idle < 100 ? 20000 : 200000};
  nanosleep(&ts, NULL);
}

size_t gk_channel_slot_bytes(double values, size_t n_rows, size_t rings)
{
  double share = values * sizeof(double) / (double) (rings ? rings : 1) / SLOTS_PER_RING;
  size_t bytes = share < (double) (32u << 20) ? (size_t) share : (size_t) 32 << 20;
  if (bytes < n_rows * sizeof(double)) bytes = n_rows * sizeof(double);
  return round_up(bytes ? bytes : 1, PAGE);
}

static size_t heads_bytes(size_t rings, size_t slots)
{
  return round_up(round_up(sizeof(gk_channel_head), 64) + rings * slots * sizeof(gk_channel_slot),
                  PAGE);
}

static gk_channel_slot *slots_of(gk_channel_head *h)
{
  return (gk_channel_slot *) ((char *) h + round_up(sizeof(gk_channel_head), 64));
}

/* ---- the caller ---- */

/* Whether a slot's block lies in the result: a handed-over block is read
 * from the worker's memory at sizes it gives. */
static int block_in_result(const gk_channel *c, const gk_channel_slot *s)
{
  uint64_t n_rows = c->n_rows,
           n_cols = c->layout != GK_WRITE_DENSE ? n_rows : n_rows ? c->values / n_rows : 0;
  return s->rows <= n_rows && s->cols <= n_cols && s->band_row0 + s->row0 <= n_rows - s->rows &&
         s->band_col0 + s->col0 <= n_cols - s->cols;
}

/* Scatters every full slot that no other writer took, once; how many. */
static size_t drain_pass(gk_channel_writer_thread *me)
{
  gk_channel *c = me->c;
  gk_channel_head *h = c->head;
  gk_channel_slot *slot = slots_of(h);
  char *data = (char *) h + h->data_offset;
  size_t done = 0, count = h->rings * h->slots;
  /* Writers start their look at different slots: fewer lost claims. */
  size_t from = (size_t) me->index * count / (size_t) c->writers;
  for (size_t q = 0; q < count; q++) {
    size_t k = (from + q) % count;
    gk_channel_slot *s = &slot[k];
    int expected = 2;
    if (atomic_load_explicit(&s->state, memory_order_acquire) != 2 ||
        !atomic_compare_exchange_strong(&s->state, &expected, 3))
      continue;
    double start = seconds();
    const char *values = data + k * h->slot_bytes;
    if (s->handed) {
      size_t bytes = s->rows * s->cols * (s->single ? sizeof(float) : sizeof(double));
      values = block_in_result(c, s) ? gk_shared_peer_values(&s->staged, bytes) : NULL;
      if (!values) {   /* the worker sends it another way */
        atomic_store_explicit(&s->state, SLOT_REFUSED, memory_order_release);
        continue;
      }
    }
    gk_block_writer w = gk_block_writer_band((gk_write_kind) s->kind, c->layout, c->out,
                                             c->n_rows, s->band_row0, s->band_col0, c->threads);
    gk_block b = {s->row0, s->rows, s->col0, s->cols};
    gk_block_write(&w, &b, values, s->single);
    atomic_store_explicit(&s->state, 0, memory_order_release);
    me->busy_s += seconds() - start;
    me->pieces++;
    done++;
  }
  return done;
}

static void *drain(void *arg)
{
  gk_channel_writer_thread *me = (gk_channel_writer_thread *) arg;
  gk_channel *c = me->c;
  /* The slots' pages, while the workers start, where the workers' blocks
   * come in them; blocks handed over in place leave them empty. */
  if (me->index == 0 && !gk_tunable(GK_TUNE_CHANNEL_HANDOVER)) {
    char *slots = (char *) c->head + c->head->data_offset;
    gk_shared_populate(slots, c->seg.map_bytes - (size_t) (slots - (char *) c->seg.map),
                       c->threads * c->writers);
  }
  unsigned idle = 0;
  for (;;) {
    if (atomic_load(&c->head->abort)) break;
    int last = c->finishing;   /* read before the pass: workers are done */
    atomic_thread_fence(memory_order_acquire);
    if (drain_pass(me)) {
      idle = 0;
      continue;
    }
    if (last) break;
    nap(idle++);
  }
  return NULL;
}

/* Lets the workers read the caller's memory (the token's address, checked
 * before any cross-process read), where GK_CHANNEL_DIRECT = 1 and
 * the system has process_vm_readv: set when the segment is made, so that the
 * workers' route is known before they are launched. */
static void start_direct(gk_channel *c)
{
#ifdef GK_HAVE_VM_READ
  if (gk_tunable(GK_TUNE_CHANNEL_DIRECT) != 1) return;
  c->direct_token = c->seg.token;
  c->head->direct_check = (uint64_t) (uintptr_t) &c->direct_token;
#else
  (void) c;
#endif
}

static void stop_writers(gk_channel *c)
{
  for (int k = 0; k < c->running; k++) {
    pthread_join(c->writer[k].thread, NULL);
    c->busy_s += c->writer[k].busy_s;
    c->pieces += c->writer[k].pieces;
  }
  c->running = 0;
}

gk_status gk_channel_create(gk_channel *c, size_t rings, size_t slot_bytes, gk_error *err)
{
  memset(c, 0, sizeof(*c));
  gk_shared_peers_prune(0);   /* staging of workers gone since the last call */
  size_t slots = SLOTS_PER_RING, heads = heads_bytes(rings, slots);
  if (gk_shared_create(heads + rings * slots * slot_bytes, &c->seg, err))
    return err->status;
  /* Mapped now, its pages made by the first writer (gk_shared_map_only). */
  if (gk_shared_map_only(&c->seg, err)) {
    gk_shared_release(&c->seg);
    return err->status;
  }
  gk_channel_head *h = (gk_channel_head *) c->seg.values;
  h->rings = rings;
  h->slots = slots;
  h->slot_bytes = slot_bytes;
  h->data_offset = heads;
  h->caller = (int64_t) getpid();
  atomic_init(&h->abort, 0);
  for (size_t k = 0; k < rings * slots; k++) atomic_init(&slots_of(h)[k].state, 0);
  atomic_init(&h->opened, 0);
  atomic_init(&h->checked, 0);
  h->queue = (gk_block_queue) {0, 0, 0};
  c->head = h;
  start_direct(c);
  return GK_OK;
}

gk_status gk_channel_open(gk_channel *c, double *out, size_t result_bytes, gk_write_kind layout,
                          size_t n_rows, int threads, gk_error *err)
{
  gk_channel_head *h = c->head;
  if (!h || c->out) return gk_fail(err, GK_ERR_INTERNAL, "result channel not open to a result");
  c->out = out;
  c->layout = layout;
  c->n_rows = n_rows;
  c->values = result_bytes / sizeof(double);
  size_t count = h->rings * h->slots;
  int writers = (int) gk_tunable(GK_TUNE_CHANNEL_WRITERS), all = gk_omp_threads(threads);
  /* One per ring (a worker's chunk), as each GPU thread of one process
   * writes its own blocks: workers wait while theirs are written. */
  if (writers <= 0) writers = h->rings > 2 ? (int) h->rings : 2;
  if (writers > GK_CHANNEL_MAX_WRITERS) writers = GK_CHANNEL_MAX_WRITERS;
  if ((size_t) writers > count) writers = (int) count;
  c->writers = writers;
  c->threads = all / writers > 0 ? all / writers : 1;
  gk_result_huge_pages(out, result_bytes);
  for (int k = 0; k < writers; k++) {
    c->writer[k].c = c;
    c->writer[k].index = k;
    if (pthread_create(&c->writer[k].thread, NULL, drain, &c->writer[k]) != 0) break;
    c->running++;
  }
  if (c->running < writers) {   /* the workers give up; the owner releases the segment */
    stop_workers(h);
    stop_writers(c);
    return gk_fail(err, GK_ERR_NOMEM, "could not start the threads that collect results");
  }
  /* Last: workers whose first block waits for the result go on seeing it. */
  atomic_store_explicit(&h->opened, 1, memory_order_release);
  return GK_OK;
}

void gk_channel_finish(gk_channel *c)
{
  if (!c->running) return;
  atomic_thread_fence(memory_order_release);
  c->finishing = 1;
  stop_writers(c);
  stop_workers(c->head);   /* no worker is left to send */
}

void gk_channel_release(gk_channel *c)
{
  if (c->head) {
    stop_workers(c->head);
    stop_writers(c);
  }
  gk_shared_release(&c->seg);
  c->head = NULL;
}

int gk_channel_direct(const gk_channel *c)
{
  return c->head && c->head->direct_check != 0;
}

void gk_channel_offer_input(gk_channel *c, const void *at, size_t bytes)
{
  c->head->input_bytes = bytes;
  /* Last: the workers waiting in gk_channel_await_input go on seeing it. */
  __atomic_store_n(&c->head->input_at, (uint64_t) (uintptr_t) at, __ATOMIC_RELEASE);
}

void gk_channel_inputs_checked(gk_channel *c)
{
  atomic_store_explicit(&c->head->checked, 1, memory_order_release);
}

/* ---- a worker ---- */

gk_status gk_channel_attach(const char *path, uint64_t token, size_t bytes, size_t ring,
                            gk_channel_port *p, gk_error *err)
{
  memset(p, 0, sizeof(*p));
  if (gk_shared_attach(path, token, bytes, &p->seg, err)) return err->status;
  gk_channel_head *h = (gk_channel_head *) p->seg.values;
  if (ring >= h->rings) {
    gk_shared_release(&p->seg);
    return gk_fail(err, GK_ERR_INTERNAL, "no ring %zu in the result channel", ring);
  }
  p->head = h;
  p->slots = h->slots;
  p->slot_bytes = h->slot_bytes;
  p->ring = slots_of(h) + ring * h->slots;
  p->data = (char *) h + h->data_offset + ring * h->slots * h->slot_bytes;
  p->handover = gk_tunable(GK_TUNE_CHANNEL_HANDOVER) ? 0 : -1;
  return GK_OK;
}

gk_block_queue *gk_channel_queue(gk_channel_port *p)
{
  return &p->head->queue;
}

int gk_channel_aborted(gk_channel_port *p)
{
  return atomic_load(&p->head->abort) != 0;
}

/* Whether the caller is gone (a process of its number that is another is
 * told apart where it matters: by the token, before any read or write). */
static int caller_gone(gk_channel_port *p)
{
  return kill((pid_t) p->head->caller, 0) != 0;
}

/* Waits until ready(at) holds, `at` being the segment's head or one of its
 * slots: GK_OK; GK_ERR_ABANDONED once the caller aborts or is gone;
 * GK_ERR_INTERRUPTED when this process is interrupted, asked only where
 * `interruptible` (R's thread). */
static gk_status await_caller(gk_channel_port *p, int (*ready)(void *), void *at,
                              int interruptible)
{
  gk_channel_head *h = p->head;
  for (unsigned spin = 0;; spin++) {
    if (ready(at)) return GK_OK;
    if (atomic_load(&h->abort) || (spin % 256 == 255 && caller_gone(p))) return GK_ERR_ABANDONED;
    if (interruptible && spin % 256 == 255 && gk_interrupt_pending()) return GK_ERR_INTERRUPTED;
    nap(spin);
  }
}

static int input_offered(void *head)
{
  return __atomic_load_n(&((gk_channel_head *) head)->input_at, __ATOMIC_ACQUIRE) != 0;
}

/* The caller has its result (it may offer the inputs first). */
static int result_opened(void *head)
{
  return atomic_load_explicit(&((gk_channel_head *) head)->opened, memory_order_acquire);
}

static int input_checked(void *head)
{
  return atomic_load_explicit(&((gk_channel_head *) head)->checked, memory_order_acquire);
}

/* The caller wrote a handed-over slot's block (freed it) or refused it. */
static int slot_answered(void *slot)
{
  int state = atomic_load_explicit(&((gk_channel_slot *) slot)->state, memory_order_acquire);
  return state == 0 || state == SLOT_REFUSED;
}

static gk_status await_on_r_thread(gk_channel_port *p, int (*ready)(void *), gk_error *err)
{
  gk_status st = await_caller(p, ready, p->head, 1);
  if (st == GK_ERR_ABANDONED) return gk_fail(err, st, "the calling session stopped");
  if (st == GK_ERR_INTERRUPTED) return gk_fail(err, st, "interrupted");
  return GK_OK;
}

gk_status gk_channel_await_input(gk_channel_port *p, gk_error *err)
{
  return await_on_r_thread(p, input_offered, err);
}

gk_status gk_channel_await_checked(gk_channel_port *p, gk_error *err)
{
  return await_on_r_thread(p, input_checked, err);
}

void gk_channel_detach(gk_channel_port *p)
{
  gk_shared_release(&p->seg);
  p->head = NULL;
}

/* A free slot of the port's ring (claimed: state 1), or -1 once the caller
 * aborted or is gone. */
static long claim(gk_channel_port *p)
{
  double start = 0;
  for (unsigned spin = 0;; spin++) {
    for (size_t k = 0; k < p->slots; k++) {
      int expected = 0;
      if (atomic_compare_exchange_strong(&p->ring[k].state, &expected, 1)) {
        if (start > 0) p->wait_s += seconds() - start;
        return (long) k;
      }
    }
    if (start == 0) start = seconds();
    if (atomic_load(&p->head->abort) ||
        (spin % 4096 == 4095 && caller_gone(p)))
      return -1;
    nap(0);
  }
}

#ifdef GK_HAVE_VM_READ
/* Whether this worker reads the caller's inputs: its own GK_CHANNEL_DIRECT =
 * 0 declines, as the system may; else whether the caller's process is the
 * one with the segment's token (not a process of the same number elsewhere)
 * and lets this one read its memory. */
static int direct_allowed(gk_channel_port *p)
{
  if (gk_tunable(GK_TUNE_CHANNEL_DIRECT) != 1) return 0;
  gk_channel_head *h = p->head;
  uint64_t token = 0, want = p->seg.token;
  struct iovec local = {&token, sizeof(token)},
               remote = {(void *) (uintptr_t) h->direct_check, sizeof(token)};
  return process_vm_readv((pid_t) h->caller, &local, 1, &remote, 1, 0) ==
             (ssize_t) sizeof(token) && token == want;
}

#endif

/* Pieces of at most 8 MiB, on `threads` threads: one process_vm_readv
 * copies at a few GB/s, several in parallel at many. */
#define READ_PIECE ((size_t) 8 << 20)

gk_status gk_channel_read_input(gk_channel_port *p, const gk_channel_range *ranges, size_t count,
                                int threads, gk_error *err)
{
  gk_channel_head *h = p->head;
  if (!h->input_at) return gk_fail(err, GK_ERR_INTERNAL, "the caller offered no inputs to read");
  for (size_t k = 0; k < count; k++)
    if (ranges[k].offset > h->input_bytes || ranges[k].bytes > h->input_bytes - ranges[k].offset)
      return gk_fail(err, GK_ERR_INTERNAL, "a read outside the caller's inputs");
#ifdef GK_HAVE_VM_READ
  if (!direct_allowed(p))
    return gk_fail(err, GK_ERR_INPUT, "this process may not read the caller's memory");
  size_t pieces = 0;
  for (size_t k = 0; k < count; k++) pieces += (ranges[k].bytes + READ_PIECE - 1) / READ_PIECE;
  long long n = (long long) pieces;
  int team = pieces < 2 ? 1 : gk_omp_threads(threads), bad = 0;
  pid_t caller = (pid_t) h->caller;
#ifdef _OPENMP
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) reduction(|: bad)
#endif
  for (long long q = 0; q < n; q++) {
    size_t k = 0, first = 0, at = (size_t) q;   /* piece q: range k, its piece at */
    for (;; k++) {
      size_t in_range = (ranges[k].bytes + READ_PIECE - 1) / READ_PIECE;
      if (at < in_range) break;
      at -= in_range;
    }
    first = at * READ_PIECE;
    size_t len = ranges[k].bytes - first < READ_PIECE ? ranges[k].bytes - first : READ_PIECE;
    struct iovec local = {(char *) ranges[k].local + first, len},
                 remote = {(void *) (uintptr_t) (h->input_at + ranges[k].offset + first), len};
    if (process_vm_readv(caller, &local, 1, &remote, 1, 0) != (ssize_t) len) bad = 1;
  }
  (void) team;
  if (bad) return gk_fail(err, GK_ERR_INPUT, "could not read the caller's inputs");
  return GK_OK;
#else
  (void) threads;
  return gk_fail(err, GK_ERR_INPUT, "reading another process's memory needs Linux");
#endif
}

/* Matrices per process_vm_readv: each is one remote piece and two local ones
 * (IOV_MAX is 1024). */
#define COLUMNS_BATCH 512

gk_status gk_channel_read_columns(gk_channel_port *p, const gk_channel_columns *matrices,
                                  size_t count, int threads, gk_error *err)
{
#ifdef GK_HAVE_VM_READ
  if (!direct_allowed(p))
    return gk_fail(err, GK_ERR_INPUT, "this process may not read the caller's memory");
  /* Batches of at most COLUMNS_BATCH matrices and about READ_PIECE bytes. */
  size_t *start = (size_t *) malloc((count + 1) * sizeof(size_t)), batches = 0;
  if (!start) return gk_fail(err, GK_ERR_NOMEM, "out of host memory for reading inputs");
  for (size_t k = 0, bytes = 0, in_batch = 0; k < count; k++, in_batch++) {
    if (k == 0 || in_batch == COLUMNS_BATCH || bytes >= READ_PIECE) {
      start[batches++] = k;
      bytes = in_batch = 0;
    }
    bytes += 2 * matrices[k].rows * sizeof(double);
  }
  start[batches] = count;
  long long n = (long long) batches;
  int team = batches < 2 ? 1 : gk_omp_threads(threads), bad = 0;
  pid_t caller = (pid_t) p->head->caller;
#ifdef _OPENMP
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) reduction(|: bad)
#endif
  for (long long q = 0; q < n; q++) {
    struct iovec local[2 * COLUMNS_BATCH], remote[COLUMNS_BATCH];
    unsigned long r = 0, l = 0;
    size_t want = 0;
    for (size_t k = start[q]; k < start[q + 1]; k++) {
      size_t column = matrices[k].rows * sizeof(double);
      if (!column) continue;
      remote[r].iov_base = (void *) (uintptr_t) matrices[k].remote;
      remote[r++].iov_len = 2 * column;
      local[l].iov_base = matrices[k].first;
      local[l++].iov_len = column;
      local[l].iov_base = matrices[k].second;
      local[l++].iov_len = column;
      want += 2 * column;
    }
    if (r && process_vm_readv(caller, local, l, remote, r, 0) != (ssize_t) want) bad = 1;
  }
  (void) team;
  free(start);
  if (bad) return gk_fail(err, GK_ERR_INPUT, "could not read the caller's inputs");
  return GK_OK;
#else
  (void) p;
  (void) matrices;
  (void) count;
  (void) threads;
  return gk_fail(err, GK_ERR_INPUT, "reading another process's memory needs Linux");
#endif
}

/* What a slot holds: columns [c0, c0 + cols) of the block. */
static void describe_slot(const gk_channel_port *p, gk_channel_slot *s, const gk_block *block,
                          size_t c0, size_t cols, int single, int handed)
{
  s->kind = (int32_t) p->kind;
  s->single = single;
  s->handed = handed;
  s->band_row0 = p->band_row0;
  s->band_col0 = p->band_col0;
  s->row0 = block->row0;
  s->rows = block->rows;
  s->col0 = block->col0 + c0;
  s->cols = cols;
}

/* Hands the block over in place (its values at `at`, in memory this
 * process offers) and waits until the caller wrote it into its result, so
 * that the memory may take the next download: 0 written; 1 refused (the
 * caller could not map it: send it another way); -1 the caller stopped. */
static int hand_over(gk_channel_port *p, const gk_block *block, const gk_shared_place *at,
                     int single)
{
  long k = claim(p);
  if (k < 0) return -1;
  gk_channel_slot *s = &p->ring[k];
  describe_slot(p, s, block, 0, block->cols, single, 1);
  s->staged = *at;
  atomic_store_explicit(&s->state, 2, memory_order_release);
  if (await_caller(p, slot_answered, s, 0) != GK_OK) return -1;
  if (atomic_load_explicit(&s->state, memory_order_acquire) == 0) return 0;
  atomic_store_explicit(&s->state, 0, memory_order_release);   /* refused: free again */
  return 1;
}

/* The block handed over in place where it lies in memory this process
 * offers (an engine's block buffers), else whole columns at a time into
 * slots; p->failed when the caller stopped. */
static void deliver_block(gk_channel_port *p, const gk_block *block, const void *src, int single)
{
  /* On any thread, so no interrupt check: the caller's next step is the
   * result, or stopping. */
  if (!p->failed && await_caller(p, result_opened, p->head, 0) != GK_OK) p->failed = 1;
  size_t elem = single ? sizeof(float) : sizeof(double);
  gk_shared_place at;
  if (!p->failed && p->handover >= 0 &&
      gk_shared_place_of(src, block->rows * block->cols * elem, &at)) {
    int handed = hand_over(p, block, &at, single);
    if (handed < 0) p->failed = 1;
    if (handed <= 0) {
      if (handed == 0) p->handover = 1;
      return;
    }
    p->handover = -1;   /* through the slots from now on, this block too */
  }
  size_t column = block->rows * elem;
  size_t per_slot = column ? p->slot_bytes / column : block->cols;
  if (per_slot < 1 || p->failed) {   /* slots are sized for a column: never */
    p->failed = 1;
    return;
  }
  for (size_t c0 = 0; c0 < block->cols; c0 += per_slot) {
    size_t cols = block->cols - c0 < per_slot ? block->cols - c0 : per_slot;
    long k = claim(p);
    if (k < 0) {
      p->failed = 1;
      return;
    }
    gk_channel_slot *s = &p->ring[k];
    char *dst = p->data + (size_t) k * p->slot_bytes;
    const char *from = (const char *) src + c0 * column;
    long long n = (long long) cols;
    int threads = cols * block->rows < 65536 ? 1 : gk_omp_threads(p->threads);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (long long j = 0; j < n; j++) memcpy(dst + j * column, from + j * column, column);
    (void) threads;
    describe_slot(p, s, block, c0, cols, single, 0);
    atomic_store_explicit(&s->state, 2, memory_order_release);
  }
}

/* The writer's callback. Once the caller stopped (or is gone), this worker
 * takes no more blocks of the shared list either. */
static void send_block(void *ctx, const gk_block *block, const void *src, int single)
{
  gk_channel_port *p = (gk_channel_port *) ctx;
  __atomic_fetch_add(&p->blocks, 1, __ATOMIC_RELAXED);   /* several GPUs may send at once */
  deliver_block(p, block, src, single);
  if (p->failed) gk_block_close(&p->head->queue);
}

gk_block_writer gk_channel_writer(gk_channel_port *p, gk_write_kind kind, size_t row0,
                                  size_t col0, int threads)
{
  p->kind = kind;
  p->band_row0 = row0;
  p->band_col0 = col0;
  p->threads = threads;
  gk_block_writer w = gk_block_writer_make(kind, NULL, 0, threads);
  w.reduce = send_block;
  w.reduce_ctx = p;
  w.hands_over = p->handover >= 0;
  return w;
}
