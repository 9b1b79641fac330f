/* Server health against real rampartd processes: a dropped connection is not a lost
 * server (docs/engine.md, "Server health").
 *
 * The network is broken by a TCP relay on loopback (test/support/tcp_relay.c) while
 * every rampartd stays alive and keeps the engine's sessions, or by SIGSTOP/SIGKILL of
 * the servers themselves. A reader and a writer thread keep many requests in flight
 * (test/support/shadow_device.c) and check every byte against a shadow copy: a blip
 * must fail no request and lose no page.
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

#include "client.h"
#include "engine_cluster.h"
#include "rampart.h"
#include "shadow_device.h"
#include "tcp_relay.h"

#define PAGE RAMPART_PAGE_SIZE


/* ---- the engine's log, kept for assertions ------------------------------------------ */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[1 << 20];
static size_t log_len;

static void capture_log(int level, const char *line)
{
  fprintf(stderr, "engine[%d]: %s\n", level, line);
  pthread_mutex_lock(&log_lock);
  size_t n = strlen(line);
  if (log_len + n + 2 < sizeof log_text) {
    memcpy(log_text + log_len, line, n);
    log_text[log_len + n] = '\n';
    log_len += n + 1;
    log_text[log_len] = '\0';
  }
  pthread_mutex_unlock(&log_lock);
}

static void log_clear(void)
{
  pthread_mutex_lock(&log_lock);
  log_len = 0;
  log_text[0] = '\0';
  pthread_mutex_unlock(&log_lock);
}

static bool log_has(const char *what)
{
  pthread_mutex_lock(&log_lock);
  bool found = strstr(log_text, what) != NULL;
  pthread_mutex_unlock(&log_lock);
  return found;
}

/* ---- a cluster behind a relay -------------------------------------------------------- */

struct rig {
  struct rp_test_cluster cluster;
  struct rp_test_relay *relay; /* NULL: the engine talks to the servers directly */
  struct rp_test_shadow dev;
};

static void rig_start(struct rig *r, unsigned nservers, bool relayed, uint64_t pages,
                      const char *const *extra)
{
  memset(r, 0, sizeof *r);
  log_clear();
  assert_int_equal(rp_test_cluster_start(&r->cluster, nservers, "64M", NULL), 0);
  const char *addrs[RP_TEST_MAX_SERVERS];
  if (relayed) {
    r->relay = rp_test_relay_start(nservers, r->cluster.servers);
    assert_non_null(r->relay);
    for (unsigned i = 0; i < nservers; i++)
      addrs[i] = rp_test_relay_addr(r->relay, i);
  }
  struct rampart_engine *e = rp_test_engine_open_at(&r->cluster, relayed ? addrs : NULL,
                                                    pages, extra);
  rp_test_shadow_init(&r->dev, e, pages);
  rp_test_shadow_fill(&r->dev, 0x5eed);
}

static void rig_stop(struct rig *r)
{
  rp_test_shadow_destroy(&r->dev);
  rp_test_relay_stop(r->relay);
  rp_test_cluster_stop(&r->cluster);
}

static void stats(struct rig *r, struct rampart_stats *st)
{
  rampart_get_stats(r->dev.engine, st);
}

static void print_stats(struct rig *r)
{
  struct rampart_stats st;
  char report[8192];
  stats(r, &st);
  rampart_format_stats(&st, report, sizeof report);
  print_message("%s", report);
}

/* True when no server is reconnecting: each is up, or lost and replaced. */
static bool all_settled(const struct rampart_stats *st)
{
  for (unsigned i = 0; i < st->nservers; i++)
    if (st->servers[i].state == RAMPART_SERVER_RECONNECTING)
      return false;
  return true;
}

static void wait_settled(struct rig *r, unsigned timeout_ms)
{
  struct rampart_stats st;
  uint64_t until = rp_test_now_ms() + timeout_ms;
  do {
    stats(r, &st);
    if (all_settled(&st))
      return;
    rp_test_sleep_ms(50);
  } while (rp_test_now_ms() < until);
  print_stats(r);
  fail_msg("servers still reconnecting after %u ms", timeout_ms);
}

/* Waits until server i is in state `want`, polling every 10 ms for up to timeout_ms; st
 * holds the last stats read. */
static void wait_server_state(struct rig *r, unsigned i, enum rampart_server_health want,
                              unsigned timeout_ms, struct rampart_stats *st)
{
  uint64_t until = rp_test_now_ms() + timeout_ms;
  do {
    stats(r, st);
    if (st->servers[i].state == want)
      return;
    rp_test_sleep_ms(10);
  } while (rp_test_now_ms() < until);
}

