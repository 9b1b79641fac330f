/* Control-message frames (proto/message.c): what rp_frame_build writes decodes as a valid
 * header from the right peer, and its payload unpacks to the message that went in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "message.h"

static uint8_t frame[RP_MAX_CONTROL_FRAME];

/* Decodes frame's header as sent by `from`, checks it and returns the payload length. */
static uint32_t decode_ok(size_t n, enum rp_peer from, struct rp_header *h)
{
  assert_true(n >= RP_HEADER_SIZE);
  const char *why = NULL;
  enum rp_status st = rp_header_decode(frame, from, h, &why);
  if (st != RP_OK)
    fail_msg("built frame does not decode: %s", why);
  assert_int_equal(h->length, n - RP_HEADER_SIZE);
  return h->length;
}

static void test_request_header(void **state)
{
  (void)state;
  struct rp_header h = rp_request_header(RP_OP_STAT, 99);
  assert_int_equal(h.magic, RP_FRAME_MAGIC);
  assert_int_equal(h.op, RP_OP_STAT);
  assert_int_equal(h.flags, 0);
  assert_int_equal(h.status, 0);
  assert_int_equal(h.length, 0);
  assert_int_equal(h.count, 0);
  assert_int_equal(h.id, 99);
  assert_int_equal(h.slot, 0);
}

static void test_hello_roundtrip(void **state)
{
  (void)state;
  uint8_t nonce[RP_NONCE_LEN], token[RP_TOKEN_LEN];
  for (unsigned i = 0; i < RP_NONCE_LEN; i++)
    nonce[i] = (uint8_t)(i * 7);
  for (unsigned i = 0; i < RP_TOKEN_LEN; i++)
    token[i] = (uint8_t)(0xff - i);
  Rampart__Hello hello = RAMPART__HELLO__INIT;
  hello.magic = RP_HELLO_MAGIC;
  hello.version = RP_PROTOCOL_VERSION;
  hello.client_nonce.data = nonce;
  hello.client_nonce.len = sizeof nonce;
  hello.client_name = "test-client";

  struct rp_header req = rp_request_header(RP_OP_HELLO, 1);
  req.length = 12345; /* ignored: rp_frame_build sets it */
  size_t n = rp_frame_build(frame, sizeof frame, &req, &hello.base);
  assert_true(n > RP_HEADER_SIZE);
  struct rp_header h;
  uint32_t len = decode_ok(n, RP_FROM_CLIENT, &h);
  assert_int_equal(h.op, RP_OP_HELLO);
  assert_int_equal(h.id, 1);

  Rampart__Hello *got = rampart__hello__unpack(NULL, len, frame + RP_HEADER_SIZE);
  assert_non_null(got);
  assert_int_equal(got->magic, RP_HELLO_MAGIC);
  assert_int_equal(got->version, RP_PROTOCOL_VERSION);
  assert_int_equal(got->client_nonce.len, RP_NONCE_LEN);
  assert_memory_equal(got->client_nonce.data, nonce, RP_NONCE_LEN);
  assert_string_equal(got->client_name, "test-client");
  rampart__hello__free_unpacked(got, NULL);

  /* Version 2: the token rides in AUTH, after the server proved the key. */
  uint8_t mac[RP_MAC_LEN];
  memset(mac, 0x77, sizeof mac);
  Rampart__Auth auth = RAMPART__AUTH__INIT;
  auth.client_mac.data = mac;
  auth.client_mac.len = sizeof mac;
  auth.resume_token.data = token;
  auth.resume_token.len = sizeof token;
  req = rp_request_header(RP_OP_AUTH, 2);
  n = rp_frame_build(frame, sizeof frame, &req, &auth.base);
  len = decode_ok(n, RP_FROM_CLIENT, &h);
  Rampart__Auth *a = rampart__auth__unpack(NULL, len, frame + RP_HEADER_SIZE);
  assert_non_null(a);
  assert_memory_equal(a->client_mac.data, mac, RP_MAC_LEN);
  assert_int_equal(a->resume_token.len, RP_TOKEN_LEN);
  assert_memory_equal(a->resume_token.data, token, RP_TOKEN_LEN);
  rampart__auth__free_unpacked(a, NULL);
}

