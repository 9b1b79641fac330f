/* Moving live pages in the background: rebuild, cleaning, migration, move-back.
 *
 * All four are the same operation — read a live page (degraded if need be) and write it
 * again through the normal write path, which puts it in the open group on healthy
 * servers (or the spill store) and retires the old copy — applied to different groups:
 *   rebuild     groups with a member or parity on a LOST server
 *   protection  unprotected groups: their parity could not be stored, or it covers a
 *               member whose copy never reached its server
 *   migration   groups with a copy (data or parity) on an ADVISED (pressured) server
 *   evacuation  the same for a SUSPECT server (a copy from it failed verification)
 *   drain       the same for a server an operator is draining or removing
 *   rebalance   groups on servers much fuller than the emptiest (one was added), at
 *               rebalance= pages a second, so a new server fills without a storm
 *   cleaning    sparse groups, so old versions do not pin server memory forever (the
 *               log-structured store's GC): in idle time, and under I/O only when the
 *               overflow runs short (update_cleaning)
 *   move-back   pages in the spill store, once servers have room again
 * A group being moved is pinned (group->pins) so it is not reclaimed under the reads.
 * Every move re-checks that the page map still points at the copy it read, so a
 * frontend write racing the move always wins.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_core.h"
#include "engine_internal.h"
#include "log.h"
#include "page_mover.h"
#include "page_op.h"
#include "page_read.h"
#include "page_write.h"
#include "page_write_pending.h"
#include "state_segment.h"
#include "server_set.h"
#include "server_transport.h"

#define GROUPS_PER_TICK 4096u
#define SPILL_PAGES_PER_TICK 65536u
/* Cleaning also starts when any one server has less than this share of its reservation
 * free (placement was uneven), whatever the total. */
#define CLEAN_SHORT_PERCENT 5u
/* Where cleaning starts and stops, as shares of the overflow room (update_cleaning). */
#define CLEAN_BUSY_START 0.9
#define CLEAN_BUSY_STOP 0.8
#define CLEAN_IDLE_START 0.25
#define CLEAN_IDLE_STOP 0.0

/* Owned by the mover alone (page_mover.h): the other files ask through functions. */
struct page_mover {
  uint32_t move_cursor;     /* next group to examine */
  uint64_t spill_cursor;    /* next page to examine for moving back from disk */
  unsigned moves_in_flight; /* each holds a page op; at most ENGINE_MOVES */
  bool wakeup;              /* a move finished: restart writes cleaning held back */
  bool lost_seen[ENGINE_MAX_INCARNATIONS]; /* this pass met a group on that lost server */

  /* cleaning (update_cleaning, finish_pass) */
  bool cleaning;          /* there is cleaning to do (cleaning_now: and it may run) */
  bool clean_pressure;    /* the overflow runs short: it runs under I/O too */
  uint8_t clean_live_max; /* clean groups with at most this many live pages */
  uint32_t pass_cleaned;  /* groups cleaned in the current pass */
  double clean_target;    /* slots the live data may hold: overflow= is spent */
  bool clean_resting;     /* the last pass found nothing to clean */
  uint64_t frontend_seen; /* frontend pages started, as of the last tick */

  /* rebalancing (update_rebalancing) */
  uint32_t rebalance_budget;  /* pages it may still rewrite to rebalance, this tick */
  bool rebalancing;           /* some server is much fuller than the emptiest */
  double rebalance_threshold; /* groups on servers fuller than this move (0..1) */

  /* The rebuild now running, or the last one: from the first loss to the end of the
   * pass that found nothing left at risk (times from engine_now_ns), in the form the
   * pager's state keeps it; pages_moved counts pages of groups on a lost server. */
  struct state_segment_rebuild rebuild;

  /* counters, since open */
  uint64_t moves_by_reason[RAMPART_MOVE_REASONS];
  uint64_t groups_cleaned;
  uint64_t rebuild_pages_done; /* pages every reason moved */
};

static bool cleaning_now(const struct rampart_engine *e);

