/* Group bookkeeping and XOR for the parity log (see parity_group.h). */
#include "parity_group.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rampart.h"

static int group_table_grow(struct group_table *t, uint32_t new_count)
{
  struct group *g = realloc(t->groups, (size_t)new_count * sizeof *g);
  if (!g) {
    errno = ENOMEM;
    return -1;
  }
  /* Thread the new records onto the free list in ascending order. */
  for (uint32_t i = new_count; i-- > t->count;) {
    memset(&g[i], 0, sizeof g[i]);
    g[i].next_free = t->free_head;
    t->free_head = i;
  }
  t->groups = g;
  t->count = new_count;
  return 0;
}

int group_table_init(struct group_table *t, uint32_t initial_groups)
{
  memset(t, 0, sizeof *t);
  t->free_head = GROUP_NONE;
  return group_table_grow(t, initial_groups ? initial_groups : 64);
}

void group_table_destroy(struct group_table *t)
{
  free(t->groups);
  memset(t, 0, sizeof *t);
}

uint32_t group_open(struct group_table *t, unsigned capacity, bool has_parity, uint16_t buffer)
{
  assert(capacity >= 1 && capacity <= GROUP_MAX_DATA);
  if (t->free_head == GROUP_NONE) {
    /* Growing is the only allocation here; the engine sizes the table at open for the
     * device's worst case, so this happens only when cleaning falls behind. */
    uint32_t grow = t->count / 2 > 64 ? t->count / 2 : 64;
    if (t->count > GROUP_NONE - 1 - grow || group_table_grow(t, t->count + grow) < 0)
      return GROUP_NONE;
  }
  uint32_t id = t->free_head;
  struct group *g = &t->groups[id];
  t->free_head = g->next_free;
  memset(g, 0, sizeof *g);
  memset(g->server, GROUP_NO_SERVER, sizeof g->server);
  g->state = GROUP_OPEN;
  g->capacity = (uint8_t)capacity;
  g->has_parity = has_parity;
  g->buffer = has_parity ? buffer : GROUP_NO_BUFFER;
  g->next_free = GROUP_NONE;
  t->in_use++;
  t->opened++;
  return id;
}

unsigned group_add_member(struct group_table *t, uint32_t id, uint8_t server, uint32_t slot,
                          uint32_t page)
{
  struct group *g = &t->groups[id];
  assert(g->state == GROUP_OPEN && g->members < g->capacity);
  unsigned m = g->members++;
  g->server[m] = server;
  g->slot[m] = slot;
  g->page[m] = page;
  g->live++;
  return m;
}

void group_begin_seal(struct group_table *t, uint32_t id, uint8_t server, uint32_t slot)
{
  struct group *g = &t->groups[id];
  assert(g->state == GROUP_OPEN && g->has_parity);
  g->server[g->capacity] = server;
  g->slot[g->capacity] = slot;
  g->state = GROUP_SEALING;
}

uint16_t group_finish_seal(struct group_table *t, uint32_t id)
{
  struct group *g = &t->groups[id];
  assert(g->state == GROUP_SEALING);
  uint16_t buffer = g->buffer;
  g->buffer = GROUP_NO_BUFFER;
  g->state = GROUP_SEALED;
  t->sealed++;
  return buffer;
}

void group_seal_without_parity(struct group_table *t, uint32_t id)
{
  struct group *g = &t->groups[id];
  assert(g->state == GROUP_OPEN && !g->has_parity);
  g->state = GROUP_SEALED;
  t->sealed++;
}

bool group_member_dead(struct group_table *t, uint32_t id, unsigned member)
{
  struct group *g = &t->groups[id];
  assert(member < g->members && g->live > 0);
  g->live--;
  return g->live == 0 && g->state == GROUP_SEALED;
}

bool group_member_is_live(const struct group_table *t, const struct page_map *map,
                          uint32_t id, unsigned member)
{
  const struct group *g = &t->groups[id];
  if (member >= g->members)
    return false;
  return page_map_get(map, g->page[member]) == page_entry_remote(id, member);
}

void group_release(struct group_table *t, uint32_t id)
{
  struct group *g = &t->groups[id];
  assert(g->state != GROUP_FREE);
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
  return g->members + (parity_stored ? 1u : 0u);
}

double group_table_live_ratio(const struct group_table *t)
{
  uint64_t live = 0, held = 0;
  for (uint32_t i = 0; i < t->count; i++) {
    const struct group *g = &t->groups[i];
    if (g->state != GROUP_SEALED)
      continue;
    live += g->live;
    held += g->members;
  }
  return held ? (double)live / (double)held : 1.0;
}

uint64_t group_table_memory_bytes(const struct group_table *t)
{
  return (uint64_t)t->count * sizeof(struct group);
}

void parity_xor_page(uint8_t *restrict dst, const uint8_t *restrict src)
{
  /* Word-wide loop with restrict pointers: gcc and clang vectorise it to SSE2/AVX2 at
   * -O2, which keeps XOR far below the cost of the page's trip through the socket. */
  uint64_t *restrict d = (uint64_t *)(void *)dst;
  const uint64_t *restrict s = (const uint64_t *)(const void *)src;
  for (size_t i = 0; i < RAMPART_PAGE_SIZE / sizeof(uint64_t); i++)
    d[i] ^= s[i];
}
