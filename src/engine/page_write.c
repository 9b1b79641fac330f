/* Writing a page: parity logging (docs/engine.md, "Paths").
 *
 * A page is never bound to a place. Each write takes the next member of the open group
 * on the next server round-robin, is XORed into the group's parity buffer, and marks
 * the page's previous version inactive in whatever group held it. After S members the
 * parity goes to the group's parity server and the group is sealed. Mirror is the same
 * with S = 1 (the "parity" of one page is its copy); none and write-through have no
 * parity. When no server can take a page, it goes to the spill store.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "crash_point.h"
#include "engine_core.h"
#include "log.h"
#include "page_mover.h"
#include "page_write.h"
#include "page_op.h"
#include "page_store_ops.h"
#include "page_write_pending.h"
#include "placement_domains.h"
#include "server_health.h"
#include "server_set.h"
#include "server_transport.h"
#include "state_record.h"

static void write_finish(struct page_op *op, int result)
{
  struct rampart_engine *e = op->engine;
  if (op->pending > 0) {
    /* A sub-request is still out (a mirror copy sent before its member failed): the op
     * is the owner of that request's completion, so it ends with the last of them
     * (sub_done), never before. */
    page_op_enter(op, PAGE_OP_ENDING);
    if (result < 0 && op->end_result == 0)
      op->end_result = result;
    return;
  }
  page_write_pending_ended(e, op->page,
                           op->placed && page_map_get(&e->map, op->page) == op->placed);
  page_op_finished(op, result);
}

/* A new version of the page (or a trim) makes the versions a dead process's writes
 * replaced, kept for a fallback, pointless: they go (state_record.c). */
static void release_kept_versions(struct rampart_engine *e, uint64_t page)
{
  struct recovered_write *w;
  uint32_t from = 0;
  while ((w = state_record_drop_kept(e, page, &from)))
    if (w->installed)
      page_write_release_version(e, w->old_entry, true);
}

void page_write_op_recycled(struct page_op *op)
{
  page_entry old;
  if (state_record_op_ended(op, &old))
    page_write_retire(op->engine, old);
}

/* With state=, the version a write replaces stays until the op ends: if the pager dies
 * first, a restart may need it (state_record.c). Recorded before anything names the
 * new version. True when the version the map names now is to be kept. */
static bool record_replaced_version(struct page_op *op, page_entry entry)
{
  struct rampart_engine *e = op->engine;
  if (!e->state || page_map_get(&e->map, op->page) == entry)
    return false;
  if (e->nrecovered_writes)
    release_kept_versions(e, op->page);
  return state_record_keep_replaced(op, entry);
}

/* This write's version becomes the page's current one. The map entry and the seal
 * change together, so a read that starts later pairs the right seal with the right
 * bytes. Moves keep the seal: they copy the same sealed bytes elsewhere. keep: what
 * record_replaced_version said. */
static void install_recorded_version(struct page_op *op, page_entry entry, bool keep)
{
  struct rampart_engine *e = op->engine;
  if (op->kind == PAGE_OP_WRITE)
    page_seal_set(&e->sealer, op->page, &op->seal);
  page_entry old = page_map_set(&e->map, op->page, entry);
  state_record_installed(op, entry);
  if (old != entry && !keep)
    page_write_retire(e, old);
}

static void install_version(struct page_op *op, page_entry entry)
{
  install_recorded_version(op, entry, record_replaced_version(op, entry));
}

/* ---- reclaim and retire -------------------------------------------------------------- */

/* Gives back the slots of a group's parities (P, and Q under parity=2) and forgets them. */
static void release_parity_slots(struct rampart_engine *e, struct group *g)
{
  for (unsigned j = 0; j < g->parities; j++) {
    unsigned k = g->capacity + j;
    if (g->server[k] != SERVER_INDEX_NONE)
      server_release_slot(e, g->server[k], g->slot[k]);
    g->server[k] = SERVER_INDEX_NONE;
  }
}

void page_write_reclaim(struct rampart_engine *e, uint32_t id)
{
  struct group *g = group_get(&e->groups, id);
  for (unsigned m = 0; m < g->members; m++)
    if (g->server[m] != SERVER_INDEX_NONE)
      server_release_slot(e, g->server[m], g->slot[m]);
  if (g->has_parity)
    release_parity_slots(e, g);
  group_release(&e->groups, id);
}

void page_write_retire(struct rampart_engine *e, page_entry old)
{
  page_write_release_version(e, old, false);
}

/* ---- where the page lived: each store's release (page_store_ops.h) ----------------- */

void page_store_zero_release(struct rampart_engine *e, page_entry old, bool pinned)
{
  (void)e, (void)old, (void)pinned;
}

void page_store_remote_release(struct rampart_engine *e, page_entry old, bool pinned)
{
  uint32_t id = (uint32_t)page_entry_group(old);
  unsigned m = page_entry_member(old);
  struct group *g = group_get(&e->groups, id);
  if (pinned)
    g->pins--;
  else
    group_member_dead(&e->groups, id, m);
  if (group_is_reclaimable(g))
    page_write_reclaim(e, id);
}

