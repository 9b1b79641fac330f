/* 'status': what serves the device, its standby, the state a standby would take over,
 * the keeper, the pages out, and the engine's own figures (rampartctl device).
 *
 * Errors: none: swap_status returns its exit status, 0, or 3 when the device is off.
 */
#ifndef RAMPART_SUPERVISOR_SWAP_STATUS_H
#define RAMPART_SUPERVISOR_SWAP_STATUS_H

struct swap_context;

int swap_status(const struct swap_context *c);

#endif
