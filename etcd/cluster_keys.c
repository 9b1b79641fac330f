/* The cluster's keys in etcd (see cluster_keys.h). */
#include "cluster_keys.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_libs.h"

bool rp_cluster_name_ok(const char *name)
{
  size_t n = strlen(name);
  if (n == 0 || n >= RP_CLUSTER_NAME_LEN)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)name[i]) && !strchr("-_.", name[i]))
      return false;
  return true;
}

int rp_cluster_prefix(char *out, size_t len, const char *cluster)
{
  int n = snprintf(out, len, "/rampart/%s/", cluster);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

int rp_cluster_key(char *out, size_t len, const char *cluster, const char *kind,
                   const char *id)
{
  int n = snprintf(out, len, "/rampart/%s/%s/%s", cluster, kind, id);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

int rp_cluster_server_value(char *out, size_t len, const char *address, const char *domain,
                            uint64_t capacity_pages, const char *version)
{
  int n = snprintf(out, len,
                   "{\"address\":\"%s\",\"domain\":\"%s\",\"capacity_pages\":%" PRIu64
                   ",\"version\":\"%s\"}",
                   address, domain, capacity_pages, version);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

int rp_cluster_free_value(char *out, size_t len, uint64_t free_pages, bool pressure,
                          bool draining)
{
  int n = snprintf(out, len, "{\"free_pages\":%" PRIu64 ",\"pressure\":%s,\"draining\":%s}",
                   free_pages, pressure ? "true" : "false", draining ? "true" : "false");
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

int rp_cluster_registry_init(struct rp_cluster_registry *r, const char *cluster, unsigned cap,
                             char *err, size_t errlen)
{
  memset(r, 0, sizeof *r);
  if (rp_etcd_libs_load(err, errlen) < 0)
    return -1;
  if (!rp_cluster_name_ok(cluster) ||
      rp_cluster_prefix(r->prefix, sizeof r->prefix, cluster) < 0) {
    snprintf(err, errlen, "cluster name '%s': use letters, digits, '-', '_' and '.' only",
             cluster);
    return -1;
  }
  r->servers = calloc(cap, sizeof *r->servers);
  if (!r->servers) {
    snprintf(err, errlen, "out of memory for a registry of %u servers", cap);
    return -1;
  }
  r->cap = cap;
  return 0;
}

void rp_cluster_registry_free(struct rp_cluster_registry *r)
{
  free(r->servers);
  r->servers = NULL;
  r->n = r->cap = 0;
}

/* An entry whose ID has neither key any more: it may be given to another ID. */
static bool gone(const struct rp_cluster_server *s)
{
  return !s->registered && !s->advertised && !s->unread_server && !s->unread_free;
}

/* The entry of id; with add, a new one (a gone one reused, else the next): -1 when the
 * ID is too long or every entry holds a live ID. */
static int find_or_add(struct rp_cluster_registry *r, const char *id, bool add)
{
  int reuse = -1;
  for (unsigned i = 0; i < r->n; i++) {
    if (strcmp(r->servers[i].id, id) == 0)
      return (int)i;
    if (reuse < 0 && gone(&r->servers[i]))
      reuse = (int)i;
  }
  if (!add || strlen(id) >= RP_CLUSTER_ID_LEN)
    return -1;
  if (reuse < 0 && r->n == r->cap)
    return -1;
  if (reuse < 0)
    reuse = (int)r->n++;
  struct rp_cluster_server *s = &r->servers[reuse];
  uint32_t generation = s->generation + 1;
  memset(s, 0, sizeof *s);
  s->generation = generation;
  snprintf(s->id, sizeof s->id, "%s", id);
  return reuse;
}

/* A value's fields are taken only with the type rampartd writes: text that does not fit
 * is empty (cut, an address would name another server), a number that is not a
 * non-negative integer is 0, a flag that is not a boolean is false. */
static void copy_field(struct json_object *o, const char *name, char *dst, size_t len)
{
  struct json_object *v;
  dst[0] = '\0';
  if (json_object_object_get_ex(o, name, &v) && v &&
      json_object_is_type(v, json_type_string) && strlen(json_object_get_string(v)) < len)
    snprintf(dst, len, "%s", json_object_get_string(v));
}

static uint64_t number(struct json_object *o, const char *name)
{
  struct json_object *v;
  if (!json_object_object_get_ex(o, name, &v) || !v || !json_object_is_type(v, json_type_int))
    return 0;
  int64_t n = json_object_get_int64(v);
  return n < 0 ? 0 : (uint64_t)n;
}

static bool flag(struct json_object *o, const char *name)
{
  struct json_object *v;
  return json_object_object_get_ex(o, name, &v) && v &&
         json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
}

int rp_cluster_registry_take(struct rp_cluster_registry *r, bool deleted, const char *key,
                             const char *value)
{
  size_t plen = strlen(r->prefix);
  if (strncmp(key, r->prefix, plen) != 0)
    return -1;
  const char *rest = key + plen;
  bool is_server = strncmp(rest, "servers/", 8) == 0;
  bool is_free = strncmp(rest, "free/", 5) == 0;
  if (!is_server && !is_free)
    return -1;
  int at = find_or_add(r, rest + (is_server ? 8 : 5), !deleted);
  if (at < 0)
    return -1;
  struct rp_cluster_server *s = &r->servers[at];
  if (is_server)
    s->unread_server = false;
  else
    s->unread_free = false;
  if (deleted) {
    if (is_server)
      s->registered = false;
    else
      s->advertised = false;
    return at;
  }
  struct json_object *o = json_tokener_parse(value);
  if (!o || !json_object_is_type(o, json_type_object)) {
    json_object_put(o);
    return -1;
  }
  if (is_server) {
    copy_field(o, "address", s->address, sizeof s->address);
    copy_field(o, "domain", s->domain, sizeof s->domain);
    s->capacity_pages = number(o, "capacity_pages");
    s->registered = s->address[0] != '\0';
  } else {
    s->free_pages = number(o, "free_pages");
    s->pressure = flag(o, "pressure");
    s->draining = flag(o, "draining");
    s->advertised = true;
  }
  json_object_put(o);
  return at;
}

static void take_read(void *arg, const char *key, const char *value)
{
  rp_cluster_registry_take(arg, false, key, value);
}

/* Reads the servers' keys only (servers/ and free/, each paged), not the rest of the
 * prefix (devices' records, whatever else is stored there). An entry not seen by the
 * read loses its flags once the read has succeeded; until then it keeps them, so a read
 * that fails half way takes nothing away. */
int rp_cluster_registry_read(struct rp_cluster_registry *r, struct rp_etcd *e,
                             int64_t *revision, char *err, size_t errlen)
{
  for (unsigned i = 0; i < r->n; i++) {
    r->servers[i].unread_server = r->servers[i].registered;
    r->servers[i].unread_free = r->servers[i].advertised;
  }
  char servers[sizeof r->prefix + 16], free_prefix[sizeof r->prefix + 16];
  snprintf(servers, sizeof servers, "%sservers/", r->prefix);
  snprintf(free_prefix, sizeof free_prefix, "%sfree/", r->prefix);
  int64_t rev = 0;
  if (rp_etcd_range_prefix(e, servers, take_read, r, &rev, err, errlen) < 0 ||
      rp_etcd_range_prefix(e, free_prefix, take_read, r, NULL, err, errlen) < 0)
    return -1;
  for (unsigned i = 0; i < r->n; i++) {
    struct rp_cluster_server *s = &r->servers[i];
    s->registered = s->registered && !s->unread_server;
    s->advertised = s->advertised && !s->unread_free;
    s->unread_server = s->unread_free = false;
  }
  if (revision)
    *revision = rev;
  return 0;
}
