/* .Call glue for the kernel reductions (src/reduce/) and for device matrices
 * (src/device/device_matrix.h). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "r_util.h"
#include "reduce/reduce.h"
#include "device/device_matrix.h"
#include "device/gk_memory.h"
#include "r_reduce_ranges.h"
#include "r_reduce.h"

/* A device matrix and the bytes it registered (device/gk_memory.h); the
 * matrix comes first, so the address is also a gk_device_matrix *. */
typedef struct {
  gk_device_matrix dm;
  gk_memory_hold mem;
} device_matrix_handle;

static void device_matrix_finalize(SEXP ptr)
{
  device_matrix_handle *h = (device_matrix_handle *) R_ExternalPtrAddr(ptr);
  if (!h) return;
  gk_memory_unregister(&h->mem);
  device_matrix_free(&h->dm);
  free(h);
  R_ClearExternalPtr(ptr);
}

/* Frees the GPU copy now (gk_free()); the R object uploads it again when used. */
SEXP gk_r_device_matrix_free(SEXP ptr)
{
  if (gk_extptr_is(ptr, GK_TAG_DEVICE_MATRIX)) device_matrix_finalize(ptr);
  return R_NilValue;
}

/* Uploads a double matrix (centred where that keeps digits, when `centre`);
 * returns an external pointer (freed by its finalizer). */
SEXP gk_r_device_matrix(SEXP x, SEXP single, SEXP centre)
{
  if (TYPEOF(x) != REALSXP || !Rf_isMatrix(x)) gk_stop("x must be a double matrix");
  gk_error err;
  gk_error_clear(&err);
  // The external pointer exists (with its finalizer) before anything native
  // does, so that no R allocation failure can leak what is built.
  // Collect unreachable device matrices first if this one would pass the
  // memory policy (device/gk_memory.h).
  int device = gk_device_current();
  gk_r_make_room(device, (size_t) Rf_nrows(x) * Rf_ncols(x) * (gk_as_flag(single) ? 4 : 8), 1);
  SEXP ptr = PROTECT(gk_extptr_new(GK_TAG_DEVICE_MATRIX, device_matrix_finalize));
  device_matrix_handle *h = (device_matrix_handle *) calloc(1, sizeof *h);
  if (!h) {
    UNPROTECT(1);
    gk_stop("out of host memory for a device matrix");
  }
  if (device_matrix_upload(&h->dm, REAL(x), (size_t) Rf_nrows(x), Rf_ncols(x),
                           gk_as_flag(single), gk_as_flag(centre), &err)) {
    free(h);
    UNPROTECT(1);
    gk_raise(&err);
  }
  gk_memory_register(&h->mem, h->dm.res.device, 0, h->dm.buf.bytes);
  R_SetExternalPtrAddr(ptr, h);
  UNPROTECT(1);
  return ptr;
}

/* The centre a device matrix made from the double matrix x has
 * (device_matrix.h): R rounds saved single matrices as the GPU stores them. */
SEXP gk_r_device_matrix_centre(SEXP x)
{
  if (TYPEOF(x) != REALSXP || !Rf_isMatrix(x)) gk_stop("x must be a double matrix");
  int cols = Rf_ncols(x);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, cols));
  device_matrix_centre(REAL(x), (size_t) Rf_nrows(x), cols, REAL(out));
  UNPROTECT(1);
  return out;
}

static gk_device_matrix *device_matrix_of(SEXP ptr)
{
  return (gk_device_matrix *) gk_extptr_address(
      ptr, GK_TAG_DEVICE_MATRIX, "gk_device_matrix",
      "this device matrix is no longer valid (it was freed, or saved and reloaded)");
}

SEXP gk_r_device_matrix_download(SEXP ptr)
{
  gk_device_matrix *dm = device_matrix_of(ptr);
  gk_error err;
  gk_error_clear(&err);
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, (int) dm->rows, dm->cols));
  device_matrix_download(dm, REAL(out), &err);
  UNPROTECT(1);
  if (err.status) gk_raise(&err);
  return out;
}

