/* Each failure edge of a page op, reached on purpose: the fault transport
 * (test/support/fault_transport.h) refuses, leaves unanswered, loses the reply of,
 * delays or corrupts exactly the page requests a test names, between the engine and
 * real rampartd processes on loopback. Every test then reads every page back against a
 * shadow copy: a fault may cost time, never a byte.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
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

#define PAGE RAMPART_PAGE_SIZE
#define PAGES 1024

/* Five servers, PAGES pages written once; the fault transport set with no rules.
 * extra: more settings (NULL-terminated pairs), or NULL. */
static void rig_start(struct rig *r, const char *redundancy, const char *const *extra)
{
  static const char *const base[] = { "lease", "5", "timeout", "2000", NULL };
  rig_open(r, base, redundancy, extra, PAGES, 89);
}

/* After the faults: every page reads back as written, none lost. */
static void expect_every_page(struct rig *r)
{
  rig_expect_every_page_but(r, 0);
}

/* ---- writes ------------------------------------------------------------------------- */

/* A server refuses some data writes (as when its host cannot map a page). Each refused
 * page must be placed again elsewhere, or sent again once the server is back, and its
 * group must not count a copy that never landed. */
static void test_refused_writes_are_placed_again(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 2,
                                           .op = RP_OP_WRITE,
                                           .skip = 3,
                                           .count = 4,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
  rp_test_device_workload(&r.dev, 40, 100, 0);
  print_message("refused writes: %u hit\n", rp_test_faults_hits(r.faults, rule));
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 4);
  expect_every_page(&r);
  rig_stop(&r);
}

/* A server stops answering some writes: they time out, the connection is given up, and
 * the writes are sent again on the resumed session (or placed elsewhere). */
static void test_unanswered_writes_are_sent_again(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 1,
                                           .op = RP_OP_WRITE,
                                           .skip = 5,
                                           .count = 3,
                                           .fault = RP_TEST_FAULT_TIMEOUT,
                                           .hold_ms = 50 });
  rp_test_device_workload(&r.dev, 40, 100, 0);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("unanswered writes: %u hit; %llu sessions resumed, %llu requests sent "
                "again\n",
                rp_test_faults_hits(r.faults, rule), (unsigned long long)st.resumes,
                (unsigned long long)st.requests_replayed);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 3);
  assert_true(st.resumes >= 1);
  expect_every_page(&r);
  rig_stop(&r);
}

/* The server stored the page but its reply was lost: sending it again on the resumed
 * session stores it again (the same bytes in the same slot), and nothing else moves. */
static void test_a_write_whose_reply_is_lost_is_sent_again(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "mirror", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 3,
                                           .op = RP_OP_WRITE,
                                           .skip = 2,
                                           .count = 2,
                                           .fault = RP_TEST_FAULT_LOSE_REPLY });
  rp_test_device_workload(&r.dev, 40, 100, 0);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 2);
  expect_every_page(&r);
  rig_stop(&r);
}

/* A FREE whose reply is lost is sent again; the slot it frees must not be written by a
 * later page before that, or the resent FREE would drop the later page. */
static void test_a_free_whose_reply_is_lost_never_frees_a_later_page(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults,
    (struct rp_test_fault_rule){
      .server = 0, .op = RP_OP_FREE, .count = 3, .fault = RP_TEST_FAULT_LOSE_REPLY });
  rp_test_device_workload(&r.dev, 120, 100, 20); /* overwrites and trims: frees */
  print_message("lost FREE replies: %u hit\n", rp_test_faults_hits(r.faults, rule));
  assert_true(rp_test_faults_hits(r.faults, rule) >= 1);
  expect_every_page(&r);
  rig_stop(&r);
}

/* Refusals, then a loss. A burst of refused writes to one server hits data members and
 * parities alike, leaving groups whose parity covers bytes no server holds. Once the
 * engine has settled they must all be whole again (rewritten by the mover): then a
 * second server lost costs no page. A group still believed protected that is not would
 * return EIO here, or wrong bytes. */
