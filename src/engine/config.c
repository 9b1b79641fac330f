/* Parsing and checking the engine's configuration (see rampart.h for the keys). Every
 * rejection says which key, what was wrong and what to write instead, because the
 * operator reads it from nbdkit's stderr or the journal. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_settings.h"
#include "parity_group.h"
#include "parse.h"
#include "redundancy_policy.h"
#include "wire.h"

/* The page ops size pages by the wire's constant, the frontends by rampart.h's. */
_Static_assert(RAMPART_PAGE_SIZE == RP_PAGE_SIZE, "rampart.h's page is the wire's page");

const char rampart_config_help[] = RAMPART_SETTINGS_HELP;

void rampart_config_free(struct rampart_config *c)
{
  free(c);
}

static int add_server(struct rampart_config *c, const char *addr, size_t len, char *err,
                      size_t errlen)
{
  char text[RAMPART_ADDRESS_LEN], host[256], port[16];
  if (len == 0)
    return 0;
  if (len >= sizeof text) {
    snprintf(err, errlen, "server address '%.*s' is too long", (int)len, addr);
    return -1;
  }
  memcpy(text, addr, len);
  text[len] = '\0';
  if (rp_parse_hostport(text, host, sizeof host, port, sizeof port, err, errlen) < 0)
    return -1;
  for (unsigned i = 0; i < c->nservers; i++)
    if (strcmp(c->servers[i], text) == 0) {
      snprintf(err, errlen, "server %s is listed twice: list each server once", text);
      return -1;
    }
  if (c->nservers == RAMPART_MAX_SERVERS) {
    snprintf(err, errlen, "more than %u servers listed", RAMPART_MAX_SERVERS);
    return -1;
  }
  memcpy(c->servers[c->nservers++], text, len + 1);
  return 0;
}

static int parse_server_list(struct rampart_config *c, const char *list, char *err,
                             size_t errlen)
{
  const char *p = list;
  while (*p) {
    size_t len = strcspn(p, ", ");
    if (add_server(c, p, len, err, errlen) < 0)
      return -1;
    p += len;
    p += strspn(p, ", ");
  }
  return 0;
}

static int parse_cluster_file(struct rampart_config *c, const char *path, char *err,
                              size_t errlen)
{
  FILE *f = fopen(path, "re");
  if (!f) {
    snprintf(err, errlen, "cluster=%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  char line[512];
  unsigned lineno = 0;
  int rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    lineno++;
    line[strcspn(line, "#\r\n")] = '\0';
    char *s = line + strspn(line, " \t");
    size_t len = strcspn(s, " \t");
    if (s[len + strspn(s + len, " \t")] != '\0') {
      snprintf(err, errlen, "cluster=%s line %u: one HOST:PORT per line", path, lineno);
      rc = -1;
    } else if (add_server(c, s, len, err, errlen) < 0) {
      char inner[256];
      snprintf(inner, sizeof inner, "%s", err);
      snprintf(err, errlen, "cluster=%s line %u: %s", path, lineno, inner);
      rc = -1;
    }
  }
  fclose(f);
  return rc;
}

int config_read_cluster_file(struct rampart_config *c, const char *path, char *err,
                             size_t errlen)
{
  c->nservers = 0;
  return parse_cluster_file(c, path, err, errlen);
}

unsigned config_server_count(const struct rampart_config *c)
{
  return c->nservers == 0 && c->etcd_cluster[0] ? c->etcd_count : c->nservers;
}

/* etcd://HOST:PORT[,HOST:PORT...]/NAME: the endpoints become http(s):// URLs (https
 * when a TLS option is given, whichever order the keys come in: see
 * config_etcd_scheme). */
static int parse_etcd_cluster(struct rampart_config *c, const char *v, char *err,
                              size_t errlen)
{
  const char *hosts = v + strlen("etcd://");
  const char *slash = strrchr(hosts, '/');
  if (!slash || slash == hosts || !slash[1] || strlen(slash + 1) >= sizeof c->etcd_cluster) {
    snprintf(err, errlen,
             "cluster=%s: write cluster=etcd://HOST:2379[,HOST:2379...]/NAME, "
             "NAME as given to rampartd --cluster",
             v);
    return -1;
  }
  snprintf(c->etcd_cluster, sizeof c->etcd_cluster, "%s", slash + 1);
  for (const char *p = c->etcd_cluster; *p; p++)
    if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') ||
          ((*p | 32) >= 'a' && (*p | 32) <= 'z'))) {
      snprintf(err, errlen,
               "cluster=%s: the cluster name may hold letters, digits, '-', "
               "'_' and '.'",
               v);
      return -1;
    }
  size_t n = 0;
  for (const char *p = hosts; p < slash;) {
    size_t len = strcspn(p, ",");
    if (p + len > slash)
      len = (size_t)(slash - p);
    if (len) {
      char host[256], port[16], one[RAMPART_ADDRESS_LEN];
      if (len >= sizeof one) {
        snprintf(err, errlen, "cluster=%s: an etcd endpoint is too long", v);
        return -1;
      }
      memcpy(one, p, len);
      one[len] = '\0';
      if (rp_parse_hostport(one, host, sizeof host, port, sizeof port, err, errlen) < 0)
        return -1;
      int w = snprintf(c->etcd_endpoints + n, sizeof c->etcd_endpoints - n, "%s%s",
                       n ? "," : "", one);
      if (w < 0 || (size_t)w >= sizeof c->etcd_endpoints - n) {
        snprintf(err, errlen, "cluster=%s: too many etcd endpoints", v);
        return -1;
      }
      n += (size_t)w;
    }
    p += len;
    if (*p == ',')
      p++;
  }
  if (!n) {
    snprintf(err, errlen, "cluster=%s: no etcd endpoint before the /NAME", v);
    return -1;
  }
  return 0;
}