/* Every server UP again after an outage within the lease: each resumed its session. */
static void assert_all_up_after_outage(struct rig *r, unsigned nservers)
{
  struct rampart_stats st;
  stats(r, &st);
  assert_int_equal(st.nservers, nservers);
  for (unsigned i = 0; i < nservers; i++)
    assert_int_equal(st.servers[i].state, RAMPART_SERVER_UP);
  assert_int_equal(st.pages_lost, 0);
}

/* Every server UP again (nothing lost, no new incarnation). */
static void assert_all_up(struct rig *r, unsigned nservers)
{
  struct rampart_stats st;
  stats(r, &st);
  if (st.nservers != nservers)
    print_stats(r);
  assert_int_equal(st.nservers, nservers);
  for (unsigned i = 0; i < nservers; i++) {
    if (st.servers[i].state != RAMPART_SERVER_UP)
      print_stats(r);
    assert_int_equal(st.servers[i].state, RAMPART_SERVER_UP);
  }
  assert_int_equal(st.read_errors, 0);
  assert_int_equal(st.pages_lost, 0);
}

static void describe(const char *what, const struct rp_test_shadow_result *res)
{
  char line[512];
  rp_test_shadow_describe(res, line, sizeof line);
  print_message("%s: %s\n", what, line);
}

static void expect_clean(const char *what, const struct rp_test_shadow_result *res)
{
  describe(what, res);
  assert_int_equal(res->read_failures, 0);
  assert_int_equal(res->write_failures, 0);
  assert_int_equal(res->mismatches, 0);
}

static void verify_clean(struct rig *r, const char *what)
{
  struct rp_test_shadow_result res;
  rp_test_shadow_verify(&r->dev, &res);
  char label[256];
  snprintf(label, sizeof label, "%s, read back", what);
  expect_clean(label, &res);
}

/* ---- network faults -------------------------------------------------------------------- */

enum blip { RESET_TWICE, UNREACHABLE_3S, FLAPPING };

static const char *blip_name(enum blip b)
{
  return b == RESET_TWICE      ? "every connection reset twice, 1 s apart"
         : b == UNREACHABLE_3S ? "every server unreachable for 3 s"
                               : "one server flapping every 500 ms for 10 s";
}

static void run_blip(struct rig *r, enum blip b)
{
  switch (b) {
  case RESET_TWICE:
    rp_test_relay_reset(r->relay, RP_TEST_RELAY_ALL);
    rp_test_sleep_ms(1000);
    rp_test_relay_reset(r->relay, RP_TEST_RELAY_ALL);
    rp_test_sleep_ms(1000);
    return;
  case UNREACHABLE_3S:
    rp_test_relay_refuse(r->relay, RP_TEST_RELAY_ALL, true);
    rp_test_relay_reset(r->relay, RP_TEST_RELAY_ALL);
    rp_test_sleep_ms(3000);
    rp_test_relay_refuse(r->relay, RP_TEST_RELAY_ALL, false);
    return;
  case FLAPPING:
    /* Down 200 ms (connections reset, new ones refused), up 300 ms, twenty times. */
    for (unsigned k = 0; k < 20; k++) {
      rp_test_relay_refuse(r->relay, 1, true);
      rp_test_relay_reset(r->relay, 1);
      rp_test_sleep_ms(200);
      rp_test_relay_refuse(r->relay, 1, false);
      rp_test_sleep_ms(300);
    }
    return;
  }
}

/* A reader and a writer run through each blip: every request succeeds, every page
 * reads back as written, and every server ends UP with its session. */
static void blips_fail_nothing(const char *policy, unsigned nservers)
{
  struct rig r;
  const char *extra[] = { "redundancy", policy, "lease", "10", "timeout", "1000", NULL };
  rig_start(&r, nservers, true, 2048, extra);
  const enum blip blips[] = { RESET_TWICE, UNREACHABLE_3S, FLAPPING };
  for (unsigned k = 0; k < 3; k++) {
    rp_test_shadow_start(&r.dev, 1, 1, 16, 100 + k);
    rp_test_sleep_ms(300);
    run_blip(&r, blips[k]);
    wait_settled(&r, 20000);
    rp_test_sleep_ms(300);
    struct rp_test_shadow_result res = rp_test_shadow_stop(&r.dev);
    char what[160];
    snprintf(what, sizeof what, "%s, %s", policy, blip_name(blips[k]));
    expect_clean(what, &res);
    verify_clean(&r, what);
    assert_all_up(&r, nservers);
  }
  assert_true(log_has("reconnecting"));
  print_stats(&r);
  rig_stop(&r);
}

