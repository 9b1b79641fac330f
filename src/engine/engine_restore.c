/* Taking a device over from the pager's state segment (state=; docs/recovery.md): the
 * segment opened at attach, the device taken over when a dead process left it, the
 * segment closed at detach. The record the engine keeps as it runs is
 * state_record.c. Taking over drives the whole engine: the servers' table, their
 * health, the mover, the writes.
 *
 * With state= the page map, the seals, the nonce counter, the parity groups, the server
 * table (addresses, session tokens) and a record of every write in flight live in the
 * pager's state segment (state_segment.c), which outlives the process. A clean close
 * removes it; a crash leaves it, and the next engine opened on it takes the device over:
 *
 *   - every server it had is RECONNECTING, its session resumed with the token the state
 *     kept (server_health.c); a server whose lease ran out comes back empty and is
 *     rebuilt from parity, exactly as when a server restarts under a running pager;
 *   - groups still open or sealing send their parity (again) from the buffer the state
 *     kept, whole whatever instant the kill picked (state_segment.h); one whose buffer
 *     went to another group is sealed without parity, unprotected, and the mover
 *     rewrites its live pages;
 *   - member writes in flight are sent again from the op pages the state kept;
 *   - slot allocators and live counts are worked out again from the groups and the map;
 *   - a write in flight at the crash named its new version in the map before its bytes
 *     landed. The version it replaced was kept (not reclaimed) until the write ended, so
 *     a read of the new one that fails verification falls back to it: old or new, never
 *     anything else, and no server is blamed for a page the crash kept from it.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "engine_core.h"
#include "engine_restore.h"
#include "log.h"
#include "page_mover.h"
#include "page_op.h"
#include "page_write.h"
#include "state_segment.h"
#include "secret.h"
#include "server_health.h"
#include "server_set.h"
#include "server_transport.h"
#include "state_record.h"

/* ---- open ---------------------------------------------------------------------------- */

/* The key material the device key is wrapped under: enckey= if given, else key=. */
static int load_wrapping_material(const struct rampart_engine *e, struct rp_key *master,
                                  char *err, size_t errlen)
{
  const struct rampart_config *c = &e->config;
  master->len = 0;
  const char *path = c->enckey_path[0] ? c->enckey_path : c->key_path;
  if (!path[0])
    return 0;
  char why[512];
  if (rp_key_load(path, master, why, sizeof why) < 0) {
    snprintf(err, errlen, "%s=%s: %s", c->enckey_path[0] ? "enckey" : "key", path, why);
    return -1;
  }
  return 0;
}

int engine_restore_open(struct rampart_engine *e, char *err, size_t errlen)
{
  const struct rampart_config *c = &e->config;
  e->state = calloc(1, sizeof *e->state);
  if (!e->state) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  struct state_segment_fingerprint fp = {
    .pages = e->pages,
    .redundancy = (uint32_t)e->policy,
    .group = e->group_size,
    .encrypt = !c->encrypt_off,
  };
  struct rp_key *master = rp_secret_alloc(sizeof *master);
  if (!master) {
    snprintf(err, errlen, "cannot map a page for the key: %s", strerror(errno));
    return -1;
  }
  uint8_t device_key[PAGE_SEAL_KEY_LEN];
  char note[512];
  int r = load_wrapping_material(e, master, err, errlen);
  if (r == 0)
    r = state_segment_open(e->state, c->state_path, &fp, master->len ? master->bytes : NULL,
                           master->len, device_key, note, sizeof note, err, errlen);
  rp_secret_free(master, sizeof *master);
  if (r < 0) {
    free(e->state);
    e->state = NULL;
    return -1;
  }
  if (note[0])
    rp_log(RP_LOG_WARN, "%s", note);
  struct state_segment *st = e->state;
  e->state_recovered = st->recovered;
  /* The spill file must outlive a crash too: without spill= it gets a name beside the
   * anchor instead of being an unlinked temporary file. */
  if (!e->config.spill_path[0]) {
    int n = snprintf(e->config.spill_path, sizeof e->config.spill_path, "%s.spill",
                     c->state_path);
    if (n < 0 || (size_t)n >= sizeof e->config.spill_path) {
      snprintf(err, errlen,
               "state=%s: too long a path for the spill file beside it "
               "(PATH.spill): give spill= or a shorter state=",
               c->state_path);
      return -1;
    }
    e->spill_named_by_state = true;
  }
  r = page_sealer_init_at(&e->sealer, e->pages, !c->encrypt_off, device_key, st->seals,
                          st->next_version, err, errlen);
  OPENSSL_cleanse(device_key, sizeof device_key);
  if (r < 0)
    return -1;
  page_map_init_at(&e->map, e->pages, st->map);
  struct group_chunk_source source = state_segment_group_chunks(st);
  if (st->recovered)
    r = group_table_adopt(&e->groups, (struct group **)st->chunks, st->nchunks, &source,
                          &e->map);
  else
    r = group_table_init_from(&e->groups, (uint32_t)(e->pages / e->group_size / 4 + 64),
                              &source);
  if (r < 0) {
    snprintf(err, errlen,
             "cannot set up the parity groups in the state: %s (raise "
             "LimitMEMLOCK= or kernel.shmall)",
             strerror(errno));
    return -1;
  }
  if (st->recovered)
    rp_log(RP_LOG_INFO, "state %s: taking over the device as the pager left it (attach %llu)",
           c->state_path, (unsigned long long)st->generation);
  return 0;
}

