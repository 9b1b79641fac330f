/* A device that follows its cluster in etcd (cluster=etcd://, src/engine/cluster_follow.c),
 * against a real three-member etcd and real rampartd --etcd servers, every byte read
 * back against a shadow copy while readers and writers run:
 *   - attach picks the registered servers; a rampartd registered mid-run takes pages;
 *     kill -9 of a member is rebuilt, its key expires, and its replacement comes from
 *     etcd;
 *   - a drain announced by a server (SIGUSR1) empties it through the device, nothing lost;
 *   - the etcd leader killed, then all of etcd stopped for 10 s: no request fails, the
 *     watch metric says so and the watch resumes; an attach with etcd down uses the set
 *     written down;
 *   - a forged registration (a listener without the cluster key) is refused, named in
 *     the log, and nothing is lost;
 *   - a fake gateway listed first answers HTTP 200 with replies of the wrong shape: each
 *     device attaches and follows through the real members, serves, and the log names
 *     the lying endpoint and the lie;
 *   - 1,100 server IDs registered and deleted and two 1.1 MB values left under the
 *     prefix (one under servers/): a server registered after that still receives pages.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "engine_cluster.h"
#include "etcd_cluster.h"
#include "etcd_gateway.h"
#include "etcd_liar.h"
#include "rampart.h"
#include "server_process.h"
#include "shadow_device.h"

#define PAGES 4096u /* 16 MiB */
#define CLUSTER "dev"
#define RIG_MAX_EXTRA 9 /* rampartd started apart from the rig's cluster */

struct rig {
  struct rp_test_etcd etcd;
  struct rp_test_cluster cluster;
  const char *member_args[8];
  char etcd_dir[512], etcd_url[300], cache[700], psi[700];
  struct rp_test_shadow dev;
  struct rp_test_server extra[RIG_MAX_EXTRA];
  unsigned nextra;
  struct rp_etcd *client;
};

/* ---- the engine's log, kept for the tests to search -------------------------------------- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[1 << 16];
static size_t log_len;

static void log_sink(int level, const char *line)
{
  pthread_mutex_lock(&log_lock);
  int n = snprintf(log_text + log_len, sizeof log_text - log_len, "%s\n", line);
  if (n > 0 && log_len + (size_t)n < sizeof log_text)
    log_len += (size_t)n;
  pthread_mutex_unlock(&log_lock);
  fprintf(stderr, "engine: %s\n", line);
}

static bool log_has(const char *a, const char *b)
{
  pthread_mutex_lock(&log_lock);
  bool found = false;
  for (const char *p = log_text; !found && (p = strstr(p, a)); p++) {
    const char *eol = strchr(p, '\n');
    const char *bol = p;
    while (bol > log_text && bol[-1] != '\n')
      bol--;
    const char *hit = strstr(bol, b);
    found = hit && (!eol || hit < eol);
  }
  pthread_mutex_unlock(&log_lock);
  return found;
}

/* ---- the rig ------------------------------------------------------------------------------ */

static long wait_registered(struct rig *r, const char *address, bool want, unsigned max_ms);

/* etcd, and `servers` rampartd registered in it; no device yet (rig_attach). */
static struct rig *rig_begin(unsigned servers)
{
  struct rig *r = calloc(1, sizeof *r);
  assert_non_null(r);
  rampart_set_log_sink(log_sink);
  assert_int_equal(rp_test_tmpdir(r->etcd_dir, sizeof r->etcd_dir), 0);
  assert_int_equal(rp_test_etcd_start(&r->etcd, r->etcd_dir), 0);
  char err[300];
  struct rp_etcd_options eo = { .endpoints = r->etcd.endpoints,
                                .timeout_ms = 2000,
                                .reply_max = 1 << 20 };
  r->client = rp_etcd_new(&eo, err, sizeof err);
  assert_non_null(r->client);
  r->member_args[0] = "--etcd";
  r->member_args[1] = r->etcd.endpoints;
  r->member_args[2] = "--cluster";
  r->member_args[3] = CLUSTER;
  r->member_args[4] = NULL;
  assert_int_equal(rp_test_cluster_start_args(&r->cluster, servers, "48M", r->member_args),
                   0);
  /* etcd://127.0.0.1:A,127.0.0.1:B,127.0.0.1:C/NAME */
  size_t n = (size_t)snprintf(r->etcd_url, sizeof r->etcd_url, "etcd://");
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++)
    n += (size_t)snprintf(r->etcd_url + n, sizeof r->etcd_url - n, "%s127.0.0.1:%u",
                          i ? "," : "", r->etcd.m[i].client_port);
  snprintf(r->etcd_url + n, sizeof r->etcd_url - n, "/%s", CLUSTER);
  snprintf(r->cache, sizeof r->cache, "%s/cluster.servers", r->cluster.dir);
  snprintf(r->psi, sizeof r->psi, "%s/calm.psi", r->cluster.dir);
  assert_int_equal(rp_test_write_file(r->psi, RP_TEST_PSI_CALM), 0);
  return r;
}