static void test_parity_log_blips(void **state)
{
  (void)state;
  blips_fail_nothing("parity-log", 5);
}
static void test_mirror_blips(void **state)
{
  (void)state;
  blips_fail_nothing("mirror", 3);
}
static void test_write_through_blips(void **state)
{
  (void)state;
  blips_fail_nothing("write-through", 3);
}
static void test_none_blips(void **state)
{
  (void)state;
  blips_fail_nothing("none", 4);
}

/* ---- a stall beside a loss: each server is retried on its own ----------------------------- */

/* Server 0 dies for good; meanwhile server 2 stalls (SIGSTOP) for 2.5 s and comes back.
 * Each server is retried on its own, so server 2 resumes its session well within its
 * lease and only server 0 is lost: its groups are rebuilt with server 2's members, and
 * no page of a group holding both is lost. */
static void test_stall_while_another_server_reconnects(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "4",          "timeout",    "500",   NULL };
  rig_start(&r, 5, false, 1024, extra);
  rp_test_server_kill(&r.cluster.servers[0]);
  /* Readers only: rewrites would move pages out of the groups at risk before the
   * stall ends and hide a double loss. */
  rp_test_shadow_start(&r.dev, 2, 0, 16, 7);
  rp_test_sleep_ms(200);
  assert_int_equal(rp_test_server_pause(&r.cluster.servers[2]), 0);
  rp_test_sleep_ms(2500);
  assert_int_equal(rp_test_server_resume(&r.cluster.servers[2]), 0);
  /* Past server 0's lease: it is lost and rebuilt. */
  rp_test_sleep_ms(3000);
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r.dev);
  describe("stall during another server's reconnect", &res);
  struct rampart_stats st;
  for (unsigned i = 0; i < 300; i++) {
    stats(&r, &st);
    if (st.servers[0].state == RAMPART_SERVER_LOST && st.rebuild_pages_pending == 0 &&
        all_settled(&st))
      break;
    rp_test_sleep_ms(100);
  }
  print_stats(&r);
  verify_clean(&r, "stall during another server's reconnect");
  expect_clean("stall during another server's reconnect", &res);
  stats(&r, &st);
  assert_int_equal(st.servers[0].state, RAMPART_SERVER_LOST);
  assert_int_equal(st.servers[2].state, RAMPART_SERVER_UP); /* resumed, not replaced */
  assert_int_equal(st.pages_lost, 0);
  assert_int_equal(st.read_errors, 0);
  rig_stop(&r);
}

/* ---- what the log says of a server that never comes back -------------------------------- */

/* Lines of the captured log holding every one of the NULL-terminated words; the last one
 * copied into last (if not NULL). */
static unsigned log_lines_with(char *last, size_t last_len, const char *const *words)
{
  unsigned n = 0;
  pthread_mutex_lock(&log_lock);
  for (const char *line = log_text; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char copy[1200];
    snprintf(copy, sizeof copy, "%.*s", (int)len, line);
    bool all = true;
    for (const char *const *w = words; *w && all; w++)
      all = strstr(copy, *w) != NULL;
    if (all) {
      n++;
      if (last)
        snprintf(last, last_len, "%s", copy);
    }
    line += len + (end ? 1 : 0);
  }
  pthread_mutex_unlock(&log_lock);
  return n;
}

/* A server stopped (SIGSTOP) past its lease: its kernel still accepts each reconnect and
 * takes the HELLO, and nothing answers. The line that declares it lost says how many
 * attempts were made and where the last failed (waiting for the Challenge, nothing of
 * ours left unsent); the failures before it are logged, but not each one. */
