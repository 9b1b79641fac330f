/* The engine's record in the pager's state segment (state=; docs/recovery.md), kept as
 * it runs.
 *
 * With state= the page map, the seals, the nonce counter, the parity groups, the server
 * table (addresses, session tokens) and a record of every write in flight live in the
 * pager's state segment (state_segment.c), which outlives the process. The map, the seals
 * and the groups are the engine's own tables, laid out in the segment; this file keeps
 * the rest as the engine changes them: each server's entry, the open group and its
 * parity, and each write's record. A write in flight names its new version in the map
 * before its bytes land, so the version it replaced is kept (not reclaimed) until the
 * write ends: a pager killed meanwhile falls back to it. The calls that would free a
 * version return it instead, and the caller (page_write.c, page_read.c) retires it.
 * Taking a device over from the segment is ../engine/engine_restore.c.
 */

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "crash_point.h"
#include "engine_core.h"
#include "log.h"
#include "page_op.h"
#include "state_segment.h"
#include "state_record.h"


_Static_assert(ENGINE_PAGE_OPS <= STATE_SEGMENT_WRITES, "every page op has a write record");
_Static_assert(ENGINE_MAX_INCARNATIONS <= STATE_SEGMENT_SERVERS, "every server has an entry");
_Static_assert(RAMPART_ADDRESS_LEN <= STATE_SEGMENT_ADDRESS_LEN, "addresses fit");
_Static_assert(RP_TOKEN_LEN == STATE_SEGMENT_TOKEN_LEN, "session tokens fit");
_Static_assert(ENGINE_PARITY_BUFFERS == STATE_SEGMENT_PARITY_BUFFERS, "parity buffers fit");

void (*rampart_crash_point_hook)(const char *point);

/* ---- while running ---------------------------------------------------------------------- */

void state_record_save_server(struct rampart_engine *e, const struct server *s)
{
  struct state_segment *st = e->state;
  if (!st)
    return;
  struct state_segment_server *ps = &st->servers[s->index];
  snprintf(ps->address, sizeof ps->address, "%s", s->address);
  ps->addr = s->addr;
  ps->addr_len = s->addr_len;
  memcpy(ps->token, s->token, sizeof ps->token);
  ps->reserved_pages = s->reserved_pages;
  ps->state = (uint8_t)s->state;
  ps->flags = (uint8_t)((s->suspect ? STATE_SEGMENT_SERVER_SUSPECT : 0) |
                        (s->leaving ? STATE_SEGMENT_SERVER_LEAVING : 0) |
                        (s->remove_when_drained ? STATE_SEGMENT_SERVER_REMOVE_WHEN_DRAINED
                                                : 0) |
                        (s->drained ? STATE_SEGMENT_SERVER_DRAINED : 0) |
                        (s->health.replaced ? STATE_SEGMENT_SERVER_REPLACED : 0) |
                        (s->rebuild_needed ? STATE_SEGMENT_SERVER_REBUILD_NEEDED : 0));
  /* Counted once the entry is whole: a restart never reads a half-written one. */
  atomic_signal_fence(memory_order_release);
  if (*st->nservers < s->index + 1)
    *st->nservers = s->index + 1;
}

static struct state_segment_write *write_record(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  return &e->state->writes[op - e->ops];
}

/* A recovered write's record in the state goes once nothing of it would be needed by a
 * pager killed again: no version kept, no replay in flight. Its op then rejoins the pool
 * (until now a new write in that op would have overwritten the record). */
void state_record_settle_recovered(struct rampart_engine *e, struct recovered_write *w)
{
  if (!w->recorded || w->kept || w->replays)
    return;
  size_t i = (size_t)(w - e->recovered_writes);
  e->state->writes[i].active = 0;
  atomic_signal_fence(memory_order_release);
  w->recorded = false;
  page_op_release_withheld(e, &e->ops[i]);
}

void state_record_drop_recovered(struct rampart_engine *e, struct recovered_write *w)
{
  w->kept = false;
  e->nrecovered_writes--;
  if (w->recorded && w->replays) {
    /* Its replays still matter after another crash (their groups' parity covers their
     * bytes); the version it replaced no longer does, and may be reused: the record
     * says so before the caller lets that version go (take_over_writes: replay only). */
    e->state->writes[w - e->recovered_writes].old_entry = PAGE_ENTRY_LOST;
    atomic_signal_fence(memory_order_release);
  }
  state_record_settle_recovered(e, w);
}

