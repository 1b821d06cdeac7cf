/* Shared result memory in the .Call glue (r_shared.c). */
#ifndef GK_R_SHARED_H
#define GK_R_SHARED_H

#include <R_ext/Rdynload.h>
#include "r_util.h"
#include "device/gk_shared.h"

/* Registers the ALTREP class of shared results (from R_init_gpukernels). */
void gk_r_shared_register(DllInfo *dll);

/* A new segment of `bytes` (see r_shared.c). */
SEXP gk_r_shared_create(SEXP bytes, SEXP fill);

/* The values of a segment made by gk_r_shared_create, mapped here. */
double *gk_r_shared_values(SEXP handle, int threads);

/* Attaches a worker to the segment that `target` (list(path, token, bytes))
 * names; GK_OK, or a status with the reason in err (not an R error). */
int gk_r_shared_attach(SEXP target, gk_shared *s, gk_error *err);

#endif
