/* Memory shared with future workers in the .Call glue (r_shared.c). */
#ifndef GK_R_SHARED_H
#define GK_R_SHARED_H

#include "r_util.h"
#include "device/gk_channel.h"
#include "device/gk_shared.h"

/* A new segment of `bytes` (see r_shared.c). */
SEXP gk_r_shared_create(SEXP bytes);

/* A private region of `bytes` (gk_shared_private) as a handle of the same
 * kind, freed by gk_r_shared_free; R_NilValue, with *err set, when there is
 * no memory (it does not raise: callers holding a channel release it first). */
SEXP gk_r_private_create(size_t bytes, gk_error *err);

/* The segment or region of a handle (raises once released). */
gk_shared *gk_r_shared_of(SEXP handle);

/* The values of a segment made by gk_r_shared_create, mapped here, its pages
 * made with `threads` threads (< 0: not made; the caller writes them). */
double *gk_r_shared_values(SEXP handle, int threads);

/* Releases a segment or channel now (r_shared.c). */
SEXP gk_r_shared_free(SEXP handle);

/* The result vector's values of a channel made by gk_r_channel_create. */
double *gk_r_channel_values(SEXP handle);

/* Attaches a worker to the segment that `target` (list(path, token, bytes))
 * names; GK_OK, or a status with the reason in err (not an R error). */
int gk_r_shared_attach(SEXP target, gk_shared *s, gk_error *err);

/* Attaches a worker to ring `ring` of the result channel that `target`
 * (list(path, token, bytes, ring)) names; GK_OK, or a status in err. */
int gk_r_channel_attach(SEXP target, gk_channel_port *port, gk_error *err);

/* In r_pcf.c: an uninitialised result vector (a matrix when rows > 0). */
SEXP gk_r_alloc_result(SEXP length, SEXP rows);

#endif
