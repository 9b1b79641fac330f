/* Frame header encoding and validation: see wire.h for the layout. Explicit byte
 * shuffling rather than a packed struct, so the format is the same on every host and
 * no unaligned access is ever made. */
#include "wire.h"

#include <string.h>

static void put_le16(uint8_t *p, uint16_t v)
{
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void put_le32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_le16(const uint8_t *p)
{
  return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_le32(const uint8_t *p)
{
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static uint64_t get_le64(const uint8_t *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

void rp_header_encode(const struct rp_header *h, uint8_t out[RP_HEADER_SIZE])
{
  put_le32(out + 0, h->magic);
  out[4] = h->op;
  out[5] = h->flags;
  put_le16(out + 6, h->status);
  put_le32(out + 8, h->length);
  put_le32(out + 12, h->count);
  put_le64(out + 16, h->id);
  put_le64(out + 24, h->slot);
}

bool rp_op_is_known(uint8_t op)
{
  switch (op) {
  case RP_OP_HELLO:
  case RP_OP_AUTH:
  case RP_OP_RESERVE:
  case RP_OP_STAT:
  case RP_OP_ADVISE:
  case RP_OP_PING:
  case RP_OP_GOODBYE:
  case RP_OP_WRITE:
  case RP_OP_READ:
  case RP_OP_FREE:
    return true;
  default:
    return false;
  }
}

static bool op_is_control(uint8_t op)
{
  return op < RP_OP_WRITE;
}

/* Payload size rules for one frame, by op and direction. Returns NULL when the length
 * is allowed, else a sentence saying why not. */
static const char *check_length(const struct rp_header *h, bool reply)
{
  if (op_is_control(h->op)) {
    if (h->length > RP_MAX_CONTROL_PAYLOAD)
      return "control payload longer than 64 KiB";
    return NULL;
  }
  /* An error reply to a hot-path op carries an Error message instead of a page. */
  if (reply && h->status != RP_OK)
    return h->length > RP_MAX_CONTROL_PAYLOAD ? "error payload longer than 64 KiB" : NULL;
  bool carries_page = (h->op == RP_OP_WRITE && !reply) || (h->op == RP_OP_READ && reply);
  if (carries_page && h->length != RP_PAGE_SIZE)
    return "page payload is not exactly 4096 bytes";
  if (!carries_page && h->length != 0)
    return "payload on an op that carries none";
  return NULL;
}

enum rp_status rp_header_decode(const uint8_t in[RP_HEADER_SIZE], enum rp_peer from,
                                struct rp_header *h, const char **why)
{
  const char *dummy;
  if (!why)
    why = &dummy;
  *why = NULL;

  h->magic = get_le32(in + 0);
  h->op = in[4];
  h->flags = in[5];
  h->status = get_le16(in + 6);
  h->length = get_le32(in + 8);
  h->count = get_le32(in + 12);
  h->id = get_le64(in + 16);
  h->slot = get_le64(in + 24);

  if (h->magic != RP_FRAME_MAGIC) {
    *why = "bad frame magic (not a rampart peer, or the stream lost its framing)";
    return RP_ERR_BAD_FRAME;
  }
  if (h->flags & ~RP_FLAGS_KNOWN) {
    *why = "unknown flag bits";
    return RP_ERR_BAD_FRAME;
  }
  if (!rp_op_is_known(h->op)) {
    *why = "unknown op";
    return RP_ERR_UNKNOWN_OP;
  }
  bool reply = (h->flags & RP_FLAG_REPLY) != 0;
  if (from == RP_FROM_CLIENT) {
    if (reply || h->op == RP_OP_ADVISE) {
      *why = "a client sent a reply or an advise";
      return RP_ERR_BAD_FRAME;
    }
    if (h->status != 0) {
      *why = "a request carries a status";
      return RP_ERR_BAD_FRAME;
    }
  } else if (!reply) {
    *why = "a server sent a request";
    return RP_ERR_BAD_FRAME;
  }
  const char *bad_length = check_length(h, reply);
  if (bad_length) {
    *why = bad_length;
    return h->length > RP_MAX_CONTROL_PAYLOAD ? RP_ERR_TOO_BIG : RP_ERR_BAD_FRAME;
  }
  if (!op_is_control(h->op) && !reply) {
    if (h->slot > RP_MAX_SLOT) {
      *why = "slot number past 2^48";
      return RP_ERR_BAD_FRAME;
    }
    if (h->op == RP_OP_FREE) {
      if (h->count == 0 || h->count > RP_MAX_FREE_COUNT) {
        *why = "FREE count is 0 or past the limit";
        return RP_ERR_BAD_FRAME;
      }
    } else if (h->count != 0) {
      *why = "count set on an op that takes none";
      return RP_ERR_BAD_FRAME;
    }
  }
  return RP_OK;
}

void rp_header_reply(struct rp_header *reply, const struct rp_header *req,
                     enum rp_status status, uint32_t length)
{
  memset(reply, 0, sizeof *reply);
  reply->magic = RP_FRAME_MAGIC;
  reply->op = req->op;
  reply->flags = RP_FLAG_REPLY;
  reply->status = (uint16_t)status;
  reply->length = length;
  reply->id = req->id;
  reply->slot = req->slot;
}

const char *rp_op_name(uint8_t op)
{
  switch (op) {
  case RP_OP_HELLO:
    return "HELLO";
  case RP_OP_AUTH:
    return "AUTH";
  case RP_OP_RESERVE:
    return "RESERVE";
  case RP_OP_STAT:
    return "STAT";
  case RP_OP_ADVISE:
    return "ADVISE";
  case RP_OP_PING:
    return "PING";
  case RP_OP_GOODBYE:
    return "GOODBYE";
  case RP_OP_WRITE:
    return "WRITE";
  case RP_OP_READ:
    return "READ";
  case RP_OP_FREE:
    return "FREE";
  default:
    return "UNKNOWN";
  }
}

const char *rp_status_name(uint16_t status)
{
  switch (status) {
  case RP_OK:
    return "ok";
  case RP_ERR_BAD_FRAME:
    return "bad frame";
  case RP_ERR_UNKNOWN_OP:
    return "unknown op";
  case RP_ERR_VERSION:
    return "version mismatch";
  case RP_ERR_AUTH:
    return "authentication failed";
  case RP_ERR_NOT_AUTHED:
    return "not authenticated";
  case RP_ERR_NO_SPACE:
    return "no space";
  case RP_ERR_PRESSURE:
    return "server under memory pressure";
  case RP_ERR_OUT_OF_RANGE:
    return "slot out of range";
  case RP_ERR_NOT_FOUND:
    return "no page at slot";
  case RP_ERR_TOO_BIG:
    return "frame too big";
  case RP_ERR_SHUTTING_DOWN:
    return "server shutting down";
  case RP_ERR_INTERNAL:
    return "internal server error";
  case RP_ERR_TIMEOUT:
    return "timed out";
  case RP_ERR_DISCONNECTED:
    return "disconnected";
  case RP_ERR_CONNECT:
    return "cannot connect";
  default:
    return "unknown status";
  }
}

const char *rp_status_advice(uint16_t status)
{
  switch (status) {
  case RP_OK:
    return "";
  case RP_ERR_BAD_FRAME:
  case RP_ERR_UNKNOWN_OP:
  case RP_ERR_TOO_BIG:
    return "the peer does not speak this rampart protocol: check that HOST:PORT is a "
           "rampartd of the same version";
  case RP_ERR_VERSION:
    return "client and server run different protocol versions, which do not talk to "
           "each other (version 2 authenticates every frame; version 1 does not): upgrade "
           "rampart on both sides";
  case RP_ERR_AUTH:
    return "the cluster key does not match the server's: pass the same --key FILE that "
           "rampartd was started with";
  case RP_ERR_NOT_AUTHED:
    return "the handshake did not finish: this is a client bug, please report it";
  case RP_ERR_NO_SPACE:
    return "the server has no more capacity: ask for less, add a server, or start "
           "rampartd with a larger --memory";
  case RP_ERR_PRESSURE:
    return "the server's host needs its memory back: place pages on another server";
  case RP_ERR_OUT_OF_RANGE:
    return "the slot lies outside this session's reservation: reserve more first";
  case RP_ERR_NOT_FOUND:
    return "nothing was written at that slot, or it was freed";
  case RP_ERR_SHUTTING_DOWN:
    return "the server is stopping: use another server";
  case RP_ERR_INTERNAL:
    return "see the server's log";
  case RP_ERR_TIMEOUT:
    return "the server did not answer in time: check that it is running and reachable";
  case RP_ERR_DISCONNECTED:
    return "the connection dropped: the server may have stopped or the network failed";
  case RP_ERR_CONNECT:
    return "check that rampartd is running there and that the address and port are right";
  default:
    return "";
  }
}
