/* Each server's health: a dropped connection is not a lost server (docs/engine.md,
 * "Server health").
 *
 *        connection or a request fails              resumed its session
 *   UP ------------------------------> RECONNECTING --------------------> UP
 *                                           |
 *                                           | lease= ran out, or it came back
 *                                           v without its session
 *                                          LOST --- joins again, fresh ---> a new
 *                                                                       incarnation, UP
 *
 * (ADVISED is UP under memory pressure; rampart_types.h holds the one enum of a server's
 * health, rampart_server_health.) Every server has its own health, backoff and deadlines,
 * all kept and driven on the engine's loop. An attempt (connect, handshake, RESERVE for
 * a fresh session) blocks, so it runs in one of the engine's few reconnect helper
 * threads, shared by every server and asleep until needed: the loop queues an attempt
 * holding a copy of everything it needs, a free helper takes the oldest, reads nothing
 * else of the engine and hands its result back on a lock-free stack with ev_async. With
 * RECONNECT_HELPERS of them, a server slow to come back delays another's attempt only
 * when that many are slow at once, and then by one attempt (at most timeout=). At most
 * one attempt per server is queued or runs at a time, and none allocates (connections
 * come from the engine's pool).
 *
 * While a server reconnects, requests that must reach its session (member and parity
 * writes, and FREEs in flight when it dropped: server_frees.c sends none meanwhile) wait
 * in its replay queue: those in flight when the connection dropped and those sent since. They are resent on the resumed session; if the server is
 * declared LOST, or io-timeout= passes first, they fail back to their owners, which
 * then do what their policy does without the server.
 *
 * A resume that completes after the server was declared LOST is never adopted: its
 * pages are being rebuilt elsewhere, so the session is ended (GOODBYE frees it on the
 * server) and the server joins again with a fresh, empty session, as a new incarnation.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_core.h"
#include "fifo.h"
#include "log.h"
#include "page_mover.h"
#include "page_op.h"
#include "page_write.h"
#include "server_health.h"
#include "server_set.h"
#include "server_transport.h"
#include "thread_start.h"

#define BACKOFF_FIRST_MS 50u
#define BACKOFF_MAX_MS 500u
/* Threads shared by every server for reconnect attempts, one started with each server up
 * to this many: min(servers, 8). Each costs its stack, locked whole under mlockall, so
 * not one per server on a large cluster; but an outage of every server of a small one
 * must not queue attempts behind a helper whose attempt waits out timeout=. */
#define RECONNECT_HELPERS 8u
/* A failed attempt is logged when its cause changes, else at most once per this, with
 * how many failed since: a server down for the whole lease must neither fill the log
 * nor vanish from it. A lost server keeps trying to join again for as long as it stays
 * away, hours perhaps: once a minute is enough to show that. */
#define FAILURE_LOG_EVERY_NS 1000000000ull
#define FAILURE_LOG_LOST_EVERY_NS 60000000000ull

/* What every server's health shares; the engine holds it, only this file sees into it. */
struct server_health_shared {
  _Atomic(struct reconnect_attempt *) attempts_done; /* pushed by helper threads */
  ev_async attempt_wake;
  /* page ops waiting for a reconnecting server, started over when any server's state
   * changes (linked through op->next) */
  struct page_op *wait_head, *wait_tail;
  uint32_t waiting;
  bool waking, wake_again;
  uint64_t resumes, requests_replayed;
  uint64_t log_ns; /* last "requests waiting" log line */
  /* The reconnect helpers and the attempts queued for them (oldest first). */
  pthread_mutex_t helpers_lock;
  pthread_cond_t helpers_wake;
  struct reconnect_attempt *queue_head, *queue_tail; /* under helpers_lock */
  bool helpers_quit;                                 /* under helpers_lock */
  unsigned helpers;                                  /* started */
  pthread_t helper[RECONNECT_HELPERS];
};

static void helpers_stop(struct server_health_shared *sh);

int server_health_alloc(struct rampart_engine *e)
{
  e->health = calloc(1, sizeof *e->health);
  if (!e->health)
    return -1;
  pthread_mutex_init(&e->health->helpers_lock, NULL);
  pthread_cond_init(&e->health->helpers_wake, NULL);
  return 0;
}

void server_health_release(struct rampart_engine *e)
{
  if (!e->health)
    return;
  helpers_stop(e->health);
  pthread_cond_destroy(&e->health->helpers_wake);
  pthread_mutex_destroy(&e->health->helpers_lock);
  free(e->health);
  e->health = NULL;
}

bool server_health_any_waiting(const struct rampart_engine *e)
{
  return e->health->wait_head != NULL;
}

/* A server's reconnect attempt, made with the server and reused by each of its attempts:
 * a helper's only input and output. */
