/* A page whose write is in flight, and the reads that meet it (page_write_pending.c).
 *
 * The page map names a write's version from the moment it is placed, before its bytes
 * land on a server or in the spill store. Until the write ends the page is *pending*
 * (one bit per page). A read that meets it (its copy's slot empty, or holding bytes
 * that fail verification) waits for the write to end and starts over from the map,
 * rather than blame the server or read again back to back: io-timeout at most in all,
 * after which its copy is taken as failed verification. page_write sets and clears the
 * bit, page_read waits, the engine's tick ends waits that ran out.
 *
 * Errors: none: bookkeeping that cannot fail (its table is made with the engine).
 */
#ifndef RAMPART_PAGE_WRITE_PENDING_H
#define RAMPART_PAGE_WRITE_PENDING_H

#include <stdbool.h>
#include <stdint.h>

#include "engine_core.h"

static inline bool page_write_is_pending(const struct rampart_engine *e, uint64_t page)
{
  return (e->write_pending[page / 64] >> (page % 64)) & 1u;
}

/* A write of `page` was placed: the map names bytes that have not landed. */
void page_write_pending_set(struct rampart_engine *e, uint64_t page);
/* The map names bytes that need no write to land (zeros, a move's copy in the spill
 * store): no read should wait for the write still in flight, which no longer names it. */
void page_write_pending_clear(struct rampart_engine *e, uint64_t page);
/* A write of `page` ended (stored, failed, or superseded); newest: it was the write
 * the map names, so the bit clears. Either way the reads waiting on the page start
 * over (they wait again if a newer write is in flight). */
void page_write_pending_ended(struct rampart_engine *e, uint64_t page, bool newest);

/* The read op met its page's write in flight: true when it now waits for it (false:
 * it waited io-timeout already, and must take its copy as failed). */
bool page_read_waits_for_write(struct page_op *op);
/* From the tick: reads that have waited io-timeout start over (and then fail over). */
void page_read_expire_write_waits(struct rampart_engine *e, uint64_t now_ns);

#endif
