/* Reading block-sparse ranges built by R (list(ranges_i, slices_i,
 * redranges_j, ...), integer vectors) into the core's struct; the arrays
 * stay owned by R. Only the first set is read (what a reduction uses). */
#ifndef GK_R_REDUCE_RANGES_H
#define GK_R_REDUCE_RANGES_H
#include "r_util.h"
#include "reduce/reduce.h"

void gk_reduce_ranges_from_r(SEXP ranges, gk_reduce_ranges *r);

#endif
