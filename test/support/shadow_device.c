/* Readers and writers over an engine device with a shadow copy (shadow_device.h). */
#include "shadow_device.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#define PAGE RAMPART_PAGE_SIZE
#define MAX_DEPTH 32u
#define MAX_RUN 4u /* pages per request, within one stripe */

static uint64_t now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t rng(uint64_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

void rp_test_shadow_init(struct rp_test_shadow *d, struct rampart_engine *e, uint64_t pages)
{
  memset(d, 0, sizeof *d);
  d->engine = e;
  d->pages = pages;
  d->shadow = calloc(pages, PAGE);
  d->unknown = calloc(pages, 1);
  d->nstripes = (unsigned)(pages / RP_TEST_STRIPE_PAGES);
  d->stripe_locks = calloc(d->nstripes, sizeof *d->stripe_locks);
  if (!d->shadow || !d->unknown || !d->stripe_locks)
    abort();
  for (unsigned i = 0; i < d->nstripes; i++)
    pthread_mutex_init(&d->stripe_locks[i], NULL);
  pthread_mutex_init(&d->result_lock, NULL);
}

void rp_test_shadow_destroy(struct rp_test_shadow *d)
{
  rampart_close(d->engine);
  for (unsigned i = 0; i < d->nstripes; i++)
    pthread_mutex_destroy(&d->stripe_locks[i]);
  pthread_mutex_destroy(&d->result_lock);
  free(d->stripe_locks);
  free(d->shadow);
  free(d->unknown);
}

static void fill_page(uint8_t *page, uint64_t value)
{
  uint64_t *w = (uint64_t *)(void *)page;
  for (size_t k = 0; k < PAGE / 8; k++)
    w[k] = value + k * 0x9e3779b97f4a7c15ull;
}

/* Remembers the first failure of a run, for the test's message. */
static void note_failure(struct rp_test_shadow *d, const char *what, uint64_t page,
                         int result)
{
  if (!d->result.first_failure[0])
    snprintf(d->result.first_failure, sizeof d->result.first_failure, "%s at page %llu (%d)",
             what, (unsigned long long)page, result);
}

void rp_test_shadow_fill(struct rp_test_shadow *d, uint64_t seed)
{
  uint8_t *buf = aligned_alloc(PAGE, (size_t)RP_TEST_STRIPE_PAGES * PAGE);
  uint64_t state = seed | 1;
  for (uint64_t p = 0; p < d->pages; p += RP_TEST_STRIPE_PAGES) {
    for (unsigned q = 0; q < RP_TEST_STRIPE_PAGES; q++)
      fill_page(buf + (size_t)q * PAGE, rng(&state));
    if (rampart_pwrite(d->engine, buf, RP_TEST_STRIPE_PAGES * PAGE, p * PAGE, 0) == 0)
      memcpy(d->shadow + p * PAGE, buf, (size_t)RP_TEST_STRIPE_PAGES * PAGE);
    else
      memset(d->unknown + p, 1, RP_TEST_STRIPE_PAGES);
  }
  free(buf);
}

/* ---- worker threads ---------------------------------------------------------------- */

struct worker;

struct slot {
  struct rampart_io io;
  struct worker *w;
  uint64_t started_us;
  int result;
};

struct worker {
  struct rp_test_shadow *d;
  bool writer;
  unsigned depth;
  uint64_t state;
  uint8_t *bufs;
  struct slot slots[MAX_DEPTH];
  pthread_mutex_t lock;
  pthread_cond_t cond;
  unsigned pending;
  uint64_t max_latency_us;
};

static void slot_done(struct rampart_io *io, int result)
{
  struct slot *s = io->user;
  struct worker *w = s->w;
  uint64_t took = now_us() - s->started_us;
  pthread_mutex_lock(&w->lock);
  s->result = result;
  if (took > w->max_latency_us)
    w->max_latency_us = took;
  if (--w->pending == 0)
    pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->lock);
}

static int cmp_unsigned(const void *a, const void *b)
{
  unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
  return x < y ? -1 : x > y;
}

