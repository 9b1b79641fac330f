/* Operator input parsing (see parse.h). strtoull alone accepts "-1", leading spaces
 * and trailing junk; every helper here rejects those explicitly. */
#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_digits(const char *s, uint64_t *out, const char **end)
{
  if (!isdigit((unsigned char)s[0]))
    return -1;
  errno = 0;
  char *e;
  unsigned long long v = strtoull(s, &e, 10);
  if (errno == ERANGE)
    return -1;
  *out = v;
  *end = e;
  return 0;
}

int rp_parse_bool(const char *what, const char *s, bool *out, char *err, size_t errlen)
{
  static const char *const yes[] = { "true", "on", "yes", "1" }, *const no[] = { "false",
                                                                                 "off", "no",
                                                                                 "0" };
  for (unsigned i = 0; s && i < 4; i++) {
    if (strcmp(s, yes[i]) == 0 || strcmp(s, no[i]) == 0) {
      *out = strcmp(s, yes[i]) == 0;
      return 0;
    }
  }
  snprintf(err, errlen, "%s=%s: give true or false", what, s ? s : "");
  return -1;
}

int rp_parse_uint(const char *what, const char *s, uint64_t max, uint64_t *out, char *err,
                  size_t errlen)
{
  const char *end;
  uint64_t v;
  if (!s || parse_digits(s, &v, &end) < 0 || *end != '\0') {
    snprintf(err, errlen, "%s '%s' is not a number: write a whole number such as 60", what,
             s ? s : "");
    return -1;
  }
  if (v > max) {
    snprintf(err, errlen, "%s %s is too large: at most %llu", what, s,
             (unsigned long long)max);
    return -1;
  }
  *out = v;
  return 0;
}

int rp_parse_size(const char *what, const char *s, uint64_t *out, char *err, size_t errlen)
{
  const char *end;
  uint64_t v;
  if (!s || parse_digits(s, &v, &end) < 0) {
    snprintf(err, errlen,
             "%s '%s' is not a size: write a number with an optional K, M, "
             "G or T suffix, such as 64M",
             what, s ? s : "");
    return -1;
  }
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
  case '\0':
    break;
  case 'K':
    shift = 10;
    break;
  case 'M':
    shift = 20;
    break;
  case 'G':
    shift = 30;
    break;
  case 'T':
    shift = 40;
    break;
  case 'B':
    break;
  default:
    snprintf(err, errlen,
             "%s '%s' has an unknown unit: use K, M, G or T (powers of 1024), "
             "such as 64M",
             what, s);
    return -1;
  }
  if (*end) {
    end++;
    if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0 || strcmp(end, "ib") == 0 ||
                  strcmp(end, "b") == 0))
      end += strlen(end);
  }
  if (*end != '\0') {
    snprintf(err, errlen,
             "%s '%s' has trailing characters: write a number with an "
             "optional K, M, G or T suffix, such as 64M",
             what, s);
    return -1;
  }
  if (shift && v > (UINT64_MAX >> shift)) {
    snprintf(err, errlen, "%s '%s' is too large", what, s);
    return -1;
  }
  *out = v << shift;
  return 0;
}

int rp_parse_hostport(const char *s, char *host, size_t hostlen, char *port, size_t portlen,
                      char *err, size_t errlen)
{
  const char *host_start = s, *host_end, *colon;
  if (!s || !*s)
    goto bad;
  if (s[0] == '[') {
    host_start = s + 1;
    host_end = strchr(host_start, ']');
    if (!host_end || host_end[1] != ':')
      goto bad;
    colon = host_end + 1;
  } else {
    colon = strrchr(s, ':');
    if (!colon || strchr(s, ':') != colon)
      goto bad;
    host_end = colon;
  }
  size_t hl = (size_t)(host_end - host_start);
  const char *p = colon + 1;
  size_t pl = strlen(p);
  if (hl == 0 || pl == 0 || hl >= hostlen || pl >= portlen)
    goto bad;
  for (size_t i = 0; i < pl; i++)
    if (!isdigit((unsigned char)p[i]))
      goto bad;
  long portnum = strtol(p, NULL, 10);
  if (portnum < 1 || portnum > 65535)
    goto bad;
  memcpy(host, host_start, hl);
  host[hl] = '\0';
  memcpy(port, p, pl + 1);
  return 0;
bad:
  snprintf(err, errlen,
           "'%s' is not HOST:PORT: write it as 127.0.0.1:7070, "
           "myhost:7070 or [::1]:7070",
           s ? s : "");
  return -1;
}

const char *rp_format_bytes(uint64_t bytes, char *buf, size_t buflen)
{
  static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
  double v = (double)bytes;
  unsigned u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, buflen, "%llu B", (unsigned long long)bytes);
  else
    snprintf(buf, buflen, "%.1f %s", v, units[u]);
  return buf;
}