/* A host matrix or vector (REALSXP) or a device matrix (external pointer) as
 * an operand; `min_value` gets its smallest entry when wanted (NULL: not). */
static gk_reduce_operand operand_of(SEXP a, double *min_value)
{
  gk_reduce_operand op = {NULL, NULL, 0, -1, 0, 0, NULL};
  if (TYPEOF(a) == EXTPTRSXP) {
    gk_device_matrix *dm = device_matrix_of(a);
    op.device = dm->buf.ptr;
    op.device_single = dm->single;
    op.device_centre = dm->centre;
    op.gpu = dm->res.device;
    op.rows = dm->rows;
    op.cols = dm->cols;
    if (min_value) *min_value = dm->min_value;
  } else {
    if (TYPEOF(a) != REALSXP) gk_stop("reduction operands must be double matrices or device matrices");
    op.host = REAL(a);
    op.rows = Rf_isMatrix(a) ? (size_t) Rf_nrows(a) : (size_t) Rf_xlength(a);
    op.cols = Rf_isMatrix(a) ? Rf_ncols(a) : 1;
    if (min_value) {
      double lo = R_PosInf;
      const double *v = REAL(a);
      for (R_xlen_t q = 0; q < Rf_xlength(a); q++)
        if (v[q] < lo) lo = v[q];
      *min_value = lo;
    }
  }
  return op;
}

gk_reduce_operand gk_r_reduce_operand(SEXP a)
{
  return operand_of(a, NULL);
}

const double *gk_r_rhs_block(SEXP v, int n, int *cols)
{
  if (TYPEOF(v) == EXTPTRSXP) {
    gk_device_matrix *dm = device_matrix_of(v);
    if (dm->single || dm->centre || dm->rows != (size_t) n)
      gk_stop("internal: a device block must be %d rows of uncentred doubles", n);
    *cols = dm->cols;
    return (const double *) dm->buf.ptr;
  }
  if (TYPEOF(v) != REALSXP || !Rf_isMatrix(v) || Rf_nrows(v) != n)
    gk_stop("internal: a block must be a double matrix with %d rows", n);
  *cols = Rf_ncols(v);
  return REAL(v);
}

/* Runs the reduction rs over operands already checked. Returns list(values,
 * index): M x value-columns doubles and M x index-columns integers (1-based,
 * NA for an empty reduction), vectors when vector_out and there is one
 * column. bo is NULL for reductions without weights; devices: 0-based GPUs to
 * split the rows over, none for the selected GPU. */
static SEXP reduce_run_spec(const gk_reduce_spec *rs, const gk_reduce_operand *xo,
                            const gk_reduce_operand *yo, const gk_reduce_operand *bo, int on_gpu,
                            int threads, int vector_out, SEXP devices)
{
  int m = (int) xo->rows;
  int vcols = reduce_value_columns(rs->reduction, bo ? bo->cols : 1, rs->k);
  int icols = reduce_index_columns(rs->reduction, rs->k);
  SEXP values = PROTECT(vector_out && vcols == 1 ? Rf_allocVector(REALSXP, m)
                                                  : Rf_allocMatrix(REALSXP, m, vcols));
  SEXP index = PROTECT(vector_out && icols == 1 ? Rf_allocVector(INTSXP, m)
                                                 : Rf_allocMatrix(INTSXP, m, icols));
  if (!on_gpu && (xo->device || yo->device || (bo && bo->device)))
    gk_stop("device matrices can only be used with backend = \"gpu\"");
  gk_error err;
  gk_error_clear(&err);
  if (on_gpu && Rf_length(devices) > 1 && rs->ranges)
    gk_stop("block-sparse `ranges` run on one GPU: give at most one device");
  if (on_gpu && Rf_length(devices) > 0 && !rs->ranges)
    reduce_cuda_devices(rs, xo, yo, bo, REAL(values), INTEGER(index), INTEGER(devices),
                        Rf_length(devices), &err);
  else if (on_gpu)
    reduce_cuda(rs, xo, yo, bo, REAL(values), INTEGER(index), &err);
  else
    reduce_cpu(rs, xo, yo, bo, REAL(values), INTEGER(index), threads, &err);
  if (err.status) {
    UNPROTECT(2);
    gk_raise(&err);
  }
  // The cores write 0 for "no index" (an empty reduction): R's NA.
  int *ix = INTEGER(index);
  for (R_xlen_t q = 0; q < Rf_xlength(index); q++)
    if (ix[q] == 0) ix[q] = NA_INTEGER;
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(out, 0, values);
  SET_VECTOR_ELT(out, 1, index);
  UNPROTECT(3);
  gk_finish(&err);
  return out;
}