static int parse_redundancy(const char *v, enum rampart_redundancy *out, char *err,
                            size_t errlen)
{
  const struct redundancy_policy *p = redundancy_policy_named(v);
  if (p) {
    *out = p->id;
    return 0;
  }
  if (strcmp(v, "auto") == 0) {
    *out = RAMPART_REDUNDANCY_AUTO;
    return 0;
  }
  snprintf(err, errlen,
           "redundancy=%s is not known: use none, mirror, parity-log or "
           "write-through",
           v);
  return -1;
}

static int copy_path(char *dst, size_t dstlen, const char *key, const char *v, char *err,
                     size_t errlen)
{
  if (strlen(v) >= dstlen || v[0] == '\0') {
    snprintf(err, errlen, "%s= needs a path", key);
    return -1;
  }
  strcpy(dst, v);
  return 0;
}

/* One function per row of config_settings.h: parse `v`, store it in c. */
typedef int setting_setter(struct rampart_config *c, const char *key, const char *v,
                           char *err, size_t errlen);

static int set_size(struct rampart_config *c, const char *key, const char *v, char *err,
                    size_t errlen)
{
  if (rp_parse_size(key, v, &c->size, err, errlen) < 0)
    return -1;
  c->size_given = true;
  return 0;
}

static int set_servers(struct rampart_config *c, const char *key, const char *v, char *err,
                       size_t errlen)
{
  (void)key;
  return parse_server_list(c, v, err, errlen);
}

static int set_cluster(struct rampart_config *c, const char *key, const char *v, char *err,
                       size_t errlen)
{
  if (strncmp(v, "etcd://", 7) == 0)
    return parse_etcd_cluster(c, v, err, errlen);
  if (copy_path(c->cluster_path, sizeof c->cluster_path, key, v, err, errlen) < 0)
    return -1;
  return parse_cluster_file(c, v, err, errlen);
}

#define PATH_SETTER(name, field) \
  static int name(struct rampart_config *c, const char *key, const char *v, char *err, \
                  size_t errlen) \
  { \
    return copy_path(c->field, sizeof c->field, key, v, err, errlen); \
  }
