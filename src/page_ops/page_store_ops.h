/* Where a page lives, as one const table of operations per store (page_store_ops.c).
 *
 * A page's current version is on the servers (a member of a group), in the spill file
 * or in local RAM, or it is the zero page, which is kept nowhere and reads as zeros.
 * The kind of its page map entry says which (page_map.h), and page_store_of gives that
 * store's table; a new version goes to the store page_store_for_write picks, and to
 * the spill store when that one cannot take it. The paths call a store through its
 * table instead of branching on where the page is, so what each store does is one
 * entry point per operation, and a path reads the same for every store.
 *
 * What differs between the redundancy policies stays in their table
 * (redundancy_policy.h), and the write path asks it: write-through writes the spill
 * store's copy (write_copy) beside every version, and when no server can take a page
 * that copy is the page.
 *
 * The entry points are defined beside the path they serve, whose helpers they share:
 * reads in page_read.c, writes and releases in page_write.c. Only the tables name them.
 *
 * Errors: none here; a read or write through a table ends its op with 0 or a negative
 * errno (page_op.h; docs/CONTRIBUTING.md, convention 2).
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
  /* Makes op's page a version in this store and sends its bytes, or parks the op until
   * the store can (a parity buffer, cleaning behind). False when the store cannot take
   * it now (no server can, local RAM is full), with the op untouched: the caller sends
   * it elsewhere. The spill store always takes it, and ends a write it has no room for
   * with ENOSPC. NULL for the zero page: a trim writes nothing. */
  bool (*write)(struct page_op *op);
  /* Writes a copy of op's page that the map does not name, at the page's own slot
   * (write-through's disk copy): a read falls back to it, and it is the page when no
   * server can take a write. NULL: the store keeps no copies. */
  void (*write_copy)(struct page_op *op);
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

/* The store a new version goes to first: local RAM on a device with no servers (a
 * standalone RAM disk), else the servers. The policy adds write-through's disk copy
 * but never changes the store. */
const struct page_store_ops *page_store_for_write(const struct rampart_engine *e);

/* ---- the entry points, named by the tables only -------------------------------------- */

/* page_read.c */
void page_store_zero_read(struct page_op *op, page_entry entry);
void page_store_remote_read(struct page_op *op, page_entry entry);
void page_store_spill_read(struct page_op *op, page_entry entry);
void page_store_local_read(struct page_op *op, page_entry entry);

/* page_write.c */
bool page_store_remote_write(struct page_op *op);
bool page_store_spill_write(struct page_op *op);
void page_store_spill_write_copy(struct page_op *op);
bool page_store_local_write(struct page_op *op);
void page_store_zero_release(struct rampart_engine *e, page_entry old, bool pinned);
void page_store_remote_release(struct rampart_engine *e, page_entry old, bool pinned);
void page_store_spill_release(struct rampart_engine *e, page_entry old, bool pinned);
void page_store_local_release(struct rampart_engine *e, page_entry old, bool pinned);

#endif
