/* Page map storage (see page_map.h). The map is mmap'd rather than calloc'd so that a
 * large, mostly unwritten device costs only the pages of the map actually touched. */
#include "page_map.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

int page_map_init(struct page_map *map, uint64_t pages)
{
  map->pages = pages;
  map->entries = NULL;
  map->owned = 0;
  map->count[PAGE_ZERO] = pages;
  map->count[PAGE_REMOTE] = map->count[PAGE_SPILL] = map->count[PAGE_LOCAL] = 0;
  if (pages == 0)
    return 0;
  if (pages > SIZE_MAX / sizeof(page_entry)) {
    errno = ENOMEM;
    return -1;
  }
  void *p = mmap(NULL, pages * sizeof(page_entry), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return -1;
  map->entries = p;
  map->owned = 1;
  return 0;
}

void page_map_init_at(struct page_map *map, uint64_t pages, page_entry *entries)
{
  map->pages = pages;
  map->entries = entries;
  map->owned = 0;
  map->count[PAGE_ZERO] = map->count[PAGE_REMOTE] = 0;
  map->count[PAGE_SPILL] = map->count[PAGE_LOCAL] = 0;
  for (uint64_t p = 0; p < pages; p++)
    map->count[page_entry_kind(entries[p])]++;
}

void page_map_destroy(struct page_map *map)
{
  if (map->entries && map->owned)
    munmap(map->entries, map->pages * sizeof(page_entry));
  map->entries = NULL;
  map->pages = 0;
}

uint64_t page_map_memory_bytes(const struct page_map *map)
{
  return map->pages * sizeof(page_entry);
}
