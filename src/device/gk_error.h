/*
 * Error convention for every C and CUDA core in gpukernels.
 *
 * A core never calls R and never aborts. It returns a gk_status and, when that
 * status is not GK_OK, has written a message a user can act on into a gk_error
 * that its caller owns. The `.Call` glue (src/r_*.c) frees what it holds and only
 * then raises the R error (gk_raise() in r_util.h), so no memory leaks through a
 * longjmp. CUDA failures (no device, driver mismatch, out of memory, a failed
 * launch) are turned into statuses by GK_CUDA_TRY in device/gk_cuda.h.
 */
#ifndef GK_ERROR_H
#define GK_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  GK_OK = 0,
  GK_ERR_INPUT,        /* the caller's data is unusable (NA, wrong shape, ...) */
  GK_ERR_NOMEM,        /* host or device allocation failed                      */
  GK_ERR_CUDA,         /* a CUDA runtime, cuBLAS or cuSOLVER call failed        */
  GK_ERR_NO_DEVICE,    /* a GPU was required but none is usable                 */
  GK_ERR_NO_CUDA,      /* this build of the package has no CUDA                 */
  GK_ERR_INTERRUPTED,  /* the user interrupted a long job between blocks        */
  GK_ERR_INTERNAL,     /* a bug in gpukernels: please report it                 */
  GK_ERR_ABANDONED     /* a future worker's caller stopped: an error, not an
                        * interrupt, so that the worker returns to its future  */
} gk_status;

#define GK_MESSAGE_SIZE 1024

typedef struct {
  gk_status status;
  char message[GK_MESSAGE_SIZE];
} gk_error;

void gk_error_clear(gk_error *err);

/* Records the first failure only (later ones are usually consequences of it)
 * and returns its status, so a core can write `return gk_fail(err, ...)`. */
gk_status gk_fail(gk_error *err, gk_status status, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;

/* The error every GPU entry point reports in a build without CUDA. */
gk_status gk_fail_no_cuda(gk_error *err);

#ifdef __cplusplus
}
#endif
#endif