/* Runs a reduction whose arguments are checked (reduce_run_spec), with the
 * kernel `spec` from R. The C cores check `ranges` (NULL or the list of
 * r_reduce_ranges.h) against the sizes; b is NULL for reductions without
 * weights. */
static SEXP reduce_run(SEXP x, SEXP y, SEXP b, SEXP spec, gk_reduction reduction, int k,
                       int single, gk_reduce_method method, int on_gpu, int threads,
                       int vector_out, SEXP devices, SEXP ranges, int symmetric)
{
  gk_reduce_operand xo = operand_of(x, NULL), yo = operand_of(y, NULL);
  gk_reduce_operand bo = {NULL, NULL, 0, -1, 0, 0, NULL};
  int has_b = !Rf_isNull(b);
  double b_min = 0.0;
  if (has_b) bo = operand_of(b, reduction == GK_REDUCE_LOGSUMEXP ? &b_min : NULL);
  // log of a negative weighted sum has no value: refuse it here too, for
  // device-matrix weights (whose entries R cannot see) as for host ones.
  if (has_b && b_min < 0) gk_stop("logsumexp weights `b` must be non-negative");
  if (xo.cols != yo.cols) gk_stop("`x` and `y` must have the same number of columns");
  if (has_b && bo.rows != yo.rows) gk_stop("`b` must have one row per point reduced over");
  gk_reduce_spec rs;
  memset(&rs, 0, sizeof rs);   // fields not set below (device_out, root_scale) are off
  double *range = (double *) R_alloc(xo.cols > 0 ? xo.cols : 1, sizeof(double));
  gk_formula formula;
  if (gk_r_is_formula(spec)) {   // as given, or scaled when folded (reduce.h)
    gk_r_formula_spec(spec, xo.cols, &formula, &rs, range);
  } else {
    rs.kernel = gk_kernel_from_r(spec);
    gk_kernel_range_from_r(spec, xo.cols, range);
  }
  rs.range = range;
  rs.reduction = reduction;
  rs.k = k;
  rs.single = single;
  rs.method = method;
  rs.symmetric = symmetric;
  gk_reduce_ranges blocks;
  rs.ranges = NULL;
  if (!Rf_isNull(ranges)) {
    gk_reduce_ranges_from_r(ranges, &blocks);
    rs.ranges = &blocks;
  }
  return reduce_run_spec(&rs, &xo, &yo, has_b ? &bo : NULL, on_gpu, threads, vector_out, devices);
}

/* The code of `arg` among the named integer codes `choices` (as
 * gk_match_choice() in R: one exact name, or the whole default vector for the
 * first), or -1. */
