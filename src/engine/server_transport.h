/* Where a page op meets the wire.
 *
 * Every page request the engine sends (a WRITE, READ or FREE of one slot, from a write,
 * a read, a degraded read, a move, a replay after a reconnect) goes through
 * server_transport_send, and every burst ends with server_transport_flush. Below them
 * is the server's TCP connection (rp_conn); what a request's failure means for its
 * server is server_request_failed's (server_set.c), whatever the transport said. A
 * request for a server that is not connected does not reach the connection: a write or
 * free waits for the server's session (server_health_queue, which replays it through
 * the transport when the session resumes).
 *
 * A filter can be layered on top, as nbdkit's filters are on its plugins: it sees each
 * request first and either passes it on (server_transport_pass) or completes it itself,
 * later, from its own watcher on the engine's loop. The tests' fault injector is one
 * (test/support/fault_transport.c): it fails, times out, loses the reply of, delays or
 * corrupts chosen requests, so each failure edge of page_read, page_write and
 * page_mover runs on purpose, against real servers, in milliseconds. The pager that
 * is installed never sets one: the frontends have no way to.
 *
 * The connection's life (connect, reserve, resume a session, say goodbye) stays on
 * rp_conn in server_set.c, server_health.c and server_membership.c.
 *
 * Errors: none returned: a request's failure reaches its op's completion (page_op.h,
 * negative errno; CONTRIBUTING.md, convention 2).
 */
#ifndef RAMPART_SERVER_TRANSPORT_H
#define RAMPART_SERVER_TRANSPORT_H

#include <stdbool.h>

struct ev_loop;
struct rampart_engine;
struct rp_request;
struct server;

/* Up (or advised) and connected: a request sent to it now goes on its connection. */
bool server_usable_for_reads(const struct server *s);

struct server_transport_filter {
  const char *name;
  /* A request for server incarnation `server`. It must not complete the request before
   * returning: a request it fails or holds completes later, from its watcher (a real
   * reply never comes back inside the send either, and the callers' failure paths
   * close connections). Runs holding the engine: on its loop, or on a frontend thread
   * that starts requests inline. */
  void (*send)(void *ctx, struct rampart_engine *e, unsigned server, struct rp_request *req);
  /* On the engine's loop, holding it, when the filter is set: start its watchers. */
  void (*attach)(void *ctx, struct rampart_engine *e, struct ev_loop *loop);
  /* On the loop when the filter is taken away: stop them, and end or pass on every
   * request it still holds (server_transport_pass works until this returns). */
  void (*detach)(void *ctx, struct rampart_engine *e, struct ev_loop *loop);
};

/* Sends req to server incarnation `server`, through the filter if one is set. When the
 * server cannot take it now, req completes before this returns with
 * RP_ERR_DISCONNECTED, or waits for the server's session to come back (writes and
 * frees to a reconnecting server). */
void server_transport_send(struct rampart_engine *e, unsigned server, struct rp_request *req);
/* Sends now what every connection has queued (after a burst from the frontends). */
void server_transport_flush(struct rampart_engine *e);

/* What a filter calls to pass req on to the real transport below it. */
void server_transport_pass(struct rampart_engine *e, unsigned server, struct rp_request *req);

/* Test API (the fault transport, test/support): sets f (NULL: takes the filter away)
 * from a thread that is not the engine's own, and waits until done. Set it before the
 * workload and take it away before rampart_close. */
void server_transport_set_filter(struct rampart_engine *e,
                                 const struct server_transport_filter *f, void *ctx);

#endif
