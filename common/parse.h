/* Parsing of what operators type: sizes ("64M"), counts, switches, host:port. Every failure
 * fills err with a sentence that says what was wrong and what to write instead.
 *
 * Errors: -1 with a sentence in err naming what was parsed (CONTRIBUTING.md,
 * convention 1).
 */
#ifndef RAMPART_COMMON_PARSE_H
#define RAMPART_COMMON_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "4096", "64K", "64M", "2G", "1T", also "64MiB"/"64MB" (all binary units). */
int rp_parse_size(const char *what, const char *s, uint64_t *out, char *err, size_t errlen);

/* "true", "on", "yes" or "1"; "false", "off", "no" or "0". The sentence reads
 * "WHAT=S: give true or false". */
int rp_parse_bool(const char *what, const char *s, bool *out, char *err, size_t errlen);

/* A non-negative decimal integer no larger than max. */
int rp_parse_uint(const char *what, const char *s, uint64_t max, uint64_t *out, char *err,
                  size_t errlen);

/* "HOST:PORT", "[v6addr]:PORT". host and port get NUL-terminated copies. */
int rp_parse_hostport(const char *s, char *host, size_t hostlen, char *port, size_t portlen,
                      char *err, size_t errlen);

/* Formats a byte count for people: "64.0 MiB". Returns buf. */
const char *rp_format_bytes(uint64_t bytes, char *buf, size_t buflen);

#endif
