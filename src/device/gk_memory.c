/* Accounting of native memory held by live objects (gk_memory.h). */
#include <stdio.h>
#include <unistd.h>
#include "device/gk_memory.h"
#include "device/gk_device.h"

/* Slot 0 is the host, slot d + 1 device d. */
#define SLOTS (GK_MEMORY_MAX_DEVICES + 1)
static size_t held[SLOTS], live_after_collection[SLOTS];
static double host_budget = 0;

static int slot_of(int where)
{
  if (where < 0) return 0;
  return where < GK_MEMORY_MAX_DEVICES ? where + 1 : -1;
}

static void add(int where, size_t bytes, int sign)
{
  int s = slot_of(where);
  if (s < 0 || bytes == 0) return;
  if (sign > 0) held[s] += bytes;
  else held[s] = held[s] > bytes ? held[s] - bytes : 0;
  // What is live now bounds the live set of the last collection: after
  // gk_free() or a finalizer, the next collection is due at twice what is
  // left, not at twice a set that no longer exists.
  if (live_after_collection[s] > held[s]) live_after_collection[s] = held[s];
}

void gk_memory_register(gk_memory_hold *hold, int device, size_t host_bytes,
                        size_t device_bytes)
{
  gk_memory_unregister(hold);
  hold->host_bytes = host_bytes;
  hold->device_bytes = device >= 0 ? device_bytes : 0;
  hold->device = device >= 0 ? device : GK_MEMORY_HOST;
  add(GK_MEMORY_HOST, hold->host_bytes, 1);
  if (device >= 0) add(device, hold->device_bytes, 1);
}

void gk_memory_unregister(gk_memory_hold *hold)
{
  add(GK_MEMORY_HOST, hold->host_bytes, -1);
  if (hold->device >= 0) add(hold->device, hold->device_bytes, -1);
  hold->host_bytes = hold->device_bytes = 0;
  hold->device = GK_MEMORY_HOST;
}

size_t gk_memory_held(int where)
{
  int s = slot_of(where);
  return s < 0 ? 0 : held[s];
}

void gk_memory_set_host_budget(double bytes)
{
  host_budget = bytes > 0 ? bytes : 0;
}

static double host_budget_bytes(void)
{
  if (host_budget > 0) return host_budget;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? 0.5 * (double) pages * (double) page : 1e300;
}

/* Bytes that can still be allocated at `where` (the host budget less what is
 * held; the device layer's budget, a share of the free memory; unknown: no limit). */
static double available(int where)
{
  if (where < 0) return host_budget_bytes() - (double) held[0];
  gk_error err;
  gk_error_clear(&err);
  if (where == gk_device_current()) {   // one cudaMemGetInfo, no property query
    size_t budget = 0;
    return gk_device_memory_budget(&budget, &err) ? 1e300 : (double) budget;
  }
  gk_device_info info;
  if (gk_device_query(where, &info, &err)) return 1e300;
  return (double) gk_memory_budget_of(info.free_memory);
}

int gk_memory_should_collect(int where, size_t bytes, int persistent)
{
  int s = slot_of(where);
  if (s < 0 || held[s] == 0) return 0;   // nothing a collection could free
  if (persistent) {
    double grown = (double) held[s] + (double) bytes;
    double limit = 2.0 * (double) live_after_collection[s];
    if (limit < (double) GK_MEMORY_MIN_COLLECT) limit = (double) GK_MEMORY_MIN_COLLECT;
    if (grown > limit) return 1;
  }
  // Small requests do not ask the budget (a device query per small upload).
  return bytes >= GK_MEMORY_MIN_QUERY && (double) bytes > available(where);
}

void gk_memory_collected(void)
{
  for (int s = 0; s < SLOTS; s++) live_after_collection[s] = held[s];
}

double gk_memory_available(int where)
{
  return available(where);
}

/* Bytes in words: GB with two decimals, MB below a gigabyte (scratch). */
static void bytes_words(double bytes, char *out, size_t size)
{
  if (bytes >= 1e9) snprintf(out, size, "%.2f GB", bytes / 1e9);
  else snprintf(out, size, "%.1f MB", bytes / 1e6);
}

gk_status gk_memory_check_device(double need, const char *what, const char *advice,
                                 size_t *budget, gk_error *err)
{
  size_t have = 0;
  if (budget) *budget = 0;
  if (gk_device_memory_budget(&have, err)) return err->status;
  if (budget) *budget = have;
  if (need <= (double) have) return GK_OK;
  char need_s[32], have_s[32];
  bytes_words(need, need_s, sizeof need_s);
  bytes_words((double) have, have_s, sizeof have_s);
  return gk_fail(err, GK_ERR_NOMEM, "%s needs %s of GPU memory, more than the %s it may use "
                 "(%.0f%% of the free memory): %s", what, need_s, have_s,
                 100 * GK_MEMORY_BUDGET_FRACTION, advice);
}