/* The device, count= servers from etcd, with `more` settings (key, value pairs,
 * NULL-terminated; NULL for none) after the rig's, written in full. */
static void rig_attach(struct rig *r, const char *count, const char *const *more)
{
  /* The device reads the registry once at attach: every server registered first. */
  for (unsigned i = 0; i < r->cluster.n; i++)
    assert_true(wait_registered(r, r->cluster.servers[i].addr, true, 20000) >= 0);
  for (unsigned i = 0; i < r->nextra; i++)
    assert_true(wait_registered(r, r->extra[i].addr, true, 20000) >= 0);
  struct rp_test_cluster view = r->cluster;
  view.n = 0;
  const char *extra[32] = {
    "key", r->cluster.key_path, "tmpdir", r->cluster.dir, "cluster", r->etcd_url, "count",
    count, "cluster-cache",     r->cache, "lease",        "2",       "timeout",   "1000",
  };
  for (unsigned i = 14, j = 0; more && more[j] && i < 30; i++, j++)
    extra[i] = more[j];
  struct rampart_engine *e = rp_test_engine_open(&view, PAGES, extra);
  rp_test_shadow_init(&r->dev, e, PAGES);
  rp_test_shadow_fill(&r->dev, 0xe7cd);
}

static struct rig *rig_start(unsigned servers, const char *count)
{
  struct rig *r = rig_begin(servers);
  rig_attach(r, count, NULL);
  return r;
}

static void rig_stop(struct rig *r)
{
  rp_test_shadow_destroy(&r->dev);
  for (unsigned i = 0; i < r->nextra; i++)
    if (r->extra[i].pid > 0)
      rp_test_server_stop(&r->extra[i]);
  rp_etcd_free(r->client);
  rp_test_etcd_stop(&r->etcd);
  rp_test_tmpdir_remove(r->etcd_dir);
  rp_test_cluster_stop(&r->cluster); /* removes its directory */
  rampart_set_log_sink(NULL);
  free(r);
}

/* One more rampartd with the cluster's key, registered in etcd, in failure domain
 * `domain` (NULL: rampartd's default, the host name). */
static struct rp_test_server *start_extra(struct rig *r, const char *key_path,
                                          const char *domain)
{
  assert_true(r->nextra < RIG_MAX_EXTRA);
  struct rp_test_server *s = &r->extra[r->nextra++];
  const char *args[] = { "--memory",
                         "48M",
                         "--key",
                         key_path,
                         "--pressure-file",
                         r->psi,
                         "--etcd",
                         r->etcd.endpoints,
                         "--cluster",
                         CLUSTER,
                         domain ? "--failure-domain" : NULL,
                         domain,
                         NULL };
  assert_int_equal(rp_test_server_start(s, r->cluster.dir, args), 0);
  return s;
}

static struct rampart_stats the_stats;

static const struct rampart_server_stats *server_stats(struct rig *r, const char *address)
{
  rampart_get_stats(r->dev.engine, &the_stats);
  const struct rampart_server_stats *found = NULL;
  for (unsigned i = 0; i < the_stats.nservers; i++)
    if (strcmp(the_stats.servers[i].address, address) == 0)
      found = &the_stats.servers[i];
  return found;
}

