/* cluster=etcd:// and its keys (src/engine/config.c), the registry's values (etcd/cluster_keys.c)
 * and the choice at attach (cluster_follow_choose): one per failure domain before a
 * second in any, the most free memory first, nothing under pressure or draining; the
 * registry's entries of IDs gone given to new ones, and fields of the wrong type not
 * taken. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cluster_follow.h"
#include "cluster_keys.h"
#include "config.h"
#include "etcd_gateway.h"
#include "etcd_libs.h"

static int set(struct rampart_config *c, const char *k, const char *v, char *err)
{
  return rampart_config_set(c, k, v, err, 512);
}

static void test_cluster_etcd_parses(void **state)
{
  char err[512];
  struct rampart_config *c = rampart_config_new();
  assert_int_equal(set(c, "size", "16M", err), 0);
  assert_int_equal(set(c, "cluster", "etcd://10.0.0.2:2379,10.0.0.3:2379/prod", err), 0);
  assert_string_equal(c->etcd_endpoints, "10.0.0.2:2379,10.0.0.3:2379");
  assert_string_equal(c->etcd_cluster, "prod");
  assert_int_equal(c->nservers, 0);
  assert_int_equal(c->etcd_count, 32);
  assert_int_equal(set(c, "count", "5", err), 0);
  assert_int_equal(config_server_count(c), 5);
  assert_int_equal(rampart_config_check(c, err, sizeof err), 0);
  /* parity-log with groups as five servers allow */
  enum rampart_redundancy r;
  unsigned group;
  rampart_config_effective(c, &r, &group);
  assert_int_equal(r, RAMPART_REDUNDANCY_PARITY_LOG);
  assert_int_equal(group, 4);
  assert_int_equal(set(c, "etcd-cert", "/x.pem", err), 0);
  assert_int_equal(rampart_config_check(c, err, sizeof err), -1);
  assert_non_null(strstr(err, "etcd-key"));
  rampart_config_free(c);
}

static void test_cluster_etcd_refused(void **state)
{
  char err[512];
  struct rampart_config *c = rampart_config_new();
  assert_int_equal(set(c, "cluster", "etcd://10.0.0.2:2379", err), -1);
  assert_non_null(strstr(err, "/NAME"));
  assert_int_equal(set(c, "cluster", "etcd://10.0.0.2:2379/bad name", err), -1);
  assert_int_equal(set(c, "cluster", "etcd://nohost/prod", err), -1);
  assert_int_equal(set(c, "count", "0", err), -1);
  assert_int_equal(set(c, "size", "16M", err), 0);
  assert_int_equal(set(c, "servers", "10.0.0.5:7070", err), 0);
  assert_int_equal(set(c, "cluster", "etcd://10.0.0.2:2379/prod", err), 0);
  assert_int_equal(rampart_config_check(c, err, sizeof err), -1);
  assert_non_null(strstr(err, "give one"));
  rampart_config_free(c);
}

static void put(struct rp_cluster_registry *r, const char *addr, const char *domain,
                uint64_t free_pages, bool pressure, bool draining)
{
  char key[256], value[512];
  snprintf(key, sizeof key, "/rampart/t/servers/%s", addr);
  assert_int_equal(rp_cluster_server_value(value, sizeof value, addr, domain, 10000, "0.1.0"),
                   0);
  assert_true(rp_cluster_registry_take(r, false, key, value) >= 0);
  snprintf(key, sizeof key, "/rampart/t/free/%s", addr);
  assert_int_equal(rp_cluster_free_value(value, sizeof value, free_pages, pressure, draining),
                   0);
  assert_true(rp_cluster_registry_take(r, false, key, value) >= 0);
}

