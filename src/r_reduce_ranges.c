/* .Call glue for block-sparse ranges (src/reduce/reduce_ranges.c): building
 * KeOps' six arrays from kept cluster pairs, and reading them for a reduction. */
#include <stdlib.h>
#include "r_util.h"
#include "r_reduce_ranges.h"
#include "reduce/reduce.h"

static SEXP int_vector(const int *v, size_t count)
{
  SEXP out = Rf_allocVector(INTSXP, (R_xlen_t) count);
  for (size_t q = 0; q < count; q++) INTEGER(out)[q] = v[q];
  return out;
}

/* ranges_x, ranges_y: integer vectors of 0-based half-open pairs (start, end)
 * per cluster; pair_x, pair_y: 0-based kept cluster pairs. Returns the six
 * arrays as a named list of integer vectors (pairs flattened). */
SEXP gk_r_reduce_ranges_build(SEXP ranges_x, SEXP ranges_y, SEXP pair_x, SEXP pair_y)
{
  gk_reduce_ranges r;
  int *storage = NULL;
  gk_error err;
  gk_error_clear(&err);
  if (reduce_ranges_build(Rf_length(ranges_x) / 2, INTEGER(ranges_x), Rf_length(ranges_y) / 2,
                          INTEGER(ranges_y), (size_t) Rf_xlength(pair_x), INTEGER(pair_x),
                          INTEGER(pair_y), &r, &storage, &err))
    gk_raise(&err);
  size_t nred_j = r.count_i > 0 ? (size_t) r.slices_i[r.count_i - 1] : 0;
  size_t nred_i = r.count_j > 0 ? (size_t) r.slices_j[r.count_j - 1] : 0;
  const char *names[] = {"ranges_i", "slices_i", "redranges_j", "ranges_j", "slices_j",
                         "redranges_i", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SET_VECTOR_ELT(out, 0, int_vector(r.ranges_i, 2 * (size_t) r.count_i));
  SET_VECTOR_ELT(out, 1, int_vector(r.slices_i, (size_t) r.count_i));
  SET_VECTOR_ELT(out, 2, int_vector(r.redranges_j, 2 * nred_j));
  SET_VECTOR_ELT(out, 3, int_vector(r.ranges_j, 2 * (size_t) r.count_j));
  SET_VECTOR_ELT(out, 4, int_vector(r.slices_j, (size_t) r.count_j));
  SET_VECTOR_ELT(out, 5, int_vector(r.redranges_i, 2 * nred_i));
  free(storage);   // Rf_allocVector may not return on failure: a leak then, never a crash
  UNPROTECT(1);
  return out;
}

void gk_reduce_ranges_from_r(SEXP ranges, gk_reduce_ranges *r)
{
  // A gk_ranges edited by hand: its arrays must still be integer vectors (the
  // values themselves are checked against the points by reduce_ranges_check).
  if (TYPEOF(ranges) != VECSXP || Rf_length(ranges) < 3)
    gk_stop("`ranges` is not a valid gk_ranges object (edited by hand?): make it with "
            "ranges_from_mask()");
  for (int q = 0; q < 3; q++)
    if (TYPEOF(VECTOR_ELT(ranges, q)) != INTSXP || Rf_length(VECTOR_ELT(ranges, q)) % (q == 1 ? 1 : 2))
      gk_stop("`ranges` is not a valid gk_ranges object (edited by hand?): its arrays must be "
              "integer vectors of (start, end) pairs; make it with ranges_from_mask()");
  SEXP ranges_i = VECTOR_ELT(ranges, 0), slices_i = VECTOR_ELT(ranges, 1);
  r->count_i = Rf_length(slices_i);
  r->ranges_i = INTEGER(ranges_i);
  r->slices_i = INTEGER(slices_i);
  r->redranges_j = INTEGER(VECTOR_ELT(ranges, 2));
  r->count_j = 0;
  r->ranges_j = r->slices_j = r->redranges_i = NULL;
}

/* The kept (i, j) pairs of one set of ranges, as a double. */
SEXP gk_r_reduce_ranges_pairs(SEXP ranges)
{
  gk_reduce_ranges r;
  gk_reduce_ranges_from_r(ranges, &r);
  return Rf_ScalarReal(reduce_ranges_pairs(&r));
}