int page_mover_init(struct rampart_engine *e)
{
  e->mover = calloc(1, sizeof *e->mover);
  if (!e->mover)
    return -1;
  return 0;
}

void page_mover_free(struct rampart_engine *e)
{
  free(e->mover);
  e->mover = NULL;
}

unsigned page_mover_in_flight(const struct rampart_engine *e)
{
  return e->mover->moves_in_flight;
}

bool page_mover_wakeup_pending(const struct rampart_engine *e)
{
  return e->mover->wakeup;
}

bool page_mover_take_wakeup(struct rampart_engine *e)
{
  bool was = e->mover->wakeup;
  e->mover->wakeup = false;
  return was;
}

void page_mover_rebuild_record(const struct rampart_engine *e,
                               struct state_segment_rebuild *r)
{
  *r = e->mover->rebuild;
}

void page_mover_rebuild_restore(struct rampart_engine *e,
                                const struct state_segment_rebuild *r)
{
  e->mover->rebuild = *r;
}

void page_mover_stats(const struct rampart_engine *e, struct rampart_stats *st)
{
  const struct page_mover *m = e->mover;
  st->groups_cleaned = m->groups_cleaned;
  st->cleaning = cleaning_now(e);
  st->cleaning_idle = st->cleaning && !m->clean_pressure;
  st->rebuild_pages_done = m->rebuild_pages_done;
  st->rebuild_running = m->rebuild.running;
  st->rebuilds_finished = m->rebuild.finished;
  st->rebuild_pages_moved = m->rebuild.pages_moved;
  if (m->rebuild.running || m->rebuild.finished > 0)
    st->rebuild_seconds = (double)((m->rebuild.running ? engine_now_ns()
                                                       : m->rebuild.finished_ns) -
                                   m->rebuild.started_ns) /
                          1e9;
  st->moves_in_flight = m->moves_in_flight;
  memcpy(st->moves_by_reason, m->moves_by_reason, sizeof st->moves_by_reason);
}

static bool server_is_lost(const struct rampart_engine *e, server_index index)
{
  return index != SERVER_INDEX_NONE && e->set.servers[index]->state == RAMPART_SERVER_LOST;
}

/* Slots held on servers, on every server not lost. */
static uint64_t slots_held(const struct rampart_engine *e)
{
  uint64_t held = 0;
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (e->set.servers[i]->state != RAMPART_SERVER_LOST)
      held += e->set.servers[i]->slots.in_use;
  return held;
}

/* Cleaning runs now: under pressure whatever the frontends do; otherwise only while
 * the engine is idle, i.e. no frontend page started since the last tick. A request that
 * arrives stops idle cleaning from starting more moves at once (those in flight end). */
static bool cleaning_now(const struct rampart_engine *e)
{
  const struct page_mover *m = e->mover;
  return m->cleaning &&
         (m->clean_pressure || e->counters.frontend_pages_started == m->frontend_seen);
}

/* Victims by cost and benefit. Cleaning a sealed group with l live pages costs l
 * rewrites and frees its slots less the l * per_page its pages take again, so the
 * fewer live, the more each rewrite buys (as LFS's cost-benefit cleaner, without the
 * age: under random overwrites a group's age says nothing of its pages' future). The
 * threshold is the smallest live count whose groups, with every sparser one, free
 * `excess` slots, from the table's count of sealed groups by live count; at most `most`. */
static uint8_t clean_threshold(const struct rampart_engine *e, double excess, unsigned most)
{
  double per_page = engine_slots_per_page(e, e->group_size);
  double group_slots = per_page * e->group_size;
  double freed = e->groups.sealed_by_live[0] * group_slots; /* pinned: reclaimed soon */
  for (unsigned l = 1; l <= most; l++) {
    freed += e->groups.sealed_by_live[l] * (group_slots - l * per_page);
    if (freed >= excess)
      return (uint8_t)l;
  }
  return (uint8_t)most;
}

/* The live count past which a rewrite frees less than one slot: idle cleaning stops
 * there (S/2 for parity-log 4+1 and none; 0 for mirror, whose groups die whole). */
