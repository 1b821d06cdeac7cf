/*
 * Registration of every .Call entry point, grouped by engine. A CPU-only build
 * registers the same routines; GPU requests then fail with a clear error.
 * Engines add their prototypes and table rows in their own section.
 */
#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>
#include "r_util.h"
#include "device/gk_device.h"

/* device layer (r_device.c) */
SEXP gk_r_build_info(void);
SEXP gk_r_device_info(SEXP device);
SEXP gk_r_set_device(SEXP device);
SEXP gk_r_current_device(void);
SEXP gk_r_omp_threads(void);

/* kernel vocabulary (r_kernel.c) */
SEXP gk_r_kernel_matrix(SEXP x, SEXP y, SEXP spec, SEXP backend, SEXP threads);
SEXP gk_r_kernel_eval(SEXP spec, SEXP stat);

/* kernel reductions and device matrices (r_reduce.c) */
SEXP gk_r_reduce(SEXP x, SEXP y, SEXP b, SEXP spec, SEXP reduction, SEXP k, SEXP single,
                 SEXP method, SEXP backend, SEXP threads);
SEXP gk_r_device_matrix(SEXP x, SEXP single);
SEXP gk_r_device_matrix_download(SEXP ptr);
SEXP gk_r_check_finite(SEXP x, SEXP arg);
void gk_reduce_unload(void);

static const R_CallMethodDef call_entries[] = {
  /* device layer */
  {"gk_r_build_info", (DL_FUNC) &gk_r_build_info, 0},
  {"gk_r_device_info", (DL_FUNC) &gk_r_device_info, 1},
  {"gk_r_set_device", (DL_FUNC) &gk_r_set_device, 1},
  {"gk_r_current_device", (DL_FUNC) &gk_r_current_device, 0},
  {"gk_r_omp_threads", (DL_FUNC) &gk_r_omp_threads, 0},
  /* kernel vocabulary */
  {"gk_r_kernel_matrix", (DL_FUNC) &gk_r_kernel_matrix, 5},
  {"gk_r_kernel_eval", (DL_FUNC) &gk_r_kernel_eval, 2},
  /* kernel reductions */
  {"gk_r_reduce", (DL_FUNC) &gk_r_reduce, 10},
  {"gk_r_device_matrix", (DL_FUNC) &gk_r_device_matrix, 2},
  {"gk_r_device_matrix_download", (DL_FUNC) &gk_r_device_matrix_download, 1},
  {"gk_r_check_finite", (DL_FUNC) &gk_r_check_finite, 2},
  {NULL, NULL, 0}
};

void R_init_gpukernels(DllInfo *dll)
{
  R_registerRoutines(dll, NULL, call_entries, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
  gk_install_r_hooks();
}

void R_unload_gpukernels(DllInfo *dll)
{
  (void) dll;
  gk_reduce_unload();
  gk_device_release_all();
}
