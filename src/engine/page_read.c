/* Reading a page, and rebuilding it from its group when its server is gone.
 *
 * A degraded read XORs the group's other members with its parity: the parity stored on
 * its server once the group is sealed, or a snapshot of the client's buffer while the
 * group is still open or sealing (members added after the snapshot are left out, since
 * the snapshot does not cover them). Under parity=2 a group spares two pieces: with P or
 * a member gone too, the page comes back from the rest and Q (parity_code.h). Losses
 * past what the group spares fail the read with EIO, counted, never wrong bytes. Under
 * write-through the disk copy answers instead.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine_core.h"
#include "log.h"
#include "page_read.h"
#include "page_op.h"
#include "page_store_ops.h"
#include "page_write.h"
#include "page_write_pending.h"
#include "server_health.h"
#include "server_set.h"
#include "server_transport.h"
#include "state_record.h"

#define VERIFY_RESTARTS 8u /* re-reads after a page changed under a failed check */

static void degraded_start(struct page_op *op, uint32_t id, unsigned lost);
static void read_finish(struct page_op *op, int result);
static void read_from_spill(struct page_op *op, uint64_t slot);

/* The page's server cannot be read now. A read that its group can rebuild at once
 * does so; one that cannot, because a server it needs is only reconnecting, waits for
 * the servers (server_health.c) rather than fail. True when it waits. */
static bool read_waits_for_servers(struct page_op *op, const struct group *g)
{
  struct rampart_engine *e = op->engine;
  bool own_returns = e->set.servers[g->server[op->member]]->state ==
                     RAMPART_SERVER_RECONNECTING;
  /* The group can spare as many pieces as it has parities; this page's own is one. */
  unsigned spare = group_parity_count(g), away = 0, lost = 0;
  if (g->has_parity) {
    unsigned pieces = g->members + (g->state == GROUP_SEALED ? spare : 0u);
    for (unsigned k = 0; k < pieces; k++) {
      if (k == op->member)
        continue;
      unsigned entry = group_piece_entry(g, k);
      server_index srv = g->server[entry];
      if (srv != SERVER_INDEX_NONE && server_usable_for_reads(e->set.servers[srv]) &&
          !group_piece_absent(g, entry))
        continue;
      away++;
      if (srv == SERVER_INDEX_NONE || group_piece_absent(g, entry) ||
          e->set.servers[srv]->state != RAMPART_SERVER_RECONNECTING)
        lost++;
    }
  }
  if (g->has_parity && 1u + away <= spare)
    return false;
  bool piece_returns = away > lost;
  bool worth_it = own_returns || (piece_returns && 1u + lost <= spare);
  return worth_it && server_health_park(e, op);
}

/* A version a dead pager's write never stored (state_record.c) is no server's fault and
 * no lost page: the version before it stands, and the read starts again on that (a move
 * finds the map moved on). True when it fell back. */
static bool fell_back_to_version_before(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  page_entry failed;
  if (!e->nrecovered_writes || !state_record_fall_back(op, &failed))
    return false;
  page_write_retire(e, failed);
  if (op->kind == PAGE_OP_MOVE)
    op->owner->read_ended(op, 0); /* the mover finds the map moved on */
  else
    page_read_start(op);
  return true;
}

/* Also where a version a dead pager's write named but never stored cannot be read at all
 * (its server lost, its group without parity): it falls back as when it fails
 * verification. */
static void read_failed(struct page_op *op, const char *why)
{
  struct rampart_engine *e = op->engine;
  if (fell_back_to_version_before(op))
    return;
  e->counters.read_errors++;
  /* A double loss fails thousands of pages at once: name a few, count the rest (the
   * tick logs the count once a second). */
  if (e->read_errors_logged++ < 10)
    rp_log(RP_LOG_ERROR, "page %llu cannot be read: %s; returning EIO",
           (unsigned long long)op->page, why);
  read_finish(op, -EIO);
}

/* Server `index` returned a copy that failed verification. It is counted against the
 * server, and the first time the server becomes suspect: a server that altered one page
 * may alter others, so it gets no new pages and the mover moves every page that depends
 * on it (data or parity) elsewhere, each verified on the way. It stays suspect until it
 * rejoins empty (a restart), which makes it a new incarnation. */