void page_store_spill_release(struct rampart_engine *e, page_entry old, bool pinned)
{
  (void)pinned;
  /* Write-through keeps page N at slot N for good; the lost marker has no slot. */
  if (old != PAGE_ENTRY_LOST && !e->redundancy->disk_copy)
    spill_quarantine_free(&e->quarantine, (uint32_t)page_entry_slot_of(old));
}

void page_store_local_release(struct rampart_engine *e, page_entry old, bool pinned)
{
  (void)pinned;
  slot_allocator_release(&e->local.slots, (uint32_t)page_entry_slot_of(old));
}

void page_write_release_version(struct rampart_engine *e, page_entry old, bool pinned)
{
  page_store_of(old)->release(e, old, pinned);
}

void page_write_supersede(struct rampart_engine *e, uint64_t page, page_entry entry)
{
  if (e->nrecovered_writes)
    release_kept_versions(e, page);
  page_write_retire(e, page_map_set(&e->map, page, entry));
}

void page_write_trim(struct rampart_engine *e, uint64_t page)
{
  page_write_supersede(e, page, 0);
  /* Zeros have nothing to land. A write of the page still in flight no longer names the
   * map's version, so its end would leave the bit set, and a read would wait for a
   * write that is not there (page_write_pending.c); one placed again sets it again. */
  page_write_pending_clear(e, page);
}

/* ---- parity buffers and sealing ---------------------------------------------------------- */

void parity_buffer_use_page(struct rampart_engine *e, struct parity_buffer *pb,
                            unsigned current)
{
  uint8_t *pages = e->parity_pages + (size_t)(pb - e->parity) * 2 * RAMPART_PAGE_SIZE;
  pb->current = current;
  pb->page = pages + (size_t)current * RAMPART_PAGE_SIZE;
  pb->spare = pages + (size_t)(current ^ 1u) * RAMPART_PAGE_SIZE;
  if (e->parity_q_pages) {
    uint8_t *q = e->parity_q_pages + (size_t)(pb - e->parity) * 2 * RAMPART_PAGE_SIZE;
    pb->q_page = q + (size_t)current * RAMPART_PAGE_SIZE;
    pb->q_spare = q + (size_t)(current ^ 1u) * RAMPART_PAGE_SIZE;
  }
}

/* The steps of a member write a test may crash at (crash_point.h), for a first placement
 * and for a retry (a placement made after the op's first one failed). */
enum member_write_step {
  STEP_RECORDED,
  STEP_PARITY_COMPUTED,
  STEP_PARITY_PUBLISHED,
  STEP_JOINED
};

static void member_write_crash_point(bool retry, enum member_write_step step)
{
  static const char *const names[2][4] = {
    { "member-recorded", "parity-computed", "parity-published", "member-joined" },
    { "retry-member-recorded", "retry-parity-computed", "retry-parity-published",
      "retry-member-joined" },
  };
  crash_point(names[retry][step]);
}

/* XORs a member's bytes into the group's parity: computed into the spare page, which
 * then becomes the parity by one published store, so the parity in the state is whole
 * at every instant a crash can pick (state_segment.h). `covered`: members it holds then. */
static void parity_buffer_add(struct rampart_engine *e, struct parity_buffer *pb,
                              const uint8_t *member, unsigned covered, bool retry)
{
  parity_xor_pages(pb->spare, pb->page, member);
  if (e->parities > 1) {
    memcpy(pb->q_spare, pb->q_page, RAMPART_PAGE_SIZE);
    parity_code_q_add(pb->q_spare, covered - 1u, member);
  }
  member_write_crash_point(retry, STEP_PARITY_COMPUTED);
  parity_buffer_use_page(e, pb, pb->current ^ 1u);
  state_record_parity_published(e, (uint16_t)(pb - e->parity), pb->current, covered);
  member_write_crash_point(retry, STEP_PARITY_PUBLISHED);
}

/* A piece of group g whose write failed, its server still there: under parity=2 the
 * group can go on without it while it has a loss to spare (group_mark_absent). False
 * when it cannot: the caller drops the parity. */
static bool piece_may_be_absent(struct rampart_engine *e, uint32_t id, unsigned entry)
{
  struct group *g = group_get(&e->groups, id);
  if (g->parities < 2 || !g->has_parity)
    return false;
  unsigned gone = 0;
  for (unsigned k = 0; k < GROUP_MAX_DATA + GROUP_MAX_PARITY; k++)
    gone += group_piece_absent(g, k) && k != entry;
  if (gone + 1u >= g->parities)
    return false; /* the last spare: the group is unprotected instead, and moved */
  group_mark_absent(&e->groups, id, entry);
  return true;
}

static void parity_buffer_put(struct rampart_engine *e, struct parity_buffer *pb)
{
  pb->next = e->free_parity;
  e->free_parity = pb;
  page_op_run_waiting(e);
}

static void sub_done(struct page_op *op, int result);

