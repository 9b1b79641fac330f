/* One NBD client of rampart-nbd-server, served on a thread of its own with no thread per
 * request: it reads every request the socket holds, submits them to the engine as one
 * list, waits for replies by reading the servers' sockets itself (rampart_reap_or_fd,
 * with the client's socket in the same poll), and answers each pass's completions in one
 * writev. So a batch of requests costs one wake, not a thread switch or more per request
 * as a worker thread per request would.
 *
 * Errors: -1 with a sentence in err (docs/CONTRIBUTING.md, convention 1); the requests'
 * own errors go to the client as NBD errors.
 */
#ifndef RAMPART_NBD_SERVER_CONN_H
#define RAMPART_NBD_SERVER_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "nbd_server_handshake.h"
#include "rampart.h"

struct nbd_server_conn;

/* Starts serving the connected socket fd (the handshake first) on a new thread, with
 * up to depth requests in the engine at once. The connection owns fd from here on, even
 * when this fails. NULL with err. */
struct nbd_server_conn *nbd_server_conn_start(struct rampart_engine *engine, int fd,
                                              const struct nbd_server_export *export,
                                              unsigned depth, char *err, size_t errlen);
/* True once its thread has ended (the client left, or asked to). */
bool nbd_server_conn_ended(const struct nbd_server_conn *conn);
/* Asks it to end: it reads no more requests, answers those in the engine, and ends. */
void nbd_server_conn_stop(struct nbd_server_conn *conn);
/* Waits for its thread and frees it. */
void nbd_server_conn_join(struct nbd_server_conn *conn);

#endif
