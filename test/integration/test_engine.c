/* The pager engine against real rampartd processes on loopback, through the public
 * engine API (src/engine/rampart.h) that the nbdkit plugin and the ublk target use.
 *
 * Every test keeps a shadow copy of the device and checks every byte read back against
 * it. Workloads are batches of non-overlapping asynchronous requests, so many pages are
 * in flight on every server at once, with writes, overwrites and trims mixed.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "client.h"
#include "rampart.h"
#include "engine_cluster.h"
#include "engine_device.h"

#define PAGE RAMPART_PAGE_SIZE

/* ---- cluster -------------------------------------------------------------------- */

static void cluster_start(struct rp_test_cluster *c, unsigned n, const char *memory)
{
  assert_int_equal(rp_test_cluster_start(c, n, memory, NULL), 0);
}

/* The device helpers (a shadow copy, batches of asynchronous requests, verification)
 * are test/support/engine_device.c, shared with test_engine_faults. */

static void test_standalone_ram_disk_spills(void **state)
{
  (void)state;
  char dir[512];
  assert_int_equal(rp_test_tmpdir(dir, sizeof dir), 0);
  const char *extra[] = { "memory", "1M", "tmpdir", dir, NULL };
  struct rp_test_device d;
  uint64_t pages = 2048; /* 8 MiB device, 1 MiB of RAM: most pages spill to the file */
  rp_test_device_init(&d, rp_test_engine_open(NULL, pages, extra), pages, 11);
  rp_test_device_workload(&d, 300, 70, 10);
  rp_test_device_verify(&d, false);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  assert_true(st.pages_local_ram > 0);
  assert_true(st.pages_spilled > 0);
  assert_true(st.pages_local_ram <= 256);
  rp_test_device_free(&d);
  rp_test_tmpdir_remove(dir);
}