static int choice_code(SEXP arg, SEXP choices)
{
  SEXP names = Rf_getAttrib(choices, R_NamesSymbol);
  R_xlen_t n = Rf_xlength(names);
  if (TYPEOF(arg) != STRSXP) return -1;
  if (Rf_xlength(arg) == 1) {
    for (R_xlen_t i = 0; i < n; i++)
      if (STRING_ELT(arg, 0) != NA_STRING &&
          strcmp(CHAR(STRING_ELT(arg, 0)), CHAR(STRING_ELT(names, i))) == 0)
        return INTEGER(choices)[i];
    return -1;
  }
  if (Rf_xlength(arg) != n || ATTRIB(arg) != R_NilValue) return -1;
  for (R_xlen_t i = 0; i < n; i++)
    if (STRING_ELT(arg, i) == NA_STRING ||
        strcmp(CHAR(STRING_ELT(arg, i)), CHAR(STRING_ELT(names, i))) != 0)
      return -1;
  return INTEGER(choices)[0];
}

/* A plain (classless) finite number that is a whole number >= 1 (-1 otherwise). */
static double whole_at_least_one(SEXP a)
{
  if (OBJECT(a) || Rf_xlength(a) != 1) return -1;
  double v = TYPEOF(a) == INTSXP ? (INTEGER(a)[0] == NA_INTEGER ? -1 : INTEGER(a)[0])
           : TYPEOF(a) == REALSXP ? REAL(a)[0] : -1;
  return R_FINITE(v) && v >= 1 && v == floor(v) ? v : -1;
}

/* A classless double matrix, or vector (one column), of finite values with
 * `cols` columns (any number >= 1 when cols is 0): what kernel_reduce() takes
 * as it is. Its rows go to *rows. */
static int plain_doubles(SEXP a, int cols, R_xlen_t *rows)
{
  if (TYPEOF(a) != REALSXP || OBJECT(a)) return 0;
  int is_matrix = Rf_isMatrix(a);
  if (!is_matrix && Rf_getAttrib(a, R_DimSymbol) != R_NilValue) return 0;
  if (!is_matrix && Rf_xlength(a) > INT_MAX) return 0;   // no R matrix is that long
  int ncol = is_matrix ? Rf_ncols(a) : 1;
  if (ncol < 1 || (cols > 0 && ncol != cols)) return 0;
  *rows = is_matrix ? Rf_nrows(a) : Rf_xlength(a);
  return gk_all_finite(REAL(a), Rf_xlength(a));
}

/* "single" or "double" (as gk_check_precision() takes it): *single is set. */
static int plain_precision(SEXP precision, int *single)
{
  if (TYPEOF(precision) != STRSXP || Rf_xlength(precision) != 1 ||
      STRING_ELT(precision, 0) == NA_STRING)
    return 0;
  const char *digits = CHAR(STRING_ELT(precision, 0));
  *single = strcmp(digits, "single") == 0;
  return *single || strcmp(digits, "double") == 0;
}

/* The fields of a reduction spec (gk_spec_fields): by name, instead of a
 * dozen positional .Call arguments, so that adding one cannot shift the
 * others. The general path gets the named list of gk_reduce_spec() (R/reduce.R);
 * the plain paths, whose calls cost microseconds, get kernel_reduce()'s and
 * knn()'s frames, which hold their first PLAIN_FIELDS under the same names. */
enum {
  SPEC_X, SPEC_Y, SPEC_B, SPEC_KERNEL, SPEC_REDUCTION, SPEC_K, SPEC_AXIS, SPEC_PRECISION,
  SPEC_SCHEME, SPEC_BACKEND, SPEC_THREADS, PLAIN_FIELDS,
  SPEC_VECTOR_OUT = PLAIN_FIELDS, SPEC_DEVICES, SPEC_RANGES, SPEC_SYMMETRIC, SPEC_FIELDS
};
static const char *const spec_names[SPEC_FIELDS] = {
  "x", "y", "b", "kernel", "reduction", "k", "axis", "precision", "scheme", "backend",
  "threads", "vector_out", "devices", "ranges", "symmetric"
};

