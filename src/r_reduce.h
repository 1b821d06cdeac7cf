/* What other glue needs of the reductions' glue: an R matrix or device
 * matrix as a reduction operand (the GP solver reduces over device points). */
#ifndef GK_R_REDUCE_H
#define GK_R_REDUCE_H
#include "r_util.h"
#include "reduce/reduce.h"

/* A host double matrix (read in place) or a device matrix's external pointer
 * as an operand; an R error for anything else. */
gk_reduce_operand gk_r_reduce_operand(SEXP a);

/* A block of right-hand sides with n rows for a GPU product or solver: an R
 * double matrix (host memory) or a device matrix stored in double without a
 * centre (GPU memory: the callers copy with cudaMemcpyDefault, so a block
 * kept on the GPU, such as the GP probes, is not uploaded again). Sets
 * *cols; an internal R error for anything else. */
const double *gk_r_rhs_block(SEXP v, int n, int *cols);

/* A prepared formula (r_formula.c): whether `kernel` is one, and the
 * engines' struct read from it for points of `dim` coordinates (_read with
 * folded = 1: the caller scales the points of a folded formula). */
int gk_r_is_formula(SEXP kernel);
void gk_r_formula_from(SEXP native, int dim, gk_formula *f);
void gk_r_formula_read(SEXP native, int dim, int folded, gk_formula *f);
/* A reduction's kernel from a prepared formula: f read (folded allowed) and
 * set in rs, the kernel the linear family, range (dim values) 1 or 1 / the
 * folded scale. */
void gk_r_formula_spec(SEXP native, int dim, gk_formula *f, gk_reduce_spec *rs, double *range);

#endif
