/* Whole transfers on a file descriptor (fd_io.h). */
#include "fd_io.h"

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

enum transfer { READ, WRITE, SEND };

static int transfer_full(int fd, void *buf, size_t n, enum transfer how)
{
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = how == READ    ? read(fd, p, n)
                : how == WRITE ? write(fd, p, n)
                               : send(fd, p, n, MSG_NOSIGNAL);
    if (r == 0) {
      errno = ECONNRESET;
      return -1;
    }
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

int rp_read_full(int fd, void *buf, size_t n)
{
  return transfer_full(fd, buf, n, READ);
}

int rp_write_full(int fd, const void *buf, size_t n)
{
  return transfer_full(fd, (void *)buf, n, WRITE);
}

int rp_send_full(int fd, const void *buf, size_t n)
{
  return transfer_full(fd, (void *)buf, n, SEND);
}

int rp_read_skip(int fd, size_t n)
{
  uint8_t sink[256];
  while (n > 0) {
    size_t k = n < sizeof sink ? n : sizeof sink;
    if (rp_read_full(fd, sink, k) < 0)
      return -1;
    n -= k;
  }
  return 0;
}
