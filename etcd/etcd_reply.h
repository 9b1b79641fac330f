/* The parsers of etcd's JSON gateway replies: a range read's page and a watch's
 * messages, each on a buffer, so they run apart from the transport (the fuzz target
 * test/fuzz/fuzz_etcd_reply.c feeds them bytes).
 *
 * Whatever answers on an endpoint writes these bytes, so every value's type and range
 * is checked before use: a reply of the wrong shape (a key that is not a string, kvs or
 * events that are not arrays, a revision that is not a number from 0 to INT64_MAX - 1,
 * base64 that does not decode) is refused whole, before any key reaches the caller, with
 * a sentence saying what was wrong. A key or value that is well formed but not one
 * rampart writes (longer than RP_ETCD_KEY_MAX or RP_ETCD_VALUE_MAX, or with a NUL byte)
 * is skipped, not an error.
 *
 * json-c must be loaded first (rp_etcd_libs_load).
 *
 * Errors: 0, or -1 with a sentence in why saying how the reply is wrong (convention 1
 * of CONTRIBUTING.md, for a reply instead of a setting).
 */
#ifndef RAMPART_ETCD_REPLY_H
#define RAMPART_ETCD_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RP_ETCD_KEY_MAX 512
#define RP_ETCD_VALUE_MAX 1024

/* A key and its value, NUL terminated: a range read's. */
typedef void (*rp_etcd_kv_fn)(void *arg, const char *key, const char *value);
/* A watch's event: deleted true for a deletion (value ""). */
typedef void (*rp_etcd_event_fn)(void *arg, bool deleted, const char *key, const char *value);

/* What one page of a range read says besides its keys. */
struct rp_etcd_range_page {
  int64_t revision; /* the store's revision at the read, 1 to INT64_MAX - 1 */
  bool more;        /* keys after last_key remain */
  unsigned count;   /* kvs in this page, skipped ones included */
  /* the page's last key, raw, where the next page starts (plus a NUL byte) */
  char last_key[RP_ETCD_KEY_MAX + 1];
  size_t last_key_len;
};

/* Parses a /v3/kv/range reply (NUL terminated); fn gets each key and value once the
 * whole reply has been checked. -1 with why when the reply is of the wrong shape, or
 * when more keys follow a last key too long to continue from. */
int rp_etcd_reply_range(const char *json, rp_etcd_kv_fn fn, void *arg,
                        struct rp_etcd_range_page *page, char *why, size_t whylen);

/* What a watch's messages said so far. */
struct rp_etcd_watch_reply {
  int64_t next_revision; /* where a new watch resumes (0: read everything again) */
  bool created;          /* this message established the watch */
  bool canceled;         /* etcd ended the watch; why says how */
};

/* Parses one message of a /v3/watch stream (one line, NUL terminated; blank lines are
 * skipped); fn gets each event once the message has been checked. An error object
 * from etcd is a cancellation (w->canceled), not a wrong shape. */
int rp_etcd_reply_watch(const char *line, rp_etcd_event_fn fn, void *arg,
                        struct rp_etcd_watch_reply *w, char *why, size_t whylen);

#endif
