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

/* The op over the pair (f, g), given as packed intervals. */
PCF_HD PCF_REAL PCF_NAME(pcf_pair)(int op, const PCF_INTERVAL *f, const PCF_INTERVAL *g,
                                   PCF_REAL p)
{
  PCF_INTERVAL a = f[0], b = g[0];
  size_t i = 0, j = 0;
  PCF_REAL pos = 0, acc = 0;
  for (;;) {
    PCF_REAL t = a.t < b.t ? a.t : b.t;
    if (t == (PCF_REAL) INFINITY) break;
    acc = PCF_NAME(pcf_accumulate)(op, acc, t - pos, a.v, b.v, p);
    pos = t;
    i += (a.t == t);
    j += (b.t == t);
    a = f[i];
    b = g[j];
  }
  return PCF_NAME(pcf_finish)(op, acc, a.v, b.v, p);
}

#undef PCF_REAL
#undef PCF_INTERVAL
#undef PCF_NAME
#undef PCF_ABS
#undef PCF_POW
#undef PCF_SQRT
