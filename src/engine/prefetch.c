/* The prefetcher: page-ins that arrive already fetched (prefetch=, prefetch-depth=).
 *
 * Every read the engine is sent is one the kernel's own swap cache missed. The
 * prefetcher watches their order, finds the majority trend of the recent strides (the
 * Boyer-Moore majority vote over a short history, as Leap does), and reads the next
 * pages along it into a small cache of plaintext pages the pager holds locked. A read of
 * a cached page is answered from the cache with no round trip; one of a page whose
 * prefetch is in flight joins it. With no majority it reads nothing ahead.
 *
 * Staleness: a write, trim or zero of a page drops its cached copy, when the write
 * starts and again when it ends (a write may wait before it places its version, and a
 * prefetch meanwhile reads the version it replaces); a prefetch in flight then keeps its
 * bytes from the cache when it lands. A prefetch starts only once the read that asked
 * for it has started its own pages and no frontend request waits for a page op, only
 * while every server is up and nothing is being rebuilt, and only for a page a server
 * holds (not zero, spilled, or with a write in flight).
 *
 * The cache is a fixed array of page-sized slots, found by page through a chained hash,
 * each free, in flight (its page op reading into the slot's own page) or ready. A slot
 * in flight is never reused before its op lands, so the bytes a landing op wrote are
 * always that slot's page; a slot written meanwhile is unhashed, so nothing finds it,
 * and its bytes go when it lands. A ready slot is freed as soon as a read takes it: the
 * kernel keeps the page from then on. When no slot is free the oldest ready slot in the
 * clock hand's order is evicted, counted as wasted.
 *
 * Its calls are engine_internal.h's; it runs holding the engine (engine.c's hooks).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine_internal.h"
#include "log.h"
#include "page_read.h"
#include "page_write_pending.h"
#include "server_transport.h"

/* Reads the trend is found in: the last PREFETCH_HISTORY, so PREFETCH_HISTORY - 1
 * strides. A trend takes at least two equal strides in a row to show. */
#define PREFETCH_HISTORY 8u
#define SLOT_NONE UINT32_MAX

enum slot_state { SLOT_FREE, SLOT_IN_FLIGHT, SLOT_READY };

struct prefetch_slot {
  uint64_t page;
  uint32_t next; /* the next slot in its hash chain, or on the free list */
  uint8_t state; /* enum slot_state */
  bool hashed;   /* findable by page: not free, not stale */
  /* In flight: a frontend read of the page that joined it (one at most), ended when it
   * lands. */
  struct rampart_io *waiter;
  uint8_t *waiter_buf;
};

struct prefetch {
  uint32_t nslots, depth, bucket_mask;
  struct prefetch_slot *slots;
  uint32_t *buckets;
  uint32_t free_head;
  uint32_t hand; /* where the search for a ready slot to evict starts */
  uint32_t in_flight, ready;
  uint8_t *pages; /* nslots pages, locked */
  size_t pages_bytes;
  uint64_t history[PREFETCH_HISTORY]; /* first pages of recent reads, a ring */
  uint32_t history_len, history_next;
  uint64_t issued, hits, joins, wasted;
};

static uint8_t *slot_page(const struct prefetch *pf, uint32_t i)
{
  return pf->pages + (size_t)i * RAMPART_PAGE_SIZE;
}

static uint32_t *bucket_of(struct prefetch *pf, uint64_t page)
{
  return &pf->buckets[(uint32_t)((page * 0x9E3779B97F4A7C15ull) >> 32) & pf->bucket_mask];
}

static uint32_t slot_find(struct prefetch *pf, uint64_t page)
{
  uint32_t i = *bucket_of(pf, page);
  while (i != SLOT_NONE && pf->slots[i].page != page)
    i = pf->slots[i].next;
  return i;
}

static void slot_unhash(struct prefetch *pf, uint32_t i)
{
  struct prefetch_slot *s = &pf->slots[i];
  if (!s->hashed)
    return;
  uint32_t *link = bucket_of(pf, s->page);
  while (*link != i)
    link = &pf->slots[*link].next;
  *link = s->next;
  s->hashed = false;
}

static void slot_free(struct prefetch *pf, uint32_t i)
{
  struct prefetch_slot *s = &pf->slots[i];
  slot_unhash(pf, i);
  if (s->state == SLOT_READY)
    pf->ready--;
  s->state = SLOT_FREE;
  s->waiter = NULL;
  s->next = pf->free_head;
  pf->free_head = i;
}

/* A free slot, evicting the oldest ready one when none is free; SLOT_NONE when every
 * slot is in flight. */
static uint32_t slot_take(struct prefetch *pf)
{
  if (pf->free_head == SLOT_NONE && pf->ready > 0) {
    while (pf->slots[pf->hand].state != SLOT_READY)
      pf->hand = (pf->hand + 1) % pf->nslots;
    pf->wasted++;
    slot_free(pf, pf->hand);
  }
  uint32_t i = pf->free_head;
  if (i != SLOT_NONE)
    pf->free_head = pf->slots[i].next;
  return i;
}