static void test_welcome_roundtrip(void **state)
{
  (void)state;
  uint8_t token[RP_TOKEN_LEN];
  memset(token, 0x33, sizeof token);
  Rampart__Welcome w = RAMPART__WELCOME__INIT;
  w.session_token.data = token;
  w.session_token.len = sizeof token;
  w.resumed = true;
  w.page_size = RP_PAGE_SIZE;
  w.capacity_pages = 16384;
  w.free_pages = 1000;
  w.lease_seconds = 60;
  w.reserved_pages = 15384;
  w.pressure = true;

  struct rp_header req = rp_request_header(RP_OP_AUTH, 2), rep;
  rp_header_reply(&rep, &req, RP_OK, 0);
  size_t n = rp_frame_build(frame, sizeof frame, &rep, &w.base);
  struct rp_header h;
  uint32_t len = decode_ok(n, RP_FROM_SERVER, &h);
  assert_int_equal(h.flags, RP_FLAG_REPLY);
  assert_int_equal(h.status, RP_OK);
  assert_int_equal(h.id, 2);

  Rampart__Welcome *got = rampart__welcome__unpack(NULL, len, frame + RP_HEADER_SIZE);
  assert_non_null(got);
  assert_memory_equal(got->session_token.data, token, RP_TOKEN_LEN);
  assert_true(got->resumed);
  assert_int_equal(got->page_size, RP_PAGE_SIZE);
  assert_int_equal(got->capacity_pages, 16384);
  assert_int_equal(got->free_pages, 1000);
  assert_int_equal(got->lease_seconds, 60);
  assert_int_equal(got->reserved_pages, 15384);
  assert_true(got->pressure);
  rampart__welcome__free_unpacked(got, NULL);
}

static void test_stat_and_advise_roundtrip(void **state)
{
  (void)state;
  Rampart__Stat s = RAMPART__STAT__INIT;
  s.server_name = "mem-1";
  s.version = RP_PROTOCOL_VERSION;
  s.capacity_pages = UINT64_MAX;
  s.psi_some_avg10 = 12.5;
  s.errors_auth = 3;
  struct rp_header req = rp_request_header(RP_OP_STAT, 3), rep;
  rp_header_reply(&rep, &req, RP_OK, 0);
  size_t n = rp_frame_build(frame, sizeof frame, &rep, &s.base);
  struct rp_header h;
  uint32_t len = decode_ok(n, RP_FROM_SERVER, &h);
  Rampart__Stat *gs = rampart__stat__unpack(NULL, len, frame + RP_HEADER_SIZE);
  assert_non_null(gs);
  assert_string_equal(gs->server_name, "mem-1");
  assert_true(gs->capacity_pages == UINT64_MAX);
  assert_true(gs->psi_some_avg10 == 12.5);
  assert_int_equal(gs->errors_auth, 3);
  rampart__stat__free_unpacked(gs, NULL);

  /* ADVISE is pushed with id 0 and the reply flag */
  Rampart__Advise a = RAMPART__ADVISE__INIT;
  a.pressure = true;
  a.reason = "PSI some avg10 40.0 > 20.0";
  a.free_pages = 5;
  struct rp_header push = rp_request_header(RP_OP_ADVISE, 0);
  push.flags = RP_FLAG_REPLY;
  n = rp_frame_build(frame, sizeof frame, &push, &a.base);
  len = decode_ok(n, RP_FROM_SERVER, &h);
  assert_int_equal(h.id, 0);
  Rampart__Advise *ga = rampart__advise__unpack(NULL, len, frame + RP_HEADER_SIZE);
  assert_non_null(ga);
  assert_true(ga->pressure);
  assert_string_equal(ga->reason, a.reason);
  assert_int_equal(ga->free_pages, 5);
  rampart__advise__free_unpacked(ga, NULL);
}

static void test_empty_payload(void **state)
{
  (void)state;
  struct rp_header req = rp_request_header(RP_OP_PING, 7);
  size_t n = rp_frame_build(frame, sizeof frame, &req, NULL);
  assert_int_equal(n, RP_HEADER_SIZE);
  struct rp_header h;
  assert_int_equal(decode_ok(n, RP_FROM_CLIENT, &h), 0);
  assert_int_equal(h.op, RP_OP_PING);

  /* a message with every field at its default packs to nothing in proto3 */
  Rampart__StatRequest sr = RAMPART__STAT_REQUEST__INIT;
  req = rp_request_header(RP_OP_STAT, 8);
  n = rp_frame_build(frame, sizeof frame, &req, &sr.base);
  assert_int_equal(n, RP_HEADER_SIZE);
  Rampart__StatRequest *got = rampart__stat_request__unpack(NULL, 0, frame + RP_HEADER_SIZE);
  assert_non_null(got);
  rampart__stat_request__free_unpacked(got, NULL);
}

