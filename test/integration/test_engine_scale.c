/* The engine over 64 real rampartd on loopback (docs/scaling.md): one parity-log
 * device across all of them, every page written and checked against a shadow copy, one
 * server killed with SIGKILL, the rebuild waited for, every byte read back; then the
 * killed server started again, empty, which the engine must take as a new incarnation
 * (the 65th entry of its server table) and place pages on.
 *
 * What is about scale here, beyond "it still works": the rebuild's reads must be spread
 * over the survivors. Each server's own counter of reads served (rampartd's STAT) is
 * taken just before the kill and again once the rebuild is done; nothing else reads in
 * between, so the difference is what the rebuild read from each. With parity groups
 * that always take neighbouring servers, a lost server's groups sit on a few neighbours
 * and the rebuild reads from those few while the rest idle.
 *
 * 64 servers need about 4 descriptors each in this process (the engine's connection, a
 * rejoin's, a STAT connection at a time): a limit too low to raise skips with the reason.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "client.h"
#include "engine_cluster.h"
#include "engine_device.h"
#include "rampart.h"

#define SERVERS 64u
#define PAGES 16384u /* 64 MiB: 256 pages a server before parity */
#define VICTIM 17u   /* any server; not the first, whose neighbours wrap around */

static double seconds_since(const struct timespec *t0)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* True when this process may hold enough descriptors, raising its soft limit if it must;
 * otherwise false with the reason. */
static bool descriptors_for_servers(unsigned n, char *why, size_t whylen)
{
  rlim_t want = (rlim_t)n * 4 + 64;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
    snprintf(why, whylen, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    return false;
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
      snprintf(why, whylen,
               "RLIMIT_NOFILE's hard limit is %llu; %u servers need %llu "
               "descriptors",
               (unsigned long long)rl.rlim_max, n, (unsigned long long)want);
      return false;
    }
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
      snprintf(why, whylen, "cannot raise RLIMIT_NOFILE to %llu: %s",
               (unsigned long long)want, strerror(errno));
      return false;
    }
  }
  return true;
}

/* Each server's count of READs served (rampartd's own counter, over a connection of
 * its own; reads[i] for cluster member i, 0 for one not running). */
static void reads_served(const struct rp_test_cluster *c, uint64_t *reads)
{
  for (unsigned i = 0; i < c->n; i++) {
    reads[i] = 0;
    if (c->servers[i].pid <= 0)
      continue;
    struct rp_server_stat st;
    if (!rp_test_server_stat(&c->servers[i], &c->key, &st))
      fail_msg("STAT of %s failed (the reason is above)", c->servers[i].addr);
    reads[i] = st.ops_read;
  }
}

/* Waits until the engine's server table has an entry past the first n that is up: a
 * server that came back empty, as a new incarnation. Returns its index. */
static unsigned wait_new_incarnation(struct rp_test_device *d, unsigned n, unsigned timeout_s)
{
  struct rampart_stats st;
  for (unsigned t = 0; t < timeout_s * 10; t++) {
    rp_test_device_stats(d, &st);
    for (unsigned i = n; i < st.nservers; i++)
      if (st.servers[i].state == RAMPART_SERVER_UP)
        return i;
    usleep(100000);
  }
  fail_msg("no new incarnation came up within %u s (the engine shows %u servers)", timeout_s,
           st.nservers);
  return 0;
}

