/* The listening socket (see listener.h). The key rule is checked on the resolved
 * address, not the text, so "localhost" is loopback and "myhost" is not. */
#include "listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static bool is_loopback(const struct sockaddr *sa)
{
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(a))
      return true;
    return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
  }
  return false;
}

static void format_addr(const struct sockaddr *sa, char *out, size_t outlen)
{
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    snprintf(out, outlen, "%s:%u", host, port);
  } else {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
    snprintf(out, outlen, "[%s]:%u", host, port);
  }
}

static int bind_one(const struct addrinfo *ai, char *err, size_t errlen, const char *host,
                    const char *port)
{
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai->ai_protocol);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create a socket for %s:%s: %s", host, port,
             strerror(errno));
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 512) < 0) {
    int saved = errno;
    snprintf(err, errlen, "cannot listen on %s:%s: %s%s", host, port, strerror(saved),
             saved == EADDRINUSE ? " (another rampartd, or another program, has that "
                                   "port: pick another --listen port)"
                                 : "");
    close(fd);
    return -1;
  }
  return fd;
}

int rps_listener_open(const char *host, const char *port, bool have_key, char *bound,
                      size_t boundlen, int *exit_code, char *err, size_t errlen)
{
  struct addrinfo hints, *res;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int rc = getaddrinfo(host, port, &hints, &res);
  if (rc != 0) {
    snprintf(err, errlen, "cannot resolve --listen host '%s': %s", host, gai_strerror(rc));
    *exit_code = 2;
    return -1;
  }
  for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    if (!have_key && !is_loopback(ai->ai_addr)) {
      snprintf(err, errlen,
               "refusing to listen on %s without a cluster key: anyone who "
               "can reach it could read and overwrite the pages stored here. Create a key "
               "with 'rampartctl keygen FILE', copy it to every client, and start rampartd "
               "with --key FILE (or listen on 127.0.0.1 only)",
               host);
      freeaddrinfo(res);
      *exit_code = 2;
      return -1;
    }
  }
  int fd = -1;
  for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
    fd = bind_one(ai, err, errlen, host, port);
  freeaddrinfo(res);
  if (fd < 0) {
    *exit_code = 1;
    return -1;
  }
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &len);
  format_addr((struct sockaddr *)&ss, bound, boundlen);
  return fd;
}
