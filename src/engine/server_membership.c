/* Servers joining and leaving a running device (docs/elastic.md).
 *
 *   add     connect and reserve (blocking, in the caller's thread: the I/O thread never
 *           waits on a network round trip), then the loop adopts the connection as a new
 *           server. New groups prefer the servers with the most room (page_write.c), so it
 *           fills first; rebalancing (page_mover.c) also moves old groups onto it, slowly.
 *   drain   nothing new is placed there, and the mover rewrites every group with a copy
 *           there (reason "drain"), each page read from that server and verified as it
 *           moves (page_read.c), not rebuilt from the others: the server is still up, so a
 *           drain costs no degraded read. Refused when the other servers cannot hold what
 *           must move, or when fewer servers would be left than the policy needs.
 *   remove  drain, then end its session (GOODBYE, by its reconnect helper) and forget it.
 *   reload  the cluster= file against the members: add the new, remove the missing.
 *
 * The checks and state changes run on the engine (engine_call), the blocking parts in
 * the caller's thread; a drain's end is noticed by the mover's passes
 * (server_membership_pass_done).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "log.h"
#include "msgf.h"
#include "page_mover.h"
#include "page_write.h"
#include "parse.h"
#include "placement_domains.h"
#include "server_health.h"

#define ADD_CONNECT_TIMEOUT_MS 5000u
#define ADD_POOL_CONNECTIONS 3u /* its connection, a reconnect's, and a session to end */

static double pages_mib(uint64_t pages)
{
  return (double)pages * RAMPART_PAGE_SIZE / 1048576.0;
}

/* ---- add ------------------------------------------------------------------------------ */

struct add_call {
  const char *address;
  char *msg;
  size_t msglen;
  int result;
  bool done;     /* check: nothing more to do (already there, drain cancelled) */
  uint64_t want; /* check: pages to reserve */
  /* adopt: what the caller's thread got */
  struct rp_conn *conn;
  struct rp_conn_pool *pool;
  struct rp_session_info info;
  uint64_t reserved;
};

static void add_check(struct rampart_engine *e, void *arg)
{
  struct add_call *c = arg;
  struct server *s = server_set_find(e, c->address);
  if (s && s->leaving && s->state != RAMPART_SERVER_LOST) {
    bool was_drained = s->drained;
    s->leaving = s->drained = s->remove_when_drained = false;
    rp_log(RP_LOG_INFO,
           "server %s: its drain is cancelled by an add; it takes new pages "
           "again",
           s->address);
    rp_msgf(c->msg, c->msglen, "%s was %s; it takes new pages again (nothing was lost)",
            s->address, was_drained ? "drained" : "being drained: the drain is cancelled");
    c->done = true;
    return;
  }
  if (s) {
    rp_msgf(c->msg, c->msglen, "%s is a server of this device already (%s): nothing to do",
            s->address, rampart_server_health_name(s->state));
    c->done = true;
    return;
  }
  if (e->config.nservers == 0 && e->set.nservers == 0) {
    rp_msgf(c->msg, c->msglen,
            "this device was started without servers (a standalone RAM "
            "disk): it cannot take one now; start it again with servers= or cluster=");
    c->result = -EINVAL;
    return;
  }
  unsigned members = server_set_members(e);
  if (members >= RAMPART_MAX_SERVERS || e->config.nservers >= RAMPART_MAX_SERVERS) {
    rp_msgf(c->msg, c->msglen,
            "the device has %u servers, the most it takes: remove one "
            "first",
            members);
    c->result = -ENOSPC;
    return;
  }
  if (e->set.nservers >= ENGINE_MAX_INCARNATIONS) {
    rp_msgf(c->msg, c->msglen,
            "the device's server table is full (%u entries, servers that "
            "rejoined or were removed included): restart the device to add more",
            ENGINE_MAX_INCARNATIONS);
    c->result = -ENOSPC;
    return;
  }
  /* Its share as if it had been there from the start: the device over members + 1. */
  unsigned was = e->config.nservers;
  e->config.nservers = members + 1;
  c->want = server_reservation_wanted(e);
  e->config.nservers = was;
}