static unsigned clean_worth_max(const struct rampart_engine *e)
{
  double per_page = engine_slots_per_page(e, e->group_size);
  return (unsigned)(per_page * e->group_size / (1.0 + per_page));
}

static bool clean_candidates(const struct rampart_engine *e, unsigned most)
{
  for (unsigned l = 1; l <= most; l++)
    if (e->groups.sealed_by_live[l] > 0)
      return true;
  return false;
}

/* overflow= bounds the slots held on servers to what the live pages need (their data and
 * parity) times (1 + overflow); past that bound writers wait for cleaning
 * (page_mover_should_throttle), as a log-structured store blocks writers when clean
 * segments run out. Below it, cleaning keeps out of the foreground:
 *   under pressure  past 90% of the overflow (or a server short of room) it runs under
 *                   I/O too, down to 80%, the sparsest groups that suffice first, fuller
 *                   ones as the overflow shrinks;
 *   idle            past a quarter of the overflow it runs while no frontend page
 *                   starts, down to none, but only groups where a rewrite frees more than
 *                   a slot: the next burst of overwrites then has the whole overflow.
 * Old versions get time to pile up in the same groups meanwhile (a group with fewer live
 * pages costs fewer rewrites). When a pass finds nothing to clean (finish_pass),
 * cleaning rests until the next tick. */
static void update_cleaning(struct rampart_engine *e)
{
  struct page_mover *m = e->mover;
  bool idle = e->counters.frontend_pages_started == m->frontend_seen;
  m->frontend_seen = e->counters.frontend_pages_started;
  bool short_of_room = false;
  unsigned up = 0;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    const struct server *s = e->set.servers[i];
    if (s->state != RAMPART_SERVER_UP)
      continue;
    up += !s->advised;
    if (s->reserved_pages > 0)
      short_of_room |= (uint64_t)slot_allocator_available(&s->slots) * 100 <
                       s->reserved_pages * CLEAN_SHORT_PERCENT;
  }
  double held = (double)slots_held(e);
  /* After a loss, new groups are narrower (one data page fewer per server gone, once
   * fewer than S + 1 servers are left), so the live pages need more parity. */
  double need = (double)e->groups.live_pages *
                engine_slots_per_page(e, engine_group_width(e, up));
  double room = need * (e->config.overflow_percent / 100.0);
  /* A few groups' worth of slack for the groups open and sealing, so a tiny device does
   * not clean forever. */
  need += (double)(e->group_size + 1) * 8;
  m->clean_target = need + room;
  bool was = m->clean_pressure && !m->clean_resting;
  m->clean_resting = false;
  bool was_cleaning = m->cleaning;
  m->clean_pressure = short_of_room || held > need + room * CLEAN_BUSY_START ||
                      (was && held > need + room * CLEAN_BUSY_STOP);
  if (m->clean_pressure) {
    unsigned most = e->group_size > 1 ? e->group_size - 1u : 1u;
    m->clean_live_max = clean_threshold(e, held - (need + room * CLEAN_BUSY_STOP), most);
    m->cleaning = true;
  } else {
    unsigned most = clean_worth_max(e);
    m->clean_live_max = clean_threshold(e, held - (need + room * CLEAN_IDLE_STOP), most);
    bool past = held > need + room * CLEAN_IDLE_START ||
                (was_cleaning && held > need + room * CLEAN_IDLE_STOP);
    m->cleaning = idle && past && most > 0 && clean_candidates(e, most);
  }
  if (m->cleaning && !was_cleaning)
    rp_log(RP_LOG_DEBUG,
           "cleaning%s: %.0f slots held for %llu live pages; rewriting groups "
           "with at most %u live",
           m->clean_pressure ? " under pressure" : " while idle", held,
           (unsigned long long)e->groups.live_pages, m->clean_live_max);
}

/* ---- rebalancing ----------------------------------------------------------------------
 *
 * A server added to a running device starts empty while the others may be nearly full.
 * New groups already prefer the servers with the most room (page_write.c); rebalancing
 * also rewrites old groups off the fullest servers, a budget of rebalance= pages a
 * second, from when the fullest is REBALANCE_START_POINTS percentage points fuller than
 * the emptiest until they are within REBALANCE_STOP_POINTS. */
