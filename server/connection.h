/* One client connection: the frame reader, the handshake, the ops, and the output
 * buffer, on the server's libev loop.
 *
 * A connection reads up to 256 KiB per read() and handles every whole frame in it, so
 * a pipelining client costs one system call per many pages; replies collect in one
 * output buffer sent with as few writes as the socket allows. When a client stops
 * reading its replies and the buffer passes 8 MiB, the connection stops reading
 * requests until it drains: memory per connection stays bounded whatever the peer does,
 * and the buffer shrinks back once drained. Before the key is proven a connection has
 * only 4 KiB buffers.
 *
 * Errors: rps_conn_start returns -1 only when out of memory, with no sentence
 * (CONTRIBUTING.md, convention 1's out-of-memory case); a client's failed request
 * is an rp_status in its reply, not an error here.
 */
#ifndef RAMPART_SERVER_CONNECTION_H
#define RAMPART_SERVER_CONNECTION_H

#include <stdbool.h>
#include <stdint.h>

struct rps_server;

struct rps_addr_key;

/* Takes ownership of an accepted non-blocking socket from source address addr, counted
 * as unauthenticated until it proves the key. Returns 0, or -1 (the socket is closed)
 * when out of memory. */
int rps_conn_start(struct rps_server *srv, int fd, const char *peer,
                   const struct rps_addr_key *addr);

/* Closes the connection that has waited longest without proving the key, to make room
 * for a new one. False when there is none. Call only outside connection callbacks
 * (the accept callback). */
bool rps_conn_drop_oldest_unauthenticated(struct rps_server *srv);

/* Sends a refusal (an Error frame with id 0, as the request is not read yet) to a
 * socket the server will not serve and closes it. */
void rps_conn_refuse(struct rps_server *srv, int fd, const char *why);

/* Queues an ADVISE to every authenticated connection; returns how many. */
uint64_t rps_conn_broadcast_advise(struct rps_server *srv, bool pressure, const char *reason,
                                   uint64_t free_pages);

/* Closes every connection at once (shutdown); their sessions go into their lease. */
void rps_conn_close_all(struct rps_server *srv);

#endif
