/* A page whose write is in flight, and the reads that meet it (page_write_pending.h).
 *
 * Why reads wait rather than read again: a read can get to a copy before its bytes do
 * (a spill read overtaking the spill write of the same slot, a read of a move's new
 * copy, a member write that is late). Reading again at once spins for as long as the
 * write takes, which on a loaded disk or a slow server is longer than any count of
 * re-reads allows (it once ended in EIO after 256). Writes that keep overlapping a
 * read, or a write that never ends, hold it io-timeout at most in all, as a server
 * would.
 */
#include "page_write_pending.h"

#include "page_op.h"

void page_write_pending_set(struct rampart_engine *e, uint64_t page)
{
  e->write_pending[page / 64] |= UINT64_C(1) << (page % 64);
}

void page_write_pending_clear(struct rampart_engine *e, uint64_t page)
{
  e->write_pending[page / 64] &= ~(UINT64_C(1) << (page % 64));
}

/* Resumes the reads waiting for a write of `page` (any page: UINT64_MAX) that first
 * waited before `since_before` (any time: UINT64_MAX). */
static void resume_reads_awaiting_write(struct rampart_engine *e, uint64_t page,
                                        uint64_t since_before)
{
  struct page_op *ready = NULL, **link = &e->reads_awaiting_write;
  while (*link) {
    struct page_op *op = *link;
    if ((page == UINT64_MAX || op->page == page) && op->write_wait_since_ns < since_before) {
      *link = op->next;
      op->next = ready;
      ready = op;
    } else {
      link = &op->next;
    }
  }
  /* Unlinked first: a read started again may wait again, on a newer write. */
  while (ready) {
    struct page_op *op = ready;
    ready = op->next;
    op->next = NULL;
    page_op_resume(op);
  }
}

void page_write_pending_ended(struct rampart_engine *e, uint64_t page, bool newest)
{
  /* Only the newest write of the page clears the bit: an older one finishing late says
   * nothing about whether the newest has landed. */
  if (newest)
    page_write_pending_clear(e, page);
  if (e->reads_awaiting_write)
    resume_reads_awaiting_write(e, page, UINT64_MAX);
}

bool page_read_waits_for_write(struct page_op *op)
{
  struct rampart_engine *e = op->engine;
  uint64_t now = engine_now_ns();
  if (!op->write_wait_since_ns)
    op->write_wait_since_ns = now;
  if (now - op->write_wait_since_ns >= engine_io_timeout_ns(e))
    return false;
  page_op_begin_wait(op, PAGE_OP_WAITS_FOR_WRITE);
  op->next = e->reads_awaiting_write;
  e->reads_awaiting_write = op;
  return true;
}

void page_read_expire_write_waits(struct rampart_engine *e, uint64_t now_ns)
{
  uint64_t limit = engine_io_timeout_ns(e);
  if (now_ns > limit)
    resume_reads_awaiting_write(e, UINT64_MAX, now_ns - limit + 1);
}