static void spec_parse(SEXP spec, int fields, SEXP *f)
{
  static SEXP symbols[PLAIN_FIELDS];   // only frames, with the plain fields, need them
  gk_spec_fields(spec, "a reduction spec", fields, spec_names,
                 fields == PLAIN_FIELDS ? symbols : NULL, f);
}

/* kernel_reduce()'s general path, once R has checked every argument: `spec`
 * holds the operands as they are reduced (R has swapped x and y for axis 2;
 * x, y and b may be device matrices), the choices by name, and `devices`
 * (0-based GPUs), `ranges`, `symmetric` and `vector_out`. `reductions`,
 * `methods`: R's named codes (gk_reductions, gk_reduce_methods). */
SEXP gk_r_reduce(SEXP spec, SEXP reductions, SEXP methods)
{
  SEXP f[SPEC_FIELDS];
  spec_parse(spec, SPEC_FIELDS, f);
  int code = choice_code(f[SPEC_REDUCTION], reductions);
  int scheme = choice_code(f[SPEC_SCHEME], methods), single;
  if (code < 0 || scheme < 0 || !plain_precision(f[SPEC_PRECISION], &single))
    gk_stop("internal error in gpukernels: the reduction spec has an unchecked reduction, "
            "scheme or precision");
  if (gk_as_int(f[SPEC_AXIS]) != 1)
    gk_stop("internal error in gpukernels: the general path takes x and y already swapped");
  return reduce_run(f[SPEC_X], f[SPEC_Y], f[SPEC_B], f[SPEC_KERNEL], (gk_reduction) code,
                    gk_as_int(f[SPEC_K]), single, (gk_reduce_method) scheme,
                    gk_backend_is_gpu(f[SPEC_BACKEND]), gk_as_int(f[SPEC_THREADS]),
                    gk_as_flag(f[SPEC_VECTOR_OUT]), f[SPEC_DEVICES], f[SPEC_RANGES],
                    gk_as_flag(f[SPEC_SYMMETRIC]));
}

/* kernel_reduce()'s common call in one step, for the microseconds a small
 * call costs in R's checks: R double matrices or vectors, dense, in this
 * process, with `spec` from as_gk_kernel() and `backend` from gk_backend().
 * It accepts exactly what the general path accepts without converting
 * (classless double points and weights, all finite; choices and numbers as
 * the R checks want them) and returns what kernel_reduce() returns. Anything
 * else gives NULL, not an error: the general path then converts it or stops
 * with the message that names what is wrong, so the messages live in R only.
 * `spec` holds the user's arguments as given, with `kernel` from
 * as_gk_kernel(), `backend` from gk_backend() and `threads`: kernel_reduce()'s
 * frame, or a list from gk_reduce_spec() (its last fields are not read). */
