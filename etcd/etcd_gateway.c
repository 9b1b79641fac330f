/* etcd's JSON gateway, spoken with libcurl and json-c (see etcd_gateway.h). */
#include "etcd_gateway.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "etcd_libs.h"
#include "etcd_reply.h"
#include "log.h"

#define B64_LEN(n) (((n) + 2) / 3 * 4 + 1)
#define BODY_MAX (B64_LEN(RP_ETCD_KEY_MAX) * 2 + B64_LEN(RP_ETCD_VALUE_MAX) + 256)

struct rp_etcd {
  CURL *curl;
  struct curl_slist *headers;
  char endpoints[RP_ETCD_MAX_ENDPOINTS][RP_ETCD_URL_LEN];
  unsigned nendpoints, current;
  unsigned timeout_ms;
  char *reply; /* reply_max + 1 bytes, preallocated */
  size_t reply_len, reply_max;
  bool reply_overflow;
  bool overflowed; /* an endpoint's reply to the last post was larger than reply_max */
  char lie[200];   /* how the reply being read is of the wrong shape ("": it is not) */
  char body[BODY_MAX];
  char url[RP_ETCD_URL_LEN + 64];
  /* a watch in progress: lines are handed on as they complete */
  struct watch_state *watch;
};

/* ---- base64, as the gateway carries bytes ------------------------------------------ */

static void b64_encode(const char *in, size_t len, char *out)
{
  EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)in, (int)len);
}

/* The first key after every key that starts with prefix (etcd's range_end). */
static void prefix_end(const char *prefix, char *out, size_t cap)
{
  size_t n = strlen(prefix);
  snprintf(out, cap, "%s", prefix);
  if (n > 0 && n < cap)
    out[n - 1] = (char)(out[n - 1] + 1);
}

/* ---- the client ------------------------------------------------------------------------ */

static size_t on_reply(char *data, size_t size, size_t nmemb, void *arg);

static int parse_endpoints(struct rp_etcd *e, const char *list, char *err, size_t errlen)
{
  const char *p = list;
  while (p && *p) {
    size_t len = strcspn(p, ",");
    if (len > 0) {
      if (e->nendpoints == RP_ETCD_MAX_ENDPOINTS) {
        snprintf(err, errlen, "more than %u etcd endpoints listed: list at most %u",
                 RP_ETCD_MAX_ENDPOINTS, RP_ETCD_MAX_ENDPOINTS);
        return -1;
      }
      bool has_scheme = memmem(p, len, "://", 3) != NULL;
      int n = snprintf(e->endpoints[e->nendpoints], RP_ETCD_URL_LEN, "%s%.*s",
                       has_scheme ? "" : "http://", (int)len, p);
      if (n < 0 || n >= RP_ETCD_URL_LEN) {
        snprintf(err, errlen, "etcd endpoint '%.*s' is too long", (int)len, p);
        return -1;
      }
      char *ep = e->endpoints[e->nendpoints];
      if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0) {
        snprintf(err, errlen,
                 "etcd endpoint '%s': use http://HOST:PORT or "
                 "https://HOST:PORT",
                 ep);
        return -1;
      }
      size_t el = strlen(ep);
      if (el > 0 && ep[el - 1] == '/')
        ep[el - 1] = '\0';
      e->nendpoints++;
    }
    p += len;
    if (*p == ',')
      p++;
  }
  if (e->nendpoints == 0) {
    snprintf(err, errlen,
             "no etcd endpoint given: list them as "
             "http://HOST:2379,http://HOST2:2379");
    return -1;
  }
  return 0;
}

