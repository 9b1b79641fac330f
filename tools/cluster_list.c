/* rampartctl cluster ENDPOINTS NAME [--etcd-cacert F --etcd-cert F --etcd-key F]:
 * the servers a cluster's registry in etcd holds (servers/ and free/, docs/scaling.md),
 * and the devices that recorded which servers they use (devices/). */
#include "cluster_list.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_keys.h"
#include "etcd_gateway.h"
#include "parse.h"

#define MAX_LISTED 4096u
#define REPLY_MAX (8u * 1024u * 1024u)

struct device_uses {
  const struct rp_cluster_registry *reg;
  unsigned *devices; /* per server: how many device records name it */
  char prefix[128];
  unsigned records;
};

/* devices/CLIENT/DEVICE's value: "HOST:PORT,HOST:PORT,...". */
static void count_device(void *arg, const char *key, const char *value)
{
  struct device_uses *u = arg;
  u->records++;
  for (unsigned i = 0; i < u->reg->n; i++) {
    const char *addr = u->reg->servers[i].address;
    size_t n = strlen(addr);
    for (const char *p = value; n && (p = strstr(p, addr)); p += n)
      if ((p == value || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) {
        u->devices[i]++;
        break;
      }
  }
}

static void pages_text(uint64_t pages, char *out, size_t len)
{
  rp_format_bytes(pages * 4096u, out, len);
}

int cluster_list_main(int argc, char **argv)
{
  const char *endpoints = NULL, *name = NULL, *cacert = NULL, *cert = NULL, *key = NULL;
  for (int i = 0; i < argc; i++) {
    const char **dst = strcmp(argv[i], "--etcd-cacert") == 0 ? &cacert
                       : strcmp(argv[i], "--etcd-cert") == 0 ? &cert
                       : strcmp(argv[i], "--etcd-key") == 0  ? &key
                                                             : NULL;
    if (dst) {
      if (i + 1 >= argc) {
        fprintf(stderr, "rampartctl: %s needs a FILE\n", argv[i]);
        return 2;
      }
      *dst = argv[++i];
    } else if (!endpoints) {
      endpoints = argv[i];
    } else if (!name) {
      name = argv[i];
    } else {
      fprintf(stderr, "rampartctl: cluster: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (!endpoints || !name) {
    fprintf(stderr, "rampartctl: usage: rampartctl cluster http://HOST:2379,... NAME\n");
    return 2;
  }
  struct rp_cluster_registry reg;
  char err[600];
  if (rp_cluster_registry_init(&reg, name, MAX_LISTED, err, sizeof err) < 0) {
    fprintf(stderr, "rampartctl: %s\n", err);
    return 2;
  }
  struct rp_etcd_options o = { .endpoints = endpoints,
                               .cacert = cacert,
                               .cert = cert,
                               .key = key,
                               .timeout_ms = 5000,
                               .reply_max = REPLY_MAX };
  struct rp_etcd *e = rp_etcd_new(&o, err, sizeof err);
  if (!e) {
    fprintf(stderr, "rampartctl: %s\n", err);
    rp_cluster_registry_free(&reg);
    return 2;
  }
  int rc = 1;
  unsigned *devices = calloc(MAX_LISTED, sizeof *devices);
  struct device_uses uses = { .reg = &reg, .devices = devices };
  snprintf(uses.prefix, sizeof uses.prefix, "%sdevices/", reg.prefix);
  if (!devices || rp_cluster_registry_read(&reg, e, NULL, err, sizeof err) < 0 ||
      rp_etcd_range_prefix(e, uses.prefix, count_device, &uses, NULL, err, sizeof err) < 0) {
    fprintf(stderr, "rampartctl: cannot read cluster '%s' from etcd: %s\n", name,
            devices ? err : "out of memory");
    goto out;
  }
  unsigned registered = 0;
  for (unsigned i = 0; i < reg.n; i++)
    registered += reg.servers[i].registered;
  printf("cluster %s (etcd %s): %u server%s registered, %u device record%s\n", name,
         rp_etcd_endpoint(e), registered, registered == 1 ? "" : "s", uses.records,
         uses.records == 1 ? "" : "s");
  printf("%-24s %-16s %10s %10s %-8s %-8s %s\n", "ADDRESS", "DOMAIN", "CAPACITY", "FREE",
         "PRESSURE", "DRAINING", "DEVICES");
  for (unsigned i = 0; i < reg.n; i++) {
    const struct rp_cluster_server *s = &reg.servers[i];
    if (!s->registered)
      continue;
    char cap[32], fr[32] = "?";
    pages_text(s->capacity_pages, cap, sizeof cap);
    if (s->advertised)
      pages_text(s->free_pages, fr, sizeof fr);
    printf("%-24s %-16s %10s %10s %-8s %-8s %u\n", s->address, s->domain, cap, fr,
           s->pressure ? "yes" : "no", s->draining ? "yes" : "no", devices[i]);
  }
  rc = 0;
out:
  free(devices);
  rp_etcd_free(e);
  rp_cluster_registry_free(&reg);
  return rc;
}
