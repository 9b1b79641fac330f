/* Standalone RAM pages: the device's own memory when it has no servers (memory=).
 * One anonymous mapping, touched only as pages are written, so a large memory= costs
 * nothing until used; slots are reused in place on overwrite. */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "local_store.h"

int local_store_init(struct local_store *s, uint64_t pages)
{
  s->pages = NULL;
  if (slot_allocator_init(&s->slots, (uint32_t)pages) < 0)
    return -1;
  if (pages == 0)
    return 0;
  void *p = mmap(NULL, pages * RP_PAGE_SIZE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return -1;
  s->pages = p;
  return 0;
}

void local_store_destroy(struct local_store *s)
{
  if (s->pages)
    munmap(s->pages, (size_t)s->slots.capacity * RP_PAGE_SIZE);
  s->pages = NULL;
  slot_allocator_destroy(&s->slots);
}
