/* The result channel's hand-over route (src/device/gk_channel.h) without a
 * GPU: a forked worker offers a shared segment (as a GPU worker's staging),
 * fills blocks of a 301 x 203 matrix there and hands them over; the caller
 * writes them into its result, then checks every value. Mode 0: handed
 * over; 1: the segment's descriptor closed, so that the caller cannot map
 * it: refused, and sent by the other routes (direct writes, or slots with
 * GK_CHANNEL_DIRECT=0); 2: float blocks handed over. The R tests reach this
 * route only with GPU workers. From the repository's root:
 *   gcc -O1 -g -fopenmp -Isrc -o /tmp/channel-check tools/channel-check.c \
 *     src/device/{gk_channel,gk_shared,block_writer,block_scheduler,gk_tunables,gk_hooks,gk_error,host_copy}.c -lm
 *   for m in 0 1 2; do /tmp/channel-check $m || echo FAILED; done
 *   GK_CHANNEL_DIRECT=0 /tmp/channel-check 1
 *   valgrind --leak-check=full --error-exitcode=9 /tmp/channel-check 0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "device/gk_channel.h"
#include "device/gk_shared.h"

static double value_at(size_t i, size_t j) { return (double) (i * 1000 + j) + 0.25; }

int main(int argc, char **argv)
{
  int mode = argc > 1 ? atoi(argv[1]) : 0, single = mode == 2;
  const size_t n_rows = 301, n_cols = 203, values = n_rows * n_cols, tile = 64;
  gk_channel c;
  gk_error err;
  gk_error_clear(&err);
  if (gk_channel_create(&c, 2, gk_channel_slot_bytes((double) values, n_rows, 2), &err)) {
    printf("create: %s\n", err.message);
    return 1;
  }
  double *out = (double *) calloc(values, sizeof(double));
  pid_t pid = fork();
  if (pid == 0) {
    gk_channel_port p;
    if (gk_channel_attach(c.seg.path, c.seg.token, c.seg.bytes, 0, &p, &err)) _exit(10);
    gk_shared staging;
    if (gk_shared_create(2 * tile * tile * sizeof(double), &staging, &err) ||
        gk_shared_map(&staging, 1, &err))
      _exit(11);
    gk_shared_offer(&staging);
    if (mode == 1) gk_shared_close(&staging);   /* no process can open it now */
    gk_block_writer w = gk_channel_writer(&p, GK_WRITE_DENSE, 0, 0, 2);
    size_t k = 0;
    for (size_t j0 = 0; j0 < n_cols; j0 += tile)
      for (size_t i0 = 0; i0 < n_rows; i0 += tile, k++) {
        gk_block b = {i0, i0 + tile < n_rows ? tile : n_rows - i0, j0,
                      j0 + tile < n_cols ? tile : n_cols - j0};
        char *half = (char *) staging.values + (k % 2) * tile * tile * sizeof(double);
        for (size_t j = 0; j < b.cols; j++)
          for (size_t i = 0; i < b.rows; i++) {
            double v = value_at(b.row0 + i, b.col0 + j);
            if (single) ((float *) half)[j * b.rows + i] = (float) v;
            else ((double *) half)[j * b.rows + i] = v;
          }
        w.reduce(w.reduce_ctx, &b, half, single);
      }
    int ok = !p.failed && p.blocks == k && (mode == 1 ? p.handover == -1 : p.handover == 1);
    printf("worker: %zu blocks, handover %d, direct %d, failed %d\n", (size_t) p.blocks,
           p.handover, p.direct, p.failed);
    fflush(stdout);
    gk_shared_withdraw(&staging);
    gk_shared_release(&staging);
    gk_channel_detach(&p);
    _exit(ok ? 0 : 12);
  }
  if (gk_channel_open(&c, out, values * sizeof(double), GK_WRITE_DENSE, n_rows, 2, &err)) {
    printf("open: %s\n", err.message);
    return 1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  gk_channel_finish(&c);
  size_t bad = 0;
  for (size_t j = 0; j < n_cols; j++)
    for (size_t i = 0; i < n_rows; i++) {
      double want = single ? (double) (float) value_at(i, j) : value_at(i, j);
      if (out[j * n_rows + i] != want) bad++;
    }
  printf("mode %d: worker exit %d, %zu of %zu values wrong, caller scattered %zu pieces, "
         "mapped %d staging segments\n", mode, WEXITSTATUS(status), bad, values, c.pieces,
         c.n_staged);
  gk_channel_release(&c);
  free(out);
  return bad || WEXITSTATUS(status) ? 1 : 0;
}
