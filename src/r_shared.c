/* .Call glue for memory shared with future workers (device/gk_shared.h,
 * device/gk_channel.h, R/distributed.R): the caller's input segment and its
 * result channel as external pointers, and a worker's attach. */
#include <stdlib.h>
#include <string.h>
#include "r_util.h"
#include "r_shared.h"
#include "device/gk_tunables.h"

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
  return (gk_shared *) gk_extptr_address(handle, "gk_shared", "shared memory",
                                         "shared memory already released");
}

/* list(handle, path, token, bytes, ...extra) for a segment `s` owned by
 * `handle`. */
static SEXP describe(SEXP handle, const gk_shared *s, int extra, const char **extra_names)
{
  char token[32];
  snprintf(token, sizeof(token), "%016llx", (unsigned long long) s->token);
  int n = 4 + extra;
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n)), names = PROTECT(Rf_allocVector(STRSXP, n));
  const char *fields[] = {"handle", "path", "token", "bytes"};
  for (int k = 0; k < n; k++) SET_STRING_ELT(names, k, Rf_mkChar(k < 4 ? fields[k] : extra_names[k - 4]));
  SET_VECTOR_ELT(out, 0, handle);
  SET_VECTOR_ELT(out, 1, Rf_mkString(s->path));
  SET_VECTOR_ELT(out, 2, Rf_mkString(token));
  SET_VECTOR_ELT(out, 3, Rf_ScalarReal((double) s->bytes));
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

/* list(handle, path, token, bytes), or a string saying why there is none. */
SEXP gk_r_shared_create(SEXP bytes)
{
  gk_error err;
  gk_error_clear(&err);
  gk_shared *s = (gk_shared *) calloc(1, sizeof(gk_shared));
  if (!s) gk_stop("out of memory");
  if (gk_shared_create((size_t) gk_as_double(bytes), s, &err)) {
    free(s);
    return Rf_mkString(err.message);
  }
  SEXP handle = PROTECT(R_MakeExternalPtr(s, Rf_install("gk_shared"), R_NilValue));
  R_RegisterCFinalizerEx(handle, handle_finalize, TRUE);
  SEXP out = describe(handle, s, 0, NULL);
  UNPROTECT(1);
  return out;
}

SEXP gk_r_private_create(size_t bytes, gk_error *err)
{
  // The handle first: made before the region, it cannot fail with the region held.
  SEXP handle = PROTECT(gk_extptr_new("gk_shared", handle_finalize));
  gk_shared *s = (gk_shared *) calloc(1, sizeof(gk_shared));
  if (!s) gk_fail(err, GK_ERR_NOMEM, "out of host memory for PCF inputs");
  else if (gk_shared_private(bytes, s, err)) {
    free(s);
    s = NULL;
  }
  if (s) R_SetExternalPtrAddr(handle, s);
  UNPROTECT(1);
  return s ? handle : R_NilValue;
}

gk_shared *gk_r_shared_of(SEXP handle)
{
  return handle_of(handle);
}

double *gk_r_shared_values(SEXP handle, int threads)
{
  gk_shared *s = handle_of(handle);
  gk_error err;
  gk_error_clear(&err);
  if (threads < 0 ? gk_shared_map_only(s, &err) : gk_shared_map(s, threads, &err))
    gk_raise(&err);
  return s->values;
}

/* A segment's description as the workers get it (list(path, token, bytes,
 * ...), see describe()): its path, its token (hexadecimal) and its bytes. */
static const char *target_of(SEXP target, const char *what, uint64_t *token, size_t *bytes)
{
  SEXP path = gk_list_get(target, "path"), hex = gk_list_get(target, "token");
  if (!Rf_isString(path) || !Rf_isString(hex)) gk_stop("invalid %s", what);
  *token = (uint64_t) strtoull(CHAR(STRING_ELT(hex, 0)), NULL, 16);
  *bytes = (size_t) gk_as_double(gk_list_get(target, "bytes"));
  return CHAR(STRING_ELT(path, 0));
}

int gk_r_shared_attach(SEXP target, gk_shared *s, gk_error *err)
{
  uint64_t token;
  size_t bytes;
  const char *path = target_of(target, "shared memory target", &token, &bytes);
  return gk_shared_attach(path, token, bytes, s, err);
}

int gk_r_channel_attach(SEXP target, gk_channel_port *port, gk_error *err)
{
  uint64_t token;
  size_t bytes;
  const char *path = target_of(target, "result channel", &token, &bytes);
  return gk_channel_attach(path, token, bytes,
                           (size_t) gk_as_double(gk_list_get(target, "ring")), port, err);
}

/* ---- the result channel: made first (its path and token go to the
 * workers), then opened to the caller's result vector (kept in the handle's
 * protected slot until gk_r_channel_finish hands it out) with the threads
 * that scatter the workers' slots into it ---- */

static void channel_finalize(SEXP ptr)
{
  gk_channel *c = (gk_channel *) R_ExternalPtrAddr(ptr);
  if (!c) return;
  if (c->head) gk_channel_release(c);
  free(c);
  R_ClearExternalPtr(ptr);
}

static gk_channel *channel_of(SEXP handle)
{
  return (gk_channel *) gk_extptr_address(handle, "gk_channel", "result channel",
                                          "result channel already released");
}

/* A channel of `rings` rings for a result of `length` doubles whose columns
 * have at most `n_rows` entries, with no result yet (gk_r_channel_open):
 * list(handle, path, token, bytes, slot_bytes, direct: whether workers may
 * be offered the inputs to read); the handle alone when the system has no
 * shared memory (the results then come through the futures). */