struct recovered_write *state_record_drop_kept(struct rampart_engine *e, uint64_t page,
                                               uint32_t *from)
{
  /* The versions a dead process's writes replaced were kept for a fallback that a new
   * version makes pointless. Kept versions are not live (the map does not name them):
   * their groups are pinned instead, neither reclaimed nor counted at risk meanwhile. */
  while (*from < STATE_SEGMENT_WRITES && e->nrecovered_writes) {
    struct recovered_write *w = &e->recovered_writes[(*from)++];
    if (!w->kept || w->page != page)
      continue;
    state_record_drop_recovered(e, w);
    return w;
  }
  return NULL;
}

bool state_record_keep_replaced(struct page_op *op, page_entry entry)
{
  struct rampart_engine *e = op->engine;
  struct state_segment_write *w = write_record(op);
  if (w->active) {
    /* Placed again (its first placement failed): what it replaces now is its own
     * earlier placement, which never completed. The first replaced version stays kept,
     * and the record names the earlier placement until the map names this one. */
    w->joining = entry;
    return false;
  }
  w->page = op->page;
  w->old_entry = page_map_get(&e->map, op->page);
  w->old_seal = *page_seal_get(&e->sealer, op->page);
  w->new_entry = entry;
  w->joining = entry;
  /* The record is whole before it counts, and counts before the map changes: a process
   * killed anywhere in between leaves either no record and the old map, or both. */
  atomic_signal_fence(memory_order_release);
  w->active = 1;
  atomic_signal_fence(memory_order_release);
  return true;
}

void state_record_installed(struct page_op *op, page_entry entry)
{
  struct rampart_engine *e = op->engine;
  if (!e->state)
    return;
  struct state_segment_write *w = write_record(op);
  /* After the map: a crash in between finds the map naming `joining` (take_over_writes). */
  if (w->active)
    w->new_entry = entry;
}

bool state_record_op_ended(struct page_op *op, page_entry *retire)
{
  struct state_segment_write *w = write_record(op);
  if (!w->active)
    return false;
  *retire = w->old_entry;
  /* Cleared before the old version is retired: a crash in between leaves the old slots
   * uncounted (a restart counts only what the map names), never a record naming slots
   * already reused. */
  w->active = 0;
  atomic_signal_fence(memory_order_release);
  return true;
}

bool state_record_fall_back(struct page_op *op, page_entry *retire)
{
  struct rampart_engine *e = op->engine;
  page_entry now = page_map_get(&e->map, op->page);
  for (uint32_t i = 0; i < STATE_SEGMENT_WRITES; i++) {
    struct recovered_write *w = &e->recovered_writes[i];
    if (!w->kept || w->page != op->page || w->new_entry != now)
      continue;
    rp_log(RP_LOG_INFO,
           "page %llu: the write in flight when the pager stopped never "
           "reached its store; the version before it stands",
           (unsigned long long)op->page);
    page_entry old = w->old_entry;
    page_seal_set(&e->sealer, op->page, &w->old_seal);
    page_entry newer = page_map_set(&e->map, op->page, old);
    state_record_drop_recovered(e, w);
    if (page_entry_kind(old) == PAGE_REMOTE) {
      /* Named by the map again: live, no longer only pinned. */
      struct group *g = group_get(&e->groups, (uint32_t)page_entry_group(old));
      g->live++;
      e->groups.live_pages++;
      g->pins--;
    }
    *retire = newer;
    e->counters.writes_rolled_back++;
    return true;
  }
  return false;
}

void state_record_group_opened(struct rampart_engine *e, uint32_t id)
{
  struct state_segment *st = e->state;
  if (!st)
    return;
  struct group *g = group_get(&e->groups, id);
  if (g->buffer != GROUP_NO_BUFFER) {
    /* Covering nothing before it names the group: a crash in between leaves it naming
     * a group that is gone, or this one, empty (which a restart releases). */
    struct state_segment_parity *p = &st->parity[g->buffer];
    p->published = STATE_SEGMENT_PARITY_PUBLISHED(e->parity[g->buffer].current, 0);
    atomic_signal_fence(memory_order_release);
    p->group = id;
  }
  *st->open_parity_server = e->placement.open_parity_server;
  *st->open_parity_slot = e->placement.open_parity_slot;
  atomic_signal_fence(memory_order_release);
  *st->open_group = id;
}

void state_record_parity_published(struct rampart_engine *e, uint16_t buffer, unsigned page,
                                   unsigned covered)
{
  if (!e->state)
    return;
  /* The new page's bytes are all stored before the store that makes it current. */
  atomic_signal_fence(memory_order_release);
  e->state->parity[buffer].published = STATE_SEGMENT_PARITY_PUBLISHED(page, covered);
  atomic_signal_fence(memory_order_release);
}
