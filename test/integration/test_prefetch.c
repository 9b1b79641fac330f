/* The prefetcher (prefetch=, src/engine/prefetch.c) over real rampartd processes: a
 * sequential stream of reads is answered from its cache and a random one makes it read
 * almost nothing ahead; the cache never holds more than prefetch= pages; writes and
 * zeroes racing the prefetches of a read stream just ahead of it never let a read return
 * bytes older than the last write that completed before it; a random read, write and
 * trim mix reads back every byte; and a server killed mid-stream costs no byte.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "engine_device.h"
#include "rampart.h"

#define PAGE RAMPART_PAGE_SIZE
#define PAGES 1024u
#define CACHE 16u
#define CACHE_TEXT "16"
#define DEPTH_TEXT "8"
#define MAX_VERSIONS 256u

static const char *const prefetch_on[] = { "redundancy", "parity-log",     "prefetch",
                                           CACHE_TEXT,   "prefetch-depth", DEPTH_TEXT,
                                           NULL };

/* Page p at version v: its number and version, then bytes of both. */
static void fill(uint8_t *buf, uint64_t p, uint64_t v)
{
  memcpy(buf, &p, 8);
  memcpy(buf + 8, &v, 8);
  for (size_t i = 16; i < PAGE; i++)
    buf[i] = (uint8_t)(p * 131 + v * 29 + i * 7 + (i >> 9));
}

static bool is_zero(const uint8_t *buf)
{
  for (size_t i = 0; i < PAGE; i++)
    if (buf[i])
      return false;
  return true;
}

/* The version buf holds of page p; -1 when it is not one this test wrote there. */
static int64_t version_of(const uint8_t *buf, uint64_t p)
{
  uint64_t page, v;
  memcpy(&page, buf, 8);
  memcpy(&v, buf + 8, 8);
  if (page != p || v >= MAX_VERSIONS)
    return -1;
  uint8_t want[PAGE];
  fill(want, p, v);
  return memcmp(want, buf, PAGE) == 0 ? (int64_t)v : -1;
}

static void write_all(struct rampart_engine *e)
{
  static uint8_t buf[8 * PAGE];
  for (uint64_t p = 0; p < PAGES; p += 8) {
    for (unsigned k = 0; k < 8; k++)
      fill(buf + k * PAGE, p + k, 0);
    assert_int_equal(rampart_pwrite(e, buf, sizeof buf, p * PAGE, 0), 0);
  }
}

static void read_expect(struct rampart_engine *e, uint64_t p, uint64_t v)
{
  uint8_t buf[PAGE];
  assert_int_equal(rampart_pread(e, buf, PAGE, p * PAGE), 0);
  if (version_of(buf, p) != (int64_t)v)
    fail_msg("page %llu read back wrong (version %lld, want %llu)", (unsigned long long)p,
             (long long)version_of(buf, p), (unsigned long long)v);
}

static void stats(struct rampart_engine *e, struct rampart_stats *st)
{
  rampart_get_stats(e, st);
  /* The bound, wherever the test looks. */
  assert_true(st->prefetch_cached_pages + st->prefetch_in_flight <= CACHE);
  assert_int_equal(st->prefetch_bytes_locked, CACHE * PAGE);
}

/* QD1 page reads, as page-ins come: sequential ones are answered from the cache, random
 * ones make the prefetcher read (almost) nothing ahead; a jump in the stream leaves
 * what it read ahead unread, counted as wasted; the cache stays within its bound. */