static void server_failed_verification(struct rampart_engine *e, unsigned index)
{
  struct server *s = e->set.servers[index];
  s->integrity_failures++;
  if (s->suspect)
    return;
  s->suspect = true;
  rp_log(RP_LOG_ERROR,
         "server %s returned a page that failed verification: it is now "
         "suspect; no new pages go there and every page that depends on it moves elsewhere, "
         "verified (restart it to clear this)",
         s->address);
}

/* Whether the copy that failed verification is simply not the page's current version any
 * more: the page was rewritten (or, for a move, moved or trimmed) while it was read. */
static bool copy_was_replaced(const struct page_op *op)
{
  const struct rampart_engine *e = op->engine;
  page_entry now = page_map_get(&e->map, op->page);
  if (op->kind == PAGE_OP_MOVE) /* (a write in flight may be replacing its disk copy) */
    return now != op->expected || page_write_is_pending(e, op->page);
  return now != op->read_entry ||
         page_seal_get(&e->sealer, op->page)->version != op->seal.version ||
         page_write_is_pending(e, op->page) || op->read_while_written;
}

/* The one place where a copy that failed verification is handled, for reads, moves
 * (cleaning, migration) and rebuilds alike: the bytes are not what this client sealed
 * for the page (altered, stale or another page's). Unless the page was replaced meanwhile
 * (then read it again, or for a move there is nothing left to move), that is the store's
 * fault: count it, blame the server it came from (suspect), and rebuild the page from its
 * group (under write-through: read its disk copy). A rebuilt page is verified in turn;
 * one that fails too, or a page with no second copy, is EIO, never wrong bytes, and a
 * move of it ends with op->bad_copies saying how many copies failed, so the mover can
 * tell a page that is gone from one that is only unreachable for now. */
static void copy_failed_verification(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  if (fell_back_to_version_before(op))
    return;
  if (copy_was_replaced(op)) {
    if (op->kind == PAGE_OP_MOVE) {
      op->owner->read_ended(op, 0); /* the mover sees the map moved on, and stops */
      return;
    }
    if (page_write_is_pending(e, op->page) && page_read_waits_for_write(op))
      return;
    if (op->verify_retries < VERIFY_RESTARTS) {
      op->verify_retries++;
      page_read_start(op);
      return;
    }
  }
  e->counters.integrity_failures++;
  op->bad_copies++;
  char why[240];
  if (op->stage == PAGE_OP_REBUILDING) {
    /* Rebuilt from every other piece of its group and still not the page: nothing is
     * left to try, whatever its group could spare. */
    op->bad_copies = (uint8_t)(1u + group_parity_count(group_get(&e->groups, op->group)));
    snprintf(why, sizeof why,
             "rebuilt from its parity group (its own server %s being gone "
             "or having returned it altered) it failed verification too",
             e->set.servers[op->server]->address);
    read_failed(op, why);
    return;
  }
  if (op->read_source == PAGE_REMOTE) {
    struct group *g = group_get(&e->groups, op->group);
    unsigned server = g->server[op->member];
    const char *addr = e->set.servers[server]->address;
    server_failed_verification(e, server);
    if (e->redundancy->second_copy == SECOND_COPY_DISK) {
      /* The disk copy is the second copy: read it, verified like any other. */
      if (e->read_errors_logged++ < 10)
        rp_log(RP_LOG_ERROR,
               "page %llu from server %s failed verification (altered, stale "
               "or misplaced); reading its disk copy",
               (unsigned long long)op->page, addr);
      read_from_spill(op, op->page);
      return;
    }
    if (!g->has_parity) {
      snprintf(why, sizeof why,
               "server %s returned it altered, stale or misplaced (failed "
               "verification) and %s",
               addr, e->redundancy->no_second_copy);
      read_failed(op, why);
      return;
    }
    if (e->read_errors_logged++ < 10)
      rp_log(RP_LOG_ERROR,
             "page %llu from server %s failed verification (altered, stale or "
             "misplaced); rebuilding it from its parity group",
             (unsigned long long)op->page, addr);
    degraded_start(op, op->group, op->member);
    return;
  }
  snprintf(why, sizeof why, "the copy in the %s failed verification (altered or stale)",
           page_stores_by_kind[op->read_source]->name);
  read_failed(op, why);
}

