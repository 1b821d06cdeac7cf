#include <stdarg.h>
#include <stdio.h>
#include "device/gk_error.h"

void gk_error_clear(gk_error *err)
{
  err->status = GK_OK;
  err->message[0] = '\0';
}

gk_status gk_fail(gk_error *err, gk_status status, const char *fmt, ...)
{
  if (err->status != GK_OK) return err->status;
  err->status = status;
  va_list args;
  va_start(args, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, args);
  va_end(args);
  return status;
}

gk_status gk_fail_no_cuda(gk_error *err)
{
  return gk_fail(err, GK_ERR_NO_CUDA,
                 "this build of gpukernels has no CUDA support; reinstall it on a "
                 "machine with the CUDA toolkit (or use backend = \"cpu\")");
}
