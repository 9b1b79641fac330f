/* What a connection to a rampartd is opened with, and what the server's Welcome said:
 * the types both the handshake (client_handshake.c) and the connection API (client.h)
 * speak, in a header of their own so that neither includes the other.
 *
 * Errors: none: only types live here; the calls that use them state theirs (client.h,
 * convention 3).
 */
#ifndef RAMPART_CLIENT_SESSION_H
#define RAMPART_CLIENT_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "wire.h"

struct rp_key;
struct rp_conn_pool;

struct rp_conn_options {
  const char *host;            /* name or address */
  const char *port;            /* decimal port */
  const struct rp_key *key;    /* NULL or len 0: no key (server must have none) */
  const char *client_name;     /* shown in the server's logs; may be NULL */
  const uint8_t *resume_token; /* RP_TOKEN_LEN bytes to resume a session, or NULL */
  uint32_t connect_timeout_ms; /* 0: 5000; covers connect + handshake */
  uint32_t request_timeout_ms; /* 0: 10000; a request not answered by then fails */
  /* Optional: the server's address resolved already (then host/port only name it in
   * messages), and a pool to take the connection's memory from. With both, opening a
   * connection allocates nothing, which a pager reconnecting inside a memory shortage
   * needs. */
  const struct sockaddr *addr;
  socklen_t addr_len;
  struct rp_conn_pool *pool;
};

/* What the server said in its Welcome. */
struct rp_session_info {
  uint8_t token[RP_TOKEN_LEN];
  bool resumed; /* false: a new, empty session */
  uint32_t page_size;
  uint64_t capacity_pages;
  uint64_t free_pages;
  uint32_t lease_seconds;
  uint64_t reserved_pages;
  bool pressure;
};

#endif
