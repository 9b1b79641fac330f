/* Where a page lives, as one const table of operations per store (page_store_ops.c).
 *
 * A page's current version is on the servers (a member of a group), in the spill file
 * or in local RAM, or it is the zero page, which is kept nowhere and reads as zeros.
 * The kind of its page map entry says which (page_map.h), and page_store_of gives that
 * store's table. Reads and releases start from an entry of any kind, so they call the
 * store through its table instead of branching on where the page is. A write knows its
 * store without a lookup (page_write_start: local RAM on a device with no servers, else
 * the servers, the spill store when those cannot take it; write-through's disk copy
 * beside every version, as the policy table says), so it calls that store's write
 * directly, in page_write.c.
 *
 * The entry points are defined beside the path they serve, whose helpers they share:
 * reads in page_read.c, releases in page_write.c. Only the tables name them.
 *
 * Errors: none here; a read or write through a table ends its op with 0 or a negative
 * errno (page_op.h; CONTRIBUTING.md, convention 2).
 */
#ifndef RAMPART_PAGE_STORE_OPS_H
#define RAMPART_PAGE_STORE_OPS_H

#include <stdbool.h>

#include "page_map.h"

struct rampart_engine;
struct page_op;

struct page_store_ops {
  const char *name; /* in messages: "the copy in the <name>" */
  /* Reads the copy `entry` names into op->buf and ends the read (verified, failed or
   * started over from the map). */
  void (*read)(struct page_op *op, page_entry entry);
  /* Gives a version nothing names any more back to the store: its slot, or its group's
   * live count (pinned: a version state_record.c kept, which its group counted as a
   * pin, not as live). */
  void (*release)(struct rampart_engine *e, page_entry old, bool pinned);
};

extern const struct page_store_ops page_store_zero;
extern const struct page_store_ops page_store_remote;
extern const struct page_store_ops page_store_spill;
extern const struct page_store_ops page_store_local;

/* The store of each page_location_kind. */
extern const struct page_store_ops *const page_stores_by_kind[4];

/* The store whose version `entry` names. */
static inline const struct page_store_ops *page_store_of(page_entry entry)
{
  return page_stores_by_kind[page_entry_kind(entry)];
}


/* ---- the entry points, named by the tables only -------------------------------------- */

/* page_read.c */
void page_store_zero_read(struct page_op *op, page_entry entry);
void page_store_remote_read(struct page_op *op, page_entry entry);
void page_store_spill_read(struct page_op *op, page_entry entry);
void page_store_local_read(struct page_op *op, page_entry entry);

/* page_write.c */
void page_store_zero_release(struct rampart_engine *e, page_entry old, bool pinned);
void page_store_remote_release(struct rampart_engine *e, page_entry old, bool pinned);
void page_store_spill_release(struct rampart_engine *e, page_entry old, bool pinned);
void page_store_local_release(struct rampart_engine *e, page_entry old, bool pinned);

#endif
