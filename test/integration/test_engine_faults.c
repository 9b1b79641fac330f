/* The engine under the faults of docs/faults.md: servers that corrupt what they return while
 * pages are moved, servers that refuse writes, a parity server advising at the moment a
 * group seals, a mirror copy that has not landed, and many threads writing parts of the
 * same pages. Real rampartd processes on loopback (hostile ones through --test-fault),
 * the public engine API, and every byte read back against a shadow copy: a page may be
 * unreadable (EIO) only where a test says so, never wrong.
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
#include <unistd.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "engine_device.h"
#include "rampart.h"

#define PAGE RAMPART_PAGE_SIZE

static void cluster_start(struct rp_test_cluster *c, unsigned n, const char *const *faults)
{
  assert_int_equal(rp_test_cluster_start(c, n, "64M", faults), 0);
}

/* Waits until every server is up, nothing moves, nothing waits and no live page is
 * unprotected, for half a second running; fails the test after timeout_s. */
static void wait_quiet(struct rp_test_device *d, unsigned timeout_s)
{
  struct rampart_stats st;
  unsigned quiet = 0;
  for (unsigned i = 0; i < timeout_s * 10 && quiet < 5; i++) {
    rp_test_device_stats(d, &st);
    bool calm = st.moves_in_flight == 0 && st.ops_waiting == 0 && !st.rebuild_running &&
                st.pages_unprotected == 0;
    for (unsigned s = 0; s < st.nservers; s++)
      calm &= st.servers[s].state == RAMPART_SERVER_UP;
    quiet = calm ? quiet + 1 : 0;
    usleep(100000);
  }
  if (quiet < 5) {
    rp_test_device_print_stats(d);
    fail_msg("the engine did not settle in %u s", timeout_s);
  }
}

/* ---- defect 2: what a move copies must verify first ------------------------------------ */

/* Cleaning rewrites the live pages of sparse groups. With one server corrupting every
 * page it returns, each page cleaned off it must be rebuilt from its group, not moved as
 * it came back. */
static void test_cleaning_past_a_corrupting_server_moves_only_verified_pages(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  const char *faults[] = { NULL, "flip", NULL, NULL, NULL };
  cluster_start(&c, 5, faults);
  const char *extra[] = { "redundancy", "parity-log", "group", "4", NULL };
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, 2048, extra), 2048, 61);
  rp_test_device_workload(&d, 150, 100, 0); /* writes only: every verification is a move's */
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  uint64_t cleaned = st.groups_cleaned;
  uint64_t eio = rp_test_device_verify(&d, true);
  rp_test_device_stats(&d, &st);
  print_message("cleaning past a corrupting server: %llu groups cleaned, %llu copies failed "
                "verification; %llu of 2048 pages EIO\n",
                (unsigned long long)cleaned, (unsigned long long)st.integrity_failures,
                (unsigned long long)eio);
  assert_true(cleaned > 0);
  assert_int_equal(eio, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* A rebuild with a corrupting server in some of the groups it rebuilds: where a group
 * lost one member to the dead server and another to the corruption, the page cannot be
 * rebuilt. The rebuild must say so (pages lost, reads EIO) and finish, never put what
 * it could not verify under new parity as if it were the page. */
static void test_rebuild_past_a_corrupting_server_counts_what_it_cannot_verify(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  const char *faults[] = { NULL, "flip", NULL, NULL, NULL, NULL };
  cluster_start(&c, 6, faults);
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "1",          "timeout",    "1000",  NULL };
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, 2048, extra), 2048, 67);
  /* Each page once: nothing is read or cleaned before the kill, so the corruption is
   * first met by the rebuild itself (met earlier, the corrupting server would be
   * emptied first and the rebuild find no second fault). */
  rp_test_device_fill(&d, 0, 2048);
  rp_test_server_kill(&c.servers[3]);
  rp_test_device_wait_noticed(&d, 3, 10);
  rp_test_device_wait_rebuilt(&d, 30);
  uint64_t eio = rp_test_device_verify(&d, true);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  print_message("rebuild past a corrupting server: %llu copies failed verification, %llu "
                "pages lost; %llu of 2048 pages EIO\n",
                (unsigned long long)st.integrity_failures, (unsigned long long)st.pages_lost,
                (unsigned long long)eio);
  assert_true(eio > 0); /* groups with both the dead and the corrupting server */
  assert_int_equal(eio, st.pages_lost);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* A server whose page failed verification is suspect: it gets no new pages, and every
 * page that depends on it (data or parity) moves away, verified, so that once it is
 * empty it can go without anything running degraded. */