/* ---- the servers' table, whole ---------------------------------------------------- */

void engine_restore_save_servers(struct rampart_engine *e)
{
  struct state_segment *st = e->state;
  if (!st)
    return;
  for (unsigned i = 0; i < e->set.nservers; i++)
    state_record_save_server(e, e->set.servers[i]);
  page_mover_rebuild_record(e, st->rebuild);
}

/* ---- restart -------------------------------------------------------------------------------- */

/* Which page of the parity buffer of a group the dead process left open or sealing
 * holds the XOR of exactly its members, or -1 when neither does (the buffer went to
 * another group). The published page covers them unless the process died after it
 * published a member's XOR and before the member joined the group: then the page
 * before it still covers exactly the members there are. */
static int parity_page_trusted(const struct rampart_engine *e, uint32_t id,
                               const struct group *g)
{
  if (!g->has_parity || g->buffer >= ENGINE_PARITY_BUFFERS)
    return -1;
  const struct state_segment_parity *p = &e->state->parity[g->buffer];
  if (p->group != id)
    return -1;
  unsigned page = STATE_SEGMENT_PARITY_PAGE(p->published);
  unsigned covered = STATE_SEGMENT_PARITY_COVERED(p->published);
  if (covered == g->members)
    return (int)page;
  if (covered == g->members + 1u)
    return (int)(page ^ 1u);
  return -1;
}

/* A group the dead process had not finished. Its parity buffer survived in the state:
 * the open group is sealed short with it, and it and every sealing group send their
 * parity (again) once the sessions resume (engine_restore_recover). One whose buffer
 * cannot be trusted is sealed as it is, without parity, unprotected, so the mover
 * rewrites its live pages into whole groups. in_use marks the parity buffers held. */
static void take_over_unfinished_group(struct rampart_engine *e, uint32_t id, bool *in_use)
{
  struct group *g = group_get(&e->groups, id);
  if (g->state != GROUP_OPEN && g->state != GROUP_SEALING)
    return;
  struct state_segment *st = e->state;
  int page = parity_page_trusted(e, id, g);
  bool trusted = page >= 0 && !in_use[g->buffer];
  if (trusted) {
    parity_buffer_use_page(e, &e->parity[g->buffer], (unsigned)page);
    state_record_parity_published(e, g->buffer, (unsigned)page, g->members);
  }
  if (g->state == GROUP_OPEN && g->members == 0) {
    group_release(&e->groups, id);
    e->groups.reclaimed--; /* never held anything */
    return;
  }
  /* parity=2: Q's slot, reserved when the group opened, is in the group. */
  server_index parity_server[GROUP_MAX_PARITY] = { (server_index)*st->open_parity_server,
                                                   g->server[GROUP_Q_RESERVED] };
  uint32_t parity_slot[GROUP_MAX_PARITY] = { *st->open_parity_slot,
                                             g->slot[GROUP_Q_RESERVED] };
  bool reserved = *st->open_parity_server < e->set.nservers &&
                  (g->parities < 2 || parity_server[1] < e->set.nservers);
  if (g->state == GROUP_OPEN && g->has_parity && trusted && id == *st->open_group &&
      reserved) {
    /* Sealed short at once, its parities to the slots reserved when it opened: every
     * server is only reconnecting now, and a group left open would be closed without
     * parity by the first write that finds no server to place on. */
    g->capacity = g->members;
    group_begin_seal_with(&e->groups, id, parity_server, parity_slot);
    in_use[g->buffer] = true;
    return;
  }
  if (g->state == GROUP_SEALING && trusted) {
    in_use[g->buffer] = true;
    return;
  }
  if (g->has_parity)
    group_drop_parity(&e->groups, id);
  g->buffer = GROUP_NO_BUFFER;
  /* Sealed short, as a group closed early is, with no parity: the entries from
   * capacity on (its parities, Q's reservation) hold no slot counted as used below. */
  for (unsigned k = g->members; k < GROUP_MAX_DATA + GROUP_MAX_PARITY; k++)
    g->server[k] = SERVER_INDEX_NONE;
  g->capacity = g->members;
  g->state = GROUP_SEALED;
}

