/* The NBD server handshake (nbd_server_handshake.h). Only the options a Linux NBD
 * client, libnbd and qemu send are answered; every other option gets NBD_REP_ERR_UNSUP,
 * which every client takes as "not here" and goes on without. */
#include "nbd_server_handshake.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "clock.h"
#include "nbd_protocol.h"

/* Longest option data taken: NBD_OPT_GO's name (at most NBD_MAX_EXPORT_NAME) and a
 * list of information requests. Longer ones are refused, their bytes skipped. */
#define MAX_OPTION_DATA (NBD_MAX_EXPORT_NAME + 256u)

/* The client's socket, within the handshake's one deadline. */
struct peer {
  int fd, cancel_fd;
  uint64_t deadline_ms;
};

static const char *io_error(void)
{
  if (errno == ECANCELED)
    return "the server is stopping";
  if (errno == ETIMEDOUT)
    return "its time ran out (--handshake-timeout)";
  return errno == EPIPE ? "it closed the connection" : strerror(errno);
}

/* Waits until the socket is ready for events: -1 with errno ETIMEDOUT once the
 * deadline has passed, ECANCELED once cancel_fd is readable (the server is stopping). */
static int wait_ready(const struct peer *p, short events)
{
  for (;;) {
    uint64_t now = rp_now_ms();
    if (now >= p->deadline_ms) {
      errno = ETIMEDOUT;
      return -1;
    }
    struct pollfd f[2] = { { .fd = p->fd, .events = events },
                           { .fd = p->cancel_fd, .events = POLLIN } };
    int r = poll(f, 2, (int)(p->deadline_ms - now));
    if (r < 0 && errno != EINTR)
      return -1;
    if (r > 0 && f[1].revents) {
      errno = ECANCELED;
      return -1;
    }
    if (r > 0)
      return 0;
  }
}

/* len bytes into buf, or dropped when buf is NULL. -1 with errno: EPIPE when the
 * client closed first, or wait_ready's. */
static int read_full(const struct peer *p, void *buf, size_t len)
{
  uint8_t sink[4096];
  while (len > 0) {
    if (wait_ready(p, POLLIN) < 0)
      return -1;
    size_t want = buf || len < sizeof sink ? len : sizeof sink;
    ssize_t n = recv(p->fd, buf ? buf : sink, want, MSG_DONTWAIT);
    if (n == 0)
      errno = EPIPE;
    if (n <= 0 && (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)))
      return -1;
    if (n > 0) {
      len -= (size_t)n;
      buf = buf ? (uint8_t *)buf + n : NULL;
    }
  }
  return 0;
}

