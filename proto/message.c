/* Frame building for control messages (see message.h). */
#include "message.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

size_t rp_frame_build(uint8_t *out, size_t cap, const struct rp_header *h,
                      const ProtobufCMessage *msg)
{
  size_t payload = msg ? protobuf_c_message_get_packed_size(msg) : 0;
  if (payload > RP_MAX_CONTROL_PAYLOAD || cap < RP_HEADER_SIZE + payload)
    return 0;
  struct rp_header copy = *h;
  copy.length = (uint32_t)payload;
  rp_header_encode(&copy, out);
  if (msg)
    protobuf_c_message_pack(msg, out + RP_HEADER_SIZE);
  return RP_HEADER_SIZE + payload;
}

size_t rp_frame_build_error(uint8_t *out, size_t cap, const struct rp_header *req,
                            enum rp_status status, const char *fmt, ...)
{
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);

  Rampart__Error err = RAMPART__ERROR__INIT;
  err.code = status;
  err.message = text;
  struct rp_header h;
  rp_header_reply(&h, req, status, 0);
  return rp_frame_build(out, cap, &h, &err.base);
}

struct rp_header rp_request_header(enum rp_op op, uint64_t id)
{
  struct rp_header h;
  memset(&h, 0, sizeof h);
  h.magic = RP_FRAME_MAGIC;
  h.op = (uint8_t)op;
  h.id = id;
  return h;
}