static void mark_used(uint64_t **used, const struct rampart_engine *e, unsigned server,
                      uint32_t slot)
{
  if (server < e->set.nservers && used[server] &&
      slot < e->set.servers[server]->slots.capacity)
    used[server][slot / 64] |= UINT64_C(1) << (slot % 64);
}

/* Which slots of each server and of the spill store are in use: every slot a group
 * holds, and every spill slot the map or a kept version names. */
static int rebuild_allocators(struct rampart_engine *e)
{
  uint64_t **used = calloc(e->set.nservers + 1u, sizeof *used);
  if (!used)
    return -1;
  int r = 0;
  for (unsigned i = 0; i < e->set.nservers && r == 0; i++) {
    used[i] = calloc(e->set.servers[i]->slots.capacity / 64 + 1, sizeof(uint64_t));
    if (!used[i])
      r = -1;
  }
  for (uint32_t id = 0; id < e->groups.count && r == 0; id++) {
    const struct group *g = group_get(&e->groups, id);
    if (g->state == GROUP_FREE)
      continue;
    for (unsigned m = 0; m < g->members; m++)
      if (g->server[m] != SERVER_INDEX_NONE)
        mark_used(used, e, g->server[m], g->slot[m]);
    for (unsigned j = 0; j < group_parity_count(g); j++)
      if (g->server[g->capacity + j] != SERVER_INDEX_NONE)
        mark_used(used, e, g->server[g->capacity + j], g->slot[g->capacity + j]);
  }
  for (unsigned i = 0; i < e->set.nservers && r == 0; i++)
    slot_allocator_rebuild(&e->set.servers[i]->slots, used[i]);
  for (unsigned i = 0; i < e->set.nservers; i++)
    free(used[i]);
  free(used);
  if (r < 0 || !e->spill || e->redundancy->disk_copy)
    return r; /* write-through claimed every page's disk slot at open */
  for (uint64_t p = 0; p < e->pages; p++) {
    page_entry entry = page_map_get(&e->map, p);
    if (page_entry_kind(entry) == PAGE_SPILL && entry != PAGE_ENTRY_LOST)
      spill_store_claim_slot(e->spill, page_entry_slot_of(entry));
  }
  for (uint32_t i = 0; i < STATE_SEGMENT_WRITES; i++) {
    page_entry old = e->recovered_writes[i].old_entry;
    if (e->recovered_writes[i].kept && page_entry_kind(old) == PAGE_SPILL &&
        old != PAGE_ENTRY_LOST)
      spill_store_claim_slot(e->spill, page_entry_slot_of(old));
  }
  return 0;
}

/* Whether a write record's new version is a member of its group: it joined, and its
 * group's parity covers its bytes, whether or not they reached the server. */
static bool joined_its_group(const struct rampart_engine *e, page_entry entry)
{
  if (page_entry_kind(entry) != PAGE_REMOTE)
    return false;
  const struct group *g = group_get(&e->groups, (uint32_t)page_entry_group(entry));
  return g->state != GROUP_FREE && page_entry_member(entry) < g->members;
}