struct rp_etcd *rp_etcd_new(const struct rp_etcd_options *o, char *err, size_t errlen)
{
  if (rp_etcd_libs_load(err, errlen) < 0)
    return NULL;
  struct rp_etcd *e = calloc(1, sizeof *e);
  if (!e) {
    snprintf(err, errlen, "out of memory for an etcd client");
    return NULL;
  }
  e->timeout_ms = o->timeout_ms ? o->timeout_ms : 3000;
  e->reply_max = o->reply_max ? o->reply_max : 64 * 1024;
  if (parse_endpoints(e, o->endpoints, err, errlen) < 0) {
    free(e);
    return NULL;
  }
  e->reply = malloc(e->reply_max + 1);
  e->curl = curl_easy_init();
  e->headers = curl_slist_append(NULL, "Content-Type: application/json");
  if (!e->reply || !e->curl || !e->headers) {
    snprintf(err, errlen, "out of memory for an etcd client");
    rp_etcd_free(e);
    return NULL;
  }
  CURL *c = e->curl;
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for DNS timeouts */
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, e->headers);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_reply);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, e);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
  curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  if (o->cacert && o->cacert[0])
    curl_easy_setopt(c, CURLOPT_CAINFO, o->cacert);
  if (o->cert && o->cert[0])
    curl_easy_setopt(c, CURLOPT_SSLCERT, o->cert);
  if (o->key && o->key[0])
    curl_easy_setopt(c, CURLOPT_SSLKEY, o->key);
  return e;
}

void rp_etcd_free(struct rp_etcd *e)
{
  if (!e)
    return;
  if (e->curl)
    curl_easy_cleanup(e->curl);
  curl_slist_free_all(e->headers);
  free(e->reply);
  free(e);
}

const char *rp_etcd_endpoint(const struct rp_etcd *e)
{
  return e->endpoints[e->current];
}

static void watch_take(struct rp_etcd *e);

static size_t on_reply(char *data, size_t size, size_t nmemb, void *arg)
{
  struct rp_etcd *e = arg;
  size_t n = size * nmemb;
  if (e->reply_len + n > e->reply_max) {
    e->reply_overflow = true;
    return 0; /* curl ends the transfer with CURLE_WRITE_ERROR */
  }
  memcpy(e->reply + e->reply_len, data, n);
  e->reply_len += n;
  e->reply[e->reply_len] = '\0';
  if (e->watch)
    watch_take(e);
  return e->lie[0] ? 0 : n;
}

/* The gateway's error body: {"error":"...","code":N,"message":"..."}. */
static void http_error(const struct rp_etcd *e, long status, const char *path, char *err,
                       size_t errlen)
{
  const char *msg = strstr(e->reply, "\"message\":\"");
  int len = 0;
  if (msg) {
    msg += 11;
    len = (int)strcspn(msg, "\"");
  }
  if (status == 404 && !msg) {
    snprintf(err, errlen,
             "%s answered %s with HTTP 404: no etcd v3 gateway there (check "
             "the endpoint's host and port, and that etcd is 3.4 or newer)",
             e->endpoints[e->current], path);
    return;
  }
  snprintf(err, errlen, "etcd at %s refused %s: HTTP %ld%s%.*s", e->endpoints[e->current],
           path, status, msg ? ": " : "", len > 200 ? 200 : len, msg ? msg : "");
}

/* An endpoint whose reply is of the wrong shape failed like one that cannot be reached:
 * whatever answers there is not a working etcd (a program that took its port, a broken
 * proxy). It is named in the log, and the next one is tried. */
static void lied(struct rp_etcd *e, const char *path, const char *how, char *err,
                 size_t errlen)
{
  snprintf(err, errlen,
           "etcd at %s answered %s with a reply of the wrong shape (%s): it "
           "is not a working etcd v3 gateway",
           e->endpoints[e->current], path, how);
  rp_log(RP_LOG_WARN, "etcd: %s; trying the next endpoint", err);
  e->current = (e->current + 1) % e->nendpoints;
}

/* POSTs e->body to path, trying each endpoint once from the current one: the reply is
 * in e->reply. A transport failure, a 5xx (no leader, a member shutting down), a 404
 * (no v3 gateway there: not etcd, or an endpoint's port now held by another program),
 * a reply larger than the buffer or a watch message of the wrong shape moves to the
 * next endpoint; any other refusal is etcd's answer. */
