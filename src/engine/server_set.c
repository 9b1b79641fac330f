/* The engine's servers: connecting at open, reserving capacity, sending requests and
 * handling those that fail. Returning slots (FREE) is server_frees.c's.
 *
 * What happens when a server's connection fails (it goes RECONNECTING, requests that
 * must reach it wait to be resent, it comes back with its session or is declared LOST)
 * is server_health.c's, which makes new incarnations and adopts resumed sessions through
 * this file. This file calls it: each server's health is made and freed with its entry
 * and closed with the table, a failed request or a dropped connection is
 * server_health_failed, and a failed write or free the server never answered goes to
 * server_health_queue, to be sent again on the resumed session.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_core.h"
#include "log.h"
#include "parse.h"
#include "server_health.h"
#include "server_set.h"
#include "server_transport.h"
#include "state_record.h"

/* Connections in the engine's pool beyond one per server (server_set_pool_new). */
#define POOL_SPARES 8u

bool server_usable_for_placement(const struct server *s)
{
  return s->state == RAMPART_SERVER_UP && !s->advised && !s->suspect && !s->leaving &&
         !s->unlisted && s->conn && rp_conn_is_connected(s->conn) &&
         slot_allocator_available(&s->slots) > 0;
}

struct server *server_set_find(struct rampart_engine *e, const char *address)
{
  for (unsigned i = e->set.nservers; i-- > 0;) {
    struct server *s = e->set.servers[i];
    if (strcmp(s->address, address) == 0)
      return s->health.replaced || s->state == RAMPART_SERVER_REMOVED ? NULL : s;
  }
  return NULL;
}

unsigned server_set_members(const struct rampart_engine *e)
{
  unsigned n = 0;
  for (unsigned i = 0; i < e->set.nservers; i++)
    n += !e->set.servers[i]->health.replaced &&
         e->set.servers[i]->state != RAMPART_SERVER_REMOVED;
  return n;
}

unsigned server_set_placeable(const struct rampart_engine *e)
{
  unsigned n = 0;
  for (unsigned i = 0; i < e->set.nservers; i++)
    n += server_usable_for_placement(e->set.servers[i]);
  return n;
}

/* Pages to reserve on each server: its share of the device, plus parity, plus the
 * overflow kept for old versions still held by live groups, plus a tenth on top. The
 * tenth is room for uneven placement and in-flight writes, so that writers wait for
 * cleaning at the overflow bound (page_mover.c) before any server runs out and pages
 * spill to disk. A reserved page the client never writes costs the server nothing. */
uint64_t server_reservation_wanted(const struct rampart_engine *e)
{
  unsigned nservers = e->config.nservers;
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
                  : "has memory again: placing pages there",
         reason);
}

static struct rampart_engine *engine_of(struct server *s)
{
  return s->engine;
}

static void on_disconnect(struct rp_conn *conn, const struct rp_error *why, void *user)
{
  struct server *s = user;
  struct rampart_engine *e = engine_of(s);
  server_health_failed(e, s, why->message, false);
}

bool server_request_failed(struct rampart_engine *e, unsigned index, struct rp_request *req,
                           bool may_wait)
{
  if (index >= e->set.nservers) {
    /* A caller that looked the server up after the fact (a cleared or reused group
     * entry) must not reach past the table: that once freed the engine. */
    rp_log(RP_LOG_ERROR, "internal error: a failed request named server %u of %u; ignored",
           index, e->set.nservers);
    return false;
  }
  struct server *s = e->set.servers[index];
  char why[200];
  snprintf(why, sizeof why, "%s%s%s", rp_status_name(req->status),
           req->error_message[0] ? ": " : "", req->error_message);
  server_health_failed(e, s, why, req->status == RP_ERR_TIMEOUT);
  /* Only a request the server may never have seen is resent: one it answered with an
   * error would get the same answer again. */
  bool unanswered = req->status == RP_ERR_DISCONNECTED || req->status == RP_ERR_TIMEOUT;
  return may_wait && unanswered && (req->op == RP_OP_WRITE || req->op == RP_OP_FREE) &&
         server_health_queue(e, s, req);
}

