/* The integer codes of the C engines (and of a PCF file target's pages made
 * first), named, and the constants R needs (the device memory budget's share
 * of free memory): R makes its tables
 * (gk_reductions, gk_reduce_methods, gk_kernel_families, ...) from
 * gk_r_codes() when the package loads, so that each is written once, in C. */
#include "r_util.h"
#include "reduce/reduce.h"
#include "device/block_writer.h"
#include "device/gk_device.h"
#include "r_pcf.h"

typedef struct {
  const char *name;
  int code;
} named_code;

static const named_code reductions[] = {
  {"sum", GK_REDUCE_SUM},         {"min", GK_REDUCE_MIN},
  {"max", GK_REDUCE_MAX},         {"argmin", GK_REDUCE_ARGMIN},
  {"argmax", GK_REDUCE_ARGMAX},   {"kmin", GK_REDUCE_KMIN},
  {"logsumexp", GK_REDUCE_LOGSUMEXP}, {"softmax_sum", GK_REDUCE_SOFTMAX_SUM}};

static const named_code reduce_methods[] = {
  {"auto", GK_REDUCE_AUTO}, {"1d", GK_REDUCE_1D}, {"2d", GK_REDUCE_2D}};

static const named_code write_kinds[] = {
  {"dense", GK_WRITE_DENSE}, {"dist", GK_WRITE_DIST}, {"symmetric", GK_WRITE_SYMMETRIC}};

static const named_code file_pages[] = {
  {"none", GK_FILE_PAGES_NONE}, {"written", GK_FILE_PAGES_WRITTEN}, {"share", GK_FILE_PAGES_SHARE}};

#define COUNT(a) ((int) (sizeof(a) / sizeof((a)[0])))

static SEXP named_ints(const named_code *codes, int n)
{
  SEXP out = PROTECT(Rf_allocVector(INTSXP, n)), names = PROTECT(Rf_allocVector(STRSXP, n));
  for (int i = 0; i < n; i++) {
    INTEGER(out)[i] = codes[i].code;
    SET_STRING_ELT(names, i, Rf_mkChar(codes[i].name));
  }
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

/* The base kernel families (gk_kernel_family_name()), or with `offset` their
 * range derivatives (GK_KERNEL_DLOGRANGE + f, for the families that have one). */
static SEXP kernel_families(int offset)
{
  named_code codes[GK_KERNEL_LAST_FAMILY + 1];
  int n = 0;
  for (int f = 0; f <= GK_KERNEL_LAST_FAMILY; f++) {
    if (offset && !gk_kernel_has_dlogrange(f)) continue;
    codes[n].name = gk_kernel_family_name(f);
    codes[n++].code = offset + f;
  }
  return named_ints(codes, n);
}

SEXP gk_r_codes(void)
{
  const char *names[] = {"reductions", "reduce_methods", "kernel_families",
                         "kernel_dlogrange_families", "write_kinds", "memory_budget_fraction",
                         "file_pages"};
  const int n = COUNT(names);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n)), nm = PROTECT(Rf_allocVector(STRSXP, n));
  SET_VECTOR_ELT(out, 0, named_ints(reductions, COUNT(reductions)));
  SET_VECTOR_ELT(out, 1, named_ints(reduce_methods, COUNT(reduce_methods)));
  SET_VECTOR_ELT(out, 2, kernel_families(0));
  SET_VECTOR_ELT(out, 3, kernel_families(GK_KERNEL_DLOGRANGE));
  SET_VECTOR_ELT(out, 4, named_ints(write_kinds, COUNT(write_kinds)));
  SET_VECTOR_ELT(out, 5, Rf_ScalarReal(GK_MEMORY_BUDGET_FRACTION));
  SET_VECTOR_ELT(out, 6, named_ints(file_pages, COUNT(file_pages)));
  for (int i = 0; i < n; i++) SET_STRING_ELT(nm, i, Rf_mkChar(names[i]));
  Rf_setAttrib(out, R_NamesSymbol, nm);
  UNPROTECT(2);
  return out;
}
