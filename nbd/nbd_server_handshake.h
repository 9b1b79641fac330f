/* The server half of the NBD handshake (fixed newstyle): NBD_OPT_GO, NBD_OPT_INFO,
 * NBD_OPT_EXPORT_NAME, NBD_OPT_LIST and NBD_OPT_ABORT, one export under any name.
 * Blocking, within one deadline for the whole exchange, and at most
 * NBD_SERVER_MAX_OPTIONS options: a client that trickles bytes or sends options for
 * ever is closed when either runs out. nbd_protocol.h has the wire format.
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_NBD_SERVER_HANDSHAKE_H
#define RAMPART_NBD_SERVER_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

struct nbd_server_export {
  uint64_t size;
  uint16_t transmission_flags; /* NBD_FLAG_* */
  /* NBD_INFO_BLOCK_SIZE, for a client that asks: requests not aligned to min_block are
   * refused with EINVAL, and none may be longer than max_block. */
  uint32_t min_block, preferred_block, max_block;
};

/* Options one handshake may send. Linux's nbd-client, libnbd and qemu send fewer than
 * ten; past this many the client is closed. */
#define NBD_SERVER_MAX_OPTIONS 32u

/* 0: the client chose the export within timeout_ms and the socket is in the
 * transmission phase. 1: the client ended the handshake (NBD_OPT_ABORT). -1 with err:
 * the time ran out, too many options, a client that is not fixed-newstyle NBD, a socket
 * error, or cancel_fd became readable while it waited (the server is stopping). */
int nbd_server_handshake(int fd, int cancel_fd, const struct nbd_server_export *export,
                         unsigned timeout_ms, char *err, size_t errlen);

#endif