static void add_adopt(struct rampart_engine *e, void *arg)
{
  struct add_call *c = arg;
  if (server_set_find(e, c->address)) {
    rp_msgf(c->msg, c->msglen, "%s was added by another command meanwhile: nothing to do",
            c->address);
    c->done = true;
    return;
  }
  struct server *s = server_new(e, c->address, NULL);
  if (!s || slot_allocator_init(&s->slots, (uint32_t)c->reserved) < 0) {
    if (s)
      server_forget_newest(e);
    rp_msgf(c->msg, c->msglen, "out of memory for server %s: nothing changed", c->address);
    c->result = -ENOMEM;
    return;
  }
  s->pool = c->pool;
  s->reserved_pages = c->reserved;
  server_adopt(e, s, c->conn, &c->info);
  c->conn = NULL;
  c->pool = NULL;
  if (e->config.nservers < RAMPART_MAX_SERVERS)
    snprintf(e->config.servers[e->config.nservers++], RAMPART_ADDRESS_LEN, "%s", s->address);
  rp_log(RP_LOG_INFO,
         "server %s added: %llu pages (%.1f MiB) reserved; new groups go to "
         "the servers with the most room",
         s->address, (unsigned long long)s->reserved_pages, pages_mib(s->reserved_pages));
  rp_msgf(c->msg, c->msglen,
          "added %s: %llu pages (%.1f MiB) reserved there; the device has "
          "%u servers",
          s->address, (unsigned long long)s->reserved_pages, pages_mib(s->reserved_pages),
          server_set_members(e));
  page_op_run_waiting(e); /* writes waiting for room may go there */
}

int rampart_server_add(struct rampart_engine *e, const char *address, char *msg,
                       size_t msglen)
{
  char host[256], port[16], perr[200];
  if (strlen(address) >= RAMPART_ADDRESS_LEN ||
      rp_parse_hostport(address, host, sizeof host, port, sizeof port, perr, sizeof perr) <
        0) {
    rp_msgf(msg, msglen, "'%s' is not a server address: write HOST:PORT, e.g. 10.0.0.5:7070",
            address);
    return -EINVAL;
  }
  struct add_call c = { .address = address, .msg = msg, .msglen = msglen };
  engine_call(e, add_check, &c);
  if (c.result < 0 || c.done)
    return c.result;
  c.pool = rp_conn_pool_new(ADD_POOL_CONNECTIONS);
  if (!c.pool) {
    rp_msgf(msg, msglen, "out of memory for a connection to %s: nothing changed", address);
    return -ENOMEM;
  }
  struct rp_conn_options o = {
    .host = host,
    .port = port,
    .key = e->key,
    .client_name = "rampart-engine",
    .connect_timeout_ms = ADD_CONNECT_TIMEOUT_MS,
    .request_timeout_ms = e->config.timeout_ms,
    .pool = c.pool,
  };
  struct rp_error err = { 0 };
  c.conn = rp_conn_open(&o, &c.info, &err);
  if (!c.conn) {
    rp_msgf(msg, msglen,
            "cannot add %s: %s. Check that rampartd runs there, that this host "
            "reaches it, and that it has the cluster's key; nothing changed",
            address, err.message);
    c.result = -EHOSTUNREACH;
  } else {
    uint64_t want = c.want < c.info.free_pages ? c.want : c.info.free_pages;
    if (want > UINT32_MAX)
      want = UINT32_MAX;
    uint64_t server_free;
    if (want == 0) {
      rp_msgf(msg, msglen,
              "cannot add %s: it has no free memory to reserve (%llu pages "
              "wanted): give it more (rampartd --memory) or free some; nothing changed",
              address, (unsigned long long)c.want);
      c.result = -ENOSPC;
    } else if (rp_reserve_sync(c.conn, want, &c.reserved, &server_free, &err) < 0) {
      rp_msgf(msg, msglen, "cannot add %s: %s; nothing changed", address, err.message);
      c.result = -EIO;
    } else {
      engine_call(e, add_adopt, &c); /* takes c.conn and c.pool when it adopts them */
    }
  }
  if (c.conn) {
    /* Not adopted: end the session it made, so the server frees the reservation now. */
    struct rp_error ignored;
    rp_goodbye_sync(c.conn, &ignored);
    rp_conn_close(c.conn);
  }
  rp_conn_pool_free(c.pool);
  return c.result;
}

/* ---- drain and remove ------------------------------------------------------------------ */

struct drain_call {
  const char *address;
  bool remove;
  char *msg;
  size_t msglen;
  int result;
};

