/* What networks do to one server, with every rampartd in a network namespace of its own
 * (test/support/netns_host.h): a partition shorter than the lease, one longer than the
 * lease, delay with packet loss, and a flapping link. A verifying reader and writer run
 * through each fault; every byte read must match the shadow copy and no request may fail.
 *
 * Skips (with the reason) where this process may not make network namespaces.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "rampart.h"

#define PAGE RAMPART_PAGE_SIZE
#define PAGES 2048 /* 8 MiB: every server holds a few hundred pages */

struct run {
  struct rampart_engine *engine;
  uint8_t *shadow;
  uint64_t rng;
  uint64_t version;
  uint64_t writes, reads, failed, wrong;
  double longest_ms;
};

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static uint64_t rng(struct run *r)
{
  r->rng ^= r->rng << 13;
  r->rng ^= r->rng >> 7;
  r->rng ^= r->rng << 17;
  return r->rng;
}

/* Each write stamps page number and a fresh version into every word, so a stale copy
 * or another page's bytes can never pass for the right one. */
static void write_page(struct run *r, uint64_t page)
{
  uint64_t buf[PAGE / 8], v = ++r->version;
  for (size_t k = 0; k < PAGE / 8; k++)
    buf[k] = (page << 40) ^ (v << 12) ^ k;
  double t0 = now_ms();
  int rc = rampart_pwrite(r->engine, buf, PAGE, page * PAGE, 0);
  double took = now_ms() - t0;
  if (took > r->longest_ms)
    r->longest_ms = took;
  r->writes++;
  if (rc < 0) {
    r->failed++;
    print_message("write of page %llu failed: %s\n", (unsigned long long)page, strerror(-rc));
    return;
  }
  memcpy(r->shadow + page * PAGE, buf, PAGE);
}

static void read_page(struct run *r, uint64_t page)
{
  uint8_t buf[PAGE];
  double t0 = now_ms();
  int rc = rampart_pread(r->engine, buf, PAGE, page * PAGE);
  double took = now_ms() - t0;
  if (took > r->longest_ms)
    r->longest_ms = took;
  r->reads++;
  if (rc < 0) {
    r->failed++;
    print_message("read of page %llu failed: %s\n", (unsigned long long)page, strerror(-rc));
  } else if (memcmp(buf, r->shadow + page * PAGE, PAGE) != 0) {
    r->wrong++;
    print_message("page %llu read back wrong bytes\n", (unsigned long long)page);
  }
}

/* Random reads and writes, half each, for ms milliseconds. */
static void workload_for(struct run *r, unsigned ms)
{
  double end = now_ms() + ms;
  while (now_ms() < end) {
    uint64_t page = rng(r) % PAGES;
    if (rng(r) & 1)
      write_page(r, page);
    else
      read_page(r, page);
  }
}

static void read_everything(struct run *r)
{
  for (uint64_t p = 0; p < PAGES; p++)
    read_page(r, p);
}

static void check_nothing_failed(const struct run *r, const char *fault)
{
  print_message("%s: %llu writes, %llu reads, %llu failed, %llu wrong, longest request "
                "%.0f ms\n",
                fault, (unsigned long long)r->writes, (unsigned long long)r->reads,
                (unsigned long long)r->failed, (unsigned long long)r->wrong, r->longest_ms);
  assert_int_equal(r->wrong, 0);
  assert_int_equal(r->failed, 0);
}

static bool netns_usable(void)
{
  char why[256];
  if (rp_test_netns_supported(why, sizeof why))
    return true;
  print_message("skipped: %s\n", why);
  return false;
}

/* parity-log 4+1 over five namespaced servers, filled once; skips the test (with the
 * reason) where this process may not make namespaces. */
static void start(struct rp_test_cluster *c, struct run *r, const char *lease)
{
  if (!netns_usable())
    skip();
  assert_int_equal(rp_test_cluster_start_netns(c, 5, "64M"), 0);
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease",
                          lease,        "timeout",    "1000",  NULL };
  memset(r, 0, sizeof *r);
  r->engine = rp_test_engine_open(c, PAGES, extra);
  r->shadow = calloc(PAGES, PAGE);
  assert_non_null(r->shadow);
  r->rng = 0x9e3779b97f4a7c15ull;
  for (uint64_t p = 0; p < PAGES; p++)
    write_page(r, p);
}

/* Every page read back once more, nothing lost, nothing failed; then everything stops. */
static void finish(struct rp_test_cluster *c, struct run *r, const char *fault)
{
  read_everything(r);
  struct rampart_stats st;
  rampart_get_stats(r->engine, &st);
  assert_int_equal(st.pages_lost, 0);
  check_nothing_failed(r, fault);
  rampart_close(r->engine);
  free(r->shadow);
  rp_test_cluster_stop(c);
}

