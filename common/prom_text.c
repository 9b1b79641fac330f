/* The Prometheus text format writer (see prom_text.h). */
#include "prom_text.h"

#include <stdarg.h>
#include <stdio.h>

void prom_begin(struct prom_out *o, char *buf, size_t cap)
{
  o->buf = buf;
  o->cap = cap;
  o->len = 0;
  if (cap)
    buf[0] = '\0';
}

void prom_put(struct prom_out *o, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->len < o->cap ? o->cap - o->len : 0;
  int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0)
    o->len += (size_t)n;
}

void prom_header(struct prom_out *o, const char *name, const char *type, const char *help)
{
  prom_put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_metric(struct prom_out *o, const char *name, const char *type, const char *help,
                 double value)
{
  prom_header(o, name, type, help);
  prom_put(o, "%s %.17g\n", name, value);
}

void prom_labelled(struct prom_out *o, const char *name, const char *type, const char *help,
                   const char *label, const struct prom_sample *samples, size_t n)
{
  prom_header(o, name, type, help);
  for (size_t i = 0; i < n; i++)
    prom_put(o, "%s{%s=\"%s\"} %llu\n", name, label, samples[i].label_value,
             samples[i].count);
}

void prom_escape_label(const char *in, char *out, size_t outlen)
{
  size_t n = 0;
  for (; *in && n + 3 < outlen; in++) {
    if (*in == '\\' || *in == '"' || *in == '\n') {
      out[n++] = '\\';
      out[n++] = *in == '\n' ? 'n' : *in;
    } else {
      out[n++] = *in;
    }
  }
  if (outlen)
    out[n] = '\0';
}