struct reconnect_attempt {
  struct reconnect_attempt *next_queued; /* under helpers_lock: waiting for a helper */
  struct reconnect_attempt *next;        /* on the engine's attempts_done stack */
  unsigned server;                       /* incarnation it is for (read by the loop only) */
  /* copied by the loop before the thread starts */
  char host[256], port[16];
  struct sockaddr_storage addr; /* addr_len 0: resolve host (first connection) */
  socklen_t addr_len;
  struct rp_conn_pool *pool; /* the engine's, which outlives every attempt */
  const struct rp_key *key;  /* the engine's, which outlives every attempt */
  uint8_t token[RP_TOKEN_LEN];
  bool token_is_stale;    /* the server is LOST: end that session, do not use it */
  bool end_only;          /* the server was removed: end its session, that is all */
  struct rp_conn *stale;  /* a resumed, stale session to end first, or NULL */
  uint64_t reserve_pages; /* to reserve on a fresh session */
  uint32_t timeout_ms;
  /* What the helper is doing, for the line that declares the server lost while the
   * attempt runs: set by the helper, read by the loop. 0 and NULL until a helper takes
   * the attempt. */
  _Atomic uint64_t running_since_ns;
  _Atomic(const char *) step;
  struct ev_loop *loop;
  ev_async *wake;
  _Atomic(struct reconnect_attempt *) *done;
  /* the result: a connection (resumed, or fresh and reserved), or an error */
  struct rp_conn *conn;
  struct rp_session_info info;
  uint64_t reserved;
  struct rp_error err;
};

/* ---- the helper thread --------------------------------------------------------------- */

static struct rp_conn *attempt_open(struct reconnect_attempt *a, const uint8_t *token)
{
  struct rp_conn_options o = {
    .host = a->host,
    .port = a->port,
    .key = a->key,
    .client_name = "rampart-engine",
    .resume_token = token,
    .connect_timeout_ms = a->timeout_ms,
    .request_timeout_ms = a->timeout_ms,
    .pool = a->pool,
    .addr = a->addr_len ? (const struct sockaddr *)&a->addr : NULL,
    .addr_len = a->addr_len,
  };
  return rp_conn_open(&o, &a->info, &a->err);
}

/* GOODBYE frees the session and its pages on the server now rather than after its
 * lease. Best effort: a failure leaves them to the lease. */
static void end_session(struct rp_conn *conn)
{
  struct rp_error ignored;
  rp_goodbye_sync(conn, &ignored);
  rp_conn_close(conn);
}

static void attempt_step(struct reconnect_attempt *a, const char *step)
{
  atomic_store(&a->step, step);
}

static void attempt_run(struct reconnect_attempt *a)
{
  atomic_store(&a->running_since_ns, engine_now_ns());
  if (a->stale) {
    attempt_step(a, "ending a stale session with GOODBYE");
    end_session(a->stale);
    a->stale = NULL;
  }
  attempt_step(a, "connecting and the handshake");
  if (a->end_only) {
    /* Resume the session to say GOODBYE on it, so the server frees our pages now (a
     * fresh session, if ours is gone already, is ended the same way). */
    struct rp_conn *conn = attempt_open(a, a->token);
    if (conn)
      end_session(conn);
    a->conn = NULL;
    goto done;
  }
  a->conn = attempt_open(a, a->token);
  if (a->conn && a->info.resumed && a->token_is_stale) {
    attempt_step(a, "ending the resumed stale session, then a fresh handshake");
    end_session(a->conn);
    a->conn = attempt_open(a, NULL);
  }
  if (a->conn && !a->info.resumed) {
    attempt_step(a, "RESERVE on a fresh session");
    uint64_t want = a->reserve_pages;
    if (want > a->info.free_pages)
      want = a->info.free_pages;
    if (want > UINT32_MAX)
      want = UINT32_MAX;
    uint64_t server_free;
    if (rp_reserve_sync(a->conn, want, &a->reserved, &server_free, &a->err) < 0) {
      rp_conn_close(a->conn);
      a->conn = NULL;
    }
  }
done:;
  /* Once pushed, the attempt belongs to the loop: read what the push needs first. */
  struct ev_loop *loop = a->loop;
  ev_async *wake = a->wake;
  _Atomic(struct reconnect_attempt *) *done = a->done;
  struct reconnect_attempt *head = atomic_load(done);
  do
    a->next = head;
  while (!atomic_compare_exchange_weak(done, &head, a));
  ev_async_send(loop, wake);
}

/* A reconnect helper: it sleeps until the loop queues an attempt, runs the oldest, and
 * goes back for the next. Helpers are made with the servers rather than per attempt,
 * as creating a thread is itself an allocation (the sanitizers' thread records, a stack
 * when glibc's cache has none), and a reconnect must not allocate. */
static void *helper_main(void *arg)
{
  struct server_health_shared *sh = arg;
  pthread_mutex_lock(&sh->helpers_lock);
  for (;;) {
    while (!sh->queue_head && !sh->helpers_quit)
      pthread_cond_wait(&sh->helpers_wake, &sh->helpers_lock);
    if (sh->helpers_quit)
      break;
    struct reconnect_attempt *a;
    FIFO_POP(sh->queue_head, sh->queue_tail, a, next_queued);
    pthread_mutex_unlock(&sh->helpers_lock);
    attempt_run(a);
    pthread_mutex_lock(&sh->helpers_lock);
  }
  pthread_mutex_unlock(&sh->helpers_lock);
  return NULL;
}

