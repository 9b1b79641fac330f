/* Test helper: faults on chosen page requests (see fault_transport.h).
 *
 * Requests it refuses, leaves unanswered or sends late are held in a table and ended
 * by a 1 ms timer on the engine's loop, never inside the send: a reply never comes back
 * inside a send either. Requests it lets through but changes the reply of (lost,
 * corrupt) carry a small wrapper of their own, so a reply that comes after the filter
 * is gone still finds what to restore.
 */
#include "fault_transport.h"

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "server_transport.h"
#include "wire.h"

#define MAX_RULES \
  256 /* every rule a test adds stays, cleared or not: its hits stay readable */
#define MAX_HELD 1024

struct held_request {
  struct rp_request *req; /* NULL: free entry */
  unsigned server;
  enum rp_test_fault fault;
  uint16_t status;
  uint64_t due_ns;
  uint64_t seq; /* send order: held requests end in it, as a connection's would */
};

struct rule_state {
  struct rp_test_fault_rule rule;
  unsigned seen; /* matching requests so far */
  bool cleared;  /* rp_test_faults_clear */
  atomic_uint hits;
};

struct rp_test_faults {
  struct rampart_engine *engine;
  pthread_mutex_t lock; /* the rules: the test's thread adds, the engine reads */
  struct rule_state rules[MAX_RULES];
  unsigned nrules;
  struct held_request held[MAX_HELD]; /* the engine's only (held by it) */
  unsigned nheld;
  uint64_t next_seq;
  struct held_order {
    unsigned index;
    uint64_t seq;
  } order[MAX_HELD]; /* end_due's */
  ev_timer timer;
};

/* A request let through whose reply is changed on its way back. */
struct reply_change {
  enum rp_test_fault fault;
  rp_request_done_fn done;
  void *user;
};

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The rule acting on this request, or NULL to pass it. */
static const struct rule_state *match(struct rp_test_faults *f, unsigned server,
                                      const struct rp_request *req)
{
  const struct rule_state *hit = NULL;
  pthread_mutex_lock(&f->lock);
  for (unsigned i = 0; i < f->nrules && !hit; i++) {
    struct rule_state *r = &f->rules[i];
    if (r->cleared || (r->rule.server >= 0 && (unsigned)r->rule.server != server) ||
        (r->rule.op && r->rule.op != req->op))
      continue;
    unsigned n = r->seen++;
    if (n < r->rule.skip || (r->rule.count && n - r->rule.skip >= r->rule.count))
      continue;
    atomic_fetch_add(&r->hits, 1);
    hit = r;
  }
  pthread_mutex_unlock(&f->lock);
  return hit;
}

static void reply_changed(struct rp_request *req)
{
  struct reply_change *c = req->user;
  req->done = c->done;
  req->user = c->user;
  if (c->fault == RP_TEST_FAULT_LOSE_REPLY && req->status != RP_ERR_DISCONNECTED) {
    req->status = RP_ERR_TIMEOUT;
    snprintf(req->error_message, sizeof req->error_message,
             "no reply in time (fault_transport lost the reply on purpose)");
  } else if (c->fault == RP_TEST_FAULT_CORRUPT && req->op == RP_OP_READ &&
             req->status == RP_OK && req->page) {
    /* A READ's reply only: a WRITE's page is the engine's own buffer, which no server
     * can touch. */
    req->page[123] ^= 0x20;
  }
  free(c);
  req->done(req);
}

static void end_held(struct rp_test_faults *f, struct held_request *h)
{
  struct rp_request *req = h->req;
  h->req = NULL;
  f->nheld--;
  if (h->fault == RP_TEST_FAULT_DELAY) {
    server_transport_pass(f->engine, h->server, req);
    return;
  }
  req->status = h->fault == RP_TEST_FAULT_TIMEOUT ? RP_ERR_TIMEOUT : h->status;
  snprintf(req->error_message, sizeof req->error_message, "%s (fault_transport, on purpose)",
           h->fault == RP_TEST_FAULT_TIMEOUT ? "no reply in time" : "refused");
  req->done(req);
}

/* Ends the held requests due by `due` (UINT64_MAX: all), in the order they were sent:
 * a server answers one connection's requests in order, and a delayed WRITE must not
 * reach it after a READ sent behind it. An ended request's owner may send again at
 * once (another placement): entries made meanwhile are ended on a later pass. */
