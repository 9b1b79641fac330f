/* More failure edges of the page ops, each reached on purpose with the fault transport
 * (test/support/fault_transport.h), and each followed by the question that matters: is
 * every copy the engine believes in really there? After the faults, a server other than
 * the faulty one is killed (for real), and every page must still read back equal to the
 * shadow, through the rebuild, with nothing lost; a page that had one copy where the
 * engine counted two would be lost there. Only where the engine said beforehand that a
 * group was unprotected may a page be EIO, and never wrong.
 *
 * A second pass (after the first nine) reaches edges neither these nor
 * test_page_op_faults.c do: a degraded read whose piece is refused (parity-log) or whose
 * only other copy is refused (mirror), or comes back corrupt; both copies of a mirror
 * page refused; a mirror copy corrupt and its server emptied before another loss; a
 * parity held past io-timeout while a member's server is killed; a server stalled while
 * another refuses writes; every FREE refused; write-through member replies lost. Pages
 * are told apart by server with rules that only count (probe_owners), so each fault
 * lands on the request the case names.
 */
#include <errno.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "engine_device.h"
#include "fault_rig.h"
#include "fault_transport.h"
#include "rampart.h"
#include "wire.h"

#define PAGES 1024

/* Five servers, PAGES pages written once, no rebalancing (its moves would take rules'
 * hits); the fault transport set with no rules. extra: more settings, or NULL. */
static void rig_start(struct rig *r, const char *redundancy, const char *const *extra)
{
  static const char *const base[] = {
    "lease", "3", "timeout", "2000", "rebalance", "0", NULL
  };
  rig_open(r, base, redundancy, extra, PAGES, 97);
}

static void expect_every_page(struct rig *r)
{
  rig_expect_every_page_but(r, 0);
}

/* Server `victim` was killed: its pages are rebuilt with none lost (and read back then,
 * with `verify`), it rejoins empty, and every page reads back once settled. */
static void expect_rebuilt_then_rejoined(struct rig *r, unsigned victim, bool verify)
{
  rp_test_device_wait_rebuilt(&r->dev, 40);
  struct rampart_stats st;
  rp_test_device_stats(&r->dev, &st);
  assert_int_equal(st.pages_lost, 0);
  if (verify)
    assert_int_equal(rp_test_device_verify(&r->dev, false), 0);
  assert_int_equal(rp_test_cluster_restart(&r->cluster, victim, NULL), 0);
  expect_every_page(r);
}

/* Server `victim` is killed. Every page reads back while it is away (degraded reads:
 * up to max_eio pages may be EIO, those the engine knew unprotected), and again after
 * its pages are rebuilt; then it rejoins empty and the engine settles. With
 * count_at_kill the allowance is also what the engine counts unprotected once it has
 * noticed the kill: a kill "at once" lands while the burst's last refusals are still
 * being answered, and a group those leave without parity after the caller's count is
 * as exposed as one counted before. Returns the EIO count of the first read-back. */