/* "a, b, c" of the members, for a message about an address that is not one. */
static void list_members(const struct rampart_engine *e, char *out, size_t len)
{
  size_t n = 0;
  out[0] = '\0';
  for (unsigned i = 0; i < e->set.nservers && n < len; i++) {
    const struct server *s = e->set.servers[i];
    if (s->health.replaced || s->state == RAMPART_SERVER_REMOVED)
      continue;
    n += (size_t)snprintf(out + n, len - n, "%s%s", n ? ", " : "", s->address);
  }
}

static bool address_was_removed(const struct rampart_engine *e, const char *address)
{
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (e->set.servers[i]->state == RAMPART_SERVER_REMOVED &&
        strcmp(e->set.servers[i]->address, address) == 0)
      return true;
  return false;
}

static void config_forget(struct rampart_config *c, const char *address)
{
  for (unsigned i = 0; i < c->nservers; i++)
    if (strcmp(c->servers[i], address) == 0) {
      memmove(c->servers[i], c->servers[i + 1],
              (size_t)(c->nservers - i - 1) * sizeof c->servers[0]);
      c->nservers--;
      return;
    }
}

/* s holds nothing of ours (or was lost and rebuilt): forget it. */
static void remove_now(struct rampart_engine *e, struct server *s)
{
  bool had_session = s->state != RAMPART_SERVER_LOST;
  s->state = RAMPART_SERVER_REMOVED;
  s->leaving = s->drained = s->remove_when_drained = false;
  if (s->conn) {
    struct rp_conn *conn = s->conn;
    s->conn = NULL;
    rp_conn_set_callbacks(conn, NULL, NULL, NULL);
    rp_conn_close(conn);
  }
  server_health_retire(e, s);
  config_forget(&e->config, s->address);
  rp_log(RP_LOG_INFO, "server %s removed%s", s->address,
         had_session ? ": its session is ended, so it frees our reservation now" : "");
}

static void drain_start(struct rampart_engine *e, void *arg)
{
  struct drain_call *c = arg;
  const char *verb = c->remove ? "remove" : "drain";
  struct server *s = server_set_find(e, c->address);
  if (!s) {
    if (address_was_removed(e, c->address)) {
      rp_msgf(c->msg, c->msglen, "%s was removed already: nothing to do", c->address);
      return;
    }
    char members[512];
    list_members(e, members, sizeof members);
    rp_msgf(c->msg, c->msglen,
            "%s is not a server of this device (its servers: %s): check "
            "the address",
            c->address, members[0] ? members : "none");
    c->result = -ENOENT;
    return;
  }
  page_mover_live_by_server(e, e->set.live, e->set.at_risk);
  uint64_t dependent = e->set.at_risk[s->index];
  if (s->state == RAMPART_SERVER_LOST) {
    if (!c->remove) {
      rp_msgf(c->msg, c->msglen,
              "%s is lost: its pages are being rebuilt on the other "
              "servers already (%llu left); nothing to drain",
              s->address, (unsigned long long)dependent);
      return;
    }
    s->leaving = s->remove_when_drained = true;
    s->leaving_since_ns = engine_now_ns();
    server_health_stop_rejoining(e, s);
    rp_msgf(c->msg, c->msglen,
            "%s is lost: it is removed once its %llu pages are rebuilt on "
            "the other servers, and it will not join again",
            s->address, (unsigned long long)dependent);
    server_membership_pass_done(e);
    return;
  }
  if (s->leaving) {
    bool upgrade = c->remove && !s->remove_when_drained;
    s->remove_when_drained |= c->remove;
    if (s->drained && s->remove_when_drained) {
      remove_now(e, s);
      rp_msgf(c->msg, c->msglen, "%s was drained: removed now", c->address);
      return;
    }
    rp_msgf(c->msg, c->msglen, "%s is being drained already%s: %llu pages left to move",
            s->address, upgrade ? " (it will be removed once drained)" : "",
            (unsigned long long)dependent);
    return;
  }
  /* What must fit on the others once it is gone: every live page of the device, with
   * its share of a parity in groups as wide as the others allow, in the reservations
   * they hold, less a twentieth kept for the moves in flight and for cleaning. (A drain
   * rewrites every group with a copy there, which in a small cluster is most of the
   * device; each group moved frees its old slots, so it needs room once, not twice.) */
  unsigned others = 0;
  uint64_t room = 0, free_slots = 0;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    const struct server *o = e->set.servers[i];
    if (o == s || !server_usable_for_placement(o))
      continue;
    others++;
    room += o->reserved_pages;
    free_slots += slot_allocator_available(&o->slots);
  }
  uint64_t need = (uint64_t)((double)e->groups.live_pages *
                               engine_slots_per_page(e, engine_group_width(e, others)) +
                             0.999);
  uint64_t usable = room - room / 20;
  unsigned needed_servers = engine_servers_needed(e);
  if (others < needed_servers) {
    rp_msgf(c->msg, c->msglen,
            "cannot %s %s: %u other server%s can take pages, and %s needs "
            "%u to keep every page recoverable. Add a server first (rampartctl device SOCKET "
            "add HOST:PORT); nothing changed",
            verb, s->address, others, others == 1 ? "" : "s",
            rampart_redundancy_name(e->policy), needed_servers);
    c->result = -ENOSPC;
    return;
  }
  if (need > usable) {
    uint64_t short_by = need - usable;
    rp_msgf(c->msg, c->msglen,
            "cannot %s %s: without it the device's %llu live pages need "
            "about %llu pages (%.1f MiB) of server memory, parity included, and the other "
            "%u servers have %llu reserved (%.1f MiB, a twentieth of it kept free): short by "
            "%llu pages (%.1f MiB). Add a server (rampartctl device SOCKET add HOST:PORT) or "
            "give the others more memory, then %s again; nothing changed",
            verb, s->address, (unsigned long long)e->groups.live_pages,
            (unsigned long long)need, pages_mib(need), others, (unsigned long long)room,
            pages_mib(room), (unsigned long long)short_by, pages_mib(short_by), verb);
    c->result = -ENOSPC;
    return;
  }
  s->leaving = true;
  s->drained = false;
  s->remove_when_drained = c->remove;
  s->leaving_since_ns = engine_now_ns();
  /* The open group may have a member or its parity's slot there: seal it now, so the
   * mover can take it too. */
  page_write_close_open_group(e);
  rp_log(RP_LOG_INFO,
         "server %s: %s asked; moving the %llu live pages that depend on it to "
         "the %u other servers (%llu pages free there)",
         s->address, verb, (unsigned long long)dependent, others,
         (unsigned long long)free_slots);
  rp_msgf(c->msg, c->msglen,
          "%s %s: %llu live pages to move to the %u other servers "
          "(%llu pages, %.1f MiB, free there)%s",
          c->remove ? "removing" : "draining", s->address, (unsigned long long)dependent,
          others, (unsigned long long)free_slots, pages_mib(free_slots),
          c->remove ? "; it is removed once drained" : "");
}

