/* libFuzzer target for the frame decoder: the first thing either side runs on bytes from
 * the network. Input = a 32-byte header followed by payload bytes. The header is decoded
 * as sent by a client and as sent by a server; when it is valid, the payload (as much of
 * it as the input holds, up to the header's length) is unpacked with the protobuf-c
 * message that op and direction carry, re-packed, and freed. Nothing may crash, leak or
 * trip a sanitizer, and a valid header must re-encode to the same bytes.
 *
 * With RAMPART_FUZZ_SEED_DIR=DIR in the environment, the target first writes a seed
 * corpus of valid frames (built with the real encoder) into DIR, so the seeds always
 * match the current protocol. scripts/test does this before fuzzing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "message.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static void repack(const ProtobufCMessage *m)
{
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf)
    abort();
  if (protobuf_c_message_pack(m, buf) != n)
    abort();
  free(buf);
}

/* Unpacks the payload of a frame from `from`, as the receiving side would. */
static void unpack_payload(const struct rp_header *h, enum rp_peer from, const uint8_t *p,
                           size_t len)
{
  const ProtobufCMessageDescriptor *d = NULL;
  if (from == RP_FROM_CLIENT) {
    switch (h->op) {
    case RP_OP_HELLO:
      d = &rampart__hello__descriptor;
      break;
    case RP_OP_AUTH:
      d = &rampart__auth__descriptor;
      break;
    case RP_OP_RESERVE:
      d = &rampart__reserve__descriptor;
      break;
    case RP_OP_STAT:
      d = &rampart__stat_request__descriptor;
      break;
    default:
      return; /* empty, or a raw page */
    }
  } else if (h->status != RP_OK) {
    d = &rampart__error__descriptor;
  } else {
    switch (h->op) {
    case RP_OP_HELLO:
      d = &rampart__challenge__descriptor;
      break;
    case RP_OP_AUTH:
      d = &rampart__welcome__descriptor;
      break;
    case RP_OP_RESERVE:
      d = &rampart__reserve_reply__descriptor;
      break;
    case RP_OP_STAT:
      d = &rampart__stat__descriptor;
      break;
    case RP_OP_ADVISE:
      d = &rampart__advise__descriptor;
      break;
    default:
      return;
    }
  }
  /* Through the typed unpackers, as the server and client call them. */
  ProtobufCMessage *m = NULL;
  if (d == &rampart__hello__descriptor) {
    Rampart__Hello *x = rampart__hello__unpack(NULL, len, p);
    if (x) {
      volatile size_t touch = x->client_nonce.len +
                              (x->client_name ? strlen(x->client_name) : 0);
      (void)touch;
      repack(&x->base);
      rampart__hello__free_unpacked(x, NULL);
    }
    return;
  }
  if (d == &rampart__error__descriptor) {
    Rampart__Error *x = rampart__error__unpack(NULL, len, p);
    if (x) {
      volatile size_t touch = x->message ? strlen(x->message) : 0;
      (void)touch;
      repack(&x->base);
      rampart__error__free_unpacked(x, NULL);
    }
    return;
  }
  if (d == &rampart__welcome__descriptor) {
    Rampart__Welcome *x = rampart__welcome__unpack(NULL, len, p);
    if (x) {
      repack(&x->base);
      rampart__welcome__free_unpacked(x, NULL);
    }
    return;
  }
  if (d == &rampart__advise__descriptor) {
    Rampart__Advise *x = rampart__advise__unpack(NULL, len, p);
    if (x) {
      volatile size_t touch = x->reason ? strlen(x->reason) : 0;
      (void)touch;
      repack(&x->base);
      rampart__advise__free_unpacked(x, NULL);
    }
    return;
  }
  /* The rest through the generic entry points the typed ones wrap. */
  m = protobuf_c_message_unpack(d, NULL, len, p);
  if (m) {
    repack(m);
    protobuf_c_message_free_unpacked(m, NULL);
  }
}