static void on_parity_written(struct rp_request *req)
{
  struct parity_buffer *pb = req->user;
  struct rampart_engine *e = pb->engine;
  uint32_t id = pb->group;
  struct group *g = group_get(&e->groups, id);
  unsigned pserver = g->server[g->capacity + (req == &pb->q_req ? 1u : 0u)];
  bool stored = req->status == RP_OK;
  /* A parity write its server never answered is sent again when the server's session
   * resumes (server_health.c); the group stays SEALING, with its buffer, until then.
   * This comes first: marking the server failed may run ops, and a SEALING group is
   * one they cannot reclaim. */
  if (!stored && server_request_failed(e, pserver, req, true))
    return;
  /* Under parity=2 the group seals once both P and Q are answered. One not stored on a
   * lost server is a piece on a lost server, as a member there is; one not stored on a
   * server still there is absent while the group has a loss to spare. Otherwise the
   * group is unprotected, as one parity not stored makes it under parity=1. */
  if (!stored && g->parities > 1) {
    unsigned entry = g->capacity + (req == &pb->q_req ? 1u : 0u);
    stored = e->set.servers[pserver]->state == RAMPART_SERVER_LOST ||
             piece_may_be_absent(e, id, entry);
  }
  pb->write_failed |= !stored;
  if (--pb->writes_out > 0)
    return;
  stored = !pb->write_failed;
  struct page_op *waiter = pb->waiter;
  pb->waiter = NULL;
  /* The group's own bookkeeping is finished (and the group reclaimed if nothing lives in
   * it) before anything here can run ops that were waiting: marking the server failed and
   * handing back the buffer both may, and such an op can retire this group's last live
   * member, which reclaims it then and there. */
  group_finish_seal(&e->groups, id);
  if (!stored)
    group_drop_parity(&e->groups, id); /* unprotected (counted) until the mover moves it */
  if (!g->has_parity) {
    /* Failed, or a member's copy was lost while the parity was in flight: the parity
     * protects nothing, so its slots go back now. */
    release_parity_slots(e, g);
  }
  /* A mirror write completes once both its copies are stored. If this one was not, and
   * the write still lives in this group, it is placed again (sub_done) on two servers
   * that can take it. */
  page_entry waiter_entry = waiter ? waiter->placed : 0;
  bool copy_lost = waiter && !g->has_parity && page_entry_kind(waiter_entry) == PAGE_REMOTE &&
                   page_entry_group(waiter_entry) == id;
  if (group_is_reclaimable(g))
    page_write_reclaim(e, id);
  parity_buffer_put(e, pb);
  if (waiter) {
    if (copy_lost && waiter->placed == waiter_entry)
      waiter->copy_failed = true; /* (unless it was placed again meanwhile) */
    sub_done(waiter, 0);
  }
}

/* Another server for a parity of group g, when the one reserved at open has failed:
 * any placeable server that holds no member of g and is not `other`, the server of
 * its other parity (SERVER_INDEX_NONE: none). */
static int choose_parity_server(struct rampart_engine *e, const struct group *g,
                                unsigned other)
{
  for (unsigned k = 0; k < e->set.nservers; k++) {
    unsigned i = (e->placement.open_parity_server + k) % e->set.nservers;
    if (!server_usable_for_placement(e->set.servers[i]) || i == other)
      continue;
    bool in_group = false;
    for (unsigned m = 0; m < g->members; m++)
      in_group |= g->server[m] == i;
    if (!in_group)
      return (int)i;
  }
  return -1;
}

/* Sends a SEALING group's parity from its buffer to the server and slot the group names. */
static void submit_parity(struct rampart_engine *e, uint32_t id, struct parity_buffer *pb,
                          struct page_op *waiter)
{
  struct group *g = group_get(&e->groups, id);
  pb->group = id;
  pb->waiter = waiter;
  if (waiter)
    waiter->pending++; /* counted before the submit, which may complete at once */
  /* Both counted before either is sent, for the same reason. */
  pb->writes_out = g->parities;
  pb->write_failed = false;
  struct rp_request *reqs[GROUP_MAX_PARITY] = { &pb->req, &pb->q_req };
  uint8_t *pages[GROUP_MAX_PARITY] = { pb->page, pb->q_page };
  unsigned n = g->parities;
  for (unsigned j = 0; j < n; j++) {
    struct rp_request *req = reqs[j];
    memset(req, 0, sizeof *req);
    req->op = RP_OP_WRITE;
    req->slot = g->slot[g->capacity + j];
    req->page = pages[j];
    req->done = on_parity_written;
    req->user = pb;
    e->counters.wire_bytes_written += RP_HEADER_SIZE + RAMPART_PAGE_SIZE;
  }
  /* The server of each is read before any is sent: a send may complete at once, and
   * the last completion may reclaim the group. */
  unsigned servers[GROUP_MAX_PARITY];
  for (unsigned j = 0; j < n; j++)
    servers[j] = g->server[g->capacity + j];
  for (unsigned j = 0; j < n; j++)
    server_transport_send(e, servers[j], reqs[j]);
}