SEXP gk_r_channel_create(SEXP length, SEXP n_rows, SEXP rings)
{
  gk_channel *c = (gk_channel *) calloc(1, sizeof(gk_channel));
  if (!c) gk_stop("out of memory");
  SEXP handle = PROTECT(R_MakeExternalPtr(c, Rf_install("gk_channel"), R_NilValue));
  R_RegisterCFinalizerEx(handle, channel_finalize, TRUE);
  size_t k = (size_t) gk_as_double(rings);
  size_t slot = gk_channel_slot_bytes(gk_as_double(length), (size_t) gk_as_double(n_rows), k);
  gk_error err;
  gk_error_clear(&err);
  if (gk_channel_create(c, k, slot, &err)) {
    UNPROTECT(1);
    return handle;
  }
  const char *extra[] = {"slot_bytes", "direct"};
  SEXP desc = PROTECT(describe(handle, &c->seg, 2, extra));
  SET_VECTOR_ELT(desc, 4, Rf_ScalarReal((double) slot));
  SET_VECTOR_ELT(desc, 5, Rf_ScalarLogical(gk_channel_direct(c)));
  UNPROTECT(2);
  return desc;
}

/* The channel's result: `length` doubles (a matrix of `rows` rows when
 * rows > 0) of layout `layout` (n_rows rows), kept in the handle's protected
 * slot until gk_r_channel_finish hands it out, and the writer threads that
 * scatter the workers' slots into it. */
SEXP gk_r_channel_open(SEXP handle, SEXP length, SEXP rows, SEXP layout, SEXP n_rows,
                       SEXP threads)
{
  gk_channel *c = channel_of(handle);
  if (R_ExternalPtrProtected(handle) != R_NilValue) gk_stop("result channel already open");
  SEXP out = PROTECT(gk_r_alloc_result(length, rows));
  R_SetExternalPtrProtected(handle, out);
  gk_error err;
  gk_error_clear(&err);
  if (c->head && gk_channel_open(c, REAL(out), (size_t) Rf_xlength(out) * sizeof(double),
                                 (gk_write_kind) gk_as_int(layout),
                                 (size_t) gk_as_double(n_rows), gk_as_int(threads), &err))
    gk_raise(&err);   /* R/distributed.R releases the channel on its way out */
  UNPROTECT(1);
  return R_NilValue;
}

/* Offers the channel's workers the table of inputs in `input` (a private
 * region made by gk_r_pcf_table) to read with process_vm_readv, before or
 * after the result (gk_r_channel_open). The region must outlive the
 * channel (R/distributed.R frees the channel first). */
SEXP gk_r_channel_offer(SEXP handle, SEXP input)
{
  gk_channel *c = channel_of(handle);
  gk_shared *s = handle_of(input);
  if (!c->head) gk_stop("result channel already finished");
  gk_channel_offer_input(c, s->values, s->bytes);
  return R_NilValue;
}

/* Tells the workers that the offered inputs passed the checks. */
SEXP gk_r_channel_checked(SEXP handle)
{
  gk_channel *c = channel_of(handle);
  if (!c->head) gk_stop("result channel already finished");
  gk_channel_inputs_checked(c);
  return R_NilValue;
}

/* The values a channel scatters into (gk_r_block_write writes there too). */
double *gk_r_channel_values(SEXP handle)
{
  SEXP out = R_ExternalPtrProtected(handle);
  if (out == R_NilValue) gk_stop("result channel not open");
  return REAL(out);
}

/* Once every worker is done: the rest scattered, the thread stopped, the
 * segment freed; returns the result, no longer held by the handle (so that
 * attr<- on it does not copy it). */
SEXP gk_r_channel_finish(SEXP handle)
{
  gk_channel *c = channel_of(handle);
  SEXP out = PROTECT(R_ExternalPtrProtected(handle));
  if (c->head) {
    gk_channel_finish(c);
    gk_channel_release(c);
  }
  R_SetExternalPtrProtected(handle, R_NilValue);
  UNPROTECT(1);
  return out;
}

/* Makes a pcf_dist_file() backing file of `bytes` (gk_file_make) with its
 * disk blocks unless GK_FILE_ALLOCATE is 0: TRUE when they were allocated. */
SEXP gk_r_file_make(SEXP path, SEXP bytes)
{
  if (!Rf_isString(path) || Rf_length(path) != 1 || STRING_ELT(path, 0) == NA_STRING)
    gk_stop("invalid file path");
  double size = gk_as_double(bytes);
  if (!(size >= 0) || size > 9.0e18) gk_stop("invalid file size");
  const char *file = CHAR(STRING_ELT(path, 0));
  gk_error err;
  gk_error_clear(&err);
  int allocated;
  if (gk_file_make(file, (size_t) size, gk_tunable(GK_TUNE_FILE_ALLOCATE) != 0, &allocated,
                   &err) != GK_OK)
    gk_raise(&err);
  return Rf_ScalarLogical(allocated);
}

/* Releases a segment or channel now rather than when R collects its handle. */
SEXP gk_r_shared_free(SEXP handle)
{
  if (gk_extptr_is(handle, "gk_channel"))
    channel_finalize(handle);
  else if (gk_extptr_is(handle, "gk_shared"))
    handle_finalize(handle);
  return R_NilValue;
}

/* c(seconds the channel's writer threads scattered (summed), pieces, OpenMP
 * threads of each, writer threads), once finished. */
SEXP gk_r_channel_stats(SEXP handle)
{
  gk_channel *c = channel_of(handle);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 4));
  REAL(out)[0] = c->busy_s;
  REAL(out)[1] = (double) c->pieces;
  REAL(out)[2] = c->threads;
  REAL(out)[3] = c->writers;
  UNPROTECT(1);
  return out;
}
