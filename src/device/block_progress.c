#include "device/block_progress.h"
#include "device/gk_hooks.h"

void gk_block_progress_start(gk_block_progress *p, const char *label, size_t total_blocks,
                             int enabled)
{
  p->label = label;
  p->enabled = enabled;
  p->total = total_blocks;
  p->reported = 0;
  p->start = p->last = p->last_steps = gk_seconds_now();
  if (total_blocks > 0) gk_progress_steps(0, total_blocks, "");
}

void gk_block_progress_update(gk_block_progress *p, size_t done, int force)
{
  double t = gk_seconds_now();
  if (gk_steps_hook_set() && done > p->reported && (done == p->total || t - p->last_steps >= 0.1)) {
    p->reported = done;
    p->last_steps = t;
    gk_progress_steps(done, p->total, "");
  }
  if (!p->enabled) return;
  if (!force && t - p->last < 1.0) return;
  /* A final line only for runs long enough to have shown progress at all. */
  if (force && t - p->start < 1.0) return;
  p->last = t;
  gk_progress("%s: %zu of %zu blocks done (%.1f s)", p->label, done, p->total, t - p->start);
}