static unsigned members(struct rig *r)
{
  rampart_get_stats(r->dev.engine, &the_stats);
  unsigned n = 0;
  for (unsigned i = 0; i < the_stats.nservers; i++)
    n += the_stats.servers[i].state == RAMPART_SERVER_UP;
  return n;
}

static bool found_key;
static void on_key(void *arg, const char *key, const char *value)
{
  found_key = true;
}

/* Milliseconds until address's servers/ key is (or is not) in etcd, or -1. */
static long wait_registered(struct rig *r, const char *address, bool want, unsigned max_ms)
{
  char key[256], err[300];
  snprintf(key, sizeof key, "/rampart/%s/servers/%s", CLUSTER, address);
  uint64_t t0 = rp_test_now_ms();
  while (rp_test_now_ms() - t0 < max_ms) {
    found_key = false;
    if (rp_etcd_range_prefix(r->client, key, on_key, NULL, NULL, err, sizeof err) == 0 &&
        found_key == want)
      return (long)(rp_test_now_ms() - t0);
    rp_test_sleep_ms(100);
  }
  return -1;
}

/* Milliseconds until address holds a page of the device, or -1 after max_ms. */
static long wait_pages_on(struct rig *r, const char *address, unsigned max_ms)
{
  uint64_t t0 = rp_test_now_ms();
  while (rp_test_now_ms() - t0 < max_ms) {
    const struct rampart_server_stats *s = server_stats(r, address);
    if (s && s->state == RAMPART_SERVER_UP && s->pages_stored > 0)
      return (long)(rp_test_now_ms() - t0);
    rp_test_sleep_ms(50);
  }
  return -1;
}

/* One more rampartd registers: the device (three servers, count=4) adds it and it
 * receives pages within max_ms. */
static void expect_new_server_takes_pages(struct rig *r, const char *what, unsigned max_ms)
{
  uint64_t t0 = rp_test_now_ms();
  struct rp_test_server *s = start_extra(r, r->cluster.key_path, NULL);
  long took = wait_pages_on(r, s->addr, max_ms);
  print_message("%s: first page there after %llu ms\n", what,
                (unsigned long long)(rp_test_now_ms() - t0));
  assert_true(took >= 0);
  assert_int_equal(members(r), 4);
}

static void verify_all(struct rig *r, const char *what)
{
  struct rp_test_shadow_result res;
  uint64_t failed = rp_test_shadow_verify(&r->dev, &res);
  rp_test_shadow_expect_clean(what, &res);
  assert_int_equal(failed, 0);
}

#define NEED_ETCD() \
  do { \
    const char *why = rp_test_etcd_missing(); \
    if (why) { \
      print_message("skipped: %s\n", why); \
      skip(); \
    } \
  } while (0)

/* ---- tests -------------------------------------------------------------------------------- */