int rampart_server_drain(struct rampart_engine *e, const char *address, bool remove,
                         char *msg, size_t msglen)
{
  struct drain_call c = { .address = address, .remove = remove, .msg = msg, .msglen = msglen };
  engine_call(e, drain_start, &c);
  return c.result;
}

void server_membership_pass_done(struct rampart_engine *e)
{
  for (unsigned i = 0; i < e->set.nservers; i++) {
    struct server *s = e->set.servers[i];
    if (!s->leaving || s->drained || s->state == RAMPART_SERVER_REMOVED)
      continue;
    if (s->state == RAMPART_SERVER_LOST) {
      if (!s->rebuild_needed && s->remove_when_drained)
        remove_now(e, s);
      continue;
    }
    if (s->slots.in_use > 0)
      continue;
    s->drained = true;
    double seconds = (double)(engine_now_ns() - s->leaving_since_ns) / 1e9;
    rp_log(RP_LOG_INFO, "server %s drained in %.1f s: no page depends on it any more%s",
           s->address, seconds,
           s->remove_when_drained ? ""
                                  : "; it takes no new pages "
                                    "until added again");
    if (s->remove_when_drained)
      remove_now(e, s);
  }
}

/* ---- listed in etcd, or not ------------------------------------------------------------- */

struct listed_call {
  const char *address;
  bool listed;
  const char *domain;
  bool changed;
};

static void listed_set(struct rampart_engine *e, void *arg)
{
  struct listed_call *c = arg;
  struct server *s = server_set_find(e, c->address);
  c->changed = s && s->unlisted == c->listed;
  if (s) {
    s->unlisted = !c->listed;
    placement_domains_set(e, s, c->domain);
  }
}

bool server_membership_set_listed(struct rampart_engine *e, const char *address, bool listed,
                                  const char *domain)
{
  struct listed_call c = { .address = address, .listed = listed, .domain = domain };
  engine_call(e, listed_set, &c);
  return c.changed;
}

/* ---- reload ------------------------------------------------------------------------------ */