static void run_batch(struct worker *w)
{
  struct rp_test_shadow *d = w->d;
  unsigned stripes[MAX_DEPTH], n = 0;
  while (n < w->depth) {
    unsigned s = (unsigned)(rng(&w->state) % d->nstripes);
    bool dup = false;
    for (unsigned k = 0; k < n; k++)
      dup |= stripes[k] == s;
    if (!dup)
      stripes[n++] = s;
  }
  qsort(stripes, n, sizeof stripes[0], cmp_unsigned);
  for (unsigned k = 0; k < n; k++)
    pthread_mutex_lock(&d->stripe_locks[stripes[k]]);
  w->pending = n;
  for (unsigned k = 0; k < n; k++) {
    struct slot *s = &w->slots[k];
    uint64_t len = 1 + rng(&w->state) % MAX_RUN;
    uint64_t first = (uint64_t)stripes[k] * RP_TEST_STRIPE_PAGES +
                     rng(&w->state) % (RP_TEST_STRIPE_PAGES - len + 1);
    uint8_t *buf = w->bufs + (size_t)k * MAX_RUN * PAGE;
    s->w = w;
    s->result = 0;
    s->io = (struct rampart_io){ .op = w->writer ? RAMPART_OP_WRITE : RAMPART_OP_READ,
                                 .offset = first * PAGE,
                                 .length = (uint32_t)(len * PAGE),
                                 .buf = buf,
                                 .done = slot_done,
                                 .user = s };
    if (w->writer)
      for (uint64_t q = 0; q < len; q++)
        fill_page(buf + q * PAGE, rng(&w->state));
  }
  for (unsigned k = 0; k < n; k++) {
    w->slots[k].started_us = now_us();
    rampart_submit(d->engine, &w->slots[k].io);
  }
  pthread_mutex_lock(&w->lock);
  while (w->pending)
    pthread_cond_wait(&w->cond, &w->lock);
  pthread_mutex_unlock(&w->lock);

  pthread_mutex_lock(&d->result_lock);
  for (unsigned k = 0; k < n; k++) {
    struct slot *s = &w->slots[k];
    uint64_t first = s->io.offset / PAGE, len = s->io.length / PAGE;
    if (w->writer) {
      d->result.writes++;
      if (s->result == 0) {
        memcpy(d->shadow + first * PAGE, s->io.buf, len * PAGE);
        memset(d->unknown + first, 0, len);
      } else {
        d->result.write_failures++;
        memset(d->unknown + first, 1, len);
        note_failure(d, "write failed", first, s->result);
      }
      continue;
    }
    d->result.reads++;
    if (s->result != 0) {
      d->result.read_failures++;
      note_failure(d, "read failed", first, s->result);
      continue;
    }
    for (uint64_t q = 0; q < len; q++) {
      if (d->unknown[first + q] ||
          memcmp((uint8_t *)s->io.buf + q * PAGE, d->shadow + (first + q) * PAGE, PAGE) == 0)
        continue;
      d->result.mismatches++;
      note_failure(d, "wrong bytes read", first + q, 0);
    }
  }
  if (w->max_latency_us > d->result.max_latency_us)
    d->result.max_latency_us = w->max_latency_us;
  pthread_mutex_unlock(&d->result_lock);
  for (unsigned k = n; k-- > 0;)
    pthread_mutex_unlock(&d->stripe_locks[stripes[k]]);
}

static void *worker_main(void *arg)
{
  struct worker *w = arg;
  while (!atomic_load(&w->d->stop))
    run_batch(w);
  free(w->bufs);
  pthread_mutex_destroy(&w->lock);
  pthread_cond_destroy(&w->cond);
  free(w);
  return NULL;
}

void rp_test_shadow_start(struct rp_test_shadow *d, unsigned readers, unsigned writers,
                          unsigned depth, uint64_t seed)
{
  atomic_store(&d->stop, false);
  if (depth > MAX_DEPTH)
    depth = MAX_DEPTH;
  if (depth > d->nstripes / 2)
    depth = d->nstripes / 2;
  for (unsigned i = 0; i < readers + writers && d->nthreads < 16; i++) {
    struct worker *w = calloc(1, sizeof *w);
    if (!w)
      abort();
    w->d = d;
    w->writer = i >= readers;
    w->depth = depth;
    w->state = (seed + i * 0x9e3779b97f4a7c15ull) | 1;
    w->bufs = aligned_alloc(PAGE, (size_t)MAX_DEPTH * MAX_RUN * PAGE);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    if (!w->bufs || pthread_create(&d->threads[d->nthreads], NULL, worker_main, w) != 0)
      abort();
    d->nthreads++;
  }
}

struct rp_test_shadow_result rp_test_shadow_stop(struct rp_test_shadow *d)
{
  atomic_store(&d->stop, true);
  for (unsigned i = 0; i < d->nthreads; i++)
    pthread_join(d->threads[i], NULL);
  d->nthreads = 0;
  struct rp_test_shadow_result r = d->result;
  memset(&d->result, 0, sizeof d->result);
  return r;
}

uint64_t rp_test_shadow_verify(struct rp_test_shadow *d, struct rp_test_shadow_result *res)
{
  uint8_t *buf = aligned_alloc(PAGE, (size_t)RP_TEST_STRIPE_PAGES * PAGE);
  uint64_t failed = 0;
  memset(res, 0, sizeof *res);
  for (uint64_t p = 0; p < d->pages; p++) {
    uint64_t t0 = now_us();
    int r = rampart_pread(d->engine, buf, PAGE, p * PAGE);
    uint64_t took = now_us() - t0;
    if (took > res->max_latency_us)
      res->max_latency_us = took;
    res->reads++;
    if (r != 0) {
      failed++;
      res->read_failures++;
      if (!res->first_failure[0])
        snprintf(res->first_failure, sizeof res->first_failure, "page %llu: read failed: %d",
                 (unsigned long long)p, r);
      continue;
    }
    if (!d->unknown[p] && memcmp(buf, d->shadow + p * PAGE, PAGE) != 0) {
      res->mismatches++;
      if (!res->first_failure[0])
        snprintf(res->first_failure, sizeof res->first_failure, "page %llu: wrong bytes",
                 (unsigned long long)p);
    }
  }
  free(buf);
  return failed;
}

void rp_test_shadow_describe(const struct rp_test_shadow_result *r, char *out, size_t outlen)
{
  snprintf(out, outlen,
           "%llu reads (%llu failed), %llu writes (%llu failed), %llu wrong, "
           "longest %.1f ms%s%s",
           (unsigned long long)r->reads, (unsigned long long)r->read_failures,
           (unsigned long long)r->writes, (unsigned long long)r->write_failures,
           (unsigned long long)r->mismatches, (double)r->max_latency_us / 1000.0,
           r->first_failure[0] ? "; first: " : "", r->first_failure);
}

void rp_test_shadow_expect_clean(const char *what, const struct rp_test_shadow_result *r)
{
  char line[512];
  rp_test_shadow_describe(r, line, sizeof line);
  print_message("%s: %s\n", what, line);
  assert_int_equal(r->read_failures, 0);
  assert_int_equal(r->write_failures, 0);
  assert_int_equal(r->mismatches, 0);
}