/* Reads decrypt in place. A move copies the sealed bytes as they are, so it checks a
 * copy of them (one GCM open per moved page): the bytes it writes stay sealed, the
 * plaintext never outlives this function, and a corrupt copy is never put under new
 * parity, where it would become the page for good. */
static bool copy_verifies(struct page_op *op)
{
  struct page_sealer *sealer = &op->engine->sealer;
  if (op->kind != PAGE_OP_MOVE)
    return page_unseal(sealer, op->page, &op->seal, op->buf);
  _Alignas(64) uint8_t copy[RAMPART_PAGE_SIZE];
  memcpy(copy, op->buf, sizeof copy);
  bool ok = page_unseal(sealer, op->page, &op->seal, copy);
  explicit_bzero(copy, sizeof copy);
  return ok;
}

static void read_finish(struct page_op *op, int result)
{
  if (result == 0 && op->read_source != PAGE_ZERO && !copy_verifies(op)) {
    copy_failed_verification(op);
    return;
  }
  op->owner->read_ended(op, result);
}

static void on_spill_read(struct spill_io *sio)
{
  struct page_op *op = sio->user;
  spill_quarantine_io_done(&op->engine->quarantine, op->spill_epoch);
  if (sio->result < 0) {
    read_failed(op, "the spill store read failed");
    return;
  }
  read_finish(op, 0);
}

static void read_from_spill(struct page_op *op, uint64_t slot)
{
  op->read_source = PAGE_SPILL; /* write-through may read the disk copy of a remote page */
  op->spill_epoch = (uint8_t)spill_quarantine_io_started(&op->engine->quarantine);
  op->sio = (struct spill_io){
    .write = false, .slot = slot, .page = op->buf, .done = on_spill_read, .user = op
  };
  spill_store_submit(op->engine->spill, &op->sio);
}

/* ---- degraded reads ------------------------------------------------------------------ */

static void degraded_put(struct rampart_engine *e, struct degraded_read *dr)
{
  dr->next = e->free_degraded;
  e->free_degraded = dr;
  page_op_run_waiting(e);
}

static void degraded_complete(struct degraded_read *dr)
{
  struct page_op *op = dr->op;
  struct rampart_engine *e = op->engine;
  struct group *g = group_get(&e->groups, dr->group);
  g->pins--;
  bool failed = dr->failed;
  bool unanswered = dr->unanswered;
  if (!failed && dr->xor_only) {
    memcpy(op->buf, dr->pages, RAMPART_PAGE_SIZE);
    for (unsigned k = 1; k < dr->pieces; k++)
      parity_xor_page(op->buf, dr->pages + (size_t)k * RAMPART_PAGE_SIZE);
  } else if (!failed) {
    const uint8_t *piece[DEGRADED_PIECES];
    for (unsigned k = 0; k < dr->pieces; k++)
      piece[k] = dr->pages + (size_t)k * RAMPART_PAGE_SIZE;
    /* Cannot fail: the pieces are distinct and as many as the members covered. */
    failed = parity_code_recover(dr->covered, dr->piece_id, piece, dr->lost_member, op->buf) <
             0;
  }
  if (!failed)
    e->counters.degraded_reads++;
  if (group_is_reclaimable(g))
    page_write_reclaim(e, dr->group);
  degraded_put(e, dr);
  if (failed && unanswered)
    page_read_start(op); /* a piece's server dropped: wait for it, or fail, from the map */
  else if (failed)
    read_failed(op, "its server and another member of its parity group are both unavailable");
  else
    read_finish(op, 0);
}

static void on_piece_read(struct rp_request *req)
{
  struct degraded_read *dr = req->user;
  struct rampart_engine *e = dr->op->engine;
  if (req->status != RP_OK) {
    dr->failed = true;
    unsigned k = (unsigned)(req - dr->reqs);
    unsigned server = dr->piece_server[k];
    server_request_failed(e, server, req, false);
    /* A server that answered with an error (it refused the read) is reconnecting now,
     * and keeps our pages for its lease: the read starts over from the map and waits
     * for it, io-timeout at most, as for a dropped connection. Failing it instead gave
     * EIO for a page nothing had lost (found by test_page_op_edges). */
    dr->unanswered |= req->status == RP_ERR_DISCONNECTED || req->status == RP_ERR_TIMEOUT ||
                      (server < e->set.nservers &&
                       e->set.servers[server]->state == RAMPART_SERVER_RECONNECTING);
  }
  if (--dr->pending == 0)
    degraded_complete(dr);
}

