/* .Call glue for result memory shared with future workers (device/gk_shared.h,
 * R/distributed.R): the caller's segment as an external pointer, the result
 * vector that is the segment itself (an ALTREP double vector: R reads and
 * writes the shared pages, no copy), and a worker's attach. */
#include <stdlib.h>
#include <string.h>
#include "r_util.h"
#include "r_shared.h"
#include <R_ext/Altrep.h>   /* after Rinternals.h (r_util.h), which it needs */

static R_altrep_class_t shared_class;

static void handle_finalize(SEXP ptr)
{
  gk_shared *s = (gk_shared *) R_ExternalPtrAddr(ptr);
  if (!s) return;
  gk_shared_release(s);
  free(s);
  R_ClearExternalPtr(ptr);
}

static gk_shared *handle_of(SEXP handle)
{
  if (TYPEOF(handle) != EXTPTRSXP || R_ExternalPtrTag(handle) != Rf_install("gk_shared"))
    gk_stop("not shared result memory");
  gk_shared *s = (gk_shared *) R_ExternalPtrAddr(handle);
  if (!s) gk_stop("shared result memory already released");
  return s;
}

/* list(handle, path, token, bytes), or a string saying why there is none.
 * With fill TRUE its pages are allocated in the background (gk_shared_fill). */
SEXP gk_r_shared_create(SEXP bytes, SEXP fill)
{
  gk_error err;
  gk_error_clear(&err);
  gk_shared *s = (gk_shared *) calloc(1, sizeof(gk_shared));
  if (!s) gk_stop("out of memory");
  if (gk_shared_create((size_t) gk_as_double(bytes), s, &err)) {
    free(s);
    return Rf_mkString(err.message);
  }
  if (gk_as_flag(fill)) gk_shared_fill(s);
  SEXP handle = PROTECT(R_MakeExternalPtr(s, Rf_install("gk_shared"), R_NilValue));
  R_RegisterCFinalizerEx(handle, handle_finalize, TRUE);
  char token[32];
  snprintf(token, sizeof(token), "%016llx", (unsigned long long) s->token);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 4)), names = PROTECT(Rf_allocVector(STRSXP, 4));
  const char *fields[] = {"handle", "path", "token", "bytes"};
  for (int k = 0; k < 4; k++) SET_STRING_ELT(names, k, Rf_mkChar(fields[k]));
  SET_VECTOR_ELT(out, 0, handle);
  SET_VECTOR_ELT(out, 1, Rf_mkString(s->path));
  SET_VECTOR_ELT(out, 2, Rf_mkString(token));
  SET_VECTOR_ELT(out, 3, Rf_ScalarReal((double) s->bytes));
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(3);
  return out;
}

double *gk_r_shared_values(SEXP handle, int threads)
{
  gk_shared *s = handle_of(handle);
  gk_error err;
  gk_error_clear(&err);
  if (gk_shared_map(s, threads, &err)) gk_raise(&err);
  return s->values;
}

/* ---- the result vector: an ALTREP double vector over the segment ---- */

static R_xlen_t shared_length(SEXP x)
{
  return (R_xlen_t) REAL(R_altrep_data2(x))[0];
}

static void *shared_dataptr(SEXP x, Rboolean writeable)
{
  (void) writeable;
  gk_shared *s = (gk_shared *) R_ExternalPtrAddr(R_altrep_data1(x));
  if (!s || !s->values) Rf_error("gpukernels: shared result memory is gone");
  return s->values;
}

static const void *shared_dataptr_or_null(SEXP x)
{
  return shared_dataptr(x, FALSE);
}

static Rboolean shared_inspect(SEXP x, int pre, int deep, int pvec,
                               void (*inspect_sub)(SEXP, int, int, int))
{
  (void) pre; (void) deep; (void) pvec; (void) inspect_sub;
  Rprintf(" gpukernels shared result (%.0f doubles)\n", (double) shared_length(x));
  return TRUE;
}

void gk_r_shared_register(DllInfo *dll)
{
  shared_class = R_make_altreal_class("gk_shared_result", "gpukernels", dll);
  /* No Serialized_state method: saved and sent like any double vector. */
  R_set_altrep_Length_method(shared_class, shared_length);
  R_set_altrep_Inspect_method(shared_class, shared_inspect);
  R_set_altvec_Dataptr_method(shared_class, shared_dataptr);
  R_set_altvec_Dataptr_or_null_method(shared_class, shared_dataptr_or_null);
}

/* The result once every worker has written: the segment mapped here (its
 * pages mapped in with `threads` threads), closed to further attaches, as a
 * double vector of `length` (a matrix of `rows` rows when rows > 0). */
SEXP gk_r_shared_result(SEXP handle, SEXP length, SEXP rows, SEXP threads)
{
  gk_shared *s = handle_of(handle);
  double len = gk_as_double(length);
  if (len * sizeof(double) > (double) s->bytes) gk_stop("shared result memory too small");
  gk_r_shared_values(handle, gk_as_int(threads));
  gk_shared_close(s);
  SEXP out = PROTECT(R_new_altrep(shared_class, handle, Rf_ScalarReal(len)));
  int r = gk_as_int(rows);
  if (r > 0) {
    SEXP dim = PROTECT(Rf_allocVector(INTSXP, 2));
    INTEGER(dim)[0] = r;
    INTEGER(dim)[1] = (int) (len / r);
    Rf_setAttrib(out, R_DimSymbol, dim);
    UNPROTECT(1);
  }
  UNPROTECT(1);
  return out;
}

int gk_r_shared_attach(SEXP target, gk_shared *s, gk_error *err)
{
  SEXP path = gk_list_get(target, "path"), token = gk_list_get(target, "token");
  if (!Rf_isString(path) || !Rf_isString(token)) gk_stop("invalid shared result target");
  uint64_t t = (uint64_t) strtoull(CHAR(STRING_ELT(token, 0)), NULL, 16);
  return gk_shared_attach(CHAR(STRING_ELT(path, 0)), t,
                          (size_t) gk_as_double(gk_list_get(target, "bytes")), s, err);
}

/* Releases a segment now (an input segment once every worker is done),
 * rather than when R collects its handle. */
SEXP gk_r_shared_free(SEXP handle)
{
  handle_finalize(handle);
  return R_NilValue;
}
