/* .Call glue for memory that R can see (device/gk_memory.h): a full R
 * collection before a large allocation when live objects hold much, what they
 * hold, and whether an object's native data is still there. */
#include "r_util.h"
#include "device/gk_device.h"
#include "device/gk_memory.h"

void gk_r_make_room(int where, size_t bytes, int persistent)
{
  SEXP budget = Rf_GetOption1(Rf_install("gpukernels.host_memory_budget"));
  double b = (Rf_isReal(budget) || Rf_isInteger(budget)) && Rf_length(budget) == 1
    ? Rf_asReal(budget) : 0;
  gk_memory_set_host_budget(R_FINITE(b) ? b : 0);
  if (gk_memory_should_collect(where, bytes, persistent)) {
    R_gc();   // runs the finalizers of unreachable objects, which unregister
    gk_memory_collected();
  }
}

/* c(host, gpu1, ..., gpuN): bytes held by live objects. */
SEXP gk_r_memory_held(void)
{
  int count = gk_device_count(NULL, 0);
  if (count > GK_MEMORY_MAX_DEVICES) count = GK_MEMORY_MAX_DEVICES;
  SEXP out = PROTECT(Rf_allocVector(REALSXP, count + 1));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, count + 1));
  REAL(out)[0] = (double) gk_memory_held(GK_MEMORY_HOST);
  SET_STRING_ELT(names, 0, Rf_mkChar("host"));
  for (int d = 0; d < count; d++) {
    char name[32];
    snprintf(name, sizeof name, "gpu%d", d + 1);
    REAL(out)[d + 1] = (double) gk_memory_held(d);
    SET_STRING_ELT(names, d + 1, Rf_mkChar(name));
  }
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

/* TRUE when ptr is an external pointer without an address (after readRDS(),
 * or once its object was released): its object rebuilds it. */
SEXP gk_r_ptr_stale(SEXP ptr)
{
  return Rf_ScalarLogical(TYPEOF(ptr) == EXTPTRSXP && R_ExternalPtrAddr(ptr) == NULL);
}
