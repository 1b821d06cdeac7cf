#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "r_util.h"
#include "device/gk_hooks.h"
#include "device/gk_omp.h"

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

int gk_extptr_is(SEXP ptr, const char *tag)
{
  return TYPEOF(ptr) == EXTPTRSXP && R_ExternalPtrTag(ptr) == Rf_install(tag);
}

void *gk_extptr_address(SEXP ptr, const char *tag, const char *what, const char *stale)
{
  if (!gk_extptr_is(ptr, tag))
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

void gk_spec_fields(SEXP spec, const char *what, int n, const char *const *names,
                    SEXP *symbols, SEXP *fields)
{
  if (TYPEOF(spec) == ENVSXP) {
    if (!symbols) gk_stop("internal error in gpukernels: %s must be a named list", what);
    if (!symbols[n - 1])   // symbols live as long as R: installed once
      for (int j = 0; j < n; j++) symbols[j] = Rf_install(names[j]);
    for (int j = 0; j < n; j++) {
      SEXP v = Rf_findVarInFrame(spec, symbols[j]);
      if (v == R_UnboundValue || v == R_MissingArg)
        gk_stop("internal error in gpukernels: %s has no '%s'", what, names[j]);
      // An argument not used yet is a promise; the value it gives is kept by
      // the promise, itself held by the frame.
      if (TYPEOF(v) == PROMSXP) v = Rf_eval(v, spec);
      fields[j] = v;
    }
    return;
  }
  SEXP have = Rf_getAttrib(spec, R_NamesSymbol);
  if (TYPEOF(spec) != VECSXP || TYPEOF(have) != STRSXP)
    gk_stop("internal error in gpukernels: %s must be a named list", what);
  for (int j = 0; j < n; j++) fields[j] = NULL;
  R_xlen_t len = Rf_xlength(spec);
  for (R_xlen_t i = 0; i < len; i++) {
    const char *name = CHAR(STRING_ELT(have, i));
    for (int j = 0; j < n; j++)
      if (!fields[j] && strcmp(name, names[j]) == 0) {
        fields[j] = VECTOR_ELT(spec, i);
        break;
      }
  }
  for (int j = 0; j < n; j++)
    if (!fields[j]) gk_stop("internal error in gpukernels: %s has no '%s'", what, names[j]);
}

static SEXP list_element(SEXP list, const char *name)
{
  SEXP value = gk_list_get(list, name);
  if (value == R_NilValue)
    gk_stop("internal error in gpukernels: kernel specification has no '%s'", name);
  return value;
}

/* One number of a kernel specification, checked (the R side, gk_validate_kernel,
 * has already said which field is wrong for every exported entry; this keeps
 * internal callers from reading a character or NULL field as a number). */
static double kernel_number(SEXP spec, const char *name)
{
  SEXP value = list_element(spec, name);
  if (!(Rf_isReal(value) || Rf_isInteger(value) || Rf_isLogical(value)) ||
      Rf_xlength(value) != 1)
    gk_stop("`kernel` is not a valid gk_kernel (edited by hand?): its `%s` must be one number; "
            "make it with gk_kernel()", name);
  return Rf_asReal(value);
}

/* gk_validate_kernel()'s fast path: TRUE when spec is exactly what gk_kernel()
 * makes (integer family_code with its name, double range, variance and
 * smoothness, all valid), in about a microsecond; FALSE sends R to its full
 * check, which names what is wrong (or converts integer fields). */
SEXP gk_r_kernel_ok(SEXP spec)
{
  if (TYPEOF(spec) != VECSXP) return Rf_ScalarLogical(FALSE);
  SEXP code = gk_list_get(spec, "family_code"), name = gk_list_get(spec, "name"),
       range = gk_list_get(spec, "range"), variance = gk_list_get(spec, "variance"),
       smoothness = gk_list_get(spec, "smoothness");
  if (TYPEOF(code) != INTSXP || Rf_xlength(code) != 1 || TYPEOF(name) != STRSXP ||
      Rf_xlength(name) != 1 || TYPEOF(range) != REALSXP || Rf_xlength(range) < 1 ||
      TYPEOF(variance) != REALSXP || Rf_xlength(variance) != 1 ||
      TYPEOF(smoothness) != REALSXP || Rf_xlength(smoothness) != 1)
    return Rf_ScalarLogical(FALSE);
  int c = INTEGER(code)[0];
  int base = c >= GK_KERNEL_DLOGRANGE ? c - GK_KERNEL_DLOGRANGE : c;
  if (!gk_kernel_code_valid(c) || STRING_ELT(name, 0) == NA_STRING ||
      strcmp(CHAR(STRING_ELT(name, 0)), gk_kernel_family_name(base)) != 0)
    return Rf_ScalarLogical(FALSE);
  for (R_xlen_t q = 0; q < Rf_xlength(range); q++) {
    double r = REAL(range)[q];
    if (!(r >= DBL_MIN) || !R_FINITE(r)) return Rf_ScalarLogical(FALSE);
  }
  double v = REAL(variance)[0], nu = REAL(smoothness)[0];
  if (!(v > 0) || !R_FINITE(v)) return Rf_ScalarLogical(FALSE);
  if (base == GK_KERNEL_MATERN ? !(nu > 0) || !R_FINITE(nu) : !ISNA(nu))
    return Rf_ScalarLogical(FALSE);
  SEXP radius = gk_list_get(spec, "radius");
  if (!gk_kernel_on_sphere(c) && radius != R_NilValue) return Rf_ScalarLogical(FALSE);
  if (gk_kernel_on_sphere(c)) {
    if (TYPEOF(radius) != REALSXP || Rf_xlength(radius) != 1 || Rf_xlength(range) != 1 ||
        !(REAL(radius)[0] > 0) || !R_FINITE(REAL(radius)[0]) ||
        !R_FINITE(REAL(radius)[0] / REAL(range)[0]))
      return Rf_ScalarLogical(FALSE);
  }
  return Rf_ScalarLogical(TRUE);
}

gk_kernel gk_kernel_from_r(SEXP spec)
{
  if (TYPEOF(spec) != VECSXP)
    gk_stop("`kernel` is not a valid gk_kernel: it must be a list made by gk_kernel()");
  double code = kernel_number(spec, "family_code");
  double variance = kernel_number(spec, "variance"), smoothness = kernel_number(spec, "smoothness");
  if (!(code >= 0 && code <= 2 * GK_KERNEL_DLOGRANGE) || code != floor(code) ||
      !gk_kernel_code_valid((int) code))
    gk_stop("`kernel` is not a valid gk_kernel (edited by hand?): its `family_code` must be "
            "one of 0 to %d; make it with gk_kernel()", (int) GK_KERNEL_LAST_FAMILY);
  if (!(variance > 0) || !R_FINITE(variance))
    gk_stop("`kernel` is not a valid gk_kernel (edited by hand?): its `variance` must be one "
            "positive finite number; make it with gk_kernel()");
  int family = (int) code;
  if (family == GK_KERNEL_MATERN || family == GK_KERNEL_MATERN_DLOGRANGE) {
    if (!(smoothness > 0) || !R_FINITE(smoothness))
      gk_stop("`kernel` is not a valid gk_kernel (edited by hand?): its `smoothness` must be "
              "one positive finite number; make it with gk_kernel()");
  }
  gk_kernel k = gk_kernel_make((gk_kernel_family) family, variance, smoothness);
  if (gk_kernel_on_sphere(family)) {
    // the sphere's radius in units of the range: the engines divide the
    // points by the range, so the sphere they see has this radius
    SEXP range = list_element(spec, "range");
    double radius = kernel_number(spec, "radius");
    double rho = Rf_isReal(range) && Rf_xlength(range) == 1 ? radius / REAL(range)[0] : NAN;
    if (!(radius > 0) || !(rho > 0) || !R_FINITE(rho))
      gk_stop("`kernel` is not a valid gk_kernel (edited by hand?): a great-circle kernel needs "
              "one positive `radius` and one `range`; make it with gk_kernel()");
    k.sphere_radius = rho;
  }
  return k;
}

void gk_kernel_range_from_r(SEXP spec, int dim, double *range_out)
{
  SEXP range = list_element(spec, "range");
  R_xlen_t len = Rf_xlength(range);
  if (!Rf_isReal(range))
    gk_stop("`kernel` is not a valid gk_kernel (edited by hand?): its `range` must be "
            "numeric; make it with gk_kernel()");
  for (R_xlen_t q = 0; q < len; q++)
    if (!(REAL(range)[q] >= DBL_MIN) || !R_FINITE(REAL(range)[q]))
      gk_stop("`kernel` is not a valid gk_kernel (edited by hand?): its `range` must be "
              "positive and finite; make it with gk_kernel()");
  if (len != 1 && len != dim)
    gk_stop("the kernel's range has %d values but the points have %d dimensions: "
             "give one range, or one per dimension", (int) len, dim);
  for (int k = 0; k < dim; k++) range_out[k] = REAL(range)[len == 1 ? 0 : k];
}

/* The k-th smallest of v[0 .. n-1] (reordered), by quickselect. */
static double select_kth(double *v, size_t n, size_t k)
{
  size_t lo = 0, hi = n - 1;
  while (lo < hi) {
    double pivot = v[lo + (hi - lo) / 2];
    size_t i = lo, j = hi;
    while (i <= j) {
      while (v[i] < pivot) i++;
      while (v[j] > pivot) j--;
      if (i <= j) {
        double t = v[i];
        v[i] = v[j];
        v[j] = t;
        i++;
        if (j == 0) break;
        j--;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return v[k];
  }
  return v[k];
}

void gk_points_centre(const double *x, size_t m, const double *y, size_t n, int dim,
                      const double *range, double *centre)
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
    // Points spanning far more than the range (a few points 1e300 away from
    // the rest): the middle of the box is far from most points, and x - centre
    // would round away their differences (points 0.1 apart near 0 become one
    // point once 5e299 is subtracted). The median keeps the bulk's digits.
    size_t total = m + (y ? n : 0);
    if (range && total > 2 && (0.5 * hi - 0.5 * lo) / range[k] > 0x1p20) {
      double *v = (double *) R_alloc(total, sizeof(double));
      memcpy(v, x + (size_t) k * m, m * sizeof(double));
      if (y) memcpy(v + m, y + (size_t) k * n, n * sizeof(double));
      double med = select_kth(v, total, total / 2);
      if (R_FINITE(hi - med) && R_FINITE(med - lo)) centre[k] = med;
    }
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

double *gk_scaled_points(SEXP locs, SEXP more, SEXP spec, double **more_scaled)
{
  int n = Rf_nrows(locs), dim = Rf_ncols(locs);
  if (!Rf_isReal(locs) || dim < 1 || dim > GK_SCALED_MAX_DIM) gk_stop("internal: bad locations");
  double range[GK_SCALED_MAX_DIM], centre[GK_SCALED_MAX_DIM];
  gk_kernel_range_from_r(spec, dim, range);
  int m = Rf_isNull(more) ? 0 : Rf_nrows(more);
  if (m && (!Rf_isReal(more) || Rf_ncols(more) != dim)) gk_stop("internal: bad new locations");
  gk_points_centre(REAL(locs), n, m ? REAL(more) : NULL, m, dim, range, centre);
  double *xs = (double *) R_alloc((size_t) n * dim + 1, sizeof(double));
  gk_scale_points(REAL(locs), n, dim, centre, range, xs);
  if (more_scaled) {
    *more_scaled = (double *) R_alloc((size_t) m * dim + 1, sizeof(double));
    gk_scale_points(REAL(more), m, dim, centre, range, *more_scaled);
  }
  return xs;
}

/* The common all-finite case is one branch-free pass: x * 0 is 0 for finite x
 * and NaN otherwise, so the sum is NaN exactly when some element is not finite. */
static int all_finite_piece(const double *v, R_xlen_t n)
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

/* Large vectors in pieces on several threads: every call checks its points
 * before the engine starts, so the pass adds to each call's time, and it is
 * a read that several cores finish sooner than one. */
int gk_all_finite(const double *v, R_xlen_t n)
{
  const int threads = gk_omp_pass_threads((size_t) n);
  if (threads == 1) return all_finite_piece(v, n);
  const R_xlen_t piece = (R_xlen_t) GK_OMP_PASS_PIECE, pieces = (n + piece - 1) / piece;
  int bad = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : bad)
#endif
  for (R_xlen_t p = 0; p < pieces; p++)
    bad |= !all_finite_piece(v + p * piece, n - p * piece < piece ? n - p * piece : piece);
  return !bad;
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