/* The pieces a degraded read of member `lost` of g can use: every member whose server
 * answers reads, then the parities that answer (from the client's buffers while the
 * group is open or sealing), as many as the members that are missing. Fills dr's
 * piece ids; false, with `why`, when too few are left. */
static bool degraded_choose_pieces(struct rampart_engine *e, const struct group *g,
                                   unsigned lost, struct degraded_read *dr, const char **why)
{
  unsigned missing = 0;
  dr->pieces = 0;
  for (unsigned m = 0; m < g->members; m++) {
    if (m == lost || !server_usable_for_reads(e->set.servers[g->server[m]]) ||
        group_piece_absent(g, m))
      missing++;
    else
      dr->piece_id[dr->pieces++] = (uint8_t)m;
  }
  bool parity_in_client = g->state != GROUP_SEALED;
  unsigned parities = group_parity_count(g), found = 0;
  for (unsigned j = 0; j < parities && found < missing; j++) {
    server_index srv = g->server[g->capacity + j];
    if (parity_in_client ||
        (srv != SERVER_INDEX_NONE && server_usable_for_reads(e->set.servers[srv]) &&
         !group_piece_absent(g, g->capacity + j))) {
      dr->piece_id[dr->pieces++] = (uint8_t)(PARITY_PIECE_P + j);
      found++;
    }
  }
  if (found == missing)
    return true;
  *why = missing > parities ? "more members of its parity group are unavailable than its "
                              "parities stand in for"
                            : "its server and its group's parity servers are unavailable";
  return false;
}

static void degraded_start(struct page_op *op, uint32_t id, unsigned lost)
{
  struct rampart_engine *e = op->engine;
  struct group *g = group_get(&e->groups, id);
  if (!g->has_parity) {
    char why[160];
    snprintf(why, sizeof why, "its server is gone and %s", e->redundancy->no_second_copy);
    read_failed(op, why);
    return;
  }
  struct degraded_read *dr = e->free_degraded;
  if (!dr) {
    page_op_wait(e, op, PAGE_OP_WAITS_FOR_BUFFER);
    return;
  }
  /* Check every piece before taking the context: too many losses fail at once. */
  const char *why = NULL;
  if (!degraded_choose_pieces(e, g, lost, dr, &why)) {
    read_failed(op, why);
    return;
  }
  e->free_degraded = dr->next;
  op->server = g->server[lost]; /* named if the rebuilt page fails verification */
  page_op_enter(op, PAGE_OP_REBUILDING);
  dr->op = op;
  dr->group = id;
  dr->lost_member = lost;
  dr->covered = g->members;
  dr->failed = false;
  dr->unanswered = false;
  dr->pending = 0;
  /* One member missing and P at hand (the last piece chosen): the XOR of the pieces is
   * the page. */
  dr->xor_only = dr->piece_id[dr->pieces - 1] == PARITY_PIECE_P;
  g->pins++; /* pins the group: its slots must not be reused while we read them */

  /* The parities of an open or sealing group are the client's buffers: copied now, they
   * cover exactly the members there are now. */
  bool parity_in_client = g->state != GROUP_SEALED;
  for (unsigned k = 0; k < dr->pieces; k++) {
    uint8_t pid = dr->piece_id[k];
    if (pid < PARITY_PIECE_P || !parity_in_client)
      continue;
    const struct parity_buffer *pb = &e->parity[g->buffer];
    memcpy(dr->pages + (size_t)k * RAMPART_PAGE_SIZE,
           pid == PARITY_PIECE_P ? pb->page : pb->q_page, RAMPART_PAGE_SIZE);
  }
  /* Count every request before submitting any: a submit may complete at once. */
  for (unsigned k = 0; k < dr->pieces; k++)
    dr->pending += !(parity_in_client && dr->piece_id[k] >= PARITY_PIECE_P);
  if (dr->pending == 0) {
    degraded_complete(dr); /* mirror member lost while its copy is still in the client */
    return;
  }
  for (unsigned k = 0; k < dr->pieces; k++) {
    uint8_t pid = dr->piece_id[k];
    if (parity_in_client && pid >= PARITY_PIECE_P)
      continue;
    unsigned entry = pid < PARITY_PIECE_P ? pid : g->capacity + (pid - PARITY_PIECE_P);
    struct rp_request *req = &dr->reqs[k];
    memset(req, 0, sizeof *req);
    req->op = RP_OP_READ;
    req->slot = g->slot[entry];
    req->page = dr->pages + (size_t)k * RAMPART_PAGE_SIZE;
    req->done = on_piece_read;
    req->user = dr;
    dr->piece_server[k] = g->server[entry];
    server_transport_send(e, g->server[entry], req);
  }
}

