/* The engine's servers: connecting, reserving capacity, noticing failures, reconnecting.
 *
 * A dropped connection is not a lost server: the server keeps our session for its
 * lease, so the server goes RECONNECTING and a helper thread retries with the session
 * token (blocking connects must not stall the I/O thread). If it comes back with its
 * session, it is UP again with every page. If it does not come back within lease=
 * seconds, or comes back empty, the incarnation is LOST and the mover rebuilds its
 * pages; a server that returns empty joins as a new incarnation, so slots of the old
 * one can never be confused with the new one's.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"
#include "log.h"
#include "parse.h"

#define RECONNECT_CONNECT_TIMEOUT_MS 1000
#define RECONNECT_RETRY_MS 300

bool server_usable_for_reads(const struct server *s)
{
  return (s->state == RAMPART_SERVER_UP || s->state == RAMPART_SERVER_ADVISED) && s->conn &&
         rp_conn_is_connected(s->conn);
}

bool server_usable_for_placement(const struct server *s)
{
  return s->state == RAMPART_SERVER_UP && !s->advised && !s->suspect && s->conn &&
         rp_conn_is_connected(s->conn) && slot_allocator_available(&s->slots) > 0;
}

unsigned server_set_placeable(const struct rampart_engine *e)
{
  unsigned n = 0;
  for (unsigned i = 0; i < e->nservers; i++)
    n += server_usable_for_placement(&e->servers[i]);
  return n;
}

/* Pages to reserve on each server: its share of the device, plus parity, plus the
 * overflow kept for old versions still held by live groups, plus a tenth on top. The
 * tenth is room for uneven placement and in-flight writes, so that writers wait for
 * cleaning at the overflow bound (page_mover.c) before any server runs out and pages
 * spill to disk. A reserved page the client never writes costs the server nothing. */
static uint64_t reservation_wanted(const struct rampart_engine *e, unsigned nservers)
{
  double per_page = engine_slots_per_page(e, e->group_size) *
                    (1.0 + e->config.overflow_percent / 100.0);
  double total = (double)e->pages * per_page * 1.10;
  return (uint64_t)(total / nservers) + 256;
}

static void on_advise(struct rp_conn *conn, bool pressure, const char *reason,
                      uint64_t free_pages, void *user)
{
  struct server *s = user;
  if (s->advised == pressure)
    return;
  s->advised = pressure;
  if (s->state == RAMPART_SERVER_UP || s->state == RAMPART_SERVER_ADVISED)
    s->state = pressure ? RAMPART_SERVER_ADVISED : RAMPART_SERVER_UP;
  rp_log(pressure ? RP_LOG_WARN : RP_LOG_INFO, "server %s %s (%s)", s->address,
         pressure ? "is under memory pressure: moving pages away"
                  : "has memory again: placing pages there", reason);
}

static struct rampart_engine *engine_of(struct server *s)
{
  /* servers[] is embedded in the engine; walk back from this entry. */
  return (struct rampart_engine *)((char *)(s - s->index) -
                                   offsetof(struct rampart_engine, servers));
}

static void server_mark_failed(struct rampart_engine *e, struct server *s, const char *why);

static void on_disconnect(struct rp_conn *conn, const struct rp_error *why, void *user)
{
  struct server *s = user;
  server_mark_failed(engine_of(s), s, why->message);
}

static void server_start_reconnect(struct rampart_engine *e, struct server *s)
{
  pthread_mutex_lock(&e->reconnect_lock);
  s->reconnect_pending = true;
  pthread_cond_signal(&e->reconnect_cond);
  pthread_mutex_unlock(&e->reconnect_lock);
}

/* Called on the I/O thread when a request to s failed or its connection dropped. The
 * connection itself is closed from the tick, outside any callback of its own. */
static void server_mark_failed(struct rampart_engine *e, struct server *s, const char *why)
{
  if (s->state != RAMPART_SERVER_UP && s->state != RAMPART_SERVER_ADVISED)
    return;
  s->state = RAMPART_SERVER_RECONNECTING;
  s->lost_deadline_ns = engine_now_ns() + (uint64_t)e->config.lease_seconds * 1000000000u;
  const char *meanwhile =
    e->policy == RAMPART_REDUNDANCY_NONE ? "its pages cannot be read until it is back"
    : e->policy == RAMPART_REDUNDANCY_WRITE_THROUGH ? "its pages are read from the disk copy"
    : "its pages are rebuilt from their groups when read";
  rp_log(RP_LOG_WARN, "server %s failed (%s): reconnecting for up to %u s; meanwhile %s",
         s->address, why, e->config.lease_seconds, meanwhile);
  page_write_close_open_group(e);
  server_start_reconnect(e, s);
}