static uint64_t kill_and_read_back_counting(struct rig *r, unsigned victim, uint64_t max_eio,
                                            bool count_at_kill)
{
  assert_true(rp_test_server_kill(&r->cluster.servers[victim]) != -1);
  rp_test_device_wait_noticed(&r->dev, victim, 10);
  if (count_at_kill) {
    struct rampart_stats at_kill;
    rp_test_device_stats(&r->dev, &at_kill);
    print_message("%llu pages unprotected once the kill was noticed\n",
                  (unsigned long long)at_kill.pages_unprotected);
    if (at_kill.pages_unprotected > max_eio)
      max_eio = at_kill.pages_unprotected;
  }
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

static uint64_t kill_and_read_back(struct rig *r, unsigned victim, uint64_t max_eio)
{
  return kill_and_read_back_counting(r, victim, max_eio, false);
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
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 2,
                                           .op = RP_OP_WRITE,
                                           .skip = 1,
                                           .count = 6,
                                           .fault = RP_TEST_FAULT_FAIL,
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
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 2,
                                           .op = RP_OP_WRITE,
                                           .skip = 1,
                                           .count = 5,
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
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 1,
                                           .op = RP_OP_WRITE,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
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
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 1,
                                           .op = RP_OP_WRITE,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
  rp_test_device_workload(&r.dev, 20, 100, 0);
  rp_test_faults_clear(r.faults);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  uint64_t unprotected = st.pages_unprotected;
  print_message("refusal burst: %u writes refused, %llu pages unprotected at the kill\n",
                rp_test_faults_hits(r.faults, rule), (unsigned long long)unprotected);
  assert_true(rp_test_faults_hits(r.faults, rule) >= 2);
  uint64_t eio = kill_and_read_back_counting(&r, 3, unprotected, true);
  rig_expect_every_page_but(&r, eio);
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
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 2,
                                           .op = RP_OP_READ,
                                           .skip = 5,
                                           .count = 3,
                                           .fault = RP_TEST_FAULT_TIMEOUT,
                                           .hold_ms = 200 });
  uint64_t eio = rp_test_device_verify(&r.dev, true);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("degraded reads, piece unanswered: %u hit, %llu pages EIO, %llu degraded "
                "reads\n",
                rp_test_faults_hits(r.faults, rule), (unsigned long long)eio,
                (unsigned long long)st.pages_degraded_reads);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 3);
  assert_true(st.pages_degraded_reads >= 1);
  assert_int_equal(eio, 0);
  expect_rebuilt_then_rejoined(&r, 0, true);
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
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 1,
                                           .op = RP_OP_WRITE,
                                           .skip = 3,
                                           .count = 4,
                                           .fault = RP_TEST_FAULT_LOSE_REPLY });
  rp_test_device_wait_rebuilt(&r.dev, 40);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("rebuild, lost write replies: %u hit, %llu pages rebuilt, %llu lost\n",
                rp_test_faults_hits(r.faults, rule),
                (unsigned long long)st.rebuild_pages_done, (unsigned long long)st.pages_lost);
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
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 2,
                                           .op = RP_OP_READ,
                                           .skip = 5,
                                           .count = 3,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
  assert_true(rp_test_server_kill(&r.cluster.servers[4]) != -1);
  rp_test_device_wait_noticed(&r.dev, 4, 10);
  rp_test_device_wait_rebuilt(&r.dev, 40);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("rebuild, refused piece reads: %u hit, %llu pages rebuilt, %llu lost\n",
                rp_test_faults_hits(r.faults, rule),
                (unsigned long long)st.rebuild_pages_done, (unsigned long long)st.pages_lost);
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
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 1,
                                           .op = RP_OP_WRITE,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
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
  unsigned writes = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 3,
                                           .op = RP_OP_WRITE,
                                           .skip = 10,
                                           .count = 6,
                                           .fault = RP_TEST_FAULT_DELAY,
                                           .hold_ms = 1500 });
  unsigned frees = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 3,
                                           .op = RP_OP_FREE,
                                           .skip = 2,
                                           .count = 6,
                                           .fault = RP_TEST_FAULT_DELAY,
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


/* ==== Second pass: edges the cases above and test_page_op_faults.c do not reach ======= */

#define PAGE RAMPART_PAGE_SIZE

static uint64_t ms_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits until server s (its place in the stats) is up again, after a fault made the
 * engine reconnect it. */
static void wait_server_up(struct rig *r, unsigned s, unsigned timeout_s)
{
  struct rampart_stats st;
  for (unsigned i = 0; i < timeout_s * 100; i++) {
    rp_test_device_stats(&r->dev, &st);
    if (st.servers[s].state == RAMPART_SERVER_UP)
      return;
    usleep(10000);
  }
  rig_print_stats(r);
  fail_msg("server %u not up again within %u s", s, timeout_s);
}

/* Which server holds each page's copy: one rule per server that only counts (a DELAY of
 * 0 ms passes the request on the fault transport's next 1 ms tick) and every page read
 * alone; owner[p] is the server whose READ count went up, -1 for none. Every rule is
 * spent afterwards. Needs nothing else reading meanwhile (no rebalancing, settled). */
static void probe_owners(struct rig *r, int *owner)
{
  unsigned rules[5], seen[5] = { 0 };
  for (unsigned s = 0; s < 5; s++)
    rules[s] = rp_test_faults_add(
      r->faults,
      (struct rp_test_fault_rule){
        .server = (int)s, .op = RP_OP_READ, .fault = RP_TEST_FAULT_DELAY, .hold_ms = 0 });
  uint8_t *buf = malloc(PAGE);
  for (uint64_t p = 0; p < PAGES; p++) {
    assert_int_equal(rampart_pread(r->dev.engine, buf, PAGE, p * PAGE), 0);
    assert_memory_equal(buf, r->dev.shadow + p * PAGE, PAGE);
    owner[p] = -1;
    for (unsigned s = 0; s < 5; s++) {
      unsigned h = rp_test_faults_hits(r->faults, rules[s]);
      if (h == seen[s])
        continue;
      assert_int_equal(owner[p], -1); /* one READ per healthy page */
      assert_int_equal(h, seen[s] + 1);
      owner[p] = (int)s;
      seen[s] = h;
    }
  }
  free(buf);
  rp_test_faults_clear(r->faults);
}