#define REBALANCE_START_POINTS 25.0
#define REBALANCE_STOP_POINTS 10.0

static bool server_takes_rebalance(const struct server *s)
{
  return server_usable_for_placement(s) && s->reserved_pages > 0;
}

static double server_fill(const struct server *s)
{
  return (double)s->slots.in_use / (double)s->reserved_pages;
}

static void update_rebalancing(struct rampart_engine *e)
{
  double lo = 2.0, hi = -1.0;
  unsigned n = 0;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    const struct server *s = e->set.servers[i];
    if (!server_takes_rebalance(s))
      continue;
    double f = server_fill(s);
    lo = f < lo ? f : lo;
    hi = f > hi ? f : hi;
    n++;
  }
  double spread = n >= 2 ? (hi - lo) * 100.0 : 0.0;
  /* Groups with a copy on a server past halfway from the emptiest to the fullest move. */
  e->mover->rebalance_threshold = (lo + hi) / 2.0;
  bool was = e->mover->rebalancing;
  e->mover->rebalancing = e->config.rebalance_pages > 0 && !e->mover->rebuild.running &&
                          (spread > REBALANCE_START_POINTS ||
                           (was && spread > REBALANCE_STOP_POINTS));
  if (e->mover->rebalancing != was)
    rp_log(RP_LOG_INFO,
           e->mover->rebalancing
             ? "rebalancing: the fullest server is %.0f points "
               "fuller than the emptiest; rewriting groups off it at up to %u pages/s"
             : "rebalancing done: the servers are within %.0f points of each other "
               "(rebalance=%u pages/s)",
           spread, e->config.rebalance_pages);
  if (e->ticks % 10 == 0)
    e->mover->rebalance_budget = e->config.rebalance_pages;
}

static bool group_on_full_server(struct rampart_engine *e, const struct group *g)
{
  double threshold = e->mover->rebalance_threshold;
  unsigned slots = g->members + group_parity_count(g);
  for (unsigned k = 0; k < slots; k++) {
    server_index srv = g->server[group_piece_entry(g, k)];
    if (srv != SERVER_INDEX_NONE && server_takes_rebalance(e->set.servers[srv]) &&
        server_fill(e->set.servers[srv]) > threshold)
      return true;
  }
  return false;
}

/* Rewriting group g's live pages into full groups frees its slots, data and parity,
 * less what those pages take again. That frees slots for a group with dead versions,
 * and also for one sealed short of full width with all its pages live (a flush seals
 * the groups open then): a one-page group holds two slots for a page that needs 1.25
 * in a full 4 + 1 group. Under pressure any gain is worth it; idle, a rewrite must free
 * more than a slot. In integers: W (S + P) apart, for new groups W wide with P parities. */
static bool group_worth_cleaning(const struct rampart_engine *e, const struct group *g)
{
  const struct page_mover *m = e->mover;
  if (!cleaning_now(e) || g->live > m->clean_live_max)
    return false;
  int64_t width = e->group_size, parities = e->parities;
  int64_t freed = (int64_t)(g->members + group_parity_count(g)) * width -
                  (int64_t)g->live * (width + parities);
  int64_t cost = m->clean_pressure ? 0 : (int64_t)g->live * width;
  return freed > cost;
}

/* Why group g must be moved, or RAMPART_MOVE_REASONS when it need not be. Records lost
 * servers met in this pass. */
