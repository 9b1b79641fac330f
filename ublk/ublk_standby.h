/* A standby daemon for a recoverable ublk device (rampart-ublk standby=true).
 *
 * When the daemon serving a swap device dies, the kernel holds the device's I/O. In a
 * machine short of memory that stops everything that allocates: every task in reclaim
 * waits for a swap-out the dead daemon will never answer, the shell that would start a
 * new daemon cannot even fork, and the replacement never runs (kswapd, the workload
 * and any new command all wait in mempool_alloc for a swap bio). So the
 * replacement must exist before the crash: started next to the serving daemon, locked
 * in memory, realtime and an I/O flusher (process_hygiene.c), holding a reserve of
 * memory it gives back the moment it takes over, and asleep on the serving daemon's
 * pidfd, which needs nothing allocated to wake it (src/engine/pager_standby.c, shared with
 * nbdkit rampart standby=true).
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1); 0 and 1 are
 * the two ways the wait ends.
 */
#ifndef RAMPART_UBLK_STANDBY_H
#define RAMPART_UBLK_STANDBY_H

#include <stddef.h>

#include "ublk_control.h"

/* Waits for the daemon serving device dev_id to end. 1: it died and left the device
 * waiting for a daemon (QUIESCED): take it over. 0: the device is gone (its daemon
 * stopped it), or this standby was asked to stop (err then says so). -1 with err: there is no such device to stand by for, or it is not
 * recoverable. The files in pin (what the takeover reads) are pinned once the device is
 * found; reserve_bytes are held, locked, until the end. */
int ublk_standby_wait(struct ublk_control *c, int dev_id, const char *const *pin,
                      unsigned npin, size_t reserve_bytes, char *err, size_t errlen);

#endif
