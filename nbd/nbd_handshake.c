/* The NBD client handshake (nbd_handshake.h). Blocking reads and writes on purpose: the
 * caller bounds them with SO_RCVTIMEO/SO_SNDTIMEO, and nothing here allocates, since a
 * reconnect runs while the machine may have no memory to give. */
#include "nbd_handshake.h"
#include "fd_io.h"
#include "nbd_protocol.h"

#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>


static const char *io_error(void)
{
  return errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno);
}

static int send_go(int fd, const char *export_name)
{
  uint32_t name_len = (uint32_t)strlen(export_name);
  uint8_t msg[16 + 4 + NBD_MAX_EXPORT_NAME + 2];
  uint64_t magic = htobe64(NBD_OPTION_MAGIC);
  uint32_t option = htobe32(NBD_OPT_GO), length = htobe32(4 + name_len + 2);
  uint32_t be_name_len = htobe32(name_len);
  uint16_t no_info_requests = 0;
  size_t n = 0;
  memcpy(msg + n, &magic, 8), n += 8;
  memcpy(msg + n, &option, 4), n += 4;
  memcpy(msg + n, &length, 4), n += 4;
  memcpy(msg + n, &be_name_len, 4), n += 4;
  memcpy(msg + n, export_name, name_len), n += name_len;
  memcpy(msg + n, &no_info_requests, 2), n += 2;
  return rp_write_full(fd, msg, n);
}

int nbd_handshake(int fd, const char *export_name, struct nbd_export *out, char *err,
                  size_t errlen)
{
  if (strlen(export_name) > NBD_MAX_EXPORT_NAME) {
    snprintf(err, errlen, "the export name is longer than %u bytes", NBD_MAX_EXPORT_NAME);
    return -1;
  }
  struct __attribute__((packed)) {
    uint64_t init_magic, option_magic;
    uint16_t flags;
  } greeting;
  if (rp_read_full(fd, &greeting, sizeof greeting) < 0) {
    snprintf(err, errlen, "no NBD greeting from the server: %s", io_error());
    return -1;
  }
  if (be64toh(greeting.init_magic) != NBD_INIT_MAGIC) {
    snprintf(err, errlen, "the server is not an NBD server (its greeting has no NBDMAGIC)");
    return -1;
  }
  uint16_t server_flags = be16toh(greeting.flags);
  if (be64toh(greeting.option_magic) != NBD_OPTION_MAGIC ||
      !(server_flags & NBD_HANDSHAKE_FIXED_NEWSTYLE)) {
    snprintf(err, errlen,
             "the server does not speak fixed-newstyle NBD (nbdkit and "
             "qemu-nbd do; use one of them)");
    return -1;
  }
  uint32_t client_flags = NBD_HANDSHAKE_FIXED_NEWSTYLE |
                          (server_flags & NBD_HANDSHAKE_NO_ZEROES);
  client_flags = htobe32(client_flags);
  if (rp_write_full(fd, &client_flags, 4) < 0 || send_go(fd, export_name) < 0) {
    snprintf(err, errlen, "cannot send the NBD options: %s", io_error());
    return -1;
  }
  bool have_export = false;
  for (;;) {
    struct __attribute__((packed)) {
      uint64_t magic;
      uint32_t option, type, length;
    } reply;
    if (rp_read_full(fd, &reply, sizeof reply) < 0) {
      snprintf(err, errlen, "the server ended the NBD handshake: %s", io_error());
      return -1;
    }
    uint32_t type = be32toh(reply.type), length = be32toh(reply.length);
    if (be64toh(reply.magic) != NBD_REPLY_MAGIC || be32toh(reply.option) != NBD_OPT_GO) {
      snprintf(err, errlen, "the server's reply to NBD_OPT_GO is malformed");
      return -1;
    }
    if (type & NBD_REP_FLAG_ERROR) {
      char message[256] = "";
      uint32_t keep = length < sizeof message - 1 ? length : (uint32_t)sizeof message - 1;
      if (rp_read_full(fd, message, keep) < 0 || rp_read_skip(fd, length - keep) < 0)
        message[0] = '\0';
      snprintf(err, errlen, "the server refused export '%s' (NBD error %u)%s%s", export_name,
               type & ~NBD_REP_FLAG_ERROR, message[0] ? ": " : "", message);
      return -1;
    }
    if (type == NBD_REP_ACK) {
      if (!have_export) {
        snprintf(err, errlen, "the server accepted export '%s' without saying its size",
                 export_name);
        return -1;
      }
      return 0;
    }
    if (type == NBD_REP_INFO && length >= 2) {
      uint16_t info;
      if (rp_read_full(fd, &info, 2) < 0) {
        snprintf(err, errlen, "the server ended the NBD handshake: %s", io_error());
        return -1;
      }
      length -= 2;
      if (be16toh(info) == NBD_INFO_EXPORT && length == 10) {
        struct __attribute__((packed)) {
          uint64_t size;
          uint16_t flags;
        } export;
        if (rp_read_full(fd, &export, sizeof export) < 0) {
          snprintf(err, errlen, "the server ended the NBD handshake: %s", io_error());
          return -1;
        }
        out->size = be64toh(export.size);
        out->transmission_flags = be16toh(export.flags);
        have_export = true;
        continue;
      }
    }
    if (rp_read_skip(fd, length) < 0) {
      snprintf(err, errlen, "the server ended the NBD handshake: %s", io_error());
      return -1;
    }
  }
}
