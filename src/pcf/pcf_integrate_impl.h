/* One interval type of pcf_integrate.h: included twice, with PCF_INTERVAL and
 * PCF_NAME defined for double and for float intervals. Not a header of its own. */

/* The walk of a pair (f, g) over the union of both functions' breakpoints,
 * written once for pcf_pair and the scaled sums: each step is an interval
 * [pos, t) on which f = a.v and g = b.v. Each function advances when its
 * interval ends first (both on a shared breakpoint); the comparisons feed the
 * pointer increments directly, which keeps the loop's dependency chain short.
 * The GPU kernels take the same steps with a read-ahead and one row walked
 * against several columns at once (walk_merged, pcf_cuda.cu), which this form
 * cannot express. */
typedef struct {
  const PCF_INTERVAL *f, *g;
  PCF_INTERVAL a, b;   /* the current intervals; the last ones once the walk ends */
  double pos;
} PCF_NAME(pcf_walk);

PCF_HD void PCF_NAME(pcf_walk_start)(PCF_NAME(pcf_walk) *w, const PCF_INTERVAL *f,
                                     const PCF_INTERVAL *g)
{
  w->f = f;
  w->g = g;
  w->a = *f;
  w->b = *g;
  w->pos = 0;
}

/* The next interval's length and values, then advances; 0 at the end (both
 * functions in their last interval, which ends at inf). */
PCF_HD int PCF_NAME(pcf_walk_step)(PCF_NAME(pcf_walk) *w, double *dt, double *a, double *b)
{
  int next_a = w->a.t <= w->b.t, next_b = w->b.t <= w->a.t;
  double t = next_a ? w->a.t : w->b.t;
  if (t == (double) INFINITY) return 0;
  *dt = t - w->pos;
  *a = w->a.v;
  *b = w->b.v;
  w->pos = t;
  w->f += next_a;
  w->g += next_b;
  w->a = *w->f;
  w->b = *w->g;
  return 1;
}

/* (int |f - g|^p)^(1/p) without overflow or underflow: the largest term
 * T* = dt* d*^p (found on a first walk) is factored out, and the sum of the
 * terms divided by it, each in [0, 1] and one equal to 1, is formed on a
 * second walk from log ratios, which keeps every term's relative error
 * within a few ulps. Result: d* dt*^(1/p) (sum)^(1/p). */
PCF_HD double PCF_NAME(pcf_pair_scaled)(const PCF_INTERVAL *f, const PCF_INTERVAL *g, double p)
{
  double best = -INFINITY, best_d = 0, best_dt = 0, sum = 0;
  for (int pass = 0; pass < 2; pass++) {
    PCF_NAME(pcf_walk) w;
    double dt, a, b;
    PCF_NAME(pcf_walk_start)(&w, f, g);
    while (PCF_NAME(pcf_walk_step)(&w, &dt, &a, &b)) {
      double d = fabs(a - b);
      if (dt > 0 && d > 0) {
        if (pass == 0) {
          double l = log(dt) + p * log(d);
          if (l > best) {
            best = l;
            best_d = d;
            best_dt = dt;
          }
        } else {
          sum += exp(pcf_log_ratio(dt, best_dt) + p * pcf_log_ratio(d, best_d));
        }
      }
    }
    if (best_d == 0) return 0;   /* equal functions */
  }
  return best_d * pow(best_dt, 1 / p) * pow(sum, 1 / p);
}

/* The result from the accumulated value; a and b are the last values, f and
 * g the pair's first intervals (for the scaled walk). */
PCF_HD double PCF_NAME(pcf_finish)(int op, double acc, double a, double b, double p,
                                   const PCF_INTERVAL *f, const PCF_INTERVAL *g)
{
  switch (op) {
  case PCF_OP_L2:
  case PCF_OP_LP:
    if (!(acc <= DBL_MAX) || acc < PCF_SUM_TINY) return PCF_NAME(pcf_pair_scaled)(f, g, p);
    return op == PCF_OP_L2 ? sqrt(acc) : pow(acc, 1 / p);
  case PCF_OP_LINF: return fabs(a - b) > acc ? fabs(a - b) : acc;
  default: return acc;
  }
}

/* The op over the pair (f, g), given as packed intervals. */
PCF_HD double PCF_NAME(pcf_pair)(int op, const PCF_INTERVAL *f, const PCF_INTERVAL *g, double p)
{
  PCF_NAME(pcf_walk) w;
  double acc = 0, dt, a, b;
  PCF_NAME(pcf_walk_start)(&w, f, g);
  while (PCF_NAME(pcf_walk_step)(&w, &dt, &a, &b)) acc = pcf_accumulate(op, acc, dt, a, b, p);
  return PCF_NAME(pcf_finish)(op, acc, w.a.v, w.b.v, p, f, g);
}

#undef PCF_INTERVAL
#undef PCF_NAME