/* The writes in flight at the crash: each kept version's group stays pinned until the
 * page is read (and falls back or not), moved or written again, or the replay below
 * stores the new version. Their bytes are copied out of the ops' pages in the state.
 * A record is made before its member joins the group and the map changes only after:
 * a write the crash stopped in between never became the page's version (the old one
 * stands, live, with its seal: the new seal is set just before the map), but when its
 * member had joined, its bytes go to the server all the same, since the group's parity
 * covers them. So do a retry's: a placement made after the first one failed joins its
 * group before the map (and then the record) name it.
 * The records stay in the state until they are settled (state_record_settle_recovered),
 * and their ops out of use, so a pager killed again before its replays land finds them
 * again: a record whose page is none of its versions any more (or that says so,
 * old_entry LOST) is only its replays. At most half the ops are withheld, so new
 * requests always have ops: a record past that is taken over all the same, but cleared
 * from the state, as every record was before. */
static int take_over_writes(struct rampart_engine *e)
{
  struct state_segment *st = e->state;
  e->recovered_writes = calloc(STATE_SEGMENT_WRITES, sizeof *e->recovered_writes);
  e->recovered_bytes = malloc((size_t)STATE_SEGMENT_WRITES * RAMPART_PAGE_SIZE);
  if (!e->recovered_writes || !e->recovered_bytes)
    return -1;
  unsigned withheld = 0;
  for (unsigned i = 0; i < STATE_SEGMENT_WRITES; i++) {
    struct state_segment_write *w = &st->writes[i];
    struct recovered_write *rw = &e->recovered_writes[i];
    rw->engine = e;
    rw->bytes = e->recovered_bytes + (size_t)i * RAMPART_PAGE_SIZE;
    if (!w->active)
      continue;
    if (w->page >= e->pages || w->new_entry == w->old_entry) {
      w->active = 0;
      continue;
    }
    page_entry now = page_map_get(&e->map, w->page);
    if (w->old_entry == PAGE_ENTRY_LOST ||
        (now != w->old_entry && now != w->new_entry && now != w->joining)) {
      rw->new_entry = joined_its_group(e, w->new_entry) ? w->new_entry : 0;
      rw->joining = w->joining != w->new_entry && joined_its_group(e, w->joining) ? w->joining
                                                                                  : 0;
      if (!rw->new_entry && !rw->joining) {
        w->active = 0;
        continue;
      }
      w->old_entry = PAGE_ENTRY_LOST;
    } else {
      bool installed = now != w->old_entry;
      if (!installed)
        page_seal_set(&e->sealer, w->page, &w->old_seal);
      page_entry newer = installed && now == w->joining ? w->joining : w->new_entry;
      if (!installed && !joined_its_group(e, newer)) {
        w->active = 0;
        continue;
      }
      rw->joining = installed && w->joining != newer && joined_its_group(e, w->joining)
                      ? w->joining
                      : 0;
      rw->new_entry = newer;
      rw->old_entry = w->old_entry;
      rw->old_seal = w->old_seal;
      rw->kept = true;
      rw->installed = installed;
      e->nrecovered_writes++;
      if (installed && page_entry_kind(w->old_entry) == PAGE_REMOTE)
        group_get(&e->groups, (uint32_t)page_entry_group(w->old_entry))->pins++;
    }
    memcpy(rw->bytes, st->op_pages + (size_t)i * RAMPART_PAGE_SIZE, RAMPART_PAGE_SIZE);
    rw->page = w->page;
    if (withheld >= ENGINE_PAGE_OPS / 2) {
      w->active = 0; /* past the cap: taken over all the same, but off the record */
      continue;
    }
    /* The record names only what this takeover holds: a placement it does not send
     * (never joined, or a failed first placement the map no longer names) may be
     * reclaimed and its group id reused while the record stands. new_entry first: the
     * record stays consistent after either store. */
    w->new_entry = rw->new_entry;
    atomic_signal_fence(memory_order_release);
    w->joining = rw->joining;
    atomic_signal_fence(memory_order_release);
    rw->recorded = true;
    page_op_withhold(e, &e->ops[i]);
    withheld++;
  }
  return 0;
}

/* The answer to a replayed member write `entry` of w: unpins its group and says whether
 * the write is settled (stored, or refused by a server still there, which leaves the
 * group unprotected: its parity covers bytes the server lacks), or waits, pinned, to be
 * sent again once the session resumes (if it never does, reads fall back). Settled, it
 * is one replay fewer of w. */
