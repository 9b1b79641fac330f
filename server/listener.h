/* The listening socket: resolving --listen, refusing a non-loopback address without a
 * cluster key, binding, and naming the bound address (port 0 picks a free port, and the
 * operator or test needs to learn which).
 *
 * Errors: -1 with a sentence in err and an exit code (CONTRIBUTING.md, convention
 * 1).
 */
#ifndef RAMPART_SERVER_LISTENER_H
#define RAMPART_SERVER_LISTENER_H

#include <stdbool.h>
#include <stddef.h>

/* Returns a non-blocking listening socket, or -1 with err and *exit_code set: 2 when
 * the configuration is refused (no key off loopback), 1 when the system refused (port
 * in use, no such address). `bound` gets "HOST:PORT" ("[::1]:PORT" for IPv6). */
int rps_listener_open(const char *host, const char *port, bool have_key, char *bound,
                      size_t boundlen, int *exit_code, char *err, size_t errlen);

#endif