/* Stops every helper once the attempt it runs, if any, has finished (the attempt pushes
 * its result first); attempts still queued are left in the queue, not run. */
static void helpers_stop(struct server_health_shared *sh)
{
  pthread_mutex_lock(&sh->helpers_lock);
  sh->helpers_quit = true;
  pthread_cond_broadcast(&sh->helpers_wake);
  pthread_mutex_unlock(&sh->helpers_lock);
  for (unsigned i = 0; i < sh->helpers; i++)
    pthread_join(sh->helper[i], NULL);
  sh->helpers = 0;
}

/* The attempt's result has been taken: its struct waits for the server's next attempt. */
static void attempt_release(struct reconnect_attempt *a)
{
  OPENSSL_cleanse(a->token, sizeof a->token);
  a->conn = NULL;
  a->stale = NULL;
}


/* Attempts run in threads with a small stack: under mlockall(MCL_FUTURE) every byte of
 * a thread's stack is locked when the thread starts, and glibc's default is 8 MiB. */
#define ATTEMPT_STACK_BYTES (256u * 1024u)

/* ---- on the loop: starting attempts ----------------------------------------------------- */

static void schedule_retry(struct rampart_engine *e, struct server *s);

/* Starts an attempt for s in a helper thread; `stale` (may be NULL) is a connection to a
 * session the thread must end first. */
static void start_attempt(struct rampart_engine *e, struct server *s, struct rp_conn *stale)
{
  struct server_health *h = &s->health;
  bool retiring = s->state == RAMPART_SERVER_REMOVED;
  if (e->set.closing || h->attempting || (h->replaced && !retiring) ||
      (s->state != RAMPART_SERVER_RECONNECTING && s->state != RAMPART_SERVER_LOST &&
       !retiring)) {
    if (stale)
      rp_conn_close(stale);
    return;
  }
  struct reconnect_attempt *a = h->attempt; /* free: at most one attempt at a time */
  a->server = s->index;
  snprintf(a->host, sizeof a->host, "%s", s->host);
  snprintf(a->port, sizeof a->port, "%s", s->port);
  a->addr = s->addr;
  a->addr_len = s->addr_len;
  a->pool = s->pool;
  a->key = e->key;
  memcpy(a->token, s->token, RP_TOKEN_LEN);
  a->token_is_stale = s->state == RAMPART_SERVER_LOST;
  a->end_only = s->state == RAMPART_SERVER_REMOVED;
  a->stale = stale;
  a->conn = NULL;
  a->reserve_pages = server_reservation_wanted(e);
  a->timeout_ms = e->config.timeout_ms;
  atomic_store(&a->running_since_ns, 0);
  atomic_store(&a->step, NULL);
  a->loop = e->loop;
  a->wake = &e->health->attempt_wake;
  a->done = &e->health->attempts_done;
  struct server_health_shared *sh = e->health;
  pthread_mutex_lock(&sh->helpers_lock);
  FIFO_APPEND(sh->queue_head, sh->queue_tail, a, next_queued);
  pthread_cond_signal(&sh->helpers_wake);
  pthread_mutex_unlock(&sh->helpers_lock);
  h->attempting = true;
  h->attempt_queued_ns = engine_now_ns();
  h->attempts++;
}

static void on_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
  struct server *s = w->data;
  struct rampart_engine *e = ev_userdata(loop);
  start_attempt(e, s, NULL);
}

static void schedule_retry(struct rampart_engine *e, struct server *s)
{
  struct server_health *h = &s->health;
  if (e->set.closing || h->replaced || ev_is_active(&h->retry) ||
      (s->remove_when_drained && s->state == RAMPART_SERVER_LOST))
    return;
  h->backoff_ms = h->backoff_ms ? h->backoff_ms * 2 : BACKOFF_FIRST_MS;
  if (h->backoff_ms > BACKOFF_MAX_MS)
    h->backoff_ms = BACKOFF_MAX_MS;
  ev_timer_set(&h->retry, h->backoff_ms / 1000.0, 0.0);
  ev_timer_start(e->loop, &h->retry);
  e->loop_changes++; /* a frontend that failed the request wakes the loop for it */
}

/* ---- page operations waiting for a server ---------------------------------------------------- */

static void park_append(struct rampart_engine *e, struct page_op *op)
{
  FIFO_APPEND(e->health->wait_head, e->health->wait_tail, op, next);
  e->health->waiting++;
}

bool server_health_any_reconnecting(const struct rampart_engine *e)
{
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (e->set.servers[i]->state == RAMPART_SERVER_RECONNECTING)
      return true;
  return false;
}

