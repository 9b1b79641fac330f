/* Returning slots to the servers: FREE.
 *
 * A slot the engine no longer needs (a reclaimed or cleaned group's) goes back to its
 * server with a FREE, so the server's memory is what the live pages and the overflow
 * need, as the engine counts it. A slot released without its FREE keeps its old page on
 * the server until a later WRITE reuses the slot; doing that whenever the engine's
 * ENGINE_FREE_REQUESTS ran out put the servers well past the overflow bound under a
 * burst of overwrites on a slow machine. So a FREE for a server that answers waits with
 * that server for a request, its slot still held (where the throttle and cleaning
 * count it), and each request that comes back takes the next one waiting.
 *
 * Two limits keep one server from holding the others' FREEs back: a server has at most
 * ENGINE_FREES_PER_SERVER in flight, and a server away (reconnecting) gets no new FREE:
 * its slot is released as it is, its old page left for a later WRITE or for the end of
 * its session. FREEs in flight when it went away wait to be resent on the resumed
 * session (server_request_failed): the slot is reused only once its FREE is answered,
 * since a FREE resent late must never overtake a later WRITE of the same slot.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_core.h"
#include "server_set.h"
#include "server_transport.h"

/* A FREE goes to a server that answers now, short of its share in flight. */
static bool server_takes_free_now(const struct server *s)
{
  return server_usable_for_reads(s) && s->frees_in_flight < ENGINE_FREES_PER_SERVER;
}

static int frees_waiting_push(struct rampart_engine *e, struct server *s, uint32_t slot)
{
  struct waiting_slots *w = &s->frees_waiting;
  if (w->count == w->cap) {
    uint32_t cap = w->cap ? w->cap * 2 : 256;
    uint32_t *grown = realloc(w->slots, (size_t)cap * sizeof *grown);
    if (!grown)
      return -1;
    w->slots = grown;
    w->cap = cap;
  }
  w->slots[w->count++] = slot;
  e->frees_waiting++;
  return 0;
}

static uint32_t frees_waiting_pop(struct rampart_engine *e, struct server *s)
{
  e->frees_waiting--;
  return s->frees_waiting.slots[--s->frees_waiting.count];
}

static void on_free_done(struct rp_request *req);

static void free_request_send(struct rampart_engine *e, struct free_request *fr,
                              unsigned index, uint32_t slot)
{
  memset(&fr->req, 0, sizeof fr->req);
  fr->server = (server_index)index;
  fr->req.op = RP_OP_FREE;
  fr->req.slot = slot;
  fr->req.count = 1;
  fr->req.done = on_free_done;
  fr->req.user = fr;
  e->set.servers[index]->frees_in_flight++;
  server_transport_send(e, index, &fr->req);
}

/* Server i's waiting FREEs, now that it does not answer: their slots released as
 * server_release_slot releases them (none, for a lost incarnation: its slots are gone). */
static void frees_waiting_let_go(struct rampart_engine *e, struct server *s)
{
  while (s->frees_waiting.count > 0) {
    uint32_t slot = frees_waiting_pop(e, s);
    if (s->state != RAMPART_SERVER_LOST)
      slot_allocator_release(&s->slots, slot);
  }
}

/* A FREE request just answered by server `from` takes a waiting FREE: that server's
 * first (its share in flight just dropped), else the next servers' in turn; else it
 * goes back to the pool. A server that no longer answers lets its waiting FREEs go. */
static void free_request_recycle(struct rampart_engine *e, struct free_request *fr,
                                 unsigned from)
{
  for (unsigned n = 0; n < e->set.nservers && e->frees_waiting > 0 && !e->set.closing; n++) {
    unsigned i = (from + n) % e->set.nservers;
    struct server *s = e->set.servers[i];
    if (s->frees_waiting.count == 0)
      continue;
    if (!server_usable_for_reads(s)) {
      frees_waiting_let_go(e, s);
      continue;
    }
    if (s->frees_in_flight < ENGINE_FREES_PER_SERVER) {
      free_request_send(e, fr, i, frees_waiting_pop(e, s));
      return;
    }
  }
  fr->next = e->free_frees;
  e->free_frees = fr;
}

static void on_free_done(struct rp_request *req)
{
  struct free_request *fr = req->user;
  struct rampart_engine *e = fr->engine;
  bool unanswered = req->status == RP_ERR_DISCONNECTED || req->status == RP_ERR_TIMEOUT;
  if (unanswered && server_request_failed(e, fr->server, req, true))
    return; /* resent on the resumed session */
  struct server *s = e->set.servers[fr->server];
  s->frees_in_flight--;
  if (s->state != RAMPART_SERVER_LOST)
    slot_allocator_release(&s->slots, (uint32_t)req->slot);
  free_request_recycle(e, fr, fr->server);
}

void server_release_slot(struct rampart_engine *e, unsigned index, uint32_t slot)
{
  struct server *s = e->set.servers[index];
  if (s->state == RAMPART_SERVER_LOST)
    return; /* that incarnation's slots are gone with it */
  if (!server_usable_for_reads(s) || e->set.closing) {
    slot_allocator_release(&s->slots, slot);
    return;
  }
  struct free_request *fr = e->free_frees;
  if (fr && server_takes_free_now(s) && s->frees_waiting.count == 0) {
    e->free_frees = fr->next;
    free_request_send(e, fr, index, slot);
    return;
  }
  if (frees_waiting_push(e, s, slot) < 0)
    slot_allocator_release(&s->slots, slot); /* out of memory: the old page stays */
}
