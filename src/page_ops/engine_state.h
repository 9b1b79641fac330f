/* state= (engine_state.c, docs/recovery.md): the engine's side of the pager state that
 * outlives the process. The segment's own layout is pager_state.h.
 *
 * Errors: -1 with a sentence in err (docs/CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_ENGINE_STATE_H
#define RAMPART_ENGINE_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "page_map.h"

struct rampart_engine;
struct page_op;
struct server;

int engine_state_open(struct rampart_engine *e, char *err, size_t errlen);
/* After the loop and the spill store exist, instead of server_set_open, when the state
 * was left by a process that died. */
int engine_state_recover(struct rampart_engine *e, char *err, size_t errlen);
/* clean: the servers were told GOODBYE, so the state goes; else it stays to be taken
 * over. */
void engine_state_close(struct rampart_engine *e, bool clean);
void engine_state_save_server(struct rampart_engine *e, const struct server *s);
void engine_state_save_servers(struct rampart_engine *e);
/* op is about to make `entry` its page's version: records the version it replaces, and
 * true when that one must be kept (not retired) until the op ends. */
bool engine_state_keep_replaced(struct page_op *op, page_entry entry);
/* The map now names `entry`, the op's version. */
void engine_state_installed(struct page_op *op, page_entry entry);
/* op is going back to the pool: the version it kept is retired now. */
void engine_state_op_ended(struct page_op *op);
/* A copy of op's page failed verification: if it is the version a dead process's write
 * had not yet stored, the page goes back to the version before it; true then, and the
 * caller reads the page again. */
bool engine_state_fall_back(struct page_op *op);
/* The page gets a new version (or is trimmed): versions kept for a fallback go. */
void engine_state_page_rewritten(struct rampart_engine *e, uint64_t page);
/* A group opened (with its parity server and slot): a restart continues it. */
void engine_state_group_opened(struct rampart_engine *e, uint32_t group);
/* Parity buffer `buffer`'s page `page` (0 or 1) is now its XOR, covering `covered`
 * members: one store, so a crash leaves the old page current or the new one. */
void engine_state_parity_published(struct rampart_engine *e, uint16_t buffer, unsigned page,
                                   unsigned covered);

#endif