static void test_attach_new_server_and_replacement(void **state)
{
  NEED_ETCD();
  struct rig *r = rig_start(3, "4");
  assert_int_equal(members(r), 3);
  rp_test_shadow_start(&r->dev, 2, 2, 8, 0x42);
  /* A server registered mid-run is added (count=4 > 3) and takes pages. */
  expect_new_server_takes_pages(r, "a new rampartd registered", 20000);
  /* kill -9 of a member: rebuilt by the data path, its key expires, and a replacement
   * comes from etcd once one is registered. */
  char killed[96];
  snprintf(killed, sizeof killed, "%s", r->cluster.servers[0].addr);
  rp_test_server_kill(&r->cluster.servers[0]);
  struct rp_test_server *s5 = start_extra(r, r->cluster.key_path, NULL);
  uint64_t t0 = rp_test_now_ms();
  long took = wait_pages_on(r, s5->addr, 30000);
  print_message("replacement after kill -9: first page on the new server after %llu ms\n",
                (unsigned long long)(rp_test_now_ms() - t0));
  assert_true(took >= 0);
  /* The killed server's key expires with its lease. */
  long expired = wait_registered(r, killed, false, 15000);
  print_message("kill -9: its key gone from etcd %ld ms after the replacement took pages\n",
                expired);
  assert_true(expired >= 0);
  /* A live member whose key goes is placed on no more, and not declared lost. */
  struct rp_test_server *unlisted = &r->cluster.servers[1];
  char key[256], err[300];
  snprintf(key, sizeof key, "/rampart/%s/servers/%s", CLUSTER, unlisted->addr);
  assert_int_equal(rp_etcd_delete(r->client, key, err, sizeof err), 0);
  uint64_t until = rp_test_now_ms() + 10000;
  while (rp_test_now_ms() < until && !log_has(unlisted->addr, "left the registry"))
    rp_test_sleep_ms(100);
  assert_true(log_has(unlisted->addr, "left the registry"));
  uint64_t stored_before = server_stats(r, unlisted->addr)->pages_stored;
  rp_test_sleep_ms(2000); /* writers keep writing */
  const struct rampart_server_stats *us = server_stats(r, unlisted->addr);
  print_message("unlisted server: %llu pages stored, %llu two seconds of writes later\n",
                (unsigned long long)stored_before, (unsigned long long)us->pages_stored);
  assert_int_equal(us->state, RAMPART_SERVER_UP);
  assert_true(us->pages_stored <= stored_before);
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r->dev);
  rp_test_shadow_expect_clean(
    "workload through a new server, a kill -9, a replacement and an unlisting", &res);
  rampart_get_stats(r->dev.engine, &the_stats);
  assert_int_equal(the_stats.pages_lost, 0);
  verify_all(r, "after the replacement, every page");
  rig_stop(r);
}

static void test_drain_announced(void **state)
{
  NEED_ETCD();
  /* Five registered, four taken: the fifth is the room the drain needs (the other three
   * alone may lack it, and the device then takes the spare from etcd first). */
  struct rig *r = rig_start(5, "4");
  assert_int_equal(members(r), 4);
  rp_test_shadow_start(&r->dev, 1, 1, 8, 0x43);
  struct rp_test_server *leaving = NULL;
  for (unsigned i = 0; i < 5 && !leaving; i++) {
    const struct rampart_server_stats *m = server_stats(r, r->cluster.servers[i].addr);
    if (m && m->state == RAMPART_SERVER_UP)
      leaving = &r->cluster.servers[i];
  }
  assert_non_null(leaving);
  const struct rampart_server_stats *s = server_stats(r, leaving->addr);
  assert_non_null(s);
  assert_true(s->pages_stored > 0);
  assert_int_equal(kill(leaving->pid, SIGUSR1), 0);
  uint64_t t0 = rp_test_now_ms();
  bool removed = false;
  while (!removed && rp_test_now_ms() - t0 < 30000) {
    s = server_stats(r, leaving->addr);
    removed = s && s->state == RAMPART_SERVER_REMOVED;
    rp_test_sleep_ms(100);
  }
  print_message("drain announced: removed from the device after %llu ms\n",
                (unsigned long long)(rp_test_now_ms() - t0));
  assert_true(removed);
  assert_true(log_has(leaving->addr, "announced a drain"));
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r->dev);
  rp_test_shadow_expect_clean("workload during the drain", &res);
  /* It holds nothing of ours: stopping it costs no read. */
  rp_test_server_kill(leaving);
  rampart_get_stats(r->dev.engine, &the_stats);
  uint64_t degraded_before = the_stats.pages_degraded_reads;
  verify_all(r, "after the drain, with the drained server killed");
  rampart_get_stats(r->dev.engine, &the_stats);
  assert_int_equal(the_stats.pages_degraded_reads, degraded_before);
  assert_int_equal(the_stats.pages_lost, 0);
  rig_stop(r);
}

static bool watch_live(struct rig *r)
{
  rampart_get_stats(r->dev.engine, &the_stats);
  assert_true(the_stats.etcd_following);
  return the_stats.etcd_watch_live;
}

