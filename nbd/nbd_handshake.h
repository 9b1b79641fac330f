/* The client half of the NBD handshake (fixed newstyle, NBD_OPT_GO), as the kernel's
 * NBD driver needs it done in userspace before it is handed the socket.
 *
 * This is the NBD protocol's wire format, not rampart's (that is in proto/): the
 * constants come from the NBD protocol document, and only what a client attaching a
 * block device needs is here.
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_NBD_HANDSHAKE_H
#define RAMPART_NBD_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

struct nbd_export {
  uint64_t size;
  uint16_t transmission_flags; /* NBD_FLAG_*, what the kernel's NBD_ATTR_SERVER_FLAGS takes */
};

/* Negotiates export_name on a connected socket; leaves it in the transmission phase.
 * -1 with err (the server's own message where it sent one). */
int nbd_handshake(int fd, const char *export_name, struct nbd_export *out, char *err,
                  size_t errlen);

#endif