PATH_SETTER(set_key, key_path)
PATH_SETTER(set_spill, spill_path)
PATH_SETTER(set_tmpdir, temp_dir)
PATH_SETTER(set_stats_file, stats_path)
PATH_SETTER(set_metrics_file, metrics_path)
PATH_SETTER(set_control, control_path)
PATH_SETTER(set_enckey, enckey_path)
PATH_SETTER(set_state, state_path)
PATH_SETTER(set_cluster_cache, cluster_cache)
PATH_SETTER(set_etcd_cacert, etcd_cacert)
PATH_SETTER(set_etcd_cert, etcd_cert)
PATH_SETTER(set_etcd_key, etcd_key)
#undef PATH_SETTER

static int set_redundancy(struct rampart_config *c, const char *key, const char *v, char *err,
                          size_t errlen)
{
  (void)key;
  return parse_redundancy(v, &c->redundancy, err, errlen);
}

/* A whole number in [0, max] into an unsigned field. */
static int set_unsigned(unsigned *field, const char *key, const char *v, uint64_t max,
                        char *err, size_t errlen)
{
  uint64_t n;
  if (rp_parse_uint(key, v, max, &n, err, errlen) < 0)
    return -1;
  *field = (unsigned)n;
  return 0;
}

/* A count of 1 to max; zero_means says why 0 is refused. */
static int parse_count(const char *key, const char *v, uint64_t max, const char *zero_means,
                       unsigned *out, char *err, size_t errlen)
{
  unsigned n;
  if (set_unsigned(&n, key, v, max, err, errlen) < 0)
    return -1;
  if (n == 0) {
    snprintf(err, errlen, "%s=0: %s", key, zero_means);
    return -1;
  }
  *out = n;
  return 0;
}

static int set_count(struct rampart_config *c, const char *key, const char *v, char *err,
                     size_t errlen)
{
  return parse_count(key, v, RAMPART_MAX_SERVERS, "a device needs at least one server",
                     &c->etcd_count, err, errlen);
}

static int set_group(struct rampart_config *c, const char *key, const char *v, char *err,
                     size_t errlen)
{
  return parse_count(key, v, GROUP_MAX_DATA, "a group needs at least 1 data page", &c->group,
                     err, errlen);
}

static int set_parity(struct rampart_config *c, const char *key, const char *v, char *err,
                      size_t errlen)
{
  unsigned n;
  if (set_unsigned(&n, key, v, GROUP_MAX_PARITY, err, errlen) < 0)
    return -1;
  if (n == 0) {
    snprintf(err, errlen,
             "parity=0: a parity-log group keeps 1 or 2 parity pages; for no "
             "parity at all use redundancy=none");
    return -1;
  }
  c->parity = n;
  return 0;
}

static int set_spill_size(struct rampart_config *c, const char *key, const char *v, char *err,
                          size_t errlen)
{
  return rp_parse_size(key, v, &c->spill_size, err, errlen);
}

static int set_memory(struct rampart_config *c, const char *key, const char *v, char *err,
                      size_t errlen)
{
  return rp_parse_size(key, v, &c->memory, err, errlen);
}

static int set_overflow(struct rampart_config *c, const char *key, const char *v, char *err,
                        size_t errlen)
{
  return set_unsigned(&c->overflow_percent, key, v, 400, err, errlen);
}

/* A reaper that spins holds a core, so the bound stays well under a scheduler tick. */
static int set_poll_us(struct rampart_config *c, const char *key, const char *v, char *err,
                       size_t errlen)
{
  return set_unsigned(&c->poll_us, key, v, 10000, err, errlen);
}

/* 100 spins whatever the pressure (PSI never reports more). */
static int set_poll_pressure(struct rampart_config *c, const char *key, const char *v,
                             char *err, size_t errlen)
{
  return set_unsigned(&c->poll_pressure, key, v, 100, err, errlen);
}

/* The cache is locked memory the pager holds for good: 64 MiB at most. */
static int set_prefetch(struct rampart_config *c, const char *key, const char *v, char *err,
                        size_t errlen)
{
  return set_unsigned(&c->prefetch_pages, key, v, 16384, err, errlen);
}

static int set_prefetch_depth(struct rampart_config *c, const char *key, const char *v,
                              char *err, size_t errlen)
{
  return parse_count(key, v, 256,
                     "give the pages to read ahead, 1 or more (prefetch=0 "
                     "turns the prefetcher off)",
                     &c->prefetch_depth, err, errlen);
}

