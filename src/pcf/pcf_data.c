/* Checks and packing of flattened PCF sets, shared by both engines. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include "pcf/pcf.h"
#include "pcf/pcf_pack.h"
#include "device/gk_omp.h"

pcf_op pcf_op_for_p(double p)
{
  pcf_op op;
  op.p = p;
  if (isinf(p)) op.kind = PCF_OP_LINF;
  else if (p == 1) op.kind = PCF_OP_L1;
  else if (p == 2) op.kind = PCF_OP_L2;
  else op.kind = PCF_OP_LP;
  return op;
}

pcf_op pcf_op_inner(void)
{
  pcf_op op;
  op.kind = PCF_OP_INNER;
  op.p = 1;
  return op;
}

/* Function f (0-based) of the set, as the user wrote it: X[[f + 1]]. With
 * err NULL only the verdict (no message): pcf_function_bad. */
#define CHECK_FAIL(...) return err ? gk_fail(err, GK_ERR_INPUT, __VA_ARGS__) : GK_ERR_INPUT
static gk_status check_one(const pcf_set *s, size_t f, const char *arg, int single,
                           gk_error *err)
{
  size_t first = s->offset[f], n = s->offset[f + 1] - first;
  const double *t = s->t + first, *v = s->v + first;
  unsigned long fn = (unsigned long) f + 1;
  if (n == 0)
    CHECK_FAIL("`%s[[%lu]]` has no breakpoints (a PCF needs at least one row)", arg, fn);
  for (size_t k = 0; k < n; k++) {
    unsigned long row = (unsigned long) k + 1;
    if (isnan(t[k]) || isnan(v[k]))
      CHECK_FAIL("`%s[[%lu]]` has NA or NaN in row %lu", arg, fn, row);
    if (!isfinite(t[k]) || !isfinite(v[k]))
      CHECK_FAIL("`%s[[%lu]]` has an infinite %s in row %lu (breakpoints and values must be "
                 "finite)", arg, fn, isfinite(t[k]) ? "value" : "breakpoint", row);
    if (single && (fabs(t[k]) > FLT_MAX || fabs(v[k]) > FLT_MAX))
      CHECK_FAIL("`%s[[%lu]]` has values too large for single precision in row %lu", arg, fn,
                 row);
    if (k > 0 && !(t[k] > t[k - 1]))
      CHECK_FAIL("`%s[[%lu]]`: breakpoints must be strictly increasing, but t = %g in row %lu "
                 "follows t = %g", arg, fn, t[k], row, t[k - 1]);
  }
  if (t[0] < 0)
    CHECK_FAIL("`%s[[%lu]]` starts at t = %g: the first breakpoint must be >= 0 (a PCF is 0 on "
               "[0, t_1))", arg, fn, t[0]);
  return GK_OK;
}
#undef CHECK_FAIL

int pcf_function_bad(const pcf_set *s, size_t f, int single)
{
  return check_one(s, f, "", single, NULL) != GK_OK;
}

/* The message is made for the first bad function only. */
gk_status pcf_validate_known(const pcf_set *s, const char *arg, int single, size_t bad,
                             gk_error *err)
{
  if (s->n == 0) return gk_fail(err, GK_ERR_INPUT, "`%s` is empty: give at least one PCF", arg);
  return bad < s->n ? check_one(s, bad, arg, single, err) : GK_OK;
}

static double last_value(const pcf_set *s, size_t f)
{
  return s->v[s->offset[f + 1] - 1];
}

/* Every function of s must end at `target`; reference names where it came from. */
static gk_status check_last(const pcf_set *s, const char *arg, double target,
                            const char *reference, const char *why, gk_error *err)
{
  for (size_t f = 0; f < s->n; f++) {
    double last = last_value(s, f);
    if (last != target)
      return gk_fail(err, GK_ERR_INPUT, "`%s[[%lu]]` ends at the value %g but %s ends at %g: %s",
                     arg, (unsigned long) f + 1, last, reference, target, why);
  }
  return GK_OK;
}

gk_status pcf_check_tails(const pcf_op *op, const pcf_set *x, const char *arg_x,
                          const pcf_set *y, const char *arg_y, gk_error *err)
{
  char reference[64];
  if (op->kind == PCF_OP_LINF) return GK_OK;   /* the maximum is finite anyway */
  if (op->kind == PCF_OP_INNER) {
    const char *why = "the L2 inner product needs functions that end at 0 (else it is infinite)";
    if (check_last(x, arg_x, 0.0, "it", why, err)) return err->status;
    return y == x ? GK_OK : check_last(y, arg_y, 0.0, "it", why, err);
  }
  const char *why = "distances are finite only between functions with the same last value";
  snprintf(reference, sizeof reference, "`%s[[1]]`", arg_x);
  double target = last_value(x, 0);
  if (check_last(x, arg_x, target, reference, why, err)) return err->status;
  return y == x ? GK_OK : check_last(y, arg_y, target, reference, why, err);
}

size_t pcf_packed_size(const pcf_set *s, size_t first, size_t count)
{
  return s->offset[first + count] - s->offset[first] + count;
}

void pcf_pack(const pcf_set *s, size_t first, const int *order, size_t count, int single,
              void *out, size_t *offsets, int threads)
{
  offsets[0] = 0;
  for (size_t k = 0; k < count; k++) {
    size_t f = first + (order ? (size_t) order[k] : k);
    offsets[k + 1] = offsets[k] + s->offset[f + 1] - s->offset[f] + 1;
  }
  /* Large sets on several threads: each function's place is known. */
  int team = offsets[count] < ((size_t) 1 << 18) ? 1 : gk_omp_threads(threads);
  (void) team;
#ifdef _OPENMP
#pragma omp parallel for num_threads(team) schedule(dynamic, 64)
#endif
  for (size_t k = 0; k < count; k++) {
    size_t f = first + (order ? (size_t) order[k] : k), at = offsets[k];
    const double *t = s->t + s->offset[f], *v = s->v + s->offset[f];
    size_t n = s->offset[f + 1] - s->offset[f];
    for (size_t i = 0; i <= n; i++) {
      double value = i == 0 ? 0.0 : v[i - 1], end = i == n ? INFINITY : t[i];
      if (single) {
        pcf_interval_f *fl = (pcf_interval_f *) out + at + i;
        fl->v = (float) value;
        fl->t = (float) end;
      } else {
        pcf_interval_d *d = (pcf_interval_d *) out + at + i;
        d->v = value;
        d->t = end;
      }
    }
  }
}

size_t pcf_float_collapse_row(const pcf_set *s, size_t f)
{
  const double *t = s->t + s->offset[f];
  size_t n = s->offset[f + 1] - s->offset[f];
  for (size_t k = 0; k < n; k++) {
    float prev = k == 0 ? 0.0f : (float) t[k - 1];
    if ((k > 0 || t[0] > 0) && !((float) t[k] > prev)) return k + 1;
  }
  return 0;
}