static void test_lost_line_counts_attempts_and_names_the_phase(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "3",          "timeout",    "300",   NULL };
  rig_start(&r, 5, false, 1024, extra);
  rp_test_shadow_start(&r.dev, 1, 1, 16, 11);
  rp_test_sleep_ms(200);
  assert_int_equal(rp_test_server_pause(&r.cluster.servers[2]), 0);
  struct rampart_stats st;
  wait_server_state(&r, 2, RAMPART_SERVER_LOST, 10000, &st);
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r.dev);
  expect_clean("a server stopped past its lease", &res);
  assert_int_equal(st.servers[2].state, RAMPART_SERVER_LOST);
  /* Lost, it keeps trying to join again, every 800 ms or so (timeout=300 and the
   * backoff's 500 ms): 2.5 s of that is logged once. (Counted before the server
   * resumes: it then refuses a few attempts, the connections its backlog kept
   * counting against --max-unauthenticated-per-address, a new cause and a new line.) */
  rp_test_sleep_ms(2500);
  char addr[160];
  snprintf(addr, sizeof addr, "server %s", r.cluster.servers[2].addr);
  const char *rejoin_words[] = { addr, " (lost): cannot join again yet (attempt ", NULL };
  unsigned rejoin_lines = log_lines_with(NULL, 0, rejoin_words);
  assert_int_equal(rp_test_server_resume(&r.cluster.servers[2]), 0);
  assert_int_equal(rejoin_lines, 1);

  char lost[1200], failed[1200];
  const char *lost_words[] = { addr, "is lost (no reconnect within lease=3 s: ", NULL };
  assert_int_equal(log_lines_with(lost, sizeof lost, lost_words), 1);
  print_message("%s\n", lost);
  unsigned attempts = 0;
  const char *count = strstr(lost, "lease=3 s: ");
  assert_non_null(count);
  assert_int_equal(sscanf(count, "lease=3 s: %u reconnect attempts", &attempts), 1);
  assert_non_null(strstr(lost, "waiting for the Challenge (HELLO sent) from"));
  assert_non_null(strstr(lost, "0 bytes unsent"));
  /* timeout=300 and a backoff from 50 ms: several attempts fit in the 3 s lease. */
  assert_true(attempts >= 3);

  const char *failed_words[] = { addr, ": reconnect attempt ", " failed", NULL };
  unsigned lines = log_lines_with(failed, sizeof failed, failed_words);
  print_message("%u attempts, %u lines about failed ones, the last: %s\n", attempts, lines,
                failed);
  assert_true(lines >= 2);       /* not one line for the whole outage */
  assert_true(lines < attempts); /* nor one per attempt */
  const char *more_words[] = { addr, " more since the last such line)", NULL };
  assert_true(log_lines_with(NULL, 0, more_words) >= 1);
  rig_stop(&r);
}

/* ---- a resume that completes after the server was declared lost ------------------------ */

/* With lease=0 the engine declares a server lost at once; its reconnect attempt (with the
 * session token) is held in the relay until then and completes after: the server resumes
 * the old session. The engine has already given those pages up and is rebuilding them,
 * so it must not adopt that session, neither as the old server (its pages are being
 * rebuilt elsewhere) nor as a new, empty one (the server would keep the stale pages and
 * the engine would think it holds none). It ends the stale session and joins the server
 * again with a fresh one. */
static void test_resume_after_lost_is_refused(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "0",          "timeout",    "3000",  NULL };
  rig_start(&r, 5, true, 1024, extra);
  rp_test_relay_hold(r.relay, 2, true);
  rp_test_relay_reset(r.relay, 2);
  struct rampart_stats st;
  wait_server_state(&r, 2, RAMPART_SERVER_LOST, 5000, &st);
  assert_int_equal(st.servers[2].state, RAMPART_SERVER_LOST);
  uint64_t held = rp_test_relay_accepted(r.relay, 2);
  rp_test_relay_hold(r.relay, 2, false);
  print_message("server 2 lost; %llu connection attempts held until now\n",
                (unsigned long long)held);
  bool rejoined = false;
  for (unsigned i = 0; i < 200 && !rejoined; i++) {
    stats(&r, &st);
    rejoined = st.nservers == 6 && st.servers[5].state == RAMPART_SERVER_UP;
    rp_test_sleep_ms(50);
  }
  print_stats(&r);
  assert_true(rejoined);
  assert_true(st.servers[5].pages_reserved > 0);
  /* New pages land on the new incarnation; the rebuild leaves nothing on the old one. */
  rp_test_shadow_start(&r.dev, 1, 1, 16, 3);
  rp_test_sleep_ms(1500);
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r.dev);
  expect_clean("after the refused resume", &res);
  for (unsigned i = 0; i < 300; i++) {
    stats(&r, &st);
    if (st.rebuild_pages_pending == 0 && st.servers[2].pages_live == 0)
      break;
    rp_test_sleep_ms(100);
  }
  verify_clean(&r, "after the refused resume");
  /* The server holds what the new incarnation stored, and nothing of the old session. */
  struct rp_server_stat ss;
  bool match = false;
  for (unsigned i = 0; i < 50 && !match; i++) {
    stats(&r, &st);
    assert_true(rp_test_server_stat(&r.cluster.servers[2], &r.cluster.key, &ss));
    match = ss.stored_pages == st.servers[5].pages_stored;
    if (!match)
      rp_test_sleep_ms(100);
  }
  print_message("rampartd 2 stores %llu pages, %u sessions detached; the engine's new "
                "incarnation holds %llu\n",
                (unsigned long long)ss.stored_pages, ss.sessions_detached,
                (unsigned long long)st.servers[5].pages_stored);
  assert_true(match);
  assert_int_equal(st.read_errors, 0);
  rig_stop(&r);
}