void server_set_submit(struct rampart_engine *e, unsigned index, struct rp_request *req)
{
  struct server *s = &e->servers[index];
  if (!s->conn || !rp_conn_is_connected(s->conn)) {
    req->status = RP_ERR_DISCONNECTED;
    req->error_message[0] = '\0';
    req->done(req);
    return;
  }
  rp_conn_submit(s->conn, req);
}

void server_set_flush(struct rampart_engine *e)
{
  /* A flush that finds a connection broken fails its requests, and their callbacks may
   * close it: read each server's connection afresh. */
  for (unsigned i = 0; i < e->nservers; i++)
    if (e->servers[i].conn)
      rp_conn_flush(e->servers[i].conn);
}

/* A failed request tells us about its server before the connection callback does. */
void server_request_failed(struct rampart_engine *e, unsigned index, const struct rp_request *req)
{
  struct server *s = &e->servers[index];
  char why[200];
  snprintf(why, sizeof why, "%s%s%s", rp_status_name(req->status),
           req->error_message[0] ? ": " : "", req->error_message);
  server_mark_failed(e, s, why);
}

static void on_free_done(struct rp_request *req)
{
  struct free_request *fr = req->user;
  fr->next = fr->engine->free_frees;
  fr->engine->free_frees = fr;
}

void server_release_slot(struct rampart_engine *e, unsigned index, uint32_t slot)
{
  struct server *s = &e->servers[index];
  if (s->state == RAMPART_SERVER_LOST)
    return; /* that incarnation's slots are gone with it */
  slot_allocator_release(&s->slots, slot);
  /* Best effort: returning the page to the server keeps its memory at what is live.
   * Skipping it is safe, because the slot is reused and overwritten by a later WRITE
   * on the same, ordered connection. */
  struct free_request *fr = e->free_frees;
  if (!fr || !server_usable_for_reads(s))
    return;
  e->free_frees = fr->next;
  memset(&fr->req, 0, sizeof fr->req);
  fr->req.op = RP_OP_FREE;
  fr->req.slot = slot;
  fr->req.count = 1;
  fr->req.done = on_free_done;
  fr->req.user = fr;
  rp_conn_submit(s->conn, &fr->req);
}

static int server_connect(struct rampart_engine *e, struct server *s, const uint8_t *token,
                          uint32_t timeout_ms, struct rp_conn **out,
                          struct rp_session_info *info, struct rp_error *err)
{
  struct rp_conn_options o = {
    .host = s->host, .port = s->port, .key = &e->key, .client_name = "rampart-engine",
    .resume_token = token, .connect_timeout_ms = timeout_ms,
    .request_timeout_ms = e->config.timeout_ms,
  };
  *out = rp_conn_open(&o, info, err);
  return *out ? 0 : -1;
}

/* Reserves this server's share on a connection not yet attached to the engine's loop
 * (rp_reserve_sync then runs a private loop). */
static int server_reserve(struct rampart_engine *e, struct rp_conn *conn, uint64_t want,
                          uint64_t free_pages, uint64_t *got, struct rp_error *err)
{
  if (want > free_pages)
    want = free_pages;
  if (want > UINT32_MAX)
    want = UINT32_MAX;
  uint64_t server_free;
  return rp_reserve_sync(conn, want, got, &server_free, err);
}

static void server_adopt(struct rampart_engine *e, struct server *s, struct rp_conn *conn,
                         const struct rp_session_info *info)
{
  s->conn = conn;
  memcpy(s->token, info->token, RP_TOKEN_LEN);
  s->advised = info->pressure;
  s->state = info->pressure ? RAMPART_SERVER_ADVISED : RAMPART_SERVER_UP;
  rp_conn_attach(conn, e->loop);
  rp_conn_set_callbacks(conn, on_advise, on_disconnect, s);
}