/* ---- degraded reads, a piece failing ------------------------------------------------ */

/* Waits until every server but `except` is up (a refusal makes the engine reconnect the
 * refusing server; it is back within milliseconds). */
static void wait_others_up(struct rig *r, unsigned except, unsigned timeout_s)
{
  for (unsigned s = 0; s < 5; s++)
    if (s != except)
      wait_server_up(r, s, timeout_s);
}

/* Server 0 is killed (lease 8: it stays reconnecting, its pages are served by degraded
 * reads), then four of its pages are read alone, each while the next READ sent anywhere
 * is refused: with the page's own server down, that READ is a piece of its degraded
 * read (parity-log: a member or the parity; mirror: the page's only other copy). The
 * refusing server still holds every page and is back within milliseconds (a refusal
 * only makes the engine reconnect it), and a read second later gets the page: one loss
 * and a transient refusal are no reason for EIO, as a refused direct read and an
 * unanswered piece are not (both wait or rebuild). Returns the reads that were EIO. */
static unsigned degraded_reads_with_a_piece_refused(const char *redundancy)
{
  struct rig r;
  const char *extra[] = { "lease", "8", NULL };
  rig_start(&r, redundancy, extra);
  wait_settled(&r, 10);
  static int owner[PAGES];
  probe_owners(&r, owner);
  assert_true(rp_test_server_kill(&r.cluster.servers[0]) != -1);
  rp_test_device_wait_noticed(&r.dev, 0, 10);
  uint8_t *buf = malloc(PAGE);
  unsigned tried = 0, eio = 0, eio_again = 0;
  for (uint64_t p = 0; p < PAGES && tried < 4; p++) {
    if (owner[p] != 0)
      continue;
    wait_others_up(&r, 0, 10);
    unsigned rule = rp_test_faults_add(
      r.faults, (struct rp_test_fault_rule){ .server = -1,
                                             .op = RP_OP_READ,
                                             .count = 1,
                                             .fault = RP_TEST_FAULT_FAIL,
                                             .status = RP_ERR_INTERNAL });
    int rc = rampart_pread(r.dev.engine, buf, PAGE, p * PAGE);
    assert_int_equal(rp_test_faults_hits(r.faults, rule), 1);
    tried++;
    if (rc == -EIO) {
      eio++;
      /* The same page again, nothing refused: is it really there? */
      wait_others_up(&r, 0, 10);
      rc = rampart_pread(r.dev.engine, buf, PAGE, p * PAGE);
      eio_again += rc == -EIO;
      print_message("page %llu (server 0's): EIO with one piece refused; read again: %s\n",
                    (unsigned long long)p, rc == 0 ? "its bytes" : "EIO");
      if (rc == -EIO)
        continue;
    }
    assert_int_equal(rc, 0);
    assert_memory_equal(buf, r.dev.shadow + p * PAGE, PAGE);
  }
  free(buf);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("%s, degraded reads with one piece refused each: %u of %u reads EIO (%u "
                "still EIO on a second read); %llu degraded reads, %llu read errors\n",
                redundancy, eio, tried, eio_again,
                (unsigned long long)st.pages_degraded_reads,
                (unsigned long long)st.read_errors);
  assert_int_equal(tried, 4);
  assert_int_equal(eio_again, 0); /* the page was there all along */
  expect_rebuilt_then_rejoined(&r, 0, false);
  rig_stop(&r);
  return eio;
}

/* Fails when a refused piece ends the user's read with EIO. */
static void test_a_degraded_reads_piece_refused(void **state)
{
  (void)state;
  assert_int_equal(degraded_reads_with_a_piece_refused("parity-log"), 0);
}

/* Mirror: the refused READ is the page's other copy. Fails the same way. */
static void test_mirror_degraded_reads_copy_refused(void **state)
{
  (void)state;
  assert_int_equal(degraded_reads_with_a_piece_refused("mirror"), 0);
}