static void test_etcd_leader_killed_then_all_down(void **state)
{
  NEED_ETCD();
  struct rig *r = rig_start(3, "3");
  uint64_t until = rp_test_now_ms() + 5000;
  while (!watch_live(r) && rp_test_now_ms() < until)
    rp_test_sleep_ms(50);
  assert_true(watch_live(r));
  rp_test_shadow_start(&r->dev, 2, 2, 8, 0x44);
  int leader = rp_test_etcd_leader(&r->etcd);
  assert_true(leader >= 0);
  assert_int_equal(rp_test_etcd_member_kill(&r->etcd, (unsigned)leader), 0);
  rp_test_sleep_ms(2000);
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++)
    if (r->etcd.m[i].pid > 0)
      assert_int_equal(rp_test_etcd_member_stop(&r->etcd, i), 0);
  until = rp_test_now_ms() + 5000;
  while (watch_live(r) && rp_test_now_ms() < until)
    rp_test_sleep_ms(50);
  assert_false(watch_live(r));
  rp_test_sleep_ms(10000);
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r->dev);
  rp_test_shadow_expect_clean(
    "workload with etcd's leader killed, then all of etcd stopped 10 s", &res);
  assert_true(res.writes > 0 && res.reads > 0);
  /* An attach while etcd is down uses the set written down. */
  const char *args_cache[] = { "key",
                               r->cluster.key_path,
                               "tmpdir",
                               r->cluster.dir,
                               "cluster",
                               r->etcd_url,
                               "count",
                               "3",
                               "cluster-cache",
                               r->cache,
                               NULL };
  struct rp_test_cluster view = r->cluster;
  view.n = 0;
  struct rampart_engine *second = rp_test_engine_open(&view, 256, args_cache);
  assert_true(log_has("attaching with the last set", r->cache));
  static uint8_t page[RAMPART_PAGE_SIZE], back[RAMPART_PAGE_SIZE];
  memset(page, 0x5a, sizeof page);
  assert_int_equal(rampart_pwrite(second, page, sizeof page, 4096, 0), 0);
  assert_int_equal(rampart_pread(second, back, sizeof back, 4096), 0);
  assert_memory_equal(page, back, sizeof page);
  rampart_close(second);
  /* etcd back: the watch resumes. */
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++)
    assert_int_equal(rp_test_etcd_member_start(&r->etcd, i), 0);
  assert_int_equal(rp_test_etcd_wait_healthy(&r->etcd, 20000), 0);
  until = rp_test_now_ms() + 15000;
  while (!watch_live(r) && rp_test_now_ms() < until)
    rp_test_sleep_ms(100);
  assert_true(watch_live(r));
  assert_true(the_stats.etcd_watch_restarts > 0);
  verify_all(r, "etcd back, every page");
  rig_stop(r);
}

static void test_forged_registration_refused(void **state)
{
  NEED_ETCD();
  struct rig *r = rig_start(3, "4");
  /* A real rampartd with another key, registered as if it belonged. */
  char other_key[600];
  assert_int_equal(
    rp_test_write_key(r->cluster.dir, "other.key", other_key, sizeof other_key, NULL), 0);
  rp_test_shadow_start(&r->dev, 1, 1, 8, 0x45);
  struct rp_test_server *forged = start_extra(r, other_key, NULL);
  uint64_t until = rp_test_now_ms() + 15000;
  while (rp_test_now_ms() < until && !log_has(forged->addr, "refused"))
    rp_test_sleep_ms(100);
  assert_true(log_has(forged->addr, "refused"));
  const struct rampart_server_stats *s = server_stats(r, forged->addr);
  assert_null(s);
  assert_int_equal(members(r), 3);
  /* The device recorded its servers: rampartctl cluster counts it on each of them. */
  char out[8192];
  const char *ctl[] = { getenv("RAMPARTCTL"), "cluster", r->etcd.endpoints, CLUSTER, NULL };
  until = rp_test_now_ms() + 10000;
  do {
    rp_test_run_program(ctl, out, sizeof out, 10000);
  } while (!strstr(out, "1 device record") && rp_test_now_ms() < until);
  print_message("%s", out);
  assert_non_null(strstr(out, "1 device record"));
  assert_non_null(strstr(out, "4 servers registered"));
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r->dev);
  rp_test_shadow_expect_clean("workload with a forged registration", &res);
  verify_all(r, "with a forged registration, every page");
  rig_stop(r);
}

