/* .Call glue for the device layer's block scheduler, so that its rules are
 * tested from R on every machine (the plan is pure host code). */
#include <stdlib.h>
#include "r_util.h"
#include "device/block_scheduler.h"

/* The plan as an integer matrix, one row per block in scheduling order:
 * first row, rows, first column, columns (1-based first indices); rows from
 * row_start (0-based) on; side > 0: a shared list's agreed side. */
SEXP gk_r_block_plan(SEXP n_rows, SEXP n_cols, SEXP lower, SEXP max_elements,
                     SEXP split_hint, SEXP min_side, SEXP row_start, SEXP side)
{
  gk_block_plan_config cfg = {(size_t) gk_as_double(n_rows), (size_t) gk_as_double(n_cols),
                              gk_as_flag(lower) ? GK_BLOCKS_LOWER : GK_BLOCKS_FULL,
                              (size_t) gk_as_double(max_elements),
                              (size_t) gk_as_double(split_hint), (size_t) gk_as_double(min_side),
                              (size_t) gk_as_double(row_start), (size_t) gk_as_double(side)};
  gk_block *blocks = NULL;
  size_t count = 0;
  gk_error err;
  gk_error_clear(&err);
  if (gk_block_plan(&cfg, &blocks, &count, &err)) gk_raise(&err);
  SEXP out = PROTECT(Rf_allocMatrix(INTSXP, (int) count, 4));
  int *m = INTEGER(out);
  for (size_t k = 0; k < count; k++) {
    m[k] = (int) blocks[k].row0 + 1;
    m[k + count] = (int) blocks[k].rows;
    m[k + 2 * count] = (int) blocks[k].col0 + 1;
    m[k + 3 * count] = (int) blocks[k].cols;
  }
  free(blocks);
  UNPROTECT(1);
  return out;
}

/* Takers of one shared list agreeing on its side in turn: taker k with its
 * own side own[k] and its budget max_elements[k] (elements of one block).
 * The sides they plan with (0: that taker takes none), then the blocks each
 * took when they take in turn, one at a time, from a list of `count`. */
SEXP gk_r_block_agree(SEXP own, SEXP max_elements, SEXP count)
{
  R_xlen_t n = Rf_xlength(own);
  if (TYPEOF(own) != REALSXP || TYPEOF(max_elements) != REALSXP || Rf_xlength(max_elements) != n)
    gk_stop("own and max_elements: numbers of one length");
  size_t blocks = (size_t) gk_as_double(count);
  gk_block_queue queue = {0, 0, 0};
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, (int) n, 2));
  double *side = REAL(out), *taken = side + n;
  for (R_xlen_t k = 0; k < n; k++) {
    side[k] = (double) gk_block_agree_side(&queue, (size_t) REAL(own)[k],
                                           (size_t) REAL(max_elements)[k]);
    taken[k] = 0;
  }
  for (int left = 1; left;) {
    left = 0;
    for (R_xlen_t k = 0; k < n; k++)
      if (side[k] > 0 && gk_block_take(&queue) < blocks) {
        taken[k]++;
        left = 1;
      }
  }
  UNPROTECT(1);
  return out;
}
