/* 'off': take the device away and undo exactly what 'on' did, as its state records. It
 * refuses, with the numbers and what to do, while the device holds more pages than memory
 * can take back with headroom to spare (an eighth of MemTotal, at most 64 MiB; swapoff
 * would have to OOM-kill processes): it then exits 75 and leaves the device on and served,
 * so no page is lost; --force skips that check.
 *
 * Errors: swap_turn_off ends the process through swap_die when a step fails (the device
 * then stays as it is, so no page is lost), or with status 75 when it refuses
 * (swap_context.h).
 */
#ifndef RAMPART_SUPERVISOR_SWAP_OFF_H
#define RAMPART_SUPERVISOR_SWAP_OFF_H

struct swap_context;

void swap_turn_off(struct swap_context *c);

/* KiB of swap in use on dev, from /proc/swaps; -1 when dev is not swap. */
long swap_used_kib(const char *dev);

#endif