void page_write_reseal(struct rampart_engine *e, uint32_t id)
{
  submit_parity(e, id, &e->parity[group_get(&e->groups, id)->buffer], NULL);
}

/* waiter: under mirror, the write whose copy this group's "parity" is: it completes only
 * once that copy is stored too (docs/flush.md: a completed mirror write is in two
 * servers' RAM). NULL otherwise: parity-log's open-group parity protects a member from
 * the moment it is XORed into the client's buffer. */
static void seal_open_group(struct rampart_engine *e, struct page_op *waiter)
{
  uint32_t id = e->placement.open_group;
  e->placement.open_group = GROUP_NONE;
  struct group *g = group_get(&e->groups, id);
  /* A group closed early (a server failed, none left to place on) seals with the
   * members it has: the parity covers exactly those. */
  g->capacity = g->members;
  if (!g->has_parity) {
    group_seal_without_parity(&e->groups, id);
    if (group_is_reclaimable(g))
      page_write_reclaim(e, id);
    return;
  }
  struct parity_buffer *pb = &e->parity[g->buffer];
  /* The parities' slots were reserved when the group opened, so a parity server that
   * has since come under pressure or run out of room still takes its page (pressure
   * stops new placements, not the slots a client already holds). Only a server that has
   * failed meanwhile cannot: then any other server that holds no member nor the other
   * parity, if one can. */
  server_index server[GROUP_MAX_PARITY] = { e->placement.open_parity_server,
                                            e->placement.open_q_server };
  int64_t slot[GROUP_MAX_PARITY] = { e->placement.open_parity_slot,
                                     e->placement.open_q_slot };
  bool placed = true;
  for (unsigned j = 0; j < g->parities; j++) {
    if (server_usable_for_reads(e->set.servers[server[j]]))
      continue;
    server_release_slot(e, server[j], (uint32_t)slot[j]);
    unsigned other = g->parities > 1 ? server[j ^ 1u] : SERVER_INDEX_NONE;
    int p = choose_parity_server(e, g, other);
    slot[j] = p >= 0 ? slot_allocator_alloc(&e->set.servers[p]->slots) : -1;
    server[j] = p >= 0 ? (server_index)p : SERVER_INDEX_NONE;
    placed &= slot[j] >= 0;
  }
  if (!placed) {
    /* Nowhere to put a parity: seal unprotected, counted, and the mover rewrites the
     * pages into whole groups as soon as two servers can take them. */
    for (unsigned j = 0; j < g->parities; j++)
      if (slot[j] >= 0)
        server_release_slot(e, server[j], (uint32_t)slot[j]);
    if (waiter)
      waiter->copy_failed = true;
    group_drop_parity(&e->groups, id);
    g->buffer = GROUP_NO_BUFFER;
    group_seal_without_parity(&e->groups, id);
    if (group_is_reclaimable(g))
      page_write_reclaim(e, id);
    parity_buffer_put(e, pb); /* last: it may run waiting ops */
    return;
  }
  uint32_t slots[GROUP_MAX_PARITY] = { (uint32_t)slot[0], (uint32_t)slot[1] };
  group_begin_seal_with(&e->groups, id, server, slots);
  submit_parity(e, id, pb, waiter);
}

/* The slots the open group's parities reserved at open, given back unused. */
static void release_open_parity_slots(struct rampart_engine *e)
{
  server_release_slot(e, e->placement.open_parity_server, e->placement.open_parity_slot);
  if (e->parities > 1)
    server_release_slot(e, e->placement.open_q_server, e->placement.open_q_slot);
}

void page_write_close_open_group(struct rampart_engine *e)
{
  uint32_t id = e->placement.open_group;
  if (id == GROUP_NONE)
    return;
  struct group *g = group_get(&e->groups, id);
  if (g->members == 0) {
    /* Release before handing back the buffer: that restarts waiting writes, which
     * open a group of their own. */
    e->placement.open_group = GROUP_NONE;
    uint16_t buffer = g->buffer;
    bool parity = g->has_parity;
    group_release(&e->groups, id);
    e->groups.reclaimed--; /* never held anything: not a reclaim */
    if (parity) {
      release_open_parity_slots(e);
      parity_buffer_put(e, &e->parity[buffer]);
    }
    return;
  }
  seal_open_group(e, NULL);
}

/* ---- placement ------------------------------------------------------------------------- */

/* The share of its reservation a server has free (0..1): placement keeps the servers
 * equally full, so each holds pages in proportion to what it lends. */
static double room_share(const struct server *s)
{
  return s->reserved_pages
           ? (double)slot_allocator_available(&s->slots) / (double)s->reserved_pages
           : 0.0;
}

enum open_result { OPENED, NO_SERVERS, NO_BUFFER };

