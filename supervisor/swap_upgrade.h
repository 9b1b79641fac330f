/* 'upgrade' moves a running ublk or NBD device onto the pager binary installed now, under
 * live swap: a standby on the installed binary replaces the old one, then the serving
 * pager hands over to it. It refuses, before it stops anything, when the installed binary
 * cannot read the running pager's state. The handover is the pager's SIGKILL: the one path
 * a takeover has, the path every crash takes, so a planned upgrade adds no code that only
 * upgrades run. 'reload' has the running device read its cluster= file again (rampartctl
 * device $state/control reload; docs/elastic.md).
 *
 * Errors: both end the process through swap_die with the reason and what to do
 * (swap_context.h); swap_reload returns only when it cannot run rampartctl.
 */
#ifndef RAMPART_SUPERVISOR_SWAP_UPGRADE_H
#define RAMPART_SUPERVISOR_SWAP_UPGRADE_H

struct swap_context;

void swap_upgrade(const struct swap_context *c);
int swap_reload(const struct swap_context *c);

#endif
