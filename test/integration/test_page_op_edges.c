/* More failure edges of the page ops, each reached on purpose with the fault transport
 * (test/support/fault_transport.h), and each followed by the question that matters: is
 * every copy the engine believes in really there? After the faults, a server other than
 * the faulty one is killed (for real), and every page must still read back equal to the
 * shadow, through the rebuild, with nothing lost; a page that had one copy where the
 * engine counted two would be lost there. Only where the engine said beforehand that a
 * group was unprotected may a page be EIO, and never wrong.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
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
#include "fault_transport.h"
#include "rampart.h"
#include "wire.h"

#define PAGES 1024

struct rig {
  struct rp_test_cluster cluster;
  struct rp_test_device dev;
  struct rp_test_faults *faults;
};

/* Five servers, PAGES pages written once, no rebalancing (its moves would take rules'
 * hits); the fault transport set with no rules. extra: more settings, or NULL. */
static void rig_start(struct rig *r, const char *redundancy, const char *const *extra)
{
  assert_int_equal(rp_test_cluster_start(&r->cluster, 5, "64M", NULL), 0);
  const char *settings[24] = { "redundancy", redundancy, "lease", "3", "timeout", "2000",
                               "rebalance", "0" };
  unsigned n = 8;
  if (strcmp(redundancy, "parity-log") == 0) {
    settings[n++] = "group";
    settings[n++] = "4";
  }
  for (unsigned i = 0; extra && extra[i]; i++)
    settings[n++] = extra[i];
  settings[n] = NULL;
  rp_test_device_init(&r->dev, rp_test_engine_open(&r->cluster, PAGES, settings), PAGES, 97);
  r->faults = rp_test_faults_install(r->dev.engine);
  rp_test_device_fill(&r->dev, 0, PAGES);
}

static void rig_stop(struct rig *r)
{
  rp_test_faults_remove(r->faults);
  rp_test_device_free(&r->dev);
  rp_test_cluster_stop(&r->cluster);
}

static void print_stats(struct rig *r)
{
  static char report[16384];
  struct rampart_stats st;
  rp_test_device_stats(&r->dev, &st);
  rampart_format_stats(&st, report, sizeof report);
  print_message("%s", report);
}

/* Every server up (a killed one's new incarnation), nothing moving or waiting, every
 * live page protected, for half a second running; fails the test after timeout_s. */
static void wait_settled(struct rig *r, unsigned timeout_s)
{
  struct rampart_stats st;
  unsigned quiet = 0;
  for (unsigned i = 0; i < timeout_s * 10 && quiet < 5; i++) {
    rp_test_device_stats(&r->dev, &st);
    bool calm = st.moves_in_flight == 0 && st.ops_waiting == 0 && st.requests_waiting == 0 &&
                st.pages_unprotected == 0 && st.servers_reconnecting == 0;
    /* A killed server's old incarnation stays LOST; its new one must be up. */
    unsigned up = 0;
    for (unsigned s = 0; s < st.nservers; s++) {
      up += st.servers[s].state == RAMPART_SERVER_UP;
      calm &= st.servers[s].state == RAMPART_SERVER_UP ||
              st.servers[s].state == RAMPART_SERVER_LOST;
    }
    calm &= up == r->cluster.n;
    quiet = calm ? quiet + 1 : 0;
    usleep(100000);
  }
  if (quiet < 5) {
    print_stats(r);
    fail_msg("the engine did not settle in %u s", timeout_s);
  }
}

/* After the faults: every page reads back, and no page was lost beyond `lost` (those
 * the test knowingly lost earlier and wrote again). */
static void expect_every_page_but(struct rig *r, uint64_t lost)
{
  wait_settled(r, 30);
  assert_int_equal(rp_test_device_verify(&r->dev, false), 0);
  struct rampart_stats st;
  rp_test_device_stats(&r->dev, &st);
  assert_int_equal(st.pages_lost, lost);
  assert_int_equal(st.pages_unprotected, 0);
}

static void expect_every_page(struct rig *r)
{
  expect_every_page_but(r, 0);
}

/* Server `victim` is killed. Every page reads back while it is away (degraded reads:
 * up to max_eio pages may be EIO, those the engine knew unprotected), and again after
 * its pages are rebuilt; then it rejoins empty and the engine settles. Returns the EIO
 * count of the first read-back. */