/* ---- an outage longer than io-timeout= ---------------------------------------------------- */

/* Every server unreachable for longer than io-timeout=1000 (but within the lease): a read
 * waits io-timeout, then fails as its policy promises (EIO, since no copy is reachable;
 * write-through answers from its disk copy at once); a write waits io-timeout, then goes
 * to the spill store. Once the servers are back, every page reads back as written. */
static void outage_past_io_timeout(const char *policy, unsigned nservers)
{
  struct rig r;
  const char *extra[] = { "redundancy", policy,       "lease", "20", "timeout",
                          "1000",       "io-timeout", "1000",  NULL };
  rig_start(&r, nservers, true, 1024, extra);
  bool wt = strcmp(policy, "write-through") == 0;
  rp_test_relay_refuse(r.relay, RP_TEST_RELAY_ALL, true);
  rp_test_relay_reset(r.relay, RP_TEST_RELAY_ALL);
  uint8_t *buf = aligned_alloc(PAGE, PAGE);
  uint64_t t0 = rp_test_now_ms();
  int rr = rampart_pread(r.dev.engine, buf, PAGE, 5 * PAGE);
  uint64_t read_ms = rp_test_now_ms() - t0;
  bool read_right = rr == 0 && memcmp(buf, r.dev.shadow + 5 * PAGE, PAGE) == 0;
  memset(buf, 0xa5, PAGE);
  t0 = rp_test_now_ms();
  int wr = rampart_pwrite(r.dev.engine, buf, PAGE, 9 * PAGE, 0);
  uint64_t write_ms = rp_test_now_ms() - t0;
  if (wr == 0)
    memcpy(r.dev.shadow + 9 * PAGE, buf, PAGE);
  print_message("%s, every server unreachable past io-timeout=1000: read %d after %llu ms, "
                "write %d after %llu ms\n",
                policy, rr, (unsigned long long)read_ms, wr, (unsigned long long)write_ms);
  print_stats(&r);
  if (wt) {
    assert_true(read_right);
    assert_true(read_ms < 500);
    assert_int_equal(wr, 0);
    assert_true(write_ms < 500);
  } else {
    assert_int_equal(rr, -EIO);
    assert_true(read_ms >= 900 && read_ms < 3000);
    assert_int_equal(wr, 0);
    assert_true(write_ms >= 900 && write_ms < 3000);
  }
  rp_test_relay_refuse(r.relay, RP_TEST_RELAY_ALL, false);
  wait_settled(&r, 20000);
  verify_clean(&r, "after the outage");
  assert_all_up_after_outage(&r, nservers);
  free(buf);
  rig_stop(&r);
}

static void test_none_outage_past_io_timeout(void **state)
{
  (void)state;
  outage_past_io_timeout("none", 4);
}

static void test_parity_log_outage_past_io_timeout(void **state)
{
  (void)state;
  outage_past_io_timeout("parity-log", 5);
}

static void test_write_through_outage_past_io_timeout(void **state)
{
  (void)state;
  outage_past_io_timeout("write-through", 3);
}

/* ---- every server stalled at once ---------------------------------------------------------- */

/* Fails the test, with the engine's report, when the shadow device's threads do not come
 * back: a request the engine never completes would otherwise hang the test until ctest's
 * timeout, with nothing said about where it sits. */
struct stop_watch {
  struct rig *rig;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool done;
  unsigned limit_s;
};

static void *stop_watch_main(void *arg)
{
  struct stop_watch *w = arg;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += w->limit_s;
  pthread_mutex_lock(&w->lock);
  while (!w->done)
    if (pthread_cond_timedwait(&w->cond, &w->lock, &until) == ETIMEDOUT)
      break;
  bool done = w->done;
  pthread_mutex_unlock(&w->lock);
  if (!done) {
    struct rampart_stats st;
    char report[8192];
    rampart_get_stats(w->rig->dev.engine, &st);
    rampart_format_stats(&st, report, sizeof report);
    fprintf(stderr,
            "requests never completed: %u s after the servers resumed, the shadow "
            "device's threads still wait for a batch. The engine says:\n%s\n",
            w->limit_s, report);
    abort();
  }
  return NULL;
}

