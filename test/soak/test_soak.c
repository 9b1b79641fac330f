/* Soak: a verifying reader and writer against parity-log, mirror and write-through while
 * a chaos loop does one thing at a time to a random server, as an operator's bad week
 * would: kill -9 and restart, SIGSTOP/SIGCONT, a partition shorter and one longer than
 * the lease, delay with packet loss, and a restart as a server that corrupts every page
 * it returns (--test-fault flip), and a server that refuses some writes and whose replies
 * to others are lost (the fault transport, test/support/fault_transport.h). After each fault it waits for the engine to settle
 * (every server up, no rebuild running) before the next, so each fault is one fault.
 *
 * It ends with a table per policy: faults by kind, rebuilds, pages verified, bytes that
 * differed (must be 0) and requests that failed (must be 0: every policy here promises
 * to survive one fault at a time).
 *
 *   test_soak [--seconds N] [--policies parity-log,mirror,write-through] [--seed N]
 *             [--faults kill,stop,partition,long-partition,impair,flip,refuse]
 *
 * ctest runs it short (RAMPART_SOAK_SECONDS, default 40 s a policy); run it by hand with
 * --seconds 900 for a long soak. Servers live in network namespaces of their own when
 * this process may make them (else partitions and delay are not injected, and it says so).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
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
#include "fault_transport.h"
#include "rampart.h"
#include "wire.h"

#define PAGE RAMPART_PAGE_SIZE
#define PAGES 4096 /* 16 MiB */
#define WORKERS 2
#define NSERVERS 5
#define LEASE_S 6

enum fault_kind {
  F_KILL,
  F_STOP,
  F_PARTITION,
  F_LONG_PARTITION,
  F_IMPAIR,
  F_FLIP,
  F_REFUSE,
  F_KINDS
};
/* --faults takes these names. */
static const char *const fault_keys[F_KINDS] = {
  [F_KILL] = "kill",           [F_STOP] = "stop",
  [F_PARTITION] = "partition", [F_LONG_PARTITION] = "long-partition",
  [F_IMPAIR] = "impair",       [F_FLIP] = "flip",
  [F_REFUSE] = "refuse",
};
static bool fault_enabled[F_KINDS] = { true, true, true, true, true, true, true };
static const char *const fault_names[F_KINDS] = {
  [F_KILL] = "kill -9 + restart",
  [F_STOP] = "SIGSTOP 1-3 s",
  [F_PARTITION] = "partition 1-3 s",
  [F_LONG_PARTITION] = "partition > lease",
  [F_IMPAIR] = "delay + 5% loss",
  [F_FLIP] = "corrupting server",
  [F_REFUSE] = "writes refused, replies lost",
};

static unsigned soak_seconds = 40;
static uint64_t soak_seed = 1;
static const char *soak_policies = "parity-log,mirror,write-through";

struct worker {
  pthread_t thread;
  struct rampart_engine *engine;
  uint8_t *shadow; /* whole device; each worker touches only its own pages */
  unsigned index;
  uint64_t rng, version;
  uint64_t writes, reads, verified, failed, bytes_differing;
  double longest_ms;
};

