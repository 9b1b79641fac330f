/* See msgf.h. */
#include "msgf.h"

#include <stdarg.h>
#include <stdio.h>

void rp_msgf(char *out, size_t len, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, len, fmt, ap);
  va_end(ap);
}