static enum rampart_move_reason group_move_reason(struct rampart_engine *e,
                                                  const struct group *g)
{
  enum rampart_move_reason why = RAMPART_MOVE_REASONS;
  unsigned slots = g->members + group_parity_count(g);
  for (unsigned k = 0; k < slots; k++) {
    server_index srv = g->server[group_piece_entry(g, k)];
    bool none_yet = why == RAMPART_MOVE_REASONS;
    if (server_is_lost(e, srv)) {
      e->mover->lost_seen[srv] = true;
      why = RAMPART_MOVE_REBUILD;
    } else if (srv != SERVER_INDEX_NONE && e->set.servers[srv]->suspect && none_yet) {
      why = RAMPART_MOVE_EVACUATE; /* off a server whose copies failed verification */
    } else if (srv != SERVER_INDEX_NONE && e->set.servers[srv]->advised && none_yet) {
      /* The parity too: a group sealed while its parity server was already advising
       * (its slot was reserved earlier) still frees that server once moved. */
      why = RAMPART_MOVE_MIGRATE;
    } else if (srv != SERVER_INDEX_NONE && e->set.servers[srv]->leaving && none_yet) {
      why = RAMPART_MOVE_DRAIN;
    }
  }
  if (why != RAMPART_MOVE_REASONS)
    return why;
  if ((g->unprotected || g->absent) && server_set_placeable(e) >= 2)
    return RAMPART_MOVE_PROTECT;
  if (group_worth_cleaning(e, g))
    return RAMPART_MOVE_CLEAN;
  if (e->mover->rebalancing && g->live > 0 && g->live <= e->mover->rebalance_budget &&
      group_on_full_server(e, g))
    return RAMPART_MOVE_REBALANCE;
  return RAMPART_MOVE_REASONS;
}

const char *rampart_move_reason_name(enum rampart_move_reason reason)
{
  static const char *const names[RAMPART_MOVE_REASONS] = {
    [RAMPART_MOVE_REBUILD] = "rebuild", [RAMPART_MOVE_EVACUATE] = "evacuate",
    [RAMPART_MOVE_MIGRATE] = "migrate", [RAMPART_MOVE_PROTECT] = "protect",
    [RAMPART_MOVE_CLEAN] = "clean",     [RAMPART_MOVE_UNSPILL] = "unspill",
    [RAMPART_MOVE_DRAIN] = "drain",     [RAMPART_MOVE_REBALANCE] = "rebalance",
  };
  return (unsigned)reason < RAMPART_MOVE_REASONS ? names[reason] : "?";
}

/* A move is a page op the mover owns: its read, once verified, becomes its rewrite. */
static void move_read_ended(struct page_op *op, int result);
static void move_ended(struct page_op *op, int result);

static const struct page_op_owner mover_move = {
  .read_ended = move_read_ended,
  .ended = move_ended,
};

static bool start_move(struct rampart_engine *e, uint64_t page, page_entry expected,
                       uint32_t group, enum rampart_move_reason why)
{
  struct page_op *op = page_op_get(e);
  if (!op)
    return false;
  e->mover->moves_by_reason[why]++;
  op->owner = &mover_move;
  op->kind = PAGE_OP_MOVE;
  op->move_rebuilds = why == RAMPART_MOVE_REBUILD;
  op->move_cleans = why == RAMPART_MOVE_CLEAN;
  op->page = page;
  op->expected = expected;
  op->group = group;
  op->buf = op->scratch;
  e->mover->moves_in_flight++;
  if (group != GROUP_NONE)
    group_get(&e->groups, group)->pins++;
  page_read_start(op);
  return true;
}

/* One pass over the groups: per server, the live pages stored there, and the live pages
 * that depend on it. A page depends on every server its group has a slot on: its own
 * copy, and in a group with parity every other member (live or not: a rebuild needs all
 * of them) and the parity. So a rebuild is finished, and a lost server's count is zero,
 * only once every group that touched it has been moved off, which is exactly what the
 * mover does (group_move_reason); counting only the lost server's own pages declared it
 * finished while its groups' other pages were still one loss from gone. */
