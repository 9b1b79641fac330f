/* Heap allocations on the steady-state I/O path (docs/engine.md, "Threads"): a pager that mallocs to
 * finish a swap-out can deadlock the host it is relieving. After warm-up, whole-page
 * writes and reads through the engine, with everything they set off (sealing, parity,
 * cleaning, moves, FREEs), must not allocate.
 *
 * Every allocation in the process is counted while the measured window is open: in a
 * plain build by interposing malloc and friends in this executable (they call glibc's
 * __libc_* functions), under AddressSanitizer through its malloc hook (ASan owns the
 * allocator there). The first few allocations in the window are printed with a
 * backtrace, so a failure says where. The servers are separate processes and are not
 * counted; the engine, its I/O thread, its reconnect attempts and the client library
 * are (and the test's TCP relay thread, which allocates nothing after its start).
 *
 * Besides requests, the two events a pager must ride out inside a memory shortage are
 * counted too: a dropped connection that is reconnected and its session resumed, and a
 * lost server whose pages are rebuilt onto the others. Each is warmed up once first, as
 * the request path is (thread stacks, the reconnect slots, the mover's buffers).
 */
#include <execinfo.h>
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
#include "rampart.h"
#include "tcp_relay.h"

#define PAGE RAMPART_PAGE_SIZE
#define PAGES 4096u /* 16 MiB device */
#define REQUESTS 100000u
#define TRACES 5

static atomic_bool counting;
static atomic_ulong allocations;
static atomic_uint traced;

/* Called for every allocation: counts it while the window is open and prints where the
 * first few came from. backtrace() was warmed up before, so it does not allocate. */