static bool replay_settled(struct recovered_write *w, struct rp_request *req,
                           page_entry entry)
{
  struct rampart_engine *e = w->engine;
  uint32_t id = (uint32_t)page_entry_group(entry);
  struct group *g = group_get(&e->groups, id);
  g->pins--;
  if (req->status != RP_OK) {
    unsigned server = g->server[page_entry_member(entry)];
    if (server_request_failed(e, server, req, true)) {
      g->pins++;
      return false;
    }
    if (server < e->set.nservers && e->set.servers[server]->state != RAMPART_SERVER_LOST)
      page_write_member_lost(e, id, page_entry_member(entry));
  }
  w->replays--;
  return true;
}

/* What a settled replay of w into group id ends with: the record of w, if only replays
 * were left of it, and the group, if nothing holds it any more. */
static void replay_done(struct recovered_write *w, uint32_t id)
{
  struct rampart_engine *e = w->engine;
  state_record_settle_recovered(e, w);
  if (group_is_reclaimable(group_get(&e->groups, id)))
    page_write_reclaim(e, id);
}

static void on_replayed(struct rp_request *req)
{
  struct recovered_write *w = req->user;
  struct rampart_engine *e = w->engine;
  uint32_t id = (uint32_t)page_entry_group(w->new_entry);
  if (!replay_settled(w, req, w->new_entry))
    return;
  bool stored = req->status == RP_OK;
  if (w->kept && !w->installed) {
    /* The page stays the version the map names. Stored: its group's parity holds again;
     * not: the group is unprotected or its server lost, and rebuilt or moved. Either way
     * nothing of the record is needed, and its group may go once unpinned. */
    state_record_drop_recovered(e, w);
  } else if (stored && w->kept && page_map_get(&e->map, w->page) == w->new_entry) {
    /* The new version is where the map says: the old one is not needed any more. */
    state_record_drop_recovered(e, w);
    page_write_release_version(e, w->old_entry, true);
    e->counters.writes_replayed++;
  }
  replay_done(w, id);
}

/* A retry's placement that joined its group but was never the page's version: its
 * group's parity covers it, so it is stored all the same, and then let go. */
static void on_joining_replayed(struct rp_request *req)
{
  struct recovered_write *w = req->user;
  struct rampart_engine *e = w->engine;
  uint32_t id = (uint32_t)page_entry_group(w->joining);
  if (!replay_settled(w, req, w->joining))
    return;
  /* Out of the record before its group may go: its slot may be reused. */
  if (w->recorded) {
    e->state->writes[w - e->recovered_writes].joining = 0;
    atomic_signal_fence(memory_order_release);
  }
  w->joining = 0;
  replay_done(w, id);
}

/* Sends a recovered write's bytes to member `entry`'s slot, if it joined its group and
 * its server is still named there; the group stays pinned until `done`. */
static bool replay_member_write(struct rampart_engine *e, struct recovered_write *w,
                                page_entry entry, struct rp_request *req,
                                void (*done)(struct rp_request *))
{
  if (!joined_its_group(e, entry))
    return false;
  struct group *g = group_get(&e->groups, (uint32_t)page_entry_group(entry));
  unsigned m = page_entry_member(entry);
  if (g->server[m] == SERVER_INDEX_NONE)
    return false;
  g->pins++;
  w->replays++;
  memset(req, 0, sizeof *req);
  req->op = RP_OP_WRITE;
  req->slot = g->slot[m];
  req->page = w->bytes;
  req->done = done;
  req->user = w;
  server_transport_send(e, g->server[m], req);
  return true;
}

/* Each member write in flight at the crash is sent again from the bytes the state kept,
 * to the slot it was placed in: the group's parity already covers those bytes, so the
 * group is whole again once they are stored, and a degraded read of its other members
 * does not need the one the crash cut off. Queued for the sessions being resumed. */
static unsigned replay_member_writes(struct rampart_engine *e)
{
  unsigned n = 0;
  for (uint32_t i = 0; i < STATE_SEGMENT_WRITES; i++) {
    struct recovered_write *w = &e->recovered_writes[i];
    if (!w->new_entry && !w->joining)
      continue; /* nothing taken over */
    if (w->joining &&
        !replay_member_write(e, w, w->joining, &w->joining_req, on_joining_replayed))
      w->joining = 0;
    if (w->new_entry && replay_member_write(e, w, w->new_entry, &w->req, on_replayed))
      n++;
    if (w->kept && !w->installed && !w->replays)
      state_record_drop_recovered(e,
                                  w); /* the page is the old version, and nothing to send */
    state_record_settle_recovered(e, w); /* only replays were left, and none could be sent */
  }
  return n;
}