static int write_full(const struct peer *p, const void *buf, size_t len)
{
  while (len > 0) {
    ssize_t n = send(p->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
      return -1;
    if (n < 0 && errno != EINTR && wait_ready(p, POLLOUT) < 0)
      return -1;
    if (n > 0) {
      len -= (size_t)n;
      buf = (const uint8_t *)buf + n;
    }
  }
  return 0;
}

static int send_reply(const struct peer *p, uint32_t option, uint32_t type, const void *data,
                      uint32_t length)
{
  struct __attribute__((packed)) {
    uint64_t magic;
    uint32_t option, type, length;
  } h = { htobe64(NBD_REPLY_MAGIC), htobe32(option), htobe32(type), htobe32(length) };
  if (write_full(p, &h, sizeof h) < 0)
    return -1;
  return length ? write_full(p, data, length) : 0;
}

static int send_export_info(const struct peer *p, uint32_t option,
                            const struct nbd_server_export *ex)
{
  struct __attribute__((packed)) {
    uint16_t type;
    uint64_t size;
    uint16_t flags;
  } info = { htobe16(NBD_INFO_EXPORT), htobe64(ex->size), htobe16(ex->transmission_flags) };
  return send_reply(p, option, NBD_REP_INFO, &info, sizeof info);
}

static int send_block_size(const struct peer *p, uint32_t option,
                           const struct nbd_server_export *ex)
{
  struct __attribute__((packed)) {
    uint16_t type;
    uint32_t min, preferred, max;
  } info = { htobe16(NBD_INFO_BLOCK_SIZE), htobe32(ex->min_block),
             htobe32(ex->preferred_block), htobe32(ex->max_block) };
  return send_reply(p, option, NBD_REP_INFO, &info, sizeof info);
}

/* NBD_OPT_INFO or NBD_OPT_GO's data: a name, then a count of 16-bit info requests. Sends
 * the export (and its block sizes when asked) and an ACK; 1 when the data was
 * malformed and refused as such, 0 when answered, -1 on a socket error. */
static int answer_info(const struct peer *p, uint32_t option, const uint8_t *data,
                       uint32_t length, const struct nbd_server_export *ex)
{
  uint32_t name_len;
  uint16_t nrequests;
  bool valid = length >= 6;
  if (valid) {
    memcpy(&name_len, data, 4);
    name_len = be32toh(name_len);
    valid = name_len <= length - 6;
  }
  if (valid) {
    memcpy(&nrequests, data + 4 + name_len, 2);
    nrequests = be16toh(nrequests);
    valid = 6u + name_len + 2u * nrequests == length;
  }
  if (!valid) {
    static const char why[] = "malformed NBD_OPT_GO/NBD_OPT_INFO data";
    return send_reply(p, option, NBD_REP_ERR_INVALID, why, sizeof why - 1) < 0 ? -1 : 1;
  }
  bool block_size = false;
  for (uint16_t i = 0; i < nrequests; i++) {
    uint16_t kind;
    memcpy(&kind, data + 6 + name_len + 2u * i, 2);
    block_size = block_size || be16toh(kind) == NBD_INFO_BLOCK_SIZE;
  }
  if (send_export_info(p, option, ex) < 0 ||
      (block_size && send_block_size(p, option, ex) < 0))
    return -1;
  return send_reply(p, option, NBD_REP_ACK, NULL, 0) < 0 ? -1 : 0;
}

int nbd_server_handshake(int fd, int cancel_fd, const struct nbd_server_export *ex,
                         unsigned timeout_ms, char *err, size_t errlen)
{
  const struct peer p = { fd, cancel_fd, rp_now_ms() + timeout_ms };
  struct __attribute__((packed)) {
    uint64_t magic, option_magic;
    uint16_t flags;
  } greeting = { htobe64(NBD_INIT_MAGIC), htobe64(NBD_OPTION_MAGIC),
                 htobe16(NBD_HANDSHAKE_FIXED_NEWSTYLE | NBD_HANDSHAKE_NO_ZEROES) };
  uint32_t client_flags;
  if (write_full(&p, &greeting, sizeof greeting) < 0 || read_full(&p, &client_flags, 4) < 0) {
    snprintf(err, errlen, "the client left before the NBD handshake: %s", io_error());
    return -1;
  }
  client_flags = be32toh(client_flags);
  if (!(client_flags & NBD_HANDSHAKE_FIXED_NEWSTYLE)) {
    snprintf(err, errlen,
             "the client does not speak fixed-newstyle NBD (client flags "
             "0x%x); use nbd-client 3.10 or later, libnbd or qemu",
             client_flags);
    return -1;
  }
  if (client_flags & ~(NBD_HANDSHAKE_FIXED_NEWSTYLE | NBD_HANDSHAKE_NO_ZEROES)) {
    snprintf(err, errlen,
             "the client set NBD client flags this server does not know "
             "(0x%x): the protocol says to close",
             client_flags);
    return -1;
  }
  bool no_zeroes = client_flags & NBD_HANDSHAKE_NO_ZEROES;
  for (unsigned options = 0;; options++) {
    struct __attribute__((packed)) {
      uint64_t magic;
      uint32_t option, length;
    } h;
    if (read_full(&p, &h, sizeof h) < 0) {
      snprintf(err, errlen, "the client left during the NBD handshake: %s", io_error());
      return -1;
    }
    uint32_t option = be32toh(h.option), length = be32toh(h.length);
    if (be64toh(h.magic) != NBD_OPTION_MAGIC) {
      snprintf(err, errlen,
               "the client sent an option without NBD's option magic: not an "
               "NBD client, or out of step");
      return -1;
    }
    if (options == NBD_SERVER_MAX_OPTIONS) {
      snprintf(err, errlen,
               "the client sent more than %u options in the NBD handshake "
               "without choosing the export; closing",
               NBD_SERVER_MAX_OPTIONS);
      return -1;
    }
    uint8_t data[MAX_OPTION_DATA];
    bool kept = length <= sizeof data;
    if (read_full(&p, kept ? data : NULL, length) < 0) {
      snprintf(err, errlen, "the client left during the NBD handshake: %s", io_error());
      return -1;
    }
    int r = 0;
    switch (option) {
    case NBD_OPT_EXPORT_NAME: {
      struct __attribute__((packed)) {
        uint64_t size;
        uint16_t flags;
        uint8_t zeroes[124];
      } reply = { htobe64(ex->size), htobe16(ex->transmission_flags), { 0 } };
      if (write_full(&p, &reply, no_zeroes ? 10 : sizeof reply) < 0)
        break;
      return 0;
    }
    case NBD_OPT_ABORT:
      send_reply(&p, option, NBD_REP_ACK, NULL, 0); /* the client may have gone already */
      return 1;
    case NBD_OPT_LIST: {
      uint32_t empty_name = 0; /* the one export; any name reaches it */
      r = send_reply(&p, option, NBD_REP_SERVER, &empty_name, 4);
      if (r == 0)
        r = send_reply(&p, option, NBD_REP_ACK, NULL, 0);
      break;
    }
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
      if (!kept) {
        static const char why[] = "NBD_OPT_GO/NBD_OPT_INFO data too long";
        r = send_reply(&p, option, NBD_REP_ERR_INVALID, why, sizeof why - 1);
        break;
      }
      r = answer_info(&p, option, data, length, ex);
      if (r == 0 && option == NBD_OPT_GO)
        return 0;
      r = r < 0 ? -1 : 0;
      break;
    default:
      r = send_reply(&p, option, NBD_REP_ERR_UNSUP, NULL, 0);
      break;
    }
    if (r < 0 || option == NBD_OPT_EXPORT_NAME) {
      snprintf(err, errlen, "cannot answer the client's NBD option %u: %s", option,
               io_error());
      return -1;
    }
  }
}
