/* Glue: R's lists of PCF matrices flattened into the engines' pcf_set. */
#ifndef GK_R_PCF_FLAT_H
#define GK_R_PCF_FLAT_H

#include "r_util.h"
#include "pcf/pcf.h"

/* Where each function's matrix is, from one pass on R's thread (which checks
 * the shapes and takes the data pointers); lives in R's transient memory
 * (or in the table of r_pcf_workers.c, whose matrices are all double:
 * is_int NULL). */
typedef struct {
  R_xlen_t n;
  const size_t *offset;
  const void *const *data;
  const char *is_int;
} gk_pcf_plan;

/* A flattened set and the verdicts of the checks made while copying it. */
typedef struct {
  pcf_set set;
  size_t bad;        /* first function pcf_function_bad rejects, or set.n */
  size_t collapse;   /* single: first function float cannot hold, or set.n   */
} gk_pcf_flat;

void gk_pcf_plan_of(SEXP list, const char *arg, gk_pcf_plan *plan);

/* Copies the planned functions into t and v (offset[n] values each) and
 * checks each one as it is copied (`single`: also float's verdicts). */
void gk_pcf_plan_copy(const gk_pcf_plan *plan, double *t, double *v, int single,
                      size_t *bad, size_t *collapse);

/* An integer matrix's columns t and v (`rows` each) as doubles, NA kept. */
void gk_pcf_int_columns(const int *m, size_t rows, double *t, double *v);

/* The checks of gk_pcf_plan_copy made where the functions are, without a
 * copy: whether every planned function is a double matrix that passes them,
 * and the set is not empty; with `single`, *collapse is the first function
 * float cannot hold (gk_pcf_flat's), or n. Each passing function's last row
 * goes into last_t and last_v (n values each): the set's tails for
 * pcf_check_tails. 0 says only that a copy is needed to tell what fails
 * (or to convert integers). */
int gk_pcf_plan_passes(const gk_pcf_plan *plan, int single, double *last_t, double *last_v,
                       size_t *collapse);

/* x (and y unless R_NilValue) flattened into *fx and *fy. With `during`, the
 * copies run on a helper thread while during(data) runs on R's thread (e.g.
 * allocating the result, whose collection of R's heap then overlaps the
 * copy); its value is returned, unprotected. During it, fx and fy already
 * hold the sets' sizes and offsets but not their values. */
SEXP gk_pcf_flatten(SEXP x, SEXP y, int single, gk_pcf_flat *fx, gk_pcf_flat *fy,
                    SEXP (*during)(void *), void *data);

#endif