static void policy_round_trip(const char *policy, unsigned nservers)
{
  struct rp_test_cluster c;
  cluster_start(&c, nservers, "64M");
  const char *extra[] = { "redundancy", policy, NULL };
  struct rp_test_device d;
  uint64_t pages = 4096;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), pages, 7);
  rp_test_device_workload(&d, 400, 65, 10);
  rp_test_device_verify(&d, false);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  assert_true(st.pages_remote > 0);
  assert_int_equal(st.read_errors, 0);
  for (unsigned i = 0; i < st.nservers; i++)
    assert_true(st.servers[i].pages_live > 0); /* striped over every server */
  double per_page = (double)st.wire_bytes_written / (double)st.pages_written / (PAGE + 32);
  print_message("%s: %.3f pages on the wire per page written\n", policy, per_page);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* Requests started from several frontend threads at once while a server is killed,
 * under both ways of starting them (engine.c): submit=inline (the default: a thread
 * starts its own request while the I/O thread sleeps, so kills, replays and the rebuild
 * run with requests started on both sides of the engine's lock) and submit=handover
 * (every request handed to the I/O thread). */
struct inline_writer {
  struct rampart_engine *engine;
  uint64_t first, pages;
  uint8_t tag;
  int failures;
};

static void *inline_writer_main(void *arg)
{
  struct inline_writer *w = arg;
  uint8_t page[PAGE];
  for (unsigned round = 0; round < 4; round++) {
    for (uint64_t p = w->first; p < w->first + w->pages; p++) {
      memset(page, (int)(w->tag + round + p), sizeof page);
      if (rampart_pwrite(w->engine, page, PAGE, p * PAGE, 0) != 0)
        w->failures++;
    }
    for (uint64_t p = w->first; p < w->first + w->pages; p++) {
      if (rampart_pread(w->engine, page, PAGE, p * PAGE) != 0 ||
          page[0] != (uint8_t)(w->tag + round + p) || page[PAGE - 1] != page[0])
        w->failures++;
    }
  }
  return NULL;
}

static void threads_survive_a_kill(const char *submit)
{
  struct rp_test_cluster c;
  cluster_start(&c, 6, "64M");
  const char *extra[] = { "redundancy", "parity-log", "group",  "4",    "lease", "1",
                          "timeout",    "1000",       "submit", submit, NULL };
  struct rp_test_device d;
  const uint64_t pages = 4096;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), pages, 13);
  rp_test_device_workload(&d, 100, 80, 5); /* the harness's own batches, async */
  enum { WRITERS = 4 };
  struct inline_writer w[WRITERS];
  pthread_t t[WRITERS];
  /* The writers own the top quarter of the device; the harness's shadow the rest. */
  for (unsigned i = 0; i < WRITERS; i++) {
    w[i] = (struct inline_writer){ .engine = d.engine,
                                   .first = pages * 3 / 4 + i * 256,
                                   .pages = 256,
                                   .tag = (uint8_t)(i * 61) };
    assert_int_equal(pthread_create(&t[i], NULL, inline_writer_main, &w[i]), 0);
  }
  usleep(200000);
  rp_test_server_kill(&c.servers[2]); /* while they write and read */
  for (unsigned i = 0; i < WRITERS; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(w[i].failures, 0);
  }
  rp_test_device_wait_noticed(&d, 2, 10);
  rp_test_device_wait_rebuilt(&d, 60);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.read_errors, 0);
  assert_int_equal(st.pages_lost, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

static void test_inline_start_survives_a_kill(void **state)
{
  (void)state;
  threads_survive_a_kill("inline");
}

static void test_handover_start_survives_a_kill(void **state)
{
  (void)state;
  threads_survive_a_kill("handover");
}

/* A frontend thread that reads its own replies (rampart_reap) while blocking requests
 * from other threads go on and a server is killed: the reaping thread reads the
 * others' replies too, each is completed once, and every byte reads back. Between the
 * harness's bursts the sockets go back to the I/O thread (nobody reaps for two ticks)
 * and are lent again. */
static void test_reaping_thread_survives_a_kill(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 6, "64M");
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "1",          "timeout",    "1000",  NULL };
  const uint64_t pages = 4096, harness_pages = pages * 3 / 4;
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), harness_pages, 17);
  d.reap = true;
  rp_test_device_workload(&d, 60, 80, 5);
  usleep(300000); /* the sockets go back to the I/O thread */
  rp_test_device_workload(&d, 40, 60, 5);
  enum { WRITERS = 4 };
  struct inline_writer w[WRITERS];
  pthread_t t[WRITERS];
  /* The writers own the top quarter, beyond the harness's pages. */
  for (unsigned i = 0; i < WRITERS; i++) {
    w[i] = (struct inline_writer){ .engine = d.engine,
                                   .first = harness_pages + i * 256,
                                   .pages = 256,
                                   .tag = (uint8_t)(i * 37 + 5) };
    assert_int_equal(pthread_create(&t[i], NULL, inline_writer_main, &w[i]), 0);
  }
  rp_test_device_workload(&d, 40, 80, 5);
  rp_test_server_kill(&c.servers[2]); /* while both sides write and read */
  rp_test_device_workload(&d, 80, 70, 5);
  for (unsigned i = 0; i < WRITERS; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(w[i].failures, 0);
  }
  rp_test_device_wait_noticed(&d, 2, 10);
  rp_test_device_wait_rebuilt(&d, 60);
  rp_test_device_workload(&d, 40, 50, 5);
  rp_test_device_verify(&d, false);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.read_errors, 0);
  assert_int_equal(st.pages_lost, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

static void test_policy_none(void **state)
{
  (void)state;
  policy_round_trip("none", 4);
}
static void test_policy_mirror(void **state)
{
  (void)state;
  policy_round_trip("mirror", 3);
}
static void test_policy_parity_log(void **state)
{
  (void)state;
  policy_round_trip("parity-log", 5);
}
static void test_policy_write_through(void **state)
{
  (void)state;
  policy_round_trip("write-through", 4);
}

/* Parity-log 4+1 on n fresh servers, declaring a dead server lost after a second. */
static void start_quick_to_rebuild_device(struct rp_test_cluster *c, struct rp_test_device *d,
                                          unsigned nservers, uint64_t pages, uint64_t seed)
{
  cluster_start(c, nservers, "64M");
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "1",          "timeout",    "1000",  NULL };
  rp_test_device_init(d, rp_test_engine_open(c, pages, extra), pages, seed);
}