static int post(struct rp_etcd *e, const char *path, long timeout_ms, char *err,
                size_t errlen)
{
  e->overflowed = false;
  for (unsigned tries = 0; tries < e->nendpoints; tries++) {
    snprintf(e->url, sizeof e->url, "%s%s", e->endpoints[e->current], path);
    e->reply_len = 0;
    e->reply[0] = '\0';
    e->reply_overflow = false;
    e->lie[0] = '\0';
    curl_easy_setopt(e->curl, CURLOPT_URL, e->url);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, e->body);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(e->body));
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    CURLcode rc = curl_easy_perform(e->curl);
    long status = 0;
    curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
    if (e->lie[0]) {
      lied(e, path, e->lie, err, errlen);
      continue;
    }
    if (e->reply_overflow) {
      e->overflowed = true;
      snprintf(err, errlen,
               "etcd at %s: the reply to %s is larger than the %zu bytes this "
               "client keeps for one",
               e->endpoints[e->current], path, e->reply_max);
      e->current = (e->current + 1) % e->nendpoints;
      continue;
    }
    if (rc == CURLE_OK && status == 200)
      return 0;
    if (rc == CURLE_OK && status < 500 && status != 404) {
      http_error(e, status, path, err, errlen);
      return -1;
    }
    if (rc == CURLE_OK)
      http_error(e, status, path, err, errlen);
    else if (rc == CURLE_ABORTED_BY_CALLBACK)
      return 0; /* a watch told to stop */
    else
      snprintf(err, errlen, "etcd at %s: %s", e->endpoints[e->current],
               curl_easy_strerror(rc));
    e->current = (e->current + 1) % e->nendpoints;
  }
  return -1;
}

/* A number field of a flat reply, e.g. "TTL":"10" or "ID":123 (int64 travel as strings
 * in the gateway's JSON). No allocation: the keep-alive path runs every few seconds in a
 * locked daemon. -1 when absent. */
static int number_field(const char *json, const char *name, int64_t *out)
{
  char pat[32];
  snprintf(pat, sizeof pat, "\"%s\":", name);
  const char *p = strstr(json, pat);
  if (!p)
    return -1;
  p += strlen(pat);
  if (*p == '"')
    p++;
  char *end;
  errno = 0;
  long long v = strtoll(p, &end, 10);
  if (end == p || errno)
    return -1;
  *out = v;
  return 0;
}

static bool body_fits(int n, char *err, size_t errlen)
{
  if (n < 0 || (size_t)n >= BODY_MAX) {
    snprintf(err, errlen, "etcd request too large");
    return false;
  }
  return true;
}

int rp_etcd_lease_grant(struct rp_etcd *e, unsigned ttl_seconds, int64_t *lease, char *err,
                        size_t errlen)
{
  snprintf(e->body, sizeof e->body, "{\"TTL\":%u}", ttl_seconds);
  if (post(e, "/v3/lease/grant", e->timeout_ms, err, errlen) < 0)
    return -1;
  if (number_field(e->reply, "ID", lease) < 0 || *lease == 0) {
    snprintf(err, errlen, "etcd at %s granted no lease: %.200s", e->endpoints[e->current],
             e->reply);
    return -1;
  }
  return 0;
}

int rp_etcd_lease_keepalive(struct rp_etcd *e, int64_t lease, int64_t *ttl_left, char *err,
                            size_t errlen)
{
  snprintf(e->body, sizeof e->body, "{\"ID\":\"%" PRId64 "\"}", lease);
  if (post(e, "/v3/lease/keepalive", e->timeout_ms, err, errlen) < 0)
    return -1;
  if (strstr(e->reply, "\"error\"")) {
    http_error(e, 200, "/v3/lease/keepalive", err, errlen);
    return -1;
  }
  /* An expired lease comes back without a TTL (proto3 leaves out zeros). */
  if (number_field(e->reply, "TTL", ttl_left) < 0 || *ttl_left < 0)
    *ttl_left = 0;
  return 0;
}

int rp_etcd_lease_revoke(struct rp_etcd *e, int64_t lease, char *err, size_t errlen)
{
  snprintf(e->body, sizeof e->body, "{\"ID\":\"%" PRId64 "\"}", lease);
  return post(e, "/v3/lease/revoke", e->timeout_ms, err, errlen);
}

