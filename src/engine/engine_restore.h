/* state= (engine_restore.c, docs/recovery.md): the pager's state segment opened,
 * taken over and closed. The record kept while the engine runs is state_record.h.
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_ENGINE_RESTORE_H
#define RAMPART_ENGINE_RESTORE_H

#include <stdbool.h>
#include <stddef.h>

struct rampart_engine;

int engine_restore_open(struct rampart_engine *e, char *err, size_t errlen);
/* After the loop and the spill store exist, instead of server_set_open, when the state
 * was left by a process that died. */
int engine_restore_recover(struct rampart_engine *e, char *err, size_t errlen);
/* clean: the servers were told GOODBYE, so the state goes; else it stays to be taken
 * over. */
void engine_restore_close(struct rampart_engine *e, bool clean);
/* Every server's entry, and the rebuild clock, into the state. */
void engine_restore_save_servers(struct rampart_engine *e);

#endif