/* Rotates a parity server over the placeable servers, as RAID-5 rotates (the next one
 * from the cursor with about the most room, as for members), and takes the parity's
 * slot there now: the group must not find at sealing time that its parity server has
 * come under pressure or filled up. `other`: the group's other parity's server, which
 * this one must not be (SERVER_INDEX_NONE: none). The caller checked that enough
 * servers are placeable. */
static server_index reserve_parity_slot(struct rampart_engine *e, unsigned other,
                                        uint32_t *slot)
{
  double most = 0.0;
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (i != other && server_usable_for_placement(e->set.servers[i]) &&
        room_share(e->set.servers[i]) > most)
      most = room_share(e->set.servers[i]);
  int best = -1;
  for (unsigned k = 0; k < e->set.nservers && best < 0; k++) {
    unsigned i = (e->placement.parity_cursor + k) % e->set.nservers;
    if (i != other && server_usable_for_placement(e->set.servers[i]) &&
        room_share(e->set.servers[i]) >= most * 7.0 / 8.0)
      best = (int)i;
  }
  e->placement.parity_cursor = (unsigned)best + 1;
  *slot = (uint32_t)slot_allocator_alloc(&e->set.servers[best]->slots);
  return (server_index)best;
}

static enum open_result open_new_group(struct rampart_engine *e)
{
  unsigned usable = server_set_placeable(e);
  bool parity = e->redundancy->parity;
  if (usable < engine_servers_needed(e))
    return NO_SERVERS;
  unsigned capacity = e->group_size;
  if (capacity > usable - e->parities)
    capacity = usable - e->parities;
  uint16_t buffer = GROUP_NO_BUFFER;
  if (parity) {
    struct parity_buffer *pb = e->free_parity;
    if (!pb)
      return NO_BUFFER;
    e->free_parity = pb->next;
    memset(pb->page, 0, RAMPART_PAGE_SIZE);
    if (e->parities > 1)
      memset(pb->q_page, 0, RAMPART_PAGE_SIZE);
    buffer = (uint16_t)(pb - e->parity);
    e->placement.open_parity_server = reserve_parity_slot(e, SERVER_INDEX_NONE,
                                                          &e->placement.open_parity_slot);
    if (e->parities > 1)
      e->placement.open_q_server = reserve_parity_slot(e, e->placement.open_parity_server,
                                                       &e->placement.open_q_slot);
  }
  uint32_t id = group_open_with(&e->groups, capacity, e->parities, buffer);
  if (id == GROUP_NONE) {
    if (parity) {
      release_open_parity_slots(e);
      parity_buffer_put(e, &e->parity[buffer]);
    }
    return NO_SERVERS;
  }
  if (e->parities > 1) {
    struct group *g = group_get(&e->groups, id);
    g->slot[GROUP_Q_RESERVED] = e->placement.open_q_slot;
    atomic_signal_fence(memory_order_release); /* a restart finds a whole entry */
    g->server[GROUP_Q_RESERVED] = e->placement.open_q_server;
  }
  e->placement.open_group = id;
  e->placement.open_spread = placement_domains_spread(e, group_get(&e->groups, id));
  state_record_group_opened(e, id);
  return OPENED;
}

/* Whether server i may take a member of group g now. */
static bool member_candidate(const struct rampart_engine *e, const struct group *g,
                             unsigned i)
{
  if (!server_usable_for_placement(e->set.servers[i]))
    return false;
  if (g->has_parity && i == e->placement.open_parity_server)
    return false;
  if (g->parities > 1 && i == e->placement.open_q_server)
    return false;
  if (e->placement.open_spread && !placement_domain_has_room(e, g, i))
    return false;
  for (unsigned m = 0; m < g->members; m++)
    if (g->server[m] == i)
      return false;
  return true;
}

/* New pages go where there is room, in the order placement_order.c shuffles per sweep
 * (so a server's groups spread over the whole cluster): the first candidate of the sweep
 * whose free share of its reservation is within an eighth of the largest any candidate
 * has. Servers about as full as each other take turns in random order, each in
 * proportion to what it lends; a server much emptier than the rest (one added to a
 * running device) takes a member of every group until it is level with them. */
static int choose_member_server(struct rampart_engine *e, const struct group *g)
{
  placement_order_begin(&e->placement.member_order, e->set.nservers);
  double most = -1.0;
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (member_candidate(e, g, i) && room_share(e->set.servers[i]) > most)
      most = room_share(e->set.servers[i]);
  if (most < 0)
    return -1;
  for (unsigned k = 0; k < e->set.nservers; k++) {
    unsigned i = placement_order_candidate(&e->placement.member_order, k);
    if (member_candidate(e, g, i) && room_share(e->set.servers[i]) >= most * 7.0 / 8.0) {
      placement_order_taken(&e->placement.member_order, k);
      return (int)i;
    }
  }
  return -1; /* not reached: the server with the most room is a candidate */
}

static void on_member_written(struct rp_request *req);