/* ---- normal reads ---------------------------------------------------------------------- */

static void on_remote_read(struct rp_request *req)
{
  struct page_op *op = req->user;
  struct rampart_engine *e = op->engine;
  if (req->status == RP_OK) {
    read_finish(op, 0);
    return;
  }
  if (req->status == RP_ERR_NOT_FOUND) {
    /* The server answered, and has nothing in the slot. Either the page's write has not
     * landed yet (the map names a copy from the moment it is placed), and the read
     * waits for it; or the server lost a page it had stored, which is a copy failing
     * verification, not a connection failing: giving the connection up would fail and
     * resend everything else on it, and a resumed session would answer the same. */
    copy_failed_verification(op);
    return;
  }
  server_request_failed(e, op->read_server, req, false);
  /* Start over from the page map: while this read was in flight the page may have been
   * moved and its old group reclaimed. The server is marked failed now, so the retry
   * goes to the disk copy or a degraded read of whatever group holds the page now. */
  page_read_start(op);
}

/* ---- where the page lives: each store's read (page_store_ops.h) ---------------------- */

void page_store_zero_read(struct page_op *op, page_entry entry)
{
  (void)entry;
  memset(op->buf, 0, RAMPART_PAGE_SIZE);
  read_finish(op, 0);
}

void page_store_local_read(struct page_op *op, page_entry entry)
{
  memcpy(op->buf, local_store_page(&op->engine->local, page_entry_slot_of(entry)),
         RAMPART_PAGE_SIZE);
  read_finish(op, 0);
}

void page_store_spill_read(struct page_op *op, page_entry entry)
{
  if (entry == PAGE_ENTRY_LOST) {
    read_failed(op, "it was lost: more copies of its parity group were gone or failed "
                    "verification than its parities stand in for");
    return;
  }
  read_from_spill(op, page_entry_slot_of(entry));
}

void page_store_remote_read(struct page_op *op, page_entry entry)
{
  struct rampart_engine *e = op->engine;
  op->group = (uint32_t)page_entry_group(entry);
  op->member = (uint8_t)page_entry_member(entry);
  struct group *g = group_get(&e->groups, op->group);
  struct server *s = e->set.servers[g->server[op->member]];
  /* An absent member's slot holds something else: its group stands in for it. */
  if (!server_usable_for_reads(s) || group_piece_absent(g, op->member)) {
    if (e->redundancy->second_copy == SECOND_COPY_DISK)
      read_from_spill(op, op->page);
    else if (!read_waits_for_servers(op, g))
      degraded_start(op, op->group, op->member);
    return;
  }
  memset(&op->req, 0, sizeof op->req);
  op->req.op = RP_OP_READ;
  op->req.slot = g->slot[op->member];
  op->req.page = op->buf;
  op->req.done = on_remote_read;
  op->req.user = op;
  op->read_server = (server_index)s->index;
  server_transport_send(e, s->index, &op->req);
}

void page_read_start(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  e->counters.frontend_pages_started += op->kind == PAGE_OP_READ && op->stage == PAGE_OP_FREE;
  page_op_enter(op, PAGE_OP_READING);
  if (op->kind == PAGE_OP_MOVE)
    op->buf = op->scratch;
  page_entry entry = page_map_get(&e->map, op->page);
  if (op->kind == PAGE_OP_MOVE && entry != op->expected) {
    op->owner->read_ended(op, 0); /* rewritten or trimmed meanwhile: nothing to move */
    return;
  }
  /* The seal is taken with the entry: a write that replaces both while this read is in
   * flight must not make the old bytes look forged. */
  op->read_entry = entry;
  op->read_while_written = page_write_is_pending(e, op->page);
  op->read_source = (uint8_t)page_entry_kind(entry);
  op->seal = *page_seal_get(&e->sealer, op->page);
  page_store_of(entry)->read(op, entry);
}
