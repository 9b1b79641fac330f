/* rampartd --etcd (server/etcd_announce.c) against a real three-member etcd: a server
 * registers its address, failure domain, capacity and free memory under a lease;
 * rampartctl cluster lists it; a reservation moves its free memory (rate-limited); a
 * drain (SIGUSR1) is published; kill -9 lets the key expire with the lease; a clean stop
 * withdraws it at once; with all of etcd down for longer than the lease the server goes
 * on serving and registers again once etcd is back.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "client.h"
#include "rampart.h"
#include "cluster_keys.h"
#include "etcd_cluster.h"
#include "etcd_gateway.h"
#include "server_process.h"

#define CLUSTER "reg"

struct rig {
  char dir[512];
  struct rp_test_etcd etcd;
  struct rp_etcd *client;
  struct rp_cluster_registry reg;
  char err[512];
};

static struct rig the_rig;

static int rig_setup(void **state)
{
  const char *why = rp_test_etcd_missing();
  if (why) {
    printf("skipped: %s\n", why);
    return 0;
  }
  struct rig *r = &the_rig;
  if (rp_test_tmpdir(r->dir, sizeof r->dir) < 0 || rp_test_etcd_start(&r->etcd, r->dir) < 0)
    return -1;
  struct rp_etcd_options o = { .endpoints = r->etcd.endpoints,
                               .timeout_ms = 2000,
                               .reply_max = 1 << 20 };
  r->client = rp_etcd_new(&o, r->err, sizeof r->err);
  if (!r->client || rp_cluster_registry_init(&r->reg, CLUSTER, 256, NULL, 0) < 0)
    return -1;
  *state = r;
  return 0;
}

static int rig_teardown(void **state)
{
  struct rig *r = *state;
  if (!r)
    return 0;
  rp_cluster_registry_free(&r->reg);
  rp_etcd_free(r->client);
  rp_test_etcd_stop(&r->etcd);
  rp_test_tmpdir_remove(r->dir);
  return 0;
}

#define NEED_ETCD(state) \
  do { \
    if (!*(state)) \
      skip(); \
  } while (0)

static int start_announcing(struct rig *r, struct rp_test_server *s, const char *memory,
                            const char *domain)
{
  const char *args[] = { "--memory",         memory,      "--etcd",
                         r->etcd.endpoints,  "--cluster", CLUSTER,
                         "--failure-domain", domain,      NULL };
  return rp_test_server_start(s, r->dir, args);
}

/* The registry's entry for address, read now; NULL when it is not registered. */
static const struct rp_cluster_server *lookup(struct rig *r, const char *address)
{
  if (rp_cluster_registry_read(&r->reg, r->client, NULL, r->err, sizeof r->err) < 0)
    return NULL;
  for (unsigned i = 0; i < r->reg.n; i++)
    if (r->reg.servers[i].registered && strcmp(r->reg.servers[i].address, address) == 0)
      return &r->reg.servers[i];
  return NULL;
}

/* Polls until lookup(address) is (or is not) there; the milliseconds it took, or -1. */
static long wait_registered(struct rig *r, const char *address, bool want, unsigned max_ms)
{
  uint64_t t0 = rp_test_now_ms();
  while (rp_test_now_ms() - t0 < max_ms) {
    if ((lookup(r, address) != NULL) == want)
      return (long)(rp_test_now_ms() - t0);
    rp_test_sleep_ms(100);
  }
  return -1;
}

static void test_register_list_and_withdraw(void **state)
{
  NEED_ETCD(state);
  struct rig *r = *state;
  struct rp_test_server a, b;
  assert_int_equal(start_announcing(r, &a, "64M", "rack-a"), 0);
  assert_int_equal(start_announcing(r, &b, "32M", "rack-b"), 0);
  assert_true(wait_registered(r, a.addr, true, 5000) >= 0);
  assert_true(wait_registered(r, b.addr, true, 5000) >= 0);
  const struct rp_cluster_server *sa = lookup(r, a.addr);
  assert_non_null(sa);
  assert_string_equal(sa->domain, "rack-a");
  assert_int_equal(sa->capacity_pages, 64u * 256u);
  assert_true(sa->advertised);
  assert_int_equal(sa->free_pages, 64u * 256u);
  assert_false(sa->draining);

  /* rampartctl cluster lists both, with their domains. */
  char out[8192];
  const char *ctl[] = { getenv("RAMPARTCTL"), "cluster", r->etcd.endpoints, CLUSTER, NULL };
  int st = rp_test_run_program(ctl, out, sizeof out, 10000);
  printf("%s", out);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_non_null(strstr(out, "2 servers registered"));
  assert_non_null(strstr(out, a.addr));
  assert_non_null(strstr(out, b.addr));
  assert_non_null(strstr(out, "rack-b"));

  /* A clean stop withdraws the registration at once, not after the lease. */
  assert_int_equal(rp_test_server_stop_clean(&b), 0);
  long gone_ms = wait_registered(r, b.addr, false, 2000);
  printf("clean stop: key gone after %ld ms\n", gone_ms);
  assert_true(gone_ms >= 0 && gone_ms < 1000);
  assert_non_null(lookup(r, a.addr));
  assert_int_equal(rp_test_server_stop_clean(&a), 0);
}