static atomic_bool stop_workers;

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(unsigned ms)
{
  struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

static uint64_t rng(uint64_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static uint64_t count_differing(const uint8_t *a, const uint8_t *b)
{
  uint64_t n = 0;
  for (size_t i = 0; i < PAGE; i++)
    n += a[i] != b[i];
  return n;
}

/* Worker w owns the pages p with p % WORKERS == w, so its shadow is exact. */
static uint64_t pick_page(struct worker *w)
{
  return (rng(&w->rng) % (PAGES / WORKERS)) * WORKERS + w->index;
}

static void timed(struct worker *w, double t0)
{
  double took = now_ms() - t0;
  if (took > w->longest_ms)
    w->longest_ms = took;
}

static void worker_write(struct worker *w, uint64_t page)
{
  uint64_t buf[PAGE / 8], v = ++w->version;
  for (size_t k = 0; k < PAGE / 8; k++)
    buf[k] = (page << 40) ^ (v << 12) ^ k;
  double t0 = now_ms();
  int rc = rampart_pwrite(w->engine, buf, PAGE, page * PAGE, 0);
  timed(w, t0);
  w->writes++;
  if (rc < 0) {
    w->failed++;
    fprintf(stderr, "soak: write of page %llu failed: %s\n", (unsigned long long)page,
            strerror(-rc));
    return;
  }
  memcpy(w->shadow + page * PAGE, buf, PAGE);
}

static void worker_read(struct worker *w, uint64_t page)
{
  uint8_t buf[PAGE];
  double t0 = now_ms();
  int rc = rampart_pread(w->engine, buf, PAGE, page * PAGE);
  timed(w, t0);
  w->reads++;
  if (rc < 0) {
    w->failed++;
    fprintf(stderr, "soak: read of page %llu failed: %s\n", (unsigned long long)page,
            strerror(-rc));
    return;
  }
  w->verified++;
  uint64_t diff = count_differing(buf, w->shadow + page * PAGE);
  if (diff) {
    w->bytes_differing += diff;
    fprintf(stderr, "soak: page %llu read back %llu wrong bytes\n", (unsigned long long)page,
            (unsigned long long)diff);
  }
}

static void *worker_main(void *arg)
{
  struct worker *w = arg;
  while (!atomic_load(&stop_workers)) {
    uint64_t page = pick_page(w);
    if (rng(&w->rng) % 100 < 50)
      worker_write(w, page);
    else
      worker_read(w, page);
  }
  return NULL;
}

/* ---- chaos --------------------------------------------------------------------------- */

struct chaos {
  struct rp_test_cluster *cluster;
  struct rampart_engine *engine;
  bool netns;
  uint64_t rng;
  unsigned injected[F_KINDS];
  unsigned unsettled;
  struct rp_test_faults *faults;
  unsigned requests_hit; /* by F_REFUSE's rules */
};

static bool settled(struct rampart_engine *e)
{
  struct rampart_stats st;
  rampart_get_stats(e, &st);
  if (st.rebuild_running || st.rebuild_pages_pending)
    return false;
  for (unsigned i = 0; i < st.nservers; i++) {
    if (st.servers[i].state == RAMPART_SERVER_UP)
      continue;
    /* A restarted server rejoins as a new entry after its lost incarnation's. */
    bool replaced = false;
    for (unsigned j = i + 1; j < st.nservers; j++)
      replaced |= strcmp(st.servers[j].address, st.servers[i].address) == 0;
    if (!replaced)
      return false;
  }
  return true;
}

/* Waits up to 90 s for every server to be up and no rebuild to run, without a break
 * for 3 s: a fault outlives its cause (after a partition heals, TCP may take seconds to
 * retransmit, and a request can still time out), and the next fault must not overlap it. */
static void wait_settled(struct chaos *ch, const char *after)
{
  double end = now_ms() + 90000, calm_since = 0;
  while (now_ms() < end) {
    if (!settled(ch->engine))
      calm_since = 0;
    else if (calm_since == 0)
      calm_since = now_ms();
    else if (now_ms() - calm_since >= 3000)
      return;
    sleep_ms(100);
  }
  ch->unsettled++;
  char report[8192];
  struct rampart_stats st;
  rampart_get_stats(ch->engine, &st);
  rampart_format_stats(&st, report, sizeof report);
  fprintf(stderr, "soak: the engine did not settle within 90 s after %s:\n%s", after, report);
}

/* Waits up to ms for the newest entry for server i's address to reach state. */
static void wait_state(struct chaos *ch, unsigned i, enum rampart_server_health want,
                       unsigned ms)
{
  const char *addr = ch->cluster->servers[i].addr;
  double end = now_ms() + ms;
  struct rampart_stats st;
  do {
    rampart_get_stats(ch->engine, &st);
    for (unsigned j = st.nservers; j-- > 0;) {
      if (strcmp(st.servers[j].address, addr) != 0)
        continue;
      if (st.servers[j].state == want)
        return;
      break;
    }
    sleep_ms(50);
  } while (now_ms() < end);
}

/* Kills server i, waits for the engine to declare it lost and rebuild without it, and
 * starts it again (fresh, empty) with the given fault mode. */
static void replace_server(struct chaos *ch, unsigned i, const char *fault)
{
  rp_test_server_kill(&ch->cluster->servers[i]);
  wait_state(ch, i, RAMPART_SERVER_LOST, (LEASE_S + 10) * 1000);
  assert_int_equal(rp_test_cluster_restart(ch->cluster, i, fault), 0);
}

static void inject_one(struct chaos *ch)
{
  enum fault_kind k;
  do
    k = (enum fault_kind)(rng(&ch->rng) % F_KINDS);
  while (!fault_enabled[k] ||
         (!ch->netns && (k == F_PARTITION || k == F_LONG_PARTITION || k == F_IMPAIR)));
  unsigned i = (unsigned)(rng(&ch->rng) % ch->cluster->n);
  unsigned hold = 1000 + (unsigned)(rng(&ch->rng) % 2000);
  struct rp_test_server *s = &ch->cluster->servers[i];
  fprintf(stderr, "soak: %s on server %u (%s)\n", fault_names[k], i, s->addr);
  switch (k) {
  case F_KILL:
    replace_server(ch, i, NULL);
    break;
  case F_STOP:
    rp_test_server_pause(s);
    sleep_ms(hold);
    rp_test_server_resume(s);
    break;
  case F_PARTITION:
    rp_test_netns_link(&ch->cluster->netns[i], false);
    sleep_ms(hold);
    rp_test_netns_link(&ch->cluster->netns[i], true);
    break;
  case F_LONG_PARTITION:
    rp_test_netns_link(&ch->cluster->netns[i], false);
    wait_state(ch, i, RAMPART_SERVER_LOST, (LEASE_S + 10) * 1000);
    sleep_ms(2000);
    rp_test_netns_link(&ch->cluster->netns[i], true);
    break;
  case F_IMPAIR: {
    char how[256];
    rp_test_netns_impair(&ch->cluster->netns[i], 100, 5, how, sizeof how);
    sleep_ms(hold + 2000);
    rp_test_netns_unimpair(&ch->cluster->netns[i]);
    break;
  }
  case F_FLIP:
    /* A server that returns wrong bytes for a while: every read and every move of its
     * pages must notice. Then it is replaced by an honest one. */
    replace_server(ch, i, "flip");
    wait_settled(ch, "a corrupting server joined");
    sleep_ms(hold + 2000);
    replace_server(ch, i, NULL);
    break;
  case F_REFUSE: {
    /* A server whose host cannot map pages for a moment (writes refused), and whose
     * replies to a few writes and FREEs are lost on the way: each costs it its
     * connection, and each write must land somewhere, each FREE be answered, once. */
    unsigned r[3];
    r[0] = rp_test_faults_add(ch->faults,
                              (struct rp_test_fault_rule){ .server = (int)i,
                                                           .op = RP_OP_WRITE,
                                                           .count = 6,
                                                           .fault = RP_TEST_FAULT_FAIL,
                                                           .status = RP_ERR_INTERNAL });
    r[1] = rp_test_faults_add(
      ch->faults, (struct rp_test_fault_rule){ .server = (int)i,
                                               .op = RP_OP_WRITE,
                                               .skip = 6,
                                               .count = 4,
                                               .fault = RP_TEST_FAULT_LOSE_REPLY });
    r[2] = rp_test_faults_add(
      ch->faults,
      (struct rp_test_fault_rule){
        .server = (int)i, .op = RP_OP_FREE, .count = 2, .fault = RP_TEST_FAULT_LOSE_REPLY });
    sleep_ms(hold);
    rp_test_faults_clear(ch->faults);
    for (unsigned n = 0; n < 3; n++)
      ch->requests_hit += rp_test_faults_hits(ch->faults, r[n]);
    break;
  }
  case F_KINDS:
    break;
  }
  ch->injected[k]++;
  wait_settled(ch, fault_names[k]);
}

/* ---- one policy ---------------------------------------------------------------------- */

static void soak_policy(const char *policy)
{
  char why[256];
  struct rp_test_cluster c;
  bool netns = rp_test_netns_supported(why, sizeof why);
  if (!netns)
    fprintf(stderr,
            "soak: no network namespaces here (%s): partitions and delay are not "
            "injected\n",
            why);
  assert_int_equal(netns ? rp_test_cluster_start_netns(&c, NSERVERS, "64M")
                         : rp_test_cluster_start(&c, NSERVERS, "64M", NULL),
                   0);
  char lease[16];
  snprintf(lease, sizeof lease, "%d", LEASE_S);
  const char *extra[] = { "redundancy", policy, "lease", lease, "timeout", "1000", NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, PAGES, extra);
  uint8_t *shadow = calloc(PAGES, PAGE);
  assert_non_null(shadow);

  struct worker w[WORKERS];
  memset(w, 0, sizeof w);
  atomic_store(&stop_workers, false);
  for (unsigned i = 0; i < WORKERS; i++) {
    w[i] = (struct worker){ .engine = e,
                            .shadow = shadow,
                            .index = i,
                            .rng = soak_seed * 0x9e3779b97f4a7c15ull + i + 1 };
    for (uint64_t p = i; p < PAGES; p += WORKERS) /* every page written once first */
      worker_write(&w[i], p);
  }
  for (unsigned i = 0; i < WORKERS; i++)
    assert_int_equal(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);

  struct rampart_stats st0;
  rampart_get_stats(e, &st0);
  struct chaos ch = { .cluster = &c,
                      .engine = e,
                      .netns = netns,
                      .rng = soak_seed * 0xbf58476d1ce4e5b9ull + 7,
                      .faults = rp_test_faults_install(e) };
  double end = now_ms() + soak_seconds * 1000.0;
  sleep_ms(1000);
  while (now_ms() < end)
    inject_one(&ch);
  atomic_store(&stop_workers, true);
  for (unsigned i = 0; i < WORKERS; i++)
    pthread_join(w[i].thread, NULL);
  for (unsigned i = 0; i < WORKERS; i++) /* finally every page, once */
    for (uint64_t p = i; p < PAGES; p += WORKERS)
      worker_read(&w[i], p);

  struct rampart_stats st;
  rampart_get_stats(e, &st);
  uint64_t verified = 0, failed = 0, differing = 0, requests = 0;
  double longest = 0;
  for (unsigned i = 0; i < WORKERS; i++) {
    verified += w[i].verified;
    failed += w[i].failed;
    differing += w[i].bytes_differing;
    requests += w[i].reads + w[i].writes;
    longest = w[i].longest_ms > longest ? w[i].longest_ms : longest;
  }
  unsigned total = 0;
  printf("\n| %s, %u s | count |\n| --- | ---: |\n", policy, soak_seconds);
  for (unsigned k = 0; k < F_KINDS; k++) {
    printf("| %s | %u |\n", fault_names[k], ch.injected[k]);
    total += ch.injected[k];
  }
  printf("| faults in all | %u |\n| rebuilds finished | %u |\n| requests | %llu |\n"
         "| pages verified | %llu |\n| bytes differing | %llu |\n| failed requests (EIO) | "
         "%llu |\n| pages failing verification (rebuilt) | %llu |\n| longest request | "
         "%.0f ms |\n| did not settle | %u |\n\n",
         total, st.rebuilds_finished - st0.rebuilds_finished, (unsigned long long)requests,
         (unsigned long long)verified, (unsigned long long)differing,
         (unsigned long long)failed,
         (unsigned long long)(st.integrity_failures - st0.integrity_failures), longest,
         ch.unsettled);
  printf("(writes refused or replies lost, by the fault transport: %u requests)\n\n",
         ch.requests_hit);
  fflush(stdout);

  rp_test_faults_remove(ch.faults);
  rampart_close(e);
  free(shadow);
  rp_test_cluster_stop(&c);
  assert_int_equal(differing, 0);
  assert_int_equal(failed, 0);
  assert_int_equal(ch.unsettled, 0);
  assert_true(total > 0);
}

static void test_soak(void **state)
{
  (void)state;
  char list[256];
  snprintf(list, sizeof list, "%s", soak_policies);
  for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save))
    soak_policy(p);
}