static void note_allocation(size_t size)
{
  if (!atomic_load_explicit(&counting, memory_order_relaxed))
    return;
  atomic_fetch_add(&allocations, 1);
  if (atomic_fetch_add(&traced, 1) < TRACES) {
    void *frames[24];
    int n = backtrace(frames, 24);
    char line[64];
    int len = snprintf(line, sizeof line, "allocation of %zu bytes in the window:\n", size);
    if (write(STDOUT_FILENO, line, (size_t)len) < 0) { /* best effort */
    }
    backtrace_symbols_fd(frames, n, STDOUT_FILENO);
  }
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RP_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(RP_UNDER_ASAN)
/* The sanitizer runtime calls this weak hook on every allocation when the program
 * defines it (sanitizer/allocator_interface.h; gcc's libasan does not run the hooks
 * installed with __sanitizer_install_malloc_and_free_hooks, but does call this one). */
void __sanitizer_malloc_hook(const volatile void *ptr, size_t size);
void __sanitizer_malloc_hook(const volatile void *ptr, size_t size)
{
  (void)ptr;
  note_allocation(size);
}

#else
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
void *memalign(size_t alignment, size_t size); /* glibc's malloc.h; not in stdlib.h */

void *malloc(size_t size)
{
  note_allocation(size);
  return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
  note_allocation(n * size);
  return __libc_calloc(n, size);
}

void *realloc(void *ptr, size_t size)
{
  note_allocation(size);
  return __libc_realloc(ptr, size);
}

void *aligned_alloc(size_t alignment, size_t size)
{
  note_allocation(size);
  return __libc_memalign(alignment, size);
}

void *memalign(size_t alignment, size_t size)
{
  note_allocation(size);
  return __libc_memalign(alignment, size);
}

int posix_memalign(void **out, size_t alignment, size_t size)
{
  note_allocation(size);
  void *p = __libc_memalign(alignment, size);
  if (!p)
    return 12; /* ENOMEM */
  *out = p;
  return 0;
}

#endif

static uint64_t next_random(uint64_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void fill(uint8_t *buf, uint64_t page, uint64_t round)
{
  for (size_t i = 0; i < PAGE; i += 8) {
    uint64_t v = page * 0x9e3779b97f4a7c15u ^ round ^ i;
    memcpy(buf + i, &v, 8);
  }
}

/* Writes and reads random whole pages, each read checked against what was written. */
static void run_requests(struct rampart_engine *e, uint64_t *versions, unsigned n,
                         uint64_t *seed, uint8_t *buf, uint8_t *expect)
{
  for (unsigned k = 0; k < n; k++) {
    uint64_t page = next_random(seed) % PAGES;
    if (k % 2 == 0) {
      versions[page]++;
      fill(buf, page, versions[page]);
      assert_int_equal(rampart_pwrite(e, buf, PAGE, page * PAGE, 0), 0);
    } else {
      assert_int_equal(rampart_pread(e, buf, PAGE, page * PAGE), 0);
      if (versions[page]) {
        fill(expect, page, versions[page]);
        assert_memory_equal(buf, expect, PAGE);
      }
    }
  }
}

static void steady_state_allocates_nothing(const char *policy, unsigned nservers)
{
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start(&c, nservers, "64M", NULL), 0);
  /* With a stats file, as rampart-swap runs it, and a metrics file: both written every
   * second. */
  char stats[700], metrics[700];
  snprintf(stats, sizeof stats, "%s/stats", c.dir);
  snprintf(metrics, sizeof metrics, "%s/metrics.prom", c.dir);
  const char *extra[] = { "redundancy",   policy,  "stats-file", stats,
                          "metrics-file", metrics, NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, PAGES, extra);
  uint64_t *versions = calloc(PAGES, sizeof *versions);
  uint8_t *buf = aligned_alloc(PAGE, PAGE), *expect = aligned_alloc(PAGE, PAGE);
  assert_non_null(versions);
  assert_non_null(buf);
  assert_non_null(expect);
  void *frames[4];
  backtrace(frames, 4); /* loads libgcc's unwinder now, not inside the window */

  /* Warm-up: every page written twice (groups sealed, cleaning started, every pool and
   * connection buffer at its working size), then the same mix as measured. */
  uint64_t seed = 0x5eed;
  for (uint64_t round = 0; round < 2; round++)
    for (uint64_t p = 0; p < PAGES; p++) {
      versions[p]++;
      fill(buf, p, versions[p]);
      assert_int_equal(rampart_pwrite(e, buf, PAGE, p * PAGE, 0), 0);
    }
  run_requests(e, versions, 20000, &seed, buf, expect);

  atomic_store(&allocations, 0);
  atomic_store(&traced, 0);
  atomic_store(&counting, true);
  run_requests(e, versions, REQUESTS, &seed, buf, expect);
  atomic_store(&counting, false);

  unsigned long n = atomic_load(&allocations);
  struct rampart_stats st;
  rampart_get_stats(e, &st);
  /* The report as rampartctl device shows it: the computed client memory and what the
   * kernel says the process holds. */
  char report[16384] = "";
  FILE *rf = fopen(stats, "re");
  if (rf) {
    report[fread(report, 1, sizeof report - 1, rf)] = '\0';
    fclose(rf);
  }
  const char *computed = strstr(report, "client memory"),
             *measured = strstr(report, "process ");
  double resident_mib = measured ? strtod(measured + strlen("process         resident"), NULL)
                                 : 0;
  bool stats_written = computed && measured && resident_mib > 1.0;
  if (computed && measured)
    print_message("%.*s%.*s", (int)(strchr(computed, '\n') - computed + 1), computed,
                  (int)(strchr(measured, '\n') - measured + 1), measured);
  print_message("%s: %lu heap allocations in %u requests after warm-up (%.4f per request); "
                "%llu groups cleaned meanwhile; stats file %s\n",
                policy, n, REQUESTS, (double)n / REQUESTS,
                (unsigned long long)st.groups_cleaned, stats_written ? "written" : "MISSING");
  free(versions);
  free(buf);
  free(expect);
  rampart_close(e);
  rp_test_cluster_stop(&c);
  assert_int_equal(n, 0);
  assert_true(stats_written);
}

static void window_open(void)
{
  atomic_store(&allocations, 0);
  atomic_store(&traced, 0);
  atomic_store(&counting, true);
}

static unsigned long window_close(void)
{
  atomic_store(&counting, false);
  return atomic_load(&allocations);
}

static void warm_up(struct rampart_engine *e, uint64_t *versions, uint64_t *seed,
                    uint8_t *buf, uint8_t *expect)
{
  for (uint64_t round = 0; round < 2; round++)
    for (uint64_t p = 0; p < PAGES; p++) {
      versions[p]++;
      fill(buf, p, versions[p]);
      assert_int_equal(rampart_pwrite(e, buf, PAGE, p * PAGE, 0), 0);
    }
  run_requests(e, versions, 20000, seed, buf, expect);
}

/* Requests until the engine reports `done` (or 60 s): each event below completes while
 * the device is in use, as it would under swap. */
static void run_until(struct rampart_engine *e, uint64_t *versions, uint64_t *seed,
                      uint8_t *buf, uint8_t *expect,
                      bool (*done)(const struct rampart_stats *, uint64_t), uint64_t arg)
{
  struct rampart_stats st;
  for (int i = 0; i < 600; i++) {
    run_requests(e, versions, 200, seed, buf, expect);
    rampart_get_stats(e, &st);
    if (done(&st, arg))
      return;
    usleep(100 * 1000);
  }
  fail_msg("the engine did not settle within 60 s");
}

static bool resumed(const struct rampart_stats *st, uint64_t want)
{
  return st->resumes >= want && st->servers_reconnecting == 0 && st->requests_waiting == 0;
}

static bool rebuilt(const struct rampart_stats *st, uint64_t want)
{
  return st->rebuilds_finished >= want && !st->rebuild_running &&
         st->rebuild_pages_pending == 0 && st->moves_in_flight == 0;
}

struct rig {
  struct rp_test_cluster c;
  struct rp_test_relay *relay;
  struct rampart_engine *e;
  uint64_t *versions;
  uint8_t *buf, *expect;
  uint64_t seed;
};

/* relayed: the engine reaches the servers through a TCP relay the test can reset. */
static void rig_open(struct rig *r, unsigned nservers, bool relayed, const char *const *extra)
{
  memset(r, 0, sizeof *r);
  assert_int_equal(rp_test_cluster_start(&r->c, nservers, "64M", NULL), 0);
  const char *addrs[RP_TEST_MAX_SERVERS];
  if (relayed) {
    r->relay = rp_test_relay_start(nservers, r->c.servers);
    assert_non_null(r->relay);
    for (unsigned i = 0; i < nservers; i++)
      addrs[i] = rp_test_relay_addr(r->relay, i);
  }
  r->e = rp_test_engine_open_at(&r->c, relayed ? addrs : NULL, PAGES, extra);
  r->versions = calloc(PAGES, sizeof *r->versions);
  r->buf = aligned_alloc(PAGE, PAGE);
  r->expect = aligned_alloc(PAGE, PAGE);
  assert_non_null(r->versions);
  assert_non_null(r->buf);
  assert_non_null(r->expect);
  void *frames[4];
  backtrace(frames, 4);
  r->seed = 0x5eed;
  warm_up(r->e, r->versions, &r->seed, r->buf, r->expect);
}

static void rig_close(struct rig *r)
{
  free(r->versions);
  free(r->buf);
  free(r->expect);
  rampart_close(r->e);
  if (r->relay)
    rp_test_relay_stop(r->relay);
  rp_test_cluster_stop(&r->c);
}

#define RECONNECTS 4u

/* Every connection of one server reset (as a router losing its state does), under a
 * running writer: the engine reconnects, resumes the session and replays what was
 * unanswered, each time without touching the heap. */
static void test_reconnect_allocates_nothing(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "redundancy", "parity-log", NULL };
  rig_open(&r, 5, true, extra);
  rp_test_relay_reset(r.relay, 1); /* warm-up: one reconnect */
  run_until(r.e, r.versions, &r.seed, r.buf, r.expect, resumed, 1);

  window_open();
  for (unsigned k = 0; k < RECONNECTS; k++) {
    rp_test_relay_reset(r.relay, k % 5);
    run_until(r.e, r.versions, &r.seed, r.buf, r.expect, resumed, 2 + k);
  }
  unsigned long n = window_close();
  struct rampart_stats st;
  rampart_get_stats(r.e, &st);
  print_message("reconnect: %lu heap allocations over %u reconnects (%llu sessions resumed, "
                "%llu requests replayed)\n",
                n, RECONNECTS, (unsigned long long)st.resumes,
                (unsigned long long)st.requests_replayed);
  rig_close(&r);
  assert_int_equal(n, 0);
}

