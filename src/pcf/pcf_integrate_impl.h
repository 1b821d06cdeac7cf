/* One interval type of pcf_integrate.h: included twice, with PCF_INTERVAL and
 * PCF_NAME defined for double and for float intervals. Not a header of its own. */

/* (int |f - g|^p)^(1/p) without overflow or underflow: the largest term
 * T* = dt* d*^p (found on a first walk) is factored out, and the sum of the
 * terms divided by it, each in [0, 1] and one equal to 1, is formed on a
 * second walk from log ratios, which keeps every term's relative error
 * within a few ulps. Result: d* dt*^(1/p) (sum)^(1/p). */
PCF_HD double PCF_NAME(pcf_pair_scaled)(const PCF_INTERVAL *f, const PCF_INTERVAL *g, double p)
{
  double best = -INFINITY, best_d = 0, best_dt = 0, sum = 0;
  for (int pass = 0; pass < 2; pass++) {
    const PCF_INTERVAL *fi = f, *gi = g;
    PCF_INTERVAL a = *fi, b = *gi;
    double pos = 0;
    for (;;) {
      int next_a = a.t <= b.t, next_b = b.t <= a.t;
      double t = next_a ? a.t : b.t;
      if (t == (double) INFINITY) break;
      double dt = t - pos, d = fabs((double) a.v - (double) b.v);
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
      pos = t;
      fi += next_a;
      gi += next_b;
      a = *fi;
      b = *gi;
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

/* The op over the pair (f, g), given as packed intervals. Each function
 * advances when its interval ends first (both on a shared breakpoint); the
 * comparisons feed the pointer increments directly, which keeps the loop's
 * dependency chain short. */
PCF_HD double PCF_NAME(pcf_pair)(int op, const PCF_INTERVAL *f, const PCF_INTERVAL *g, double p)
{
  const PCF_INTERVAL *f0 = f, *g0 = g;
  PCF_INTERVAL a = *f, b = *g;
  double pos = 0, acc = 0;
  for (;;) {
    int next_a = a.t <= b.t, next_b = b.t <= a.t;
    double t = next_a ? a.t : b.t;
    if (t == (double) INFINITY) break;
    acc = pcf_accumulate(op, acc, t - pos, a.v, b.v, p);
    pos = t;
    f += next_a;
    g += next_b;
    a = *f;
    b = *g;
  }
  return PCF_NAME(pcf_finish)(op, acc, a.v, b.v, p, f0, g0);
}

#undef PCF_INTERVAL
#undef PCF_NAME
