/* parity=2: each parity-log group carries P and Q, so any two of its servers may be lost
 * at once and every byte still reads back, through degraded reads and after the
 * rebuild; a third loss in a group is EIO for exactly the pages the engine counts lost,
 * never wrong bytes. Real rampartd processes on loopback, killed (SIGKILL) or stalled
 * (SIGSTOP) under a write and read load that the harness checks against a shadow copy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "engine_device.h"
#include "rampart.h"

#define PAGE RAMPART_PAGE_SIZE

/* Parity-log S+P on n fresh servers (faults: rp_test_cluster_start's); a dead server is
 * lost after a second. */
static void start_parity_device(struct rp_test_cluster *c, struct rp_test_device *d,
                                unsigned n, const char *const *faults, const char *group,
                                const char *parity, uint64_t pages, uint64_t seed)
{
  assert_int_equal(rp_test_cluster_start(c, n, "64M", faults), 0);
  const char *extra[] = { "redundancy", "parity-log", "group",   group,  "parity", parity,
                          "lease",      "1",          "timeout", "1000", NULL };
  rp_test_device_init(d, rp_test_engine_open(c, pages, extra), pages, seed);
  struct rampart_stats st;
  rp_test_device_stats(d, &st);
  assert_int_equal(st.parity, (uint32_t)(parity[0] - '0'));
  assert_int_equal(st.group_size, (uint32_t)atoi(group));
}

static void start_pq_device(struct rp_test_cluster *c, struct rp_test_device *d, unsigned n,
                            const char *group, uint64_t pages, uint64_t seed)
{
  start_parity_device(c, d, n, NULL, group, "2", pages, seed);
}

/* The device read back in full while servers a and b are away, then again once both
 * are noticed and rebuilt: nothing lost, nothing failed verification. */
static void whole_through_the_rebuild(struct rp_test_device *d, unsigned a, unsigned b)
{
  rp_test_device_verify(d, false);
  rp_test_device_wait_noticed(d, a, 10);
  rp_test_device_wait_noticed(d, b, 10);
  rp_test_device_wait_rebuilt(d, 60);
  rp_test_device_verify(d, false);
  struct rampart_stats st;
  rp_test_device_stats(d, &st);
  if (st.read_errors || st.pages_lost || st.integrity_failures)
    rp_test_device_print_stats(d);
  assert_int_equal(st.read_errors, 0);
  assert_int_equal(st.pages_lost, 0);
  assert_int_equal(st.integrity_failures, 0);
}

/* Two servers killed at the same instant in the middle of the load: the load goes on
 * (its reads checked), the whole device reads back while degraded, and again after the
 * rebuild. */
