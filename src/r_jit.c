/* .Call glue for the device layer's run-time compiler (device/gk_jit.h). */
#include "r_util.h"
#include "device/gk_jit.h"

/* dir: the disk cache ("" for none); version: the package's; names, texts:
 * the kernel sources by include name. */
SEXP gk_r_jit_configure(SEXP dir, SEXP version, SEXP names, SEXP texts)
{
  if (!Rf_isString(dir) || Rf_length(dir) != 1 || STRING_ELT(dir, 0) == NA_STRING)
    Rf_error("the cache directory must be one path");
  if (!Rf_isString(version) || Rf_length(version) != 1)
    Rf_error("the package version must be one string");
  if (!Rf_isString(names) || !Rf_isString(texts) || Rf_length(names) != Rf_length(texts))
    Rf_error("the kernel sources must be names and texts of equal length");
  int n = Rf_length(names);
  const char **name_list = (const char **) R_alloc(n > 0 ? n : 1, sizeof(char *));
  const char **text_list = (const char **) R_alloc(n > 0 ? n : 1, sizeof(char *));
  for (int i = 0; i < n; i++) {
    name_list[i] = CHAR(STRING_ELT(names, i));
    text_list[i] = CHAR(STRING_ELT(texts, i));
  }
  gk_error err;
  gk_error_clear(&err);
  if (gk_jit_configure(Rf_translateCharUTF8(STRING_ELT(dir, 0)), CHAR(STRING_ELT(version, 0)), n,
                       name_list, text_list, &err))
    gk_raise(&err);
  return R_NilValue;
}

SEXP gk_r_jit_info(void)
{
  const char *names[] = {"dir", "sources", "compiled", "loaded", "rebuilt", "compile_seconds",
                         "in_memory", ""};
  gk_jit_stats s;
  gk_jit_stats_get(&s);
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SET_VECTOR_ELT(out, 0, Rf_mkString(gk_jit_cache_dir()));
  SET_VECTOR_ELT(out, 1, Rf_ScalarInteger(gk_jit_source_count()));
  SET_VECTOR_ELT(out, 2, Rf_ScalarReal(s.compiled));
  SET_VECTOR_ELT(out, 3, Rf_ScalarReal(s.loaded));
  SET_VECTOR_ELT(out, 4, Rf_ScalarReal(s.rebuilt));
  SET_VECTOR_ELT(out, 5, Rf_ScalarReal(s.compile_seconds));
  SET_VECTOR_ELT(out, 6, Rf_ScalarReal(s.in_memory));
  UNPROTECT(1);
  return out;
}

SEXP gk_r_jit_forget(void)
{
  gk_jit_forget();
  return R_NilValue;
}