static void test_error_frame_roundtrip(void **state)
{
  (void)state;
  static const uint8_t ops[] = { RP_OP_READ, RP_OP_WRITE, RP_OP_FREE, RP_OP_RESERVE,
                                 RP_OP_AUTH };
  for (size_t i = 0; i < sizeof ops; i++) {
    struct rp_header req = rp_request_header((enum rp_op)ops[i], 40 + i);
    req.slot = 12345;
    size_t n = rp_frame_build_error(frame, sizeof frame, &req, RP_ERR_OUT_OF_RANGE,
                                    "slot %llu is past the reservation of %d pages",
                                    (unsigned long long)req.slot, 100);
    assert_true(n > RP_HEADER_SIZE);
    struct rp_header h;
    uint32_t len = decode_ok(n, RP_FROM_SERVER, &h);
    assert_int_equal(h.op, ops[i]);
    assert_int_equal(h.flags, RP_FLAG_REPLY);
    assert_int_equal(h.status, RP_ERR_OUT_OF_RANGE);
    assert_int_equal(h.id, 40 + i);
    assert_int_equal(h.slot, 12345);
    Rampart__Error *e = rampart__error__unpack(NULL, len, frame + RP_HEADER_SIZE);
    assert_non_null(e);
    assert_int_equal(e->code, RP_ERR_OUT_OF_RANGE);
    assert_string_equal(e->message, "slot 12345 is past the reservation of 100 pages");
    rampart__error__free_unpacked(e, NULL);
  }
}

static void test_error_message_truncated(void **state)
{
  (void)state;
  char *longtext = malloc(4000);
  assert_non_null(longtext);
  memset(longtext, 'e', 3999);
  longtext[3999] = '\0';
  struct rp_header req = rp_request_header(RP_OP_RESERVE, 5);
  size_t n = rp_frame_build_error(frame, sizeof frame, &req, RP_ERR_NO_SPACE, "%s", longtext);
  assert_true(n > RP_HEADER_SIZE);
  struct rp_header h;
  uint32_t len = decode_ok(n, RP_FROM_SERVER, &h);
  Rampart__Error *e = rampart__error__unpack(NULL, len, frame + RP_HEADER_SIZE);
  assert_non_null(e);
  assert_true(strlen(e->message) > 100);
  assert_true(strlen(e->message) < 4000);
  rampart__error__free_unpacked(e, NULL);
  free(longtext);
}

static void test_build_refuses_small_buffer(void **state)
{
  (void)state;
  Rampart__Reserve r = RAMPART__RESERVE__INIT;
  r.pages = 1u << 20;
  struct rp_header req = rp_request_header(RP_OP_RESERVE, 9);
  size_t need = rp_frame_build(frame, sizeof frame, &req, &r.base);
  assert_true(need > RP_HEADER_SIZE);

  uint8_t small[64];
  memset(small, 0xcc, sizeof small);
  assert_int_equal(rp_frame_build(small, need - 1, &req, &r.base), 0);
  assert_int_equal(rp_frame_build(small, RP_HEADER_SIZE - 1, &req, NULL), 0);
  for (size_t i = 0; i < sizeof small; i++)
    assert_int_equal(small[i], 0xcc); /* nothing written on failure */
  assert_int_equal(rp_frame_build(small, need, &req, &r.base), need);
  assert_memory_equal(small, frame, need);

  assert_int_equal(rp_frame_build_error(small, RP_HEADER_SIZE, &req, RP_ERR_NO_SPACE, "no"),
                   0);
}

static void test_build_refuses_oversize_message(void **state)
{
  (void)state;
  size_t big = RP_MAX_CONTROL_PAYLOAD + 10;
  char *name = malloc(big);
  assert_non_null(name);
  memset(name, 'n', big - 1);
  name[big - 1] = '\0';
  Rampart__Hello hello = RAMPART__HELLO__INIT;
  hello.client_name = name;
  struct rp_header req = rp_request_header(RP_OP_HELLO, 1);
  uint8_t *huge = malloc(2 * big);
  assert_non_null(huge);
  assert_int_equal(rp_frame_build(huge, 2 * big, &req, &hello.base), 0);

  /* just under the limit fits exactly */
  name[RP_MAX_CONTROL_PAYLOAD - 4] = '\0'; /* tag + 3-byte length + text = 64 KiB */
  size_t n = rp_frame_build(huge, 2 * big, &req, &hello.base);
  assert_int_equal(n, RP_MAX_CONTROL_FRAME);
  struct rp_header h;
  assert_int_equal(rp_header_decode(huge, RP_FROM_CLIENT, &h, NULL), RP_OK);
  Rampart__Hello *got = rampart__hello__unpack(NULL, h.length, huge + RP_HEADER_SIZE);
  assert_non_null(got);
  assert_int_equal(strlen(got->client_name), RP_MAX_CONTROL_PAYLOAD - 4);
  rampart__hello__free_unpacked(got, NULL);
  free(huge);
  free(name);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_request_header),
    cmocka_unit_test(test_hello_roundtrip),
    cmocka_unit_test(test_welcome_roundtrip),
    cmocka_unit_test(test_stat_and_advise_roundtrip),
    cmocka_unit_test(test_empty_payload),
    cmocka_unit_test(test_error_frame_roundtrip),
    cmocka_unit_test(test_error_message_truncated),
    cmocka_unit_test(test_build_refuses_small_buffer),
    cmocka_unit_test(test_build_refuses_oversize_message),
  };
  return cmocka_run_group_tests_name("message", tests, NULL, NULL);
}