/* No server can take the page now. The spill store is for lost and full servers, not for
 * a blip: while some server is only reconnecting, the write waits for the servers
 * (server_health.c). A write waits out a blip only: once the servers that are
 * away have been out for timeout= while others are up (and cannot take it: full,
 * advised), it goes to the spill store, as it would in a full cluster, and the mover
 * brings it back. Waiting io-timeout= (the lease by default) instead would stall every
 * write for as long as one server's partition lasts, when the others are full.
 * When every server is away it waits io-timeout=, the operator's bound for an outage;
 * and so it does with no room on disk, where failing it with ENOSPC would be worse.
 * Moves too: cleaning that waits holds back every write (writes_wait_for_cleaning), and
 * a cleaned page spilled frees its old group's slots. True when it waits.
 * A waiting write holds a pending count, as every wait here does: a mirror write whose
 * first copy was refused waits with its second copy still in flight, and that copy's
 * answer must not end the op while it sits on the wait list (it did: the op was then
 * restarted from the list after it had completed, or appended to it twice, which cut
 * off every op behind it). */
static bool write_waits_for_servers(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  if (!server_health_any_reconnecting(e))
    return false;
  bool spill_has_room = e->spill &&
                        spill_store_used(e->spill) < spill_store_capacity(e->spill);
  if (spill_has_room && server_health_partial_outage_past_blip(e))
    return false;
  return server_health_park(e, op);
}

/* To the servers: places the op's page as a member of the open group and sends it.
 * Returns false when no server can take it, true when sent or queued to wait. */
static bool write_to_remote(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  for (int attempt = 0; attempt < 2; attempt++) {
    if (e->placement.open_group == GROUP_NONE && op->kind == PAGE_OP_WRITE &&
        page_mover_should_throttle(e)) {
      /* Cleaning is far behind the overwrite rate: hold new writes until moves free
       * slots, as a log-structured store blocks writers when clean segments run out. */
      e->counters.writes_waited_for_cleaning += !op->waited_for_cleaning;
      op->waited_for_cleaning = true;
      page_op_wait(e, op, PAGE_OP_WAITS_FOR_CLEANING);
      return true;
    }
    if (e->placement.open_group == GROUP_NONE) {
      enum open_result r = open_new_group(e);
      if (r == NO_BUFFER) {
        page_op_wait(e, op, PAGE_OP_WAITS_FOR_BUFFER);
        return true;
      }
      if (r == NO_SERVERS)
        return false;
    }
    struct group *g = group_get(&e->groups, e->placement.open_group);
    int server = choose_member_server(e, g);
    if (server < 0) {
      /* Fewer fit servers than when the group opened: close it and try a new one. */
      page_write_close_open_group(e);
      continue;
    }
    int64_t slot = slot_allocator_alloc(&e->set.servers[server]->slots);
    uint32_t id = e->placement.open_group;
    /* In this order, so a pager killed between any two steps leaves a state a restart
     * takes over whole (engine_restore.c): the write is recorded (its bytes are in the
     * state), its XOR is published, the member joins, and only then does the map name
     * it. A member whose parity covers it always has its bytes kept to send again. */
    bool keep = record_replaced_version(op, page_entry_remote(id, g->members));
    bool retry = e->state && !keep; /* with state=, only a retry keeps nothing */
    member_write_crash_point(retry, STEP_RECORDED);
    if (g->has_parity)
      parity_buffer_add(e, &e->parity[g->buffer], op->buf, g->members + 1u, retry);
    unsigned m = group_add_member(&e->groups, id, (server_index)server, (uint32_t)slot,
                                  (uint32_t)op->page);
    member_write_crash_point(retry, STEP_JOINED);
    g->pins++; /* until the write's outcome is known (on_member_written) */
    op->placed = page_entry_remote(id, m);
    op->copy_failed = false; /* a failed copy of an earlier placement says nothing of this */
    page_write_pending_set(e, op->page);
    install_recorded_version(op, op->placed, keep);

    memset(&op->req, 0, sizeof op->req);
    op->req.op = RP_OP_WRITE;
    op->req.slot = (uint64_t)slot;
    op->req.page = op->buf;
    op->req.done = on_member_written;
    op->req.user = op;
    op->server = (server_index)server; /* for failure handling */
    if (op->kind == PAGE_OP_MOVE)
      op->expected = op->placed; /* a retry must find the map still pointing here */
    op->pending++;
    e->counters.pages_written++;
    e->counters.wire_bytes_written += RP_HEADER_SIZE + RAMPART_PAGE_SIZE;
    e->counters.clean_rewrites += op->move_cleans;
    if (group_is_full(g))
      seal_open_group(e, e->redundancy->write_waits_for_parity ? op : NULL);
    server_transport_send(e, (unsigned)server, &op->req);
    return true;
  }
  return false;
}

static void write_to_spill(struct page_op *op);

/* The page's copy did not reach a server: place it again, the buffer still being ours
 * until the op completes; failing that, write-through's disk copy is the page, else the
 * spill store takes it. */
