/* The standby beside the serving pager, and the keeper that replaces it.
 *
 * When the serving pager dies, its standby takes the device over by itself (the keeper is
 * not on that path: it may itself be swapped out behind the dead pager). Once the standby
 * says it took over, the keeper records it as the pager and starts a new standby for it,
 * so the next crash is survived too. A standby that dies, or fails to start, while the
 * pager lives is started again, at most every 60 s. The keeper is rampart-swap itself
 * ('keep-standby', started by 'on'), waiting on the pager's and the standby's pidfds.
 *
 * Errors: swap_start_standby ends the process through swap_die when no standby stands by
 * (swap_context.h); swap_keep_standby returns the keeper's exit status.
 */
#ifndef RAMPART_SUPERVISOR_STANDBY_KEEPER_H
#define RAMPART_SUPERVISOR_STANDBY_KEEPER_H

#include <stdbool.h>

struct swap_context;

/* A standby beside the serving pager, armed (it says it stands by) before this returns;
 * records standby_pid (empty until it is spawned). Its log is that of the next
 * generation, so each daemon the device has had keeps its own. */
void swap_start_standby(const struct swap_context *c);
/* swap_start_standby in a child process, so its failure ends only the child: true when
 * a standby stands by. */
bool swap_try_start_standby(const struct swap_context *c);

/* Runs fn(c) holding the lock that 'upgrade' holds while it swaps the standby for one on
 * the new binary, so the keeper never starts a second one; returns fn's result. */
bool swap_with_standby_lock(const struct swap_context *c,
                            bool (*fn)(const struct swap_context *));

/* The keeper's loop, until the state is gone (0) or the pager died with no standby to
 * take over (1). */
int swap_keep_standby(const struct swap_context *c);

#endif
