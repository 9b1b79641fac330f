/* The load: one thread keeps qd requests in the engine, as rampart-ublk's queue thread
 * does (ublk/ublk_queue.c): it submits with rampart_submit_list; each completion adds
 * its request to a done list under a lock; this thread takes the whole list and
 * submits a new request for each. It waits in rampart_reap, reading the replies itself,
 * so its completions run on it; with RAMPART_BENCH_EVENTFD=1 it sleeps on an eventfd
 * instead, as the ublk queue thread does today, and the completions run on the
 * engine's I/O thread, which writes the eventfd when the list was empty. */
#include "clock.h"
#include "engine_bench.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "hop_trace.h"
#include "xorshift.h"

#define PREFILL_BYTES (256u << 10)
#define PREFILL_QD 8u
#define LATENCY_BUCKETS 100000u /* 1 µs each; the last holds the rest */

struct request {
  struct rampart_io io;
  struct bench_load *load;
  uint64_t started_ns;
  unsigned index;
};

struct bench_load {
  struct rampart_engine *engine;
  uint64_t span_pages;
  uint64_t rng;
  int event_fd;
  uint8_t *buffers; /* PREFILL_QD buffers of PREFILL_BYTES, or (tests)
                                       BENCH_MAX_QD pages in the same memory */
  struct request req[BENCH_MAX_QD];
  pthread_mutex_t done_lock;
  unsigned done[BENCH_MAX_QD];
  unsigned ndone;
  int first_error;
  uint32_t *latency;      /* LATENCY_BUCKETS counts */
  bool submit_one_by_one; /* RAMPART_BENCH_SUBMIT_EACH: rampart_submit per request */
  bool wait_on_eventfd;   /* RAMPART_BENCH_EVENTFD: not rampart_reap */
};


/* Runs on the engine's I/O thread, as ublk's on_engine_done does. */
static void on_done(struct rampart_io *io, int result)
{
  struct request *r = io->user;
  struct bench_load *l = r->load;
  pthread_mutex_lock(&l->done_lock);
  if (result < 0 && l->first_error == 0)
    l->first_error = result;
  l->done[l->ndone++] = r->index;
  /* else a wake-up is already on its way, or rampart_reap returns on its own */
  bool wake = l->ndone == 1 && l->wait_on_eventfd;
  pthread_mutex_unlock(&l->done_lock);
  if (wake) {
    uint64_t one = 1;
    while (write(l->event_fd, &one, sizeof one) < 0 && errno == EINTR)
      ;
  }
}

struct bench_load *bench_load_new(struct rampart_engine *engine, uint64_t span_pages)
{
  struct bench_load *l = calloc(1, sizeof *l);
  if (!l)
    return NULL;
  l->engine = engine;
  l->span_pages = span_pages;
  l->rng = UINT64_C(0x2545F4914F6CDD1D);
  l->event_fd = eventfd(0, EFD_CLOEXEC);
  l->latency = calloc(LATENCY_BUCKETS, sizeof *l->latency);
  _Static_assert(BENCH_MAX_QD * RAMPART_PAGE_SIZE <= PREFILL_QD * PREFILL_BYTES,
                 "the tests' pages fit in the fill's buffers");
  if (posix_memalign((void **)&l->buffers, 4096, (size_t)PREFILL_QD * PREFILL_BYTES) != 0)
    l->buffers = NULL;
  if (l->event_fd < 0 || !l->latency || !l->buffers) {
    bench_load_free(l);
    return NULL;
  }
  pthread_mutex_init(&l->done_lock, NULL);
  l->submit_one_by_one = getenv("RAMPART_BENCH_SUBMIT_EACH") != NULL;
  l->wait_on_eventfd = getenv("RAMPART_BENCH_EVENTFD") != NULL;
  /* what the writes carry: not zeros, which an engine might store as zero pages */
  for (size_t i = 0; i < (size_t)PREFILL_QD * PREFILL_BYTES; i += 8) {
    uint64_t v = rp_xorshift64s(&l->rng);
    memcpy(l->buffers + i, &v, 8);
  }
  for (unsigned i = 0; i < BENCH_MAX_QD; i++)
    l->req[i] = (struct request){ .load = l, .index = i };
  return l;
}

void bench_load_free(struct bench_load *l)
{
  if (!l)
    return;
  if (l->event_fd >= 0)
    close(l->event_fd);
  if (l->latency)
    pthread_mutex_destroy(&l->done_lock);
  free(l->latency);
  free(l->buffers);
  free(l);
}

static struct rampart_io *prepare(struct bench_load *l, unsigned i, enum rampart_op op,
                                  uint64_t offset, uint32_t length)
{
  struct request *r = &l->req[i];
  memset(&r->io, 0, sizeof r->io);
  r->io.op = op;
  r->io.offset = offset;
  r->io.length = length;
  r->io.buf = l->buffers +
              (size_t)i * (length > RAMPART_PAGE_SIZE ? PREFILL_BYTES : RAMPART_PAGE_SIZE);
  r->io.done = on_done;
  r->io.user = r;
  r->started_ns = rp_now_ns();
  return &r->io;
}

