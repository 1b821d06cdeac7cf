/* .Call glue for the Vecchia neighbour search (src/gp/gp_neighbors.h). */
#include "r_util.h"
#include "gp/gp_neighbors.h"

/* The search's arguments from R: the points xo (a double matrix, in the GP's
 * internal order) and m, the neighbours per point. */
static void search_args(SEXP xo, SEXP m, int *n, int *dim, int *neighbors)
{
  if (!Rf_isReal(xo) || !Rf_isMatrix(xo)) gk_stop("internal: the locations must be a double matrix");
  *n = Rf_nrows(xo);
  *dim = Rf_ncols(xo);
  *neighbors = gk_as_int(m);
  if (*neighbors == NA_INTEGER || *neighbors < 0) gk_stop("internal: bad number of neighbours");
}

/* list(nbr, duplicates): the search's result as R takes it. */
static SEXP search_result(SEXP nbr, int duplicates)
{
  const char *names[] = {"nbr", "duplicates", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SET_VECTOR_ELT(out, 0, nbr);
  SET_VECTOR_ELT(out, 1, Rf_ScalarInteger(duplicates));
  UNPROTECT(1);
  return out;
}

/* list(nbr = n x m integer matrix, duplicates = integer) for the points xo;
 * gpu: the GPU engine, else the CPU's with `threads`; dense_pairs:
 * gp_dense_knn_pairs() (R). */
SEXP gk_r_gp_neighbors(SEXP xo, SEXP m, SEXP gpu, SEXP threads, SEXP dense_pairs)
{
  int n, dim, neighbors;
  search_args(xo, m, &n, &dim, &neighbors);
  SEXP nbr = PROTECT(Rf_allocMatrix(INTSXP, n, neighbors));   // filled by the core, zeros included
  gp_neighbors_options opt = {gk_as_flag(gpu), gk_as_int(threads), gk_as_double(dense_pairs)};
  int duplicates = 0;
  gk_error err;
  gk_error_clear(&err);
  if (gp_neighbors(REAL(xo), n, dim, neighbors, &opt, INTEGER(nbr), &duplicates, &err)) {
    UNPROTECT(1);
    gk_raise(&err);
  }
  SEXP out = search_result(nbr, duplicates);
  UNPROTECT(1);
  gk_finish(&err);
  return out;
}

/* The same search on a host thread of its own (gp_neighbors_start): a handle
 * (an external pointer whose protected value, list(xo, nbr), keeps the points
 * and the result alive while the thread works) for gk_r_gp_neighbors_join.
 * A handle dropped unjoined is cancelled and joined by its finalizer. */
static const char job_tag[] = "gk_gp_neighbors_job";

static void job_finalize(SEXP handle)
{
  gp_neighbors_job *job = (gp_neighbors_job *) R_ExternalPtrAddr(handle);
  if (!job) return;
  R_ClearExternalPtr(handle);
  int duplicates;
  gk_error err;
  gk_error_clear(&err);
  gp_neighbors_join(job, 1, &duplicates, &err);
}

SEXP gk_r_gp_neighbors_start(SEXP xo, SEXP m, SEXP threads)
{
  int n, dim, neighbors;
  search_args(xo, m, &n, &dim, &neighbors);
  SEXP keep = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(keep, 0, xo);
  SEXP nbr = gk_list_put(keep, 1, Rf_allocMatrix(INTSXP, n, neighbors));
  SEXP handle = PROTECT(R_MakeExternalPtr(NULL, Rf_install(job_tag), keep));
  R_RegisterCFinalizerEx(handle, job_finalize, TRUE);
  gp_neighbors_job *job;
  gk_error err;
  gk_error_clear(&err);
  if (gp_neighbors_start(REAL(xo), n, dim, neighbors, gk_as_int(threads), INTEGER(nbr), &job,
                         &err)) {
    UNPROTECT(2);
    gk_raise(&err);
  }
  R_SetExternalPtrAddr(handle, job);
  UNPROTECT(2);
  return handle;
}

/* list(nbr, duplicates) as gk_r_gp_neighbors gives it, once the job is done;
 * cancel: stop it instead (NULL back). A handle joined already is an
 * internal error, except when cancelled (a no-op). */
SEXP gk_r_gp_neighbors_join(SEXP handle, SEXP cancel)
{
  int stop = gk_as_flag(cancel);
  if (!gk_extptr_is(handle, job_tag))
    gk_stop("internal: not a neighbour search's handle");
  gp_neighbors_job *job = (gp_neighbors_job *) R_ExternalPtrAddr(handle);
  if (!job) {
    if (stop) return R_NilValue;
    gk_stop("internal: this neighbour search was joined already");
  }
  R_ClearExternalPtr(handle);
  int duplicates = 0;
  gk_error err;
  gk_error_clear(&err);
  gk_status status = gp_neighbors_join(job, stop, &duplicates, &err);
  if (stop) return R_NilValue;
  if (status) gk_raise(&err);
  SEXP out = search_result(VECTOR_ELT(R_ExternalPtrProtected(handle), 1), duplicates);
  gk_finish(&err);
  return out;
}