static void test_parity_log_survives_kills(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  start_quick_to_rebuild_device(&c, &d, 6, 4096, 99);
  rp_test_device_workload(&d, 200, 80, 5);
  /* kill -9 in the middle of the write stream */
  rp_test_server_kill(&c.servers[1]);
  rp_test_device_workload(&d, 200, 80, 5);
  rp_test_device_verify(&d, false);
  rp_test_device_wait_rebuilt(&d, 60);
  rp_test_device_verify(&d, false);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  assert_true(st.rebuild_pages_done > 0);
  print_message("after one loss: %llu degraded reads, %llu pages moved\n",
                (unsigned long long)st.pages_degraded_reads,
                (unsigned long long)st.rebuild_pages_done);
  /* a second server, after the rebuild: still nothing lost */
  rp_test_server_kill(&c.servers[3]);
  rp_test_device_workload(&d, 100, 80, 5);
  rp_test_device_verify(&d, false);
  rp_test_device_wait_rebuilt(&d, 60);
  rp_test_device_verify(&d, false);
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.read_errors, 0);
  assert_int_equal(st.pages_lost, 0);
  assert_int_equal(st.integrity_failures, 0); /* rebuilt pages verify like the rest */
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

static void test_mirror_survives_a_kill(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 3, "64M");
  const char *extra[] = { "redundancy", "mirror", "lease", "1", "timeout", "1000", NULL };
  struct rp_test_device d;
  uint64_t pages = 2048;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), pages, 31);
  rp_test_device_workload(&d, 150, 80, 5);
  rp_test_server_kill(&c.servers[0]);
  rp_test_device_workload(&d, 150, 80, 5);
  rp_test_device_verify(&d, false);
  rp_test_device_wait_rebuilt(&d, 60);
  rp_test_device_verify(&d, false);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* Striping alone keeps one copy: a crash loses exactly that server's pages, which then
 * read as EIO — never as another page's bytes or zeros. */
static void test_none_loses_only_the_dead_servers_pages_as_eio(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 4, "64M");
  const char *extra[] = { "redundancy", "none", "lease", "1", "timeout", "1000", NULL };
  struct rp_test_device d;
  uint64_t pages = 2048;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), pages, 37);
  rp_test_device_workload(&d, 150, 90, 0);
  rp_test_server_kill(&c.servers[1]);
  uint64_t eio = rp_test_device_verify(&d, true);
  print_message("none: %llu of %llu pages lost with one server\n", (unsigned long long)eio,
                (unsigned long long)pages);
  assert_true(eio > 0);
  assert_true(eio < pages / 2);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* A crashed server restarted on the same address comes back empty: the engine treats it
 * as a new server, rebuilds what the old one held, and places new pages on it. */
static void test_restarted_server_rejoins_empty(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 5, "64M");
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "1",          "timeout",    "1000",  NULL };
  struct rp_test_device d;
  uint64_t pages = 2048;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), pages, 41);
  rp_test_device_workload(&d, 100, 85, 5);
  char listen[96];
  snprintf(listen, sizeof listen, "%s", c.servers[3].addr);
  rp_test_server_kill(&c.servers[3]);
  rp_test_device_workload(&d, 50, 85, 5);
  usleep(1500000); /* past lease=1: declared lost */
  const char *args[] = { rp_test_rampartd_path(),
                         "--listen",
                         listen,
                         "--foreground",
                         "--memory",
                         "64M",
                         "--key",
                         c.key_path,
                         "--pressure-file",
                         c.psi[3],
                         NULL };
  assert_int_equal(rp_test_server_start_argv(&c.servers[3], c.dir, args), 0);
  struct rampart_stats st;
  bool rejoined = false;
  for (unsigned i = 0; i < 100 && !rejoined; i++) {
    rp_test_device_workload(&d, 2, 85, 5);
    rp_test_device_stats(&d, &st);
    rejoined = st.nservers == 6 && st.servers[5].state == RAMPART_SERVER_UP &&
               st.servers[5].pages_live > 0 && st.servers[3].state == RAMPART_SERVER_LOST;
    usleep(50000);
  }
  assert_true(rejoined);
  rp_test_device_wait_rebuilt(&d, 60);
  rp_test_device_verify(&d, false);
  assert_int_equal(st.read_errors, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

static void test_two_losses_in_a_group_give_eio_not_garbage(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 5, "64M");
  /* A long lease: the rebuild cannot start before both servers are gone. */
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease", "30", NULL };
  struct rp_test_device d;
  uint64_t pages = 2048;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), pages, 5);
  rp_test_device_workload(&d, 200, 90, 0);
  rp_test_server_kill(&c.servers[0]);
  rp_test_server_kill(&c.servers[2]);
  uint64_t eio = rp_test_device_verify(&d, true);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  print_message("two losses: %llu pages EIO, %llu read errors counted\n",
                (unsigned long long)eio, (unsigned long long)st.read_errors);
  assert_true(eio > 0);
  assert_true(st.read_errors >= eio);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