static void submit(struct bench_load *l, unsigned i, enum rampart_op op, uint64_t offset,
                   uint32_t length)
{
  rampart_submit(l->engine, prepare(l, i, op, offset, length));
}

static unsigned take_done(struct bench_load *l, unsigned *out)
{
  pthread_mutex_lock(&l->done_lock);
  unsigned n = l->ndone;
  memcpy(out, l->done, n * sizeof *out);
  l->ndone = 0;
  pthread_mutex_unlock(&l->done_lock);
  return n;
}

/* Sleeps until completions arrive; copies them out under the lock. */
static unsigned reap(struct bench_load *l, unsigned *out)
{
  if (l->wait_on_eventfd) {
    uint64_t count;
    while (read(l->event_fd, &count, sizeof count) < 0 && errno == EINTR)
      ;
    return take_done(l, out);
  }
  unsigned n;
  while ((n = take_done(l, out)) == 0)
    rampart_reap(l->engine);
  return n;
}

int bench_load_prefill(struct bench_load *l)
{
  uint64_t bytes = l->span_pages * RAMPART_PAGE_SIZE, next = 0;
  unsigned inflight = 0, done[BENCH_MAX_QD];
  for (unsigned i = 0; i < PREFILL_QD && next < bytes; i++, inflight++) {
    uint32_t len = bytes - next < PREFILL_BYTES ? (uint32_t)(bytes - next) : PREFILL_BYTES;
    submit(l, i, RAMPART_OP_WRITE, next, len);
    next += len;
  }
  while (inflight) {
    unsigned n = reap(l, done);
    inflight -= n;
    for (unsigned k = 0; k < n && next < bytes; k++, inflight++) {
      uint32_t len = bytes - next < PREFILL_BYTES ? (uint32_t)(bytes - next) : PREFILL_BYTES;
      submit(l, done[k], RAMPART_OP_WRITE, next, len);
      next += len;
    }
  }
  return l->first_error;
}

static double percentile(const uint32_t *hist, uint64_t total, double q)
{
  uint64_t want = (uint64_t)(q * (double)total), seen = 0;
  for (unsigned b = 0; b < LATENCY_BUCKETS; b++) {
    seen += hist[b];
    if (seen > want)
      return b + 0.5;
  }
  return LATENCY_BUCKETS;
}

int bench_load_run(struct bench_load *l, bool write, unsigned qd, double seconds,
                   struct bench_load_result *out)
{
  enum rampart_op op = write ? RAMPART_OP_WRITE : RAMPART_OP_READ;
  unsigned done[BENCH_MAX_QD], inflight = 0;
  uint64_t requests = 0;
  double sum_us = 0;
  memset(l->latency, 0, LATENCY_BUCKETS * sizeof *l->latency);
  l->first_error = 0;
  uint64_t t0 = rp_now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
  for (unsigned i = 0; i < qd; i++, inflight++) {
    rp_hop(RP_HOP_FRONTEND_IN);
    submit(l, i, op, (rp_xorshift64s(&l->rng) % l->span_pages) * RAMPART_PAGE_SIZE,
           RAMPART_PAGE_SIZE);
  }
  bool stopping = false;
  while (inflight) {
    unsigned n = reap(l, done);
    rp_hop(RP_HOP_FRONTEND_OUT);
    uint64_t t = rp_now_ns();
    inflight -= n;
    stopping = stopping || t >= end;
    struct rampart_io *batch = NULL, **tail = &batch;
    for (unsigned k = 0; k < n; k++) {
      double us = (double)(t - l->req[done[k]].started_ns) / 1e3;
      sum_us += us;
      l->latency[us < LATENCY_BUCKETS - 1 ? (unsigned)us : LATENCY_BUCKETS - 1]++;
      requests++;
      if (!stopping) {
        rp_hop(RP_HOP_FRONTEND_IN);
        *tail = prepare(l, done[k], op,
                        (rp_xorshift64s(&l->rng) % l->span_pages) * RAMPART_PAGE_SIZE,
                        RAMPART_PAGE_SIZE);
        tail = &(*tail)->next;
        inflight++;
      }
    }
    if (l->submit_one_by_one) {
      for (struct rampart_io *io = batch, *next; io; io = next) {
        next = io->next;
        io->next = NULL;
        rampart_submit(l->engine, io);
      }
    } else {
      rampart_submit_list(l->engine, batch);
    }
  }
  out->requests = requests;
  out->seconds = (double)(rp_now_ns() - t0) / 1e9;
  out->mean_us = requests ? sum_us / (double)requests : 0;
  out->p50_us = percentile(l->latency, requests, 0.50);
  out->p99_us = percentile(l->latency, requests, 0.99);
  return l->first_error;
}
