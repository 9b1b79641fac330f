/* The parsers of etcd's gateway replies (see etcd_reply.h). Every reply is walked
 * twice: once to check each value's type and range, then, only when all of it holds,
 * to hand its keys on, so a reply of the wrong shape changes nothing. */
#include "etcd_reply.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "etcd_libs.h"

#define B64_LEN(n) (((n) + 2) / 3 * 4 + 1)
#define DECODE_MAX (RP_ETCD_VALUE_MAX > RP_ETCD_KEY_MAX ? RP_ETCD_VALUE_MAX : RP_ETCD_KEY_MAX)

enum decoded { DECODED, NOT_BASE64, TOO_LONG };

/* Decodes base64 text into out (cap bytes, NUL terminated; *len the bytes decoded).
 * TOO_LONG without looking further when it decodes to more than cap - 1 bytes. */
static enum decoded b64_decode(const char *in, char *out, size_t cap, size_t *len)
{
  size_t n = strlen(in);
  if (n % 4 != 0)
    return NOT_BASE64;
  size_t pad = (n >= 1 && in[n - 1] == '=') + (n >= 2 && in[n - 2] == '=');
  size_t bytes = n / 4 * 3 - pad;
  if (bytes > cap - 1 || bytes > DECODE_MAX)
    return TOO_LONG;
  unsigned char tmp[DECODE_MAX + 3];
  /* Whole blocks only: OpenSSL trims white space, which would shift the blocks. */
  if (n > 0 && EVP_DecodeBlock(tmp, (const unsigned char *)in, (int)n) != (int)(n / 4 * 3))
    return NOT_BASE64;
  memcpy(out, tmp, bytes);
  out[bytes] = '\0';
  *len = bytes;
  return DECODED;
}

/* A member of o: 1 and *out when present with the type wanted, 0 when absent, -1 (with
 * why) when present with another type. JSON null is a type like any other. */
static int member(struct json_object *o, const char *name, enum json_type type,
                  struct json_object **out, const char *where, char *why, size_t whylen)
{
  if (!json_object_object_get_ex(o, name, out))
    return 0;
  if (*out && json_object_is_type(*out, type))
    return 1;
  static const char *const names[] = {
    [json_type_null] = "null",        [json_type_boolean] = "a boolean",
    [json_type_double] = "a number",  [json_type_int] = "a number",
    [json_type_object] = "an object", [json_type_array] = "an array",
    [json_type_string] = "a string",
  };
  snprintf(why, whylen, "%s \"%s\" is not %s", where, name, names[type]);
  return -1;
}

/* A revision: the gateway writes int64 as a decimal string; a JSON integer is taken
 * too. 0 to INT64_MAX - 1, so that the revision after it is a revision. */
static int revision(struct json_object *o, const char *name, int64_t *out, const char *where,
                    char *why, size_t whylen)
{
  struct json_object *v;
  if (!json_object_object_get_ex(o, name, &v))
    return 0;
  int64_t r = -1;
  if (v && json_object_is_type(v, json_type_string)) {
    const char *s = json_object_get_string(v);
    size_t n = strlen(s);
    if (n >= 1 && n <= 19 && strspn(s, "0123456789") == n) {
      r = 0;
      for (size_t i = 0; i < n && r >= 0; i++)
        r = r > (INT64_MAX - (s[i] - '0')) / 10 ? -1 : r * 10 + (s[i] - '0');
    }
  } else if (v && json_object_is_type(v, json_type_int)) {
    r = json_object_get_int64(v);
  }
  if (r < 0 || r == INT64_MAX) {
    snprintf(why, whylen, "%s \"%s\" is %.40s, not a revision from 0 to %lld", where, name,
             v ? json_object_get_string(v) : "null", (long long)INT64_MAX - 1);
    return -1;
  }
  *out = r;
  return 1;
}

/* One kv object: {"key":B64,"value":B64,"mod_revision":"N",...}. Checks it, and with
 * apply hands it on. *mod_revision is 0 when absent. */
struct kv_sink {
  bool apply;
  rp_etcd_kv_fn kv_fn;
  rp_etcd_event_fn event_fn;
  void *arg;
  bool deleted;
};

