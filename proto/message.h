/* Building whole frames around protobuf-c control messages, so neither side packs
 * headers and payloads by hand in two places.
 *
 * Errors: a frame builder returns the frame's size, or 0 when the frame does not fit.
 */
#ifndef RAMPART_PROTO_MESSAGE_H
#define RAMPART_PROTO_MESSAGE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "rampart.pb-c.h"
#include "wire.h"

/* Writes header `h` (its length set to the packed size of msg; msg may be NULL for an
 * empty payload) followed by the packed message into out. Returns the frame's total
 * size, or 0 if it does not fit in cap or the message is larger than a control payload. */
size_t rp_frame_build(uint8_t *out, size_t cap, const struct rp_header *h,
                      const ProtobufCMessage *msg);

/* An error reply to `req`: header with `status`, payload an Error message whose text is
 * formatted from fmt. Returns the frame size, or 0 if it does not fit. */
size_t rp_frame_build_error(uint8_t *out, size_t cap, const struct rp_header *req,
                            enum rp_status status, const char *fmt, ...)
  __attribute__((format(printf, 5, 6)));

/* A request header for op with id (slot/count 0, length filled by rp_frame_build). */
struct rp_header rp_request_header(enum rp_op op, uint64_t id);

/* Largest frame rp_frame_build may produce. */
#define RP_MAX_CONTROL_FRAME (RP_HEADER_SIZE + RP_MAX_CONTROL_PAYLOAD)

#endif
