/* An engine device with a shadow copy (engine_device.h). */
#include "engine_device.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define PAGE RAMPART_PAGE_SIZE

void rp_test_device_init(struct rp_test_device *d, struct rampart_engine *e, uint64_t pages,
                         uint64_t seed)
{
  d->engine = e;
  d->pages = pages;
  d->seed = seed;
  d->reap = false;
  d->shadow = calloc(pages, PAGE);
  d->scratch = aligned_alloc(PAGE, (size_t)RP_TEST_BATCH * RP_TEST_MAX_RUN * PAGE);
  assert_non_null(d->shadow);
  assert_non_null(d->scratch);
}

void rp_test_device_free(struct rp_test_device *d)
{
  free(d->shadow);
  free(d->scratch);
  rampart_close(d->engine);
  d->engine = NULL;
}

void rp_test_device_stats(struct rp_test_device *d, struct rampart_stats *st)
{
  rampart_get_stats(d->engine, st);
}

uint64_t rp_test_stats_pages_stored(const struct rampart_stats *st)
{
  uint64_t stored = 0;
  for (unsigned i = 0; i < st->nservers; i++)
    stored += st->servers[i].pages_stored;
  return stored;
}

void rp_test_device_print_stats(struct rp_test_device *d)
{
  static char report[16384];
  struct rampart_stats st;
  rp_test_device_stats(d, &st);
  rampart_format_stats(&st, report, sizeof report);
  print_message("%s", report);
}

struct batch {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  unsigned pending;
  int results[RP_TEST_BATCH];
  struct rampart_io io[RP_TEST_BATCH];
};

static void batch_done(struct rampart_io *io, int result)
{
  struct batch *b = io->user;
  pthread_mutex_lock(&b->lock);
  b->results[io - b->io] = result;
  if (--b->pending == 0)
    pthread_cond_signal(&b->cond);
  pthread_mutex_unlock(&b->lock);
}

