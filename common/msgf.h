/* snprintf for messages to people that may be cut to their buffer on purpose: a
 * message longer than its buffer is still worth reading, so truncation is not an error
 * (and -Wformat-truncation has nothing to warn about).
 *
 * Errors: none: nothing here fails (a message cut to its buffer is not a failure).
 */
#ifndef RAMPART_COMMON_MSGF_H
#define RAMPART_COMMON_MSGF_H

#include <stddef.h>

void rp_msgf(char *out, size_t len, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

#endif