SEXP gk_r_reduce_plain(SEXP spec, SEXP reductions, SEXP methods)
{
  SEXP f[PLAIN_FIELDS];
  spec_parse(spec, PLAIN_FIELDS, f);
  SEXP x = f[SPEC_X], y = f[SPEC_Y], b = f[SPEC_B], kernel = f[SPEC_KERNEL];
  SEXP reduction = f[SPEC_REDUCTION], k = f[SPEC_K], axis = f[SPEC_AXIS];
  SEXP precision = f[SPEC_PRECISION], method = f[SPEC_SCHEME], backend = f[SPEC_BACKEND];
  SEXP threads = f[SPEC_THREADS];
  int code = choice_code(reduction, reductions), scheme = choice_code(method, methods);
  if (code < 0 || scheme < 0) return R_NilValue;
  int single;
  if (!plain_precision(precision, &single)) return R_NilValue;
  double ax = whole_at_least_one(axis);
  if (ax != 1 && ax != 2) return R_NilValue;
  R_xlen_t m, n;
  if (!plain_doubles(x, 0, &m)) return R_NilValue;
  int dim = Rf_isMatrix(x) ? Rf_ncols(x) : 1;
  if (y == x) n = m;
  else if (!plain_doubles(y, dim, &n)) return R_NilValue;
  if (ax == 2) {   // the transposed reduction: over the rows of x for each row of y
    SEXP swap = x;
    x = y;
    y = swap;
    n = m;
  }
  // A kernel of the vocabulary, or a formula R prepared for this dimension
  // (gk_formula_plain()).
  if (gk_r_is_formula(kernel)) {
    if (gk_as_int(gk_list_get(kernel, "dim")) != dim) return R_NilValue;
  } else {
    if (!Rf_inherits(kernel, "gk_kernel")) return R_NilValue;
    SEXP range = gk_list_get(kernel, "range");
    if (TYPEOF(range) != REALSXP || (Rf_xlength(range) != 1 && Rf_xlength(range) != dim))
      return R_NilValue;
  }

  int weighted = code == GK_REDUCE_SUM || code == GK_REDUCE_LOGSUMEXP ||
                 code == GK_REDUCE_SOFTMAX_SUM;
  R_xlen_t b_rows;
  if (!weighted && !Rf_isNull(b)) return R_NilValue;
  if (weighted && !Rf_isNull(b)) {
    if (!plain_doubles(b, 0, &b_rows) || b_rows != n) return R_NilValue;
    if (code == GK_REDUCE_LOGSUMEXP) {
      const double *v = REAL(b);
      for (R_xlen_t q = 0; q < Rf_xlength(b); q++)
        if (v[q] < 0) return R_NilValue;
    }
  }
  double kk = 1;
  if (code == GK_REDUCE_KMIN) {
    kk = whole_at_least_one(k);
    if (kk < 1 || kk > n) return R_NilValue;
  }
  // One-column results come back as plain vectors, as from the general path.
  int vector_out = code != GK_REDUCE_KMIN && !Rf_isMatrix(b);
  int nprot = 0;
  if (weighted && Rf_isNull(b)) {   // no weights: all ones
    b = PROTECT(Rf_allocVector(REALSXP, n));
    nprot++;
    for (R_xlen_t q = 0; q < n; q++) REAL(b)[q] = 1.0;
  }
  SEXP res = PROTECT(reduce_run(x, y, b, kernel, (gk_reduction) code, (int) kk, single,
                                (gk_reduce_method) scheme, gk_backend_is_gpu(backend),
                                gk_as_int(threads), vector_out, R_NilValue, R_NilValue, 0));
  nprot++;
  SEXP out = VECTOR_ELT(res, 0);
  if (code == GK_REDUCE_ARGMIN || code == GK_REDUCE_ARGMAX) {
    out = VECTOR_ELT(res, 1);
  } else if (code == GK_REDUCE_KMIN) {
    const char *names[] = {"values", "index", ""};
    out = PROTECT(Rf_mkNamed(VECSXP, names));
    nprot++;
    SET_VECTOR_ELT(out, 0, VECTOR_ELT(res, 0));
    SET_VECTOR_ELT(out, 1, VECTOR_ELT(res, 1));
  }
  UNPROTECT(nprot);
  return out;
}

/* knn()'s common call in one step, as gk_r_reduce_plain for kernel_reduce():
 * classless double matrices of finite values (y may be x), one GPU or the
 * CPU, in this process. The points' scale (reduce_knn_scale) becomes the
 * kernel's range, and the engine returns the distances themselves
 * (root_scale), so no pass over the points or the results is left to R.
 * In double precision the rows whose small distances underflowed are searched
 * again here (knn_refine() in R). Returns list(index, distance), or NULL for
 * anything else (the general path then converts it or stops with the message). `spec`: knn()'s frame, with
 * x, y, k, precision, scheme, `backend` from gk_backend() and `threads`. */