static void two_killed_at_once(unsigned n, const char *group, uint64_t seed)
{
  struct rp_test_cluster c;
  struct rp_test_device d;
  start_pq_device(&c, &d, n, group, 4096, seed);
  rp_test_device_workload(&d, 150, 80, 5);
  rp_test_server_kill(&c.servers[1]);
  rp_test_server_kill(&c.servers[4]);
  rp_test_device_workload(&d, 100, 60, 5);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  print_message("%s+2 on %u, two killed: %u groups with one loss to spare, %u with none\n",
                group, n, st.groups_one_spare, st.groups_no_spare);
  whole_through_the_rebuild(&d, 1, 4);
  rp_test_device_workload(&d, 40, 60, 5);
  rp_test_device_stats(&d, &st);
  print_message("after the rebuild: %llu degraded reads, %llu pages moved, wire %.3f "
                "pages per page written; groups with no loss to spare %u\n",
                (unsigned long long)st.pages_degraded_reads,
                (unsigned long long)st.rebuild_pages_done,
                (double)st.wire_bytes_written / (double)st.pages_written / (PAGE + 32),
                st.groups_no_spare);
  assert_true(st.pages_degraded_reads > 0);
  assert_true(st.rebuild_pages_done > 0);
  assert_int_equal(st.groups_no_spare, 0);
  assert_int_equal(st.read_errors, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

static void test_4_plus_2_on_8_survives_two_killed_at_once(void **state)
{
  (void)state;
  two_killed_at_once(8, "4", 71);
}

static void test_8_plus_2_on_12_survives_two_killed_at_once(void **state)
{
  (void)state;
  two_killed_at_once(12, "8", 73);
}

/* The widest group, S = 16, under parity=1 and parity=2 on two servers more than it
 * spans (so a rebuild has somewhere to put each lost piece): `parity` servers killed at
 * once, every byte reads back degraded and after the rebuild, and the wire carries
 * 1 + P/16 pages per page written, which only groups of 16 give. */
static void sixteen_wide_survives(const char *parity, uint64_t seed)
{
  unsigned p = (unsigned)(parity[0] - '0'), n = 16 + p + 2;
  struct rp_test_cluster c;
  struct rp_test_device d;
  start_parity_device(&c, &d, n, NULL, "16", parity, 4096, seed);
  rp_test_device_fill(&d, 0, 4096);
  rp_test_device_workload(&d, 60, 80, 5);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  double wire = (double)st.wire_bytes_written / (double)st.pages_written / (PAGE + 32);
  print_message("16+%u on %u: wire %.3f pages per page written\n", p, n, wire);
  assert_true(wire < 1.0 + (p + 0.5) / 16.0);
  rp_test_server_kill(&c.servers[3]);
  if (p == 2)
    rp_test_server_kill(&c.servers[11]);
  rp_test_device_workload(&d, 40, 60, 5);
  rp_test_device_verify(&d, false);
  rp_test_device_wait_noticed(&d, 3, 10);
  if (p == 2)
    rp_test_device_wait_noticed(&d, 11, 10);
  rp_test_device_wait_rebuilt(&d, 60);
  rp_test_device_verify(&d, false);
  rp_test_device_stats(&d, &st);
  print_message("after the rebuild: %llu degraded reads, %llu pages moved\n",
                (unsigned long long)st.pages_degraded_reads,
                (unsigned long long)st.rebuild_pages_done);
  assert_true(st.pages_degraded_reads > 0);
  assert_true(st.rebuild_pages_done > 0);
  assert_int_equal(st.groups_no_spare, 0);
  assert_int_equal(st.read_errors, 0);
  assert_int_equal(st.pages_lost, 0);
  assert_int_equal(st.integrity_failures, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

static void test_16_plus_1_on_19_survives_a_loss(void **state)
{
  (void)state;
  sixteen_wide_survives("1", 79);
}

static void test_16_plus_2_on_20_survives_two_killed_at_once(void **state)
{
  (void)state;
  sixteen_wide_survives("2", 83);
}

#define SPILL_TEST_PAGES 6656u /* 26 MiB */

/* Two servers of eight killed at once, with too little room on the six left for a
 * 4+2 device's pages: stored 1.5 times over (39 MiB, and the old versions cleaning
 * has not reclaimed), they about fill the eight's 6 MiB each (48) and are far more than
 * the six's 36. The rebuild and the load's writes fall back to the spill store (more
 * pages than the eight may have spilled already) and every byte reads back; then four fresh servers join (the room the two had, and
 * some: the cleaner's sparse groups hold the rest), and every spilled page moves back
 * to the servers. (Fresh addresses: a killed server's port may be taken by then.) */
static void test_two_lost_and_full_servers_spill_and_come_back(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  assert_int_equal(rp_test_cluster_start(&c, 12, "6M", NULL), 0);
  const char *extra[] = { "redundancy", "parity-log", "group",   "4",    "parity", "2",
                          "lease",      "1",          "timeout", "1000", NULL };
  c.n = 8; /* the device starts on the first eight; the last four join later */
  rp_test_device_init(&d, rp_test_engine_open(&c, SPILL_TEST_PAGES, extra), SPILL_TEST_PAGES,
                      89);
  c.n = 12;
  rp_test_device_fill(&d, 0, SPILL_TEST_PAGES);
  rp_test_device_workload(&d, 40, 80, 5);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  print_message("eight up: %llu pages spilled, %llu remote\n",
                (unsigned long long)st.pages_spilled, (unsigned long long)st.pages_remote);
  rp_test_server_kill(&c.servers[2]);
  rp_test_server_kill(&c.servers[6]);
  rp_test_device_workload(&d, 60, 70, 5);
  rp_test_device_verify(&d, false);
  rp_test_device_wait_noticed(&d, 2, 10);
  rp_test_device_wait_noticed(&d, 6, 10);
  rp_test_device_wait_rebuilt(&d, 60);
  rp_test_device_verify(&d, false);
  rp_test_device_stats(&d, &st);
  print_message("two lost, six full: %llu pages spilled, %llu remote\n",
                (unsigned long long)st.pages_spilled, (unsigned long long)st.pages_remote);
  /* The six cannot hold every live page 1.5 times over: some are on disk. (More than
   * before the loss, most of the time; but cleaning may have compacted enough groups
   * meanwhile for the six to take some of the eight's spill back.) */
  assert_true(st.pages_spilled > 0);
  assert_int_equal(st.pages_lost, 0);
  uint64_t spilled = st.pages_spilled;
  char msg[256];
  for (unsigned i = 8; i < 12; i++)
    assert_int_equal(rampart_server_add(d.engine, c.servers[i].addr, msg, sizeof msg), 0);
  for (unsigned i = 0; i < 600 && st.pages_spilled > 0; i++) {
    usleep(100 * 1000);
    rp_test_device_stats(&d, &st);
  }
  print_message("four joined: %llu pages still spilled of %llu, %llu unspill moves\n",
                (unsigned long long)st.pages_spilled, (unsigned long long)spilled,
                (unsigned long long)st.moves_by_reason[RAMPART_MOVE_UNSPILL]);
  assert_int_equal(st.pages_spilled, 0);
  assert_true(st.moves_by_reason[RAMPART_MOVE_UNSPILL] >= spilled);
  rp_test_device_workload(&d, 20, 60, 5);
  rp_test_device_verify(&d, false);
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.read_errors, 0);
  assert_int_equal(st.pages_lost, 0);
  assert_int_equal(st.integrity_failures, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* The second loss lands while the first one's rebuild runs: groups that had moved are
 * whole again, the rest spare one more loss, and nothing is lost. */
static void test_a_second_loss_during_the_first_rebuild(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  start_pq_device(&c, &d, 8, "4", 4096, 79);
  rp_test_device_workload(&d, 200, 80, 5);
  rp_test_server_kill(&c.servers[2]);
  rp_test_device_wait_noticed(&d, 2, 10);
  /* Polled, not between batches: the rebuild of a few thousand pages takes a few
   * hundred milliseconds, and a batch could step over it. */
  struct rampart_stats st;
  bool rebuilding = false;
  for (unsigned i = 0; i < 10000 && !rebuilding; i++) {
    rp_test_device_stats(&d, &st);
    rebuilding = st.rebuild_running && st.servers[2].state == RAMPART_SERVER_LOST;
    if (!rebuilding)
      usleep(1000);
  }
  assert_true(rebuilding);
  rp_test_server_kill(&c.servers[5]);
  rp_test_device_workload(&d, 60, 60, 5);
  whole_through_the_rebuild(&d, 2, 5);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* One server stalled (SIGSTOP: its connection stays open, silent) and another killed:
 * reads that need the stalled one are rebuilt from the rest, and the stalled one,
 * declared lost in turn, is rebuilt too. */
static void test_a_stalled_server_and_a_killed_one(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  start_pq_device(&c, &d, 8, "4", 4096, 83);
  rp_test_device_workload(&d, 150, 80, 5);
  assert_int_equal(rp_test_server_pause(&c.servers[3]), 0);
  rp_test_server_kill(&c.servers[6]);
  rp_test_device_workload(&d, 80, 60, 5);
  whole_through_the_rebuild(&d, 3, 6);
  assert_int_equal(rp_test_server_resume(&c.servers[3]), 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* A server that alters every page it returns, and another killed: every copy read from
 * the first fails verification and is rebuilt from its group, with the killed server's
 * piece missing too where the group has one there (P and Q then both needed). */
static void test_a_corrupting_server_and_a_killed_one(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  const char *faults[] = { NULL, "flip", NULL, NULL, NULL, NULL, NULL, NULL };
  start_parity_device(&c, &d, 8, faults, "4", "2", 2048, 97);
  rp_test_device_workload(&d, 100, 90, 0);
  rp_test_server_kill(&c.servers[4]);
  rp_test_device_workload(&d, 40, 50, 0);
  rp_test_device_verify(&d, false);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  print_message("a corrupting server and a killed one: %llu copies failed verification, "
                "%llu degraded reads, %llu read errors\n",
                (unsigned long long)st.integrity_failures,
                (unsigned long long)st.pages_degraded_reads,
                (unsigned long long)st.read_errors);
  assert_true(st.integrity_failures > 0);
  assert_int_equal(st.read_errors, 0);
  assert_int_equal(st.pages_lost, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* Three servers of eight killed at once: groups with three pieces on them cannot come
 * back. The engine says so before any read (groups with no loss to spare), the mover
 * marks exactly their lost members lost, and the reads fail with EIO for exactly those
 * pages; every other byte reads back as written. */
static void test_a_third_loss_is_eio_for_exactly_the_pages_counted(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  start_pq_device(&c, &d, 8, "4", 4096, 89);
  rp_test_device_fill(&d, 0, 4096);
  rp_test_server_kill(&c.servers[0]);
  rp_test_server_kill(&c.servers[3]);
  rp_test_server_kill(&c.servers[5]);
  rp_test_device_wait_noticed(&d, 0, 10);
  rp_test_device_wait_noticed(&d, 3, 10);
  rp_test_device_wait_noticed(&d, 5, 10);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  uint32_t no_spare = st.groups_no_spare;
  rp_test_device_wait_rebuilt(&d, 60);
  uint64_t eio = rp_test_device_verify(&d, true);
  rp_test_device_stats(&d, &st);
  print_message("three of eight lost: %u groups had no loss to spare, %llu pages lost, "
                "%llu read EIO\n",
                no_spare, (unsigned long long)st.pages_lost, (unsigned long long)eio);
  assert_true(no_spare > 0);
  assert_true(eio > 0);
  assert_int_equal(eio, st.pages_lost);
  assert_int_equal(st.integrity_failures, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* parity=2 is parity-log's alone, and needs a server for each parity. */
static void test_parity_2_is_refused_where_it_cannot_work(void **state)
{
  (void)state;
  struct rampart_config *cfg = rampart_config_new();
  char err[512];
  assert_non_null(cfg);
  assert_int_equal(rampart_config_set(cfg, "size", "16M", err, sizeof err), 0);
  assert_int_equal(rampart_config_set(cfg, "servers",
                                      "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,"
                                      "127.0.0.1:4,127.0.0.1:5",
                                      err, sizeof err),
                   0);
  assert_int_equal(rampart_config_set(cfg, "parity", "3", err, sizeof err), -1);
  assert_int_equal(rampart_config_set(cfg, "parity", "2", err, sizeof err), 0);
  assert_int_equal(rampart_config_set(cfg, "redundancy", "mirror", err, sizeof err), 0);
  assert_int_equal(rampart_config_check(cfg, err, sizeof err), -1);
  assert_non_null(strstr(err, "parity-log"));
  assert_int_equal(rampart_config_set(cfg, "redundancy", "parity-log", err, sizeof err), 0);
  assert_int_equal(rampart_config_set(cfg, "group", "4", err, sizeof err), 0);
  assert_int_equal(rampart_config_check(cfg, err, sizeof err), -1);
  assert_non_null(strstr(err, "needs at least 6 servers"));
  assert_int_equal(rampart_config_set(cfg, "group", "3", err, sizeof err), 0);
  assert_int_equal(rampart_config_check(cfg, err, sizeof err), 0);
  rampart_config_free(cfg);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_parity_2_is_refused_where_it_cannot_work),
    cmocka_unit_test(test_4_plus_2_on_8_survives_two_killed_at_once),
    cmocka_unit_test(test_8_plus_2_on_12_survives_two_killed_at_once),
    cmocka_unit_test(test_16_plus_1_on_19_survives_a_loss),
    cmocka_unit_test(test_16_plus_2_on_20_survives_two_killed_at_once),
    cmocka_unit_test(test_two_lost_and_full_servers_spill_and_come_back),
    cmocka_unit_test(test_a_second_loss_during_the_first_rebuild),
    cmocka_unit_test(test_a_stalled_server_and_a_killed_one),
    cmocka_unit_test(test_a_corrupting_server_and_a_killed_one),
    cmocka_unit_test(test_a_third_loss_is_eio_for_exactly_the_pages_counted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