static struct server *server_new(struct rampart_engine *e, const char *address)
{
  if (e->nservers == ENGINE_MAX_INCARNATIONS)
    return NULL;
  struct server *s = &e->servers[e->nservers];
  memset(s, 0, sizeof *s);
  s->index = e->nservers++;
  snprintf(s->address, sizeof s->address, "%s", address);
  char err[200];
  rp_parse_hostport(address, s->host, sizeof s->host, s->port, sizeof s->port, err, sizeof err);
  return s;
}

/* ---- reconnect thread -------------------------------------------------------------- */

struct reconnect_result {
  struct rp_conn *conn;
  struct rp_session_info info;
  uint64_t reserved;
};

static void *reconnect_main(void *arg)
{
  struct rampart_engine *e = arg;
  pthread_mutex_lock(&e->reconnect_lock);
  while (!e->reconnect_stop) {
    struct server *todo = NULL;
    for (unsigned i = 0; i < e->nservers && !todo; i++)
      if (e->servers[i].reconnect_pending && !e->servers[i].reconnected)
        todo = &e->servers[i];
    if (!todo) {
      pthread_cond_wait(&e->reconnect_cond, &e->reconnect_lock);
      continue;
    }
    /* Copy what the attempt needs, then connect without holding the lock. */
    struct server copy = *todo;
    bool resume = todo->state != RAMPART_SERVER_LOST;
    pthread_mutex_unlock(&e->reconnect_lock);

    struct rp_conn *conn = NULL;
    struct rp_session_info info;
    struct rp_error err;
    uint64_t reserved = 0;
    int rc = server_connect(e, &copy, resume ? copy.token : NULL,
                            RECONNECT_CONNECT_TIMEOUT_MS, &conn, &info, &err);
    if (rc == 0 && !info.resumed &&
        server_reserve(e, conn, reservation_wanted(e, e->config.nservers), info.free_pages,
                       &reserved, &err) < 0) {
      rp_conn_close(conn);
      conn = NULL;
      rc = -1;
    }
    pthread_mutex_lock(&e->reconnect_lock);
    if (rc == 0 && !e->reconnect_stop) {
      todo->reconnected = conn;
      todo->reconnect_resumed = info.resumed;
      todo->token_next_reserved = reserved;
      memcpy(&todo->reconnect_info, &info, sizeof info);
      ev_async_send(e->loop, &e->reconnected_wake);
    } else {
      if (conn)
        rp_conn_close(conn);
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += RECONNECT_RETRY_MS * 1000000L;
      if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&e->reconnect_cond, &e->reconnect_lock, &until);
    }
  }
  pthread_mutex_unlock(&e->reconnect_lock);
  return NULL;
}

/* On the I/O thread: adopt connections the reconnect thread made. */
void server_set_handle_reconnects(struct rampart_engine *e)
{
  pthread_mutex_lock(&e->reconnect_lock);
  unsigned n = e->nservers;
  for (unsigned i = 0; i < n; i++) {
    struct server *s = &e->servers[i];
    struct rp_conn *conn = s->reconnected;
    if (!conn)
      continue;
    s->reconnected = NULL;
    s->reconnect_pending = false;
    struct rp_session_info info = s->reconnect_info;
    if (s->conn) {
      rp_conn_close(s->conn);
      s->conn = NULL;
    }
    if (s->reconnect_resumed && s->state == RAMPART_SERVER_RECONNECTING) {
      server_adopt(e, s, conn, &info);
      rp_log(RP_LOG_INFO, "server %s is back with its session: no page was lost", s->address);
      continue;
    }
    /* It came back empty: this incarnation's pages are gone; the server joins anew. */
    if (s->state != RAMPART_SERVER_LOST) {
      s->state = RAMPART_SERVER_LOST;
      s->rebuild_needed = true;
      page_mover_rebuild_begin(e);
    }
    struct server *fresh = server_new(e, s->address);
    if (!fresh) {
      rp_log(RP_LOG_ERROR, "server %s came back but the engine has no room for it: restart "
             "the device to use it again", s->address);
      rp_conn_close(conn);
      continue;
    }
    slot_allocator_init(&fresh->slots, (uint32_t)s->token_next_reserved);
    fresh->reserved_pages = s->token_next_reserved;
    server_adopt(e, fresh, conn, &info);
    rp_log(RP_LOG_INFO, "server %s rejoined empty with %llu pages reserved", fresh->address,
           (unsigned long long)fresh->reserved_pages);
  }
  pthread_mutex_unlock(&e->reconnect_lock);
}