static void end_due(struct rp_test_faults *f, uint64_t due)
{
  struct held_order *order = f->order;
  unsigned n = 0;
  for (unsigned i = 0; i < MAX_HELD && n < f->nheld; i++)
    if (f->held[i].req && f->held[i].due_ns <= due) {
      unsigned k = n++;
      for (; k > 0 && order[k - 1].seq > f->held[i].seq; k--)
        order[k] = order[k - 1];
      order[k].index = i;
      order[k].seq = f->held[i].seq;
    }
  for (unsigned k = 0; k < n; k++) {
    struct held_request *h = &f->held[order[k].index];
    if (h->req && h->seq == order[k].seq)
      end_held(f, h);
  }
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
  (void)loop;
  (void)revents;
  struct rp_test_faults *f = w->data;
  end_due(f, now_ns());
  server_transport_flush(f->engine);
}

static bool hold(struct rp_test_faults *f, unsigned server, struct rp_request *req,
                 const struct rp_test_fault_rule *rule)
{
  for (unsigned i = 0; i < MAX_HELD; i++) {
    struct held_request *h = &f->held[i];
    if (h->req)
      continue;
    *h = (struct held_request){ .req = req,
                                .server = server,
                                .fault = rule->fault,
                                .status = rule->status,
                                .due_ns = now_ns() + (uint64_t)rule->hold_ms * 1000000u,
                                .seq = f->next_seq++ };
    f->nheld++;
    return true;
  }
  return false;
}

static void filter_send(void *ctx, struct rampart_engine *e, unsigned server,
                        struct rp_request *req)
{
  struct rp_test_faults *f = ctx;
  const struct rule_state *r = match(f, server, req);
  if (!r) {
    server_transport_pass(e, server, req);
    return;
  }
  switch (r->rule.fault) {
  case RP_TEST_FAULT_FAIL:
  case RP_TEST_FAULT_TIMEOUT:
  case RP_TEST_FAULT_DELAY:
    if (hold(f, server, req, &r->rule))
      return;
    fprintf(stderr, "fault_transport: more than %u requests held\n", MAX_HELD);
    abort();
  case RP_TEST_FAULT_LOSE_REPLY:
  case RP_TEST_FAULT_CORRUPT: {
    struct reply_change *c = malloc(sizeof *c);
    if (!c)
      abort();
    *c =
      (struct reply_change){ .fault = r->rule.fault, .done = req->done, .user = req->user };
    req->done = reply_changed;
    req->user = c;
    server_transport_pass(e, server, req);
    return;
  }
  }
}

static void filter_attach(void *ctx, struct rampart_engine *e, struct ev_loop *loop)
{
  (void)e;
  struct rp_test_faults *f = ctx;
  ev_timer_init(&f->timer, on_timer, 0.001, 0.001);
  f->timer.data = f;
  ev_timer_start(loop, &f->timer);
}

static void filter_detach(void *ctx, struct rampart_engine *e, struct ev_loop *loop)
{
  (void)e;
  struct rp_test_faults *f = ctx;
  ev_timer_stop(loop, &f->timer);
  end_due(f, UINT64_MAX);
}

static const struct server_transport_filter fault_filter = {
  .name = "fault_transport",
  .send = filter_send,
  .attach = filter_attach,
  .detach = filter_detach,
};

struct rp_test_faults *rp_test_faults_install(struct rampart_engine *e)
{
  struct rp_test_faults *f = calloc(1, sizeof *f);
  if (!f)
    abort();
  f->engine = e;
  pthread_mutex_init(&f->lock, NULL);
  server_transport_set_filter(e, &fault_filter, f);
  return f;
}

unsigned rp_test_faults_add(struct rp_test_faults *f, struct rp_test_fault_rule rule)
{
  pthread_mutex_lock(&f->lock);
  if (f->nrules == MAX_RULES) {
    fprintf(stderr, "fault_transport: more than %u rules\n", MAX_RULES);
    abort();
  }
  unsigned n = f->nrules++;
  f->rules[n].rule = rule;
  f->rules[n].seen = 0;
  f->rules[n].cleared = false;
  atomic_store(&f->rules[n].hits, 0);
  pthread_mutex_unlock(&f->lock);
  return n;
}

unsigned rp_test_faults_hits(struct rp_test_faults *f, unsigned n)
{
  return n < MAX_RULES ? atomic_load(&f->rules[n].hits) : 0;
}

void rp_test_faults_clear(struct rp_test_faults *f)
{
  pthread_mutex_lock(&f->lock);
  for (unsigned i = 0; i < f->nrules; i++)
    f->rules[i].cleared = true;
  pthread_mutex_unlock(&f->lock);
}

void rp_test_faults_remove(struct rp_test_faults *f)
{
  server_transport_set_filter(f->engine, NULL, NULL);
  pthread_mutex_destroy(&f->lock);
  free(f);
}