static void test_sequential_hits_random_does_not(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start(&c, 5, "64M", NULL), 0);
  struct rampart_engine *e = rp_test_engine_open(&c, PAGES, prefetch_on);
  write_all(e);
  struct rampart_stats st0, st;
  stats(e, &st0);
  for (uint64_t p = 0; p < 512; p++) {
    read_expect(e, p, 0);
    if (p % 16 == 0)
      stats(e, &st);
  }
  stats(e, &st);
  uint64_t hits = st.prefetch_hits - st0.prefetch_hits;
  uint64_t issued = st.prefetch_issued - st0.prefetch_issued;
  print_message("sequential, 512 page reads: %llu answered by the prefetcher (%llu joined "
                "in flight), %llu read ahead, %llu wasted\n",
                (unsigned long long)hits, (unsigned long long)st.prefetch_joins,
                (unsigned long long)issued, (unsigned long long)st.prefetch_wasted);
  assert_true(hits >= 480);
  assert_true(issued <= 512 + 8);

  /* The sequential trend outlives the stream by a few reads (it still has the majority
   * of the history's strides): counted apart, and bounded. */
  uint64_t seed = 12345;
  uint64_t before = st.prefetch_issued;
  for (unsigned k = 0; k < 576; k++) {
    if (k == 64) {
      stats(e, &st0);
      print_message("random, the first 64 page reads: %llu read ahead on the stream's "
                    "trend\n",
                    (unsigned long long)(st0.prefetch_issued - before));
      assert_true(st0.prefetch_issued - before <= 4 * 8);
    }
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    read_expect(e, (seed >> 33) % PAGES, 0);
    if (k % 16 == 0)
      stats(e, &st);
  }
  stats(e, &st);
  issued = st.prefetch_issued - st0.prefetch_issued;
  print_message("random, the next 512 page reads: %llu read ahead, %llu answered\n",
                (unsigned long long)issued,
                (unsigned long long)(st.prefetch_hits - st0.prefetch_hits));
  assert_true(issued <= 8);

  /* Runs of 12 pages, each from a fresh place: the 8 read ahead past each run's end are
   * never read, and go as wasted when later runs need the slots. */
  st0 = st;
  for (uint64_t run = 0; run < 16; run++)
    for (uint64_t k = 0; k < 12; k++) {
      read_expect(e, 600 + run * 24 + k, 0);
      stats(e, &st);
    }
  print_message("16 runs of 12 pages: %llu answered, %llu wasted\n",
                (unsigned long long)(st.prefetch_hits - st0.prefetch_hits),
                (unsigned long long)(st.prefetch_wasted - st0.prefetch_wasted));
  assert_true(st.prefetch_wasted - st0.prefetch_wasted >= 8);
  assert_int_equal(st.read_errors, 0);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

/* ---- writes racing prefetches --------------------------------------------------------- */

struct race {
  struct rampart_engine *e;
  _Atomic uint64_t reader_at; /* the page the reader reads next */
  atomic_bool stop;
  /* per page: the newest version whose write started, and completed */
  _Atomic uint32_t started[PAGES], committed[PAGES];
  atomic_bool zeroed[PAGES][MAX_VERSIONS]; /* versions that were a zero, not a write */
  _Atomic unsigned writes;
};

/* Writes, and sometimes zeroes, the pages just ahead of the reader: the pages its
 * prefetches are reading or hold. */
static void *writer_main(void *arg)
{
  struct race *r = arg;
  uint8_t buf[PAGE];
  uint64_t seed = 99;
  while (!atomic_load(&r->stop)) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t p = atomic_load(&r->reader_at) + 1 + (seed >> 33) % 8;
    if (p >= PAGES)
      continue;
    uint32_t v = atomic_load(&r->started[p]) + 1;
    if (v >= MAX_VERSIONS)
      continue;
    bool zero = (seed >> 20) % 4 == 0;
    atomic_store(&r->zeroed[p][v], zero);
    atomic_store(&r->started[p], v);
    int rc;
    if (zero) {
      rc = rampart_zero(r->e, PAGE, p * PAGE);
    } else {
      fill(buf, p, v);
      rc = rampart_pwrite(r->e, buf, PAGE, p * PAGE, 0);
    }
    if (rc != 0)
      fail_msg("a write of page %llu failed: %d", (unsigned long long)p, rc);
    atomic_store(&r->committed[p], v);
    r->writes++;
  }
  return NULL;
}

/* A read of p returns a version no older than the last write completed before it began
 * and no newer than the last one begun before it ended. */
static void check_read(struct race *r, uint64_t p, const uint8_t *buf, uint32_t lo,
                       uint32_t hi)
{
  if (is_zero(buf)) {
    for (uint32_t v = lo; v <= hi; v++)
      if (atomic_load(&r->zeroed[p][v]))
        return;
    fail_msg("page %llu read as zeros, but no zero of it in versions %u..%u",
             (unsigned long long)p, lo, hi);
  }
  int64_t v = version_of(buf, p);
  if (v < (int64_t)lo || v > (int64_t)hi || atomic_load(&r->zeroed[p][v]))
    fail_msg("page %llu read back version %lld, want %u..%u (stale or corrupt)",
             (unsigned long long)p, (long long)v, lo, hi);
}

