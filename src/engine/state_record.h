/* state= (state_record.c, docs/recovery.md): the engine's record in the pager state
 * that outlives the process, kept as it runs. The segment's own layout is
 * state_segment.h; opening it and taking a device over from it is
 * ../engine/engine_restore.h.
 *
 * Errors: none: each call records, and cannot fail.
 */
#ifndef RAMPART_STATE_RECORD_H
#define RAMPART_STATE_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "page_map.h"

struct rampart_engine;
struct page_op;
struct recovered_write;
struct server;

void state_record_save_server(struct rampart_engine *e, const struct server *s);
/* op is about to make `entry` its page's version: records the version it replaces, and
 * true when that one must be kept (not retired) until the op ends. */
bool state_record_keep_replaced(struct page_op *op, page_entry entry);
/* The map now names `entry`, the op's version. */
void state_record_installed(struct page_op *op, page_entry entry);
/* op is going back to the pool: its record goes; true when it kept a version, which the
 * caller retires now (*retire). */
bool state_record_op_ended(struct page_op *op, page_entry *retire);
/* A copy of op's page failed verification: if it is the version a dead process's write
 * had not yet stored, the page goes back to the version before it; true then, and the
 * caller retires *retire (the version that failed) and reads the page again. */
bool state_record_fall_back(struct page_op *op, page_entry *retire);
/* The page gets a new version (or is trimmed): a version kept for a fallback goes. The
 * recovered write that kept it, or NULL when none is left; the caller releases its
 * old_entry when it was installed. Called until NULL, with *from 0 at first: the scan
 * goes on from where the last call stopped. */
struct recovered_write *state_record_drop_kept(struct rampart_engine *e, uint64_t page,
                                               uint32_t *from);
/* A recovered write (engine_restore.c) keeps nothing any more; and its record goes,
 * its op back to the pool, once nothing of it is needed (no replay in flight). */
void state_record_drop_recovered(struct rampart_engine *e, struct recovered_write *w);
void state_record_settle_recovered(struct rampart_engine *e, struct recovered_write *w);
/* A group opened (with its parity server and slot): a restart continues it. */
void state_record_group_opened(struct rampart_engine *e, uint32_t group);
/* Parity buffer `buffer`'s page `page` (0 or 1) is now its XOR, covering `covered`
 * members: one store, so a crash leaves the old page current or the new one. */
void state_record_parity_published(struct rampart_engine *e, uint16_t buffer, unsigned page,
                                   unsigned covered);

#endif