static enum rampart_server_health server_state(struct run *r, unsigned i)
{
  struct rampart_stats st;
  rampart_get_stats(r->engine, &st);
  return st.servers[i].state;
}

/* Waits up to ms for server i to reach state, doing verified I/O meanwhile. */
static bool wait_state(struct run *r, unsigned i, enum rampart_server_health want,
                       unsigned ms)
{
  double end = now_ms() + ms;
  while (now_ms() < end) {
    if (server_state(r, i) == want)
      return true;
    workload_for(r, 100);
  }
  return server_state(r, i) == want;
}

static void test_partition_shorter_than_lease(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct run r;
  start(&c, &r, "20");
  workload_for(&r, 500);
  assert_int_equal(rp_test_netns_link(&c.netns[2], false), 0);
  double down_at = now_ms();
  workload_for(&r, 3000);
  assert_int_equal(rp_test_netns_link(&c.netns[2], true), 0);
  /* No request may wait for the server that is away: reads rebuild its pages, writes go
   * to the others or, with those full, to the spill store. (A write once waited for it
   * for io-timeout=, the whole 20 s lease, so the link came back only after the lease
   * and the server was declared lost.) */
  double partitioned_ms = now_ms() - down_at;
  print_message("partitioned for %.0f ms, longest request %.0f ms\n", partitioned_ms,
                r.longest_ms);
  assert_true(partitioned_ms < 3000 + 2500);
  /* The server kept the session: it comes back as it was, never declared lost. */
  assert_true(wait_state(&r, 2, RAMPART_SERVER_UP, 20000));
  workload_for(&r, 1000);
  struct rampart_stats st;
  rampart_get_stats(r.engine, &st);
  assert_int_equal(st.rebuilds_finished, 0);
  finish(&c, &r, "partition 3 s, lease 20 s");
}

static void test_partition_longer_than_lease(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct run r;
  start(&c, &r, "2");
  workload_for(&r, 500);
  assert_int_equal(rp_test_netns_link(&c.netns[1], false), 0);
  /* Declared lost after the lease; its pages are rebuilt onto the other four. */
  assert_true(wait_state(&r, 1, RAMPART_SERVER_LOST, 30000));
  struct rampart_stats st;
  double end = now_ms() + 60000;
  do {
    workload_for(&r, 200);
    rampart_get_stats(r.engine, &st);
  } while ((st.rebuild_running || st.rebuilds_finished == 0) && now_ms() < end);
  assert_false(st.rebuild_running);
  assert_true(st.rebuilds_finished > 0);
  assert_int_equal(rp_test_netns_link(&c.netns[1], true), 0);
  workload_for(&r, 1000);
  print_message("rebuild: %llu pages in %.3f s\n", (unsigned long long)st.rebuild_pages_moved,
                st.rebuild_seconds);
  finish(&c, &r, "partition past a 2 s lease");
}

static void test_delay_and_loss_on_one_server(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct run r;
  start(&c, &r, "20");
  char how[256];
  uint64_t before = r.writes + r.reads;
  workload_for(&r, 2000);
  double clean_rate = (double)(r.writes + r.reads - before) / 2.0;
  assert_int_equal(rp_test_netns_impair(&c.netns[3], 200, 5, how, sizeof how), 0);
  print_message("impaired: %s\n", how);
  before = r.writes + r.reads;
  workload_for(&r, 8000);
  double slow_rate = (double)(r.writes + r.reads - before) / 8.0;
  assert_int_equal(rp_test_netns_unimpair(&c.netns[3]), 0);
  print_message("requests/s: %.0f clean, %.0f with server 3 impaired\n", clean_rate,
                slow_rate);
  finish(&c, &r, "200 ms delay + 5% loss on one server");
}

static void test_flapping_link(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  struct run r;
  start(&c, &r, "20");
  for (unsigned i = 0; i < 20; i++) { /* 500 ms down, 500 ms up, for 20 s */
    assert_int_equal(rp_test_netns_link(&c.netns[4], i % 2 == 1), 0);
    workload_for(&r, 500);
  }
  assert_int_equal(rp_test_netns_link(&c.netns[4], true), 0);
  assert_true(wait_state(&r, 4, RAMPART_SERVER_UP, 20000));
  finish(&c, &r, "link flapping every 500 ms for 20 s");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_partition_shorter_than_lease),
    cmocka_unit_test(test_partition_longer_than_lease),
    cmocka_unit_test(test_delay_and_loss_on_one_server),
    cmocka_unit_test(test_flapping_link),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