struct members_call {
  char (*addresses)[RAMPART_ADDRESS_LEN];
  bool *removing;
  unsigned n;
};

static void members_snapshot(struct rampart_engine *e, void *arg)
{
  struct members_call *c = arg;
  c->n = 0;
  for (unsigned i = 0; i < e->set.nservers && c->n < ENGINE_MAX_INCARNATIONS; i++) {
    const struct server *s = e->set.servers[i];
    if (s->health.replaced || s->state == RAMPART_SERVER_REMOVED)
      continue;
    snprintf(c->addresses[c->n], RAMPART_ADDRESS_LEN, "%s", s->address);
    c->removing[c->n++] = s->remove_when_drained;
  }
}

static bool listed(char (*list)[RAMPART_ADDRESS_LEN], unsigned n, const char *address)
{
  for (unsigned i = 0; i < n; i++)
    if (strcmp(list[i], address) == 0)
      return true;
  return false;
}

static int member_index(const struct members_call *c, const char *address)
{
  for (unsigned i = 0; i < c->n; i++)
    if (strcmp(c->addresses[i], address) == 0)
      return (int)i;
  return -1;
}

static void reload_count(int rc, unsigned *ok, unsigned *failed, int *result)
{
  if (rc < 0) {
    (*failed)++;
    if (*result == 0)
      *result = rc;
  } else {
    (*ok)++;
  }
}

/* Appends "\n" and one command's message to the reload's. */
static void msg_append(char *msg, size_t len, const char *line)
{
  size_t n = strlen(msg);
  if (n + 1 < len)
    snprintf(msg + n, len - n, "%s%s", n ? "\n" : "", line);
}

int rampart_cluster_reload(struct rampart_engine *e, char *msg, size_t msglen)
{
  if (e->config.etcd_cluster[0]) {
    rp_msgf(msg, msglen,
            "this device follows cluster %s in etcd (cluster=etcd://...): it "
            "adds and removes servers as the registry changes, with no file to reload",
            e->config.etcd_cluster);
    return -EINVAL;
  }
  if (!e->config.cluster_path[0]) {
    rp_msgf(msg, msglen,
            "this device lists its servers with servers=, not cluster=FILE: "
            "there is no file to reload; use add and remove");
    return -EINVAL;
  }
  struct rampart_config *file = rampart_config_new();
  struct members_call now = {
    .addresses = calloc(ENGINE_MAX_INCARNATIONS, RAMPART_ADDRESS_LEN),
    .removing = calloc(ENGINE_MAX_INCARNATIONS, sizeof(bool)),
  };
  int result = 0;
  if (!file || !now.addresses || !now.removing) {
    rp_msgf(msg, msglen, "out of memory to reload the cluster file: nothing changed");
    result = -ENOMEM;
    goto out;
  }
  char err[512];
  if (config_read_cluster_file(file, e->config.cluster_path, err, sizeof err) < 0) {
    rp_msgf(msg, msglen, "%s: fix the file and reload again; nothing changed", err);
    result = -EINVAL;
    goto out;
  }
  engine_call(e, members_snapshot, &now);
  msg[0] = '\0';
  unsigned added = 0, removed = 0, failed = 0;
  char line[1024];
  /* Adds first: a removal may need the room a new server brings. */
  for (unsigned i = 0; i < file->nservers; i++) {
    /* Listed and being removed: the add takes it back (it cancels the drain). */
    int at = member_index(&now, file->servers[i]);
    if (at >= 0 && !now.removing[at])
      continue;
    int rc = rampart_server_add(e, file->servers[i], line, sizeof line);
    msg_append(msg, msglen, line);
    reload_count(rc, &added, &failed, &result);
  }
  for (unsigned i = 0; i < now.n; i++) {
    if (now.removing[i] || listed(file->servers, file->nservers, now.addresses[i]))
      continue;
    int rc = rampart_server_drain(e, now.addresses[i], true, line, sizeof line);
    msg_append(msg, msglen, line);
    reload_count(rc, &removed, &failed, &result);
  }
  snprintf(line, sizeof line,
           "reload of %.512s: %u added, %u being removed, %u refused or "
           "failed%s",
           e->config.cluster_path, added, removed, failed,
           added + removed + failed == 0 ? " (the file matches the device's servers)" : "");
  msg_append(msg, msglen, line);
out:
  free(now.addresses);
  free(now.removing);
  rampart_config_free(file);
  return result;
}
