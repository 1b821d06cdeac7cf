/* What other glue needs of the reductions' glue: an R matrix or device
 * matrix as a reduction operand (the GP solver reduces over device points). */
#ifndef GK_R_REDUCE_H
#define GK_R_REDUCE_H
#include "r_util.h"
#include "reduce/reduce.h"

/* A host double matrix (read in place) or a device matrix's external pointer
 * as an operand; an R error for anything else. */
gk_reduce_operand gk_r_reduce_operand(SEXP a);

#endif
