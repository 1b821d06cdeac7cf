/* .Call glue for the device layer: build facts, GPU query, device choice. */
#include "r_util.h"
#include "gk_config.h"
#include "device/gk_device.h"
#include "device/gk_omp.h"
#include "device/gk_shared.h"
#include "device/gk_tunables.h"

SEXP gk_r_build_info(void)
{
  const char *names[] = {"cuda", "cuda_version", "runtime_version", "driver_version",
                         "nvcc_gencode", "device_count", "no_device_reason", ""};
  char why[256] = "";
  int count = gk_device_count(why, sizeof why);
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SET_VECTOR_ELT(out, 0, Rf_ScalarLogical(gk_cuda_built()));
  SET_VECTOR_ELT(out, 1, Rf_mkString(GK_CUDA_VERSION_STRING));
  SET_VECTOR_ELT(out, 2, Rf_ScalarInteger(gk_cuda_runtime_version()));
  SET_VECTOR_ELT(out, 3, Rf_ScalarInteger(gk_cuda_driver_version()));
  SET_VECTOR_ELT(out, 4, Rf_mkString(GK_NVCC_GENCODE));
  SET_VECTOR_ELT(out, 5, Rf_ScalarInteger(count));
  SET_VECTOR_ELT(out, 6, Rf_mkString(why));
  UNPROTECT(1);
  return out;
}

SEXP gk_r_device_info(SEXP device)
{
  const char *names[] = {"index", "name", "compute_capability", "sm_count", "total_memory",
                         "free_memory", "l2_cache", "shared_memory_per_block", ""};
  gk_device_info info;
  gk_error err;
  gk_error_clear(&err);
  if (gk_device_query(Rf_asInteger(device) - 1, &info, &err)) gk_raise(&err);
  char cc[32];
  snprintf(cc, sizeof cc, "%d.%d", info.major, info.minor);
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SET_VECTOR_ELT(out, 0, Rf_ScalarInteger(info.index + 1));
  SET_VECTOR_ELT(out, 1, Rf_mkString(info.name));
  SET_VECTOR_ELT(out, 2, Rf_mkString(cc));
  SET_VECTOR_ELT(out, 3, Rf_ScalarInteger(info.sm_count));
  SET_VECTOR_ELT(out, 4, Rf_ScalarReal((double) info.total_memory));
  SET_VECTOR_ELT(out, 5, Rf_ScalarReal((double) info.free_memory));
  SET_VECTOR_ELT(out, 6, Rf_ScalarReal((double) info.l2_bytes));
  SET_VECTOR_ELT(out, 7, Rf_ScalarReal((double) info.shared_per_block_optin));
  UNPROTECT(1);
  return out;
}

/* The registry of tunables (device/gk_tunables.h) as the columns of a data
 * frame: name, value (in effect), default, set, valid (NA where unset),
 * description. */
SEXP gk_r_tunables(void)
{
  const char *names[] = {"name", "value", "default", "set", "valid", "description", ""};
  const int n = GK_TUNE_COUNT;
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SEXP name = gk_list_put(out, 0, Rf_allocVector(STRSXP, n));
  SEXP value = gk_list_put(out, 1, Rf_allocVector(REALSXP, n));
  SEXP fallback = gk_list_put(out, 2, Rf_allocVector(REALSXP, n));
  SEXP set = gk_list_put(out, 3, Rf_allocVector(LGLSXP, n));
  SEXP valid = gk_list_put(out, 4, Rf_allocVector(LGLSXP, n));
  SEXP doc = gk_list_put(out, 5, Rf_allocVector(STRSXP, n));
  for (int i = 0; i < n; i++) {
    gk_tunable_id id = (gk_tunable_id) i;
    SET_STRING_ELT(name, i, Rf_mkChar(gk_tunable_name(id)));
    REAL(value)[i] = gk_tunable(id);
    REAL(fallback)[i] = gk_tunable_default(id);
    LOGICAL(set)[i] = gk_tunable_is_set(id) != 0;
    LOGICAL(valid)[i] = gk_tunable_is_set(id) ? gk_tunable_is_valid(id) != 0 : NA_LOGICAL;
    SET_STRING_ELT(doc, i, Rf_mkChar(gk_tunable_doc(id)));
  }
  UNPROTECT(1);
  return out;
}

SEXP gk_r_set_device(SEXP device)
{
  gk_error err;
  gk_error_clear(&err);
  if (gk_device_select(Rf_asInteger(device) - 1, &err)) gk_raise(&err);
  return Rf_ScalarInteger(gk_device_current() + 1);
}

SEXP gk_r_current_device(void)
{
  return Rf_ScalarInteger(gk_device_current() + 1);
}

SEXP gk_r_omp_threads(void)
{
  return Rf_ScalarInteger(gk_omp_max_threads());
}

/* Frees what the per-device contexts keep between calls (scratch and staging
 * buffers, cuBLAS/cuSOLVER handles), the mappings of future workers'
 * staging and a CPU worker's own; they are made again when needed. Called
 * when the namespace is unloaded, so that nothing stays allocated on the GPU
 * while the DLL itself stays loaded (finalizers of live objects still point
 * into it). */
SEXP gk_r_release_caches(void)
{
  gk_device_release_all();
  gk_shared_peers_prune(1);   /* future workers' staging, mapped here */
  gk_shared_scratch_release();
  return R_NilValue;
}