/* Replies of the wrong shape, each with what the log must say of it. */
static const struct lie {
  const char *path, *body, *how;
} lies[] = {
  { "/v3/kv/range",
    "{\"header\":{\"revision\":\"7\"},\"kvs\":[{\"key\":null,\"value\":\"e30=\"}]}",
    "a kv's \"key\" is not a string" },
  { "/v3/kv/range", "{\"header\":{\"revision\":\"7\"},\"kvs\":{\"key\":\"eA==\"}}",
    "\"kvs\" is not an array" },
  { "/v3/kv/range", "{\"header\":{\"revision\":\"9223372036854775807\"},\"kvs\":[]}",
    "\"revision\" is 9223372036854775807, not a revision" },
  { "/v3/kv/range",
    "{\"header\":{\"revision\":\"7\"},\"kvs\":[{\"key\":\"eA==\",\"value\":7}]}",
    "a kv's \"value\" is not a string" },
  { "/v3/kv/range", "{\"header\":{\"revision\":\"7\"},\"kvs\":[],\"more\":true}",
    "says more keys follow, and has none" },
  { "/v3/kv/range", "[\"not\", \"an object\"]", "the reply is not a JSON object" },
  { "/v3/watch",
    "{\"result\":{\"header\":{\"revision\":\"7\"},\"events\":{\"type\":\"PUT\"}}}\n",
    "\"events\" is not an array" },
  { "/v3/watch",
    "{\"result\":{\"header\":{\"revision\":\"7\"},\"events\":[{\"type\":null,"
    "\"kv\":{\"key\":\"eA==\"}}]}}\n",
    "an event's \"type\" is not a string" },
  { "/v3/watch",
    "{\"result\":{\"header\":{\"revision\":\"7\"},\"events\":[{\"kv\":{\"key\":"
    "\"eA==\",\"mod_revision\":\"9223372036854775807\"}}]}}\n",
    "\"mod_revision\" is 9223372036854775807, not a revision" },
  { "/v3/watch",
    "{\"result\":{\"header\":{\"revision\":\"9223372036854775807\"},"
    "\"created\":true}}\n",
    "\"revision\" is 9223372036854775807, not a revision" },
};

/* A device whose endpoint list starts with a liar: it attaches and watches through the
 * real members, every byte written is read back, and the log names the liar. */
static void test_hostile_gateway_listed_first(void **state)
{
  NEED_ETCD();
  struct rig *r = rig_start(3, "3");
  for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
    const struct lie *l = &lies[i];
    struct rp_test_etcd_liar liar;
    assert_int_equal(
      rp_test_etcd_liar_start(&liar, r->etcd.m[0].client_port, l->path, l->body), 0);
    char url[400], cache[800], liar_url[64];
    const char *real = strchr(r->etcd_url, '/') + 2; /* past "etcd://" */
    snprintf(url, sizeof url, "etcd://127.0.0.1:%u,%s", liar.port, real);
    snprintf(cache, sizeof cache, "%s/liar-%zu.servers", r->cluster.dir, i);
    snprintf(liar_url, sizeof liar_url, "etcd at http://127.0.0.1:%u answered", liar.port);
    const char *args[] = { "key",
                           r->cluster.key_path,
                           "tmpdir",
                           r->cluster.dir,
                           "cluster",
                           url,
                           "count",
                           "3",
                           "cluster-cache",
                           cache,
                           NULL };
    struct rp_test_cluster view = r->cluster;
    view.n = 0;
    struct rampart_engine *e = rp_test_engine_open(&view, 256, args);
    static uint8_t page[RAMPART_PAGE_SIZE], back[RAMPART_PAGE_SIZE];
    for (unsigned p = 0; p < 64; p++) {
      memset(page, (int)(0x11 * (i + 1) + p), sizeof page);
      assert_int_equal(rampart_pwrite(e, page, sizeof page, (uint64_t)p * sizeof page, 0), 0);
    }
    for (unsigned p = 0; p < 64; p++) {
      memset(page, (int)(0x11 * (i + 1) + p), sizeof page);
      assert_int_equal(rampart_pread(e, back, sizeof back, (uint64_t)p * sizeof page), 0);
      assert_memory_equal(page, back, sizeof page);
    }
    uint64_t until = rp_test_now_ms() + 15000;
    bool named = false, live = false;
    while (rp_test_now_ms() < until && !(named && live)) {
      named = log_has(liar_url, l->how);
      rampart_get_stats(e, &the_stats);
      live = the_stats.etcd_watch_live;
      rp_test_sleep_ms(50);
    }
    print_message("%s lie \"%s\": %u told, device served 64 pages, watch %s, log %s\n",
                  l->path, l->how, atomic_load(&liar.lies), live ? "live" : "NOT live",
                  named ? "names the liar" : "DOES NOT name the liar");
    assert_true(atomic_load(&liar.lies) >= 1);
    assert_true(named);
    assert_true(live);
    rampart_get_stats(e, &the_stats);
    assert_int_equal(the_stats.nservers, 3);
    rampart_close(e);
    rp_test_etcd_liar_stop(&liar);
  }
  rig_stop(r);
}