static void test_refused_writes_then_another_server_lost_lose_nothing(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 2,
                                           .op = RP_OP_WRITE,
                                           .skip = 40,
                                           .count = 30,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
  /* Every page once more, and no overwrite after: the groups the refusals left are the
   * ones the loss then needs. The first refusal sends the server away to reconnect, and
   * writes meanwhile go to the others, so a loaded machine may need more passes before
   * all 30 come (CI_23: 16 in one). */
  for (int pass = 0; pass < 10 && rp_test_faults_hits(r.faults, rule) < 30; pass++)
    rp_test_device_fill(&r.dev, 0, PAGES);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 30);
  wait_settled(&r, 30);
  rp_test_server_kill(&r.cluster.servers[0]);
  rp_test_device_wait_noticed(&r.dev, 0, 10);
  rp_test_device_wait_rebuilt(&r.dev, 60);
  uint64_t eio = rp_test_device_verify(&r.dev, true);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("30 writes refused, then a server lost: %llu pages EIO, %llu lost, %llu "
                "degraded reads\n",
                (unsigned long long)eio, (unsigned long long)st.pages_lost,
                (unsigned long long)st.pages_degraded_reads);
  assert_int_equal(eio, 0);
  assert_int_equal(st.pages_lost, 0);
  rig_stop(&r);
}

/* Mirror: a server stores copies whose replies are lost; they are sent again on the
 * resumed session. Then that server is lost for good: every page must still have its
 * other copy. */
static void test_mirror_copies_whose_replies_were_lost_then_their_server_lost(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "mirror", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 1,
                                           .op = RP_OP_WRITE,
                                           .skip = 3,
                                           .count = 6,
                                           .fault = RP_TEST_FAULT_LOSE_REPLY });
  rp_test_device_workload(&r.dev, 40, 100, 0);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 6);
  wait_settled(&r, 30);
  rp_test_server_kill(&r.cluster.servers[1]);
  rp_test_device_wait_noticed(&r.dev, 1, 10);
  rp_test_device_wait_rebuilt(&r.dev, 60);
  assert_int_equal(rp_test_device_verify(&r.dev, false), 0);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  assert_int_equal(st.pages_lost, 0);
  rig_stop(&r);
}

/* Write-through: member writes refused while their disk copies land. Each page is
 * placed again or left to its disk copy; with its server then lost, every page reads
 * back from a server or the disk. */
static void test_write_through_refused_members_then_their_server_lost(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "write-through", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 0,
                                           .op = RP_OP_WRITE,
                                           .skip = 2,
                                           .count = 8,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
  rp_test_device_workload(&r.dev, 40, 100, 0);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 8);
  wait_settled(&r, 30);
  rp_test_server_kill(&r.cluster.servers[0]);
  rp_test_device_wait_noticed(&r.dev, 0, 10);
  rp_test_device_wait_rebuilt(&r.dev, 60);
  assert_int_equal(rp_test_device_verify(&r.dev, false), 0);
  rig_stop(&r);
}

/* ---- reads -------------------------------------------------------------------------- */

/* A copy that comes back corrupt fails verification: the page is rebuilt from its group,
 * the server is counted and made suspect, and its pages move off it. */
static void test_a_corrupt_read_is_rebuilt_from_its_group(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){
                .server = 4, .op = RP_OP_READ, .count = 1, .fault = RP_TEST_FAULT_CORRUPT });
  assert_int_equal(rp_test_device_verify(&r.dev, false), 0);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("corrupt read: %u hit; %llu copies failed verification, %llu degraded "
                "reads\n",
                rp_test_faults_hits(r.faults, rule),
                (unsigned long long)st.integrity_failures,
                (unsigned long long)st.pages_degraded_reads);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 1);
  assert_int_equal(st.integrity_failures, 1);
  assert_true(st.pages_degraded_reads >= 1);
  assert_true(st.servers[4].suspect);
  expect_every_page(&r);
  rig_stop(&r);
}

