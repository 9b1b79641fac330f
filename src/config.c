/* Parsing and checking the engine's configuration (see rampart.h for the keys). Every
 * rejection says which key, what was wrong and what to write instead, because the
 * operator reads it from nbdkit's stderr or the journal. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity_group.h"
#include "parse.h"

const char rampart_config_help[] =
  "size=SIZE                 device size, e.g. 4G (required)\n"
  "servers=HOST:PORT,...     memory servers (rampartd)\n"
  "cluster=FILE              file listing servers, one HOST:PORT per line\n"
  "cluster=etcd://HOST:PORT[,HOST:PORT...]/NAME\n"
  "                          servers from etcd (rampartd --etcd ... --cluster NAME):\n"
  "                          the count= with most free memory, spread over failure\n"
  "                          domains; followed while the device runs\n"
  "count=N                   placement set size with cluster=etcd:// (default 32)\n"
  "cluster-cache=PATH        the last set etcd gave, for an attach while etcd is down\n"
  "                          (default: STATE.servers with state=, else\n"
  "                          /var/lib/rampart/cluster-NAME.servers)\n"
  "etcd-cacert=FILE etcd-cert=FILE etcd-key=FILE   TLS to etcd (https)\n"
  "key=FILE                  cluster key shared with the servers\n"
  "redundancy=none|mirror|parity-log|write-through  (default: parity-log with 3+ servers)\n"
  "group=S                   data pages per parity group (default: up to 4)\n"
  "spill=PATH                local disk store, file or partition (default: temp file)\n"
  "spill-size=SIZE           capacity of the spill store (default: device size)\n"
  "memory=SIZE               local RAM for pages with no servers (default: all of size)\n"
  "overflow=PERCENT          extra server memory for old page versions (default 10)\n"
  "timeout=MS                a server silent this long is failing (default 2000)\n"
  "lease=SECONDS             how long to wait for a dropped server to return (default 10)\n"
  "io-timeout=MS             longest a request waits for a reconnecting server before it\n"
  "                          fails as its policy says (default: the lease)\n"
  "tmpdir=DIR                where the temporary spill file goes\n"
  "stats-file=PATH           rewrite engine stats here every second (rampartctl device)\n"
  "metrics-file=PATH         rewrite its counters here every second in the Prometheus\n"
  "                          text format (node_exporter textfile collector: NAME.prom)\n"
  "control=PATH              unix socket for rampartctl device PATH add|drain|remove|\n"
  "                          reload|servers: change the servers of the running device\n"
  "rebalance=PAGES           pages a second rewritten to even out the servers (256)\n"
  "encrypt=on|off            seal pages with AES-256-GCM before they leave (default on;\n"
  "                          off: checksummed plaintext, for benchmarks)\n"
  "enckey=FILE               key material for the page key (default: random per attach)\n"
  "state=PATH                keep the device's state where a restarted pager finds it\n"
  "                          (docs/recovery.md): its pages survive the pager's crash\n"
  "submit=inline|handover    who starts a request: the frontend's own thread when the\n"
  "                          engine's I/O thread is idle (default: half the latency at\n"
  "                          queue depth 1, docs/engine.md), or always the I/O thread";

struct rampart_config *rampart_config_new(void)
{
  struct rampart_config *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->memory = UINT64_MAX;
  c->overflow_percent = 10;
  c->submit_inline = true;
  c->timeout_ms = 2000;
  c->lease_seconds = 10;
  c->rebalance_pages = 256;
  c->etcd_count = 32;
  return c;
}

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
    snprintf(err, errlen, "cluster=%s: write cluster=etcd://HOST:2379[,HOST:2379...]/NAME, "
             "NAME as given to rampartd --cluster", v);
    return -1;
  }
  snprintf(c->etcd_cluster, sizeof c->etcd_cluster, "%s", slash + 1);
  for (const char *p = c->etcd_cluster; *p; p++)
    if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') ||
          ((*p | 32) >= 'a' && (*p | 32) <= 'z'))) {
      snprintf(err, errlen, "cluster=%s: the cluster name may hold letters, digits, '-', "
               "'_' and '.'", v);
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
      int w = snprintf(c->etcd_endpoints + n, sizeof c->etcd_endpoints - n, "%s%s", n ? "," : "",
                       one);
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
  static const struct { const char *name; enum rampart_redundancy value; } names[] = {
    { "none", RAMPART_REDUNDANCY_NONE },
    { "mirror", RAMPART_REDUNDANCY_MIRROR },
    { "parity-log", RAMPART_REDUNDANCY_PARITY_LOG },
    { "write-through", RAMPART_REDUNDANCY_WRITE_THROUGH },
    { "auto", RAMPART_REDUNDANCY_AUTO },
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(v, names[i].name) == 0) {
      *out = names[i].value;
      return 0;
    }
  snprintf(err, errlen, "redundancy=%s is not known: use none, mirror, parity-log or "
           "write-through", v);
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

int rampart_config_set(struct rampart_config *c, const char *key, const char *v, char *err,
                       size_t errlen)
{
  uint64_t n;
  if (strcmp(key, "size") == 0) {
    if (rp_parse_size("size", v, &c->size, err, errlen) < 0)
      return -1;
    c->size_given = true;
    return 0;
  }
  if (strcmp(key, "servers") == 0)
    return parse_server_list(c, v, err, errlen);
  if (strcmp(key, "cluster") == 0 && strncmp(v, "etcd://", 7) == 0)
    return parse_etcd_cluster(c, v, err, errlen);
  if (strcmp(key, "count") == 0) {
    if (rp_parse_uint("count", v, RAMPART_MAX_SERVERS, &n, err, errlen) < 0)
      return -1;
    if (n == 0) {
      snprintf(err, errlen, "count=0: a device needs at least one server");
      return -1;
    }
    c->etcd_count = (unsigned)n;
    return 0;
  }
  if (strcmp(key, "cluster-cache") == 0)
    return copy_path(c->cluster_cache, sizeof c->cluster_cache, key, v, err, errlen);
  if (strcmp(key, "etcd-cacert") == 0)
    return copy_path(c->etcd_cacert, sizeof c->etcd_cacert, key, v, err, errlen);
  if (strcmp(key, "etcd-cert") == 0)
    return copy_path(c->etcd_cert, sizeof c->etcd_cert, key, v, err, errlen);
  if (strcmp(key, "etcd-key") == 0)
    return copy_path(c->etcd_key, sizeof c->etcd_key, key, v, err, errlen);
  if (strcmp(key, "cluster") == 0) {
    if (copy_path(c->cluster_path, sizeof c->cluster_path, key, v, err, errlen) < 0)
      return -1;
    return parse_cluster_file(c, v, err, errlen);
  }
  if (strcmp(key, "control") == 0)
    return copy_path(c->control_path, sizeof c->control_path, key, v, err, errlen);
  if (strcmp(key, "state") == 0)
    return copy_path(c->state_path, sizeof c->state_path, key, v, err, errlen);
  if (strcmp(key, "rebalance") == 0) {
    if (rp_parse_uint("rebalance", v, 1000000, &n, err, errlen) < 0)
      return -1;
    c->rebalance_pages = (unsigned)n;
    return 0;
  }
  if (strcmp(key, "key") == 0)
    return copy_path(c->key_path, sizeof c->key_path, key, v, err, errlen);
  if (strcmp(key, "redundancy") == 0)
    return parse_redundancy(v, &c->redundancy, err, errlen);
  if (strcmp(key, "group") == 0) {
    if (rp_parse_uint("group", v, GROUP_MAX_DATA, &n, err, errlen) < 0)
      return -1;
    if (n == 0) {
      snprintf(err, errlen, "group=0: a group needs at least 1 data page");
      return -1;
    }
    c->group = (unsigned)n;
    return 0;
  }
  if (strcmp(key, "spill") == 0)
    return copy_path(c->spill_path, sizeof c->spill_path, key, v, err, errlen);
  if (strcmp(key, "stats-file") == 0)
    return copy_path(c->stats_path, sizeof c->stats_path, key, v, err, errlen);
  if (strcmp(key, "metrics-file") == 0)
    return copy_path(c->metrics_path, sizeof c->metrics_path, key, v, err, errlen);
  if (strcmp(key, "encrypt") == 0) {
    if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
      snprintf(err, errlen, "encrypt=%s: use encrypt=on (the default) or encrypt=off", v);
      return -1;
    }
    c->encrypt_off = strcmp(v, "off") == 0;
    return 0;
  }
  if (strcmp(key, "enckey") == 0)
    return copy_path(c->enckey_path, sizeof c->enckey_path, key, v, err, errlen);
  if (strcmp(key, "tmpdir") == 0)
    return copy_path(c->temp_dir, sizeof c->temp_dir, key, v, err, errlen);
  if (strcmp(key, "spill-size") == 0)
    return rp_parse_size("spill-size", v, &c->spill_size, err, errlen);
  if (strcmp(key, "memory") == 0)
    return rp_parse_size("memory", v, &c->memory, err, errlen);
  if (strcmp(key, "overflow") == 0) {
    if (rp_parse_uint("overflow", v, 400, &n, err, errlen) < 0)
      return -1;
    c->overflow_percent = (unsigned)n;
    return 0;
  }
  if (strcmp(key, "submit") == 0) {
    if (strcmp(v, "inline") && strcmp(v, "handover")) {
      snprintf(err, errlen, "submit=%s: write submit=inline (the default) or "
               "submit=handover", v);
      return -1;
    }
    c->submit_inline = strcmp(v, "inline") == 0;
    return 0;
  }
  if (strcmp(key, "timeout") == 0) {
    if (rp_parse_uint("timeout", v, 600000, &n, err, errlen) < 0)
      return -1;
    if (n < 100) {
      snprintf(err, errlen, "timeout=%s is too short: at least 100 ms", v);
      return -1;
    }
    c->timeout_ms = (unsigned)n;
    return 0;
  }
  if (strcmp(key, "lease") == 0) {
    if (rp_parse_uint("lease", v, 86400, &n, err, errlen) < 0)
      return -1;
    c->lease_seconds = (unsigned)n;
    return 0;
  }
  if (strcmp(key, "io-timeout") == 0) {
    if (rp_parse_uint("io-timeout", v, 86400000, &n, err, errlen) < 0)
      return -1;
    c->io_timeout_ms = (unsigned)n;
    c->io_timeout_given = true;
    return 0;
  }
  snprintf(err, errlen, "unknown parameter '%s': 'nbdkit rampart --help' (or 'rampart-ublk --help') lists them", key);
  return -1;
}

void rampart_config_effective(const struct rampart_config *c, enum rampart_redundancy *policy,
                              unsigned *group)
{
  enum rampart_redundancy r = c->redundancy;
  unsigned nservers = config_server_count(c);
  if (r == RAMPART_REDUNDANCY_AUTO)
    r = nservers >= 3 ? RAMPART_REDUNDANCY_PARITY_LOG
        : nservers == 2 ? RAMPART_REDUNDANCY_MIRROR : RAMPART_REDUNDANCY_NONE;
  unsigned s = c->group;
  switch (r) {
  case RAMPART_REDUNDANCY_MIRROR:
    s = 1;
    break;
  case RAMPART_REDUNDANCY_PARITY_LOG:
    if (!s)
      s = nservers > 1 ? nservers - 1 : 1;
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
  switch (r) {
  case RAMPART_REDUNDANCY_NONE: return "none";
  case RAMPART_REDUNDANCY_MIRROR: return "mirror";
  case RAMPART_REDUNDANCY_PARITY_LOG: return "parity-log";
  case RAMPART_REDUNDANCY_WRITE_THROUGH: return "write-through";
  default: return "auto";
  }
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
  unsigned needed = r == RAMPART_REDUNDANCY_PARITY_LOG ? s + 1
                    : r == RAMPART_REDUNDANCY_MIRROR ? 2 : 1;
  if (c->redundancy != RAMPART_REDUNDANCY_AUTO && c->redundancy != RAMPART_REDUNDANCY_NONE &&
      c->redundancy != RAMPART_REDUNDANCY_WRITE_THROUGH && nservers < needed) {
    snprintf(err, errlen, "redundancy=%s with group=%u needs at least %u servers, %u given: "
             "list more servers or choose a smaller group", rampart_redundancy_name(r), s,
             needed, nservers);
    return -1;
  }
  if (r == RAMPART_REDUNDANCY_PARITY_LOG && nservers < needed) {
    snprintf(err, errlen, "group=%u needs %u servers for parity-log, %u given: lower group=",
             s, needed, nservers);
    return -1;
  }
  if (nservers == 0 && c->state_path[0]) {
    snprintf(err, errlen, "state= needs servers: a standalone device's pages live in the "
             "pager's own memory and die with it; give servers= or cluster=, or drop state=");
    return -1;
  }
  if (nservers == 0 && c->redundancy != RAMPART_REDUNDANCY_AUTO &&
      c->redundancy != RAMPART_REDUNDANCY_NONE) {
    snprintf(err, errlen, "redundancy=%s needs servers: give servers= or cluster=, or drop "
             "redundancy= for a standalone RAM disk", rampart_redundancy_name(c->redundancy));
    return -1;
  }
  return 0;
}
