/* etcd's JSON gateway, spoken with libcurl and json-c (see etcd_gateway.h). */
#include "etcd_gateway.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "etcd_libs.h"

#define B64_LEN(n) (((n) + 2) / 3 * 4 + 1)
#define BODY_MAX (B64_LEN(RP_ETCD_KEY_MAX) * 2 + B64_LEN(RP_ETCD_VALUE_MAX) + 256)

struct rp_etcd {
  CURL *curl;
  struct curl_slist *headers;
  char endpoints[RP_ETCD_MAX_ENDPOINTS][RP_ETCD_URL_LEN];
  unsigned nendpoints, current;
  unsigned timeout_ms;
  char *reply;            /* reply_max + 1 bytes, preallocated */
  size_t reply_len, reply_max;
  bool reply_overflow;
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

/* Decodes into out (cap bytes, NUL terminated, cut to fit). -1 when not base64. */
static int b64_decode(const char *in, char *out, size_t cap)
{
  size_t n = strlen(in);
  if (n % 4 != 0)
    return -1;
  unsigned char tmp[B64_LEN(RP_ETCD_VALUE_MAX)];
  if (n / 4 * 3 > sizeof tmp)
    n = sizeof tmp / 3 * 4;
  int got = EVP_DecodeBlock(tmp, (const unsigned char *)in, (int)n);
  if (got < 0)
    return -1;
  if (n >= 1 && in[n - 1] == '=')
    got--;
  if (n >= 2 && in[n - 2] == '=')
    got--;
  size_t take = (size_t)got < cap - 1 ? (size_t)got : cap - 1;
  memcpy(out, tmp, take);
  out[take] = '\0';
  return 0;
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
        snprintf(err, errlen, "etcd endpoint '%s': use http://HOST:PORT or "
                 "https://HOST:PORT", ep);
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
    snprintf(err, errlen, "no etcd endpoint given: list them as "
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
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);   /* threads: no SIGALRM for DNS timeouts */
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
  return n;
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
    snprintf(err, errlen, "%s answered %s with HTTP 404: no etcd v3 gateway there (check "
             "the endpoint's host and port, and that etcd is 3.4 or newer)",
             e->endpoints[e->current], path);
    return;
  }
  snprintf(err, errlen, "etcd at %s refused %s: HTTP %ld%s%.*s", e->endpoints[e->current],
           path, status, msg ? ": " : "", len > 200 ? 200 : len, msg ? msg : "");
}

/* POSTs e->body to path, trying each endpoint once from the current one: the reply is
 * in e->reply. A transport failure, a 5xx (no leader, a member shutting down) or a 404
 * (no v3 gateway there: not etcd, or an endpoint's port now held by another program)
 * moves to the next endpoint; any other refusal is etcd's answer. */
static int post(struct rp_etcd *e, const char *path, long timeout_ms, char *err,
                size_t errlen)
{
  for (unsigned tries = 0; tries < e->nendpoints; tries++) {
    snprintf(e->url, sizeof e->url, "%s%s", e->endpoints[e->current], path);
    e->reply_len = 0;
    e->reply[0] = '\0';
    e->reply_overflow = false;
    curl_easy_setopt(e->curl, CURLOPT_URL, e->url);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, e->body);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(e->body));
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    CURLcode rc = curl_easy_perform(e->curl);
    long status = 0;
    curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
    if (e->reply_overflow) {
      snprintf(err, errlen, "etcd at %s: the reply to %s is larger than the %zu bytes this "
               "client keeps for one", e->endpoints[e->current], path, e->reply_max);
      return -1;
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
  if (number_field(e->reply, "TTL", ttl_left) < 0)
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
  int n = snprintf(e->body, sizeof e->body, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":"
                   "\"%" PRId64 "\"}", k64, v64, lease);
  if (!body_fits(n, err, errlen))
    return -1;
  return post(e, "/v3/kv/put", e->timeout_ms, err, errlen);
}