static void test_a_corrupting_server_is_suspect_and_emptied(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  const char *faults[] = { NULL, NULL, "flip", NULL, NULL };
  cluster_start(&c, 5, faults);
  const char *extra[] = { "redundancy", "parity-log", "group", "3", NULL };
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, 1024, extra), 1024, 71);
  rp_test_device_workload(&d, 30, 100, 0);
  rp_test_device_verify(&d, false); /* meets the corruption: every page still right */
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  for (unsigned i = 0; i < st.nservers; i++) {
    assert_int_equal(st.servers[i].suspect, i == 2);
    assert_int_equal(st.servers[i].integrity_failures > 0, i == 2);
  }
  bool emptied = false;
  for (unsigned i = 0; i < 300 && !emptied; i++) {
    rp_test_device_workload(&d, 1, 50, 0);
    rp_test_device_stats(&d, &st);
    emptied = st.servers[2].pages_stored == 0 && st.moves_in_flight == 0;
    usleep(50000);
  }
  print_message("corrupting server: %llu pages stored there, %llu copies failed "
                "verification\n",
                (unsigned long long)st.servers[2].pages_stored,
                (unsigned long long)st.integrity_failures);
  if (!emptied)
    rp_test_device_print_stats(&d);
  assert_true(emptied);
  rp_test_device_workload(&d, 20, 100, 0);
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.servers[2].pages_stored, 0); /* and nothing new goes there */
  uint64_t degraded = st.pages_degraded_reads;
  rp_test_server_kill(&c.servers[2]);
  rp_test_device_verify(&d, false);
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.pages_degraded_reads, degraded);
  assert_int_equal(st.read_errors, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* ---- defect 3: a member write that fails ----------------------------------------------- */

/* A server that refuses one write in 64: each refused member write is placed again, and
 * the group it was refused in can no longer rebuild its other members (its parity covers
 * a page that server never stored). Those pages must be moved to whole groups, so a
 * later loss of any one other server costs nothing. */
static void
test_refused_member_write_does_not_leave_its_group_believed_protected(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  const char *faults[] = { NULL, NULL, NULL, NULL, "refuse-writes" };
  cluster_start(&c, 5, faults);
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "30",         "timeout",    "1000",  NULL };
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, 2048, extra), 2048, 73);
  rp_test_device_fill(&d, 0, 2048); /* each page once: no cleaning moves pages meanwhile */
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  print_message("after the fill: %llu live pages unprotected\n",
                (unsigned long long)st.pages_unprotected);
  wait_quiet(&d, 30);
  rp_test_server_kill(&c.servers[0]);
  uint64_t eio = rp_test_device_verify(&d, true);
  rp_test_device_stats(&d, &st);
  print_message("refused member writes, then one server lost: %llu of 2048 pages EIO, %llu "
                "degraded reads\n",
                (unsigned long long)eio, (unsigned long long)st.pages_degraded_reads);
  assert_int_equal(eio, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* The same for moves: a server is drained (its host under pressure) while another
 * refuses one write in 64, so some pages moved off the drained server have their new
 * copy refused. The group each such copy was refused in must not be believed protected
 * either. */
static void test_a_move_whose_destination_write_fails_leaves_nothing_unprotected(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  const char *faults[] = { NULL, NULL, NULL, NULL, "refuse-writes" };
  cluster_start(&c, 5, faults);
  const char *extra[] = { "redundancy", "parity-log", "group", "3", "lease",
                          "30",         "timeout",    "1000",  NULL };
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, 2048, extra), 2048, 97);
  rp_test_device_fill(&d, 0, 2048);
  wait_quiet(&d, 30);
  assert_int_equal(rp_test_write_file(c.psi[1], RP_TEST_PSI_HIGH), 0);
  struct rampart_stats st;
  bool drained = false;
  for (unsigned i = 0; i < 600 && !drained; i++) {
    usleep(50000);
    rp_test_device_stats(&d, &st);
    drained = st.servers[1].state == RAMPART_SERVER_ADVISED &&
              st.servers[1].pages_live == 0 && st.moves_in_flight == 0 &&
              st.pages_unprotected == 0;
    for (unsigned s = 0; s < st.nservers; s++)
      drained &= s == 1 || st.servers[s].state == RAMPART_SERVER_UP;
  }
  if (!drained)
    rp_test_device_print_stats(&d);
  assert_true(drained);
  rp_test_server_kill(&c.servers[0]);
  uint64_t eio = rp_test_device_verify(&d, true);
  print_message("moves off a drained server with refused destination writes, then another "
                "server lost: %llu of 2048 pages EIO\n",
                (unsigned long long)eio);
  assert_int_equal(eio, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* ---- defect 4: a group sealing while its parity server is advising --------------------- */

static unsigned server_gained_a_page(const struct rampart_stats *before,
                                     const struct rampart_stats *after)
{
  for (unsigned i = 0; i < after->nservers; i++)
    if (after->servers[i].pages_live > before->servers[i].pages_live)
      return i;
  fail_msg("no server gained a live page");
  return 0;
}

static void write_one(struct rampart_engine *e, uint8_t *shadow, uint64_t page, uint8_t fill)
{
  uint8_t buf[PAGE];
  memset(buf, fill, PAGE);
  assert_int_equal(rampart_pwrite(e, buf, PAGE, page * PAGE, 0), 0);
  memcpy(shadow + page * PAGE, buf, PAGE);
}

/* Three servers, groups of two, one page written: its group is open with that page on
 * server m. Then both other servers (one of them the group's planned parity server)
 * come under memory pressure, and the next write closes the group. Its parity must
 * still be stored, so losing server m loses nothing; sealing the group without parity
 * left the page one loss from gone. (Nothing else is written first: the mover would
 * move those pages off the advised servers through this same open group.) */
static void test_group_seals_with_its_parity_while_the_parity_server_advises(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 3, NULL);
  const char *extra[] = { "redundancy", "parity-log", "group", "2", "lease", "30", NULL };
  struct rp_test_device d;
  const uint64_t pages = 64;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), pages, 79);
  struct rampart_stats before, st;
  rp_test_device_stats(&d, &before);
  write_one(d.engine, d.shadow, 0, 0xA5); /* opens a group: one member, parity pending */
  rp_test_device_stats(&d, &st);
  unsigned m = server_gained_a_page(&before, &st);
  for (unsigned i = 0; i < c.n; i++)
    if (i != m)
      assert_int_equal(rp_test_write_file(c.psi[i], RP_TEST_PSI_HIGH), 0);
  bool advised = false;
  for (unsigned t = 0; t < 100 && !advised; t++) {
    usleep(50000);
    rp_test_device_stats(&d, &st);
    advised = true;
    for (unsigned i = 0; i < c.n; i++)
      advised &= i == m || st.servers[i].state == RAMPART_SERVER_ADVISED;
  }
  assert_true(advised);
  write_one(d.engine, d.shadow, 1, 0x5A); /* closes the group: it seals now */
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.pages_unprotected, 0); /* and no counter said otherwise */
  rp_test_server_kill(&c.servers[m]);
  uint64_t eio = rp_test_device_verify(&d, true);
  print_message("group sealed while its parity server advised, then its member's server "
                "lost: %llu of 2 pages EIO\n",
                (unsigned long long)eio);
  assert_int_equal(eio, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* ---- defect 5: sub-page writes from many threads --------------------------------------- */

#define RMW_THREADS 8
#define RMW_PAGES 32
#define RMW_ROUNDS 12
#define RMW_CHUNK (PAGE / RMW_THREADS)

struct rmw_writer {
  pthread_t thread;
  struct rampart_engine *engine;
  unsigned index;
  int result;
};

static uint8_t rmw_byte(unsigned thread, unsigned round, uint64_t page)
{
  return (uint8_t)(1 + thread * 31 + round * 7 + page * 13);
}

/* Writer t owns bytes [t * RMW_CHUNK, (t+1) * RMW_CHUNK) of every page: no two writers
 * ever write the same byte, yet all of them write into the same pages at once. */
static void *rmw_writer_main(void *arg)
{
  struct rmw_writer *w = arg;
  uint8_t chunk[RMW_CHUNK];
  for (unsigned r = 0; r < RMW_ROUNDS && w->result == 0; r++)
    for (uint64_t p = 0; p < RMW_PAGES && w->result == 0; p++) {
      memset(chunk, rmw_byte(w->index, r, p), sizeof chunk);
      w->result = rampart_pwrite(w->engine, chunk, sizeof chunk,
                                 p * PAGE + w->index * RMW_CHUNK, 0);
    }
  return NULL;
}

static void test_concurrent_sub_page_writes_keep_every_update(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 3, NULL);
  const char *extra[] = { "redundancy", "parity-log", NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, 256, extra);
  struct rmw_writer writers[RMW_THREADS];
  for (unsigned t = 0; t < RMW_THREADS; t++) {
    writers[t] = (struct rmw_writer){ .engine = e, .index = t };
    assert_int_equal(pthread_create(&writers[t].thread, NULL, rmw_writer_main, &writers[t]),
                     0);
  }
  for (unsigned t = 0; t < RMW_THREADS; t++) {
    pthread_join(writers[t].thread, NULL);
    assert_int_equal(writers[t].result, 0);
  }
  uint64_t lost = 0;
  for (uint64_t p = 0; p < RMW_PAGES; p++) {
    uint8_t page[PAGE];
    assert_int_equal(rampart_pread(e, page, PAGE, p * PAGE), 0);
    for (unsigned t = 0; t < RMW_THREADS; t++) {
      uint8_t want = rmw_byte(t, RMW_ROUNDS - 1, p);
      for (unsigned b = 0; b < RMW_CHUNK; b++)
        if (page[t * RMW_CHUNK + b] != want) {
          lost++;
          break;
        }
    }
  }
  print_message("%u threads writing %u-byte chunks of the same %u pages: %llu of %u chunks "
                "lost their last update\n",
                RMW_THREADS, RMW_CHUNK, RMW_PAGES, (unsigned long long)lost,
                RMW_THREADS * RMW_PAGES);
  assert_int_equal(lost, 0);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

/* ---- defect 6: mirror acknowledges once both copies are stored ------------------------ */

struct one_write {
  struct rampart_io io;
  atomic_bool done;
  int result;
  uint8_t *buf;
};

static void one_write_done(struct rampart_io *io, int result)
{
  struct one_write *w = io->user;
  w->result = result;
  atomic_store(&w->done, true);
}

/* Two servers, mirror: server 1 is stopped (SIGSTOP), and two pages are written. One of
 * them has its first copy on server 1 and cannot complete; the other has its first
 * copy on server 0 and its second on server 1, so it must not complete either: a
 * completed mirror write is in two servers' RAM (docs/flush.md). */
static void test_mirror_acknowledges_only_once_both_copies_are_stored(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 2, NULL);
  const char *extra[] = { "redundancy", "mirror", "timeout", "20000", "lease", "30", NULL };
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, 64, extra), 64, 83);
  for (uint64_t p = 0; p < 4; p++)
    write_one(d.engine, d.shadow, p, (uint8_t)(0x10 + p));
  assert_int_equal(rp_test_server_pause(&c.servers[1]), 0);
  struct one_write w[2];
  for (unsigned i = 0; i < 2; i++) {
    w[i].buf = aligned_alloc(PAGE, PAGE);
    assert_non_null(w[i].buf);
    memset(w[i].buf, 0xC0 + i, PAGE);
    memcpy(d.shadow + (10 + i) * PAGE, w[i].buf, PAGE);
    atomic_init(&w[i].done, false);
    w[i].io = (struct rampart_io){ .op = RAMPART_OP_WRITE,
                                   .offset = (10 + i) * PAGE,
                                   .length = PAGE,
                                   .buf = w[i].buf,
                                   .done = one_write_done,
                                   .user = &w[i] };
    rampart_submit(d.engine, &w[i].io);
  }
  usleep(800000);
  unsigned early = atomic_load(&w[0].done) + atomic_load(&w[1].done);
  print_message("mirror with one server stopped: %u of 2 writes acknowledged\n", early);
  assert_int_equal(rp_test_server_resume(&c.servers[1]), 0);
  for (unsigned t = 0; t < 200 && !(atomic_load(&w[0].done) && atomic_load(&w[1].done)); t++)
    usleep(50000);
  assert_true(atomic_load(&w[0].done) && atomic_load(&w[1].done));
  assert_int_equal(w[0].result, 0);
  assert_int_equal(w[1].result, 0);
  assert_int_equal(early, 0);
  rp_test_device_verify(&d, false);
  free(w[0].buf);
  free(w[1].buf);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* A mirror device of 1024 pages on n servers, the last refusing one write in 64, filled
 * once. */
