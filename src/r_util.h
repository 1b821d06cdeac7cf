/*
 * Helpers shared by the `.Call` glue (src/r_*.c). The glue is the only code
 * that talks to R: it checks arguments, calls a core, wraps results, and turns
 * a core's gk_error into an R error after freeing what it holds.
 */
#ifndef GK_R_UTIL_H
#define GK_R_UTIL_H

#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>
#include "device/gk_error.h"
#include "gpukernels/gk_kernel.h"

/* Every error the glue raises: like Rf_error, but without a call (R's
 * `call. = FALSE`), as the package's R checks do, so users never see the
 * internal helper that made the .Call. Use it instead of Rf_error. */
void gk_stop(const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 1, 2), noreturn))
#endif
  ;

/* Raises the R condition for a failed core call: R's interrupt condition for
 * GK_ERR_INTERRUPTED (caught by tryCatch(interrupt = ), not by try()), an
 * error otherwise. Call it only after freeing everything the glue holds: it
 * does not return. */
void gk_raise(const gk_error *err);

/* The end of a long core call, after freeing: gk_raise() on failure, else
 * R's interrupt check, so that a Ctrl-C during the call ends this call and
 * not a later one. */
void gk_finish(const gk_error *err);

/* Installs R's interrupt check and console output as the cores' hooks. */
void gk_install_r_hooks(void);

/* TRUE once the R progress sink (r_progress.c) failed or was interrupted
 * during the current call: the interrupt hook then asks the core to stop. */
int gk_r_progress_stop_requested(void);

/* TRUE when `backend` (a string the R code has already resolved) is "gpu". */
int gk_backend_is_gpu(SEXP backend);

/* Puts `value` at position i of the list `list` (protected by it from then
 * on) and returns it: results are allocated straight into their list. */
static inline SEXP gk_list_put(SEXP list, int i, SEXP value)
{
  SET_VECTOR_ELT(list, i, value);
  return value;
}

/* A single logical / integer / double argument (the R side has checked them). */
int gk_as_flag(SEXP x);
int gk_as_int(SEXP x);
double gk_as_double(SEXP x);

/* The element `name` of a named list, or R_NilValue when it has none. */
SEXP gk_list_get(SEXP list, const char *name);

/* A spec from R (the arguments of one .Call, by name rather than by
 * position) read once: fields[j] gets the value called names[j], for j < n.
 * The spec is a named list, or the calling R function's frame
 * (environment()): its variables by name, promises forced, so a hot path
 * pays for no list. Every name must be there (NULL values included): a
 * missing one, or a spec of another type, is an internal error naming
 * `what` and the field, so a change on one side of the contract fails
 * loudly, never as a shifted argument. `symbols` is the caller's static
 * array of n, filled with the names' symbols on first use (a symbol lookup
 * by string costs more than the rest of a frame's reading); NULL where only
 * lists are taken. */
void gk_spec_fields(SEXP spec, const char *what, int n, const char *const *names,
                    SEXP *symbols, SEXP *fields);

/* TRUE when none of the n doubles is NA, NaN or infinite (one pass, no branches). */
int gk_all_finite(const double *v, R_xlen_t n);

/* The kernel specification list built by gk_kernel() in R. */
gk_kernel gk_kernel_from_r(SEXP spec);

/* Its `range`: length 1 or `dim`, checked; written to range_out[dim]. */
void gk_kernel_range_from_r(SEXP spec, int dim, double *range_out);

/* The midpoint of the bounding box of the rows of x (m x dim) and y (n x dim,
 * or NULL), written to centre[dim]; where a dimension spans more than 2^20
 * times its range (range[dim], or NULL), the median coordinate instead. */
void gk_points_centre(const double *x, size_t m, const double *y, size_t n, int dim,
                      const double *range, double *centre);

/* out = (x - centre) / range for the n x dim column-major x (centre NULL: no
 * shift). Points are shifted before they are scaled so that distances far
 * from the origin keep their digits; kernels of differences use a common
 * centre for x and y, `linear` none. Raises if a scaled value overflows. */
void gk_scale_points(const double *x, size_t n, int dim, const double *centre,
                     const double *range, double *out);

/* The locations `locs` (n x dim, double, dim <= GK_SCALED_MAX_DIM) scaled by
 * the kernel's range around their centre, with the new points `more` (or
 * R_NilValue) on the same scale in *more_scaled (when not NULL), in R's
 * transient memory: differences keep their digits far from the origin. */
#define GK_SCALED_MAX_DIM 64
double *gk_scaled_points(SEXP locs, SEXP more, SEXP spec, double **more_scaled);

/* External pointers to the package's native objects carry a tag naming their
 * kind; every entry point taking one checks it before reading the address. */
#define GK_TAG_H2MATRIX "gpukernels_h2matrix"
#define GK_TAG_H2TREE "gpukernels_h2tree"
#define GK_TAG_DEVICE_MATRIX "gk_device_matrix"

/* A new external pointer with `tag`, no address yet and `finalizer`
 * registered (R may fail here: nothing native exists yet to leak). The caller
 * PROTECTs it, builds the object, then sets the address. */
SEXP gk_extptr_new(const char *tag, R_CFinalizer_t finalizer);

/* Whether `ptr` is an external pointer with `tag` (its address freed or not):
 * the test before gk_extptr_address and before freeing an object now. */
int gk_extptr_is(SEXP ptr, const char *tag);

/* The address in `ptr` if it is an external pointer with `tag`; otherwise an
 * R error: `what` (e.g. "h2matrix") is not valid (a pointer from elsewhere),
 * or `stale` when the address is NULL (freed, or saved and reloaded). */
void *gk_extptr_address(SEXP ptr, const char *tag, const char *what, const char *stale);

/* Runs a full R collection first when `bytes` more on `where` (a 0-based
 * device, or GK_MEMORY_HOST) would pass the memory policy of
 * device/gk_memory.h. Call it before taking pointers into R objects that a
 * finalizer could free. persistent: the bytes outlive the call. */
void gk_r_make_room(int where, size_t bytes, int persistent);

#endif