/* The same, but server 2 returns one piece corrupt. With server 0 gone the group has
 * nothing left to tell which piece was bad, so the read may fail (EIO), never return the
 * XOR of a corrupt piece. The corruption was one reply: read again, the page is there,
 * and once server 0 is rebuilt nothing is lost. Fails on wrong bytes (a rebuilt page not
 * verified), or on a page marked lost by a user's read. */
static void test_a_degraded_reads_piece_corrupt_is_never_wrong(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "lease", "8", NULL };
  rig_start(&r, "parity-log", extra);
  wait_settled(&r, 10);
  static int owner[PAGES];
  probe_owners(&r, owner);
  assert_true(rp_test_server_kill(&r.cluster.servers[0]) != -1);
  rp_test_device_wait_noticed(&r.dev, 0, 10);
  uint8_t *buf = malloc(PAGE);
  unsigned tried = 0, eio = 0;
  for (uint64_t p = 0; p < PAGES && tried < 3; p++) {
    if (owner[p] != 0)
      continue;
    unsigned rule = rp_test_faults_add(
      r.faults,
      (struct rp_test_fault_rule){
        .server = 2, .op = RP_OP_READ, .count = 1, .fault = RP_TEST_FAULT_CORRUPT });
    int rc = rampart_pread(r.dev.engine, buf, PAGE, p * PAGE);
    assert_int_equal(rp_test_faults_hits(r.faults, rule), 1);
    tried++;
    if (rc == -EIO) {
      eio++;
    } else {
      assert_int_equal(rc, 0);
      assert_memory_equal(buf, r.dev.shadow + p * PAGE, PAGE);
    }
    assert_int_equal(rampart_pread(r.dev.engine, buf, PAGE, p * PAGE), 0);
    assert_memory_equal(buf, r.dev.shadow + p * PAGE, PAGE);
  }
  free(buf);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("degraded reads, one piece corrupt each: %u of %u reads EIO; %llu copies "
                "failed verification, %llu pages lost\n",
                eio, tried, (unsigned long long)st.integrity_failures,
                (unsigned long long)st.pages_lost);
  assert_int_equal(tried, 3);
  assert_int_equal(st.pages_lost, 0);
  expect_rebuilt_then_rejoined(&r, 0, false);
  rig_stop(&r);
}

/* ---- mirror, second pass ------------------------------------------------------------- */

/* Mirror: both copies of one page refused, eight times over (a page written alone, a
 * rule hitting the next two WRITEs: its copy and its member). Every write must still
 * complete, on two other servers; then a server is killed at once and every page must
 * read back. Fails when a write whose two copies were refused completes with fewer than
 * two stored copies (a page EIO or wrong after the kill), or fails the write. */