void page_mover_live_by_server(const struct rampart_engine *e, uint64_t *live,
                               uint64_t *at_risk)
{
  for (unsigned i = 0; i < e->set.nservers; i++)
    live[i] = at_risk[i] = 0;
  for (uint32_t id = 0; id < e->groups.count; id++) {
    const struct group *g = group_get(&e->groups, id);
    if (g->state == GROUP_FREE || g->live == 0)
      continue;
    for (unsigned m = 0; m < g->members; m++) {
      if (group_member_is_live(&e->groups, &e->map, id, m)) {
        live[g->server[m]]++;
        if (!g->has_parity)
          at_risk[g->server[m]]++;
      }
    }
    if (!g->has_parity)
      continue;
    server_index touched[GROUP_MAX_DATA + GROUP_MAX_PARITY];
    unsigned ntouched = 0;
    for (unsigned k = 0; k < g->members + group_parity_count(g); k++) {
      if (k >= g->members && g->state == GROUP_OPEN)
        break; /* an open group's parities are still in the client */
      server_index srv = g->server[group_piece_entry(g, k)];
      bool seen = srv == SERVER_INDEX_NONE;
      for (unsigned t = 0; t < ntouched && !seen; t++)
        seen = touched[t] == srv;
      if (!seen) {
        touched[ntouched++] = srv;
        at_risk[srv] += g->live;
      }
    }
  }
}

uint64_t page_mover_at_risk(const struct rampart_engine *e, unsigned i)
{
  page_mover_live_by_server(e, e->set.live, e->set.at_risk);
  return e->set.at_risk[i];
}

void page_mover_rebuild_begin(struct rampart_engine *e)
{
  if (e->mover->rebuild.running)
    return; /* a second loss during a rebuild extends it */
  e->mover->rebuild.running = true;
  e->mover->rebuild.started_ns = engine_now_ns();
  e->mover->rebuild.finished_ns = 0;
  e->mover->rebuild.pages_moved = 0;
}

static void rebuild_finish(struct rampart_engine *e)
{
  e->mover->rebuild.running = false;
  e->mover->rebuild.finished++;
  e->mover->rebuild.finished_ns = engine_now_ns();
  double seconds = (double)(e->mover->rebuild.finished_ns - e->mover->rebuild.started_ns) /
                   1e9;
  double mib = (double)e->mover->rebuild.pages_moved * RAMPART_PAGE_SIZE / 1048576.0;
  rp_log(RP_LOG_INFO,
         "rebuild finished: %llu pages (%.1f MiB) written again in %.3f s "
         "(%.1f MiB/s); every live page has its redundancy back",
         (unsigned long long)e->mover->rebuild.pages_moved, mib, seconds,
         seconds > 0 ? mib / seconds : 0.0);
}

static void finish_pass(struct rampart_engine *e)
{
  bool still_rebuilding = false;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    struct server *s = e->set.servers[i];
    if (s->rebuild_needed && !e->mover->lost_seen[i] && e->mover->moves_in_flight == 0 &&
        page_mover_at_risk(e, i) == 0) {
      s->rebuild_needed = false;
      rp_log(RP_LOG_INFO, "rebuild after losing %s finished", s->address);
    }
    still_rebuilding |= s->rebuild_needed;
    e->mover->lost_seen[i] = false;
  }
  if (e->mover->rebuild.running && !still_rebuilding)
    rebuild_finish(e);
  /* Which groups cleaning takes is worked out again every tick (update_cleaning): fuller
   * ones as the overflow shrinks. A pass that found nothing at all to clean (what it
   * would take is pinned, or being written) rests the cleaner until the next tick, rather
   * than rescanning every group on every loop iteration (and holding back the move of
   * spilled pages) for nothing. */
  if (cleaning_now(e) && e->mover->pass_cleaned == 0) {
    e->mover->cleaning = false;
    e->mover->clean_resting = true;
  }
  e->mover->pass_cleaned = 0;
  server_membership_pass_done(e);
}

