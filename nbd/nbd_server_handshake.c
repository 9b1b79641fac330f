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

#include "fd_io.h"
#include "nbd_protocol.h"

/* Longest option data taken: NBD_OPT_GO's name (at most NBD_MAX_EXPORT_NAME) and a
 * list of information requests. Longer ones are refused, their bytes skipped. */
#define MAX_OPTION_DATA (NBD_MAX_EXPORT_NAME + 256u)

static const char *io_error(void)
{
  if (errno == ECANCELED)
    return "the server is stopping";
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT ? "timed out"
                                                                       : strerror(errno);
}

/* Waits for the client's next bytes, or for cancel_fd: -1 with errno ECANCELED when the
 * server is stopping, ETIMEDOUT past the handshake's time. */
static int wait_for_client(int fd, int cancel_fd)
{
  struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = cancel_fd, .events = POLLIN } };
  struct timeval limit;
  socklen_t len = sizeof limit;
  int ms = getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, &len) == 0 && limit.tv_sec > 0
             ? (int)limit.tv_sec * 1000 : -1;
  int r;
  while ((r = poll(p, 2, ms)) < 0 && errno == EINTR)
    ;
  if (r > 0 && p[1].revents) {
    errno = ECANCELED;
    return -1;
  }
  if (r == 0)
    errno = ETIMEDOUT;
  return r > 0 ? 0 : -1;
}

static int send_reply(int fd, uint32_t option, uint32_t type, const void *data,
                      uint32_t length)
{
  struct __attribute__((packed)) {
    uint64_t magic;
    uint32_t option, type, length;
  } h = { htobe64(NBD_REPLY_MAGIC), htobe32(option), htobe32(type), htobe32(length) };
  if (rp_write_full(fd, &h, sizeof h) < 0)
    return -1;
  return length ? rp_write_full(fd, data, length) : 0;
}

static int send_export_info(int fd, uint32_t option, const struct nbd_server_export *ex)
{
  struct __attribute__((packed)) {
    uint16_t type;
    uint64_t size;
    uint16_t flags;
  } info = { htobe16(NBD_INFO_EXPORT), htobe64(ex->size), htobe16(ex->transmission_flags) };
  return send_reply(fd, option, NBD_REP_INFO, &info, sizeof info);
}

static int send_block_size(int fd, uint32_t option, const struct nbd_server_export *ex)
{
  struct __attribute__((packed)) {
    uint16_t type;
    uint32_t min, preferred, max;
  } info = { htobe16(NBD_INFO_BLOCK_SIZE), htobe32(ex->min_block),
             htobe32(ex->preferred_block), htobe32(ex->max_block) };
  return send_reply(fd, option, NBD_REP_INFO, &info, sizeof info);
}

/* NBD_OPT_INFO or NBD_OPT_GO's data: a name, then a count of 16-bit info requests. Sends
 * the export (and its block sizes when asked) and an ACK; 1 when the data was
 * malformed and refused as such, 0 when answered, -1 on a socket error. */
static int answer_info(int fd, uint32_t option, const uint8_t *data, uint32_t length,
                       const struct nbd_server_export *ex)
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
    return send_reply(fd, option, NBD_REP_ERR_INVALID, why, sizeof why - 1) < 0 ? -1 : 1;
  }
  bool block_size = false;
  for (uint16_t i = 0; i < nrequests; i++) {
    uint16_t kind;
    memcpy(&kind, data + 6 + name_len + 2u * i, 2);
    block_size = block_size || be16toh(kind) == NBD_INFO_BLOCK_SIZE;
  }
  if (send_export_info(fd, option, ex) < 0 ||
      (block_size && send_block_size(fd, option, ex) < 0))
    return -1;
  return send_reply(fd, option, NBD_REP_ACK, NULL, 0) < 0 ? -1 : 0;
}

int nbd_server_handshake(int fd, int cancel_fd, const struct nbd_server_export *ex, char *err,
                         size_t errlen)
{
  struct __attribute__((packed)) {
    uint64_t magic, option_magic;
    uint16_t flags;
  } greeting = { htobe64(NBD_INIT_MAGIC), htobe64(NBD_OPTION_MAGIC),
                 htobe16(NBD_HANDSHAKE_FIXED_NEWSTYLE | NBD_HANDSHAKE_NO_ZEROES) };
  uint32_t client_flags;
  if (rp_write_full(fd, &greeting, sizeof greeting) < 0 || wait_for_client(fd, cancel_fd) < 0 ||
      rp_read_full(fd, &client_flags, 4) < 0) {
    snprintf(err, errlen, "the client left before the NBD handshake: %s", io_error());
    return -1;
  }
  client_flags = be32toh(client_flags);
  if (!(client_flags & NBD_HANDSHAKE_FIXED_NEWSTYLE)) {
    snprintf(err, errlen, "the client does not speak fixed-newstyle NBD (client flags "
             "0x%x); use nbd-client 3.10 or later, libnbd or qemu", client_flags);
    return -1;
  }
  bool no_zeroes = client_flags & NBD_HANDSHAKE_NO_ZEROES;
  for (;;) {
    struct __attribute__((packed)) {
      uint64_t magic;
      uint32_t option, length;
    } h;
    if (wait_for_client(fd, cancel_fd) < 0 || rp_read_full(fd, &h, sizeof h) < 0) {
      snprintf(err, errlen, "the client left during the NBD handshake: %s", io_error());
      return -1;
    }
    uint32_t option = be32toh(h.option), length = be32toh(h.length);
    if (be64toh(h.magic) != NBD_OPTION_MAGIC) {
      snprintf(err, errlen, "the client sent an option without NBD's option magic: not an "
               "NBD client, or out of step");
      return -1;
    }
    uint8_t data[MAX_OPTION_DATA];
    bool kept = length <= sizeof data;
    if (kept ? rp_read_full(fd, data, length) < 0 : rp_read_skip(fd, length) < 0) {
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
      if (rp_write_full(fd, &reply, no_zeroes ? 10 : sizeof reply) < 0)
        break;
      return 0;
    }
    case NBD_OPT_ABORT:
      send_reply(fd, option, NBD_REP_ACK, NULL, 0); /* the client may have gone already */
      return 1;
    case NBD_OPT_LIST: {
      uint32_t empty_name = 0; /* the one export; any name reaches it */
      r = send_reply(fd, option, NBD_REP_SERVER, &empty_name, 4);
      if (r == 0)
        r = send_reply(fd, option, NBD_REP_ACK, NULL, 0);
      break;
    }
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
      if (!kept) {
        static const char why[] = "NBD_OPT_GO/NBD_OPT_INFO data too long";
        r = send_reply(fd, option, NBD_REP_ERR_INVALID, why, sizeof why - 1);
        break;
      }
      r = answer_info(fd, option, data, length, ex);
      if (r == 0 && option == NBD_OPT_GO)
        return 0;
      r = r < 0 ? -1 : 0;
      break;
    default:
      r = send_reply(fd, option, NBD_REP_ERR_UNSUP, NULL, 0);
      break;
    }
    if (r < 0 || option == NBD_OPT_EXPORT_NAME) {
      snprintf(err, errlen, "cannot answer the client's NBD option %u: %s", option,
               io_error());
      return -1;
    }
  }
}