static struct rp_test_shadow_result shadow_stop_within(struct rig *r, unsigned limit_s)
{
  struct stop_watch w = { .rig = r,
                          .lock = PTHREAD_MUTEX_INITIALIZER,
                          .cond = PTHREAD_COND_INITIALIZER,
                          .limit_s = limit_s };
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, stop_watch_main, &w), 0);
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r->dev);
  pthread_mutex_lock(&w.lock);
  w.done = true;
  pthread_cond_signal(&w.cond);
  pthread_mutex_unlock(&w.lock);
  pthread_join(t, NULL);
  return res;
}

/* Every server stopped (SIGSTOP) for 3 s under readers and writers, four times, as the
 * starved guest's outage does it: each server's requests time out (timeout=), every
 * server reconnects at once, its handshake waits on a stopped process, and then all of
 * them resume together with hundreds of requests waiting. Nothing may fail, nothing may
 * be lost, and every request must complete. */
static void test_parity_log_every_server_stalled(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "10",         "timeout",    "1000",  NULL };
  rig_start(&r, 5, false, 4096, extra);
  for (unsigned k = 0; k < 4; k++) {
    rp_test_shadow_start(&r.dev, 3, 3, 16, 400 + k);
    rp_test_sleep_ms(200 + 150 * k);
    for (unsigned i = 0; i < 5; i++)
      assert_int_equal(rp_test_server_pause(&r.cluster.servers[i]), 0);
    rp_test_sleep_ms(3000);
    for (unsigned i = 0; i < 5; i++)
      assert_int_equal(rp_test_server_resume(&r.cluster.servers[i]), 0);
    wait_settled(&r, 20000);
    rp_test_sleep_ms(500);
    struct rp_test_shadow_result res = shadow_stop_within(&r, 60);
    char what[96];
    snprintf(what, sizeof what, "every server stopped for 3 s, round %u", k + 1);
    expect_clean(what, &res);
  }
  verify_clean(&r, "after four stalls of every server");
  assert_all_up(&r, 5);
  print_stats(&r);
  rig_stop(&r);
}

/* ---- a read that fails names the server it went to ------------------------------------ */

/* Every request completed, numbered in the order they completed: a read whose page's
 * write completed after the read was submitted overlapped it, and may return either
 * version (as on any block device); one submitted after its write completed may not. */
static atomic_uint completions;

struct async_batch {
  atomic_uint done;
  atomic_uint failed;
  struct rampart_io *ios;
  unsigned *submitted_after; /* per request: completions counted when it was submitted */
  unsigned *completed_as;    /* per request: its number among the completions */
};

static void async_done(struct rampart_io *io, int result)
{
  struct async_batch *b = io->user;
  b->completed_as[io - b->ios] = atomic_fetch_add(&completions, 1) + 1;
  if (result < 0)
    atomic_fetch_add(&b->failed, 1);
  atomic_fetch_add(&b->done, 1);
}

static void async_pages(struct rampart_engine *e, struct rampart_io *ios, uint8_t *bufs,
                        unsigned n, enum rampart_op op, struct async_batch *b)
{
  b->ios = ios;
  for (unsigned i = 0; i < n; i++) {
    b->submitted_after[i] = atomic_load(&completions);
    memset(&ios[i], 0, sizeof ios[i]);
    ios[i].op = op;
    ios[i].offset = (uint64_t)i * PAGE;
    ios[i].length = PAGE;
    ios[i].buf = bufs + (size_t)i * PAGE;
    ios[i].done = async_done;
    ios[i].user = b;
    rampart_submit(e, &ios[i]);
  }
}

static bool wait_batch(struct async_batch *b, unsigned n, unsigned limit_ms)
{
  uint64_t until = rp_test_now_ms() + limit_ms;
  while (atomic_load(&b->done) < n && rp_test_now_ms() < until)
    rp_test_sleep_ms(20);
  return atomic_load(&b->done) == n;
}

/* Pages 0..n-1 written and read back asynchronously, each by a request of its own, so a
 * test can stop and resume servers while they are out. */
struct page_traffic {
  unsigned n;
  struct rampart_io *wios, *rios;
  uint8_t *wbuf, *rbuf;
  struct async_batch wb, rb;
};

static void traffic_init(struct page_traffic *t, unsigned n, unsigned mul, unsigned add)
{
  memset(t, 0, sizeof *t);
  t->n = n;
  t->wios = calloc(n, sizeof *t->wios);
  t->rios = calloc(n, sizeof *t->rios);
  t->wbuf = aligned_alloc(PAGE, (size_t)n * PAGE);
  t->rbuf = aligned_alloc(PAGE, (size_t)n * PAGE);
  assert_true(t->wios && t->rios && t->wbuf && t->rbuf);
  struct async_batch *batches[] = { &t->wb, &t->rb };
  for (unsigned k = 0; k < 2; k++) {
    batches[k]->submitted_after = calloc(n, sizeof(unsigned));
    batches[k]->completed_as = calloc(n, sizeof(unsigned));
    assert_true(batches[k]->submitted_after && batches[k]->completed_as);
  }
  for (unsigned i = 0; i < n * PAGE; i++)
    t->wbuf[i] = (uint8_t)(i * mul + add);
}

