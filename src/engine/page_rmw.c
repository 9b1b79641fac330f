/* Reads and writes of part of a page, for the blocking entry points (rampart.h), which
 * frontends call from their own threads with any offset and length.
 *
 * A write smaller than a page is a read-modify-write: read the page, patch the bytes,
 * write the page back. Two of them into the same page at once (nbdkit's parallel thread
 * model, multi-conn, a minimum block size of 1) must not interleave, or each writes back
 * the other's old bytes and one update is lost although the two never overlapped. So a
 * sub-page write holds a lock for its page from the read to the end of the write-back:
 * one mutex per stripe of pages (page % PAGE_RMW_LOCKS, so neighbouring pages never
 * share one), taken on the frontend's thread and never by the I/O thread. Whole-page
 * requests never come here and take no lock: the 4 KiB path is untouched. A whole-page
 * write racing a sub-page write of the same page overlaps it, and NBD leaves the outcome
 * of overlapping writes in flight together undefined.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "page_rmw.h"
#include "rampart.h"

static pthread_mutex_t *page_lock(struct page_rmw *rmw, uint64_t page)
{
  return &rmw->locks[page % PAGE_RMW_LOCKS];
}

struct page_rmw *page_rmw_new(struct rampart_engine *engine)
{
  struct page_rmw *rmw = malloc(sizeof *rmw);
  if (!rmw)
    return NULL;
  rmw->engine = engine;
  for (unsigned i = 0; i < PAGE_RMW_LOCKS; i++)
    pthread_mutex_init(&rmw->locks[i], NULL);
  return rmw;
}

void page_rmw_free(struct page_rmw *rmw)
{
  if (!rmw)
    return;
  for (unsigned i = 0; i < PAGE_RMW_LOCKS; i++)
    pthread_mutex_destroy(&rmw->locks[i]);
  free(rmw);
}

/* No lock: a read sees the page before or after a concurrent write-back, whole either
 * way, as any read racing a write may. */
int page_rmw_read(struct page_rmw *rmw, uint8_t *dst, uint32_t len, uint64_t off)
{
  _Alignas(64) uint8_t page[RAMPART_PAGE_SIZE];
  uint64_t base = off & ~(uint64_t)(RAMPART_PAGE_SIZE - 1);
  int r = engine_run_sync(rmw->engine, RAMPART_OP_READ, page, RAMPART_PAGE_SIZE, base, 0);
  if (r == 0)
    memcpy(dst, page + (off - base), len);
  return r;
}

int page_rmw_write(struct page_rmw *rmw, const uint8_t *src, uint32_t len, uint64_t off,
                   uint32_t flags)
{
  _Alignas(64) uint8_t page[RAMPART_PAGE_SIZE];
  uint64_t base = off & ~(uint64_t)(RAMPART_PAGE_SIZE - 1);
  pthread_mutex_t *lock = page_lock(rmw, base / RAMPART_PAGE_SIZE);
  pthread_mutex_lock(lock);
  int r = engine_run_sync(rmw->engine, RAMPART_OP_READ, page, RAMPART_PAGE_SIZE, base, 0);
  if (r == 0) {
    if (src)
      memcpy(page + (off - base), src, len);
    else
      memset(page + (off - base), 0, len);
    r = engine_run_sync(rmw->engine, RAMPART_OP_WRITE, page, RAMPART_PAGE_SIZE, base, flags);
  }
  pthread_mutex_unlock(lock);
  return r;
}
