/* 'on': picks the frontend (frontend_choice.h), starts the notify listener, the pager and,
 * for ublk and nbd, a standby and its keeper before the first page goes out (in a host
 * short of memory nothing can be started once swap waits for a dead daemon), raises
 * vm.min_free_kbytes to at least 16384 (so the kernel keeps the memory it needs to send
 * swap-out traffic), then mkswap and swapon --discard=pages --priority. 'on' for a device
 * that is still on and served (what a refused 'off' leaves) takes it back and exits 0.
 *
 * Errors: swap_turn_on ends the process through swap_die, after undoing what it did, so
 * a failed 'on' leaves nothing behind (swap_context.h).
 */
#ifndef RAMPART_SUPERVISOR_SWAP_ON_H
#define RAMPART_SUPERVISOR_SWAP_ON_H

struct swap_context;

void swap_turn_on(struct swap_context *c);

#endif