static void traffic_write(struct rampart_engine *e, struct page_traffic *t)
{
  async_pages(e, t->wios, t->wbuf, t->n, RAMPART_OP_WRITE, &t->wb);
}

static void traffic_read(struct rampart_engine *e, struct page_traffic *t)
{
  async_pages(e, t->rios, t->rbuf, t->n, RAMPART_OP_READ, &t->rb);
}

/* Every write and read completes within 30 s each, and none fails: a blip costs
 * latency, never a request. */
static void traffic_completes_without_failures(struct page_traffic *t)
{
  bool all = wait_batch(&t->wb, t->n, 30000) && wait_batch(&t->rb, t->n, 30000);
  print_message("writes %u done (%u failed), reads %u done (%u failed)\n",
                atomic_load(&t->wb.done), atomic_load(&t->wb.failed),
                atomic_load(&t->rb.done), atomic_load(&t->rb.failed));
  assert_true(all);
  assert_int_equal(atomic_load(&t->wb.failed), 0);
  assert_int_equal(atomic_load(&t->rb.failed), 0);
}

/* Each read returned the page's new bytes, or, only if it overlapped the page's write
 * (submitted before that write completed), its old ones (`old`, page by page). A page
 * that fails says which, and when its write and read completed. */
static void traffic_reads_are_new_or_overlapped(const struct page_traffic *t,
                                                const uint8_t *old)
{
  unsigned overlapped_old = 0, bad = 0;
  for (unsigned i = 0; i < t->n; i++) {
    const uint8_t *got = t->rbuf + (size_t)i * PAGE;
    if (memcmp(got, t->wbuf + (size_t)i * PAGE, PAGE) == 0)
      continue;
    bool is_old = memcmp(got, old + (size_t)i * PAGE, PAGE) == 0;
    bool overlapped = t->wb.completed_as[i] > t->rb.submitted_after[i];
    if (is_old && overlapped) {
      overlapped_old++;
      continue;
    }
    if (bad++ < 8)
      print_message("page %u read %s: its write completed as #%u, its read was submitted "
                    "after #%u and completed as #%u\n",
                    i, is_old ? "its old bytes" : "bytes that are neither version",
                    t->wb.completed_as[i], t->rb.submitted_after[i], t->rb.completed_as[i]);
  }
  print_message("%u of %u reads overlapped their page's write and returned the old bytes; "
                "%u wrong\n",
                overlapped_old, t->n, bad);
  assert_int_equal(bad, 0);
}

/* Every page now reads as its last write, whatever the reads in flight with it got. */
static void traffic_read_back(struct rampart_engine *e, const struct page_traffic *t)
{
  uint8_t *buf = aligned_alloc(PAGE, (size_t)t->n * PAGE);
  assert_non_null(buf);
  assert_int_equal(rampart_pread(e, buf, t->n * PAGE, 0), 0);
  assert_memory_equal(buf, t->wbuf, (size_t)t->n * PAGE);
  free(buf);
}

static void traffic_free(struct page_traffic *t)
{
  free(t->wb.submitted_after);
  free(t->wb.completed_as);
  free(t->rb.submitted_after);
  free(t->rb.completed_as);
  free(t->wios);
  free(t->rios);
  free(t->wbuf);
  free(t->rbuf);
}

/* Server 0 is stopped while a batch of fresh pages is written: every group of it has a
 * member or its parity on server 0, so most seal with their parity stored and one member
 * write unanswered. Server 1 then drops out (its connection reset, reconnects refused) and
 * the other three are stopped; reading the batch back, the pages on server 1 are rebuilt
 * from their groups, pieces in flight on the stopped servers. Server 0 times out first: its
 * member writes are not queued (another server is placeable), so their groups lose their
 * parity (group_member_lost clears g->server[capacity] to SERVER_INDEX_NONE), while the
 * degraded reads' parity pieces are still out on the servers stopped later. When those time
 * out, on_piece_read looked the piece's server up in the group again and got NONE, past
 * the end of the server table: the engine freed itself and crashed. It blames the server
 * each piece was sent to (dr->piece_server). */