/* A read refused by its server is served from the page's group instead. */
static void test_a_refused_read_is_rebuilt_from_its_group(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 0,
                                           .op = RP_OP_READ,
                                           .skip = 10,
                                           .count = 2,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
  /* The first refusal sends the server away to reconnect, and reads meanwhile are rebuilt
   * without asking it: how many of its reads one pass still reaches depends on how soon
   * it is back (a loaded sanitizer run once finished the pass first). Every pass must
   * read every page right; passes go on until both refusals came. */
  unsigned pass = 0;
  do
    assert_int_equal(rp_test_device_verify(&r.dev, false), 0);
  while (rp_test_faults_hits(r.faults, rule) < 2 && ++pass < 10);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 2);
  expect_every_page(&r);
  rig_stop(&r);
}

/* Two faults at once: a copy comes back corrupt while a server holding a piece of its
 * group refuses every read. The page cannot be rebuilt then; the read may fail (EIO),
 * never return wrong bytes. Once the refusals stop, nothing was lost. */
static void test_a_corrupt_copy_with_a_piece_of_its_group_refused_is_never_wrong(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  unsigned corrupt = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){
                .server = 2, .op = RP_OP_READ, .count = 1, .fault = RP_TEST_FAULT_CORRUPT });
  unsigned refused = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 3,
                                           .op = RP_OP_READ,
                                           .fault = RP_TEST_FAULT_FAIL,
                                           .status = RP_ERR_INTERNAL });
  uint64_t eio = rp_test_device_verify(&r.dev, true);
  print_message("corrupt copy, piece refused: %u corrupt, %u refused; %llu of %u pages "
                "EIO\n",
                rp_test_faults_hits(r.faults, corrupt),
                rp_test_faults_hits(r.faults, refused), (unsigned long long)eio, PAGES);
  assert_int_equal(rp_test_faults_hits(r.faults, corrupt), 1);
  assert_true(rp_test_faults_hits(r.faults, refused) >= 1);
  rp_test_faults_clear(r.faults);
  expect_every_page(&r);
  rig_stop(&r);
}

/* ---- a read meeting its page's write ------------------------------------------------ */

struct timed_write {
  struct rampart_io io;
  atomic_bool done;
  int result;
  uint64_t ended_ns;
};

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void timed_write_done(struct rampart_io *io, int result)
{
  struct timed_write *w = io->user;
  w->result = result;
  w->ended_ns = now_ns();
  atomic_store(&w->done, true);
}

/* The page map names a write's new copy from the moment it is placed, before its bytes
 * land. A read arriving then finds the slot empty (or holding a freed page's bytes),
 * and must wait for the write (page_read.c): not fail, not return what the slot held,
 * and not take the server for failed, since it answered. Here the write is 400 ms
 * late, far past any re-reading back to back. (A block device may return either
 * version to a read that overlaps a write; this engine returns the new one.) */
static void test_a_read_meeting_a_late_write_of_its_page_waits_for_it(void **state)
{
  (void)state;
  struct rig r;
  /* No rebalancing: its moves' writes would take the rule's one hit. */
  const char *extra[] = { "rebalance", "0", NULL };
  rig_start(&r, "parity-log", extra);
  wait_settled(&r, 10);
  const uint64_t page = 321;
  uint8_t *old = malloc(PAGE), *fresh = malloc(PAGE), *got = malloc(PAGE);
  memcpy(old, r.dev.shadow + page * PAGE, PAGE);
  for (unsigned i = 0; i < PAGE; i++)
    fresh[i] = (uint8_t)(old[i] ^ 0x5a ^ i);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = -1,
                                           .op = RP_OP_WRITE,
                                           .count = 1,
                                           .fault = RP_TEST_FAULT_DELAY,
                                           .hold_ms = 400 });
  struct timed_write w = { .io = { .op = RAMPART_OP_WRITE,
                                   .offset = page * PAGE,
                                   .length = PAGE,
                                   .buf = fresh,
                                   .done = timed_write_done } };
  w.io.user = &w;
  rampart_submit(r.dev.engine, &w.io);
  usleep(50000);
  assert_false(atomic_load(&w.done)); /* the write is held */
  assert_int_equal(rampart_pread(r.dev.engine, got, PAGE, page * PAGE), 0);
  uint64_t read_ended = now_ns();
  bool was_new = memcmp(got, fresh, PAGE) == 0, was_old = memcmp(got, old, PAGE) == 0;
  while (!atomic_load(&w.done))
    usleep(1000);
  struct rampart_stats st;
  rp_test_device_stats(&r.dev, &st);
  print_message("read during a late write: returned the %s bytes, %s the write ended; "
                "%llu sessions resumed, %llu copies failed verification\n",
                was_new   ? "new"
                : was_old ? "old"
                          : "WRONG",
                read_ended >= w.ended_ns ? "after" : "before", (unsigned long long)st.resumes,
                (unsigned long long)st.integrity_failures);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 1);
  assert_int_equal(w.result, 0);
  assert_true(was_new);
  assert_true(read_ended >= w.ended_ns);
  assert_int_equal(st.resumes, 0);
  assert_int_equal(st.integrity_failures, 0);
  memcpy(r.dev.shadow + page * PAGE, fresh, PAGE);
  assert_int_equal(rampart_pread(r.dev.engine, got, PAGE, page * PAGE), 0);
  assert_memory_equal(got, fresh, PAGE);
  free(old);
  free(fresh);
  free(got);
  expect_every_page(&r);
  rig_stop(&r);
}

