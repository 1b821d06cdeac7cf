#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "r_util.h"
#include "device/gk_hooks.h"

void gk_stop(const char *fmt, ...)
{
  char message[GK_MESSAGE_SIZE + 64];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  Rf_errorcall(R_NilValue, "%s", message);
}

/* The core saw (and so consumed) the user's interrupt: signal R's own
 * interrupt condition from R code (gk_signal_interrupt), so that
 * tryCatch(interrupt = ) sees it and try() does not swallow it. */
static void raise_interrupt(void)
{
  SEXP ns = PROTECT(R_FindNamespace(PROTECT(Rf_mkString("gpukernels"))));
  SEXP call = PROTECT(Rf_lang1(Rf_install("gk_signal_interrupt")));
  Rf_eval(call, ns);
  UNPROTECT(3);
  gk_stop("interrupted");   // not reached: the abort restart jumps to top level
}

void gk_raise(const gk_error *err)
{
  if (err->status == GK_ERR_INTERRUPTED) raise_interrupt();
  const char *prefix = "";
  if (err->status == GK_ERR_INTERNAL) prefix = "internal error in gpukernels (please report it): ";
  gk_stop("%s%s", prefix, err->message[0] ? err->message : "unknown failure");
}

void gk_finish(const gk_error *err)
{
  if (err->status) gk_raise(err);
  // An interrupt that came after the core's last check: R's own handling,
  // here rather than at some later point of the user's next call.
  R_CheckUserInterrupt();
}

static void check_interrupt(void *unused)
{
  (void) unused;
  R_CheckUserInterrupt();
}

/* R_CheckUserInterrupt longjmps; run it under R_ToplevelExec so the core sees
 * a return value instead and can clean up before the glue raises. */
static int r_interrupt_pending(void)
{
  return gk_r_progress_stop_requested() || R_ToplevelExec(check_interrupt, NULL) == FALSE;
}

/* Lines go to the progress sink (progressr) when R has installed one. */
static void r_progress(const char *line)
{
  if (gk_steps_hook_set()) gk_progress_steps((size_t) -1, (size_t) -1, line);
  else REprintf("%s\n", line);
}

void gk_install_r_hooks(void)
{
  gk_set_hooks(r_interrupt_pending, r_progress);
}

SEXP gk_extptr_new(const char *tag, R_CFinalizer_t finalizer)
{
  SEXP ptr = PROTECT(R_MakeExternalPtr(NULL, Rf_install(tag), R_NilValue));
  R_RegisterCFinalizerEx(ptr, finalizer, TRUE);
  UNPROTECT(1);
  return ptr;
}

void *gk_extptr_address(SEXP ptr, const char *tag, const char *what, const char *stale)
{
  if (TYPEOF(ptr) != EXTPTRSXP || R_ExternalPtrTag(ptr) != Rf_install(tag))
    gk_stop("this %s is not valid: its `ptr` does not hold a %s made by gpukernels", what, what);
  void *address = R_ExternalPtrAddr(ptr);
  if (!address) gk_stop("%s", stale);
  return address;
}

int gk_backend_is_gpu(SEXP backend)
{
  return strcmp(CHAR(STRING_ELT(backend, 0)), "gpu") == 0;
}

int gk_as_flag(SEXP x) { return Rf_asLogical(x) == TRUE; }
int gk_as_int(SEXP x) { return Rf_asInteger(x); }
double gk_as_double(SEXP x) { return Rf_asReal(x); }

SEXP gk_list_get(SEXP list, const char *name)
{
  SEXP names = Rf_getAttrib(list, R_NamesSymbol);
  if (TYPEOF(list) != VECSXP || TYPEOF(names) != STRSXP) return R_NilValue;
  for (R_xlen_t i = 0; i < Rf_xlength(list); i++)
    if (strcmp(CHAR(STRING_ELT(names, i)), name) == 0) return VECTOR_ELT(list, i);
  return R_NilValue;
}

static SEXP list_element(SEXP list, const char *name)
{
  SEXP value = gk_list_get(list, name);
  if (value == R_NilValue)
    gk_stop("internal error in gpukernels: kernel specification has no '%s'", name);
  return value;
}

gk_kernel gk_kernel_from_r(SEXP spec)
{
  return gk_kernel_make((gk_kernel_family) Rf_asInteger(list_element(spec, "family_code")),
                        Rf_asReal(list_element(spec, "variance")),
                        Rf_asReal(list_element(spec, "smoothness")));
}

void gk_kernel_range_from_r(SEXP spec, int dim, double *range_out)
{
  SEXP range = list_element(spec, "range");
  R_xlen_t len = Rf_xlength(range);
  if (len != 1 && len != dim)
    gk_stop("the kernel's range has %d values but the points have %d dimensions: "
             "give one range, or one per dimension", (int) len, dim);
  for (int k = 0; k < dim; k++) range_out[k] = REAL(range)[len == 1 ? 0 : k];
}

void gk_points_centre(const double *x, size_t m, const double *y, size_t n, int dim,
                      double *centre)
{
  for (int k = 0; k < dim; k++) {
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < m; i++) {
      double v = x[i + (size_t) k * m];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    for (size_t j = 0; y && j < n; j++) {
      double v = y[j + (size_t) k * n];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    // Halves first: lo + hi may overflow.
    centre[k] = m + (y ? n : 0) > 0 ? 0.5 * lo + 0.5 * hi : 0.0;
  }
}

void gk_scale_points(const double *x, size_t n, int dim, const double *centre,
                     const double *range, double *out)
{
  for (int k = 0; k < dim; k++) {
    double c = centre ? centre[k] : 0.0, r = range[k], *col = out + (size_t) k * n;
    const double *src = x + (size_t) k * n;
    for (size_t i = 0; i < n; i++) col[i] = (src[i] - c) / r;
    for (size_t i = 0; i < n; i++)
      if (!R_FINITE(col[i]))
        gk_stop("the points span more than 1e308 times the kernel's range in dimension %d "
                "(range %g): use a larger range, or rescale the coordinates", k + 1, r);
  }
}

/* The common all-finite case is one branch-free pass: x * 0 is 0 for finite x
 * and NaN otherwise, so the sum is NaN exactly when some element is not finite. */
int gk_all_finite(const double *v, R_xlen_t n)
{
  double poison[8] = {0, 0, 0, 0, 0, 0, 0, 0};   // independent chains run in parallel
  R_xlen_t q = 0;
  for (; q + 8 <= n; q += 8)
    for (int l = 0; l < 8; l++) poison[l] += v[q + l] * 0.0;
  for (; q < n; q++) poison[0] += v[q] * 0.0;
  double total = 0.0;
  for (int l = 0; l < 8; l++) total += poison[l];
  return total == 0.0;
}

/* Errors if a double vector holds NA, NaN or Inf; only then is the first bad
 * element looked for, to say which kind it is. */
SEXP gk_r_check_finite(SEXP x, SEXP arg)
{
  const double *v = REAL(x);
  R_xlen_t n = Rf_xlength(x);
  if (gk_all_finite(v, n)) return R_NilValue;
  for (R_xlen_t q = 0; q < n; q++) {
    if (ISNAN(v[q])) gk_stop("`%s` contains NA or NaN values", CHAR(STRING_ELT(arg, 0)));
    if (!R_FINITE(v[q])) gk_stop("`%s` contains infinite values", CHAR(STRING_ELT(arg, 0)));
  }
  return R_NilValue;
}
