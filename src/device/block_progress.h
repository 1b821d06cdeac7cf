/*
 * Progress lines for block engines: at most one line a second, from the main
 * thread, through gk_progress(). Pure host C.
 */
#ifndef GK_BLOCK_PROGRESS_H
#define GK_BLOCK_PROGRESS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *label;
  int enabled;
  size_t total, reported;   /* reported: blocks last passed to the steps hook */
  double start, last, last_steps;
} gk_block_progress;

void gk_block_progress_start(gk_block_progress *p, const char *label, size_t total_blocks,
                             int enabled);
/* Reports `done` of the total when a second has passed since the last line;
 * `force` prints regardless (use it for the final line of a long run). The
 * steps hook (gk_hooks.h), when set, also hears of it, whether lines are
 * enabled or not. */
void gk_block_progress_update(gk_block_progress *p, size_t done, int force);

#ifdef __cplusplus
}
#endif
#endif
