/* .Call glue for users' formulas (gk_formula() in R, reduce.h's gk_formula):
 * the prepared formula R hands to the reductions, read into the engines'
 * struct. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "r_util.h"
#include "r_reduce.h"
#include "device/gk_jit.h"

int gk_r_is_formula(SEXP kernel)
{
  return Rf_inherits(kernel, "gk_formula_native");
}

/* `native` is what gk_formula_native() (R/formula_compile.R) returns: the
 * functor's name and program for the GPU, the compiled function for the CPU
 * (a NativeSymbol, or NULL), the parameters, the dimension it was made for,
 * and the scale of a folded formula (the reductions' engines only: `folded`
 * says the caller takes it). The strings and parameters stay owned by
 * `native`, which the caller keeps alive over the call. */
void gk_r_formula_read(SEXP native, int dim, int folded, gk_formula *f)
{
  SEXP functor = gk_list_get(native, "functor"), source = gk_list_get(native, "source");
  SEXP cpu = gk_list_get(native, "cpu"), params = gk_list_get(native, "params");
  SEXP made_for = gk_list_get(native, "dim");
  memset(f, 0, sizeof *f);
  if (!Rf_isString(functor) || Rf_length(functor) != 1 || TYPEOF(params) != REALSXP ||
      Rf_length(params) > GK_FORMULA_MAX_PARAMS)
    gk_stop("internal: a prepared formula must have a functor name and at most %d parameters",
            GK_FORMULA_MAX_PARAMS);
  if (gk_as_int(made_for) != dim)
    gk_stop("internal: the formula was prepared for %d coordinates, the points have %d",
            gk_as_int(made_for), dim);
  f->functor = CHAR(STRING_ELT(functor, 0));
  f->source = Rf_isString(source) && Rf_length(source) == 1 ? CHAR(STRING_ELT(source, 0)) : NULL;
  if (TYPEOF(cpu) == EXTPTRSXP) f->eval = (gk_formula_cpu) R_ExternalPtrAddrFn(cpu);
  f->nparams = Rf_length(params);
  f->params = REAL(params);
  SEXP scale = gk_list_get(native, "scale");
  if (!Rf_isNull(scale)) {
    if (!folded) gk_stop("internal: a folded formula where the points are not scaled");
    f->scale = gk_as_double(scale);
    if (!(f->scale > 0) || !isfinite(f->scale)) gk_stop("internal: a folded formula's scale");
  }
}

void gk_r_formula_from(SEXP native, int dim, gk_formula *f)
{
  gk_r_formula_read(native, dim, 0, f);
}

void gk_r_formula_spec(SEXP native, int dim, gk_formula *f, gk_reduce_spec *rs, double *range)
{
  gk_r_formula_read(native, dim, 1, f);
  rs->formula = f;
  rs->kernel = gk_kernel_make(GK_KERNEL_LINEAR, 1.0, NAN);
  for (int d = 0; d < dim; d++) range[d] = f->scale > 0 ? 1.0 / f->scale : 1.0;
}

/* 16 hex digits naming a formula's body (the C function and GPU functor). */
SEXP gk_r_formula_hash(SEXP text)
{
  if (!Rf_isString(text) || Rf_length(text) != 1) gk_stop("internal: hash one string");
  const char *s = CHAR(STRING_ELT(text, 0));
  char out[17];
  snprintf(out, sizeof out, "%016llx",
           (unsigned long long) gk_jit_hash(GK_JIT_HASH_START, s, strlen(s)));
  return Rf_mkString(out);
}

/* Compiles the GPU kernels of one reduction with a prepared formula, and its
 * matrix kernel, for compute capability `arch` without a GPU
 * (reduce_cuda_warmup's check). */
SEXP gk_r_formula_gpu_check(SEXP native, SEXP dim, SEXP arch, SEXP reduction, SEXP k, SEXP single)
{
  gk_formula f;
  gk_r_formula_read(native, gk_as_int(dim), 1, &f);   // compiled only: folded or not
  gk_reduce_spec rs;
  memset(&rs, 0, sizeof rs);
  rs.kernel = gk_kernel_make(GK_KERNEL_LINEAR, 1.0, NAN);
  rs.reduction = (gk_reduction) gk_as_int(reduction);
  rs.k = gk_as_int(k);
  rs.single = gk_as_flag(single);
  rs.formula = &f;
  int dims = gk_as_int(dim), cols = 1, ranged = 0, rows = 1;
  gk_error err;
  gk_error_clear(&err);
  if (reduce_cuda_warmup(1, &rs, &dims, &cols, &ranged, &rows, 1, gk_as_int(arch), &err))
    gk_raise(&err);
  // and its matrix kernel (the dense GP, gk_formula.h)
  char name[200];
  snprintf(name, sizeof name, "gkformula::formula_matrix<%s>", f.functor);
  const char *names[1] = {name};
  if (f.source && gk_jit_compile_check(f.source, 1, names, gk_as_int(arch),
                                       "a formula's covariance matrix", &err))
    gk_raise(&err);
  return R_NilValue;
}
