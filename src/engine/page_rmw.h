/* Reads and writes of part of one page (page_rmw.c), from frontend threads: a sub-page
 * write holds its page's stripe lock from its read to the end of its write-back.
 *
 * Errors: 0 or negative errno, as rampart.h's I/O calls (CONTRIBUTING.md,
 * convention 2).
 */
#ifndef RAMPART_PAGE_RMW_H
#define RAMPART_PAGE_RMW_H

#include <pthread.h>
#include <stdint.h>

#include "rampart_types.h"

struct rampart_engine;

#define PAGE_RMW_LOCKS 256u /* stripes of pages for sub-page writes */

/* Taken by frontend threads, never by the I/O thread: a sub-page write holds its page's
 * stripe from its read to the end of its write-back. */
struct page_rmw {
  struct rampart_engine *engine; /* whole pages run through engine_run_sync */
  pthread_mutex_t locks[PAGE_RMW_LOCKS];
};

/* NULL when out of memory. */
struct page_rmw *page_rmw_new(struct rampart_engine *engine);
/* rmw may be NULL. */
void page_rmw_free(struct page_rmw *rmw);
int page_rmw_read(struct page_rmw *rmw, uint8_t *dst, uint32_t len, uint64_t off);
/* src NULL: patch with zeros. */
int page_rmw_write(struct page_rmw *rmw, const uint8_t *src, uint32_t len, uint64_t off,
                   uint32_t flags);

#endif
