/* The servers (server_set.c): connections, reservations, requests and slots on them.
 * Their state is struct server_set in engine_core.h, which every part reads; their
 * health is server_health.c's, membership server_membership.c's.
 *
 * Errors: set-up calls (server_set_open, server_set_pool_new) return -1 with a sentence
 * in err (CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_SERVER_SET_H
#define RAMPART_SERVER_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rampart_engine;
struct rp_conn;
struct rp_request;
struct rp_session_info;
struct server;

int server_set_open(struct rampart_engine *e, char *err, size_t errlen);
/* The connections' memory for n servers (and reconnects), made once at open. */
int server_set_pool_new(struct rampart_engine *e, unsigned n, char *err, size_t errlen);
void server_set_close(struct rampart_engine *e);
bool server_usable_for_placement(const struct server *s);
unsigned server_set_placeable(const struct rampart_engine *e);
void server_release_slot(struct rampart_engine *e, unsigned server, uint32_t slot);
/* A request to this server failed. The server's connection is given up (it goes
 * RECONNECTING). With may_wait, a write or free the server never answered is queued to
 * be sent again once the session resumes: then this returns true and the request's
 * callback must do nothing more. */
bool server_request_failed(struct rampart_engine *e, unsigned server, struct rp_request *req,
                           bool may_wait);
/* A new server (or incarnation) at address; like, when given, is an earlier incarnation
 * whose resolved address it takes. NULL when the engine has no room or memory. */
struct server *server_new(struct rampart_engine *e, const char *address,
                          const struct server *like);
/* Takes back the entry server_new just made, when adopting it failed. */
void server_forget_newest(struct rampart_engine *e);
void server_adopt(struct rampart_engine *e, struct server *s, struct rp_conn *conn,
                  const struct rp_session_info *info);
uint64_t server_reservation_wanted(const struct rampart_engine *e);

/* The server that is address now (its newest incarnation, not removed), or NULL. */
struct server *server_set_find(struct rampart_engine *e, const char *address);
/* Servers counted as members of the device (neither replaced by a newer incarnation
 * nor removed). */
unsigned server_set_members(const struct rampart_engine *e);

#endif
