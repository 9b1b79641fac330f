/* A small etcd v3 client over etcd's JSON gateway (HTTP/1.1 POST to /v3/...), with
 * libcurl for the transport and json-c for the replies. docs/dependencies.md says why
 * the gateway and not gRPC.
 *
 * One struct rp_etcd is one blocking HTTP client with its own libcurl handle: it
 * belongs to one thread, never the I/O thread. Every call is bounded by the options'
 * timeout, and a reply larger than the preallocated reply buffer is not taken (no
 * reallocation), so a client's memory is fixed when it is made; a range read is paged
 * to fit it. A call that cannot reach an endpoint, or whose reply is larger than the
 * buffer or of the wrong shape (etcd_reply.h; the log names the endpoint and the lie),
 * tries the next one of the list before it fails.
 *
 * Keys and values are byte strings; the gateway wants them in base64, which this file
 * does (OpenSSL's encoder, already linked for the page seals).
 *
 * Errors: -1 or NULL with a sentence in err (CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_ETCD_GATEWAY_H
#define RAMPART_ETCD_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etcd_reply.h"

#define RP_ETCD_MAX_ENDPOINTS 8
#define RP_ETCD_URL_LEN 256

struct rp_etcd_options {
  const char *endpoints; /* "http://127.0.0.1:2379,https://10.0.0.2:2379"; a bare
                            * HOST:PORT means http:// */
  const char *cacert;    /* TLS: the CA that signed etcd's certificates (NULL: system) */
  const char *cert;      /* TLS client certificate (NULL: none) */
  const char *key;       /* its private key */
  unsigned timeout_ms;   /* a whole call, connect included (0: 3000) */
  size_t reply_max;      /* largest reply (a range read's page, a watch message)
                            * accepted (0: 64 KiB); preallocated */
};

struct rp_etcd;

/* NULL with err filled when the endpoints do not parse or memory is short. */
struct rp_etcd *rp_etcd_new(const struct rp_etcd_options *o, char *err, size_t errlen);
void rp_etcd_free(struct rp_etcd *e);

/* The endpoint the last call reached, for messages. */
const char *rp_etcd_endpoint(const struct rp_etcd *e);

/* Each returns 0 or -1 with err saying what failed and where. */
int rp_etcd_lease_grant(struct rp_etcd *e, unsigned ttl_seconds, int64_t *lease, char *err,
                        size_t errlen);
/* *ttl_left is 0 when etcd no longer knows the lease (it expired). */
int rp_etcd_lease_keepalive(struct rp_etcd *e, int64_t lease, int64_t *ttl_left, char *err,
                            size_t errlen);
int rp_etcd_lease_revoke(struct rp_etcd *e, int64_t lease, char *err, size_t errlen);
/* lease 0: no lease. */
int rp_etcd_put(struct rp_etcd *e, const char *key, const char *value, int64_t lease,
                char *err, size_t errlen);
/* Test API: the tests remove a member's key to see the device notice it. */
int rp_etcd_delete(struct rp_etcd *e, const char *key, char *err, size_t errlen);

/* Every key under prefix, in key order, read in pages of as many keys as the reply
 * buffer holds (reply_max / 2.3 KB, at one revision), with no cap on how many: fn is
 * called with each key and value (NUL terminated; a key or value longer than
 * RP_ETCD_KEY_MAX or RP_ETCD_VALUE_MAX, or with a NUL byte, is skipped: not rampart's).
 * A page that does not fit the buffer is asked for again with half the keys; one kv
 * that alone does not fit is skipped, named in the log. The pages end within 10
 * timeouts. *revision (may be NULL) gets the store's revision at
 * the read, where a watch starts from. */
int rp_etcd_range_prefix(struct rp_etcd *e, const char *prefix, rp_etcd_kv_fn fn, void *arg,
                         int64_t *revision, char *err, size_t errlen);

/* Watches prefix from start_revision (0: from now) until stop() returns true, the
 * stream ends, an error, or max_ms pass (0: no limit; the caller re-watches from
 * *next_revision, so nothing is missed between two watches). fn gets every event:
 * deleted true for a deletion (value ""). live() (may be NULL) is called once the watch
 * is established. 0 when it ended by stop() or max_ms, -1 with err otherwise;
 * *next_revision is the revision to resume from either way. */
int rp_etcd_watch_prefix(struct rp_etcd *e, const char *prefix, int64_t start_revision,
                         rp_etcd_event_fn fn, void (*live)(void *arg),
                         bool (*stop)(void *arg), void *arg, unsigned max_ms,
                         int64_t *next_revision, char *err, size_t errlen);

#endif