static void test_write_through_survives_losing_every_server(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 3, "64M");
  const char *extra[] = {
    "redundancy", "write-through", "lease", "1", "timeout", "1000", NULL
  };
  struct rp_test_device d;
  uint64_t pages = 2048;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), pages, 3);
  rp_test_device_workload(&d, 150, 80, 5);
  for (unsigned i = 0; i < c.n; i++)
    rp_test_server_kill(&c.servers[i]);
  rp_test_device_verify(&d, false);
  rp_test_device_workload(&d, 50, 80, 5); /* and it keeps working, on disk alone */
  rp_test_device_verify(&d, false);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* The rebuild clock: after a kill with no reads or writes meanwhile (a read of a page on
 * the dead server would rewrite it at once), the rebuild moves at least every live page
 * that server held, finishes, and says how long it took. */
static void test_rebuild_is_counted_and_timed(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  start_quick_to_rebuild_device(&c, &d, 5, 2048, 23);
  rp_test_device_workload(&d, 100, 100, 0);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.rebuilds_finished, 0);
  assert_false(st.rebuild_running);
  uint64_t held = st.servers[2].pages_live;
  assert_true(held > 0);
  rp_test_server_kill(&c.servers[2]);
  for (unsigned i = 0; i < 300 && st.rebuilds_finished == 0; i++) {
    usleep(100000);
    rp_test_device_stats(&d, &st);
  }
  char report[8192];
  rampart_format_stats(&st, report, sizeof report);
  print_message("%s", report);
  assert_int_equal(st.rebuilds_finished, 1);
  assert_false(st.rebuild_running);
  assert_true(st.rebuild_pages_moved >= held);
  assert_true(st.rebuild_pages_moved <= st.rebuild_pages_done);
  assert_true(st.rebuild_seconds > 0 && st.rebuild_seconds < 30);
  assert_non_null(strstr(report, "\nrebuild         last: "));
  rp_test_device_verify(&d, false);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* Pages the servers hold for this device, as they count them. */
static uint64_t servers_pages_stored(struct rp_test_cluster *c)
{
  uint64_t stored = 0;
  for (unsigned i = 0; i < c->n; i++) {
    struct rp_server_stat ss;
    assert_true(rp_test_server_stat(&c->servers[i], &c->key, &ss));
    stored += ss.stored_pages;
  }
  return stored;
}

/* Long overwrite run: server memory stays within (1 + 1/S) x live x (1 + overflow) at the
 * default overflow (10%), and no page spills to disk on the way: writers wait for
 * cleaning instead. */
static void test_server_memory_stays_bounded(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 5, "64M");
  const char *extra[] = { "redundancy", "parity-log", "group", "4", NULL };
  struct rp_test_device d;
  uint64_t pages = 2048;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), pages, 17);
  rp_test_device_workload(&d, 2000, 95, 0); /* ~ 13 overwrites of every page */
  rp_test_device_verify(&d, false);
  uint64_t live = 0;
  for (uint64_t p = 0; p < pages; p++) {
    static const uint8_t zero[PAGE];
    live += memcmp(d.shadow + p * PAGE, zero, PAGE) != 0;
  }
  /* Cleaning may still be finishing the last groups: the servers' memory must settle
   * within the bound in a few seconds, as the real servers count it. The engine allows
   * itself a few groups' worth of slack (5 slots x 8) on top, which tells on a device
   * this small. */
  const double bound = (1.0 + 1.0 / 4) * 1.10 + 40.0 / (double)live;
  double ratio = 0;
  uint64_t stored = 0, counted = 0;
  struct rampart_stats st;
  for (unsigned attempt = 0; attempt < 100; attempt++) {
    rp_test_device_stats(&d, &st);
    uint64_t before = rp_test_stats_pages_stored(&st);
    stored = servers_pages_stored(&c);
    rp_test_device_stats(&d, &st);
    counted = rp_test_stats_pages_stored(&st);
    ratio = (double)stored / (double)live;
    /* Settled: within the bound, and the servers hold what the engine counts (a FREE
     * skipped once left old pages on them past it). */
    if (ratio <= bound && counted == before && counted == stored)
      break;
    usleep(200000);
  }
  char report[8192];
  rampart_format_stats(&st, report, sizeof report);
  print_message("%s", report);
  print_message("server pages %llu for %llu live pages: %.3f per live page "
                "(bound (1 + 1/4) x 1.10 + slack = %.4f); the engine counts %llu\n",
                (unsigned long long)stored, (unsigned long long)live, ratio, bound,
                (unsigned long long)counted);
  assert_true(ratio <= bound);
  assert_int_equal(stored, counted);
  assert_int_equal(st.pages_spilled, 0);
  rp_test_device_verify(&d, false);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* Five servers, parity-log with groups of 3, a 2048-page device mostly written. */