static void one_peer(const uint8_t *data, size_t size, enum rp_peer from)
{
  struct rp_header h;
  const char *why = NULL;
  enum rp_status st = rp_header_decode(data, from, &h, &why);
  /* names never fail, whatever the bytes */
  if (!rp_op_name(h.op) || !rp_status_name(h.status) || !rp_status_advice(h.status))
    abort();
  if (st != RP_OK) {
    if (!why || !*why)
      abort(); /* every refusal says why */
    if (st != RP_ERR_BAD_FRAME && st != RP_ERR_UNKNOWN_OP && st != RP_ERR_TOO_BIG)
      abort();
    return;
  }
  if (why)
    abort();
  uint8_t again[RP_HEADER_SIZE];
  rp_header_encode(&h, again);
  if (memcmp(again, data, RP_HEADER_SIZE) != 0)
    abort();

  size_t avail = size - RP_HEADER_SIZE;
  size_t len = h.length < avail ? h.length : avail;
  unpack_payload(&h, from, data + RP_HEADER_SIZE, len);

  /* An error reply built for this frame must itself be valid from a server. */
  if (from == RP_FROM_CLIENT) {
    static uint8_t out[RP_MAX_CONTROL_FRAME];
    size_t n = rp_frame_build_error(out, sizeof out, &h, RP_ERR_INTERNAL, "op %s slot %llu",
                                    rp_op_name(h.op), (unsigned long long)h.slot);
    struct rp_header r;
    if (n == 0 || rp_header_decode(out, RP_FROM_SERVER, &r, NULL) != RP_OK)
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < RP_HEADER_SIZE)
    return 0;
  one_peer(data, size, RP_FROM_CLIENT);
  one_peer(data, size, RP_FROM_SERVER);
  return 0;
}

/* ---- seed corpus ---- */

static void write_seed(const char *dir, const char *name, const uint8_t *buf, size_t n)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, buf, n) != (ssize_t)n) {
    fprintf(stderr, "fuzz_frame: cannot write seed %s: %s\n", path, strerror(errno));
    exit(1);
  }
  close(fd);
}

static void seed_message(const char *dir, const char *name, struct rp_header h,
                         const ProtobufCMessage *m)
{
  static uint8_t buf[RP_MAX_CONTROL_FRAME];
  size_t n = rp_frame_build(buf, sizeof buf, &h, m);
  if (n == 0)
    abort();
  write_seed(dir, name, buf, n);
}

static void seed_hot(const char *dir, const char *name, struct rp_header h)
{
  static uint8_t buf[RP_HEADER_SIZE + RP_PAGE_SIZE];
  rp_header_encode(&h, buf);
  for (uint32_t i = 0; i < h.length; i++)
    buf[RP_HEADER_SIZE + i] = (uint8_t)(i * 31 + 7);
  write_seed(dir, name, buf, RP_HEADER_SIZE + h.length);
}

static struct rp_header reply(enum rp_op op, uint64_t id)
{
  struct rp_header req = rp_request_header(op, id), r;
  rp_header_reply(&r, &req, RP_OK, 0);
  return r;
}

