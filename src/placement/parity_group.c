/* Group bookkeeping and XOR for the parity log (see parity_group.h). */
#include "parity_group.h"

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

/* Adds one chunk; only the array of chunk pointers is reallocated, never a group. */
static int group_table_add_chunk(struct group_table *t)
{
  if (t->count > GROUP_NONE - GROUP_CHUNK_SIZE) {
    errno = ENOMEM;
    return -1;
  }
  struct group **chunks = realloc(t->chunks, (t->nchunks + 1) * sizeof *chunks);
  if (!chunks)
    return -1;
  t->chunks = chunks;
  struct group *g = t->source.alloc(t->source.ctx, t->nchunks);
  if (!g)
    return -1;
  t->chunks[t->nchunks++] = g;
  uint32_t base = t->count;
  t->count += GROUP_CHUNK_SIZE;
  /* Thread the new records onto the free list in ascending order. */
  for (uint32_t i = GROUP_CHUNK_SIZE; i-- > 0;) {
    g[i].next_free = t->free_head;
    t->free_head = base + i;
  }
  return 0;
}

static struct group *heap_chunk_alloc(void *ctx, uint32_t index)
{
  (void)ctx;
  (void)index;
  return calloc(GROUP_CHUNK_SIZE, sizeof(struct group));
}

static void heap_chunk_release(void *ctx, struct group *chunk)
{
  (void)ctx;
  free(chunk);
}

static const struct group_chunk_source heap_chunks = { heap_chunk_alloc, heap_chunk_release,
                                                       NULL };

int group_table_init(struct group_table *t, uint32_t initial_groups)
{
  return group_table_init_from(t, initial_groups, NULL);
}

int group_table_init_from(struct group_table *t, uint32_t initial_groups,
                          const struct group_chunk_source *source)
{
  memset(t, 0, sizeof *t);
  t->source = source ? *source : heap_chunks;
  t->free_head = GROUP_NONE;
  do {
    if (group_table_add_chunk(t) < 0)
      return -1;
  } while (t->count < initial_groups);
  return 0;
}

void group_table_destroy(struct group_table *t)
{
  for (uint32_t i = 0; i < t->nchunks; i++)
    if (t->source.release)
      t->source.release(t->source.ctx, t->chunks[i]);
  free(t->chunks);
  memset(t, 0, sizeof *t);
}

int group_table_adopt(struct group_table *t, struct group **chunks, uint32_t nchunks,
                      const struct group_chunk_source *source, const struct page_map *map)
{
  memset(t, 0, sizeof *t);
  t->source = source ? *source : heap_chunks;
  t->free_head = GROUP_NONE;
  t->chunks = malloc((nchunks ? nchunks : 1) * sizeof *t->chunks);
  if (!t->chunks)
    return -1;
  memcpy(t->chunks, chunks, nchunks * sizeof *chunks);
  t->nchunks = nchunks;
  t->count = nchunks * GROUP_CHUNK_SIZE;
  for (uint32_t id = t->count; id-- > 0;) {
    struct group *g = group_get(t, id);
    g->live = 0;
    g->pins = 0;
    if (g->state != GROUP_OPEN && g->state != GROUP_SEALING)
      g->buffer = GROUP_NO_BUFFER;
    if (g->state == GROUP_FREE) {
      g->next_free = t->free_head;
      t->free_head = id;
      continue;
    }
    t->in_use++;
    if (g->unprotected)
      t->unprotected++;
    if (g->absent)
      t->short_groups++;
  }
  for (uint64_t p = 0; p < map->pages; p++) {
    page_entry e = page_map_get(map, p);
    if (page_entry_kind(e) != PAGE_REMOTE || page_entry_group(e) >= t->count)
      continue;
    group_get(t, (uint32_t)page_entry_group(e))->live++;
    t->live_pages++;
  }
  group_table_count_sealed(t);
  return 0;
}

