/* One NBD client of rampart-nbd-server, served on a thread of its own with no thread per
 * request: it reads every request the socket holds, submits them to the engine as one
 * list, waits for replies by reading the servers' sockets itself (rampart_reap_or_fd,
 * with the client's socket in the same poll), and answers each pass's completions in one
 * writev. So a batch of requests costs one wake, not a thread switch or more per request
 * as a worker thread per request would.
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1); the requests'
 * own errors go to the client as NBD errors.
 */
#ifndef RAMPART_NBD_SERVER_CONN_H
#define RAMPART_NBD_SERVER_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "nbd_buffer_budget.h"
#include "nbd_server_handshake.h"
#include "rampart.h"

struct nbd_server_conn;

/* What a connection may make the daemon hold, and for how long. A client is held back,
 * never refused, for memory: a request whose buffer does not fit stays unread in the
 * socket until replies drain. Time is what closes a connection: the handshake's, and a
 * client that stalls in the middle of a request or does not read its replies. An idle
 * connection (no request in flight, none half sent) is never closed: a swap device's
 * connection can be idle for hours, and closing it would fail the swap device's next
 * request. */
struct nbd_server_limits {
  unsigned depth;                        /* requests in the engine at once */
  uint64_t connection_buffers;           /* request buffer bytes one connection may hold; at
                                    least the export's max_block, so any request fits */
  uint64_t unshared_buffers;             /* of those, what it holds without drawing on
                                    all_buffers: the buffers it keeps for its next
                                    requests stay within this, so an idle connection
                                    holds none of all_buffers */
  struct nbd_buffer_budget *all_buffers; /* every connection's past unshared_buffers */
  unsigned handshake_ms;                 /* for the whole handshake */
  unsigned stall_ms;    /* a request half sent, or replies unread, this long */
  unsigned stopping_ms; /* once stopping: replies unread this long */
};

/* Starts serving the connected socket fd (the handshake first) on a new thread, within
 * limits (kept by pointer: they outlive the connection). The connection owns fd from
 * here on, even when this fails. NULL with err. */
struct nbd_server_conn *nbd_server_conn_start(struct rampart_engine *engine, int fd,
                                              const struct nbd_server_export *export,
                                              const struct nbd_server_limits *limits,
                                              char *err, size_t errlen);
/* True once its thread has ended (the client left, or asked to). */
bool nbd_server_conn_ended(const struct nbd_server_conn *conn);
/* Asks it to end: it takes the requests the socket holds, answers them, and ends; a
 * client that does not read those replies for limits->stopping_ms is closed. */
void nbd_server_conn_stop(struct nbd_server_conn *conn);
/* Waits for its thread and frees it. */
void nbd_server_conn_join(struct nbd_server_conn *conn);

#endif