static void b64(const void *in, size_t len, char *out)
{
  EVP_EncodeBlock((unsigned char *)out, in, (int)len);
}

/* A value of 1,100,000 bytes at /rampart/CLUSTER/SUFFIX, put by hand: the client
 * refuses to send one. */
static void put_huge(struct rig *r, const char *suffix)
{
  enum { HUGE = 1100 * 1000 };
  char *value = malloc(HUGE), *body = malloc(HUGE / 3 * 4 + 1024), reply[4096];
  assert_non_null(value);
  assert_non_null(body);
  memset(value, 'h', HUGE);
  char key[128], k64[200];
  snprintf(key, sizeof key, "/rampart/%s/%s", CLUSTER, suffix);
  b64(key, strlen(key), k64);
  size_t n = (size_t)sprintf(body, "{\"key\":\"%s\",\"value\":\"", k64);
  b64(value, HUGE, body + n);
  n += strlen(body + n);
  n += (size_t)sprintf(body + n, "\"}");
  int status = rp_test_http_post(r->etcd.m[0].client_port, "/v3/kv/put", body, n, reply,
                                 sizeof reply, 10000);
  print_message("a %u-byte value put at %s: HTTP %d\n", HUGE, key, status);
  assert_int_equal(status, 200);
  free(body);
  free(value);
}

/* IDs that came and went leave no mark, and values larger than the client's reply
 * buffer under the prefix, a server's key among them, do not stop the reads. */
static void test_registry_churn_and_a_huge_key(void **state)
{
  NEED_ETCD();
  struct rig *r = rig_start(3, "4");
  assert_int_equal(members(r), 3);
  char err[300], reply[4096];
  int64_t lease = 0;
  assert_int_equal(rp_etcd_lease_grant(r->client, 300, &lease, err, sizeof err), 0);
  enum { IDS = 1100, PER_TXN = 100 };
  static char txn[PER_TXN * 512];
  for (unsigned base = 0; base < IDS; base += PER_TXN) {
    size_t n = (size_t)snprintf(txn, sizeof txn, "{\"success\":[");
    for (unsigned i = base; i < base + PER_TXN; i++) {
      char key[128], value[200], k64[200], v64[300];
      snprintf(key, sizeof key, "/rampart/%s/servers/gone-%u:7070", CLUSTER, i);
      snprintf(value, sizeof value,
               "{\"address\":\"127.0.0.1:%u\",\"domain\":\"gone\","
               "\"capacity_pages\":1,\"version\":\"0.1.0\"}",
               1 + i % 1000);
      b64(key, strlen(key), k64);
      b64(value, strlen(value), v64);
      n += (size_t)snprintf(txn + n, sizeof txn - n,
                            "%s{\"request_put\":{\"key\":\"%s\","
                            "\"value\":\"%s\",\"lease\":\"%lld\"}}",
                            i > base ? "," : "", k64, v64, (long long)lease);
    }
    n += (size_t)snprintf(txn + n, sizeof txn - n, "]}");
    assert_int_equal(rp_test_http_post(r->etcd.m[0].client_port, "/v3/kv/txn", txn, n, reply,
                                       sizeof reply, 10000),
                     200);
  }
  rp_test_sleep_ms(1000);
  assert_int_equal(rp_etcd_lease_revoke(r->client, lease, err, sizeof err), 0);
  /* Values of 1.1 MB, larger than a reply the device takes: one beside the servers'
   * keys, one among them (not rampart's: skipped). */
  put_huge(r, "huge");
  put_huge(r, "servers/huge");
  expect_new_server_takes_pages(r, "a rampartd registered after them", 30000);
  verify_all(r, "after the churn and the huge key, every page");
  rig_stop(r);
}