static uint64_t rng(uint64_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void report_mismatch(const struct rp_test_device *d, const uint8_t *buf,
                            uint64_t first, uint64_t n)
{
  for (uint64_t q = 0; q < n; q++) {
    const uint8_t *want = d->shadow + (first + q) * PAGE, *got = buf + q * PAGE;
    if (memcmp(want, got, PAGE) == 0)
      continue;
    size_t at = 0;
    while (want[at] == got[at])
      at++;
    uint64_t w, g;
    memcpy(&w, want, 8);
    memcpy(&g, got, 8);
    fail_msg("page %llu: wrong bytes from offset %zu (want first word %016llx, got %016llx)",
             (unsigned long long)(first + q), at, (unsigned long long)w,
             (unsigned long long)g);
  }
}

static void wait_batch(const struct rp_test_device *d, struct batch *b)
{
  pthread_mutex_lock(&b->lock);
  while (b->pending) {
    if (d->reap) {
      pthread_mutex_unlock(&b->lock); /* batch_done may run inside rampart_reap */
      rampart_reap(d->engine);
      pthread_mutex_lock(&b->lock);
    } else {
      pthread_cond_wait(&b->cond, &b->lock);
    }
  }
  pthread_mutex_unlock(&b->lock);
}

static void fill_pages(uint8_t *buf, uint64_t n, uint64_t *state)
{
  for (uint64_t p = 0; p < n; p++) {
    uint64_t *w = (uint64_t *)(void *)(buf + p * PAGE);
    uint64_t v = rng(state);
    for (size_t k = 0; k < PAGE / 8; k++)
      w[k] = v + k * 0x9e3779b97f4a7c15ull;
  }
}

void rp_test_device_fill(struct rp_test_device *d, uint64_t first, uint64_t n)
{
  uint64_t end = first + n;
  while (first < end) {
    struct batch b = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
    unsigned count = 0;
    for (; count < RP_TEST_BATCH && first < end; count++) {
      uint64_t len = end - first < RP_TEST_MAX_RUN ? end - first : RP_TEST_MAX_RUN;
      struct rampart_io *io = &b.io[count];
      *io = (struct rampart_io){ .op = RAMPART_OP_WRITE,
                                 .offset = first * PAGE,
                                 .length = (uint32_t)(len * PAGE),
                                 .buf = d->scratch + (size_t)count * RP_TEST_MAX_RUN * PAGE,
                                 .done = batch_done,
                                 .user = &b };
      fill_pages(io->buf, len, &d->seed);
      memcpy(d->shadow + first * PAGE, io->buf, len * PAGE);
      first += len;
    }
    b.pending = count;
    for (unsigned i = 0; i < count; i++)
      rampart_submit(d->engine, &b.io[i]);
    wait_batch(d, &b);
    for (unsigned i = 0; i < count; i++)
      if (b.results[i] != 0)
        fail_msg("write at page %llu failed: %d", (unsigned long long)(b.io[i].offset / PAGE),
                 b.results[i]);
    pthread_mutex_destroy(&b.lock);
    pthread_cond_destroy(&b.cond);
  }
}

static void run_batch(struct rp_test_device *d, uint64_t *state, unsigned write_pct,
                      unsigned trim_pct)
{
  struct batch b = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
  uint64_t stripe = d->pages / RP_TEST_BATCH;
  b.pending = RP_TEST_BATCH;
  for (unsigned i = 0; i < RP_TEST_BATCH; i++) {
    uint64_t len = 1 + rng(state) % RP_TEST_MAX_RUN;
    if (len > stripe)
      len = stripe;
    uint64_t first = i * stripe + rng(state) % (stripe - len + 1);
    unsigned kind = (unsigned)(rng(state) % 100);
    struct rampart_io *io = &b.io[i];
    *io = (struct rampart_io){ .offset = first * PAGE,
                               .length = (uint32_t)(len * PAGE),
                               .buf = d->scratch + (size_t)i * RP_TEST_MAX_RUN * PAGE,
                               .done = batch_done,
                               .user = &b };
    if (kind < write_pct) {
      io->op = RAMPART_OP_WRITE;
      fill_pages(io->buf, len, state);
      memcpy(d->shadow + first * PAGE, io->buf, len * PAGE);
    } else if (kind < write_pct + trim_pct) {
      io->op = RAMPART_OP_TRIM;
      memset(d->shadow + first * PAGE, 0, len * PAGE);
    } else {
      io->op = RAMPART_OP_READ;
    }
  }
  /* as one list (rampart_submit_list), in order: the writes above use rampart_submit */
  for (unsigned i = 0; i < RP_TEST_BATCH; i++)
    b.io[i].next = i + 1 < RP_TEST_BATCH ? &b.io[i + 1] : NULL;
  rampart_submit_list(d->engine, &b.io[0]);
  wait_batch(d, &b);
  for (unsigned i = 0; i < RP_TEST_BATCH; i++) {
    if (b.results[i] != 0)
      fail_msg("op %d at page %llu failed: %d", b.io[i].op,
               (unsigned long long)(b.io[i].offset / PAGE), b.results[i]);
    if (b.io[i].op == RAMPART_OP_READ &&
        memcmp(b.io[i].buf, d->shadow + b.io[i].offset, b.io[i].length) != 0)
      report_mismatch(d, b.io[i].buf, b.io[i].offset / PAGE, b.io[i].length / PAGE);
  }
  pthread_mutex_destroy(&b.lock);
  pthread_cond_destroy(&b.cond);
}

void rp_test_device_workload(struct rp_test_device *d, unsigned batches, unsigned write_pct,
                             unsigned trim_pct)
{
  uint64_t state = d->seed;
  for (unsigned i = 0; i < batches; i++)
    run_batch(d, &state, write_pct, trim_pct);
  d->seed = state;
}

uint64_t rp_test_device_verify(struct rp_test_device *d, bool allow_eio)
{
  uint64_t eio = 0;
  uint8_t *buf = d->scratch;
  for (uint64_t p = 0; p < d->pages; p += RP_TEST_MAX_RUN) {
    uint64_t n = d->pages - p < RP_TEST_MAX_RUN ? d->pages - p : RP_TEST_MAX_RUN;
    int r = rampart_pread(d->engine, buf, (uint32_t)(n * PAGE), p * PAGE);
    if (r == -EIO && allow_eio) {
      /* Page by page: the good ones must still be right. */
      for (uint64_t q = 0; q < n; q++) {
        int rq = rampart_pread(d->engine, buf, PAGE, (p + q) * PAGE);
        if (rq == -EIO) {
          eio++;
          continue;
        }
        assert_int_equal(rq, 0);
        if (memcmp(buf, d->shadow + (p + q) * PAGE, PAGE) != 0)
          fail_msg("page %llu: wrong bytes", (unsigned long long)(p + q));
      }
      continue;
    }
    if (r != 0)
      fail_msg("read of pages %llu..%llu failed: %d", (unsigned long long)p,
               (unsigned long long)(p + n - 1), r);
    if (memcmp(buf, d->shadow + p * PAGE, n * PAGE) != 0)
      report_mismatch(d, buf, p, n);
  }
  return eio;
}

void rp_test_device_wait_noticed(struct rp_test_device *d, unsigned server,
                                 unsigned timeout_s)
{
  struct rampart_stats st;
  for (unsigned i = 0; i < timeout_s * 100; i++) {
    rp_test_device_stats(d, &st);
    if (server < st.nservers && st.servers[server].state != RAMPART_SERVER_UP)
      return;
    usleep(10000);
  }
  fail_msg("the engine did not notice server %u's failure within %u s", server, timeout_s);
}

void rp_test_device_wait_rebuilt(struct rp_test_device *d, unsigned timeout_s)
{
  struct rampart_stats st;
  for (unsigned i = 0; i < timeout_s * 10; i++) {
    rp_test_device_stats(d, &st);
    /* pending reaches 0 when the last move is sent; the rebuild is over once it is answered. */
    bool settled = st.rebuild_pages_pending == 0 && !st.rebuild_running;
    for (unsigned s = 0; s < st.nservers; s++)
      settled &= st.servers[s].state != RAMPART_SERVER_RECONNECTING &&
                 (st.servers[s].state != RAMPART_SERVER_LOST ||
                  st.servers[s].pages_live == 0);
    if (settled)
      return;
    usleep(100000);
  }
  static char report[16384];
  rampart_format_stats(&st, report, sizeof report);
  fail_msg("rebuild did not finish in %u s:\n%s", timeout_s, report);
}