SEXP gk_r_knn_plain(SEXP spec, SEXP methods)
{
  static const char *const fields[] = {"x", "y", "k", "precision", "scheme", "backend",
                                       "threads"};
  static SEXP symbols[7];
  SEXP f[7];
  gk_spec_fields(spec, "a knn spec", 7, fields, symbols, f);
  SEXP x = f[0], y = f[1], k = f[2], precision = f[3], method = f[4], backend = f[5];
  SEXP threads = f[6];
  int scheme = choice_code(method, methods), single;
  if (scheme < 0 || !plain_precision(precision, &single)) return R_NilValue;
  R_xlen_t m, n;
  if (!Rf_isMatrix(x) || !plain_doubles(x, 0, &m)) return R_NilValue;
  int dim = Rf_ncols(x);
  if (y == x) n = m;
  else if (!Rf_isMatrix(y) || !plain_doubles(y, dim, &n)) return R_NilValue;
  double kk = whole_at_least_one(k);
  if (kk < 1 || kk > n) return R_NilValue;

  double scale = reduce_knn_scale(REAL(x), (size_t) m, REAL(y), (size_t) n, dim);
  double *range = (double *) R_alloc((size_t) dim, sizeof(double));
  for (int d = 0; d < dim; d++) range[d] = scale;
  gk_reduce_spec rs;
  memset(&rs, 0, sizeof rs);
  rs.kernel = gk_kernel_make(GK_KERNEL_SQUARED_DISTANCE, 1.0, NAN);
  rs.range = range;
  rs.reduction = GK_REDUCE_KMIN;
  rs.k = (int) kk;
  rs.single = single;
  rs.method = (gk_reduce_method) scheme;
  rs.root_scale = scale;
  gk_reduce_operand xo = operand_of(x, NULL), yo = operand_of(y, NULL);
  SEXP res = PROTECT(reduce_run_spec(&rs, &xo, &yo, NULL, gk_backend_is_gpu(backend),
                                     gk_as_int(threads), 0, R_NilValue));
  // knn_refine()'s exact re-search of underflowed rows (double precision),
  // in place: the results are this call's own (a copy of them cost more than
  // the search at 1e5 x 10).
  if (!single) {
    gk_error err;
    gk_error_clear(&err);
    int changed = 0;
    if (reduce_knn_refine(REAL(x), (size_t) m, REAL(y), (size_t) n, dim, (size_t) kk, scale, NA_INTEGER,
                          INTEGER(VECTOR_ELT(res, 1)), REAL(VECTOR_ELT(res, 0)), &changed, &err)) {
      UNPROTECT(1);
      gk_raise(&err);
    }
  }
  const char *names[] = {"index", "distance", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SET_VECTOR_ELT(out, 0, VECTOR_ELT(res, 1));
  SET_VECTOR_ELT(out, 1, VECTOR_ELT(res, 0));
  UNPROTECT(2);
  return out;
}

/* knn's distances (reduce_distances_from_squares) in one pass instead of
 * pmax, sqrt and a product, written over `squares`: knn() passes the squared
 * distances that kernel_reduce() has just made for it and nothing else holds.
 * A fresh m x k array would cost as much as the GPU's search at 1e5 x 10 (its
 * pages are touched for the first time). */
SEXP gk_r_knn_distances(SEXP squares, SEXP scale)
{
  if (!Rf_isReal(squares)) gk_stop("internal: squared distances must be double");
  reduce_distances_from_squares(REAL(squares), (size_t) Rf_xlength(squares), Rf_asReal(scale),
                                REAL(squares));
  return squares;
}

/* knn's coordinate scale (reduce_knn_scale) of two checked double matrices,
 * read in place. */
SEXP gk_r_knn_scale(SEXP x, SEXP y)
{
  if (!Rf_isReal(x) || !Rf_isReal(y) || !Rf_isMatrix(x) || !Rf_isMatrix(y))
    gk_stop("internal: knn points must be double matrices");
  if (Rf_ncols(x) != Rf_ncols(y)) return Rf_ScalarReal(1.0);
  return Rf_ScalarReal(reduce_knn_scale(REAL(x), (size_t) Rf_nrows(x), REAL(y),
                                        (size_t) Rf_nrows(y), Rf_ncols(x)));
}

/* gk_warmup(): cases is a list of lists (kernel, reduction, k, single,
 * symmetric, dim, cols, ranged, rows), checked by the R caller; check_arch
 * > 0 only compiles them for that architecture (no GPU needed). */
SEXP gk_r_reduce_warmup(SEXP cases, SEXP threads, SEXP check_arch)
{
  if (!Rf_isNewList(cases)) gk_stop("`cases` must be a list");
  int n = Rf_length(cases);
  gk_reduce_spec *specs = (gk_reduce_spec *) R_alloc(n > 0 ? n : 1, sizeof(gk_reduce_spec));
  int *ints = (int *) R_alloc(4 * (size_t) (n > 0 ? n : 1), sizeof(int));
  int *dims = ints, *cols = ints + n, *ranged = ints + 2 * n, *rows = ints + 3 * n;
  for (int i = 0; i < n; i++) {
    SEXP c = VECTOR_ELT(cases, i);
    memset(&specs[i], 0, sizeof specs[i]);
    specs[i].kernel = gk_kernel_from_r(gk_list_get(c, "kernel"));
    specs[i].reduction = (gk_reduction) gk_as_int(gk_list_get(c, "reduction"));
    specs[i].k = gk_as_int(gk_list_get(c, "k"));
    specs[i].single = gk_as_flag(gk_list_get(c, "single"));
    specs[i].symmetric = gk_as_flag(gk_list_get(c, "symmetric"));
    dims[i] = gk_as_int(gk_list_get(c, "dim"));
    cols[i] = gk_as_int(gk_list_get(c, "cols"));
    ranged[i] = gk_as_flag(gk_list_get(c, "ranged"));
    rows[i] = gk_as_int(gk_list_get(c, "rows"));
  }
  gk_error err;
  gk_error_clear(&err);
  if (reduce_cuda_warmup(n, specs, dims, cols, ranged, rows, gk_as_int(threads), gk_as_int(check_arch),
                         &err))
    gk_raise(&err);
  return R_NilValue;
}

/* knn's exact re-search of the rows whose small distances underflowed
 * (reduce_knn_refine): NULL when no row needed it, else list(index, distance). */
SEXP gk_r_knn_refine(SEXP x, SEXP y, SEXP index, SEXP distance)
{
  if (!Rf_isReal(x) || !Rf_isReal(y) || !Rf_isMatrix(x) || !Rf_isMatrix(y) ||
      !Rf_isInteger(index) || !Rf_isReal(distance) || Rf_ncols(x) != Rf_ncols(y) ||
      Rf_xlength(index) != Rf_xlength(distance))
    gk_stop("internal: knn_refine takes double matrices and the knn result");
  size_t m = (size_t) Rf_nrows(x), n = (size_t) Rf_nrows(y);
  if (m == 0 || n == 0 || Rf_xlength(index) == 0) return R_NilValue;
  SEXP new_index = PROTECT(Rf_duplicate(index)), new_distance = PROTECT(Rf_duplicate(distance));
  int changed = 0;
  gk_error err;
  gk_error_clear(&err);
  gk_status st = reduce_knn_refine(REAL(x), m, REAL(y), n, Rf_ncols(x), (size_t) Rf_xlength(index) / m,
                                   0.0, NA_INTEGER, INTEGER(new_index), REAL(new_distance), &changed,
                                   &err);
  if (st) {
    UNPROTECT(2);
    gk_raise(&err);
  }
  if (!changed) {
    UNPROTECT(2);
    return R_NilValue;
  }
  const char *names[] = {"index", "distance", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SET_VECTOR_ELT(out, 0, new_index);
  SET_VECTOR_ELT(out, 1, new_distance);
  UNPROTECT(3);
  return out;
}