void group_table_count_sealed(struct group_table *t)
{
  memset(t->sealed_by_live, 0, sizeof t->sealed_by_live);
  for (uint32_t id = 0; id < t->count; id++) {
    const struct group *g = group_get(t, id);
    if (g->state == GROUP_SEALED && g->live <= GROUP_MAX_DATA)
      t->sealed_by_live[g->live]++;
  }
}

/* A sealed group's live count changes: its place in sealed_by_live follows. */
static void sealed_live_moved(struct group_table *t, unsigned from, unsigned to)
{
  if (from <= GROUP_MAX_DATA && t->sealed_by_live[from] > 0)
    t->sealed_by_live[from]--;
  if (to <= GROUP_MAX_DATA)
    t->sealed_by_live[to]++;
}

uint32_t group_open(struct group_table *t, unsigned capacity, bool has_parity,
                    uint16_t buffer)
{
  return group_open_with(t, capacity, has_parity ? 1u : 0u, buffer);
}

uint32_t group_open_with(struct group_table *t, unsigned capacity, unsigned parities,
                         uint16_t buffer)
{
  assert(capacity >= 1 && capacity <= GROUP_MAX_DATA && parities <= GROUP_MAX_PARITY);
  bool has_parity = parities > 0;
  /* Growing is the only allocation here; the engine sizes the table at open for the
   * device's usual needs, so this happens only when cleaning falls behind. */
  if (t->free_head == GROUP_NONE && group_table_add_chunk(t) < 0)
    return GROUP_NONE;
  uint32_t id = t->free_head;
  struct group *g = group_get(t, id);
  t->free_head = g->next_free;
  memset(g, 0, sizeof *g);
  for (unsigned i = 0; i < GROUP_MAX_DATA + GROUP_MAX_PARITY; i++)
    g->server[i] = SERVER_INDEX_NONE;
  g->state = GROUP_OPEN;
  g->capacity = (uint8_t)capacity;
  g->has_parity = has_parity;
  g->parities = (uint8_t)parities;
  g->buffer = has_parity ? buffer : GROUP_NO_BUFFER;
  g->next_free = GROUP_NONE;
  t->in_use++;
  t->opened++;
  return id;
}

unsigned group_add_member(struct group_table *t, uint32_t id, server_index server,
                          uint32_t slot, uint32_t page)
{
  struct group *g = group_get(t, id);
  assert(g->state == GROUP_OPEN && g->members < g->capacity);
  unsigned m = g->members;
  g->server[m] = server;
  g->slot[m] = slot;
  g->page[m] = page;
  /* Counted once its entry is whole: the table may live in a pager's state, and a
   * restart must not find a member whose server and slot are another group's. */
  atomic_signal_fence(memory_order_release);
  g->members++;
  g->live++;
  t->live_pages++;
  return m;
}

void group_begin_seal(struct group_table *t, uint32_t id, server_index server, uint32_t slot)
{
  group_begin_seal_with(t, id, &server, &slot);
}

void group_begin_seal_with(struct group_table *t, uint32_t id, const server_index *server,
                           const uint32_t *slot)
{
  struct group *g = group_get(t, id);
  assert(g->state == GROUP_OPEN && g->has_parity);
  /* Q's reservation moves to its place (capacity + 1): the entries past the parities
   * are nobody's. */
  for (unsigned k = g->capacity; k < GROUP_MAX_DATA + GROUP_MAX_PARITY; k++)
    g->server[k] = SERVER_INDEX_NONE;
  for (unsigned j = 0; j < g->parities; j++) {
    g->server[g->capacity + j] = server[j];
    g->slot[g->capacity + j] = slot[j];
  }
  atomic_signal_fence(memory_order_release); /* a restart reseals to the slot named */
  g->state = GROUP_SEALING;
}

uint16_t group_finish_seal(struct group_table *t, uint32_t id)
{
  struct group *g = group_get(t, id);
  assert(g->state == GROUP_SEALING);
  uint16_t buffer = g->buffer;
  g->buffer = GROUP_NO_BUFFER;
  g->state = GROUP_SEALED;
  t->sealed++;
  sealed_live_moved(t, GROUP_MAX_DATA + 1, g->live);
  return buffer;
}

