/* The kernel NBD driver's netlink interface (linux/nbd-netlink.h), as much of it as
 * attaching a device and moving it to a new server needs.
 *
 * Why netlink and not the ioctls nbd-client -nonetlink uses: only netlink has the
 * dead-connection timeout (a request waits for a new connection instead of failing
 * with EIO) and NBD_CMD_RECONFIGURE (a new socket for a device that stays), which is
 * what lets a swap device outlive the daemon serving it. Plain generic netlink over a
 * socket, no library: a few fixed messages, built in buffers on the stack.
 *
 * Errors: nbd_netlink_open and nbd_netlink_connect are convention 1 (-1 with a sentence
 * in err, CONTRIBUTING.md); nbd_netlink_reconfigure and nbd_netlink_disconnect
 * return 0 or the driver's negative errno (convention 2); nbd_netlink_read_event
 * returns a device index or an NBD_NETLINK_* value.
 */
#ifndef RAMPART_NBD_NETLINK_H
#define RAMPART_NBD_NETLINK_H

#include <stddef.h>
#include <stdint.h>

struct nbd_netlink {
  int fd;        /* requests and their replies */
  int events_fd; /* the driver's multicast group: NBD_CMD_LINK_DEAD */
  uint16_t family;
  uint32_t seq;
};

struct nbd_device_settings {
  int index; /* /dev/nbdN, or -1 for the first free one */
  uint64_t size;
  uint64_t block_size;
  uint64_t server_flags;        /* the export's transmission flags */
  uint64_t timeout_s;           /* a request unanswered this long is sent again */
  uint64_t dead_conn_timeout_s; /* how long requests wait for a new connection */
  const char *backend;          /* NBD_ATTR_BACKEND_IDENTIFIER: a reconfigure must match it */
};

/* Finds the driver's family and joins its multicast group. -1 with err. */
int nbd_netlink_open(struct nbd_netlink *nl, char *err, size_t errlen);
void nbd_netlink_close(struct nbd_netlink *nl);

/* Attaches a device to the nsocks connected sockets socks, one connection each (the
 * driver spreads requests over them, a hardware queue each); sets s->index. More than
 * one needs an export that says NBD_FLAG_CAN_MULTI_CONN. -1 with err. */
int nbd_netlink_connect(struct nbd_netlink *nl, struct nbd_device_settings *s,
                        const int *socks, unsigned nsocks, char *err, size_t errlen);
/* Gives device index the sockets socks in place of its dead connections, one for one, in
 * order: the driver stops at the first socket that finds no dead connection left and
 * does not keep it or those after it. 0, or the negative errno the driver answered. */
int nbd_netlink_reconfigure(struct nbd_netlink *nl, const struct nbd_device_settings *s,
                            const int *socks, unsigned nsocks);
/* Detaches device index (its requests fail from here on). 0 or a negative errno. */
int nbd_netlink_disconnect(struct nbd_netlink *nl, int index);

#define NBD_NETLINK_OTHER_EVENT (-1)
#define NBD_NETLINK_NO_EVENT (-2)
#define NBD_NETLINK_EVENTS_LOST (-3) /* the socket overran: a notice may have been dropped */

/* Reads one message from events_fd without waiting: the device index a NBD_CMD_LINK_DEAD
 * names, or one of the NBD_NETLINK_* values above. */
int nbd_netlink_read_event(struct nbd_netlink *nl);

#endif