static void scan_groups(struct rampart_engine *e)
{
  for (unsigned n = 0; n < GROUPS_PER_TICK && e->mover->moves_in_flight < ENGINE_MOVES; n++) {
    if (e->mover->move_cursor >= e->groups.count) {
      e->mover->move_cursor = 0;
      finish_pass(e);
      return;
    }
    uint32_t id = e->mover->move_cursor++;
    struct group *g = group_get(&e->groups, id);
    if (g->state != GROUP_SEALED || g->pins > 0)
      continue;
    enum rampart_move_reason why = group_move_reason(e, g);
    if (why == RAMPART_MOVE_REASONS)
      continue;
    if (g->live == 0) {
      page_write_reclaim(e, id);
      continue;
    }
    if (why == RAMPART_MOVE_CLEAN) {
      e->mover->groups_cleaned++;
      e->mover->pass_cleaned++;
    }
    if (why == RAMPART_MOVE_REBALANCE)
      e->mover->rebalance_budget -= g->live;
    for (unsigned m = 0; m < g->members; m++) {
      if (!group_member_is_live(&e->groups, &e->map, id, m) ||
          page_write_is_pending(e, g->page[m]))
        continue;
      if (!start_move(e, g->page[m], page_entry_remote(id, m), id, why)) {
        e->mover->move_cursor = id; /* out of ops: come back to this group */
        return;
      }
    }
  }
}

/* Pages that had to go to disk move back once servers have room again. */
static void scan_spill(struct rampart_engine *e)
{
  if (!e->spill || !e->redundancy->spilled_pages_move_back || e->set.nservers == 0)
    return;
  if (server_set_placeable(e) < engine_servers_needed(e) ||
      (e->mover->cleaning && e->mover->clean_pressure) || spill_store_used(e->spill) == 0)
    return;
  for (unsigned n = 0; n < SPILL_PAGES_PER_TICK && e->mover->moves_in_flight < ENGINE_MOVES;
       n++) {
    if (e->mover->spill_cursor >= e->pages)
      e->mover->spill_cursor = 0;
    uint64_t page = e->mover->spill_cursor++;
    page_entry entry = page_map_get(&e->map, page);
    if (page_entry_kind(entry) == PAGE_SPILL && entry != PAGE_ENTRY_LOST &&
        !page_write_is_pending(e, page))
      if (!start_move(e, page, entry, GROUP_NONE, RAMPART_MOVE_UNSPILL))
        return;
  }
}

/* True while there may be something to move; keeps the per-iteration run cheap when
 * all is well. */
static bool mover_has_work(const struct rampart_engine *e)
{
  if (cleaning_now(e))
    return true;
  /* Unprotected groups are one loss from gone, and nothing else may be under way to
   * bring the mover round to them. */
  if ((e->groups.unprotected > 0 || e->groups.short_groups > 0) &&
      server_set_placeable(e) >= 2)
    return true;
  for (unsigned i = 0; i < e->set.nservers; i++) {
    const struct server *s = e->set.servers[i];
    if (s->rebuild_needed || s->advised)
      return true;
    /* A suspect server is emptied: until it holds no slot of ours (every group that
     * touched it moved and reclaimed), there is work. */
    if (s->suspect && s->state != RAMPART_SERVER_LOST && s->slots.in_use > 0)
      return true;
    /* So is a server being drained, and the pass that finds it empty ends the drain. */
    if (s->leaving && !s->drained && s->state != RAMPART_SERVER_REMOVED)
      return true;
  }
  if (e->mover->rebalancing && e->mover->rebalance_budget > 0)
    return true;
  return e->spill && spill_store_used(e->spill) > 0 && e->redundancy->spilled_pages_move_back;
}

void page_mover_tick(struct rampart_engine *e)
{
  if (e->set.nservers == 0)
    return;
  update_cleaning(e);
  update_rebalancing(e);
  page_mover_run(e);
}

void page_mover_run(struct rampart_engine *e)
{
  if (e->set.nservers == 0 || e->draining || e->mover->moves_in_flight >= ENGINE_MOVES ||
      !mover_has_work(e))
    return;
  scan_groups(e);
  scan_spill(e);
}

bool page_mover_should_throttle(struct rampart_engine *e)
{
  if (!e->mover->cleaning || !e->mover->clean_pressure || e->mover->moves_in_flight == 0)
    return false; /* nothing in flight would wake a waiting write */
  return (double)slots_held(e) > e->mover->clean_target;
}

static int group_spare(const struct rampart_engine *e, const struct group *g, bool now);

/* A move that could not read its page: is the page gone for good? It is when the copies
 * its group can spare are used up: one (no parity) or two, counting copies on lost
 * servers and copies that failed verification (op->bad_copies). A copy on a server that
 * is only reconnecting is not gone: the move is tried again on a later pass. */