static int set_timeout(struct rampart_config *c, const char *key, const char *v, char *err,
                       size_t errlen)
{
  unsigned n;
  if (set_unsigned(&n, key, v, 600000, err, errlen) < 0)
    return -1;
  if (n < 100) {
    snprintf(err, errlen, "timeout=%s is too short: at least 100 ms", v);
    return -1;
  }
  c->timeout_ms = n;
  return 0;
}

static int set_lease(struct rampart_config *c, const char *key, const char *v, char *err,
                     size_t errlen)
{
  return set_unsigned(&c->lease_seconds, key, v, 86400, err, errlen);
}

static int set_io_timeout(struct rampart_config *c, const char *key, const char *v, char *err,
                          size_t errlen)
{
  if (set_unsigned(&c->io_timeout_ms, key, v, 86400000, err, errlen) < 0)
    return -1;
  c->io_timeout_given = true;
  return 0;
}

static int set_rebalance(struct rampart_config *c, const char *key, const char *v, char *err,
                         size_t errlen)
{
  return set_unsigned(&c->rebalance_pages, key, v, 1000000, err, errlen);
}

static int set_encrypt(struct rampart_config *c, const char *key, const char *v, char *err,
                       size_t errlen)
{
  (void)key;
  if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
    snprintf(err, errlen, "encrypt=%s: use encrypt=on (the default) or encrypt=off", v);
    return -1;
  }
  c->encrypt_off = strcmp(v, "off") == 0;
  return 0;
}

static int set_submit(struct rampart_config *c, const char *key, const char *v, char *err,
                      size_t errlen)
{
  (void)key;
  if (strcmp(v, "inline") && strcmp(v, "handover")) {
    snprintf(err, errlen,
             "submit=%s: write submit=inline (the default) or "
             "submit=handover",
             v);
    return -1;
  }
  c->submit_inline = strcmp(v, "inline") == 0;
  return 0;
}

static const struct setting {
  const char *key;
  setting_setter *set;
  const char *default_value;
} settings[] = {
#define SETTING_ROW(key, setter, default_value, help) { key, setter, default_value },
  RAMPART_SETTINGS(SETTING_ROW)
#undef SETTING_ROW
};

struct rampart_config *rampart_config_new(void)
{
  struct rampart_config *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->memory = UINT64_MAX; /* not a value memory= takes: "not given" */
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    char err[256];
    if (settings[i].default_value &&
        settings[i].set(c, settings[i].key, settings[i].default_value, err, sizeof err) < 0)
      abort(); /* a default its own setter refuses: config_settings.h is wrong */
  }
  return c;
}

int rampart_config_set(struct rampart_config *c, const char *key, const char *v, char *err,
                       size_t errlen)
{
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
    if (strcmp(key, settings[i].key) == 0)
      return settings[i].set(c, key, v, err, errlen);
  snprintf(err, errlen,
           "unknown parameter '%s': 'rampart-nbd-server --help' (or 'nbdkit "
           "rampart --help', 'rampart-ublk --help') lists them",
           key);
  return -1;
}

void rampart_config_effective(const struct rampart_config *c, enum rampart_redundancy *policy,
                              unsigned *group)
{
  enum rampart_redundancy r = c->redundancy;
  unsigned nservers = config_server_count(c);
  if (r == RAMPART_REDUNDANCY_AUTO)
    r = nservers >= 3   ? RAMPART_REDUNDANCY_PARITY_LOG
        : nservers == 2 ? RAMPART_REDUNDANCY_MIRROR
                        : RAMPART_REDUNDANCY_NONE;
  unsigned s = c->group;
  switch (r) {
  case RAMPART_REDUNDANCY_MIRROR:
    s = 1;
    break;
  case RAMPART_REDUNDANCY_PARITY_LOG:
    if (!s)
      s = nservers > c->parity ? nservers - c->parity : 1;
    if (s > 4 && !c->group)
      s = 4;
    break;
  default:
    if (!s)
      s = nservers ? nservers : 1;
    if (s > GROUP_MAX_DATA)
      s = GROUP_MAX_DATA;
    break;
  }
  *policy = r;
  *group = s;
}

