/* The page map: where the current version of every logical page lives.
 *
 * One 64-bit entry per logical page, so the client spends 8 bytes per 4 KiB of device
 * (2 MiB per device GiB) here. Entry layout: the top 2 bits name the kind, the rest its
 * address:
 *   ZERO    the page reads as zeros (never written, trimmed or zeroed); the entry is 0
 *   REMOTE  member `member` (8 bits) of group `group` (54 bits)
 *   SPILL   slot in the local-disk spill store
 *   LOCAL   slot in the standalone RAM store
 * Owned by the engine's I/O thread; no locking.
 *
 * Errors: page_map_init returns 0 or -1 (out of memory; CONTRIBUTING.md,
 * convention 1 without a sentence); lookups cannot fail.
 */
#ifndef RAMPART_PAGE_MAP_H
#define RAMPART_PAGE_MAP_H

#include <stdint.h>

enum page_location_kind { PAGE_ZERO = 0, PAGE_REMOTE = 1, PAGE_SPILL = 2, PAGE_LOCAL = 3 };

typedef uint64_t page_entry;

#define PAGE_ENTRY_KIND_SHIFT 62
#define PAGE_ENTRY_MEMBER_BITS 8
#define PAGE_ENTRY_MAX_GROUP ((UINT64_C(1) << (62 - PAGE_ENTRY_MEMBER_BITS)) - 1)
#define PAGE_ENTRY_MAX_SLOT ((UINT64_C(1) << 62) - 1)

static inline enum page_location_kind page_entry_kind(page_entry e)
{
  return (enum page_location_kind)(e >> PAGE_ENTRY_KIND_SHIFT);
}

static inline page_entry page_entry_remote(uint64_t group, unsigned member)
{
  return ((uint64_t)PAGE_REMOTE << PAGE_ENTRY_KIND_SHIFT) |
         (group << PAGE_ENTRY_MEMBER_BITS) | (member & 0xffu);
}

static inline uint64_t page_entry_group(page_entry e)
{
  return (e & PAGE_ENTRY_MAX_SLOT) >> PAGE_ENTRY_MEMBER_BITS;
}

static inline unsigned page_entry_member(page_entry e)
{
  return (unsigned)(e & 0xffu);
}

static inline page_entry page_entry_slot(enum page_location_kind kind, uint64_t slot)
{
  return ((uint64_t)kind << PAGE_ENTRY_KIND_SHIFT) | slot;
}

/* A page whose every copy is gone: reads fail with EIO until it is written again. A
 * spill entry with a slot no store has. */
#define PAGE_ENTRY_LOST page_entry_slot(PAGE_SPILL, PAGE_ENTRY_MAX_SLOT)

static inline uint64_t page_entry_slot_of(page_entry e)
{
  return e & PAGE_ENTRY_MAX_SLOT;
}

struct page_map {
  uint64_t pages;
  page_entry *entries;
  uint64_t count[4]; /* entries of each page_location_kind, kept by page_map_set */
  int owned;         /* 0: the entries belong to someone else (the pager's state) */
};

/* Allocates a map of `pages` zero entries (anonymous mmap: untouched parts cost no
 * memory). 0 or -1 (ENOMEM). */
int page_map_init(struct page_map *map, uint64_t pages);
/* A map over entries kept elsewhere (the pager's state segment, state_segment.h): a
 * restarted pager finds them as its predecessor left them, and the counts are taken
 * from them. Never fails. */
void page_map_init_at(struct page_map *map, uint64_t pages, page_entry *entries);
void page_map_destroy(struct page_map *map);

static inline page_entry page_map_get(const struct page_map *map, uint64_t page)
{
  return map->entries[page];
}

/* Stores `entry` for `page` and returns the entry it replaced, so the caller can mark
 * the old version inactive. */
static inline page_entry page_map_set(struct page_map *map, uint64_t page, page_entry entry)
{
  page_entry old = map->entries[page];
  map->entries[page] = entry;
  map->count[page_entry_kind(old)]--;
  map->count[page_entry_kind(entry)]++;
  return old;
}

/* Bytes of client memory the map occupies. */
uint64_t page_map_memory_bytes(const struct page_map *map);

#endif
