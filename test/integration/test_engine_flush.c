/* Flush through the engine (docs/flush.md): under write-through a flush makes every
 * completed write durable in the spill store with an fdatasync, sent through io_uring so
 * the engine's loop never waits on the disk, and flushes that arrive while one runs are
 * covered by the next (group commit). Other policies answer a flush at once.
 *
 * Each writer thread writes its own pages and flushes after every write, as a
 * filesystem with barriers does; every flush must succeed and every page read back. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "rampart.h"

#define PAGE RAMPART_PAGE_SIZE
#define THREADS 4u
#define ROUNDS 250u
#define PAGES_PER_THREAD 64u

struct writer {
  struct rampart_engine *e;
  unsigned index;
  unsigned flushes_failed, writes_failed;
  uint32_t version[PAGES_PER_THREAD];
};

static void fill(uint8_t *buf, uint64_t page, uint32_t version)
{
  for (size_t i = 0; i < PAGE; i += 8) {
    uint64_t v = page * 0x9e3779b97f4a7c15u ^ version ^ i;
    memcpy(buf + i, &v, 8);
  }
}

static void *writer_main(void *arg)
{
  struct writer *w = arg;
  uint8_t buf[PAGE];
  for (unsigned r = 0; r < ROUNDS; r++) {
    unsigned k = (r * 7u) % PAGES_PER_THREAD;
    uint64_t page = (uint64_t)w->index * PAGES_PER_THREAD + k;
    fill(buf, page, ++w->version[k]);
    w->writes_failed += rampart_pwrite(w->e, buf, PAGE, page * PAGE, 0) != 0;
    w->flushes_failed += rampart_flush(w->e) != 0;
  }
  return NULL;
}

static double seconds_since(const struct timespec *t0)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void flush_under_writers(const char *policy, unsigned nservers)
{
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start(&c, nservers, "64M", NULL), 0);
  const char *extra[] = { "redundancy", policy, "tmpdir", c.dir, NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, THREADS * PAGES_PER_THREAD, extra);
  struct writer w[THREADS];
  pthread_t t[THREADS];
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (unsigned i = 0; i < THREADS; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].e = e;
    w[i].index = i;
    assert_int_equal(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
  }
  unsigned flushes_failed = 0, writes_failed = 0;
  for (unsigned i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    flushes_failed += w[i].flushes_failed;
    writes_failed += w[i].writes_failed;
  }
  double s = seconds_since(&t0);
  unsigned differ = 0;
  uint8_t got[PAGE], want[PAGE];
  for (unsigned i = 0; i < THREADS; i++)
    for (unsigned k = 0; k < PAGES_PER_THREAD; k++) {
      uint64_t page = (uint64_t)i * PAGES_PER_THREAD + k;
      assert_int_equal(rampart_pread(e, got, PAGE, page * PAGE), 0);
      if (w[i].version[k]) {
        fill(want, page, w[i].version[k]);
        differ += memcmp(got, want, PAGE) != 0;
      }
    }
  print_message("%s: %u write+flush pairs from %u threads in %.2f s (%.0f flushes/s); "
                "%u writes and %u flushes failed, %u pages differ\n",
                policy, THREADS * ROUNDS, THREADS, s, THREADS * ROUNDS / s, writes_failed,
                flushes_failed, differ);
  rampart_close(e);
  rp_test_cluster_stop(&c);
  assert_int_equal(writes_failed, 0);
  assert_int_equal(flushes_failed, 0);
  assert_int_equal(differ, 0);
}

static void test_write_through_flushes(void **state)
{
  (void)state;
  flush_under_writers("write-through", 4);
}

static void test_parity_log_flushes(void **state)
{
  (void)state;
  flush_under_writers("parity-log", 5);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_write_through_flushes),
    cmocka_unit_test(test_parity_log_flushes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
