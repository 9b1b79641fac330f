/* Writes (page_write.c): placement, the open group and its parity, sealing, the
 * versions a write replaces and when their slots go back (reclaim).
 *
 * Errors: a write's op completes with 0 or negative errno (page_op.h;
 * CONTRIBUTING.md, convention 2).
 */
#ifndef RAMPART_PAGE_WRITE_H
#define RAMPART_PAGE_WRITE_H

#include <stdbool.h>
#include <stdint.h>

#include "page_map.h"

struct rampart_engine;
struct page_op;
struct parity_buffer;

void page_write_start(struct page_op *op);
/* The page's previous version `old` is no longer current. */
void page_write_retire(struct rampart_engine *e, page_entry old);
/* The same for a version that was held pinned rather than live (state_record.c keeps
 * the version a dead pager's write replaced that way). */
void page_write_release_version(struct rampart_engine *e, page_entry old, bool pinned);
/* The page becomes `entry` other than by a write's own install (a trim, a move to the
 * spill store, a page declared lost): the old version retires, and so does what a dead
 * pager's write of the page kept for a fallback (state_record_drop_kept). */
void page_write_supersede(struct rampart_engine *e, uint64_t page, page_entry entry);
void page_write_trim(struct rampart_engine *e, uint64_t page);
/* With state=, op is going back to the pool: the version it kept, so that a restart
 * could fall back to it, is retired now (page_op.c, as the op goes back to its pool). */
void page_write_op_recycled(struct page_op *op);
void page_write_reclaim(struct rampart_engine *e, uint32_t group);
/* A member of `group` never reached its server (and the server is not lost): the
 * group's parity covers bytes no server holds, so it goes unprotected. */
void page_write_member_lost(struct rampart_engine *e, uint32_t group, unsigned member);
void page_write_close_open_group(struct rampart_engine *e);
/* A SEALING group's parity write is sent again from its buffer (a restart: the dead
 * process's write may not have landed). */
void page_write_reseal(struct rampart_engine *e, uint32_t group);
/* Points the buffer at its page `current` (0 or 1) as the XOR, the other as spare. */
void parity_buffer_use_page(struct rampart_engine *e, struct parity_buffer *pb,
                            unsigned current);

#endif
