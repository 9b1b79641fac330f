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
  int n = snprintf(out, len, "{\"address\":\"%s\",\"domain\":\"%s\",\"capacity_pages\":%"
                   PRIu64 ",\"version\":\"%s\"}", address, domain, capacity_pages, version);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

int rp_cluster_free_value(char *out, size_t len, uint64_t free_pages, bool pressure,
                          bool draining)
{
  int n = snprintf(out, len, "{\"free_pages\":%" PRIu64 ",\"pressure\":%s,\"draining\":%s}",
                   free_pages, pressure ? "true" : "false", draining ? "true" : "false");
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

int rp_cluster_registry_init(struct rp_cluster_registry *r, const char *cluster,
                             unsigned cap, char *err, size_t errlen)
{
  memset(r, 0, sizeof *r);
  if (rp_etcd_libs_load(err, errlen) < 0)
    return -1;
  if (!rp_cluster_name_ok(cluster) || rp_cluster_prefix(r->prefix, sizeof r->prefix, cluster) < 0) {
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

static int find_or_add(struct rp_cluster_registry *r, const char *id)
{
  for (unsigned i = 0; i < r->n; i++)
    if (strcmp(r->servers[i].id, id) == 0)
      return (int)i;
  if (r->n == r->cap || strlen(id) >= RP_CLUSTER_ID_LEN)
    return -1;
  struct rp_cluster_server *s = &r->servers[r->n];
  memset(s, 0, sizeof *s);
  snprintf(s->id, sizeof s->id, "%s", id);
  return (int)r->n++;
}

static void copy_field(struct json_object *o, const char *name, char *dst, size_t len)
{
  struct json_object *v;
  if (json_object_object_get_ex(o, name, &v))
    snprintf(dst, len, "%s", json_object_get_string(v));
}

static uint64_t number(struct json_object *o, const char *name)
{
  struct json_object *v;
  if (!json_object_object_get_ex(o, name, &v))
    return 0;
  int64_t n = json_object_get_int64(v);
  return n < 0 ? 0 : (uint64_t)n;
}

static bool flag(struct json_object *o, const char *name)
{
  struct json_object *v;
  return json_object_object_get_ex(o, name, &v) && json_object_get_boolean(v);
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
  int at = find_or_add(r, rest + (is_server ? 8 : 5));
  if (at < 0)
    return -1;
  struct rp_cluster_server *s = &r->servers[at];
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

int rp_cluster_registry_read(struct rp_cluster_registry *r, struct rp_etcd *e,
                             int64_t *revision, char *err, size_t errlen)
{
  for (unsigned i = 0; i < r->n; i++)
    r->servers[i].registered = r->servers[i].advertised = false;
  return rp_etcd_range_prefix(e, r->prefix, take_read, r, revision, err, errlen);
}