static int take_kv(struct json_object *kv, const struct kv_sink *to, char *raw_key,
                   size_t *raw_len, int64_t *mod_revision, char *why, size_t whylen)
{
  struct json_object *k, *v = NULL;
  char key[RP_ETCD_KEY_MAX + 1], value[RP_ETCD_VALUE_MAX + 1] = "";
  size_t klen = 0, vlen = 0;
  *mod_revision = 0;
  if (!kv || !json_object_is_type(kv, json_type_object)) {
    snprintf(why, whylen, "a kv is not an object");
    return -1;
  }
  int has_key = member(kv, "key", json_type_string, &k, "a kv's", why, whylen);
  if (has_key == 0)
    snprintf(why, whylen, "a kv has no \"key\"");
  if (has_key <= 0 || member(kv, "value", json_type_string, &v, "a kv's", why, whylen) < 0 ||
      revision(kv, "mod_revision", mod_revision, "a kv's", why, whylen) < 0)
    return -1;
  enum decoded dk = b64_decode(json_object_get_string(k), key, sizeof key, &klen);
  enum decoded dv = v ? b64_decode(json_object_get_string(v), value, sizeof value, &vlen)
                      : DECODED;
  if (dk == NOT_BASE64 || dv == NOT_BASE64) {
    snprintf(why, whylen, "a kv's \"%s\" is not base64", dk == NOT_BASE64 ? "key" : "value");
    return -1;
  }
  if (raw_key && dk == DECODED) {
    memcpy(raw_key, key, klen + 1);
    *raw_len = klen;
  } else if (raw_key) {
    *raw_len = SIZE_MAX; /* too long to continue from */
  }
  /* Well formed, but not a key or value rampart writes: not ours, skipped. */
  if (!to->apply || dk != DECODED || dv != DECODED || memchr(key, '\0', klen) ||
      memchr(value, '\0', vlen))
    return 0;
  if (to->kv_fn)
    to->kv_fn(to->arg, key, value);
  else
    to->event_fn(to->arg, to->deleted, key, value);
  return 0;
}

/* ---- range ------------------------------------------------------------------------------- */

static int header_revision(struct json_object *o, int64_t *rev, bool required, char *why,
                           size_t whylen)
{
  struct json_object *h;
  int has = member(o, "header", json_type_object, &h, "the reply's", why, whylen);
  if (has < 0)
    return -1;
  int got = has ? revision(h, "revision", rev, "the header's", why, whylen) : 0;
  if (got < 0)
    return -1;
  if (got == 0 && required) {
    snprintf(why, whylen, "the reply has no header revision");
    return -1;
  }
  return 0;
}

static int range_walk(struct json_object *root, const struct kv_sink *to,
                      struct rp_etcd_range_page *page, char *why, size_t whylen)
{
  struct json_object *kvs, *more;
  int has_kvs = member(root, "kvs", json_type_array, &kvs, "the reply's", why, whylen);
  if (has_kvs < 0 ||
      member(root, "more", json_type_boolean, &more, "the reply's", why, whylen) < 0)
    return -1;
  page->count = has_kvs ? (unsigned)json_object_array_length(kvs) : 0;
  page->last_key_len = 0;
  for (unsigned i = 0; i < page->count; i++) {
    int64_t mod;
    if (take_kv(json_object_array_get_idx(kvs, i), to, page->last_key, &page->last_key_len,
                &mod, why, whylen) < 0)
      return -1;
  }
  return 0;
}

int rp_etcd_reply_range(const char *json, rp_etcd_kv_fn fn, void *arg,
                        struct rp_etcd_range_page *page, char *why, size_t whylen)
{
  memset(page, 0, sizeof *page);
  struct json_object *root = json_tokener_parse(json);
  if (!root || !json_object_is_type(root, json_type_object)) {
    snprintf(why, whylen, "the reply is not a JSON object");
    json_object_put(root);
    return -1;
  }
  struct kv_sink check = { .apply = false, .kv_fn = fn, .arg = arg };
  struct kv_sink apply = { .apply = true, .kv_fn = fn, .arg = arg };
  struct json_object *more;
  int rc = header_revision(root, &page->revision, true, why, whylen) < 0 ||
               range_walk(root, &check, page, why, whylen) < 0
             ? -1
             : 0;
  if (rc == 0 && page->revision == 0) {
    snprintf(why, whylen, "the header's revision is 0: etcd's store starts at 1");
    rc = -1;
  }
  page->more = rc == 0 && json_object_object_get_ex(root, "more", &more) &&
               json_object_get_boolean(more);
  if (rc == 0 && page->more && (page->count == 0 || page->last_key_len == SIZE_MAX)) {
    snprintf(why, whylen,
             page->count == 0 ? "the reply says more keys follow, and has none"
                              : "more keys follow a key longer than %u bytes",
             RP_ETCD_KEY_MAX);
    rc = -1;
  }
  if (rc == 0)
    range_walk(root, &apply, page, why, whylen);
  json_object_put(root);
  return rc;
}

/* ---- watch ------------------------------------------------------------------------------- */