static void test_writes_racing_prefetches_never_read_stale(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start(&c, 5, "64M", NULL), 0);
  struct race *r = calloc(1, sizeof *r);
  assert_non_null(r);
  r->e = rp_test_engine_open(&c, PAGES, prefetch_on);
  write_all(r->e);
  pthread_t writer;
  assert_int_equal(pthread_create(&writer, NULL, writer_main, r), 0);
  uint8_t buf[PAGE];
  unsigned reads = 0;
  while (atomic_load(&r->writes) == 0)
    sched_yield();
  /* Passes until the writer, on a busy machine, has had its share of the race. */
  for (unsigned pass = 0; pass < 4 || (atomic_load(&r->writes) < 500 && pass < 40); pass++)
    for (uint64_t p = 0; p < PAGES; p++) {
      atomic_store(&r->reader_at, p);
      uint32_t lo = atomic_load(&r->committed[p]);
      assert_int_equal(rampart_pread(r->e, buf, PAGE, p * PAGE), 0);
      uint32_t hi = atomic_load(&r->started[p]);
      check_read(r, p, buf, lo, hi);
      reads++;
    }
  atomic_store(&r->stop, true);
  pthread_join(writer, NULL);
  /* At rest, every page reads as its last version. */
  for (uint64_t p = 0; p < PAGES; p++) {
    uint32_t v = atomic_load(&r->committed[p]);
    assert_int_equal(rampart_pread(r->e, buf, PAGE, p * PAGE), 0);
    check_read(r, p, buf, v, v);
  }
  struct rampart_stats st;
  stats(r->e, &st);
  print_message("%u reads raced %u writes and zeroes just ahead: %llu answered by the "
                "prefetcher, %llu read ahead, %llu wasted (written first or evicted)\n",
                reads, atomic_load(&r->writes), (unsigned long long)st.prefetch_hits,
                (unsigned long long)st.prefetch_issued,
                (unsigned long long)st.prefetch_wasted);
  /* The race happened: prefetches were answered and prefetches were overtaken. */
  assert_true(st.prefetch_hits > 0);
  assert_true(st.prefetch_wasted > 0);
  assert_true(atomic_load(&r->writes) >= 500);
  rampart_close(r->e);
  free(r);
  rp_test_cluster_stop(&c);
}

/* A random mix of reads (checked against a shadow), writes and trims, in batches of
 * requests in flight at once, with the prefetcher on. */
static void test_random_mix_reads_back_every_byte(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start(&c, 5, "64M", NULL), 0);
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, PAGES, prefetch_on), PAGES, 7);
  rp_test_device_fill(&d, 0, PAGES);
  rp_test_device_workload(&d, 400, 40, 10);
  assert_int_equal(rp_test_device_verify(&d, false), 0);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  print_message("random mix: %llu read ahead, %llu answered, %llu wasted\n",
                (unsigned long long)st.prefetch_issued, (unsigned long long)st.prefetch_hits,
                (unsigned long long)st.prefetch_wasted);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* A server killed while a sequential stream reads with prefetches in flight: every page
 * still reads back (rebuilt from parity), none EIO. */
static void test_server_killed_mid_stream_reads_back(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start(&c, 5, "64M", NULL), 0);
  struct rampart_engine *e = rp_test_engine_open(&c, PAGES, prefetch_on);
  write_all(e);
  struct rampart_stats st;
  for (uint64_t p = 0; p < PAGES; p++) {
    if (p == 300) {
      stats(e, &st);
      assert_true(st.prefetch_in_flight + st.prefetch_cached_pages > 0);
      rp_test_server_kill(&c.servers[2]);
    }
    read_expect(e, p, 0);
  }
  stats(e, &st);
  print_message("server killed at page 300 of %u: %llu degraded reads, %llu answered by the "
                "prefetcher, %llu read errors\n",
                PAGES, (unsigned long long)st.pages_degraded_reads,
                (unsigned long long)st.prefetch_hits, (unsigned long long)st.read_errors);
  assert_int_equal(st.read_errors, 0);
  assert_true(st.pages_degraded_reads > 0);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_sequential_hits_random_does_not),
    cmocka_unit_test(test_writes_racing_prefetches_never_read_stale),
    cmocka_unit_test(test_random_mix_reads_back_every_byte),
    cmocka_unit_test(test_server_killed_mid_stream_reads_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
