/* The rampartd process's shared parts: struct rps_server, which the server's set-up
 * (server.c), its connections, the STAT reply and the metrics page all read. Only the
 * struct: the functions that run it are server.h's, so connection.c can use the parts
 * without including the module that starts connections (no include cycle in server/).
 *
 * Errors: none: types only.
 */
#ifndef RAMPART_SERVER_RPS_SERVER_H
#define RAMPART_SERVER_RPS_SERVER_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "admission.h"
#include "auth.h"
#include "options.h"
#include "page_store.h"
#include "pressure.h"
#include "session.h"

struct rps_stats {
  uint64_t ops_write, ops_read, ops_free;
  uint64_t bytes_in, bytes_out;
  uint64_t errors_protocol, errors_auth, errors_refused;
  uint64_t advises_sent;
  uint64_t connections_refused; /* at accept: over an unauthenticated budget */
  uint64_t connections_dropped; /* oldest handshake dropped for a newer one */
};

struct rps_conn;

struct rps_server {
  struct ev_loop *loop;
  const struct rps_options *opt;
  const struct rp_key *key; /* len 0: no key (loopback only); in secret memory */
  struct rps_store *store;
  struct rps_sessions *sessions;
  struct rps_pressure *pressure;
  struct rps_pressure_config pressure_cfg;
  struct rps_conn *conns; /* every open connection; owned by connection.c */
  uint32_t nconns;        /* all of them */
  uint32_t nauth;         /* those that proved the key */
  uint32_t nunauth;       /* those still in their handshake */
  struct rps_conn *unauth_oldest, *unauth_newest;
  struct rps_addr_counts *unauth_by_addr; /* handshakes in progress per source address */
  ev_tstamp refusal_logged_at;            /* refusals are logged at most once a second */
  uint64_t refusals_unlogged;
  int listen_fd;
  ev_io listen_io;
  ev_timer accept_pause;                  /* out of file descriptors: retry accept later */
  ev_signal sig_term, sig_int, sig_drain; /* SIGTERM/SIGINT stop, SIGUSR1 drains */
  ev_tstamp started;
  bool stopping; /* SIGTERM or SIGINT came: the loop ends */
  struct rps_stats stats;
};

#endif
