/* rampart wire format: the one place that defines what crosses the socket.
 *
 * Every message is a frame: a fixed 32-byte little-endian header, then `length` bytes
 * of payload. Control ops (HELLO, AUTH, RESERVE, STAT, ADVISE, GOODBYE, PING) carry a
 * protobuf-c message (proto/rampart.proto); hot-path ops (WRITE, READ, FREE) carry a raw
 * page or nothing, so a page is copied once into the socket and never re-encoded.
 *
 *   offset size field
 *   0      4    magic    RP_FRAME_MAGIC ("RPMF" little-endian)
 *   4      1    op       enum rp_op
 *   5      1    flags    RP_FLAG_REPLY on every reply
 *   6      2    status   replies: enum rp_status (RP_OK or an error); requests: 0
 *   8      4    length   payload bytes that follow the header
 *   12     4    count    FREE: number of slots from `slot`; otherwise 0
 *   16     8    id       request id chosen by the client, echoed in its reply; 0 = push
 *   24     8    slot     WRITE/READ/FREE: page slot within the session's reservation
 *
 * From AUTH (client to server) and the reply to AUTH (server to client) onward, every
 * frame is followed by a 16-byte authentication tag (proto/frame_auth.h): `length`
 * counts the payload only, so such a frame is RP_HEADER_SIZE + length + RP_TAG_LEN bytes
 * on the wire. HELLO, its reply, and a refusal of AUTH are untagged.
 *
 * A reply with status != RP_OK carries a protobuf `Error` with a message for a person.
 * Many requests may be in flight on one connection; replies may come in any order and
 * are matched by id. docs/protocol.md walks through the handshake and every op.
 *
 * Errors: rp_header_decode returns an rp_status (RP_OK, or the status to send back) and
 * points why at a sentence; nothing else here fails.
 */
#ifndef RAMPART_PROTO_WIRE_H
#define RAMPART_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RP_FRAME_MAGIC 0x464d5052u /* "RPMF" as bytes on the wire */
#define RP_HELLO_MAGIC 0x52414d50u /* "PMAR": Hello.magic, a second check */
#define RP_PROTOCOL_VERSION 2u
#define RP_HEADER_SIZE 32u
#define RP_PAGE_SIZE 4096u
#define RP_NONCE_LEN 32u
#define RP_TOKEN_LEN 32u
#define RP_MAC_LEN 32u /* HMAC-SHA256 */
/* Control messages are small; anything bigger is an attack or a bug. */
#define RP_MAX_CONTROL_PAYLOAD 65536u
/* One FREE may release at most this many slots (1 GiB of pages). */
#define RP_MAX_FREE_COUNT (1u << 18)
/* Slots are 48-bit so that a hostile slot number cannot overflow server arithmetic. */
#define RP_MAX_SLOT ((UINT64_C(1) << 48) - 1)

#define RP_FLAG_REPLY 0x01u
#define RP_FLAGS_KNOWN RP_FLAG_REPLY

enum rp_op {
  RP_OP_HELLO = 1,   /* C->S Hello;       reply Challenge */
  RP_OP_AUTH = 2,    /* C->S Auth;        reply Welcome */
  RP_OP_RESERVE = 3, /* C->S Reserve;     reply ReserveReply */
  RP_OP_STAT = 4,    /* C->S StatRequest; reply Stat */
  RP_OP_ADVISE = 5,  /* S->C Advise, unsolicited, id 0, flag REPLY */
  RP_OP_PING = 6,    /* C->S empty;       reply empty (liveness) */
  RP_OP_GOODBYE = 7, /* C->S empty;       reply empty; frees the session now */
  RP_OP_WRITE = 16,  /* C->S page at slot; reply empty */
  RP_OP_READ = 17,   /* C->S empty;       reply page */
  RP_OP_FREE = 18,   /* C->S empty, slots [slot, slot+count); reply empty */
};

enum rp_status {
  RP_OK = 0,
  RP_ERR_BAD_FRAME = 1, /* malformed header or payload; connection is closed */
  RP_ERR_UNKNOWN_OP = 2,
  RP_ERR_VERSION = 3,      /* protocol version or hello magic mismatch */
  RP_ERR_AUTH = 4,         /* wrong key */
  RP_ERR_NOT_AUTHED = 5,   /* op before the handshake finished */
  RP_ERR_NO_SPACE = 6,     /* reservation past what the server can give */
  RP_ERR_PRESSURE = 7,     /* server host under memory pressure: no new capacity */
  RP_ERR_OUT_OF_RANGE = 8, /* slot outside the session's reservation */
  RP_ERR_NOT_FOUND = 9,    /* READ of a slot that holds no page */
  RP_ERR_TOO_BIG = 10,     /* length past the op's limit */
  RP_ERR_SHUTTING_DOWN = 11,
  RP_ERR_INTERNAL = 12,
  /* Local to the client library, never on the wire: */
  RP_ERR_TIMEOUT = 100,      /* no reply within the request timeout */
  RP_ERR_DISCONNECTED = 101, /* the connection dropped with the request in flight */
  RP_ERR_CONNECT = 102,      /* could not reach the server */
};

struct rp_header {
  uint32_t magic;
  uint8_t op;
  uint8_t flags;
  uint16_t status;
  uint32_t length;
  uint32_t count;
  uint64_t id;
  uint64_t slot;
};

/* Which side sent the frame being decoded: each side accepts only what the other
 * may send (a server never accepts a reply, a client never accepts a WRITE). */
enum rp_peer { RP_FROM_CLIENT, RP_FROM_SERVER };

void rp_header_encode(const struct rp_header *h, uint8_t out[RP_HEADER_SIZE]);

/* Decodes and validates a header: magic, known op for that direction, known flags,
 * payload length within the op's limit, slot and count ranges. Returns RP_OK, or the
 * rp_status to send back (RP_ERR_BAD_FRAME, RP_ERR_UNKNOWN_OP, RP_ERR_TOO_BIG). On error,
 * *why (if not NULL) points to a static sentence saying what was wrong. */
enum rp_status rp_header_decode(const uint8_t in[RP_HEADER_SIZE], enum rp_peer from,
                                struct rp_header *h, const char **why);

/* Fills a reply header for request `req` with the given status and payload length. */
void rp_header_reply(struct rp_header *reply, const struct rp_header *req,
                     enum rp_status status, uint32_t length);

bool rp_op_is_known(uint8_t op);
const char *rp_op_name(uint8_t op);
const char *rp_status_name(uint16_t status);
/* A sentence for a person: what the status means and what to do about it. */
const char *rp_status_advice(uint16_t status);

#endif
