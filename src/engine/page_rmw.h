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

#define PAGE_RMW_LOCKS 256u /* stripes of pages for sub-page writes */

/* Runs one whole-page request for the owner and waits for it (the engine's
 * engine_run_sync): 0 or negative errno. */
typedef int (*page_rmw_run_fn)(void *owner, enum rampart_op op, void *buf, uint32_t length,
                               uint64_t offset, uint32_t flags);

/* Taken by frontend threads, never by the I/O thread: a sub-page write holds its page's
 * stripe from its read to the end of its write-back. */
struct page_rmw {
  page_rmw_run_fn run;
  void *owner;
  pthread_mutex_t locks[PAGE_RMW_LOCKS];
};

/* NULL when out of memory. */
struct page_rmw *page_rmw_new(page_rmw_run_fn run, void *owner);
/* rmw may be NULL. */
void page_rmw_free(struct page_rmw *rmw);
int page_rmw_read(struct page_rmw *rmw, uint8_t *dst, uint32_t len, uint64_t off);
/* src NULL: patch with zeros. */
int page_rmw_write(struct page_rmw *rmw, const uint8_t *src, uint32_t len, uint64_t off,
                   uint32_t flags);

#endif