bool server_health_park(struct rampart_engine *e, struct page_op *op)
{
  uint64_t now = engine_now_ns();
  if (e->set.closing || e->draining)
    return false;
  if (!op->wait_since_ns)
    op->wait_since_ns = now;
  if (now - op->wait_since_ns >= engine_io_timeout_ns(e))
    return false;
  page_op_begin_wait(op, PAGE_OP_WAITS_FOR_SERVER);
  park_append(e, op);
  return true;
}

bool server_health_partial_outage_past_blip(const struct rampart_engine *e)
{
  bool away = false, up = false;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    const struct server *s = e->set.servers[i];
    if (s->state == RAMPART_SERVER_UP || s->state == RAMPART_SERVER_ADVISED)
      up = true;
    if (s->state != RAMPART_SERVER_RECONNECTING)
      continue;
    if (!s->health.past_blip) /* set by the tick, which then wakes what waits */
      return false;
    away = true;
  }
  return away && up;
}

/* A server came back, was lost or joined: every waiting op starts over from the page
 * map and either goes on or waits again (keeping its first wait's time). */
static void wake_parked(struct rampart_engine *e)
{
  if (e->health->waking) {
    e->health->wake_again = true; /* an op's restart changed a server's state */
    return;
  }
  e->health->waking = true;
  do {
    e->health->wake_again = false;
    struct page_op *list;
    FIFO_TAKE_ALL(e->health->wait_head, e->health->wait_tail, list);
    e->health->waiting = 0;
    while (list) {
      struct page_op *op = list;
      list = op->next;
      op->next = NULL;
      page_op_resume(op);
    }
  } while (e->health->wake_again);
  e->health->waking = false;
}

/* Ops that have waited io-timeout= start over once more, and now go on without. */
static void wake_expired(struct rampart_engine *e, uint64_t now)
{
  struct page_op *list, *expired = NULL, *expired_tail = NULL, *op;
  FIFO_TAKE_ALL(e->health->wait_head, e->health->wait_tail, list);
  e->health->waiting = 0;
  bool draining = e->draining;
  while (list) {
    op = list;
    list = op->next;
    if (draining || now - op->wait_since_ns >= engine_io_timeout_ns(e))
      FIFO_APPEND(expired, expired_tail, op, next);
    else
      park_append(e, op);
  }
  while (expired) {
    FIFO_POP(expired, expired_tail, op, next);
    page_op_resume(op);
  }
}

/* ---- state changes ------------------------------------------------------------------------ */

static uint64_t ms_since(uint64_t then_ns)
{
  uint64_t now = engine_now_ns();
  return now > then_ns ? (now - then_ns) / 1000000u : 0;
}

static void replay_append(struct server_health *h, struct rp_request *req)
{
  FIFO_APPEND(h->replay_head, h->replay_tail, req, caller_next);
  h->replay_count++;
  h->replay_writes += req->op == RP_OP_WRITE;
}

/* Completes each request of a list linked through caller_next with status and why;
 * how many. */
static unsigned complete_all(struct rp_request *q, uint16_t status, const char *why)
{
  unsigned n = 0;
  while (q) {
    struct rp_request *next = q->caller_next;
    q->caller_next = NULL;
    q->status = status;
    snprintf(q->error_message, sizeof q->error_message, "%s", why);
    q->done(q);
    q = next;
    n++;
  }
  return n;
}

/* Completes every request waiting in s's replay queue with status: their owners see the
 * server unreachable and go on without it (server_health_queue refuses them now). */
static void give_up_queue(struct rampart_engine *e, struct server *s, uint16_t status,
                          const char *why)
{
  struct rp_request *q;
  FIFO_TAKE_ALL(s->health.replay_head, s->health.replay_tail, q);
  s->health.replay_count = s->health.replay_writes = 0;
  complete_all(q, status, why);
}

/* The server has been out longer than a blip and other servers can take pages: the
 * writes waiting for it go elsewhere now rather than stall their callers until
 * io-timeout= (their groups lose their parity and are rewritten, as for a lost member).
 * FREEs stay queued: nobody waits on them. */
static void give_up_writes(struct rampart_engine *e, struct server *s)
{
  struct server_health *h = &s->health;
  h->writes_given_up = true; /* before any callback: none may queue again */
  struct rp_request *q, *writes = NULL, *writes_tail = NULL;
  FIFO_TAKE_ALL(h->replay_head, h->replay_tail, q);
  h->replay_count = h->replay_writes = 0;
  while (q) {
    struct rp_request *next = q->caller_next;
    if (q->op == RP_OP_WRITE)
      FIFO_APPEND(writes, writes_tail, q, caller_next);
    else
      replay_append(h, q);
    q = next;
  }
  char why[160];
  snprintf(why, sizeof why, "server %s has been out for over timeout=%u ms", s->address,
           e->config.timeout_ms);
  unsigned n = complete_all(writes, RP_ERR_TIMEOUT, why);
  if (n)
    rp_log(RP_LOG_WARN, "%s: %u writes waiting for it go to other servers", why, n);
}

