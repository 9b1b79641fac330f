/* Writing the Prometheus text exposition format (version 0.0.4) into a caller's fixed
 * buffer: rampartd's /metrics and the pager's metrics-file= share it. Nothing here
 * allocates; a text that does not fit is measured, not cut silently (prom_out.len).
 *
 * Errors: none: nothing here fails; a text that does not fit shows as prom_out.len >
 * cap.
 */
#ifndef RAMPART_COMMON_PROM_TEXT_H
#define RAMPART_COMMON_PROM_TEXT_H

#include <stddef.h>

struct prom_out {
  char *buf;
  size_t cap;
  size_t len; /* what the whole text needs, even past cap: compare with cap */
};

/* Starts an empty text in buf. */
void prom_begin(struct prom_out *o, char *buf, size_t cap);
/* Appends printf-style text. */
void prom_put(struct prom_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The HELP and TYPE lines of a metric (type: counter, gauge, histogram). */
void prom_header(struct prom_out *o, const char *name, const char *type, const char *help);
/* HELP, TYPE and one unlabelled sample. */
void prom_metric(struct prom_out *o, const char *name, const char *type, const char *help,
                 double value);
/* One sample of a metric with a single label: name{label="value"} count. */
struct prom_sample {
  const char *label_value; /* written as it is: pass names that need no escaping */
  unsigned long long count;
};
/* HELP, TYPE and one sample per entry of samples, each labelled `label`. */
void prom_labelled(struct prom_out *o, const char *name, const char *type, const char *help,
                   const char *label, const struct prom_sample *samples, size_t n);
/* A label value as the format wants it: backslash, double quote and newline escaped;
 * cut to fit outlen. */
void prom_escape_label(const char *in, char *out, size_t outlen);

#endif