/* Every tick: close dead connections, declare servers lost past their lease. */
void server_set_tick(struct rampart_engine *e)
{
  uint64_t now = engine_now_ns();
  for (unsigned i = 0; i < e->nservers; i++) {
    struct server *s = &e->servers[i];
    if (s->state != RAMPART_SERVER_RECONNECTING)
      continue;
    if (s->conn && !rp_conn_is_connected(s->conn) && rp_conn_in_flight(s->conn) == 0) {
      rp_conn_close(s->conn);
      s->conn = NULL;
    }
    if (now >= s->lost_deadline_ns) {
      pthread_mutex_lock(&e->reconnect_lock);
      s->state = RAMPART_SERVER_LOST;
      s->rebuild_needed = true;
      pthread_mutex_unlock(&e->reconnect_lock);
      page_mover_rebuild_begin(e);
      rp_log(RP_LOG_ERROR, "server %s is lost (no reconnect within %u s): rebuilding its "
             "%llu live pages elsewhere", s->address, e->config.lease_seconds,
             (unsigned long long)page_mover_at_risk(e, i));
    }
  }
}

/* ---- open and close ------------------------------------------------------------------ */

int server_set_open(struct rampart_engine *e, char *err, size_t errlen)
{
  unsigned n = e->config.nservers;
  for (unsigned i = 0; i < n; i++) {
    struct server *s = server_new(e, e->config.servers[i]);
    struct rp_conn *conn;
    struct rp_session_info info;
    struct rp_error rerr;
    uint64_t got;
    if (server_connect(e, s, NULL, 5000, &conn, &info, &rerr) < 0) {
      snprintf(err, errlen, "server %s: %s", s->address, rerr.message);
      return -1;
    }
    if (server_reserve(e, conn, reservation_wanted(e, n), info.free_pages, &got, &rerr) < 0) {
      snprintf(err, errlen, "server %s: %s", s->address, rerr.message);
      rp_conn_close(conn);
      return -1;
    }
    if (slot_allocator_init(&s->slots, (uint32_t)got) < 0) {
      snprintf(err, errlen, "out of memory");
      rp_conn_close(conn);
      return -1;
    }
    s->reserved_pages = got;
    server_adopt(e, s, conn, &info);
    if (got < reservation_wanted(e, n))
      rp_log(RP_LOG_WARN, "server %s granted %llu of the %llu pages wanted: the rest will "
             "go to other servers or the spill store", s->address, (unsigned long long)got,
             (unsigned long long)reservation_wanted(e, n));
  }
  if (n > 0) {
    if (pthread_create(&e->reconnect_thread, NULL, reconnect_main, e) != 0) {
      snprintf(err, errlen, "cannot start the reconnect thread");
      return -1;
    }
    e->reconnect_thread_started = true;
  }
  return 0;
}

void server_set_close(struct rampart_engine *e)
{
  if (e->reconnect_thread_started) {
    pthread_mutex_lock(&e->reconnect_lock);
    e->reconnect_stop = true;
    pthread_cond_signal(&e->reconnect_cond);
    pthread_mutex_unlock(&e->reconnect_lock);
    pthread_join(e->reconnect_thread, NULL);
  }
  /* Closing: a connection failing now must not call back into the engine. */
  for (unsigned i = 0; i < e->nservers; i++)
    if (e->servers[i].conn)
      rp_conn_set_callbacks(e->servers[i].conn, NULL, NULL, NULL);
  for (unsigned i = 0; i < e->nservers; i++) {
    struct server *s = &e->servers[i];
    if (s->reconnected)
      rp_conn_close(s->reconnected);
    if (s->conn) {
      struct rp_error err;
      if (rp_conn_is_connected(s->conn))
        rp_goodbye_sync(s->conn, &err); /* frees our pages on the server now */
      rp_conn_close(s->conn);
      s->conn = NULL;
    }
  }
  /* Only now: completions run inside later goodbyes may still release slots. */
  for (unsigned i = 0; i < e->nservers; i++)
    slot_allocator_destroy(&e->servers[i].slots);
}