static void declare_lost(struct rampart_engine *e, struct server *s, const char *why)
{
  s->state = RAMPART_SERVER_LOST;
  s->health.failure_logged_ns = 0; /* the first attempt to join again is logged */
  s->health.failures_unlogged = 0;
  s->rebuild_needed = true;
  page_mover_rebuild_begin(e);
  rp_log(RP_LOG_ERROR, "server %s is lost (%s): rebuilding its %llu live pages elsewhere",
         s->address, why, (unsigned long long)page_mover_at_risk(e, s->index));
  char msg[160];
  snprintf(msg, sizeof msg, "server %s is lost", s->address);
  give_up_queue(e, s, RP_ERR_DISCONNECTED, msg);
  /* Keep trying, now to join again as a new, empty server (not one being removed). */
  if (!s->health.attempting && !s->remove_when_drained)
    schedule_retry(e, s);
  wake_parked(e); /* reads rebuild or fail now; writes go elsewhere */
}

void server_health_failed(struct rampart_engine *e, struct server *s, const char *why,
                          bool silent)
{
  if (e->set.closing || (s->state != RAMPART_SERVER_UP && s->state != RAMPART_SERVER_ADVISED))
    return;
  struct server_health *h = &s->health;
  uint64_t now = engine_now_ns();
  s->state = RAMPART_SERVER_RECONNECTING;
  h->since_ns = now;
  h->lost_at_ns = now + (uint64_t)e->config.lease_seconds * 1000000000u;
  h->replay_until_ns = now + engine_io_timeout_ns(e);
  h->attempts = 0;
  h->backoff_ms = 0;
  h->silent = silent;
  h->writes_given_up = false;
  h->past_blip = false;
  h->last_failure[0] = '\0';
  h->failure_logged_ns = 0;
  h->failures_unlogged = 0;
  const char *meanwhile = e->redundancy->while_server_away;
  rp_log(RP_LOG_WARN,
         "server %s failed (%s): reconnecting for up to %u s (lease=%u); meanwhile "
         "%s (io-timeout=%llu ms), and writes go to the other servers",
         s->address, why, e->config.lease_seconds, e->config.lease_seconds, meanwhile,
         (unsigned long long)(engine_io_timeout_ns(e) / 1000000u));
  /* Give the connection up now: every request still on it fails back to its owner,
   * which queues it here (state is RECONNECTING already) or starts over elsewhere. */
  if (s->conn) {
    struct rp_conn *conn = s->conn;
    s->conn = NULL;
    rp_conn_set_callbacks(conn, NULL, NULL, NULL);
    rp_conn_close(conn);
  }
  page_write_close_open_group(e);
  start_attempt(e, s, NULL);
}

unsigned server_health_after_restart(struct rampart_engine *e, struct server *s)
{
  if (s->state == RAMPART_SERVER_REMOVED)
    return 0;
  if (s->state == RAMPART_SERVER_LOST || s->health.replaced) {
    s->state = RAMPART_SERVER_LOST;
    if (!s->health.replaced && !s->remove_when_drained)
      schedule_retry(e, s);
    return 0;
  }
  s->state = RAMPART_SERVER_UP; /* as it was: its connection is what the restart lost */
  server_health_failed(e, s, "the pager restarted", false);
  return 1;
}

void server_health_stop_rejoining(struct rampart_engine *e, struct server *s)
{
  ev_timer_stop(e->loop, &s->health.retry);
}

bool server_health_queue(struct rampart_engine *e, struct server *s, struct rp_request *req)
{
  if (e->set.closing || s->state != RAMPART_SERVER_RECONNECTING ||
      engine_now_ns() >= s->health.replay_until_ns)
    return false;
  struct server_health *h = &s->health;
  /* A blip (connections reset, the server there) is over in tens of milliseconds, and
   * replaying is cheaper than re-placing: the group keeps its parity. A stall or a
   * partition is not: a write that waited timeout= already goes elsewhere if it can. */
  if (req->op == RP_OP_WRITE && (h->silent || h->writes_given_up) &&
      server_set_placeable(e) > 0)
    return false;
  replay_append(h, req);
  return true;
}

/* The server is back with its session: every page is where it was. */
static void resume(struct rampart_engine *e, struct server *s, struct reconnect_attempt *a)
{
  struct server_health *h = &s->health;
  uint64_t out_ms = ms_since(h->since_ns);
  server_adopt(e, s, a->conn, &a->info);
  struct rp_request *q;
  uint32_t resent = h->replay_count;
  FIFO_TAKE_ALL(h->replay_head, h->replay_tail, q);
  h->replay_count = h->replay_writes = 0;
  h->backoff_ms = 0;
  h->last_failure[0] = '\0';
  h->failure_logged_ns = 0;
  h->failures_unlogged = 0;
  /* In the order they were first sent. A submit may fail at once if the new connection
   * is already gone, and then queue the request again on a fresh list. */
  while (q) {
    struct rp_request *next = q->caller_next;
    q->caller_next = NULL;
    server_transport_send(e, s->index, q);
    q = next;
  }
  e->health->resumes++;
  e->health->requests_replayed += resent;
  rp_log(RP_LOG_INFO,
         "server %s is back with its session after %llu ms: no page was lost; "
         "%u requests sent again",
         s->address, (unsigned long long)out_ms, resent);
  if (s->conn)
    rp_conn_flush(s->conn);
  wake_parked(e);
}