static uint64_t kill_and_read_back(struct rig *r, unsigned victim, uint64_t max_eio)
{
  assert_true(rp_test_server_kill(&r->cluster.servers[victim]) != -1);
  rp_test_device_wait_noticed(&r->dev, victim, 10);
  uint64_t eio = rp_test_device_verify(&r->dev, max_eio > 0);
  print_message("server %u killed: %llu pages EIO while it is away (at most %llu allowed)\n",
                victim, (unsigned long long)eio, (unsigned long long)max_eio);
  assert_true(eio <= max_eio);
  rp_test_device_wait_rebuilt(&r->dev, 40);
  struct rampart_stats st;
  rp_test_device_stats(&r->dev, &st);
  print_message("rebuilt: %llu pages lost, %llu rebuilt\n", (unsigned long long)st.pages_lost,
                (unsigned long long)st.rebuild_pages_done);
  uint64_t eio_after = rp_test_device_verify(&r->dev, max_eio > 0);
  assert_true(eio_after <= eio);
  if (max_eio == 0)
    assert_int_equal(st.pages_lost, 0);
  /* Pages lost for real stay lost: write them again so the device is whole. */
  if (eio_after)
    rp_test_device_fill(&r->dev, 0, PAGES);
  assert_int_equal(rp_test_cluster_restart(&r->cluster, victim, NULL), 0);
  return eio;
}

/* ---- mirror ------------------------------------------------------------------------- */

/* Mirror: server 2 refuses some writes, first copies and second copies alike. A write
 * whose second copy was refused completes only once it has two copies elsewhere. Then
 * server 0 is killed at once, before any mover pass: a page believed to have a copy on
 * server 2 that it does not have would be lost. */