int engine_restore_recover(struct rampart_engine *e, char *err, size_t errlen)
{
  struct state_segment *st = e->state;
  unsigned n = *st->nservers;
  if (server_set_pool_new(e, n, err, errlen) < 0)
    return -1;
  for (unsigned i = 0; i < n; i++) {
    /* A copy: server_new saves the new entry over the one it is made from. */
    struct state_segment_server saved = st->servers[i];
    const struct state_segment_server *ps = &saved;
    struct server *s = server_new(e, ps->address, NULL);
    if (!s || slot_allocator_init(&s->slots, (uint32_t)ps->reserved_pages) < 0) {
      snprintf(err, errlen, "out of memory taking over server %s", ps->address);
      return -1;
    }
    memcpy(s->token, ps->token, RP_TOKEN_LEN);
    if (ps->addr_len > 0 && ps->addr_len <= sizeof s->addr) {
      s->addr = ps->addr;
      s->addr_len = ps->addr_len;
    }
    s->reserved_pages = ps->reserved_pages;
    s->suspect = ps->flags & STATE_SEGMENT_SERVER_SUSPECT;
    s->leaving = ps->flags & STATE_SEGMENT_SERVER_LEAVING;
    s->remove_when_drained = ps->flags & STATE_SEGMENT_SERVER_REMOVE_WHEN_DRAINED;
    s->drained = ps->flags & STATE_SEGMENT_SERVER_DRAINED;
    s->health.replaced = ps->flags & STATE_SEGMENT_SERVER_REPLACED;
    s->rebuild_needed = ps->flags & STATE_SEGMENT_SERVER_REBUILD_NEEDED;
    s->state = (enum rampart_server_health)ps->state;
    state_record_save_server(e, s);
  }
  bool buffer_in_use[ENGINE_PARITY_BUFFERS] = { false };
  for (uint32_t id = 0; id < e->groups.count; id++)
    take_over_unfinished_group(e, id, buffer_in_use);
  group_table_count_sealed(&e->groups);
  e->free_parity = NULL;
  for (unsigned b = ENGINE_PARITY_BUFFERS; b-- > 0;)
    if (!buffer_in_use[b]) {
      e->parity[b].next = e->free_parity;
      e->free_parity = &e->parity[b];
    }
  if (take_over_writes(e) < 0 || rebuild_allocators(e) < 0) {
    snprintf(err, errlen, "out of memory taking over the device");
    return -1;
  }
  /* The rebuild record goes on (a rebuild still running is begun again below). */
  page_mover_rebuild_restore(e, st->rebuild);
  unsigned resuming = 0;
  for (unsigned i = 0; i < n; i++) {
    struct server *s = e->set.servers[i];
    if (s->state == RAMPART_SERVER_LOST && s->rebuild_needed)
      page_mover_rebuild_begin(e);
    resuming += server_health_after_restart(e, s);
  }
  unsigned replayed = replay_member_writes(e);
  /* Parity writes the dead process had in flight go again, queued for the sessions
   * being resumed. */
  unsigned resealed = 0;
  for (uint32_t id = 0; id < e->groups.count; id++)
    if (group_get(&e->groups, id)->state == GROUP_SEALING) {
      page_write_reseal(e, id);
      resealed++;
    }
  rp_log(RP_LOG_INFO,
         "took the device over: %llu pages remote, %llu spilled, %u groups "
         "(%u sealing, %u unprotected), %u writes that were in flight (%u sent again), %u "
         "sessions to resume",
         (unsigned long long)e->map.count[PAGE_REMOTE],
         (unsigned long long)e->map.count[PAGE_SPILL], e->groups.in_use, resealed,
         e->groups.unprotected, e->nrecovered_writes, replayed, resuming);
  return 0;
}

/* ---- close ------------------------------------------------------------------------------------ */

void engine_restore_close(struct rampart_engine *e, bool clean)
{
  struct state_segment *st = e->state;
  if (!st)
    return;
  /* The groups' chunks are the state's: the table lets go of them before it goes. */
  if (clean) {
    state_segment_remove(
      st); /* the servers were told GOODBYE: nothing is left to take over */
    if (e->spill_named_by_state)
      unlink(e->config.spill_path);
  } else {
    state_segment_detach(st);
  }
  free(e->recovered_writes);
  free(e->recovered_bytes);
  free(st);
  e->state = NULL;
}