static int range_body(struct rp_etcd *e, const char *prefix, const char *fmt_tail,
                      int64_t rev, char *err, size_t errlen)
{
  size_t plen = strlen(prefix);
  if (plen == 0 || plen > RP_ETCD_KEY_MAX) {
    snprintf(err, errlen, "etcd prefix empty or too long");
    return -1;
  }
  char end[RP_ETCD_KEY_MAX + 1];
  prefix_end(prefix, end, sizeof end);
  char k64[B64_LEN(RP_ETCD_KEY_MAX)], e64[B64_LEN(RP_ETCD_KEY_MAX)];
  b64_encode(prefix, plen, k64);
  b64_encode(end, plen, e64);
  int n;
  if (fmt_tail)
    n = snprintf(e->body, sizeof e->body, "{\"create_request\":{\"key\":\"%s\","
                 "\"range_end\":\"%s\",\"start_revision\":\"%" PRId64 "\"}}", k64, e64, rev);
  else
    n = snprintf(e->body, sizeof e->body, "{\"key\":\"%s\",\"range_end\":\"%s\"}", k64,
                 e64);
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

/* One kv object of a reply: {"key":B64,"value":B64,...}. */
static void take_kv(struct json_object *kv, bool deleted, rp_etcd_kv_fn fn,
                    rp_etcd_event_fn efn, void *arg)
{
  struct json_object *k, *v;
  char key[RP_ETCD_KEY_MAX + 1], value[RP_ETCD_VALUE_MAX + 1] = "";
  if (!json_object_object_get_ex(kv, "key", &k) ||
      b64_decode(json_object_get_string(k), key, sizeof key) < 0)
    return;
  if (json_object_object_get_ex(kv, "value", &v) &&
      b64_decode(json_object_get_string(v), value, sizeof value) < 0)
    return;
  if (fn)
    fn(arg, key, value);
  else
    efn(arg, deleted, key, value);
}

static int64_t header_revision(struct json_object *o)
{
  struct json_object *h, *r;
  if (json_object_object_get_ex(o, "header", &h) &&
      json_object_object_get_ex(h, "revision", &r))
    return json_object_get_int64(r);
  return 0;
}

int rp_etcd_range_prefix(struct rp_etcd *e, const char *prefix, rp_etcd_kv_fn fn,
                         void *arg, int64_t *revision, char *err, size_t errlen)
{
  if (range_body(e, prefix, NULL, 0, err, errlen) < 0 ||
      post(e, "/v3/kv/range", e->timeout_ms, err, errlen) < 0)
    return -1;
  struct json_object *root = json_tokener_parse(e->reply);
  if (!root) {
    snprintf(err, errlen, "etcd at %s: a range reply that is not JSON",
             e->endpoints[e->current]);
    return -1;
  }
  if (revision)
    *revision = header_revision(root);
  struct json_object *kvs;
  if (json_object_object_get_ex(root, "kvs", &kvs)) {
    size_t n = json_object_array_length(kvs);
    for (size_t i = 0; i < n; i++)
      take_kv(json_object_array_get_idx(kvs, i), false, fn, NULL, arg);
  }
  json_object_put(root);
  return 0;
}

/* ---- watch ------------------------------------------------------------------------------ */

struct watch_state {
  rp_etcd_event_fn fn;
  void (*live)(void *arg);
  bool (*stop)(void *arg);
  void *arg;
  uint64_t deadline_ms;
  int64_t next_revision;
  bool canceled;
  char why[200];
};

static void watch_message(struct watch_state *w, struct json_object *msg)
{
  struct json_object *res, *x;
  if (!json_object_object_get_ex(msg, "result", &res)) {
    w->canceled = true;
    snprintf(w->why, sizeof w->why, "%.190s", json_object_to_json_string(msg));
    return;
  }
  int64_t rev = header_revision(res);
  if (json_object_object_get_ex(res, "created", &x) && json_object_get_boolean(x)) {
    if (rev > 0 && w->next_revision == 0)
      w->next_revision = rev + 1;
    if (w->live)
      w->live(w->arg);
  }
  if (json_object_object_get_ex(res, "canceled", &x) && json_object_get_boolean(x)) {
    w->canceled = true;
    if (json_object_object_get_ex(res, "compact_revision", &x))
      w->next_revision = 0; /* compacted past us: the caller reads everything again */
    snprintf(w->why, sizeof w->why, "the watch was canceled by etcd");
  }
  struct json_object *events;
  if (json_object_object_get_ex(res, "events", &events)) {
    size_t n = json_object_array_length(events);
    for (size_t i = 0; i < n; i++) {
      struct json_object *ev = json_object_array_get_idx(events, i), *t, *kv;
      bool deleted = json_object_object_get_ex(ev, "type", &t) &&
                     strcmp(json_object_get_string(t), "DELETE") == 0;
      if (json_object_object_get_ex(ev, "kv", &kv)) {
        take_kv(kv, deleted, NULL, w->fn, w->arg);
        struct json_object *mr;
        if (json_object_object_get_ex(kv, "mod_revision", &mr) &&
            json_object_get_int64(mr) >= w->next_revision)
          w->next_revision = json_object_get_int64(mr) + 1;
      }
    }
  }
}

/* The gateway streams one JSON message a line: hand on every complete line. */
static void watch_take(struct rp_etcd *e)
{
  char *start = e->reply;
  char *nl;
  while ((nl = memchr(start, '\n', e->reply_len - (size_t)(start - e->reply)))) {
    *nl = '\0';
    struct json_object *msg = json_tokener_parse(start);
    if (msg) {
      watch_message(e->watch, msg);
      json_object_put(msg);
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
    .fn = fn, .live = live, .stop = stop, .arg = arg,
    .deadline_ms = max_ms ? rp_now_ms() + max_ms : 0, .next_revision = start_revision,
  };
  if (range_body(e, prefix, "watch", start_revision, err, errlen) < 0)
    return -1;
  e->watch = &w;
  curl_easy_setopt(e->curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(e->curl, CURLOPT_XFERINFOFUNCTION, on_watch_progress);
  curl_easy_setopt(e->curl, CURLOPT_XFERINFODATA, e);
  int rc = post(e, "/v3/watch", 0, err, errlen);
  curl_easy_setopt(e->curl, CURLOPT_NOPROGRESS, 1L);
  e->watch = NULL;
  *next_revision = w.next_revision;
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
