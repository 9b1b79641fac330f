/* Which frontend 'on' uses (--frontend forces one), the best this kernel has: ublk where
 * /dev/ublk-control exists or 'modprobe ublk_drv' makes it; nbd where /dev/nbd* exists or
 * 'modprobe nbd' makes it; fuse only where the kernel has neither driver. Also who serves
 * NBD (rampart-nbd-server or nbdkit) and the fuse frontend's daemon.
 *
 * Errors: swap_choose_frontend ends the process through swap_die, with the reason and what
 * to do, when the frontend asked for (or every one) cannot work here (swap_context.h).
 */
#ifndef RAMPART_SUPERVISOR_FRONTEND_CHOICE_H
#define RAMPART_SUPERVISOR_FRONTEND_CHOICE_H

struct swap_context;

struct frontend_choice {
  char frontend[16]; /* ublk, nbd, nbd-client (nbd for a plugin other than rampart's), fuse */
  char daemon[32];   /* rampart-nbd-server, nbdkit or rampart-fuse */
  char fuse_daemon[16]; /* rampart-fuse or nbdfuse */
};

void swap_choose_frontend(const struct swap_context *c, struct frontend_choice *f);

#endif