static bool page_is_unrecoverable(struct rampart_engine *e, const struct page_op *op)
{
  unsigned gone = op->bad_copies;
  if (op->group == GROUP_NONE)
    return gone >= 1; /* a spill copy is the page's only one */
  const struct group *g = group_get(&e->groups, op->group);
  return (int)gone > group_spare(e, g, false);
}

/* Whether the piece at entry k of g is gone: absent, or on a lost server (now: on any
 * server that cannot be read from now). */
static bool piece_gone(const struct rampart_engine *e, const struct group *g, unsigned k,
                       bool now)
{
  server_index srv = g->server[k];
  if (group_piece_absent(g, k) || server_is_lost(e, srv))
    return true;
  return now && srv != SERVER_INDEX_NONE && !server_usable_for_reads(e->set.servers[srv]);
}

/* Pieces group g can still lose: its parities, less its pieces gone (negative: more are
 * gone than it spares). An open group's parities are in the client. */
static int group_spare(const struct rampart_engine *e, const struct group *g, bool now)
{
  unsigned parities = group_parity_count(g), gone = 0;
  for (unsigned m = 0; m < g->members; m++)
    gone += piece_gone(e, g, m, now);
  for (unsigned j = 0; j < parities && g->state != GROUP_OPEN; j++)
    gone += piece_gone(e, g, g->capacity + j, now);
  return (int)parities - (int)gone;
}

void page_mover_groups_by_spare(const struct rampart_engine *e, uint32_t *one, uint32_t *none)
{
  *one = *none = 0;
  for (uint32_t id = 0; id < e->groups.count; id++) {
    const struct group *g = group_get(&e->groups, id);
    if (g->state == GROUP_FREE || g->live == 0)
      continue;
    int spare = group_spare(e, g, true);
    *one += spare == 1;
    *none += spare <= 0;
  }
}

/* The move's read ended (result < 0: it could not read the page). */
static void move_read_ended(struct page_op *op, int result)
{
  struct rampart_engine *e = op->engine;
  if (result < 0) {
    /* A page that cannot come back must say so (lost, EIO on every read) and leave the
     * mover: left where it is, a rebuild would retry it forever and never finish. */
    if (page_map_get(&e->map, op->page) == op->expected &&
        !page_write_is_pending(e, op->page) && page_is_unrecoverable(e, op)) {
      e->counters.pages_lost++;
      page_write_supersede(e, op->page, PAGE_ENTRY_LOST);
      /* A double fault loses thousands at once: name a few (the tick counts the rest). */
      if (e->read_errors_logged++ < 10)
        rp_log(RP_LOG_ERROR,
               "page %llu is lost: %s; reads of it return EIO until it is "
               "written again",
               (unsigned long long)op->page,
               op->bad_copies ? "the copies left to rebuild it from failed verification or "
                                "are gone"
                              : "more servers of its parity group are gone than its parities "
                                "stand in for");
    }
    page_op_finished(op, result);
    return;
  }
  /* Rewritten, trimmed, or being rewritten: the write in flight supersedes the move (and
   * under write-through may be replacing the very disk copy just read). */
  if (page_map_get(&e->map, op->page) != op->expected || page_write_is_pending(e, op->page)) {
    page_op_finished(op, 0);
    return;
  }
  page_write_start(op);
}

static void move_ended(struct page_op *op, int result)
{
  (void)result; /* a move that could not read its page said so above */
  struct rampart_engine *e = op->engine;
  e->mover->moves_in_flight--;
  e->mover->wakeup = true; /* writes held back by cleaning may go on (engine.c) */
  if (page_op_is_writing(op)) {
    e->mover->rebuild_pages_done++;
    if (op->move_rebuilds)
      e->mover->rebuild.pages_moved++;
  }
  if (op->group == GROUP_NONE)
    return;
  struct group *g = group_get(&e->groups, op->group);
  g->pins--;
  if (group_is_reclaimable(g))
    page_write_reclaim(e, op->group);
}
