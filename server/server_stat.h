/* The STAT reply: what rampartd says of itself, on the wire (a client's STAT) and on the
 * metrics page, from one function so the two never disagree.
 *
 * Errors: none: it copies counters.
 */
#ifndef RAMPART_SERVER_SERVER_STAT_H
#define RAMPART_SERVER_SERVER_STAT_H

#include "rampart.pb-c.h"
#include "rps_server.h"

/* Fills a Stat reply. `asking` (may be NULL) gives the session_* fields. */
void rps_server_fill_stat(struct rps_server *srv, const struct rps_session *asking,
                          Rampart__Stat *st);

#endif
