/* .Call glue for the Vecchia neighbour search (src/gp/gp_neighbors.h). */
#include "r_util.h"
#include "gp/gp_neighbors.h"

/* list(nbr = n x m integer matrix, duplicates = integer) for the points xo
 * (a double matrix, in the GP's internal order); gpu: the GPU engine, else
 * the CPU's with `threads`; dense_pairs: gp_dense_knn_pairs() (R). */
SEXP gk_r_gp_neighbors(SEXP xo, SEXP m, SEXP gpu, SEXP threads, SEXP dense_pairs)
{
  if (!Rf_isReal(xo) || !Rf_isMatrix(xo)) gk_stop("internal: the locations must be a double matrix");
  int n = Rf_nrows(xo), dim = Rf_ncols(xo), neighbors = gk_as_int(m);
  if (neighbors == NA_INTEGER || neighbors < 0) gk_stop("internal: bad number of neighbours");
  const char *names[] = {"nbr", "duplicates", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SEXP nbr = Rf_allocMatrix(INTSXP, n, neighbors);
  SET_VECTOR_ELT(out, 0, nbr);   // filled by the core, zeros included
  gp_neighbors_options opt = {gk_as_flag(gpu), gk_as_int(threads), gk_as_double(dense_pairs)};
  int duplicates = 0;
  gk_error err;
  gk_error_clear(&err);
  if (gp_neighbors(REAL(xo), n, dim, neighbors, &opt, INTEGER(nbr), &duplicates, &err)) {
    UNPROTECT(1);
    gk_raise(&err);
  }
  SET_VECTOR_ELT(out, 1, Rf_ScalarInteger(duplicates));
  UNPROTECT(1);
  gk_finish(&err);
  return out;
}
