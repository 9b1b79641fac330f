/* The rampartd process as a whole: the page store, the sessions, the pressure monitor,
 * the listening socket and its connections, the counters behind STAT, and the signals
 * that stop it. One libev loop, one thread: nothing here is locked.
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_SERVER_SERVER_H
#define RAMPART_SERVER_SERVER_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "options.h"
#include "rps_server.h"

/* Sets up everything around an already bound, listening, non-blocking socket (which the
 * server then owns). The key must outlive the server. 0, or -1 with err. */
int rps_server_init(struct rps_server *srv, struct ev_loop *loop,
                    const struct rps_options *opt, const struct rp_key *key, int listen_fd,
                    char *err, size_t errlen);

/* Runs until SIGTERM or SIGINT. */
void rps_server_run(struct rps_server *srv);

/* Closes every connection, frees every session and page. */
void rps_server_cleanup(struct rps_server *srv);

#endif