static void place_again(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  if (write_to_remote(op))
    return;
  if (e->redundancy->disk_copy) {
    /* The disk copy written alongside is now the page. */
    op->placed = page_entry_slot(PAGE_SPILL, op->page);
    install_version(op, op->placed);
    op->pending++;
    sub_done(op, 0);
  } else if (!write_waits_for_servers(op)) {
    write_to_spill(op);
  }
}

static void sub_done(struct page_op *op, int result)
{
  if (result < 0)
    op->failed = true;
  if (--op->pending > 0)
    return;
  if (op->stage == PAGE_OP_ENDING) {
    write_finish(op, op->end_result);
    return;
  }
  if (op->copy_failed) {
    /* Mirror: its first copy is stored but its second is not. Unless the page has been
     * rewritten meanwhile, it goes again into a new group, both copies on servers that
     * can take them, and completes when those are stored. */
    op->copy_failed = false;
    if (!op->failed && page_map_get(&op->engine->map, op->page) == op->placed) {
      place_again(op);
      return;
    }
  }
  write_finish(op, op->failed ? -EIO : 0);
}

/* A member of group `id` never reached its server. The group's parity covers bytes no
 * server holds, so it can rebuild none of its other members: it is unprotected from now
 * (counted, and the mover rewrites its live pages into whole groups), whether or not the
 * page itself is placed again. Under parity=2 Q stands in for the member while the
 * group has a loss to spare: the member is absent, and the group moved all the same. */
void page_write_member_lost(struct rampart_engine *e, uint32_t id, unsigned member)
{
  struct group *g = group_get(&e->groups, id);
  if (!g->has_parity)
    return;
  if (id == e->placement.open_group)
    page_write_close_open_group(e); /* no more members into a group that is not whole */
  if (!g->has_parity)
    return; /* it sealed without parity: already unprotected */
  if (piece_may_be_absent(e, id, member))
    return;
  bool parity_stored = g->state == GROUP_SEALED;
  group_drop_parity(&e->groups, id);
  if (parity_stored)
    release_parity_slots(e, g);
  /* else its parity writes are in flight: on_parity_written releases the slots */
}

static void group_unpin(struct rampart_engine *e, uint32_t id)
{
  struct group *g = group_get(&e->groups, id);
  g->pins--;
  if (group_is_reclaimable(g))
    page_write_reclaim(e, id);
}

static void on_member_written(struct rp_request *req)
{
  struct page_op *op = req->user;
  struct rampart_engine *e = op->engine;
  uint32_t id = (uint32_t)page_entry_group(op->placed);
  if (req->status == RP_OK) {
    group_unpin(e, id);
    sub_done(op, 0);
    return;
  }
  /* A write its server never answered waits for the server's session to resume and is
   * sent again there (the pin holds the group meanwhile). Under write-through the disk
   * copy is already the page, so the write does not wait: it goes elsewhere or ends
   * with that copy. */
  bool may_wait = e->redundancy->unanswered_write_waits;
  if (server_request_failed(e, op->server, req, may_wait))
    return;
  /* Not stored, or not known to be. A lost server's slots are gone, and the group's
   * parity rebuilds exactly the bytes meant for this one; a server still there holds in
   * that slot what it held before, or maybe this, which the parity does not match. */
  if (e->set.servers[op->server]->state != RAMPART_SERVER_LOST)
    page_write_member_lost(e, id, page_entry_member(op->placed));
  group_unpin(e, id);
  /* The member's server failed before storing it. If the page has not been rewritten
   * meanwhile, place it again: the caller's buffer is still ours until we complete. (The
   * pin kept the group from being reclaimed and its id reused, so op->placed cannot
   * name some later version by accident.) */
  if (page_map_get(&e->map, op->page) != op->placed) {
    sub_done(op, 0);
    return;
  }
  op->pending--;
  place_again(op);
}

/* ---- spill and local ------------------------------------------------------------------- */

/* Every spill write is counted by the quarantine until it completes: a slot this write
 * goes to may be retired while it is in flight (the page rewritten or trimmed), and must
 * not be given to another page until the write has landed (spill_quarantine.h). */
static void submit_spill(struct page_op *op, uint64_t slot, spill_io_done_fn done)
{
  struct rampart_engine *e = op->engine;
  op->sio = (struct spill_io){
    .write = true, .slot = slot, .page = op->buf, .done = done, .user = op
  };
  op->pending++;
  op->spill_epoch = (uint8_t)spill_quarantine_io_started(&e->quarantine);
  spill_store_submit(e->spill, &op->sio);
}

static void on_spill_written(struct spill_io *sio)
{
  struct page_op *op = sio->user;
  spill_quarantine_io_done(&op->engine->quarantine, op->spill_epoch);
  if (sio->result < 0)
    rp_log(RP_LOG_ERROR, "spill store write of page %llu failed: %s",
           (unsigned long long)op->page, strerror(-sio->result));
  sub_done(op, sio->result);
}

static void submit_spill_write(struct page_op *op, uint64_t slot)
{
  submit_spill(op, slot, on_spill_written);
}

/* A move's copy in the spill store becomes the page only once it is on disk: until
 * then readers keep using the old copy, which the move has pinned. */
