/* What other glue needs of an h2matrix held by R: its structure and, for a
 * GPU matrix, its device data (the GP solver multiplies vectors that stay on
 * the GPU). */
#ifndef GK_R_H2_H
#define GK_R_H2_H
#include "r_util.h"
#include "h2/h2.h"

/* The tree of the h2matrix's external pointer and its GPU data (NULL for a
 * CPU matrix); an R error for a pointer that is no longer valid. */
void gk_r_h2_parts(SEXP ptr, const h2_tree **tree, h2_gpu **gpu);

#endif