/* The server answered with a fresh, empty session: it joins as a new incarnation, so the
 * old one's slots (being rebuilt from) can never be confused with the new one's. */
static void join_as_new(struct rampart_engine *e, struct server *s,
                        struct reconnect_attempt *a)
{
  s->health.replaced = true;
  ev_timer_stop(e->loop, &s->health.retry);
  struct server *fresh = server_new(e, s->address, s);
  if (!fresh || slot_allocator_init(&fresh->slots, (uint32_t)a->reserved) < 0) {
    rp_log(RP_LOG_ERROR,
           "server %s came back but the engine has no room for it: restart "
           "the device to use it again",
           s->address);
    if (fresh)
      server_forget_newest(e);
    rp_conn_close(a->conn);
    return;
  }
  fresh->reserved_pages = a->reserved;
  /* A server being drained stays drained when it comes back empty. */
  fresh->leaving = s->leaving;
  fresh->leaving_since_ns = s->leaving_since_ns;
  server_adopt(e, fresh, a->conn, &a->info);
  rp_log(RP_LOG_INFO, "server %s rejoined empty, as a new server, with %llu pages reserved",
         fresh->address, (unsigned long long)fresh->reserved_pages);
  wake_parked(e); /* writes waiting for room may go there */
}

/* Two failures have the same cause when their messages differ only in numbers (how long
 * an attempt waited, how many bytes its socket held). */
static bool same_cause(const char *a, const char *b)
{
  for (;;) {
    while (*a >= '0' && *a <= '9')
      a++;
    while (*b >= '0' && *b <= '9')
      b++;
    if (*a != *b)
      return false;
    if (!*a)
      return true;
    a++;
    b++;
  }
}

/* Logs a failed attempt when its cause changed or FAILURE_LOG_EVERY_NS (lost:
 * FAILURE_LOG_LOST_EVERY_NS) has passed since the last such line, with how many failed
 * in between; counts it otherwise. The server's own words come through
 * (client_conn.c). */
static void attempt_failed(struct rampart_engine *e, struct server *s, const char *why)
{
  struct server_health *h = &s->health;
  uint64_t now = engine_now_ns();
  bool changed = !same_cause(h->last_failure, why);
  snprintf(h->last_failure, sizeof h->last_failure, "%s", why);
  uint64_t every = s->state == RAMPART_SERVER_RECONNECTING ? FAILURE_LOG_EVERY_NS
                                                           : FAILURE_LOG_LOST_EVERY_NS;
  if (!changed && h->failure_logged_ns && now - h->failure_logged_ns < every) {
    h->failures_unlogged++;
    schedule_retry(e, s);
    return;
  }
  char since[80] = "";
  if (h->failures_unlogged)
    snprintf(since, sizeof since, " (and %u more since the last such line)",
             h->failures_unlogged);
  h->failures_unlogged = 0;
  h->failure_logged_ns = now;
  if (s->state == RAMPART_SERVER_RECONNECTING)
    rp_log(RP_LOG_WARN,
           "server %s: reconnect attempt %u failed%s, %llu ms after the connection "
           "did: %s; retrying",
           s->address, h->attempts, since, (unsigned long long)ms_since(h->since_ns), why);
  else
    rp_log(RP_LOG_INFO,
           "server %s (lost): cannot join again yet (attempt %u%s): %s; retrying", s->address,
           h->attempts, since, why);
  schedule_retry(e, s);
}

/* What s's reconnect attempts came to, for the line that declares it lost: how many, and
 * the one running now (what it does and for how long: one past timeout= is stuck
 * outside the handshake's own deadline) or the last one's failure. */
static void describe_attempts(const struct server *s, char *out, size_t len)
{
  const struct server_health *h = &s->health;
  int n = snprintf(out, len, "%u reconnect attempts", h->attempts);
  if (n < 0 || (size_t)n >= len)
    return;
  if (h->attempting) {
    uint64_t running = atomic_load(&h->attempt->running_since_ns);
    const char *step = atomic_load(&h->attempt->step);
    int m = running
              ? snprintf(out + n, len - n, "; the last still running after %llu ms, %s",
                         (unsigned long long)ms_since(running), step ? step : "starting")
              : snprintf(out + n, len - n,
                         "; the last queued for %llu ms, no reconnect helper free",
                         (unsigned long long)ms_since(h->attempt_queued_ns));
    if (m < 0 || (size_t)m >= len - n)
      return;
    n += m;
    if (h->last_failure[0])
      snprintf(out + n, len - n, "; the one before failed: %s", h->last_failure);
  } else if (h->last_failure[0]) {
    snprintf(out + n, len - n, "; the last failed: %s", h->last_failure);
  }
}