static void test_free_memory_and_drain_published(void **state)
{
  NEED_ETCD(state);
  struct rig *r = *state;
  struct rp_test_server s;
  assert_int_equal(start_announcing(r, &s, "64M", "rack-a"), 0);
  assert_true(wait_registered(r, s.addr, true, 5000) >= 0);
  /* A client reserves a quarter: the advertisement follows within its 5 s limit. */
  struct rp_session_info info;
  struct rp_error err = { 0 };
  struct rp_conn *c = rp_test_connect(&s, NULL, NULL, &info, &err);
  assert_non_null(c);
  uint64_t got = 0, server_free = 0;
  assert_int_equal(rp_reserve_sync(c, 4096, &got, &server_free, &err), 0);
  assert_int_equal(got, 4096);
  uint64_t t0 = rp_test_now_ms();
  const struct rp_cluster_server *e = NULL;
  while (rp_test_now_ms() - t0 < 8000) {
    e = lookup(r, s.addr);
    if (e && e->free_pages == 64u * 256u - 4096u)
      break;
    rp_test_sleep_ms(200);
  }
  printf("free memory advertised %llu ms after the reservation\n",
         (unsigned long long)(rp_test_now_ms() - t0));
  assert_non_null(e);
  assert_int_equal(e->free_pages, 64u * 256u - 4096u);
  /* A drain is published at once (within the loop's 1 s feed), not rate-limited. */
  assert_int_equal(kill(s.pid, SIGUSR1), 0);
  t0 = rp_test_now_ms();
  while (rp_test_now_ms() - t0 < 3000 && !((e = lookup(r, s.addr)) && e->draining))
    rp_test_sleep_ms(100);
  assert_non_null(e);
  assert_true(e->draining);
  rp_goodbye_sync(c, &err);
  rp_conn_close(c);
  assert_int_equal(rp_test_server_stop_clean(&s), 0);
}

static void test_kill_9_expires(void **state)
{
  NEED_ETCD(state);
  struct rig *r = *state;
  struct rp_test_server s;
  assert_int_equal(start_announcing(r, &s, "16M", "rack-c"), 0);
  assert_true(wait_registered(r, s.addr, true, 5000) >= 0);
  rp_test_server_kill(&s);
  /* Nobody revokes it: the key lives until its lease (10 s) runs out. */
  long gone_ms = wait_registered(r, s.addr, false, 16000);
  printf("kill -9: key gone after %ld ms\n", gone_ms);
  assert_true(gone_ms >= 4000 && gone_ms <= 13000);
}

static void test_etcd_down_longer_than_the_lease(void **state)
{
  NEED_ETCD(state);
  struct rig *r = *state;
  struct rp_test_server s;
  assert_int_equal(start_announcing(r, &s, "16M", "rack-d"), 0);
  assert_true(wait_registered(r, s.addr, true, 5000) >= 0);
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++)
    assert_int_equal(rp_test_etcd_member_stop(&r->etcd, i), 0);
  /* The server serves with etcd gone: a page written and read back. */
  rp_test_sleep_ms(12000);
  struct rp_session_info info;
  struct rp_error err = { 0 };
  struct rp_conn *c = rp_test_connect(&s, NULL, NULL, &info, &err);
  assert_non_null(c);
  uint64_t got = 0, server_free = 0;
  assert_int_equal(rp_reserve_sync(c, 16, &got, &server_free, &err), 0);
  rp_goodbye_sync(c, &err);
  rp_conn_close(c);
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++)
    assert_int_equal(rp_test_etcd_member_start(&r->etcd, i), 0);
  assert_int_equal(rp_test_etcd_wait_healthy(&r->etcd, 20000), 0);
  /* The lease expired while etcd was down (etcd's clock restarts leases it recovers,
   * so the old key may linger up to a TTL): the server registers again either way. */
  long back_ms = wait_registered(r, s.addr, true, 15000);
  printf("etcd back: registered after %ld ms\n", back_ms);
  assert_true(back_ms >= 0);
  rp_test_sleep_ms(11000); /* past any lingering old lease: still registered */
  assert_non_null(lookup(r, s.addr));
  assert_true(rp_test_server_alive(&s));
  assert_int_equal(rp_test_server_stop_clean(&s), 0);
}

/* TLS with client certificates, end to end: a server registers over https with its
 * certificate, rampartctl lists it with one, a device attaches through it, and a client
 * without a certificate is refused by etcd. */
