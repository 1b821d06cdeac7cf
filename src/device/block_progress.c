#include <time.h>
#include "device/block_progress.h"
#include "device/gk_hooks.h"

static double now_seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

void gk_block_progress_start(gk_block_progress *p, const char *label, size_t total_blocks,
                             int enabled)
{
  p->label = label;
  p->enabled = enabled;
  p->total = total_blocks;
  p->start = p->last = now_seconds();
}

void gk_block_progress_update(gk_block_progress *p, size_t done, int force)
{
  if (!p->enabled) return;
  double t = now_seconds();
  if (!force && t - p->last < 1.0) return;
  /* A final line only for runs long enough to have shown progress at all. */
  if (force && t - p->start < 1.0) return;
  p->last = t;
  gk_progress("%s: %zu of %zu blocks done (%.1f s)", p->label, done, p->total, t - p->start);
}
