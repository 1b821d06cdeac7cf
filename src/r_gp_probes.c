/* .Call glue for the GP engine's probes (src/gp/): the Rademacher probe
 * vectors, the column sums of their products, and a step of the host's block
 * CG that solves for them. */
#include "r_util.h"
#include "gp/gp.h"
#include <R_ext/Random.h>

/* An n x k matrix of Rademacher signs (+1 / -1 with probability 1/2 each)
 * from R's random number stream: 16 signs from each uniform draw (R's
 * generators give at least 25 random bits per draw), so the probes of a large
 * problem (5e7 signs at n = 1e6) cost milliseconds instead of seconds of
 * sample(). Deterministic given the seed, like any draw from R's stream. */
SEXP gk_r_gp_rademacher(SEXP rows, SEXP cols, SEXP threads)
{
  double n = gk_as_double(rows), k = gk_as_double(cols);
  if (!(n >= 0 && k >= 0) || n * k > R_XLEN_T_MAX) gk_stop("internal: bad probe dimensions");
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, (int) n, (int) k));
  R_xlen_t total = Rf_xlength(out), words = (total + 15) / 16;
  unsigned short *bits = (unsigned short *) R_alloc((size_t) words + 1, sizeof(unsigned short));
  GetRNGstate();
  for (R_xlen_t w = 0; w < words; w++) bits[w] = (unsigned short) (unif_rand() * 65536.0);
  PutRNGstate();
  gp_signs_from_bits(bits, (size_t) total, gk_as_int(threads), REAL(out));
  UNPROTECT(1);
  return out;
}

/* colSums(a[, ca] * b[, cb]) for double matrices with the same rows (ca, cb:
 * 1-based columns of equal length), without the n x k product. */
SEXP gk_r_gp_col_dots(SEXP a, SEXP ca, SEXP b, SEXP cb, SEXP threads)
{
  if (!Rf_isReal(a) || !Rf_isReal(b) || !Rf_isMatrix(a) || !Rf_isMatrix(b) ||
      Rf_nrows(a) != Rf_nrows(b) || !Rf_isInteger(ca) || !Rf_isInteger(cb) ||
      Rf_length(ca) != Rf_length(cb))
    gk_stop("internal: bad column products");
  int k = Rf_length(ca);
  int *c0a = (int *) R_alloc((size_t) k + 1, sizeof(int)), *c0b = (int *) R_alloc((size_t) k + 1, sizeof(int));
  for (int c = 0; c < k; c++) {
    c0a[c] = INTEGER(ca)[c] - 1;
    c0b[c] = INTEGER(cb)[c] - 1;
    if (c0a[c] < 0 || c0a[c] >= Rf_ncols(a) || c0b[c] < 0 || c0b[c] >= Rf_ncols(b))
      gk_stop("internal: column out of range");
  }
  SEXP out = PROTECT(Rf_allocVector(REALSXP, k));
  gp_col_dots((size_t) Rf_nrows(a), k, REAL(a), c0a, REAL(b), c0b, gk_as_int(threads), REAL(out));
  UNPROTECT(1);
  return out;
}

/* One step of block CG (gp.h). x, r, p (n x m) and rr (m) are modified in
 * place: gp_block_cg() allocated them for this purpose and never shares them. */
SEXP gk_r_gp_cg_step(SEXP x, SEXP r, SEXP p, SEXP q, SEXP active, SEXP rr, SEXP threads)
{
  if (!Rf_isReal(x) || !Rf_isReal(r) || !Rf_isReal(p) || !Rf_isReal(q) || !Rf_isReal(rr) ||
      !Rf_isInteger(active) || !Rf_isMatrix(x) || !Rf_isMatrix(q))
    gk_stop("internal: bad conjugate-gradient state");
  int n = Rf_nrows(x), m = Rf_ncols(x), k = Rf_length(active);
  if (Rf_xlength(r) != Rf_xlength(x) || Rf_xlength(p) != Rf_xlength(x) || Rf_length(rr) != m ||
      Rf_nrows(q) != n || Rf_ncols(q) != k)
    gk_stop("internal: conjugate-gradient blocks do not match");
  const int *cols = INTEGER(active);
  for (int c = 0; c < k; c++)
    if (cols[c] < 0 || cols[c] >= m) gk_stop("internal: conjugate-gradient column out of range");
  SEXP a = PROTECT(Rf_allocVector(REALSXP, k));
  SEXP b = PROTECT(Rf_allocVector(REALSXP, k));
  gp_cg_step((size_t) n, k, cols, REAL(q), REAL(x), REAL(r), REAL(p), REAL(rr), REAL(a),
             REAL(b), gk_as_int(threads));
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(out, 0, a);
  SET_VECTOR_ELT(out, 1, b);
  UNPROTECT(3);
  return out;
}