static void write_seeds(const char *dir)
{
  uint8_t nonce[RP_NONCE_LEN], mac[RP_MAC_LEN], token[RP_TOKEN_LEN];
  for (unsigned i = 0; i < RP_NONCE_LEN; i++) {
    nonce[i] = (uint8_t)(i + 1);
    mac[i] = (uint8_t)(0x80 + i);
    token[i] = (uint8_t)(0x40 + i);
  }

  Rampart__Hello hello = RAMPART__HELLO__INIT;
  hello.magic = RP_HELLO_MAGIC;
  hello.version = RP_PROTOCOL_VERSION;
  hello.client_nonce = (ProtobufCBinaryData){ RP_NONCE_LEN, nonce };
  hello.client_name = "seed-client";
  seed_message(dir, "hello", rp_request_header(RP_OP_HELLO, 1), &hello.base);

  Rampart__Challenge ch = RAMPART__CHALLENGE__INIT;
  ch.version = RP_PROTOCOL_VERSION;
  ch.server_nonce = (ProtobufCBinaryData){ RP_NONCE_LEN, nonce };
  ch.server_name = "seed-server";
  ch.server_mac = (ProtobufCBinaryData){ RP_MAC_LEN, mac };
  seed_message(dir, "challenge", reply(RP_OP_HELLO, 1), &ch.base);

  Rampart__Auth auth = RAMPART__AUTH__INIT;
  auth.client_mac = (ProtobufCBinaryData){ RP_MAC_LEN, mac };
  seed_message(dir, "auth", rp_request_header(RP_OP_AUTH, 2), &auth.base);
  auth.resume_token = (ProtobufCBinaryData){ RP_TOKEN_LEN, token };
  seed_message(dir, "auth-resume", rp_request_header(RP_OP_AUTH, 2), &auth.base);

  Rampart__Welcome w = RAMPART__WELCOME__INIT;
  w.session_token = (ProtobufCBinaryData){ RP_TOKEN_LEN, token };
  w.page_size = RP_PAGE_SIZE;
  w.capacity_pages = 16384;
  w.free_pages = 16384;
  w.lease_seconds = 60;
  seed_message(dir, "welcome", reply(RP_OP_AUTH, 2), &w.base);

  Rampart__Reserve res = RAMPART__RESERVE__INIT;
  res.pages = 16384;
  seed_message(dir, "reserve", rp_request_header(RP_OP_RESERVE, 3), &res.base);
  Rampart__ReserveReply rr = RAMPART__RESERVE_REPLY__INIT;
  rr.reserved_pages = 16384;
  rr.free_pages = 0;
  seed_message(dir, "reserve-reply", reply(RP_OP_RESERVE, 3), &rr.base);

  Rampart__StatRequest sr = RAMPART__STAT_REQUEST__INIT;
  seed_message(dir, "stat", rp_request_header(RP_OP_STAT, 4), &sr.base);
  Rampart__Stat st = RAMPART__STAT__INIT;
  st.server_name = "seed-server";
  st.version = RP_PROTOCOL_VERSION;
  st.page_size = RP_PAGE_SIZE;
  st.capacity_pages = 16384;
  st.stored_pages = 100;
  st.psi_some_avg10 = 1.5;
  st.pressure = true;
  seed_message(dir, "stat-reply", reply(RP_OP_STAT, 4), &st.base);

  Rampart__Advise adv = RAMPART__ADVISE__INIT;
  adv.pressure = true;
  adv.reason = "memory pressure";
  adv.free_pages = 12;
  struct rp_header push = rp_request_header(RP_OP_ADVISE, 0);
  push.flags = RP_FLAG_REPLY;
  seed_message(dir, "advise", push, &adv.base);

  seed_message(dir, "ping", rp_request_header(RP_OP_PING, 5), NULL);
  seed_message(dir, "goodbye-reply", reply(RP_OP_GOODBYE, 6), NULL);

  struct rp_header wr = rp_request_header(RP_OP_WRITE, 7);
  wr.slot = 42;
  wr.length = RP_PAGE_SIZE;
  seed_hot(dir, "write", wr);
  seed_hot(dir, "write-reply", reply(RP_OP_WRITE, 7));
  struct rp_header rd = rp_request_header(RP_OP_READ, 8);
  rd.slot = 42;
  seed_hot(dir, "read", rd);
  struct rp_header rdr = reply(RP_OP_READ, 8);
  rdr.slot = 42;
  rdr.length = RP_PAGE_SIZE;
  seed_hot(dir, "read-reply", rdr);
  struct rp_header fr = rp_request_header(RP_OP_FREE, 9);
  fr.slot = 0;
  fr.count = 1024;
  seed_hot(dir, "free", fr);

  static uint8_t buf[RP_MAX_CONTROL_FRAME];
  size_t n = rp_frame_build_error(buf, sizeof buf, &rd, RP_ERR_NOT_FOUND,
                                  "no page at slot %llu", (unsigned long long)rd.slot);
  write_seed(dir, "read-error", buf, n);
  struct rp_header au = rp_request_header(RP_OP_AUTH, 2);
  n = rp_frame_build_error(buf, sizeof buf, &au, RP_ERR_AUTH, "wrong key");
  write_seed(dir, "auth-error", buf, n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  const char *dir = getenv("RAMPART_FUZZ_SEED_DIR");
  if (dir && *dir)
    write_seeds(dir);
  return 0;
}
