/* One precision of pcf_integrate.h: included twice, with PCF_REAL and friends
 * defined as double and as float. Not a header of its own. */

/* Adds the contribution of an interval of length dt on which f = a and g = b. */
PCF_HD PCF_REAL PCF_NAME(pcf_accumulate)(int op, PCF_REAL acc, PCF_REAL dt, PCF_REAL a,
                                         PCF_REAL b, PCF_REAL p)
{
  PCF_REAL d = PCF_ABS(a - b);
  switch (op) {
  case PCF_OP_L1: return acc + dt * d;
  case PCF_OP_L2: return acc + dt * d * d;
  case PCF_OP_LP: return d > 0 ? acc + dt * PCF_POW(d, p) : acc;
  case PCF_OP_LINF: return dt > 0 && d > acc ? d : acc;
  default: return acc + dt * a * b;
  }
}

/* The result from the accumulated value; a and b are the last values. */
PCF_HD PCF_REAL PCF_NAME(pcf_finish)(int op, PCF_REAL acc, PCF_REAL a, PCF_REAL b, PCF_REAL p)
{
  switch (op) {
  case PCF_OP_L2: return PCF_SQRT(acc);
  case PCF_OP_LP: return PCF_POW(acc, (PCF_REAL) 1 / p);
  case PCF_OP_LINF: return PCF_ABS(a - b) > acc ? PCF_ABS(a - b) : acc;
  default: return acc;
  }
}

/* The op over the pair (f, g), given as packed intervals. Each function
 * advances when its interval ends first (both on a shared breakpoint); the
 * comparisons feed the pointer increments directly, which keeps the loop's
 * dependency chain short. */
PCF_HD PCF_REAL PCF_NAME(pcf_pair)(int op, const PCF_INTERVAL *f, const PCF_INTERVAL *g,
                                   PCF_REAL p)
{
  PCF_INTERVAL a = *f, b = *g;
  PCF_REAL pos = 0, acc = 0;
  for (;;) {
    int next_a = a.t <= b.t, next_b = b.t <= a.t;
    PCF_REAL t = next_a ? a.t : b.t;
    if (t == (PCF_REAL) INFINITY) break;
    acc = PCF_NAME(pcf_accumulate)(op, acc, t - pos, a.v, b.v, p);
    pos = t;
    f += next_a;
    g += next_b;
    a = *f;
    b = *g;
  }
  return PCF_NAME(pcf_finish)(op, acc, a.v, b.v, p);
}

#undef PCF_REAL
#undef PCF_INTERVAL
#undef PCF_NAME
#undef PCF_ABS
#undef PCF_POW
#undef PCF_SQRT