const char *rampart_redundancy_name(enum rampart_redundancy r)
{
  const struct redundancy_policy *p = redundancy_policy_of(r);
  return p ? p->name : "auto";
}

const char *rampart_config_state_path(const struct rampart_config *c)
{
  return c->state_path[0] ? c->state_path : NULL;
}

unsigned rampart_config_takeover_files(const struct rampart_config *c, const char *files[4])
{
  const char *paths[4] = { c->state_path, c->key_path, c->enckey_path, c->cluster_path };
  unsigned n = 0;
  for (unsigned i = 0; i < 4; i++)
    if (paths[i][0])
      files[n++] = paths[i];
  return n;
}

int rampart_config_check(const struct rampart_config *c, char *err, size_t errlen)
{
  if (!c->size_given || c->size == 0) {
    snprintf(err, errlen, "size= is required: the device size, e.g. size=4G");
    return -1;
  }
  if (c->size % RAMPART_PAGE_SIZE) {
    snprintf(err, errlen, "size=%llu is not a multiple of 4096 (4K): round it, e.g. size=4G",
             (unsigned long long)c->size);
    return -1;
  }
  if (c->size / RAMPART_PAGE_SIZE > UINT32_MAX) {
    snprintf(err, errlen, "size= is larger than 16T, the most one device holds");
    return -1;
  }
  if (c->encrypt_off && c->enckey_path[0]) {
    snprintf(err, errlen, "enckey= is given but encrypt=off: drop one of them");
    return -1;
  }
  if (c->etcd_cluster[0] && c->nservers > 0 && !c->etcd_picked) {
    snprintf(err, errlen, "cluster=etcd://... and servers= both list servers: give one");
    return -1;
  }
  if ((c->etcd_cert[0] != 0) != (c->etcd_key[0] != 0)) {
    snprintf(err, errlen, "etcd-cert= and etcd-key= go together: give both");
    return -1;
  }
  unsigned nservers = config_server_count(c);
  enum rampart_redundancy r;
  unsigned s;
  rampart_config_effective(c, &r, &s);
  /* A group's members and its parity (mirror: its one member and the copy) each need a
   * server of their own. */
  bool parity = redundancy_policy_of(r)->parity;
  if (c->parity > 1 && r != RAMPART_REDUNDANCY_PARITY_LOG) {
    snprintf(err, errlen,
             "parity=%u needs redundancy=parity-log (this device is %s): drop "
             "parity= or set redundancy=parity-log",
             c->parity, rampart_redundancy_name(r));
    return -1;
  }
  unsigned parities = parity ? (r == RAMPART_REDUNDANCY_PARITY_LOG ? c->parity : 1u) : 0u;
  unsigned needed = parity ? s + parities : 1;
  if (parity && nservers < needed && c->redundancy != RAMPART_REDUNDANCY_AUTO) {
    snprintf(err, errlen,
             "redundancy=%s with group=%u needs at least %u servers, %u given: "
             "list more servers or choose a smaller group",
             rampart_redundancy_name(r), s, needed, nservers);
    return -1;
  }
  if (parity && nservers < needed) { /* auto chose parity-log; group= asks too much */
    snprintf(err, errlen,
             "group=%u needs %u servers for parity-log, %u given: lower group=", s, needed,
             nservers);
    return -1;
  }
  if (nservers == 0 && c->state_path[0]) {
    snprintf(err, errlen,
             "state= needs servers: a standalone device's pages live in the "
             "pager's own memory and die with it; give servers= or cluster=, or drop state=");
    return -1;
  }
  if (nservers == 0 && c->redundancy != RAMPART_REDUNDANCY_AUTO &&
      c->redundancy != RAMPART_REDUNDANCY_NONE) {
    snprintf(err, errlen,
             "redundancy=%s needs servers: give servers= or cluster=, or drop "
             "redundancy= for a standalone RAM disk",
             rampart_redundancy_name(c->redundancy));
    return -1;
  }
  return 0;
}