static void attempt_finished(struct rampart_engine *e, struct reconnect_attempt *a)
{
  struct server *s = e->set.servers[a->server];
  s->health.attempting = false;
  struct rp_conn *stale = NULL;
  if (s->state == RAMPART_SERVER_REMOVED) {
    /* Removed while this attempt ran: whatever session it reached is ended. */
    bool again = a->conn != NULL && !a->end_only;
    stale = again ? a->conn : NULL;
    attempt_release(a);
    if (again)
      start_attempt(e, s, stale);
    return;
  }
  if (!a->conn) {
    attempt_failed(e, s, a->err.message);
  } else if (a->info.resumed && s->state == RAMPART_SERVER_RECONNECTING) {
    resume(e, s, a);
  } else if (a->info.resumed) {
    /* LOST while the attempt ran: its pages are already being rebuilt elsewhere, and
     * taking the old session back would revive stale ones. End it and join afresh. */
    rp_log(RP_LOG_WARN,
           "server %s came back with its session %llu ms after it was declared "
           "lost: ending that session and joining again empty",
           s->address, (unsigned long long)ms_since(s->health.lost_at_ns));
    stale = a->conn;
  } else {
    if (s->state == RAMPART_SERVER_RECONNECTING)
      declare_lost(e, s, "it came back without its session: restarted, or its lease ran out");
    if (s->remove_when_drained) {
      /* Being removed: it does not join again. Its fresh session is closed unused (the
       * server frees it after its lease). */
      stale = a->conn;
      s->health.replaced = true;
    } else {
      join_as_new(e, s, a);
    }
  }
  attempt_release(a);
  if (stale) /* after the release: the next attempt reuses the same struct */
    start_attempt(e, s, stale);
}

static void on_attempt_done(struct ev_loop *loop, ev_async *w, int revents)
{
  struct rampart_engine *e = w->data;
  struct reconnect_attempt *list = atomic_exchange(&e->health->attempts_done, NULL);
  while (list) {
    struct reconnect_attempt *next = list->next;
    attempt_finished(e, list);
    list = next;
  }
}

/* ---- every tick ---------------------------------------------------------------------------- */

static uint64_t oldest_wait_ns(const struct rampart_engine *e)
{
  uint64_t oldest = 0;
  for (const struct page_op *op = e->health->wait_head; op; op = op->next)
    if (!oldest || op->wait_since_ns < oldest)
      oldest = op->wait_since_ns;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    const struct server *s = e->set.servers[i];
    if (s->health.replay_writes && (!oldest || s->health.since_ns < oldest))
      oldest = s->health.since_ns;
  }
  return oldest;
}

static uint32_t requests_waiting(const struct rampart_engine *e)
{
  uint32_t n = e->health->waiting;
  for (unsigned i = 0; i < e->set.nservers; i++)
    n += e->set.servers[i]->health.replay_writes;
  return n;
}

/* Says what is happening when requests have waited a while, every few seconds. */
static void log_waiting(struct rampart_engine *e, uint64_t now)
{
  uint64_t oldest = oldest_wait_ns(e);
  if (!oldest || now - oldest < 1000000000u || now - e->health->log_ns < 5000000000u)
    return;
  e->health->log_ns = now;
  unsigned reconnecting = 0;
  for (unsigned i = 0; i < e->set.nservers; i++)
    reconnecting += e->set.servers[i]->state == RAMPART_SERVER_RECONNECTING;
  rp_log(RP_LOG_WARN,
         "%u requests are waiting for %u reconnecting servers, the oldest for "
         "%llu ms; they give up after io-timeout=%llu ms",
         requests_waiting(e), reconnecting, (unsigned long long)((now - oldest) / 1000000u),
         (unsigned long long)(engine_io_timeout_ns(e) / 1000000u));
}

void server_health_tick(struct rampart_engine *e)
{
  uint64_t now = engine_now_ns();
  if (e->health->wait_head)
    wake_expired(e, now);
  log_waiting(e, now);
  bool blip_ended = false;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    struct server *s = e->set.servers[i];
    if (s->state != RAMPART_SERVER_RECONNECTING)
      continue;
    if (!s->health.past_blip &&
        now - s->health.since_ns >= (uint64_t)e->config.timeout_ms * 1000000u) {
      s->health.past_blip = true;
      blip_ended = true;
    }
    if (now >= s->health.lost_at_ns) {
      char attempts[640], why[720];
      describe_attempts(s, attempts, sizeof attempts);
      snprintf(why, sizeof why, "no reconnect within lease=%u s: %s", e->config.lease_seconds,
               attempts);
      declare_lost(e, s, why);
    } else if (s->health.replay_head && now >= s->health.replay_until_ns) {
      char why[160];
      snprintf(why, sizeof why, "server %s did not come back within io-timeout=%llu ms",
               s->address, (unsigned long long)(engine_io_timeout_ns(e) / 1000000u));
      rp_log(RP_LOG_WARN, "%s: %u requests to it go elsewhere", why, s->health.replay_count);
      give_up_queue(e, s, RP_ERR_TIMEOUT, why);
    } else if (s->health.replay_head && !s->health.writes_given_up && s->health.past_blip &&
               server_set_placeable(e) > 0) {
      give_up_writes(e, s);
    }
  }
  /* Writes parked for a server that is now more than a blip away may go to the spill
   * store (page_write.c); reads park again. Once per server and outage, not per tick. */
  if (blip_ended && e->health->wait_head)
    wake_parked(e);
}