int rp_etcd_put(struct rp_etcd *e, const char *key, const char *value, int64_t lease,
                char *err, size_t errlen)
{
  size_t klen = strlen(key), vlen = strlen(value);
  if (klen > RP_ETCD_KEY_MAX || vlen > RP_ETCD_VALUE_MAX) {
    snprintf(err, errlen, "etcd key or value too long: %s", key);
    return -1;
  }
  char k64[B64_LEN(RP_ETCD_KEY_MAX)], v64[B64_LEN(RP_ETCD_VALUE_MAX)];
  b64_encode(key, klen, k64);
  b64_encode(value, vlen, v64);
  int n = snprintf(e->body, sizeof e->body,
                   "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":"
                   "\"%" PRId64 "\"}",
                   k64, v64, lease);
  if (!body_fits(n, err, errlen))
    return -1;
  return post(e, "/v3/kv/put", e->timeout_ms, err, errlen);
}

enum range_kind { RANGE_READ, RANGE_KEYS_ONLY, RANGE_WATCH };

/* The request body of a range from start (start_len bytes, any of them) to the end
 * of prefix: a read ({"limit","revision"}, keys only or not) or a watch's
 * create_request. */
static int range_body(struct rp_etcd *e, const char *start, size_t start_len,
                      const char *prefix, unsigned limit, int64_t rev, enum range_kind kind,
                      char *err, size_t errlen)
{
  size_t plen = strlen(prefix);
  if (plen == 0 || plen > RP_ETCD_KEY_MAX || start_len > RP_ETCD_KEY_MAX + 1) {
    snprintf(err, errlen, "etcd prefix empty or too long");
    return -1;
  }
  char end[RP_ETCD_KEY_MAX + 1];
  prefix_end(prefix, end, sizeof end);
  char k64[B64_LEN(RP_ETCD_KEY_MAX + 1)], e64[B64_LEN(RP_ETCD_KEY_MAX)];
  b64_encode(start, start_len, k64);
  b64_encode(end, plen, e64);
  int n;
  if (kind == RANGE_WATCH)
    n = snprintf(e->body, sizeof e->body,
                 "{\"create_request\":{\"key\":\"%s\","
                 "\"range_end\":\"%s\",\"start_revision\":\"%" PRId64 "\"}}",
                 k64, e64, rev);
  else
    n = snprintf(e->body, sizeof e->body,
                 "{\"key\":\"%s\",\"range_end\":\"%s\","
                 "\"limit\":\"%u\",\"revision\":\"%" PRId64 "\"%s}",
                 k64, e64, limit, rev, kind == RANGE_KEYS_ONLY ? ",\"keys_only\":true" : "");
  return body_fits(n, err, errlen) ? 0 : -1;
}

int rp_etcd_delete(struct rp_etcd *e, const char *key, char *err, size_t errlen)
{
  size_t klen = strlen(key);
  if (klen > RP_ETCD_KEY_MAX) {
    snprintf(err, errlen, "etcd key too long: %s", key);
    return -1;
  }
  char k64[B64_LEN(RP_ETCD_KEY_MAX)];
  b64_encode(key, klen, k64);
  snprintf(e->body, sizeof e->body, "{\"key\":\"%s\"}", k64);
  return post(e, "/v3/kv/deleterange", e->timeout_ms, err, errlen);
}

/* ---- range ------------------------------------------------------------------------------ */

/* The most one kv of rampart's takes in a range reply, base64 and metadata included: a
 * page asks for as many as the reply buffer holds. */
#define KV_REPLY_MAX (B64_LEN(RP_ETCD_KEY_MAX) + B64_LEN(RP_ETCD_VALUE_MAX) + 256)
/* A paged read ends within this many calls' timeouts, whatever an endpoint says. */
#define RANGE_CALLS_MAX 10u

static int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
  int c = memcmp(a, b, alen < blen ? alen : blen);
  return c ? c : (alen > blen) - (alen < blen);
}

/* One page from start: a reply of the wrong shape, or one whose last key does not move
 * the read forward within the prefix, is that endpoint failing. */
