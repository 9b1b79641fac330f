/* A cluster of real rampartd processes and an engine over it (engine_cluster.h). */
#include "engine_cluster.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

int rp_test_cluster_start(struct rp_test_cluster *c, unsigned n, const char *memory,
                          const char *const *faults)
{
  memset(c, 0, sizeof *c);
  if (n > RP_TEST_MAX_SERVERS || rp_test_tmpdir(c->dir, sizeof c->dir) < 0 ||
      rp_test_write_key(c->dir, "key", c->key_path, sizeof c->key_path, &c->key) < 0)
    return -1;
  c->n = n;
  for (unsigned i = 0; i < n; i++) {
    snprintf(c->psi[i], sizeof c->psi[i], "%s/psi-%u", c->dir, i);
    if (rp_test_write_file(c->psi[i], RP_TEST_PSI_CALM) < 0)
      return -1;
    const char *fault = faults ? faults[i] : NULL;
    const char *args[] = { "--memory", memory, "--key", c->key_path, "--pressure-file",
                           c->psi[i], "--psi-threshold", "10", "--pressure-interval-ms",
                           "100", fault ? "--test-fault" : NULL, fault, NULL };
    if (rp_test_server_start(&c->servers[i], c->dir, args) < 0)
      return -1;
  }
  return 0;
}

void rp_test_cluster_stop(struct rp_test_cluster *c)
{
  for (unsigned i = 0; i < c->n; i++)
    if (c->servers[i].pid)
      rp_test_server_stop(&c->servers[i]);
  rp_test_tmpdir_remove(c->dir);
}

static void set(struct rampart_config *cfg, const char *key, const char *value)
{
  char err[512];
  if (rampart_config_set(cfg, key, value, err, sizeof err) < 0)
    fail_msg("config %s=%s: %s", key, value, err);
}

struct rampart_engine *rp_test_engine_open(const struct rp_test_cluster *c, uint64_t pages,
                                           const char *const *extra)
{
  return rp_test_engine_open_at(c, NULL, pages, extra);
}

struct rampart_engine *rp_test_engine_open_at(const struct rp_test_cluster *c,
                                              const char *const *addrs, uint64_t pages,
                                              const char *const *extra)
{
  struct rampart_config *cfg = rampart_config_new();
  assert_non_null(cfg);
  char size[32], servers[RP_TEST_MAX_SERVERS * 100] = "", err[512];
  snprintf(size, sizeof size, "%llu", (unsigned long long)(pages * RAMPART_PAGE_SIZE));
  set(cfg, "size", size);
  if (c && c->n) {
    for (unsigned i = 0; i < c->n; i++) {
      strcat(servers, addrs ? addrs[i] : c->servers[i].addr);
      strcat(servers, i + 1 < c->n ? "," : "");
    }
    set(cfg, "servers", servers);
    set(cfg, "key", c->key_path);
    set(cfg, "tmpdir", c->dir);
  }
  for (unsigned i = 0; extra && extra[i]; i += 2)
    set(cfg, extra[i], extra[i + 1]);
  struct rampart_engine *e = rampart_open(cfg, err, sizeof err);
  rampart_config_free(cfg);
  if (!e)
    fail_msg("rampart_open: %s", err);
  return e;
}