/* Nine servers in three failure domains of three, a 4+2 device (parity=2) over them:
 * placement keeps at most two pieces of a group in one domain, so a whole domain killed
 * at once (three servers) costs no group more than its two parities. Spread over the
 * nine servers alone, about a quarter of the groups would have three pieces in one
 * domain and lose pages. */
static void test_a_whole_failure_domain_lost_with_parity_2(void **state)
{
  NEED_ETCD();
  struct rig *r = rig_begin(0);
  static const char *const domains[] = { "rack-a", "rack-b", "rack-c" };
  for (unsigned i = 0; i < 9; i++)
    start_extra(r, r->cluster.key_path, domains[i % 3]);
  const char *more[] = { "redundancy", "parity-log", "group", "4", "parity", "2", NULL };
  rig_attach(r, "9", more);
  assert_int_equal(members(r), 9);
  /* The domains arrive with the follower's first look at the registry, after the
   * attach's first writes: write the device again, into groups that know them. Until
   * the engine places a group spread, a few pages a round start new groups; rewriting
   * the whole device each round only left thousands of old slots to reclaim. */
  uint64_t t0 = rp_test_now_ms();
  static uint8_t few[16 * RAMPART_PAGE_SIZE];
  for (uint64_t round = 0;
       !log_has("placement: groups spread over 3 failure domains", "at most 2") &&
       rp_test_now_ms() - t0 < 20000;
       round++) {
    memset(few, (int)round, sizeof few);
    assert_int_equal(rampart_pwrite(r->dev.engine, few, sizeof few,
                                    (round * 16 % PAGES) * RAMPART_PAGE_SIZE, 0),
                     0);
    rp_test_sleep_ms(100);
  }
  assert_true(log_has("placement: groups spread over 3 failure domains", "at most 2"));
  rp_test_shadow_fill(&r->dev, 0xd0d0);
  rp_test_shadow_start(&r->dev, 1, 1, 8, 0x44);
  rp_test_sleep_ms(300);
  for (unsigned i = 0; i < 9; i += 3)
    assert_int_equal(kill(r->extra[i].pid, SIGKILL), 0); /* rack-a, all at once */
  for (unsigned i = 0; i < 9; i += 3)
    rp_test_server_kill(&r->extra[i]);
  rp_test_sleep_ms(3000);
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r->dev);
  rp_test_shadow_expect_clean("workload while rack-a went down", &res);
  verify_all(r, "rack-a lost, every page");
  rampart_get_stats(r->dev.engine, &the_stats);
  print_message("rack-a (3 of 9) lost: %llu degraded reads, %llu pages lost, groups with "
                "no loss to spare %u\n",
                (unsigned long long)the_stats.pages_degraded_reads,
                (unsigned long long)the_stats.pages_lost, the_stats.groups_no_spare);
  assert_true(the_stats.pages_degraded_reads > 0);
  assert_int_equal(the_stats.pages_lost, 0);
  rig_stop(r);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_attach_new_server_and_replacement),
    cmocka_unit_test(test_drain_announced),
    cmocka_unit_test(test_etcd_leader_killed_then_all_down),
    cmocka_unit_test(test_forged_registration_refused),
    cmocka_unit_test(test_hostile_gateway_listed_first),
    cmocka_unit_test(test_registry_churn_and_a_huge_key),
    cmocka_unit_test(test_a_whole_failure_domain_lost_with_parity_2),
  };
  /* RAMPART_TEST_FILTER=test_name runs one test (cmocka's own glob syntax). */
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
