/*
 * The header of every object that keeps GPU memory between calls (device
 * matrices, H2 matrices, the block-sparse engine's plans): which GPU holds it,
 * what kind of object it is, and how many device bytes it holds. The object
 * puts it first in its struct; its code enters the object's GPU on every use
 * and in its finalizer, whatever device the user has selected since.
 */
#ifndef GK_RESIDENT_H
#define GK_RESIDENT_H

#include <stddef.h>
#include "device/gk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  GK_RESIDENT_NONE = 0,
  GK_RESIDENT_DEVICE_MATRIX = 1,
  GK_RESIDENT_H2 = 2,
  GK_RESIDENT_BSPARSE_PLAN = 3,
  GK_RESIDENT_GP_FACTOR = 4
} gk_resident_kind;

typedef struct {
  gk_resident_kind kind;
  int device;      /* the GPU that holds it (0-based); -1 before it holds any */
  size_t bytes;    /* device memory it holds (kept up to date by its code)    */
} gk_resident;

/* A new object of `kind` on the device in use (call after gk_device_enter). */
void gk_resident_init(gk_resident *r, gk_resident_kind kind);

/* Enters the object's GPU: every use of the object starts with it. */
gk_status gk_resident_enter(const gk_resident *r, gk_error *err);

/* For freeing (finalizers may run at any time): enters the object's GPU and
 * returns the device in use before, which gk_resident_release_end restores. */
int gk_resident_release_begin(const gk_resident *r);
void gk_resident_release_end(int previous);

#ifdef __cplusplus
}
#endif
#endif
