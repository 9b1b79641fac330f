/* Whole reads and writes on a blocking socket, for the NBD handshakes (client and
 * server): the caller bounds them with SO_RCVTIMEO/SO_SNDTIMEO, and nothing here
 * allocates.
 *
 * Errors: -1 with errno (ECONNRESET for an end of stream, EAGAIN for a timeout).
 */
#ifndef RAMPART_NBD_EXACT_IO_H
#define RAMPART_NBD_EXACT_IO_H

#include <stddef.h>
#include <stdint.h>

/* All n bytes, or -1 with errno. */
int nbd_read_exact(int fd, void *buf, size_t n);
int nbd_write_exact(int fd, const void *buf, size_t n);
/* Reads and drops n bytes the reader has no use for. */
int nbd_skip(int fd, uint32_t n);

#endif
