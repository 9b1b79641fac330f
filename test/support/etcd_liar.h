/* Test helper: a fake etcd gateway on loopback that lies. It answers one path (e.g.
 * "/v3/kv/range" or "/v3/watch") with HTTP 200 and a body the test gives, a reply of the
 * wrong shape, and relays every other request to a real etcd member, so a client that
 * lists it first gets the lie where the test wants it and real answers everywhere else.
 * One thread accepts; each connection is served by a thread of its own, one request a
 * connection (it answers "Connection: close").
 *
 * rp_test_http_post sends one request by hand, for what the etcd client refuses to send
 * (a value larger than RP_ETCD_VALUE_MAX).
 */
#ifndef RAMPART_TEST_ETCD_LIAR_H
#define RAMPART_TEST_ETCD_LIAR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct rp_test_etcd_liar {
  int listen_fd;
  unsigned port;          /* where it listens, on 127.0.0.1 */
  unsigned upstream_port; /* the etcd member it relays to */
  char path[64];          /* the path it lies on */
  const char *lie;        /* the body it answers there (the caller's, kept) */
  atomic_uint lies;       /* replies of the wrong shape sent */
  atomic_uint relayed;    /* requests relayed */
  atomic_uint serving;    /* connections being served */
  atomic_bool stopping;
  pthread_t thread;
};

/* Listens on an ephemeral port and starts its thread. 0, or -1 with errno's reason on
 * stderr. */
int rp_test_etcd_liar_start(struct rp_test_etcd_liar *l, unsigned upstream_port,
                            const char *path, const char *lie);
/* Closes the listener and waits (up to 5 s) for the connections being served. */
void rp_test_etcd_liar_stop(struct rp_test_etcd_liar *l);

/* POSTs body to http://127.0.0.1:port/path and waits up to timeout_ms for the reply
 * (out gets its start, NUL terminated). The HTTP status, or -1. */
int rp_test_http_post(unsigned port, const char *path, const char *body, size_t body_len,
                      char *out, size_t outlen, unsigned timeout_ms);

#endif