static int server_connect(struct rampart_engine *e, struct server *s, const uint8_t *token,
                          uint32_t timeout_ms, struct rp_conn **out,
                          struct rp_session_info *info, struct rp_error *err)
{
  struct rp_conn_options o = {
    .host = s->host,
    .port = s->port,
    .key = e->key,
    .client_name = "rampart-engine",
    .resume_token = token,
    .connect_timeout_ms = timeout_ms,
    .request_timeout_ms = e->config.timeout_ms,
    .pool = s->pool,
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

void server_adopt(struct rampart_engine *e, struct server *s, struct rp_conn *conn,
                  const struct rp_session_info *info)
{
  s->conn = conn;
  if (s->addr_len == 0)
    rp_conn_peer_address(conn, &s->addr, &s->addr_len);
  memcpy(s->token, info->token, RP_TOKEN_LEN);
  s->advised = info->pressure;
  s->state = info->pressure ? RAMPART_SERVER_ADVISED : RAMPART_SERVER_UP;
  rp_conn_attach(conn, e->loop);
  rp_conn_set_callbacks(conn, on_advise, on_disconnect, s);
  state_record_save_server(e, s); /* its session token, before any page goes there */
}

static int per_entry_grow(struct server_set *set)
{
  if (set->nservers < set->per_entry_capacity)
    return 0;
  unsigned n = set->per_entry_capacity ? 2 * set->per_entry_capacity : 64u;
  uint64_t *live = realloc(set->live, n * sizeof *live);
  if (!live)
    return -1;
  set->live = live;
  uint64_t *at_risk = realloc(set->at_risk, n * sizeof *at_risk);
  if (!at_risk)
    return -1;
  set->at_risk = at_risk;
  set->per_entry_capacity = n;
  return 0;
}

struct server *server_new(struct rampart_engine *e, const char *address,
                          const struct server *like)
{
  if (e->set.nservers == ENGINE_MAX_INCARNATIONS || per_entry_grow(&e->set) < 0)
    return NULL;
  /* An entry is allocated when it is made, not with the table: the bound is a pointer
   * per entry, and a device that never replaces a server pays for the ones it lists. */
  struct server *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->index = e->set.nservers;
  s->engine = e;
  snprintf(s->address, sizeof s->address, "%s", address);
  char err[200];
  rp_parse_hostport(address, s->host, sizeof s->host, s->port, sizeof s->port, err,
                    sizeof err);
  s->pool = e->set.conn_pool;
  if (like) {
    s->addr = like->addr;
    s->addr_len = like->addr_len;
    s->pool = like->pool;
  }
  if (server_health_init_server(e, s) < 0) {
    free(s);
    return NULL;
  }
  e->set.servers[e->set.nservers++] = s;
  state_record_save_server(e, s);
  return s;
}

void server_forget_newest(struct rampart_engine *e)
{
  struct server *s = e->set.servers[--e->set.nservers];
  server_health_free_server(s);
  e->frees_waiting -= s->frees_waiting.count;
  free(s->frees_waiting.slots);
  free(s);
  e->set.servers[e->set.nservers] = NULL;
}

/* ---- open and close ------------------------------------------------------------------ */

int server_set_pool_new(struct rampart_engine *e, unsigned n, char *err, size_t errlen)
{
  /* One connection's memory per server, and spares for reconnects: a reconnect needs a
   * second connection only while the old one is still being closed (or a stale session
   * ended), so POOL_SPARES cover that many servers reconnecting at once. Past them a
   * connection takes heap memory, as without a pool. */
  e->set.conn_pool = rp_conn_pool_new(n + POOL_SPARES);
  if (!e->set.conn_pool) {
    snprintf(err, errlen, "out of memory for %u server connections", n);
    return -1;
  }
  return 0;
}

int server_set_open(struct rampart_engine *e, char *err, size_t errlen)
{
  unsigned n = e->config.nservers;
  if (server_set_pool_new(e, n, err, errlen) < 0)
    return -1;
  for (unsigned i = 0; i < n; i++) {
    struct server *s = server_new(e, e->config.servers[i], NULL);
    if (!s) {
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    struct rp_conn *conn;
    struct rp_session_info info;
    struct rp_error rerr;
    uint64_t got;
    if (server_connect(e, s, NULL, 5000, &conn, &info, &rerr) < 0) {
      snprintf(err, errlen, "server %s: %s", s->address, rerr.message);
      return -1;
    }
    if (server_reserve(e, conn, server_reservation_wanted(e), info.free_pages, &got, &rerr) <
        0) {
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
    if (got < server_reservation_wanted(e))
      rp_log(RP_LOG_WARN,
             "server %s granted %llu of the %llu pages wanted: the rest will "
             "go to other servers or the spill store",
             s->address, (unsigned long long)got,
             (unsigned long long)server_reservation_wanted(e));
  }
  return 0;
}

void server_set_close(struct rampart_engine *e)
{
  e->set.closing = true;
  server_health_close(e);
  /* Closing: a connection failing now must not call back into the engine. */
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (e->set.servers[i]->conn)
      rp_conn_set_callbacks(e->set.servers[i]->conn, NULL, NULL, NULL);
  for (unsigned i = 0; i < e->set.nservers; i++) {
    struct server *s = e->set.servers[i];
    if (s->conn) {
      struct rp_error err;
      if (rp_conn_is_connected(s->conn))
        rp_goodbye_sync(s->conn, &err); /* frees our pages on the server now */
      rp_conn_close(s->conn);
      s->conn = NULL;
    }
  }
  /* Only now: completions run inside later goodbyes may still release slots. */
  for (unsigned i = 0; i < e->set.nservers; i++) {
    slot_allocator_destroy(&e->set.servers[i]->slots);
    free(e->set.servers[i]->frees_waiting.slots);
  }
  server_health_free(e);
  /* Pools of servers added while running, each once (its incarnations share it). */
  for (unsigned i = 0; i < e->set.nservers; i++) {
    struct rp_conn_pool *pool = e->set.servers[i]->pool;
    if (pool == e->set.conn_pool)
      continue;
    for (unsigned j = i; j < e->set.nservers; j++)
      if (e->set.servers[j]->pool == pool)
        e->set.servers[j]->pool = e->set.conn_pool;
    rp_conn_pool_free(pool);
  }
  rp_conn_pool_free(e->set.conn_pool);
  e->set.conn_pool = NULL;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    free(e->set.servers[i]);
    e->set.servers[i] = NULL;
  }
  e->set.nservers = 0;
  free(e->set.live);
  free(e->set.at_risk);
  e->set.live = e->set.at_risk = NULL;
  e->set.per_entry_capacity = 0;
}
