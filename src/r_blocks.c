/* .Call glue for the device layer's block scheduler, so that its rules are
 * tested from R on every machine (the plan is pure host code). */
#include <stdlib.h>
#include "r_util.h"
#include "device/block_scheduler.h"

/* The plan as an integer matrix, one row per block in scheduling order:
 * first row, rows, first column, columns (1-based first indices); rows from
 * row_start (0-based) on. */
SEXP gk_r_block_plan(SEXP n_rows, SEXP n_cols, SEXP lower, SEXP max_elements,
                     SEXP split_hint, SEXP min_side, SEXP row_start)
{
  gk_block_plan_config cfg = {(size_t) gk_as_double(n_rows), (size_t) gk_as_double(n_cols),
                              gk_as_flag(lower) ? GK_BLOCKS_LOWER : GK_BLOCKS_FULL,
                              (size_t) gk_as_double(max_elements),
                              (size_t) gk_as_double(split_hint), (size_t) gk_as_double(min_side),
                              (size_t) gk_as_double(row_start)};
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
