/* bench/floor's sockets: loopback TCP with the options a fast design sets, and every
 * syscall on the data path counted. */
#include "floor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Small frames go out at once (no Nagle delay), and the buffers hold a whole QD of
 * pages so neither side blocks halfway through a batch. */
static void tune(int fd)
{
  int one = 1, size = (int)FLOOR_SOCKET_BUFFER;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
}

int floor_listen(uint16_t *port, char *err, size_t errlen)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1) < 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
    snprintf(err, errlen, "cannot listen on 127.0.0.1: %s", strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  tune(fd); /* accepted sockets inherit the buffer sizes */
  *port = ntohs(a.sin_port);
  return fd;
}

int floor_accept(int listen_fd, char *err, size_t errlen)
{
  int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "accept: %s", strerror(errno));
    return -1;
  }
  tune(fd);
  return fd;
}

int floor_connect(uint16_t port, char *err, size_t errlen)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return -1;
  }
  tune(fd);
  struct sockaddr_in a = { .sin_family = AF_INET,
                           .sin_port = htons(port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    snprintf(err, errlen, "cannot connect to 127.0.0.1:%u: %s", port, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

int floor_send_all(struct floor_link *link, const uint8_t *buf, size_t len)
{
  while (len > 0) {
    link->syscalls++;
    ssize_t n = send(link->fd, buf, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

int floor_writev_all(struct floor_link *link, struct iovec *iov, int iovcnt)
{
  while (iovcnt > 0) {
    link->syscalls++;
    ssize_t n = writev(link->fd, iov, iovcnt > IOV_MAX ? IOV_MAX : iovcnt);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    /* a short write: skip what went, send the rest */
    while (iovcnt > 0 && (size_t)n >= iov->iov_len) {
      n -= (ssize_t)iov->iov_len;
      iov++;
      iovcnt--;
    }
    if (iovcnt > 0) {
      iov->iov_base = (uint8_t *)iov->iov_base + n;
      iov->iov_len -= (size_t)n;
    }
  }
  return 0;
}

ssize_t floor_recv_some(struct floor_link *link, uint8_t *buf, size_t len)
{
  for (;;) {
    link->syscalls++;
    ssize_t n = recv(link->fd, buf, len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    return n;
  }
}