void group_seal_without_parity(struct group_table *t, uint32_t id)
{
  struct group *g = group_get(t, id);
  assert(g->state == GROUP_OPEN && !g->has_parity);
  g->state = GROUP_SEALED;
  t->sealed++;
  sealed_live_moved(t, GROUP_MAX_DATA + 1, g->live);
}

void group_mark_absent(struct group_table *t, uint32_t id, unsigned entry)
{
  struct group *g = group_get(t, id);
  assert(entry < GROUP_MAX_DATA + GROUP_MAX_PARITY);
  if (!g->absent)
    t->short_groups++;
  g->absent |= UINT32_C(1) << entry;
}

void group_drop_parity(struct group_table *t, uint32_t id)
{
  struct group *g = group_get(t, id);
  if (!g->has_parity)
    return;
  g->has_parity = 0;
  g->unprotected = 1;
  t->unprotected++;
}

uint64_t group_table_unprotected_live(const struct group_table *t)
{
  uint64_t live = 0;
  for (uint32_t i = 0; t->unprotected > 0 && i < t->count; i++) {
    const struct group *g = group_get(t, i);
    if (g->state != GROUP_FREE && g->unprotected)
      live += g->live;
  }
  return live;
}

bool group_member_dead(struct group_table *t, uint32_t id, unsigned member)
{
  struct group *g = group_get(t, id);
  assert(member < g->members && g->live > 0);
  g->live--;
  t->live_pages--;
  if (g->state == GROUP_SEALED)
    sealed_live_moved(t, g->live + 1u, g->live);
  return g->live == 0 && g->state == GROUP_SEALED;
}

bool group_member_is_live(const struct group_table *t, const struct page_map *map,
                          uint32_t id, unsigned member)
{
  const struct group *g = group_get(t, id);
  if (member >= g->members)
    return false;
  return page_map_get(map, g->page[member]) == page_entry_remote(id, member);
}

void group_release(struct group_table *t, uint32_t id)
{
  struct group *g = group_get(t, id);
  assert(g->state != GROUP_FREE);
  if (g->unprotected)
    t->unprotected--;
  if (g->absent)
    t->short_groups--;
  if (g->state == GROUP_SEALED)
    sealed_live_moved(t, g->live, GROUP_MAX_DATA + 1);
  g->state = GROUP_FREE;
  g->next_free = t->free_head;
  t->free_head = id;
  t->in_use--;
  t->reclaimed++;
}

unsigned group_stored_pages(const struct group *g)
{
  if (g->state == GROUP_FREE)
    return 0;
  bool parity_stored = g->has_parity && g->state != GROUP_OPEN;
  return g->members + (parity_stored ? g->parities : 0u);
}

double group_table_live_ratio(const struct group_table *t)
{
  uint64_t live = 0, held = 0;
  for (uint32_t i = 0; i < t->count; i++) {
    const struct group *g = group_get(t, i);
    if (g->state != GROUP_SEALED)
      continue;
    live += g->live;
    held += g->members;
  }
  return held ? (double)live / (double)held : 1.0;
}

uint64_t group_table_memory_bytes(const struct group_table *t)
{
  return (uint64_t)t->count * sizeof(struct group) + t->nchunks * sizeof(struct group *);
}

void parity_xor_pages(uint8_t *restrict dst, const uint8_t *restrict a,
                      const uint8_t *restrict b)
{
  for (size_t i = 0; i < RP_PAGE_SIZE; i++)
    dst[i] = a[i] ^ b[i];
}

void parity_xor_page(uint8_t *restrict dst, const uint8_t *restrict src)
{
  /* A byte loop with restrict pointers: gcc and clang vectorise it to 16/32-byte XORs at
   * -O2 with unaligned loads, so a frontend buffer at any address is fine (an unaligned
   * NBD write hands the engine pages at odd addresses). */
  for (size_t i = 0; i < RP_PAGE_SIZE; i++)
    dst[i] ^= src[i];
}
