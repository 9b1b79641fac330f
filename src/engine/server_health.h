/* The servers' health (server_health.c): UP -> RECONNECTING -> UP | LOST, reconnects
 * in each server's helper thread, requests that wait for a reconnecting server.
 *
 * Each server's own part is struct server_health, inside struct server
 * (engine_core.h). What they share (io-timeout=, the results helper threads hand
 * back, the ops waiting until a server changes state, the counters) is
 * struct server_health_shared, defined in server_health.c alone.
 *
 * Errors: allocation returns 0 or -1 (out of memory; CONTRIBUTING.md); a server's
 * failure is a state change and a log line, and a request it holds completes as
 * page_op.h says.
 */
#ifndef RAMPART_SERVER_HEALTH_H
#define RAMPART_SERVER_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rampart_engine;
struct rampart_stats;
struct page_op;
struct rp_request;
struct server;

/* Made with the engine, before anything else: 0, or -1 (out of memory). */
int server_health_alloc(struct rampart_engine *e);
void server_health_release(struct rampart_engine *e);
/* Once the loop exists. */
void server_health_init(struct rampart_engine *e);
int server_health_init_server(struct rampart_engine *e,
                              struct server *s); /* 0 or -1 (memory) */
/* Frees what init_server made, once no attempt runs (after server_health_close). */
void server_health_free(struct rampart_engine *e);
/* The same for one server never used (taken back from the table before it served). */
void server_health_free_server(struct server *s);
/* Bytes each server entry holds for its reconnect attempt (the client memory count). */
size_t server_health_attempt_bytes(void);
/* s's connection failed (or a request on it did): UP -> RECONNECTING. silent: it failed
 * by not answering within timeout= (stalled or cut off), not by a closed connection. */
void server_health_failed(struct rampart_engine *e, struct server *s, const char *why,
                          bool silent);
/* Queues req for s's resumed session if s is reconnecting and may still come back within
 * io-timeout=; false when it cannot be queued. A write is not queued when another server
 * can take it and s is not likely back at once (it went silent, or has been out longer
 * than timeout=): its owner places it again elsewhere, as for a lost server. */
bool server_health_queue(struct rampart_engine *e, struct server *s, struct rp_request *req);
void server_health_tick(struct rampart_engine *e);
/* op cannot go on until a server comes back (a read whose group cannot be rebuilt
 * without a reconnecting server, a write with no server to go to). Parks it, to be
 * started over whenever a server's state changes, and returns true; false once it has
 * waited io-timeout= (the caller then goes on as its policy says without the server). */
bool server_health_park(struct rampart_engine *e, struct page_op *op);
/* Some server is up, and every reconnecting server has been out for timeout= or more:
 * no longer a blip worth holding a frontend's write for. */
bool server_health_partial_outage_past_blip(const struct rampart_engine *e);
/* Some server is reconnecting: waiting may bring it back. */
bool server_health_any_reconnecting(const struct rampart_engine *e);
/* Stops every reconnect (waits for attempts in flight) before the servers are closed. */
void server_health_close(struct rampart_engine *e);
void server_health_stats(struct rampart_engine *e, struct rampart_stats *st);
/* After a restart (engine_restore.c): a server the dead pager had resumes its session (it
 * goes RECONNECTING, with the token the state kept) or, lost, tries to join again. 1
 * when it is resuming. */
unsigned server_health_after_restart(struct rampart_engine *e, struct server *s);
/* s was removed: it must never reconnect; its session (if it has one) is ended by its
 * helper thread with GOODBYE, so the server frees our pages now, not after a lease. */
void server_health_retire(struct rampart_engine *e, struct server *s);
/* s is lost and being removed: no more attempts to join again as a new server. */
void server_health_stop_rejoining(struct rampart_engine *e, struct server *s);
/* Some op waits for a server to change state (the loop must look again). */
bool server_health_any_waiting(const struct rampart_engine *e);

#endif