static int range_page(struct rp_etcd *e, const char *start, size_t start_len,
                      const char *prefix, unsigned limit, int64_t rev, enum range_kind kind,
                      rp_etcd_kv_fn fn, void *arg, struct rp_etcd_range_page *page, char *err,
                      size_t errlen)
{
  size_t plen = strlen(prefix);
  for (unsigned tries = 0; tries < e->nendpoints; tries++) {
    if (range_body(e, start, start_len, prefix, limit, rev, kind, err, errlen) < 0 ||
        post(e, "/v3/kv/range", e->timeout_ms, err, errlen) < 0)
      return -1;
    char how[200];
    if (rp_etcd_reply_range(e->reply, fn, arg, page, how, sizeof how) < 0) {
      lied(e, "/v3/kv/range", how, err, errlen);
      continue;
    }
    if (!page->more)
      return 0;
    if (key_cmp(page->last_key, page->last_key_len, start, start_len) >= 0 &&
        page->last_key_len >= plen && memcmp(page->last_key, prefix, plen) == 0)
      return 0;
    lied(e, "/v3/kv/range", "its last key is not past the read's start within the prefix",
         err, errlen);
  }
  return -1;
}

static void no_kv(void *arg, const char *key, const char *value)
{
}

/* The page at start did not fit the buffer even alone: its first kv is larger than a
 * reply may be, so not rampart's. Its key, read alone, is where the read goes on. */
static int skip_huge_kv(struct rp_etcd *e, const char *start, size_t start_len,
                        const char *prefix, int64_t rev, struct rp_etcd_range_page *page,
                        char *err, size_t errlen)
{
  if (range_page(e, start, start_len, prefix, 1, rev, RANGE_KEYS_ONLY, no_kv, NULL, page, err,
                 errlen) < 0)
    return -1;
  if (page->count == 0 || page->last_key_len == SIZE_MAX) {
    snprintf(err, errlen,
             "etcd at %s: a key under %.100s with a value larger than the %zu "
             "bytes a reply may take%s",
             e->endpoints[e->current], prefix, e->reply_max,
             page->count ? " has a key too long to read past: remove it" : " is gone");
    return -1;
  }
  rp_log(RP_LOG_WARN,
         "etcd: %.200s holds more than the %zu bytes a reply may take: not "
         "rampart's, skipped",
         page->last_key, e->reply_max);
  return 0;
}

int rp_etcd_range_prefix(struct rp_etcd *e, const char *prefix, rp_etcd_kv_fn fn, void *arg,
                         int64_t *revision, char *err, size_t errlen)
{
  size_t plen = strlen(prefix);
  if (plen == 0 || plen > RP_ETCD_KEY_MAX) {
    snprintf(err, errlen, "etcd prefix empty or too long");
    return -1;
  }
  char start[RP_ETCD_KEY_MAX + 1];
  size_t start_len = plen;
  memcpy(start, prefix, plen);
  unsigned full = e->reply_max / KV_REPLY_MAX ? (unsigned)(e->reply_max / KV_REPLY_MAX) : 1;
  unsigned limit = full;
  uint64_t deadline = rp_now_ms() + (uint64_t)RANGE_CALLS_MAX * e->timeout_ms;
  int64_t at = 0; /* every page at the first one's revision: one snapshot */
  for (;;) {
    struct rp_etcd_range_page page;
    int rc = range_page(e, start, start_len, prefix, limit, at, RANGE_READ, fn, arg, &page,
                        err, errlen);
    bool halve = rc < 0 && e->overflowed && limit > 1;
    if (rc < 0 && e->overflowed && limit == 1) {
      rc = skip_huge_kv(e, start, start_len, prefix, at, &page, err, errlen);
      limit = full;
    }
    if (rc < 0 && !halve)
      return -1;
    if (halve) {
      limit /= 2; /* a page that does not fit: fewer keys a page from the same start */
    } else {
      if (at == 0) {
        at = page.revision;
        if (revision)
          *revision = at;
      }
      if (!page.more)
        return 0;
      /* The next page starts at the first key after the last: last_key + NUL. */
      memcpy(start, page.last_key, page.last_key_len);
      start[page.last_key_len] = '\0';
      start_len = page.last_key_len + 1;
    }
    if (rp_now_ms() >= deadline) {
      char how[120];
      snprintf(how, sizeof how, "more keys under %.60s after %u s of pages", prefix,
               RANGE_CALLS_MAX * e->timeout_ms / 1000u);
      lied(e, "/v3/kv/range", how, err, errlen);
      return -1;
    }
  }
}

