/* The R progress sink: while a call runs, the block engines' steps (and their
 * progress lines) go to an R function, which hands them to progressr (see
 * R/progress.R). The function runs on R's thread between blocks, under
 * R_tryCatch so that an error or an interrupt inside it cannot jump over the
 * core's clean-up: it becomes a request to stop, which the core sees through
 * its interrupt check. */
#include "r_util.h"
#include "device/gk_hooks.h"

static SEXP sink = NULL;        /* preserved while installed */
static int stop_requested = 0;

typedef struct {
  double done, total;
  const char *line;
} steps_call;

static SEXP call_sink(void *data)
{
  steps_call *c = (steps_call *) data;
  SEXP done = PROTECT(Rf_ScalarReal(c->done));
  SEXP total = PROTECT(Rf_ScalarReal(c->total));
  SEXP line = PROTECT(Rf_mkString(c->line));
  SEXP call = PROTECT(Rf_lang4(sink, done, total, line));
  Rf_eval(call, R_GlobalEnv);
  UNPROTECT(4);
  return R_NilValue;
}

static SEXP on_condition(SEXP condition, void *data)
{
  (void) condition;
  (void) data;
  stop_requested = 1;
  return R_NilValue;
}

static void r_steps(size_t done, size_t total, const char *line)
{
  if (!sink || stop_requested) return;
  steps_call c = {done == (size_t) -1 ? -1.0 : (double) done,
                  total == (size_t) -1 ? -1.0 : (double) total, line};
  SEXP conds = PROTECT(Rf_allocVector(STRSXP, 2));
  SET_STRING_ELT(conds, 0, Rf_mkChar("error"));
  SET_STRING_ELT(conds, 1, Rf_mkChar("interrupt"));
  R_tryCatch(call_sink, &c, conds, on_condition, NULL, NULL, NULL);
  UNPROTECT(1);
}

int gk_r_progress_stop_requested(void)
{
  return stop_requested;
}

/* Installs fun(done, total, line) as the sink, or removes it (NULL). */
SEXP gk_r_progress_sink(SEXP fun)
{
  if (sink) R_ReleaseObject(sink);
  sink = NULL;
  stop_requested = 0;
  if (!Rf_isNull(fun)) {
    R_PreserveObject(fun);
    sink = fun;
  }
  gk_set_steps_hook(sink ? r_steps : NULL);
  return R_NilValue;
}