/* ---- set-up, stats, close ------------------------------------------------------------------ */

void server_health_init(struct rampart_engine *e)
{
  ev_set_userdata(e->loop, e);
  ev_async_init(&e->health->attempt_wake, on_attempt_done);
  e->health->attempt_wake.data = e;
  ev_async_start(e->loop, &e->health->attempt_wake);
}

int server_health_init_server(struct rampart_engine *e, struct server *s)
{
  memset(&s->health, 0, sizeof s->health);
  struct server_health_shared *sh = e->health;
  /* One more helper with each server until there are RECONNECT_HELPERS. */
  if (sh->helpers < RECONNECT_HELPERS) {
    int rc = rp_thread_start(&sh->helper[sh->helpers], "rampart-reconn", ATTEMPT_STACK_BYTES,
                             helper_main, sh);
    if (rc != 0) {
      rp_log(RP_LOG_ERROR, "server %s: cannot start a reconnect helper thread: %s",
             s->address, strerror(rc));
      return -1;
    }
    sh->helpers++;
  }
  struct reconnect_attempt *a = calloc(1, sizeof *a);
  if (!a)
    return -1;
  s->health.attempt = a;
  ev_timer_init(&s->health.retry, on_retry, 0.0, 0.0);
  s->health.retry.data = s;
  return 0;
}

void server_health_stats(struct rampart_engine *e, struct rampart_stats *st)
{
  for (unsigned i = 0; i < e->set.nservers; i++)
    st->servers_reconnecting += e->set.servers[i]->state == RAMPART_SERVER_RECONNECTING;
  st->requests_waiting = requests_waiting(e);
  uint64_t oldest = oldest_wait_ns(e);
  st->oldest_wait_ms = oldest ? ms_since(oldest) : 0;
  st->resumes = e->health->resumes;
  st->requests_replayed = e->health->requests_replayed;
}

void server_health_retire(struct rampart_engine *e, struct server *s)
{
  struct server_health *h = &s->health;
  h->replaced = true; /* no retry is ever scheduled again */
  ev_timer_stop(e->loop, &h->retry);
  /* Requests still queued for it fail back to their owners (there should be none: it
   * held no slot); then its session, if it is not lost, is ended by its helper. An
   * attempt running now ends what it reaches when it finishes (attempt_finished). */
  give_up_queue(e, s, RP_ERR_DISCONNECTED, "the server was removed");
  if (!h->attempting)
    start_attempt(e, s, NULL);
}

void server_health_close(struct rampart_engine *e)
{
  if (!e->loop)
    return; /* open failed before the loop existed: no server was set up */
  for (unsigned i = 0; i < e->set.nservers; i++)
    ev_timer_stop(e->loop, &e->set.servers[i]->health.retry);
  helpers_stop(e->health); /* waits for the attempts running now */
  /* Attempts queued and never run: only a stale session each may need ending. */
  for (struct reconnect_attempt *a = e->health->queue_head; a; a = a->next_queued)
    if (a->stale) {
      end_session(a->stale);
      a->stale = NULL;
    }
  e->health->queue_head = e->health->queue_tail = NULL;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    struct server_health *h = &e->set.servers[i]->health;
    h->attempting = false;
    /* Whatever still waits for this server belongs to pools about to be freed. */
    h->replay_head = h->replay_tail = NULL;
    h->replay_count = h->replay_writes = 0;
  }
  ev_async_stop(e->loop, &e->health->attempt_wake);
  /* Sessions opened by attempts that finished after the loop stopped: nobody uses them. */
  struct reconnect_attempt *list = atomic_exchange(&e->health->attempts_done, NULL);
  while (list) {
    struct reconnect_attempt *next = list->next;
    if (list->conn)
      end_session(list->conn);
    attempt_release(list);
    list = next;
  }
}

size_t server_health_attempt_bytes(void)
{
  return sizeof(struct reconnect_attempt);
}

void server_health_free_server(struct server *s)
{
  free(s->health.attempt);
  s->health.attempt = NULL;
}

void server_health_free(struct rampart_engine *e)
{
  for (unsigned i = 0; i < e->set.nservers; i++) {
    free(e->set.servers[i]->health.attempt);
    e->set.servers[i]->health.attempt = NULL;
  }
}