static void rebuild_spreads_over_survivors(unsigned group)
{
  char why[256];
  if (!descriptors_for_servers(SERVERS, why, sizeof why)) {
    printf("skipped: %s\n", why);
    skip();
  }
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  static struct rp_test_cluster c; /* 130 KiB: not on the stack */
  assert_int_equal(rp_test_cluster_start(&c, SERVERS, "16M", NULL), 0);
  double started_s = seconds_since(&t0);

  char group_text[8];
  snprintf(group_text, sizeof group_text, "%u", group);
  const char *extra[] = { "redundancy", "parity-log", "group", group_text, "lease",
                          "1",          "timeout",    "1000",  NULL };
  clock_gettime(CLOCK_MONOTONIC, &t0);
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, PAGES, extra), PAGES, 1800 + group);
  double open_s = seconds_since(&t0);

  clock_gettime(CLOCK_MONOTONIC, &t0);
  rp_test_device_fill(&d, 0, PAGES); /* each page once: nothing for cleaning to read */
  double fill_s = seconds_since(&t0);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.nservers, SERVERS);
  for (unsigned i = 0; i < SERVERS; i++)
    if (st.servers[i].pages_live == 0)
      fail_msg("server %u holds no page after a fill of %u pages over %u servers", i, PAGES,
               SERVERS);

  static uint64_t before[RP_TEST_MAX_SERVERS], after[RP_TEST_MAX_SERVERS];
  reads_served(&c, before);
  rp_test_server_kill(&c.servers[VICTIM]);
  rp_test_device_wait_noticed(&d, VICTIM, 10);
  rp_test_device_wait_rebuilt(&d, 60);
  reads_served(&c, after);
  rp_test_device_stats(&d, &st);

  unsigned readers = 0;
  uint64_t total = 0, most = 0;
  for (unsigned i = 0; i < SERVERS; i++) {
    if (i == VICTIM)
      continue;
    uint64_t served = after[i] - before[i];
    readers += served > 0;
    total += served;
    most = served > most ? served : most;
  }
  double mean = (double)total / (SERVERS - 1);
  print_message("reads each server served during the rebuild (server %u was killed):\n",
                VICTIM);
  for (unsigned i = 0; i < SERVERS; i++)
    print_message("%4llu%s", (unsigned long long)(after[i] - before[i]),
                  i % 16 == 15 ? "\n" : "");
  print_message(
    "64 servers, group %u: started in %.1f s, attached in %.2f s, filled %u pages "
    "in %.1f s; rebuild: %llu pages in %.2f s; %u of %u survivors served its %llu "
    "reads (the busiest %llu, %.1fx the mean)\n",
    group, started_s, open_s, PAGES, fill_s, (unsigned long long)st.rebuild_pages_moved,
    st.rebuild_seconds, readers, SERVERS - 1, (unsigned long long)total,
    (unsigned long long)most, mean > 0 ? (double)most / mean : 0.0);
  assert_true(st.rebuilds_finished >= 1);
  assert_true(st.rebuild_pages_moved > 0);
  assert_int_equal(st.pages_lost, 0);
  assert_int_equal(st.read_errors, 0);
  assert_int_equal(st.servers[VICTIM].state, RAMPART_SERVER_LOST);
  assert_int_equal(st.servers[VICTIM].pages_live, 0);
  /* Spread: the groups of one lost server reach nearly every survivor, and none of
   * them carries the rebuild alone. */
  if (readers < (SERVERS - 1) * 9 / 10 || (double)most > 3.0 * mean)
    fail_msg("the rebuild read from %u of %u survivors, the busiest %.1fx the mean: its "
             "reads are not spread over the cluster",
             readers, SERVERS - 1, mean > 0 ? (double)most / mean : 0.0);
  assert_int_equal(rp_test_device_verify(&d, false), 0);

  /* The killed server back on its address, empty: a new incarnation, which must be
   * seen (the server table and the stats hold more than the 64 listed) and used. */
  assert_int_equal(rp_test_cluster_restart(&c, VICTIM, NULL), 0);
  unsigned fresh = wait_new_incarnation(&d, SERVERS, 20);
  rp_test_device_workload(&d, 100, 100, 0);
  rp_test_device_stats(&d, &st);
  assert_string_equal(st.servers[fresh].address, c.servers[VICTIM].addr);
  assert_int_equal(st.servers[VICTIM].state, RAMPART_SERVER_LOST); /* the old one stays */
  print_message("server %u rejoined as incarnation %u, holding %llu live pages after "
                "3200 more writes\n",
                VICTIM, fresh, (unsigned long long)st.servers[fresh].pages_live);
  assert_true(st.servers[fresh].pages_live > 0);
  assert_int_equal(rp_test_device_verify(&d, false), 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

static void test_64_servers_group_8_rebuild_reads_from_every_survivor(void **state)
{
  (void)state;
  rebuild_spreads_over_survivors(8);
}

static void test_64_servers_group_4_rebuild_reads_from_every_survivor(void **state)
{
  (void)state;
  rebuild_spreads_over_survivors(4);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_64_servers_group_8_rebuild_reads_from_every_survivor),
    cmocka_unit_test(test_64_servers_group_4_rebuild_reads_from_every_survivor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