static void test_degraded_read_piece_failing_after_its_group_lost_parity(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "10",         "timeout",    "1000",  NULL };
  rig_start(&r, 5, true, 1024, extra);
  struct rampart_engine *e = r.dev.engine;
  struct page_traffic t;
  traffic_init(&t, 128, 7, 3);
  assert_int_equal(rp_test_server_pause(&r.cluster.servers[0]), 0);
  traffic_write(e, &t);
  rp_test_sleep_ms(300); /* members and parities on servers 1-4 answered */
  rp_test_relay_refuse(r.relay, 1, true);
  rp_test_relay_reset(r.relay, 1);
  for (unsigned i = 2; i < 5; i++)
    assert_int_equal(rp_test_server_pause(&r.cluster.servers[i]), 0);
  rp_test_sleep_ms(50);
  traffic_read(e, &t);
  rp_test_sleep_ms(3000); /* server 0 times out, then 2-4 */
  for (unsigned i = 0; i < 5; i++)
    if (i != 1)
      assert_int_equal(rp_test_server_resume(&r.cluster.servers[i]), 0);
  rp_test_relay_refuse(r.relay, 1, false);
  /* A read that raced the write of its page (the page spilled while the read was out)
   * gets a version of the page, not EIO: 3-4 of 128 did when their spill reads overtook
   * the spill writes and the re-reads ran out; such a read now waits for the write. */
  traffic_completes_without_failures(&t);
  traffic_reads_are_new_or_overlapped(&t, r.dev.shadow);
  wait_settled(&r, 20000);
  traffic_read_back(e, &t);
  assert_false(log_has("server  failed"));
  traffic_free(&t);
  print_stats(&r);
  rig_stop(&r);
}

/* Server 0 is stopped with reads of every page out, then every page is written again: each
 * old group dies (its members retired at placement), is reclaimed at once (a read does not
 * pin its group) and its id is taken again by the groups the rewrite opens. When server 0
 * times out, on_remote_read looks the failed read's server up in the group by id: it names
 * whatever the new group holds at that member index (another server, or 255 in a group
 * with fewer members), and that server was marked failed: all four healthy ones were. It
 * blames the server the read went to (op->read_server). Servers 1-4 are never stopped. */
static void test_failed_read_blames_its_server_not_a_reused_group(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          "10",         "timeout",    "1000",  NULL };
  rig_start(&r, 5, false, 1024, extra);
  struct rampart_engine *e = r.dev.engine;
  struct page_traffic t;
  traffic_init(&t, 1024, 13, 1);
  log_clear();
  assert_int_equal(rp_test_server_pause(&r.cluster.servers[0]), 0);
  traffic_read(e, &t);
  rp_test_sleep_ms(200);
  traffic_write(e, &t);
  rp_test_sleep_ms(2500); /* server 0 times out */
  assert_int_equal(rp_test_server_resume(&r.cluster.servers[0]), 0);
  traffic_completes_without_failures(&t);
  wait_settled(&r, 20000);
  unsigned wrong = 0;
  for (unsigned i = 1; i < 5; i++) {
    char line[160];
    snprintf(line, sizeof line, "server %s failed (", r.cluster.servers[i].addr);
    if (log_has(line)) {
      print_message("server %u (%s), never stopped, was marked failed\n", i,
                    r.cluster.servers[i].addr);
      wrong++;
    }
  }
  if (log_has("server  failed ("))
    print_message("a server with an empty address (index NONE) was marked failed\n");
  assert_int_equal(wrong, 0);
  assert_false(log_has("server  failed ("));
  traffic_free(&t);
  rig_stop(&r);
}

int main(void)
{
  rampart_set_log_sink(capture_log);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_stall_while_another_server_reconnects),
    cmocka_unit_test(test_resume_after_lost_is_refused),
    cmocka_unit_test(test_lost_line_counts_attempts_and_names_the_phase),
    cmocka_unit_test(test_parity_log_blips),
    cmocka_unit_test(test_mirror_blips),
    cmocka_unit_test(test_write_through_blips),
    cmocka_unit_test(test_none_blips),
    cmocka_unit_test(test_none_outage_past_io_timeout),
    cmocka_unit_test(test_parity_log_outage_past_io_timeout),
    cmocka_unit_test(test_write_through_outage_past_io_timeout),
    cmocka_unit_test(test_parity_log_every_server_stalled),
    cmocka_unit_test(test_degraded_read_piece_failing_after_its_group_lost_parity),
    cmocka_unit_test(test_failed_read_blames_its_server_not_a_reused_group),
  };
  /* RAMPART_TEST_FILTER=test_none_blips runs one test (cmocka's own glob syntax). */
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