static void test_mirror_both_copies_of_a_page_refused(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "mirror", NULL);
  wait_settled(&r, 10);
  for (unsigned k = 0; k < 8; k++) {
    wait_settled(&r, 20);
    unsigned rule = rp_test_faults_add(
      r.faults, (struct rp_test_fault_rule){ .server = -1,
                                             .op = RP_OP_WRITE,
                                             .count = 2,
                                             .fault = RP_TEST_FAULT_FAIL,
                                             .status = RP_ERR_INTERNAL });
    rp_test_device_fill(&r.dev, 37u * k + 5u, 1);
    assert_int_equal(rp_test_faults_hits(r.faults, rule), 2);
  }
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("mirror, both copies refused x8: %llu resumes, %llu pages unprotected now\n",
                (unsigned long long)st.resumes, (unsigned long long)st.pages_unprotected);
  kill_and_read_back(&r, 0, 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* Mirror: one copy comes back corrupt. The read is served from the other copy, server 2
 * becomes suspect and is emptied (each page moved with two copies elsewhere); then
 * another server is killed at once: every page must read back. Fails when the
 * evacuation of a suspect server leaves a page with one copy, or the corrupt read
 * returns wrong bytes. */
static void test_mirror_corrupt_copy_then_its_server_emptied_then_another_lost(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "mirror", NULL);
  wait_settled(&r, 10);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){
                .server = 2, .op = RP_OP_READ, .count = 1, .fault = RP_TEST_FAULT_CORRUPT });
  assert_int_equal(rp_test_device_verify(&r.dev, false), 0);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 1);
  static struct rampart_stats st;
  unsigned waited = 0;
  for (;; waited++) {
    rp_test_device_stats(&r.dev, &st);
    if (st.servers[2].pages_stored == 0 && st.moves_in_flight == 0)
      break;
    if (waited == 300) {
      rig_print_stats(&r);
      fail_msg("suspect server 2 not emptied in 30 s");
    }
    usleep(100000);
  }
  print_message("mirror, corrupt copy: %llu failed verification, server 2 suspect %d, "
                "%llu pages evacuated\n",
                (unsigned long long)st.integrity_failures, st.servers[2].suspect,
                (unsigned long long)st.moves_by_reason[RAMPART_MOVE_EVACUATE]);
  assert_int_equal(st.integrity_failures, 1);
  assert_true(st.servers[2].suspect);
  assert_true(st.moves_by_reason[RAMPART_MOVE_EVACUATE] > 0);
  assert_int_equal(st.pages_lost, 0);
  kill_and_read_back(&r, 0, 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* ---- parity-log: a parity held past io-timeout while a member's server dies -------- */

/* Every WRITE to server 3 is sent 1200 ms late (timeout= and io-timeout= 1000); the
 * WRITEs to the others are only counted. Pages are written one at a time until one
 * write sends two WRITEs (it sealed its group), one of them to server 3, and returns at
 * once: that group's parity is the one held. Server 1 (a member of that group: with
 * group 4 on five servers every server but the parity's is one) is killed at once. The
 * group's pages must read back from the parity in the client while its WRITE is held,
 * and the rebuild must wait for the parity and lose nothing. Fails when a degraded read
 * uses the parity's slot before it landed, or the rebuild moves a sealing group. */
static void test_a_parity_held_past_io_timeout_while_a_member_server_dies(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "timeout", "1000", "io-timeout", "1000", NULL };
  rig_start(&r, "parity-log", extra);
  wait_settled(&r, 10);
  unsigned rules[5];
  for (unsigned s = 0; s < 5; s++)
    rules[s] = rp_test_faults_add(
      r.faults, (struct rp_test_fault_rule){ .server = (int)s,
                                             .op = RP_OP_WRITE,
                                             .fault = RP_TEST_FAULT_DELAY,
                                             .hold_ms = s == 3 ? 1200 : 0 });
  bool held = false;
  uint64_t p = 0, sealed_at = 0;
  for (; p < 128 && !held; p++) {
    unsigned before = 0, before3 = rp_test_faults_hits(r.faults, rules[3]);
    for (unsigned s = 0; s < 5; s++)
      before += rp_test_faults_hits(r.faults, rules[s]);
    uint64_t t0 = ms_now();
    rp_test_device_fill(&r.dev, p, 1);
    sealed_at = ms_now();
    unsigned after = 0;
    for (unsigned s = 0; s < 5; s++)
      after += rp_test_faults_hits(r.faults, rules[s]);
    held = after - before == 2 && rp_test_faults_hits(r.faults, rules[3]) - before3 == 1 &&
           sealed_at - t0 < 600;
  }
  assert_true(held);
  assert_true(rp_test_server_kill(&r.cluster.servers[1]) != -1);
  rp_test_device_wait_noticed(&r.dev, 1, 10);
  /* The sealed group's own pages first, while its parity is (most likely) still held. */
  uint8_t *buf = malloc(PAGE);
  for (uint64_t q = p - 4; q < p; q++) {
    assert_int_equal(rampart_pread(r.dev.engine, buf, PAGE, q * PAGE), 0);
    assert_memory_equal(buf, r.dev.shadow + q * PAGE, PAGE);
  }
  uint64_t read_ms = ms_now() - sealed_at;
  free(buf);
  assert_int_equal(rp_test_device_verify(&r.dev, false), 0);
  rp_test_faults_clear(r.faults);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("parity held 1200 ms: group sealed by page %llu, its pages read %llu ms "
                "after, server 1 killed; %llu degraded reads\n",
                (unsigned long long)(p - 1), (unsigned long long)read_ms,
                (unsigned long long)st.pages_degraded_reads);
  expect_rebuilt_then_rejoined(&r, 1, true);
  rig_stop(&r);
}

/* ---- two faults at once ------------------------------------------------------------- */

struct pause_arg {
  struct rp_test_server *server;
  unsigned ms;
};

static void *pause_for(void *arg)
{
  struct pause_arg *a = arg;
  rp_test_server_pause(a->server);
  usleep(a->ms * 1000u);
  rp_test_server_resume(a->server);
  return NULL;
}

