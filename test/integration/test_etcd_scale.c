/* 64 rampartd registered in a real three-member etcd, and a device with a placement set
 * of 32 (cluster=etcd://... count=32): the device takes exactly 32, every page reads back,
 * and the figures docs/scaling.md models are printed: attach time, client memory and
 * threads, and the time from a server's registration to the device's first page there
 * (p50, p99 over 32 servers registered one at a time). Figures are printed, not asserted:
 * they depend on the machine's load, and the suite's pass marks must not.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "cluster_keys.h"
#include "engine_cluster.h"
#include "etcd_cluster.h"
#include "etcd_gateway.h"
#include "rampart.h"
#include "server_process.h"
#include "shadow_device.h"

#define SERVERS 64u
#define SET 32u
#define PAGES 4096u
#define CLUSTER "scale"

/* A line of /proc/self/status in KiB ("VmRSS:", "VmLck:"), 0 if absent. */
static uint64_t status_kib(const char *field)
{
  FILE *f = fopen("/proc/self/status", "re");
  char line[256];
  uint64_t kib = 0;
  size_t len = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, len) == 0) {
      kib = strtoull(line + len, NULL, 10);
      break;
    }
  if (f)
    fclose(f);
  return kib;
}

static unsigned threads(void)
{
  DIR *d = opendir("/proc/self/task");
  unsigned n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    n += e->d_name[0] != '.';
  if (d)
    closedir(d);
  return n;
}

static int cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static unsigned registered(struct rp_etcd *client)
{
  static struct rp_cluster_registry reg;
  char err[600];
  if (!reg.servers)
    assert_int_equal(rp_cluster_registry_init(&reg, CLUSTER, 256, NULL, 0), 0);
  if (rp_cluster_registry_read(&reg, client, NULL, err, sizeof err) < 0)
    return 0;
  unsigned n = 0;
  for (unsigned i = 0; i < reg.n; i++)
    n += reg.servers[i].registered && reg.servers[i].advertised;
  return n;
}

static struct rampart_stats st;

static uint64_t pages_on(struct rampart_engine *e, const char *address)
{
  rampart_get_stats(e, &st);
  for (unsigned i = st.nservers; i-- > 0;)
    if (strcmp(st.servers[i].address, address) == 0)
      return st.servers[i].state == RAMPART_SERVER_UP ? st.servers[i].pages_stored : 0;
  return 0;
}

static unsigned up(struct rampart_engine *e)
{
  rampart_get_stats(e, &st);
  unsigned n = 0;
  for (unsigned i = 0; i < st.nservers; i++)
    n += st.servers[i].state == RAMPART_SERVER_UP;
  return n;
}