static void start_busy_device(struct rp_test_cluster *c, struct rp_test_device *d,
                              uint64_t seed)
{
  cluster_start(c, 5, "64M");
  const char *extra[] = { "redundancy", "parity-log", "group", "3", NULL };
  rp_test_device_init(d, rp_test_engine_open(c, 2048, extra), 2048, seed);
  rp_test_device_workload(d, 150, 90, 0);
}

enum server_goal { SERVER_HOLDS_NO_LIVE_PAGE, SERVER_HOLDS_NOTHING, SERVER_TAKES_PAGES };

/* Keeps the device in use (small batches, write_percent writes) until server i reaches
 * goal; false after tries rounds of 50 ms. */
static bool busy_until(struct rp_test_device *d, unsigned i, enum server_goal goal,
                       unsigned tries, unsigned write_percent, struct rampart_stats *st)
{
  for (unsigned t = 0; t < tries; t++) {
    rp_test_device_workload(d, 2, write_percent, 0);
    rp_test_device_stats(d, st);
    const struct rampart_server_stats *s = &st->servers[i];
    bool reached = goal == SERVER_TAKES_PAGES
                     ? s->state == RAMPART_SERVER_UP && s->pages_live > 0
                     : s->state == RAMPART_SERVER_ADVISED &&
                         (goal == SERVER_HOLDS_NO_LIVE_PAGE ? s->pages_live
                                                            : s->pages_stored) == 0;
    if (reached)
      return true;
    usleep(50000);
  }
  return false;
}

/* A server whose host comes under memory pressure advises its clients: the engine
 * places nothing new there and moves what it has away; reads stay correct throughout. */
