#include <stdarg.h>
#include <stdio.h>
#include "device/gk_hooks.h"

static gk_interrupt_fn interrupt_hook = NULL;
static gk_progress_fn progress_hook = NULL;

void gk_set_hooks(gk_interrupt_fn interrupt_pending, gk_progress_fn progress)
{
  interrupt_hook = interrupt_pending;
  progress_hook = progress;
}

int gk_interrupt_pending(void)
{
  return interrupt_hook ? interrupt_hook() : 0;
}

void gk_progress(const char *fmt, ...)
{
  if (!progress_hook) return;
  char line[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  progress_hook(line);
}
