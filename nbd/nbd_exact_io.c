/* Whole reads and writes for the NBD handshakes (nbd_exact_io.h). */
#include "nbd_exact_io.h"

#include <errno.h>
#include <stdbool.h>
#include <unistd.h>

static int transfer_exact(int fd, void *buf, size_t n, bool writing)
{
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = writing ? write(fd, p, n) : read(fd, p, n);
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

int nbd_read_exact(int fd, void *buf, size_t n) { return transfer_exact(fd, buf, n, false); }

int nbd_write_exact(int fd, const void *buf, size_t n)
{
  return transfer_exact(fd, (void *)buf, n, true);
}

int nbd_skip(int fd, uint32_t n)
{
  uint8_t sink[256];
  while (n > 0) {
    uint32_t k = n < sizeof sink ? n : (uint32_t)sizeof sink;
    if (nbd_read_exact(fd, sink, k) < 0)
      return -1;
    n -= k;
  }
  return 0;
}
