/*
 * Bytes held by live native objects (H2 matrices, device matrices) on the
 * host and on each device, and when to collect. R sees only the few bytes of
 * an external pointer, so its garbage collector never runs for objects that
 * hold gigabytes behind one; the glue asks gk_memory_should_collect() before
 * a large allocation and, when told to, runs a full R collection (whose
 * finalizers unregister what they free) and reports it with
 * gk_memory_collected().
 *
 * Policy: collect only when live objects hold memory at the place asked
 * about, and either
 *  - a new object would take its place's holdings past twice what was live
 *    after the last collection (and past GK_MEMORY_MIN_COLLECT), so that a
 *    loop replacing one object by another holds about two of them, while
 *    programs that keep many objects pay one collection per doubling; or
 *  - the bytes asked for pass the budget: on the host, the budget given with
 *    gk_memory_set_host_budget() less what is held; on a device, the device
 *    layer's budget (gk_device_memory_budget(), a share of its free memory).
 * Objects are made and finalized on R's thread only; no locking.
 */
#ifndef GK_MEMORY_H
#define GK_MEMORY_H

#include <stddef.h>
#include "device/gk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GK_MEMORY_HOST (-1)
#define GK_MEMORY_MAX_DEVICES 64
/* Holdings below this never trigger a collection by growth. */
#define GK_MEMORY_MIN_COLLECT ((size_t) 32 << 20)
/* Requests below this are not compared with the budget. */
#define GK_MEMORY_MIN_QUERY ((size_t) 1 << 20)

/* What one object registered: host bytes, and bytes on `device` (0-based, or
 * GK_MEMORY_HOST when it holds none). Zero-initialise it. */
typedef struct {
  size_t host_bytes, device_bytes;
  int device;
} gk_memory_hold;

void gk_memory_register(gk_memory_hold *hold, int device, size_t host_bytes,
                        size_t device_bytes);
/* Gives back what `hold` registered; a second call does nothing. */
void gk_memory_unregister(gk_memory_hold *hold);

/* Bytes held by live objects on the host (GK_MEMORY_HOST) or a device. */
size_t gk_memory_held(int where);

/* 1 when a full collection should run before allocating `bytes` on `where`:
 * persistent bytes (an object that outlives the call) or transient ones (an
 * engine's buffers for one call, which only the budget rule concerns). */
int gk_memory_should_collect(int where, size_t bytes, int persistent);

/* Records the holdings after a collection. */
void gk_memory_collected(void);

/* Bytes that can still be allocated at `where` (GK_MEMORY_HOST or a device):
 * the budget less what live objects hold; 1e300 when unknown. */
double gk_memory_available(int where);

/* Host budget in bytes (0: half of the physical memory). */
void gk_memory_set_host_budget(double bytes);

/* The one check of a plan against the device budget (gk_device_memory_budget(),
 * on the device in use): GK_OK when `need` bytes fit, else GK_ERR_NOMEM with
 * the standard message "<what> needs 3.20 GB of GPU memory, more than the
 * 2.40 GB it may use (80% of the free memory): <advice>", so that every engine
 * says what ran out and what to change in the same words. The budget goes to
 * *budget when it is not NULL, for callers that also size work by it. */
gk_status gk_memory_check_device(double need, const char *what, const char *advice,
                                 size_t *budget, gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