/* Server 1 is stopped (SIGSTOP) for 1.8 s, past timeout=1000 but within io-timeout (the
 * lease, 3 s), while server 3 refuses ten writes of a read/write/trim workload: two
 * servers away at once, groups narrower, members placed again. No request may fail
 * (the workload fails the test on any error); then, settled, server 0 is killed and every
 * page must read back. Fails when two servers away at once lose or misplace a page, or a
 * request fails inside io-timeout. */
static void test_a_server_stalled_while_another_refuses_writes(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "timeout", "1000", NULL };
  rig_start(&r, "parity-log", extra);
  wait_settled(&r, 10);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 3,
                                           .op = RP_OP_WRITE,
                                           .skip = 5,
                                           .count = 10,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
  struct pause_arg pa = { .server = &r.cluster.servers[1], .ms = 1800 };
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, pause_for, &pa), 0);
  usleep(20000);
  rp_test_device_workload(&r.dev, 60, 60, 10);
  pthread_join(t, NULL);
  wait_others_up(&r, 5, 10); /* server 1 resumes only after its SIGCONT */
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("stall + refusals: %u writes refused, %llu sessions resumed, %llu requests "
                "sent again, %llu degraded reads\n",
                rp_test_faults_hits(r.faults, rule), (unsigned long long)st.resumes,
                (unsigned long long)st.requests_replayed,
                (unsigned long long)st.pages_degraded_reads);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 10);
  assert_true(st.resumes >= 2); /* server 1 after its stall, server 3 after a refusal */
  expect_every_page(&r);
  kill_and_read_back(&r, 0, 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* ---- FREEs refused ------------------------------------------------------------------ */

/* Server 0 refuses every FREE under overwrites and trims (a reclaimed group frees its
 * slots). A refused FREE leaves the old bytes in the slot; the slot is reused and must
 * be written before it is read. Then server 2 is killed: nothing lost. Fails when a
 * refused FREE costs a page (a slot reused while the server still holds a stale page
 * that a read or rebuild takes as current), or makes the engine give a server up. */
static void test_refused_frees_cost_nothing(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 0,
                                           .op = RP_OP_FREE,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
  rp_test_device_workload(&r.dev, 120, 100, 20);
  rp_test_device_workload(&r.dev, 40, 50, 10);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("refused FREEs: %u hit; %llu groups reclaimed, %llu sessions resumed\n",
                rp_test_faults_hits(r.faults, rule), (unsigned long long)st.groups_reclaimed,
                (unsigned long long)st.resumes);
  assert_true(rp_test_faults_hits(r.faults, rule) >= 10);
  expect_every_page(&r);
  kill_and_read_back(&r, 2, 0);
  expect_every_page(&r);
  rig_stop(&r);
}

/* ---- write-through: members unanswered --------------------------------------------- */

/* Write-through: server 1 stores some member writes but their replies are lost (it may
 * hold the new bytes or not; the engine does not wait under write-through). Then server
 * 1 is killed at once and restarted: every page reads back from a server or its disk
 * copy. Fails when a member whose reply was lost stays named by the map with no copy
 * anywhere the read falls back to, or a read returns the slot's older bytes. */
static void test_write_through_lost_member_replies_then_that_server_lost(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "write-through", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 1,
                                           .op = RP_OP_WRITE,
                                           .skip = 3,
                                           .count = 8,
                                           .fault = RP_TEST_FAULT_LOSE_REPLY });
  rp_test_device_workload(&r.dev, 40, 100, 0);
  print_message("write-through, lost member replies: %u hit\n",
                rp_test_faults_hits(r.faults, rule));
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 8);
  kill_and_read_back(&r, 1, 0);
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
    cmocka_unit_test(test_a_degraded_reads_piece_refused),
    cmocka_unit_test(test_mirror_degraded_reads_copy_refused),
    cmocka_unit_test(test_a_degraded_reads_piece_corrupt_is_never_wrong),
    cmocka_unit_test(test_mirror_both_copies_of_a_page_refused),
    cmocka_unit_test(test_mirror_corrupt_copy_then_its_server_emptied_then_another_lost),
    cmocka_unit_test(test_a_parity_held_past_io_timeout_while_a_member_server_dies),
    cmocka_unit_test(test_a_server_stalled_while_another_refuses_writes),
    cmocka_unit_test(test_refused_frees_cost_nothing),
    cmocka_unit_test(test_write_through_lost_member_replies_then_that_server_lost),
  };
  /* RAMPART_TEST_FILTER=test_name runs one test (cmocka's own glob syntax). */
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
