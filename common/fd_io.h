/* Whole transfers on a blocking file descriptor: every byte, or an error. A short
 * transfer goes on where it stopped and EINTR is tried again; a timeout the caller set
 * (SO_RCVTIMEO, SO_SNDTIMEO) ends it as an error. Nothing here allocates.
 *
 *   rp_read_full    read(2) until n bytes came (the NBD handshakes)
 *   rp_write_full   write(2) until n bytes went (a report file; the NBD handshakes)
 *   rp_send_full    send(2) with MSG_NOSIGNAL: a peer that left is EPIPE, not SIGPIPE
 *                   (the control socket's replies)
 *   rp_read_skip    reads and drops n bytes the reader has no use for
 *
 * Errors: 0, or -1 with errno: ECONNRESET when the stream ended first (a read of 0, or
 * a write that moved nothing), EAGAIN for a timeout, or the call's own.
 */
#ifndef RAMPART_COMMON_FD_IO_H
#define RAMPART_COMMON_FD_IO_H

#include <stddef.h>

int rp_read_full(int fd, void *buf, size_t n);
int rp_write_full(int fd, const void *buf, size_t n);
int rp_send_full(int fd, const void *buf, size_t n);
int rp_read_skip(int fd, size_t n);

#endif