static int events_walk(struct json_object *events, const struct kv_sink *base,
                       int64_t *next_revision, char *why, size_t whylen)
{
  size_t n = json_object_array_length(events);
  for (size_t i = 0; i < n; i++) {
    struct json_object *ev = json_object_array_get_idx(events, i), *t, *kv;
    if (!ev || !json_object_is_type(ev, json_type_object)) {
      snprintf(why, whylen, "an event is not an object");
      return -1;
    }
    struct kv_sink to = *base;
    int has_type = member(ev, "type", json_type_string, &t, "an event's", why, whylen);
    if (has_type < 0)
      return -1;
    /* proto3 leaves out a zero enum: no type is a PUT */
    const char *type = has_type ? json_object_get_string(t) : "PUT";
    if (strcmp(type, "PUT") != 0 && strcmp(type, "DELETE") != 0) {
      snprintf(why, whylen, "an event's \"type\" is \"%.40s\", not PUT or DELETE", type);
      return -1;
    }
    to.deleted = strcmp(type, "DELETE") == 0;
    int has_kv = member(ev, "kv", json_type_object, &kv, "an event's", why, whylen);
    if (has_kv == 0)
      snprintf(why, whylen, "an event has no \"kv\"");
    int64_t mod;
    if (has_kv <= 0 || take_kv(kv, &to, NULL, NULL, &mod, why, whylen) < 0)
      return -1;
    if (to.apply && mod >= *next_revision)
      *next_revision = mod + 1;
  }
  return 0;
}

/* An object without "result" is etcd's error, which ends the watch. */
static int watch_error(struct json_object *msg, struct rp_etcd_watch_reply *w, char *why,
                       size_t whylen)
{
  struct json_object *e, *m;
  if (!json_object_object_get_ex(msg, "error", &e)) {
    snprintf(why, whylen, "a watch message has neither \"result\" nor \"error\"");
    return -1;
  }
  w->canceled = true;
  if (e && json_object_is_type(e, json_type_object) &&
      json_object_object_get_ex(e, "message", &m) && m &&
      json_object_is_type(m, json_type_string))
    snprintf(why, whylen, "etcd ended the watch: %.160s", json_object_get_string(m));
  else
    snprintf(why, whylen, "etcd ended the watch: %.160s", json_object_to_json_string(msg));
  return 0;
}

static int watch_result(struct json_object *res, rp_etcd_event_fn fn, void *arg,
                        struct rp_etcd_watch_reply *w, char *why, size_t whylen)
{
  struct json_object *created, *canceled, *events;
  int64_t rev = 0, compact = 0;
  int has_created = member(res, "created", json_type_boolean, &created, "the result's", why,
                           whylen);
  int has_canceled = member(res, "canceled", json_type_boolean, &canceled, "the result's",
                            why, whylen);
  int has_events = member(res, "events", json_type_array, &events, "the result's", why,
                          whylen);
  if (has_created < 0 || has_canceled < 0 || has_events < 0 ||
      header_revision(res, &rev, false, why, whylen) < 0)
    return -1;
  int has_compact = revision(res, "compact_revision", &compact, "the result's", why, whylen);
  if (has_compact < 0)
    return -1;
  struct kv_sink check = { .apply = false, .event_fn = fn, .arg = arg };
  int64_t next = w->next_revision;
  if (has_events && events_walk(events, &check, &next, why, whylen) < 0)
    return -1;
  w->created = has_created && json_object_get_boolean(created);
  if (w->created && rev > 0 && w->next_revision == 0)
    w->next_revision = rev + 1;
  if (has_canceled && json_object_get_boolean(canceled)) {
    w->canceled = true;
    if (has_compact)
      w->next_revision = 0; /* compacted past us: the caller reads everything again */
    snprintf(why, whylen, "the watch was canceled by etcd");
  }
  struct kv_sink apply = { .apply = true, .event_fn = fn, .arg = arg };
  if (has_events)
    events_walk(events, &apply, &w->next_revision, why, whylen);
  return 0;
}

int rp_etcd_reply_watch(const char *line, rp_etcd_event_fn fn, void *arg,
                        struct rp_etcd_watch_reply *w, char *why, size_t whylen)
{
  w->created = w->canceled = false;
  if (line[strspn(line, " \t\r")] == '\0')
    return 0;
  struct json_object *msg = json_tokener_parse(line), *res;
  int rc;
  if (!msg || !json_object_is_type(msg, json_type_object)) {
    snprintf(why, whylen, "a watch message is not a JSON object");
    rc = -1;
  } else {
    int has = member(msg, "result", json_type_object, &res, "the message's", why, whylen);
    rc = has < 0    ? -1
         : has == 0 ? watch_error(msg, w, why, whylen)
                    : watch_result(res, fn, arg, w, why, whylen);
  }
  json_object_put(msg);
  return rc;
}