static void test_mirror_refused_copy_then_the_other_copy_lost(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "mirror", NULL);
  unsigned rule = rp_test_faults_add(r.faults, (struct rp_test_fault_rule){
    .server = 2, .op = RP_OP_WRITE, .skip = 1, .count = 6, .fault = RP_TEST_FAULT_FAIL,
    .status = RP_ERR_INTERNAL });
  rp_test_device_workload(&r.dev, 40, 100, 0);
  print_message("mirror, refused copies: %u hit\n", rp_test_faults_hits(r.faults, rule));
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 6);
  kill_and_read_back(&r, 0, 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* Mirror: server 2 stores some copies but their replies are lost. The engine cannot
 * know whether they landed; it must not count them, and must not count a slot it gave
 * up on. Server 0 is killed at once. */
static void test_mirror_lost_copy_replies_then_the_other_copy_lost(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "mirror", NULL);
  unsigned rule = rp_test_faults_add(r.faults, (struct rp_test_fault_rule){
    .server = 2, .op = RP_OP_WRITE, .skip = 1, .count = 5,
    .fault = RP_TEST_FAULT_LOSE_REPLY });
  rp_test_device_workload(&r.dev, 40, 100, 0);
  print_message("mirror, lost copy replies: %u hit\n", rp_test_faults_hits(r.faults, rule));
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 5);
  kill_and_read_back(&r, 0, 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* ---- parity-log --------------------------------------------------------------------- */

/* Parity-log: server 1 refuses every write (members and parities) for a burst of
 * overwrites. Once the rules are cleared and the engine says every page is protected
 * again, a different server is killed: every page must read back. */
static void test_parity_log_refusal_burst_then_another_server_lost(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  unsigned rule = rp_test_faults_add(r.faults, (struct rp_test_fault_rule){
    .server = 1, .op = RP_OP_WRITE, .fault = RP_TEST_FAULT_FAIL, .status = RP_ERR_INTERNAL });
  rp_test_device_workload(&r.dev, 20, 100, 0);
  rp_test_faults_clear(r.faults);
  print_message("refusal burst: %u writes refused\n", rp_test_faults_hits(r.faults, rule));
  assert_true(rp_test_faults_hits(r.faults, rule) >= 2);
  wait_settled(&r, 30);
  kill_and_read_back(&r, 3, 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* The same burst, but the other server is killed at once, while the engine still counts
 * groups unprotected. Pages of those groups may be EIO (no more than it counted), none
 * of any other group, and none may be wrong. */
static void test_parity_log_refusal_burst_then_another_server_lost_at_once(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  unsigned rule = rp_test_faults_add(r.faults, (struct rp_test_fault_rule){
    .server = 1, .op = RP_OP_WRITE, .fault = RP_TEST_FAULT_FAIL, .status = RP_ERR_INTERNAL });
  rp_test_device_workload(&r.dev, 20, 100, 0);
  rp_test_faults_clear(r.faults);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  uint64_t unprotected = st.pages_unprotected;
  print_message("refusal burst: %u writes refused, %llu pages unprotected at the kill\n",
                rp_test_faults_hits(r.faults, rule), (unsigned long long)unprotected);
  assert_true(rp_test_faults_hits(r.faults, rule) >= 2);
  uint64_t eio = kill_and_read_back(&r, 3, unprotected);
  expect_every_page_but(&r, eio);
  rig_stop(&r);
}

/* A server is killed; while it is away, its pages are read from their groups, and some
 * pieces of those degraded reads go unanswered by another server. The read must wait
 * for that server (it is only reconnecting), not fail, and never return wrong bytes. */
static void test_a_degraded_reads_piece_unanswered(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "lease", "8", NULL };
  rig_start(&r, "parity-log", extra);
  wait_settled(&r, 10);
  assert_true(rp_test_server_kill(&r.cluster.servers[0]) != -1);
  rp_test_device_wait_noticed(&r.dev, 0, 10);
  unsigned rule = rp_test_faults_add(r.faults, (struct rp_test_fault_rule){
    .server = 2, .op = RP_OP_READ, .skip = 5, .count = 3, .fault = RP_TEST_FAULT_TIMEOUT,
    .hold_ms = 200 });
  uint64_t eio = rp_test_device_verify(&r.dev, true);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("degraded reads, piece unanswered: %u hit, %llu pages EIO, %llu degraded "
                "reads\n", rp_test_faults_hits(r.faults, rule), (unsigned long long)eio,
                (unsigned long long)st.pages_degraded_reads);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 3);
  assert_true(st.pages_degraded_reads >= 1);
  assert_int_equal(eio, 0);
  rp_test_device_wait_rebuilt(&r.dev, 40);
  rp_test_device_stats(&r.dev, &st);
  assert_int_equal(st.pages_lost, 0);
  assert_int_equal(rp_test_device_verify(&r.dev, false), 0);
  assert_int_equal(rp_test_cluster_restart(&r.cluster, 0, NULL), 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* ---- rebuild ------------------------------------------------------------------------ */

/* Server 4 is lost; the rebuild's writes to server 1 are stored but some replies are
 * lost. The rebuilt pages must land somewhere the engine can read them, and the groups
 * they land in must not count copies it gave up on: a second server killed afterwards
 * loses nothing. */
static void test_a_rebuild_whose_write_replies_are_lost(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  wait_settled(&r, 10);
  assert_true(rp_test_server_kill(&r.cluster.servers[4]) != -1);
  rp_test_device_wait_noticed(&r.dev, 4, 10);
  unsigned rule = rp_test_faults_add(r.faults, (struct rp_test_fault_rule){
    .server = 1, .op = RP_OP_WRITE, .skip = 3, .count = 4,
    .fault = RP_TEST_FAULT_LOSE_REPLY });
  rp_test_device_wait_rebuilt(&r.dev, 40);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("rebuild, lost write replies: %u hit, %llu pages rebuilt, %llu lost\n",
                rp_test_faults_hits(r.faults, rule), (unsigned long long)st.rebuild_pages_done,
                (unsigned long long)st.pages_lost);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 4);
  assert_int_equal(st.pages_lost, 0);
  assert_int_equal(rp_test_device_verify(&r.dev, false), 0);
  assert_int_equal(rp_test_cluster_restart(&r.cluster, 4, NULL), 0);
  wait_settled(&r, 30);
  kill_and_read_back(&r, 2, 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* Server 4 is lost; some of the rebuild's reads of the other members are refused by
 * server 2 (it answered, with an error, and still holds the pages). A refused piece is
 * not a second loss: no page may be marked lost. */
static void test_a_rebuild_whose_piece_reads_are_refused(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  wait_settled(&r, 10);
  unsigned rule = rp_test_faults_add(r.faults, (struct rp_test_fault_rule){
    .server = 2, .op = RP_OP_READ, .skip = 5, .count = 3, .fault = RP_TEST_FAULT_FAIL,
    .status = RP_ERR_INTERNAL });
  assert_true(rp_test_server_kill(&r.cluster.servers[4]) != -1);
  rp_test_device_wait_noticed(&r.dev, 4, 10);
  rp_test_device_wait_rebuilt(&r.dev, 40);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("rebuild, refused piece reads: %u hit, %llu pages rebuilt, %llu lost\n",
                rp_test_faults_hits(r.faults, rule), (unsigned long long)st.rebuild_pages_done,
                (unsigned long long)st.pages_lost);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 3);
  assert_int_equal(st.pages_lost, 0);
  assert_int_equal(rp_test_device_verify(&r.dev, false), 0);
  assert_int_equal(rp_test_cluster_restart(&r.cluster, 4, NULL), 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* ---- write-through ------------------------------------------------------------------ */

/* Write-through: server 1 refuses every member write for a burst while the disk copies
 * land; then server 2 is killed at once. Every page has its disk copy: none may be EIO. */
static void test_write_through_refused_members_then_a_server_lost(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "write-through", NULL);
  unsigned rule = rp_test_faults_add(r.faults, (struct rp_test_fault_rule){
    .server = 1, .op = RP_OP_WRITE, .fault = RP_TEST_FAULT_FAIL, .status = RP_ERR_INTERNAL });
  rp_test_device_workload(&r.dev, 20, 100, 0);
  rp_test_faults_clear(r.faults);
  print_message("write-through, refused members: %u hit\n",
                rp_test_faults_hits(r.faults, rule));
  assert_true(rp_test_faults_hits(r.faults, rule) >= 2);
  kill_and_read_back(&r, 2, 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* ---- late requests ------------------------------------------------------------------ */

/* Writes and FREEs to server 3 reach it 1500 ms late (longer than io-timeout=1000 and
 * timeout=1000, though held before the connection, so no request times out and the
 * server is never taken for failed), under overwrites and trims: a late WRITE must never
 * land over a slot reused meanwhile, a late FREE never drop a later page. Then server 0
 * is killed. */
static void test_requests_arriving_1500_ms_late(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "timeout", "1000", "io-timeout", "1000", NULL };
  rig_start(&r, "parity-log", extra);
  unsigned writes = rp_test_faults_add(r.faults, (struct rp_test_fault_rule){
    .server = 3, .op = RP_OP_WRITE, .skip = 10, .count = 6, .fault = RP_TEST_FAULT_DELAY,
    .hold_ms = 1500 });
  unsigned frees = rp_test_faults_add(r.faults, (struct rp_test_fault_rule){
    .server = 3, .op = RP_OP_FREE, .skip = 2, .count = 6, .fault = RP_TEST_FAULT_DELAY,
    .hold_ms = 1500 });
  rp_test_device_workload(&r.dev, 120, 100, 20);
  print_message("late requests: %u writes, %u FREEs\n", rp_test_faults_hits(r.faults, writes),
                rp_test_faults_hits(r.faults, frees));
  assert_int_equal(rp_test_faults_hits(r.faults, writes), 6);
  assert_true(rp_test_faults_hits(r.faults, frees) >= 1);
  expect_every_page(&r);
  kill_and_read_back(&r, 0, 0);
  expect_every_page(&r);
  rig_stop(&r);
}

int main(void)
{
  if (!rp_test_rampartd_path())
    return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mirror_refused_copy_then_the_other_copy_lost),
    cmocka_unit_test(test_mirror_lost_copy_replies_then_the_other_copy_lost),
    cmocka_unit_test(test_parity_log_refusal_burst_then_another_server_lost),
    cmocka_unit_test(test_parity_log_refusal_burst_then_another_server_lost_at_once),
    cmocka_unit_test(test_a_degraded_reads_piece_unanswered),
    cmocka_unit_test(test_a_rebuild_whose_write_replies_are_lost),
    cmocka_unit_test(test_a_rebuild_whose_piece_reads_are_refused),
    cmocka_unit_test(test_write_through_refused_members_then_a_server_lost),
    cmocka_unit_test(test_requests_arriving_1500_ms_late),
  };
  /* RAMPART_TEST_FILTER=test_name runs one test (cmocka's own glob syntax). */
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
