/* The result channel's hand-over route (src/device/gk_channel.h) without a
 * GPU: a forked worker offers a shared segment (as a GPU worker's staging)
 * and keeps it for two calls, as a future worker does; in each it fills
 * blocks of a 301 x 203 matrix there and hands them over; the caller writes
 * them into its result, then checks every value. The caller keeps its
 * mapping of the worker's segment from the first call to the second, and
 * drops it at the first call after the worker has ended. Mode 0: handed
 * over; 1: the segment's descriptor closed, so that the caller cannot map
 * it: refused, and sent through slots; 2: float blocks handed over. The R
 * tests reach this route with CPU and GPU workers, never the refused case.
 * From the repository's root:
 *   gcc -O1 -g -fopenmp -Isrc -o /tmp/channel-check tools/channel-check.c \
 *     src/device/{gk_channel,gk_shared,block_writer,block_scheduler,gk_tunables,gk_hooks,gk_error,host_copy}.c -lm
 *   for m in 0 1 2; do /tmp/channel-check $m || echo FAILED; done
 *   valgrind --leak-check=full --error-exitcode=9 /tmp/channel-check 0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "device/gk_channel.h"
#include "device/gk_shared.h"

enum { CALLS = 2 };
static const size_t n_rows = 301, n_cols = 203, tile = 64;

static double value_at(size_t i, size_t j, int call)
{
  return (double) (i * 1000 + j) + 0.25 + 0.5 * call;
}

/* Which channel a call's worker attaches: what a future carries. */
typedef struct {
  char path[64];
  uint64_t token;
  size_t bytes;
} channel_ticket;

/* One call's blocks, staged in `staging` and handed over; 1 when all went
 * by the route the mode expects. */
static int worker_call(const channel_ticket *t, gk_shared *staging, int mode, int call)
{
  int single = mode == 2;
  gk_channel_port p;
  gk_error err;
  gk_error_clear(&err);
  if (gk_channel_attach(t->path, t->token, t->bytes, 0, &p, &err)) return 0;
  gk_block_writer w = gk_channel_writer(&p, GK_WRITE_DENSE, 0, 0, 2);
  size_t k = 0;
  for (size_t j0 = 0; j0 < n_cols; j0 += tile)
    for (size_t i0 = 0; i0 < n_rows; i0 += tile, k++) {
      gk_block b = {i0, i0 + tile < n_rows ? tile : n_rows - i0, j0,
                    j0 + tile < n_cols ? tile : n_cols - j0};
      char *half = (char *) staging->values + (k % 2) * tile * tile * sizeof(double);
      for (size_t j = 0; j < b.cols; j++)
        for (size_t i = 0; i < b.rows; i++) {
          double v = value_at(b.row0 + i, b.col0 + j, call);
          if (single) ((float *) half)[j * b.rows + i] = (float) v;
          else ((double *) half)[j * b.rows + i] = v;
        }
      w.reduce(w.reduce_ctx, &b, half, single);
    }
  int ok = !p.failed && p.blocks == k && (mode == 1 ? p.handover == -1 : p.handover == 1);
  printf("worker, call %d: %zu blocks, handover %d, failed %d\n", call, (size_t) p.blocks,
         p.handover, p.failed);
  fflush(stdout);
  gk_channel_detach(&p);
  return ok;
}

static void worker(int mode, int from_caller, int to_caller)
{
  gk_shared staging;
  gk_error err;
  gk_error_clear(&err);
  if (gk_shared_create(2 * tile * tile * sizeof(double), &staging, &err) ||
      gk_shared_map(&staging, 1, &err))
    _exit(11);
  gk_shared_offer(&staging);
  if (mode == 1) gk_shared_close(&staging);   /* no process can open it now */
  int ok = 1;
  for (int call = 0; call < CALLS; call++) {
    channel_ticket t;
    if (read(from_caller, &t, sizeof(t)) != (ssize_t) sizeof(t)) _exit(10);
    char done = (char) worker_call(&t, &staging, mode, call);
    ok = ok && done;
    if (write(to_caller, &done, 1) != 1) _exit(10);
  }
  gk_shared_withdraw(&staging);
  gk_shared_release(&staging);
  _exit(ok ? 0 : 12);
}

/* One call on the caller's side: the channel, its ticket to the worker, the
 * result checked; how many values are wrong (all, when it fails). */
static size_t caller_call(int mode, int call, int to_worker, int from_worker, int *kept)
{
  const size_t values = n_rows * n_cols;
  gk_channel c;
  gk_error err;
  gk_error_clear(&err);
  if (gk_channel_create(&c, 2, gk_channel_slot_bytes((double) values, n_rows, 2), &err)) {
    printf("create: %s\n", err.message);
    return values;
  }
  /* From the second call on, the first call's mapping is there at the start. */
  *kept = gk_shared_peers_mapped() == (call && mode != 1 ? 1 : 0);
  double *out = (double *) calloc(values, sizeof(double));
  channel_ticket t = {{0}, c.seg.token, c.seg.bytes};
  snprintf(t.path, sizeof(t.path), "%s", c.seg.path);
  char done = 0;
  if (!out || write(to_worker, &t, sizeof(t)) != (ssize_t) sizeof(t) ||
      gk_channel_open(&c, out, values * sizeof(double), GK_WRITE_DENSE, n_rows, 2, &err) ||
      read(from_worker, &done, 1) != 1) {
    printf("call %d: %s\n", call, err.message);
    gk_channel_release(&c);
    free(out);
    return values;
  }
  gk_channel_finish(&c);
  size_t bad = done ? 0 : values;
  for (size_t j = 0; j < n_cols; j++)
    for (size_t i = 0; i < n_rows; i++) {
      double v = value_at(i, j, call), want = mode == 2 ? (double) (float) v : v;
      if (out[j * n_rows + i] != want) bad++;
    }
  printf("mode %d, call %d: %zu of %zu values wrong, caller scattered %zu pieces, "
         "%d staging segments mapped\n", mode, call, bad, values, c.pieces,
         gk_shared_peers_mapped());
  gk_channel_release(&c);
  free(out);
  return bad;
}

int main(int argc, char **argv)
{
  int mode = argc > 1 ? atoi(argv[1]) : 0;
  int down[2], up[2];
  if (pipe(down) || pipe(up)) return 1;
  pid_t pid = fork();
  if (pid == 0) worker(mode, down[0], up[1]);
  size_t bad = 0;
  int mapping_kept = 1;
  for (int call = 0; call < CALLS; call++) {
    int kept = 0;
    bad += caller_call(mode, call, down[1], up[0], &kept);
    mapping_kept = mapping_kept && kept && gk_shared_peers_mapped() == (mode != 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  /* The next call's start finds the worker's segment gone. */
  gk_channel c;
  gk_error err;
  gk_error_clear(&err);
  if (gk_channel_create(&c, 1, 4096, &err)) return 1;
  int dropped = gk_shared_peers_mapped() == 0;
  gk_channel_release(&c);
  printf("worker exit %d; mapping kept across calls %d, dropped after the worker %d\n",
         WEXITSTATUS(status), mapping_kept, dropped);
  return bad || WEXITSTATUS(status) || !mapping_kept || !dropped ? 1 : 0;
}