static void test_64_registered_set_of_32(void **state)
{
  const char *why = rp_test_etcd_missing();
  if (why) {
    print_message("skipped: %s\n", why);
    skip();
  }
  static struct rp_test_etcd etcd;
  static struct rp_test_cluster cluster;
  char etcd_dir[512], err[600];
  assert_int_equal(rp_test_tmpdir(etcd_dir, sizeof etcd_dir), 0);
  assert_int_equal(rp_test_etcd_start(&etcd, etcd_dir), 0);
  struct rp_etcd_options eo = { .endpoints = etcd.endpoints,
                                .timeout_ms = 3000,
                                .reply_max = 1 << 20 };
  struct rp_etcd *client = rp_etcd_new(&eo, err, sizeof err);
  assert_non_null(client);
  const char *member_args[] = { "--etcd", etcd.endpoints, "--cluster", CLUSTER, NULL };
  assert_int_equal(rp_test_cluster_start_args(&cluster, SERVERS, "16M", member_args), 0);
  uint64_t until = rp_test_now_ms() + 20000;
  while (registered(client) < SERVERS && rp_test_now_ms() < until)
    rp_test_sleep_ms(200);
  assert_int_equal(registered(client), SERVERS);

  char url[300], cache[700];
  size_t n = (size_t)snprintf(url, sizeof url, "etcd://");
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++)
    n += (size_t)snprintf(url + n, sizeof url - n, "%s127.0.0.1:%u", i ? "," : "",
                          etcd.m[i].client_port);
  snprintf(url + n, sizeof url - n, "/%s", CLUSTER);
  snprintf(cache, sizeof cache, "%s/scale.servers", cluster.dir);
  struct rp_test_cluster view = cluster;
  view.n = 0;
  const char *extra[] = { "key", cluster.key_path, "tmpdir", cluster.dir,     "cluster",
                          url,   "count",          "32",     "cluster-cache", cache,
                          NULL };
  /* Locked as a pager runs (mlock=true: mlockall, current and future), so what the
   * engine maps and its threads' stacks count whole; where mlockall is refused, only
   * the resident growth is shown. */
  bool locking = mlockall(MCL_CURRENT | MCL_FUTURE) == 0;
  if (!locking)
    print_message("locked memory not measured: mlockall: %s\n", strerror(errno));
  unsigned threads_before = threads();
  uint64_t rss_before = status_kib("VmRSS:");
  uint64_t lck_before = status_kib("VmLck:");
  uint64_t t0 = rp_test_now_ms();
  struct rampart_engine *e = rp_test_engine_open(&view, PAGES, extra);
  uint64_t attach_ms = rp_test_now_ms() - t0;
  uint64_t rss_after = status_kib("VmRSS:");
  uint64_t lck_after = status_kib("VmLck:");
  unsigned threads_after = threads();
  if (locking)
    munlockall();
  rampart_get_stats(e, &st);
  assert_int_equal(up(e), SET);
  /* Under mlockall the resident growth is what the attach locked; VmLck also counts
   * locked mappings that hold no page yet (it ran 64 MiB above it in some runs). */
  print_message("64 registered, set of 32: attach %llu ms; engine's own count of its memory "
                "%.1f MiB (%.1f MiB fixed: buffers and pools); process RSS +%.1f MiB%s "
                "(VmLck +%.1f MiB); threads %u -> %u\n",
                (unsigned long long)attach_ms, (double)st.client_memory_bytes / 1048576.0,
                (double)st.client_memory_fixed_bytes / 1048576.0,
                (double)(rss_after - rss_before) / 1024.0, locking ? " under mlockall" : "",
                (double)(lck_after - lck_before) / 1024.0, threads_before, threads_after);
  struct rp_test_shadow dev;
  rp_test_shadow_init(&dev, e, PAGES);
  rp_test_shadow_fill(&dev, 0x64);
  struct rp_test_shadow_result res;
  assert_int_equal(rp_test_shadow_verify(&dev, &res), 0);
  assert_int_equal(res.mismatches, 0);
  rp_test_shadow_destroy(&dev); /* closes the engine */

  /* Registration to first page: a device of count=64 over the 32 servers it finds,
   * while the other 32 register one at a time. */
  for (unsigned i = SET; i < SERVERS; i++)
    rp_test_server_stop(&cluster.servers[i]);
  until = rp_test_now_ms() + 5000;
  while (registered(client) > SET && rp_test_now_ms() < until)
    rp_test_sleep_ms(100);
  const char *extra64[] = { "key", cluster.key_path, "tmpdir", cluster.dir,     "cluster",
                            url,   "count",          "64",     "cluster-cache", cache,
                            NULL };
  e = rp_test_engine_open(&view, PAGES, extra64);
  assert_int_equal(up(e), SET);
  rp_test_shadow_init(&dev, e, PAGES);
  rp_test_shadow_fill(&dev, 0x65);
  rp_test_shadow_start(&dev, 1, 1, 8, 0x66);
  static uint64_t took[SERVERS];
  unsigned samples = 0;
  for (unsigned i = SET; i < SERVERS; i++) {
    t0 = rp_test_now_ms();
    assert_int_equal(rp_test_cluster_restart(&cluster, i, NULL), 0);
    until = t0 + 20000;
    while (pages_on(e, cluster.servers[i].addr) == 0 && rp_test_now_ms() < until)
      rp_test_sleep_ms(10);
    assert_true(pages_on(e, cluster.servers[i].addr) > 0);
    took[samples++] = rp_test_now_ms() - t0;
  }
  res = rp_test_shadow_stop(&dev);
  assert_int_equal(res.read_failures + res.write_failures + res.mismatches, 0);
  qsort(took, samples, sizeof took[0], cmp_u64);
  print_message("registration (rampartd start) to the device's first page there, %u "
                "servers one at a time: p50 %llu ms, p99 %llu ms, max %llu ms\n",
                samples, (unsigned long long)took[samples / 2],
                (unsigned long long)took[(samples * 99 + 99) / 100 - 1],
                (unsigned long long)took[samples - 1]);
  assert_int_equal(up(e), SERVERS);
  assert_int_equal(rp_test_shadow_verify(&dev, &res), 0);
  assert_int_equal(res.mismatches, 0);
  rp_test_shadow_destroy(&dev);
  rp_etcd_free(client);
  rp_test_etcd_stop(&etcd);
  rp_test_tmpdir_remove(etcd_dir);
  rp_test_cluster_stop(&cluster);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_64_registered_set_of_32),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