int prefetch_init(struct rampart_engine *e)
{
  uint32_t n = e->config.prefetch_pages;
  if (n == 0)
    return 0;
  struct prefetch *pf = calloc(1, sizeof *pf);
  if (!pf)
    return -1;
  e->prefetch = pf;
  uint32_t buckets = 1;
  while (buckets < 2 * n)
    buckets *= 2;
  pf->nslots = n;
  pf->depth = e->config.prefetch_depth < n ? e->config.prefetch_depth : n;
  pf->bucket_mask = buckets - 1;
  pf->slots = calloc(n, sizeof *pf->slots);
  pf->buckets = malloc(buckets * sizeof *pf->buckets);
  pf->pages_bytes = (size_t)n * RAMPART_PAGE_SIZE;
  void *pages = mmap(NULL, pf->pages_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (!pf->slots || !pf->buckets || pages == MAP_FAILED)
    return -1;
  pf->pages = pages;
  /* A pager that serves swap locks all it has (rampart_process_harden); the cache is
   * locked here too, for an engine in a process that does not. */
  if (mlock(pf->pages, pf->pages_bytes) < 0)
    rp_log(RP_LOG_WARN,
           "prefetch=%u: cannot lock the cache's %zu bytes (raise RLIMIT_MEMLOCK, or "
           "run the pager as root): its pages may be swapped out",
           n, pf->pages_bytes);
  memset(pf->buckets, 0xff, buckets * sizeof *pf->buckets);
  pf->free_head = SLOT_NONE;
  for (uint32_t i = n; i-- > 0;)
    slot_free(pf, i);
  return 0;
}

void prefetch_destroy(struct rampart_engine *e)
{
  struct prefetch *pf = e->prefetch;
  if (!pf)
    return;
  if (pf->pages)
    munmap(pf->pages, pf->pages_bytes);
  free(pf->slots);
  free(pf->buckets);
  free(pf);
  e->prefetch = NULL;
}

/* ---- reads answered ------------------------------------------------------------- */

enum prefetch_answer prefetch_answer(struct rampart_engine *e, struct rampart_io *io,
                                     uint64_t page, uint8_t *buf)
{
  struct prefetch *pf = e->prefetch;
  if (!pf)
    return PREFETCH_MISS;
  uint32_t i = slot_find(pf, page);
  if (i == SLOT_NONE)
    return PREFETCH_MISS;
  struct prefetch_slot *s = &pf->slots[i];
  if (s->state == SLOT_READY) {
    memcpy(buf, slot_page(pf, i), RAMPART_PAGE_SIZE);
    pf->hits++;
    slot_free(pf, i);
    return PREFETCH_COPIED;
  }
  if (s->waiter)
    return PREFETCH_MISS;
  s->waiter = io;
  s->waiter_buf = buf;
  return PREFETCH_JOINED;
}

void prefetch_forget(struct rampart_engine *e, uint64_t page)
{
  struct prefetch *pf = e->prefetch;
  if (!pf)
    return;
  uint32_t i = slot_find(pf, page);
  if (i == SLOT_NONE)
    return;
  if (pf->slots[i].state == SLOT_READY) {
    pf->wasted++;
    slot_free(pf, i);
    return;
  }
  slot_unhash(pf, i); /* in flight: stale, dropped when it lands */
}

/* The prefetch's read ended: its slot holds the page, verified, or result < 0. */
static void prefetch_landed(struct page_op *op, int result)
{
  struct rampart_engine *e = op->engine;
  struct prefetch *pf = e->prefetch;
  uint32_t i = (uint32_t)((op->buf - pf->pages) / RAMPART_PAGE_SIZE);
  struct prefetch_slot *s = &pf->slots[i];
  pf->in_flight--;
  struct rampart_io *waiter = s->waiter;
  if (waiter) {
    /* Joined before any write of the page came (a write unhashes the slot first), so
     * these bytes are an answer the read could have had from its own round trip. */
    if (result == 0)
      memcpy(s->waiter_buf, slot_page(pf, i), RAMPART_PAGE_SIZE);
    pf->hits++;
    pf->joins++;
    slot_free(pf, i);
    engine_request_page_ended(e, waiter, result);
    return;
  }
  if (result < 0 || !s->hashed) {
    pf->wasted++;
    slot_free(pf, i);
    return;
  }
  s->state = SLOT_READY;
  pf->ready++;
}

static const struct page_op_owner prefetch_owner = {
  .read_ended = page_op_finished,
  .ended = prefetch_landed,
};

/* ---- the trend and what it fetches ------------------------------------------------- */

/* The Boyer-Moore majority vote over the newest `n` strides: the stride more than half
 * of them have, if one does. */
static bool majority_of(const int64_t *stride, uint32_t n, int64_t *major)
{
  int64_t candidate = 0;
  uint32_t votes = 0, count = 0;
  for (uint32_t k = 0; k < n; k++) {
    if (votes == 0)
      candidate = stride[k];
    votes += stride[k] == candidate ? 1 : (uint32_t)-1;
  }
  for (uint32_t k = 0; k < n; k++)
    count += stride[k] == candidate;
  *major = candidate;
  return 2 * count > n;
}

/* The trend: the majority stride of the newest strides, looked for in the newest few
 * first and then in more (a new trend shows before the old one leaves the history, as
 * Leap's search does). False with no majority, or a stride of 0. */
static bool trend(const struct prefetch *pf, int64_t *major)
{
  int64_t stride[PREFETCH_HISTORY - 1];
  uint32_t n = 0;
  for (uint32_t k = 0; k + 1 < pf->history_len; k++) {
    uint32_t newer = (pf->history_next + PREFETCH_HISTORY - 1 - k) % PREFETCH_HISTORY;
    uint32_t older = (newer + PREFETCH_HISTORY - 1) % PREFETCH_HISTORY;
    stride[n++] = (int64_t)(pf->history[newer] - pf->history[older]);
  }
  for (uint32_t w = 2; w <= n; w = w * 2 > n && w < n ? n : w * 2)
    if (majority_of(stride, w, major))
      return *major != 0;
  return false;
}

/* Every current server up and none being rebuilt: a prefetch never costs a degraded
 * read, and never competes with the rebuild. */
static bool servers_healthy(const struct rampart_engine *e)
{
  for (unsigned i = 0; i < e->set.nservers; i++) {
    const struct server *s = e->set.servers[i];
    if (s->rebuild_needed)
      return false;
    if (!s->health.replaced && s->state != RAMPART_SERVER_REMOVED &&
        !server_usable_for_reads(s))
      return false;
  }
  return true;
}

/* A page worth a prefetch: held by a server that reads it now, with no write in
 * flight. */
static bool fetchable(const struct rampart_engine *e, uint64_t page)
{
  if (page >= e->pages || page_write_is_pending(e, page))
    return false;
  page_entry entry = page_map_get(&e->map, page);
  if (page_entry_kind(entry) != PAGE_REMOTE)
    return false;
  const struct group *g = group_get(&e->groups, (uint32_t)page_entry_group(entry));
  unsigned member = page_entry_member(entry);
  return !group_piece_absent(g, member) &&
         server_usable_for_reads(e->set.servers[g->server[member]]);
}

/* Starts a prefetch of page into a slot: false when no slot or op is free. */
static bool fetch(struct rampart_engine *e, uint64_t page)
{
  struct prefetch *pf = e->prefetch;
  uint32_t i = slot_take(pf);
  if (i == SLOT_NONE)
    return false;
  struct page_op *op = page_op_get(e);
  if (!op) {
    slot_free(pf, i);
    return false;
  }
  struct prefetch_slot *s = &pf->slots[i];
  s->page = page;
  s->state = SLOT_IN_FLIGHT;
  s->hashed = true;
  uint32_t *bucket = bucket_of(pf, page);
  s->next = *bucket;
  *bucket = i;
  pf->in_flight++;
  pf->issued++;
  op->owner = &prefetch_owner;
  op->kind = PAGE_OP_READ;
  op->io = NULL;
  op->page = page;
  op->buf = slot_page(pf, i);
  page_read_start(op);
  return true;
}

/* The pages along the trend after a read of npages from first: the same run of npages,
 * one stride on, then two, ... until depth pages were looked at. */
static void fetch_along(struct rampart_engine *e, uint64_t first, uint32_t npages,
                        int64_t stride)
{
  struct prefetch *pf = e->prefetch;
  uint32_t looked = 0;
  for (int64_t step = 1; looked < pf->depth; step++) {
    int64_t start = (int64_t)first + stride * step;
    for (uint32_t j = 0; j < npages && looked < pf->depth; j++, looked++) {
      int64_t page = start + j;
      if (page < 0 || (uint64_t)page >= e->pages)
        return;
      if (slot_find(pf, (uint64_t)page) != SLOT_NONE || !fetchable(e, (uint64_t)page))
        continue;
      if (pf->in_flight >= pf->depth || !fetch(e, (uint64_t)page))
        return;
    }
  }
}

void prefetch_after_read(struct rampart_engine *e, uint64_t first, uint32_t npages)
{
  struct prefetch *pf = e->prefetch;
  if (!pf)
    return;
  pf->history[pf->history_next] = first;
  pf->history_next = (pf->history_next + 1) % PREFETCH_HISTORY;
  if (pf->history_len < PREFETCH_HISTORY)
    pf->history_len++;
  int64_t stride;
  /* Demand reads first: none may wait for a page op a prefetch took. */
  if (e->io_head || !trend(pf, &stride) || !servers_healthy(e))
    return;
  fetch_along(e, first, npages, stride);
}

void prefetch_stats(const struct rampart_engine *e, struct rampart_stats *st)
{
  const struct prefetch *pf = e->prefetch;
  if (!pf)
    return;
  st->prefetch_issued = pf->issued;
  st->prefetch_hits = pf->hits;
  st->prefetch_joins = pf->joins;
  st->prefetch_wasted = pf->wasted;
  st->prefetch_cached_pages = pf->ready;
  st->prefetch_in_flight = pf->in_flight;
  st->prefetch_bytes_locked = pf->pages_bytes;
}