/* ---- watch ------------------------------------------------------------------------------ */

struct watch_state {
  rp_etcd_event_fn fn;
  void (*live)(void *arg);
  bool (*stop)(void *arg);
  void *arg;
  uint64_t deadline_ms;
  int64_t start_revision;
  struct rp_etcd_watch_reply reply;
  bool canceled;
  char why[200];
};

/* The gateway streams one JSON message a line: hand on every complete line. A message
 * of the wrong shape stops the transfer (e->lie says how) and takes back the revision
 * that endpoint moved the watch to. */
static void watch_take(struct rp_etcd *e)
{
  struct watch_state *w = e->watch;
  char *start = e->reply;
  char *nl;
  while ((nl = memchr(start, '\n', e->reply_len - (size_t)(start - e->reply)))) {
    *nl = '\0';
    char why[sizeof w->why];
    if (rp_etcd_reply_watch(start, w->fn, w->arg, &w->reply, why, sizeof why) < 0) {
      snprintf(e->lie, sizeof e->lie, "%s", why);
      w->reply.next_revision = w->start_revision;
      return;
    }
    if (w->reply.created && w->live)
      w->live(w->arg);
    if (w->reply.canceled && !w->canceled) {
      w->canceled = true;
      snprintf(w->why, sizeof w->why, "%s", why);
    }
    start = nl + 1;
  }
  size_t rest = e->reply_len - (size_t)(start - e->reply);
  memmove(e->reply, start, rest);
  e->reply_len = rest;
  e->reply[rest] = '\0';
}

static int on_watch_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                             curl_off_t un)
{
  struct rp_etcd *e = arg;
  struct watch_state *w = e->watch;
  if (w->canceled || (w->stop && w->stop(w->arg)) ||
      (w->deadline_ms && rp_now_ms() >= w->deadline_ms))
    return 1;
  return 0;
}

int rp_etcd_watch_prefix(struct rp_etcd *e, const char *prefix, int64_t start_revision,
                         rp_etcd_event_fn fn, void (*live)(void *arg),
                         bool (*stop)(void *arg), void *arg, unsigned max_ms,
                         int64_t *next_revision, char *err, size_t errlen)
{
  struct watch_state w = {
    .fn = fn,
    .live = live,
    .stop = stop,
    .arg = arg,
    .deadline_ms = max_ms ? rp_now_ms() + max_ms : 0,
    .start_revision = start_revision,
    .reply.next_revision = start_revision,
  };
  if (start_revision < 0 || start_revision == INT64_MAX) {
    snprintf(err, errlen, "etcd watch from revision %" PRId64 ": not a revision",
             start_revision);
    return -1;
  }
  if (range_body(e, prefix, strlen(prefix), prefix, 0, start_revision, RANGE_WATCH, err,
                 errlen) < 0)
    return -1;
  e->watch = &w;
  curl_easy_setopt(e->curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(e->curl, CURLOPT_XFERINFOFUNCTION, on_watch_progress);
  curl_easy_setopt(e->curl, CURLOPT_XFERINFODATA, e);
  int rc = post(e, "/v3/watch", 0, err, errlen);
  curl_easy_setopt(e->curl, CURLOPT_NOPROGRESS, 1L);
  e->watch = NULL;
  *next_revision = w.reply.next_revision;
  if (rc == 0 && w.canceled) {
    snprintf(err, errlen, "etcd at %s: %s", e->endpoints[e->current], w.why);
    return -1;
  }
  if (rc == 0 && !(stop && stop(arg)) && !(w.deadline_ms && rp_now_ms() >= w.deadline_ms)) {
    snprintf(err, errlen, "etcd at %s ended the watch", e->endpoints[e->current]);
    return -1;
  }
  return rc;
}