static void test_choice_spreads_over_domains(void **state)
{
  char err[300];
  if (rp_etcd_libs_load(err, sizeof err) < 0) {
    print_message("skipped: %s\n", err);
    skip();
  }
  struct rp_cluster_registry r;
  assert_int_equal(rp_cluster_registry_init(&r, "t", 16, NULL, 0), 0);
  put(&r, "a1:1", "rack-a", 9000, false, false); /* 0 */
  put(&r, "a2:1", "rack-a", 8000, false, false); /* 1 */
  put(&r, "b1:1", "rack-b", 1000, false, false); /* 2 */
  put(&r, "c1:1", "rack-c", 9999, true, false);  /* 3: under pressure */
  put(&r, "c2:1", "rack-c", 500, false, false);  /* 4 */
  put(&r, "d1:1", "rack-d", 9999, false, true);  /* 5: draining */
  assert_int_equal(r.servers[0].free_pages, 9000);
  assert_true(r.servers[3].pressure);
  unsigned out[16];
  /* Three: one from each usable domain, the freest of each, freest domain first. */
  assert_int_equal(cluster_follow_choose(&r, 3, out), 3);
  assert_int_equal(out[0], 0);
  assert_int_equal(out[1], 2);
  assert_int_equal(out[2], 4);
  /* More than the domains: then the freest of the rest. */
  assert_int_equal(cluster_follow_choose(&r, 10, out), 4);
  assert_int_equal(out[3], 1);
  /* A deleted key takes the server out. */
  assert_true(rp_cluster_registry_take(&r, true, "/rampart/t/servers/a1:1", "") >= 0);
  assert_int_equal(cluster_follow_choose(&r, 1, out), 1);
  assert_int_equal(out[0], 1);
  /* Keys of another cluster, or not ours, are ignored. */
  assert_int_equal(rp_cluster_registry_take(&r, false, "/rampart/u/servers/x:1", "{}"), -1);
  assert_int_equal(rp_cluster_registry_take(&r, false, "/rampart/t/other/x:1", "{}"), -1);
  assert_int_equal(rp_cluster_registry_take(&r, false, "/rampart/t/servers/x:1", "not json"),
                   -1);
  rp_cluster_registry_free(&r);
}

/* IDs that came and went leave room for new ones; values of the wrong type are not
 * taken. */
static void test_registry_reuses_entries_of_gone_ids(void **state)
{
  char err[300];
  if (rp_etcd_libs_load(err, sizeof err) < 0) {
    print_message("skipped: %s\n", err);
    skip();
  }
  struct rp_cluster_registry r;
  assert_int_equal(rp_cluster_registry_init(&r, "t", 4, NULL, 0), 0);
  char addr[32], key[256];
  for (unsigned round = 0; round < 3; round++) {
    for (unsigned i = 0; i < 4; i++) {
      snprintf(addr, sizeof addr, "r%u-%u:1", round, i);
      put(&r, addr, "rack-a", 100, false, false);
    }
    /* Full of live IDs: a fifth is not taken. */
    assert_int_equal(rp_cluster_registry_take(&r, false, "/rampart/t/servers/extra:1",
                                              "{\"address\":\"extra:1\"}"),
                     -1);
    for (unsigned i = 0; i < 4; i++) {
      snprintf(addr, sizeof addr, "r%u-%u:1", round, i);
      snprintf(key, sizeof key, "/rampart/t/servers/%s", addr);
      assert_true(rp_cluster_registry_take(&r, true, key, "") >= 0);
      snprintf(key, sizeof key, "/rampart/t/free/%s", addr);
      assert_true(rp_cluster_registry_take(&r, true, key, "") >= 0);
    }
  }
  assert_int_equal(r.n, 4);
  /* A deletion of an ID never seen adds nothing. */
  assert_int_equal(rp_cluster_registry_take(&r, true, "/rampart/t/servers/never:1", ""), -1);
  /* After them, a new server is taken, and chosen. */
  put(&r, "new:1", "rack-b", 100, false, false);
  unsigned out[4];
  assert_int_equal(cluster_follow_choose(&r, 4, out), 1);
  assert_string_equal(r.servers[out[0]].address, "new:1");
  /* Fields of the wrong type: no address (not "(null)"), no pages, no flag. */
  int at = rp_cluster_registry_take(
    &r, false, "/rampart/t/servers/odd:1",
    "{\"address\":null,\"domain\":7,\"capacity_pages\":\"9\"}");
  assert_true(at >= 0);
  assert_string_equal(r.servers[at].address, "");
  assert_false(r.servers[at].registered);
  assert_int_equal(r.servers[at].capacity_pages, 0);
  assert_true(rp_cluster_registry_take(&r, false, "/rampart/t/free/new:1",
                                       "{\"free_pages\":-5,\"pressure\":\"yes\"}") >= 0);
  assert_false(r.servers[out[0]].pressure);
  assert_int_equal(r.servers[out[0]].free_pages, 0);
  rp_cluster_registry_free(&r);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_cluster_etcd_parses),
    cmocka_unit_test(test_cluster_etcd_refused),
    cmocka_unit_test(test_choice_spreads_over_domains),
    cmocka_unit_test(test_registry_reuses_entries_of_gone_ids),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