static void test_advise_moves_pages_off_a_server(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  start_busy_device(&c, &d, 23);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  uint64_t before = st.servers[2].pages_live;
  assert_true(before > 0);
  assert_int_equal(rp_test_write_file(c.psi[2], RP_TEST_PSI_HIGH), 0);
  bool moved = busy_until(&d, 2, SERVER_HOLDS_NO_LIVE_PAGE, 200, 50, &st);
  print_message("advise: %llu live pages moved off the pressured server\n",
                (unsigned long long)before);
  assert_true(moved);
  rp_test_device_verify(&d, false);
  /* Pressure over: the server takes new pages again. */
  assert_int_equal(rp_test_write_file(c.psi[2], RP_TEST_PSI_CALM), 0);
  assert_true(busy_until(&d, 2, SERVER_TAKES_PAGES, 100, 90, &st));
  rp_test_device_verify(&d, false);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* An operator drains a server (SIGUSR1) to remove it: every page it holds, data and
 * parity, moves elsewhere while the device stays in use, so it can then be stopped
 * without any client running degraded. */
static void test_drained_server_empties_and_can_stop(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct rp_test_device d;
  start_busy_device(&c, &d, 29);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  uint64_t before = st.servers[1].pages_stored;
  assert_true(before > 0);
  assert_int_equal(kill(c.servers[1].pid, SIGUSR1), 0);
  bool empty = busy_until(&d, 1, SERVER_HOLDS_NOTHING, 400, 50, &st);
  print_message("drain: %llu pages moved off the drained server; now %llu stored there\n",
                (unsigned long long)before, (unsigned long long)st.servers[1].pages_stored);
  assert_true(empty);
  rp_test_device_verify(&d, false);
  /* Stopping it now costs nothing: no read degrades, nothing is lost. */
  uint64_t degraded = st.pages_degraded_reads;
  assert_int_equal(rp_test_server_stop(&c.servers[1]), 0);
  rp_test_device_verify(&d, false);
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.pages_lost, 0);
  assert_int_equal(st.pages_degraded_reads, degraded);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

static void test_bad_configuration_is_refused_clearly(void **state)
{
  (void)state;
  struct rampart_config *cfg = rampart_config_new();
  char err[512];
  assert_int_equal(rampart_config_set(cfg, "size", "lots", err, sizeof err), -1);
  assert_non_null(strstr(err, "not a size"));
  assert_int_equal(rampart_config_set(cfg, "redundancy", "raid6", err, sizeof err), -1);
  assert_non_null(strstr(err, "parity-log"));
  assert_int_equal(rampart_config_set(cfg, "servers", "nohostport", err, sizeof err), -1);
  assert_non_null(strstr(err, "HOST:PORT"));
  assert_int_equal(rampart_config_set(cfg, "size", "4097", err, sizeof err), 0);
  assert_int_equal(rampart_config_check(cfg, err, sizeof err), -1);
  assert_non_null(strstr(err, "multiple of 4096"));
  assert_int_equal(rampart_config_set(cfg, "size", "1M", err, sizeof err), 0);
  assert_int_equal(rampart_config_set(cfg, "servers", "127.0.0.1:1", err, sizeof err), 0);
  assert_int_equal(rampart_config_set(cfg, "redundancy", "parity-log", err, sizeof err), 0);
  assert_int_equal(rampart_config_check(cfg, err, sizeof err), -1);
  assert_non_null(strstr(err, "servers"));
  /* A server that is not there: a start-up error naming it. */
  assert_int_equal(rampart_config_set(cfg, "redundancy", "none", err, sizeof err), 0);
  assert_null(rampart_open(cfg, err, sizeof err));
  assert_non_null(strstr(err, "127.0.0.1:1"));
  /* Encryption settings (docs/encryption.md). */
  assert_int_equal(rampart_config_set(cfg, "encrypt", "maybe", err, sizeof err), -1);
  assert_non_null(strstr(err, "encrypt=on"));
  assert_int_equal(rampart_config_set(cfg, "encrypt", "off", err, sizeof err), 0);
  assert_int_equal(rampart_config_set(cfg, "enckey", "/nonexistent", err, sizeof err), 0);
  assert_int_equal(rampart_config_check(cfg, err, sizeof err), -1);
  assert_non_null(strstr(err, "encrypt=off"));
  assert_int_equal(rampart_config_set(cfg, "encrypt", "on", err, sizeof err), 0);
  assert_null(rampart_open(cfg, err, sizeof err));
  assert_non_null(strstr(err, "enckey=/nonexistent"));
  rampart_config_free(cfg);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_bad_configuration_is_refused_clearly),
    cmocka_unit_test(test_standalone_ram_disk_spills),
    cmocka_unit_test(test_policy_none),
    cmocka_unit_test(test_policy_mirror),
    cmocka_unit_test(test_policy_parity_log),
    cmocka_unit_test(test_policy_write_through),
    cmocka_unit_test(test_parity_log_survives_kills),
    cmocka_unit_test(test_inline_start_survives_a_kill),
    cmocka_unit_test(test_handover_start_survives_a_kill),
    cmocka_unit_test(test_reaping_thread_survives_a_kill),
    cmocka_unit_test(test_rebuild_is_counted_and_timed),
    cmocka_unit_test(test_mirror_survives_a_kill),
    cmocka_unit_test(test_restarted_server_rejoins_empty),
    cmocka_unit_test(test_none_loses_only_the_dead_servers_pages_as_eio),
    cmocka_unit_test(test_two_losses_in_a_group_give_eio_not_garbage),
    cmocka_unit_test(test_write_through_survives_losing_every_server),
    cmocka_unit_test(test_server_memory_stays_bounded),
    cmocka_unit_test(test_advise_moves_pages_off_a_server),
    cmocka_unit_test(test_drained_server_empties_and_can_stop),
  };
  /* RAMPART_TEST_FILTER=test_policy_none runs one test (cmocka's own glob syntax). */
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