static void mirror_with_a_refusing_server(struct rp_test_cluster *c, struct rp_test_device *d,
                                          unsigned n, uint64_t seed)
{
  const char *faults[] = { NULL, NULL, NULL };
  faults[n - 1] = "refuse-writes";
  cluster_start(c, n, faults);
  const char *extra[] = { "redundancy", "mirror", "lease", "30", "timeout", "1000", NULL };
  rp_test_device_init(d, rp_test_engine_open(c, 1024, extra), 1024, seed);
  rp_test_device_fill(d, 0, 1024);
}

/* Mirror with a server that refuses one write in 64: a write whose second copy was
 * refused is placed again on two servers before it completes, so losing any other
 * server afterwards loses nothing. */
static void test_mirror_places_a_refused_copy_again(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  mirror_with_a_refusing_server(&c, &d, 3, 89);
  wait_quiet(&d, 30);
  rp_test_server_kill(&c.servers[0]);
  uint64_t eio = rp_test_device_verify(&d, true);
  print_message("mirror with refused copies, then one server lost: %llu of 1024 pages EIO\n",
                (unsigned long long)eio);
  assert_int_equal(eio, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* Mirror on two servers, one refusing one write in 64. A write whose first copy is
 * refused has nowhere to go until the refusing server's session is back (a mirror needs
 * two servers), so it waits for it, while its second copy is still on its way to the
 * other server. That copy's answer must not complete the write under the wait: it once
 * did, and the write was then started again from the wait list after it had completed
 * (or appended to the list a second time, which cut off every op behind it). Every write
 * completes once, and both copies of every page are stored: losing either server after
 * the fill loses nothing. */
static void test_mirror_write_refused_while_its_copy_is_in_flight(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  mirror_with_a_refusing_server(&c, &d, 2, 131);
  rp_test_device_workload(&d, 64, 100,
                          0); /* 64 more batches of writes, each refused 1 in 64 */
  wait_quiet(&d, 30);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  print_message("mirror on two servers, one refusing writes: %llu pages unprotected, "
                "%llu ops waiting\n",
                (unsigned long long)st.pages_unprotected, (unsigned long long)st.ops_waiting);
  rp_test_server_kill(&c.servers[1]); /* the refusing one: every page's other copy remains */
  uint64_t eio = rp_test_device_verify(&d, true);
  print_message("then the refusing server lost: %llu of 1024 pages EIO\n",
                (unsigned long long)eio);
  assert_int_equal(eio, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

int main(void)
{
  if (!rp_test_rampartd_path())
    return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_cleaning_past_a_corrupting_server_moves_only_verified_pages),
    cmocka_unit_test(test_rebuild_past_a_corrupting_server_counts_what_it_cannot_verify),
    cmocka_unit_test(test_a_corrupting_server_is_suspect_and_emptied),
    cmocka_unit_test(test_refused_member_write_does_not_leave_its_group_believed_protected),
    cmocka_unit_test(test_a_move_whose_destination_write_fails_leaves_nothing_unprotected),
    cmocka_unit_test(test_group_seals_with_its_parity_while_the_parity_server_advises),
    cmocka_unit_test(test_concurrent_sub_page_writes_keep_every_update),
    cmocka_unit_test(test_mirror_acknowledges_only_once_both_copies_are_stored),
    cmocka_unit_test(test_mirror_places_a_refused_copy_again),
    cmocka_unit_test(test_mirror_write_refused_while_its_copy_is_in_flight),
  };
  /* RAMPART_TEST_FILTER=test_name runs one test (cmocka's own glob syntax). */
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