static void test_tls_client_certificates(void **state)
{
  NEED_ETCD(state);
  char dir[512], err[600];
  assert_int_equal(rp_test_tmpdir(dir, sizeof dir), 0);
  static struct rp_test_etcd tls;
  assert_int_equal(rp_test_etcd_start_tls(&tls, dir), 0);
  struct rp_test_server s;
  const char *args[] = { "--memory",    "16M",           "--etcd",        tls.endpoints,
                         "--cluster",   "tls",           "--etcd-cacert", tls.ca,
                         "--etcd-cert", tls.client_cert, "--etcd-key",    tls.client_key,
                         NULL };
  assert_int_equal(rp_test_server_start(&s, dir, args), 0);
  char out[8192];
  const char *ctl[] = { getenv("RAMPARTCTL"), "cluster",      tls.endpoints, "tls",
                        "--etcd-cacert",      tls.ca,         "--etcd-cert", tls.client_cert,
                        "--etcd-key",         tls.client_key, NULL };
  uint64_t until = rp_test_now_ms() + 5000;
  do {
    int st = rp_test_run_program(ctl, out, sizeof out, 10000);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  } while (!strstr(out, s.addr) && rp_test_now_ms() < until);
  printf("%s", out);
  assert_non_null(strstr(out, "1 server registered"));
  /* A device through TLS: the server picked from etcd, a page written and read back. */
  struct rampart_config *cfg = rampart_config_new();
  char url[128], cache[600];
  snprintf(url, sizeof url, "etcd://127.0.0.1:%u/tls", tls.m[0].client_port);
  snprintf(cache, sizeof cache, "%s/tls.servers", dir);
  const char *kv[] = {
    "size",          "1M",           "cluster",     url,    "count",     "1",
    "cluster-cache", cache,          "etcd-cacert", tls.ca, "etcd-cert", tls.client_cert,
    "etcd-key",      tls.client_key, "tmpdir",      dir,    NULL
  };
  for (unsigned i = 0; kv[i]; i += 2)
    assert_int_equal(rampart_config_set(cfg, kv[i], kv[i + 1], err, sizeof err), 0);
  struct rampart_engine *e = rampart_open(cfg, err, sizeof err);
  if (!e)
    fail_msg("rampart_open over TLS: %s", err);
  rampart_config_free(cfg);
  static uint8_t page[4096], back[4096];
  memset(page, 0x7c, sizeof page);
  assert_int_equal(rampart_pwrite(e, page, sizeof page, 8192, 0), 0);
  assert_int_equal(rampart_pread(e, back, sizeof back, 8192), 0);
  assert_memory_equal(page, back, sizeof page);
  static struct rampart_stats st;
  rampart_get_stats(e, &st);
  assert_int_equal(st.nservers, 1);
  assert_string_equal(st.servers[0].address, s.addr);
  rampart_close(e);
  /* Without a client certificate etcd refuses the handshake. */
  const char *bare[] = { getenv("RAMPARTCTL"), "cluster", tls.endpoints, "tls",
                         "--etcd-cacert",      tls.ca,    NULL };
  int st2 = rp_test_run_program(bare, out, sizeof out, 10000);
  printf("without a client certificate: %s", out);
  assert_true(WIFEXITED(st2) && WEXITSTATUS(st2) == 1);
  assert_non_null(strstr(out, "cannot read cluster"));
  assert_int_equal(rp_test_server_stop_clean(&s), 0);
  rp_test_etcd_stop(&tls);
  rp_test_tmpdir_remove(dir);
}

static void test_options_refused(void **state)
{
  char out[2048];
  const char *no_etcd[] = { "--listen",  "127.0.0.1:0", "--memory", "16M",
                            "--cluster", "x",           NULL };
  int st = rp_test_run_rampartd(no_etcd, out, sizeof out, 5000);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
  assert_non_null(strstr(out, "give --etcd"));
  const char *no_cluster[] = { "--listen", "127.0.0.1:0",        "--memory", "16M",
                               "--etcd",   "http://127.0.0.1:1", NULL };
  st = rp_test_run_rampartd(no_cluster, out, sizeof out, 5000);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
  assert_non_null(strstr(out, "--cluster NAME"));
  /* rampartctl cluster names what is wrong with a cluster name, not something else. */
  const char *bad_name[] = { getenv("RAMPARTCTL"), "cluster", "http://127.0.0.1:1", "a/b",
                             NULL };
  st = rp_test_run_program(bad_name, out, sizeof out, 5000);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
  assert_non_null(strstr(out, "cluster name 'a/b': use letters, digits"));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_options_refused),
    cmocka_unit_test(test_register_list_and_withdraw),
    cmocka_unit_test(test_free_memory_and_drain_published),
    cmocka_unit_test(test_kill_9_expires),
    cmocka_unit_test(test_etcd_down_longer_than_the_lease),
    cmocka_unit_test(test_tls_client_certificates),
  };
  return cmocka_run_group_tests(tests, rig_setup, rig_teardown);
}