/* A server killed under a running writer: the engine gives it up and rebuilds its pages
 * onto the others while requests go on; the rebuild allocates nothing. Six servers in
 * groups of 2 + 1, so the warm-up can lose one and the window another. */
static void test_rebuild_allocates_nothing(void **state)
{
  (void)state;
  struct rig r;
  const char *extra[] = { "redundancy", "parity-log", "group", "2", "lease",
                          "1",          "timeout",    "300",   NULL };
  rig_open(&r, 6, false, extra);
  rp_test_server_kill(&r.c.servers[5]);
  run_until(r.e, r.versions, &r.seed, r.buf, r.expect, rebuilt, 1);

  window_open();
  rp_test_server_kill(&r.c.servers[4]);
  run_until(r.e, r.versions, &r.seed, r.buf, r.expect, rebuilt, 2);
  unsigned long n = window_close();
  struct rampart_stats st;
  rampart_get_stats(r.e, &st);
  print_message("rebuild: %lu heap allocations while %llu pages were rebuilt in %.1f s\n", n,
                (unsigned long long)st.rebuild_pages_moved, st.rebuild_seconds);
  rig_close(&r);
  assert_int_equal(n, 0);
}

static void test_parity_log_allocates_nothing(void **state)
{
  (void)state;
  steady_state_allocates_nothing("parity-log", 5);
}

static void test_mirror_allocates_nothing(void **state)
{
  (void)state;
  steady_state_allocates_nothing("mirror", 5);
}

static void test_write_through_allocates_nothing(void **state)
{
  (void)state;
  steady_state_allocates_nothing("write-through", 4);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_parity_log_allocates_nothing),
    cmocka_unit_test(test_mirror_allocates_nothing),
    cmocka_unit_test(test_write_through_allocates_nothing),
    cmocka_unit_test(test_reconnect_allocates_nothing),
    cmocka_unit_test(test_rebuild_allocates_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
