/* A cluster of real rampartd processes and an engine over it (engine_cluster.h). */
#include "engine_cluster.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

/* Starts server i of c listening on port (0: the kernel picks), inside its namespace when
 * it has one. `ip netns exec` execs the server in place, so the PID is the server's own. */
static int start_member(struct rp_test_cluster *c, unsigned i, const char *fault,
                        const char *port)
{
  const char *bin = fault ? rp_test_rampartd_faults_path() : rp_test_rampartd_path();
  if (!bin)
    return -1;
  char listen[64];
  snprintf(listen, sizeof listen, "%s:%s",
           c->netns[i].name[0] ? c->netns[i].ns_ip : "127.0.0.1", port);
  const char *argv[40];
  size_t k = 0;
  if (c->netns[i].name[0]) {
    argv[k++] = rp_test_ip_path();
    argv[k++] = "netns";
    argv[k++] = "exec";
    argv[k++] = c->netns[i].name;
  }
  const char *args[] = { bin,
                         "--listen",
                         listen,
                         "--foreground",
                         "--memory",
                         c->memory,
                         "--key",
                         c->key_path,
                         "--pressure-file",
                         c->psi[i],
                         "--psi-threshold",
                         "10",
                         "--pressure-interval-ms",
                         "100",
                         fault ? "--test-fault" : NULL,
                         fault,
                         NULL };
  for (size_t j = 0; args[j]; j++)
    argv[k++] = args[j];
  for (size_t j = 0; c->member_args && c->member_args[j] && k < 39; j++)
    argv[k++] = c->member_args[j];
  argv[k] = NULL;
  return rp_test_server_start_argv(&c->servers[i], c->dir, argv);
}

static int cluster_start(struct rp_test_cluster *c, unsigned n, const char *memory,
                         const char *const *faults, bool in_netns,
                         const char *const *member_args)
{
  memset(c, 0, sizeof *c);
  c->member_args = member_args;
  if (n > RP_TEST_MAX_SERVERS || rp_test_tmpdir(c->dir, sizeof c->dir) < 0 ||
      rp_test_write_key(c->dir, "key", c->key_path, sizeof c->key_path, &c->key) < 0)
    return -1;
  c->n = n;
  snprintf(c->memory, sizeof c->memory, "%s", memory);
  for (unsigned i = 0; i < n; i++) {
    snprintf(c->psi[i], sizeof c->psi[i], "%s/psi-%u", c->dir, i);
    if (rp_test_write_file(c->psi[i], RP_TEST_PSI_CALM) < 0 ||
        (in_netns && rp_test_netns_create(&c->netns[i], i) < 0) ||
        start_member(c, i, faults ? faults[i] : NULL, "0") < 0)
      goto fail;
  }
  return 0;
fail:
  /* Nothing half-made outlives a failed start: no server, namespace or directory. */
  for (unsigned i = 0; i < n; i++) {
    rp_test_server_kill(&c->servers[i]);
    rp_test_netns_destroy(&c->netns[i]);
  }
  rp_test_tmpdir_remove(c->dir);
  return -1;
}

int rp_test_cluster_restart(struct rp_test_cluster *c, unsigned i, const char *fault)
{
  char port[16];
  snprintf(port, sizeof port, "%s", c->servers[i].port);
  if (c->servers[i].pid > 0)
    rp_test_server_kill(&c->servers[i]);
  return start_member(c, i, fault, port);
}

int rp_test_cluster_start(struct rp_test_cluster *c, unsigned n, const char *memory,
                          const char *const *faults)
{
  return cluster_start(c, n, memory, faults, false, NULL);
}

int rp_test_cluster_start_netns(struct rp_test_cluster *c, unsigned n, const char *memory)
{
  return cluster_start(c, n, memory, NULL, true, NULL);
}

int rp_test_cluster_start_args(struct rp_test_cluster *c, unsigned n, const char *memory,
                               const char *const *member_args)
{
  return cluster_start(c, n, memory, NULL, false, member_args);
}

void rp_test_cluster_stop(struct rp_test_cluster *c)
{
  unsigned bad = 0;
  for (unsigned i = 0; i < c->n; i++)
    if (rp_test_server_stop_clean(&c->servers[i]) < 0)
      bad++;
  for (unsigned i = 0; i < c->n; i++)
    rp_test_netns_destroy(&c->netns[i]);
  rp_test_tmpdir_remove(c->dir);
  if (bad)
    fail_msg("%u of %u rampartd did not live and exit cleanly (above: how each ended and "
             "its stderr); parity may have hidden it from the reads, but a crash is a crash",
             bad, c->n);
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