/* ---- moves -------------------------------------------------------------------------- */

/* A drain moves every page off a server; some of the moves' writes go unanswered. Each
 * move must be placed again or sent again, and the drain still finish. */
static void test_a_drain_whose_move_writes_time_out_still_finishes(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r, "parity-log", NULL);
  wait_settled(&r, 10);
  unsigned rule = rp_test_faults_add(
    r.faults, (struct rp_test_fault_rule){ .server = 1,
                                           .op = RP_OP_WRITE,
                                           .skip = 20,
                                           .count = 3,
                                           .fault = RP_TEST_FAULT_TIMEOUT,
                                           .hold_ms = 20 });
  char msg[512];
  assert_int_equal(
    rampart_server_drain(r.dev.engine, r.cluster.servers[4].addr, false, msg, sizeof msg), 0);
  static struct rampart_stats st;
  unsigned waited = 0;
  for (;; waited++) {
    rp_test_device_stats(&r.dev, &st);
    if (st.servers[4].drained)
      break;
    if (waited == 300) {
      rig_print_stats(&r);
      fail_msg("server 4 not drained in 30 s");
    }
    usleep(100000);
  }
  print_message("drain with unanswered move writes: %u hit, %llu pages moved to drain\n",
                rp_test_faults_hits(r.faults, rule),
                (unsigned long long)st.moves_by_reason[RAMPART_MOVE_DRAIN]);
  assert_int_equal(rp_test_faults_hits(r.faults, rule), 3);
  assert_true(st.moves_by_reason[RAMPART_MOVE_DRAIN] > 0);
  assert_int_equal(st.servers[4].pages_dependent, 0);
  assert_int_equal(rp_test_device_verify(&r.dev, false), 0);
  rig_stop(&r);
}

int main(void)
{
  if (!rp_test_rampartd_path())
    return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_refused_writes_are_placed_again),
    cmocka_unit_test(test_unanswered_writes_are_sent_again),
    cmocka_unit_test(test_a_write_whose_reply_is_lost_is_sent_again),
    cmocka_unit_test(test_a_free_whose_reply_is_lost_never_frees_a_later_page),
    cmocka_unit_test(test_refused_writes_then_another_server_lost_lose_nothing),
    cmocka_unit_test(test_mirror_copies_whose_replies_were_lost_then_their_server_lost),
    cmocka_unit_test(test_write_through_refused_members_then_their_server_lost),
    cmocka_unit_test(test_a_corrupt_read_is_rebuilt_from_its_group),
    cmocka_unit_test(test_a_refused_read_is_rebuilt_from_its_group),
    cmocka_unit_test(test_a_corrupt_copy_with_a_piece_of_its_group_refused_is_never_wrong),
    cmocka_unit_test(test_a_read_meeting_a_late_write_of_its_page_waits_for_it),
    cmocka_unit_test(test_a_drain_whose_move_writes_time_out_still_finishes),
  };
  /* RAMPART_TEST_FILTER=test_name runs one test (cmocka's own glob syntax). */
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