static void on_move_spilled(struct spill_io *sio)
{
  struct page_op *op = sio->user;
  struct rampart_engine *e = op->engine;
  spill_quarantine_io_done(&e->quarantine, op->spill_epoch);
  if (sio->result == 0 && page_map_get(&e->map, op->page) == op->expected) {
    page_write_supersede(e, op->page, page_entry_slot(PAGE_SPILL, sio->slot));
    /* The map names bytes that have landed, and no write of the page is placed (one
     * would have changed the map). The move may have set the bit when it was placed
     * first (a member write that failed, then no server to place it again): its end
     * will not clear it, the map no longer naming that placement. */
    page_write_pending_clear(e, op->page);
  } else {
    spill_store_free_slot(e->spill, sio->slot);
  }
  sub_done(op, sio->result);
}

/* To the spill store, the last a write can go to, so it always takes the op: one it
 * has no room for ends with ENOSPC. */
static void write_to_spill(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  if (!e->spill) {
    write_finish(op, -ENOSPC);
    return;
  }
  uint64_t slot;
  if (e->redundancy->disk_copy) {
    slot = op->page;
  } else {
    /* A fresh slot for every version, never an overwrite in place: each version then has
     * its own map entry, which is how a move racing a write tells them apart. */
    int64_t s = spill_store_alloc_slot(e->spill);
    if (s < 0) {
      rp_log(RP_LOG_ERROR,
             "no server and no spill space left for page %llu: add servers "
             "or a larger spill-size=",
             (unsigned long long)op->page);
      write_finish(op, -ENOSPC);
      return;
    }
    slot = (uint64_t)s;
  }
  if (op->kind == PAGE_OP_MOVE && !e->redundancy->disk_copy) {
    e->counters.clean_rewrites += op->move_cleans;
    submit_spill(op, slot, on_move_spilled);
    return;
  }
  page_entry now = page_entry_slot(PAGE_SPILL, slot);
  install_version(op, now);
  op->placed = now;
  page_write_pending_set(e, op->page);
  submit_spill_write(op, slot);
}

/* To local RAM (a device with no servers): a page already there is overwritten in its
 * own slot; a new one takes a free slot, or false: the store is full. */
static bool write_to_local(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  page_entry old = page_map_get(&e->map, op->page);
  uint64_t slot;
  if (page_entry_kind(old) == PAGE_LOCAL) {
    slot = page_entry_slot_of(old);
  } else {
    int64_t s = slot_allocator_alloc(&e->local.slots);
    if (s < 0)
      return false;
    slot = (uint64_t)s;
  }
  install_version(op, page_entry_slot(PAGE_LOCAL, slot));
  memcpy(local_store_page(&e->local, slot), op->buf, RAMPART_PAGE_SIZE);
  write_finish(op, 0);
  return true;
}

/* ---- entry point -------------------------------------------------------------------------- */

void page_write_start(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  bool first = op->stage == PAGE_OP_FREE;
  page_op_enter(op, PAGE_OP_WRITING);
  if (first && op->kind == PAGE_OP_WRITE) {
    /* Counted once per write, at its start: placed again or waiting, it is one. */
    e->counters.frontend_pages_started++;
    e->counters.pages_overwritten += page_map_get(&e->map, op->page) != 0;
  }
  if (op->kind == PAGE_OP_MOVE && page_map_get(&e->map, op->page) != op->expected) {
    write_finish(op, 0); /* rewritten or trimmed meanwhile: nothing left to move */
    return;
  }
  bool wt = e->redundancy->disk_copy;
  /* A move under write-through leaves the disk copy alone: it already holds the page. */
  if (wt && !op->disk_started && op->kind != PAGE_OP_MOVE) {
    /* Count the disk copy before placing, so a synchronous remote failure cannot finish
     * the op while the disk write is still in flight. */
    op->disk_started = true;
    /* Pending from now, not from placement: the disk copy is rewritten in place, and
     * if placing waits (no buffer, cleaning behind) the map still names the old version
     * while its disk bytes are already being replaced. The mover must leave it alone. */
    page_write_pending_set(e, op->page);
    submit_spill_write(op, op->page); /* the page at its own slot, rewritten in place */
  }
  /* Local RAM on a device with no servers (a standalone RAM disk), else the servers. */
  if (e->set.nservers == 0 ? write_to_local(op) : write_to_remote(op))
    return;
  if (wt) {
    /* No server can take it: the disk copy is the page now. */
    op->placed = page_entry_slot(PAGE_SPILL, op->page);
    install_version(op, op->placed);
    /* The op ends when its disk copy does; if that already happened (the op waited
     * meanwhile) or there is none (a move), end it here. */
    if (op->pending == 0)
      write_finish(op, op->failed ? -EIO : 0);
    return;
  }
  /* No server can take it, or local RAM is full: the spill store takes it. (A device
   * with no servers is never write-through, config.c, and has none to wait for.) */
  if (!write_waits_for_servers(op))
    write_to_spill(op);
}