static void usage_exit(const char *argv0);

static void enable_faults(const char *list, const char *argv0)
{
  char copy[256];
  snprintf(copy, sizeof copy, "%s", list);
  memset(fault_enabled, 0, sizeof fault_enabled);
  for (char *save = NULL, *p = strtok_r(copy, ",", &save); p;
       p = strtok_r(NULL, ",", &save)) {
    unsigned k = 0;
    while (k < F_KINDS && strcmp(p, fault_keys[k]) != 0)
      k++;
    if (k == F_KINDS) {
      fprintf(stderr, "test_soak: unknown fault '%s'\n", p);
      usage_exit(argv0);
    }
    fault_enabled[k] = true;
  }
}

static void usage_exit(const char *argv0)
{
  fprintf(stderr,
          "usage: %s [--seconds N] [--policies LIST] [--seed N] [--faults LIST]\n"
          "  faults: kill, stop, partition, long-partition, impair, flip, refuse\n",
          argv0);
  exit(2);
}

int main(int argc, char **argv)
{
  const char *env = getenv("RAMPART_SOAK_SECONDS");
  if (env && *env)
    soak_seconds = (unsigned)strtoul(env, NULL, 10);
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc)
      usage_exit(argv[0]);
    if (strcmp(argv[i], "--seconds") == 0)
      soak_seconds = (unsigned)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--policies") == 0)
      soak_policies = argv[++i];
    else if (strcmp(argv[i], "--seed") == 0)
      soak_seed = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--faults") == 0)
      enable_faults(argv[++i], argv[0]);
    else
      usage_exit(argv[0]);
  }
  if (soak_seconds == 0 || soak_seed == 0)
    usage_exit(argv[0]);
  /* Run by hand from the build tree, the server is beside this binary's directory. */
  static char rampartd[4096], faults[4096];
  if (!getenv("RAMPARTD") && snprintf(rampartd, sizeof rampartd, "%s", argv[0]) > 0) {
    char *slash = strrchr(rampartd, '/');
    if (slash) {
      snprintf(slash, sizeof rampartd - (size_t)(slash - rampartd), "/../server/rampartd");
      setenv("RAMPARTD", rampartd, 1);
    }
  }
  if (!getenv("RAMPARTD_FAULTS") && snprintf(faults, sizeof faults, "%s", argv[0]) > 0) {
    char *slash = strrchr(faults, '/');
    if (slash) {
      snprintf(slash, sizeof faults - (size_t)(slash - faults), "/../server/rampartd-faults");
      setenv("RAMPARTD_FAULTS", faults, 1);
    }
  }
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = { cmocka_unit_test(test_soak) };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
