/* Sessions: what survives a dropped connection.
 *
 * A session is a client's page-store account plus a 32-byte random token. It is
 * attached to at most one connection; when that connection drops, the session is kept
 * for the lease (--lease) so the client can reconnect and resume it by token, and is
 * freed when the lease runs out. GOODBYE frees it at once.
 *
 * Connections are opaque here (void *): this file knows nothing of sockets, so the
 * connection code decides what to do with a connection a resume displaces.
 *
 * Errors: the constructors return NULL only when out of memory (or, for a session,
 * randomness), with no sentence; rps_session_find and rps_session_attach return NULL
 * for none, which is not a failure.
 */
#ifndef RAMPART_SERVER_SESSION_H
#define RAMPART_SERVER_SESSION_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "page_store.h"
#include "wire.h"

struct rps_sessions;

struct rps_session {
  uint8_t token[RP_TOKEN_LEN];
  struct rps_account *acct;
  void *conn; /* attached connection, NULL while in its lease */
  char client_name[64];
  char id[9]; /* first token bytes in hex, for logs: never the whole token */
  ev_timer lease;
  struct rps_sessions *table;
  struct rps_session *prev, *next;
};

struct rps_sessions {
  struct ev_loop *loop;
  struct rps_store *store;
  double lease_seconds;
  struct rps_session *head;
  uint32_t attached;
  uint32_t detached;
  uint64_t expired;
};

/* lease_seconds is a double so tests can use short leases; rampartd passes --lease. */
struct rps_sessions *rps_sessions_create(struct ev_loop *loop, struct rps_store *store,
                                         double lease_seconds);
/* Frees every session and its pages (server shutdown). */
void rps_sessions_destroy(struct rps_sessions *t);

/* A new empty session attached to conn. NULL when out of memory or randomness. */
struct rps_session *rps_session_create(struct rps_sessions *t, void *conn,
                                       const char *client_name);

/* The live session (attached or in its lease) with this token, or NULL. */
struct rps_session *rps_session_find(struct rps_sessions *t, const uint8_t *token,
                                     size_t len);

/* Attaches s to conn and stops its lease. Returns the connection s was still attached
 * to (a half-open one the client has given up on), which the caller must close without
 * detaching s again; NULL when there was none. */
void *rps_session_attach(struct rps_sessions *t, struct rps_session *s, void *conn,
                         const char *client_name);

/* The connection dropped: keep the pages for the lease. */
void rps_session_detach(struct rps_sessions *t, struct rps_session *s);

/* Sessions alive: attached, or detached and in their lease. */
uint32_t rps_sessions_count(const struct rps_sessions *t);

/* Frees the session and its pages now (GOODBYE, expiry, shutdown). */
void rps_session_destroy(struct rps_sessions *t, struct rps_session *s);

#endif
