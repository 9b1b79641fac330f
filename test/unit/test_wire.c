/* Frame header encoding and validation (proto/wire.c): every op round-trips, and every
 * malformed header is refused with the right status and a sentence saying why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "wire.h"

static const uint8_t all_ops[] = {
  RP_OP_HELLO, RP_OP_AUTH,    RP_OP_RESERVE, RP_OP_STAT, RP_OP_ADVISE,
  RP_OP_PING,  RP_OP_GOODBYE, RP_OP_WRITE,   RP_OP_READ, RP_OP_FREE,
};
#define N_OPS (sizeof all_ops / sizeof all_ops[0])

static struct rp_header request(uint8_t op)
{
  struct rp_header h;
  memset(&h, 0, sizeof h);
  h.magic = RP_FRAME_MAGIC;
  h.op = op;
  h.id = 0x1122334455667788ull;
  switch (op) {
  case RP_OP_WRITE:
    h.length = RP_PAGE_SIZE;
    h.slot = 12345;
    break;
  case RP_OP_READ:
    h.slot = 777;
    break;
  case RP_OP_FREE:
    h.slot = 100;
    h.count = 50;
    break;
  case RP_OP_HELLO:
  case RP_OP_AUTH:
  case RP_OP_RESERVE:
  case RP_OP_STAT:
    h.length = 42;
    break;
  default:
    break;
  }
  return h;
}

static struct rp_header reply_to(uint8_t op)
{
  struct rp_header req = request(op);
  struct rp_header r;
  uint32_t len = 0;
  if (op == RP_OP_READ)
    len = RP_PAGE_SIZE;
  else if (op < RP_OP_WRITE && op != RP_OP_PING && op != RP_OP_GOODBYE)
    len = 17;
  rp_header_reply(&r, &req, RP_OK, len);
  return r;
}

/* Encodes h and decodes it as coming from `from`; returns the status and the why. */
static enum rp_status roundtrip(const struct rp_header *h, enum rp_peer from,
                                struct rp_header *out, const char **why)
{
  uint8_t buf[RP_HEADER_SIZE];
  rp_header_encode(h, buf);
  return rp_header_decode(buf, from, out, why);
}

static void assert_headers_equal(const struct rp_header *a, const struct rp_header *b)
{
  assert_int_equal(a->magic, b->magic);
  assert_int_equal(a->op, b->op);
  assert_int_equal(a->flags, b->flags);
  assert_int_equal(a->status, b->status);
  assert_int_equal(a->length, b->length);
  assert_int_equal(a->count, b->count);
  assert_true(a->id == b->id);
  assert_true(a->slot == b->slot);
}

/* Expect a refusal with a given status and a non-empty reason. */
static void expect_refused(const struct rp_header *h, enum rp_peer from,
                           enum rp_status status)
{
  struct rp_header out;
  const char *why = NULL;
  enum rp_status st = roundtrip(h, from, &out, &why);
  assert_int_equal(st, status);
  assert_non_null(why);
  assert_true(strlen(why) > 5);
  /* decoding with why == NULL must not crash and must agree */
  uint8_t buf[RP_HEADER_SIZE];
  rp_header_encode(h, buf);
  assert_int_equal(rp_header_decode(buf, from, &out, NULL), status);
}

static void test_layout_is_little_endian(void **state)
{
  (void)state;
  struct rp_header h = {
    .magic = RP_FRAME_MAGIC,
    .op = RP_OP_FREE,
    .flags = RP_FLAG_REPLY,
    .status = 0x0102,
    .length = 0x03040506,
    .count = 0x0708090a,
    .id = 0x1112131415161718ull,
    .slot = 0x2122232425262728ull,
  };
  uint8_t b[RP_HEADER_SIZE];
  rp_header_encode(&h, b);
  static const uint8_t want[RP_HEADER_SIZE] = {
    'R',  'P',  'M',  'F',  RP_OP_FREE, RP_FLAG_REPLY, 0x02, 0x01, 0x06, 0x05, 0x04,
    0x03, 0x0a, 0x09, 0x08, 0x07,       0x18,          0x17, 0x16, 0x15, 0x14, 0x13,
    0x12, 0x11, 0x28, 0x27, 0x26,       0x25,          0x24, 0x23, 0x22, 0x21,
  };
  assert_memory_equal(b, want, RP_HEADER_SIZE);
}

static void test_request_roundtrip_every_op(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_OPS; i++) {
    if (all_ops[i] == RP_OP_ADVISE)
      continue; /* a client never sends one */
    struct rp_header h = request(all_ops[i]), out;
    const char *why = "unset";
    assert_int_equal(roundtrip(&h, RP_FROM_CLIENT, &out, &why), RP_OK);
    assert_null(why);
    assert_headers_equal(&h, &out);
  }
}

static void test_reply_roundtrip_every_op(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_OPS; i++) {
    struct rp_header h = reply_to(all_ops[i]), out;
    if (all_ops[i] == RP_OP_ADVISE)
      h.id = 0;
    const char *why = "unset";
    assert_int_equal(roundtrip(&h, RP_FROM_SERVER, &out, &why), RP_OK);
    assert_null(why);
    assert_headers_equal(&h, &out);
    assert_int_equal(out.flags, RP_FLAG_REPLY);
  }
}

static void test_reply_header_copies_request(void **state)
{
  (void)state;
  struct rp_header req = request(RP_OP_READ), r;
  memset(&r, 0xab, sizeof r);
  rp_header_reply(&r, &req, RP_ERR_NOT_FOUND, 99);
  assert_int_equal(r.magic, RP_FRAME_MAGIC);
  assert_int_equal(r.op, RP_OP_READ);
  assert_int_equal(r.flags, RP_FLAG_REPLY);
  assert_int_equal(r.status, RP_ERR_NOT_FOUND);
  assert_int_equal(r.length, 99);
  assert_int_equal(r.count, 0);
  assert_true(r.id == req.id);
  assert_true(r.slot == req.slot);
}

static void test_bad_magic(void **state)
{
  (void)state;
  struct rp_header h = request(RP_OP_PING);
  h.magic = 0x46505052; /* one letter off */
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  h.magic = 0;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  struct rp_header r = reply_to(RP_OP_PING);
  r.magic = 0xffffffffu;
  expect_refused(&r, RP_FROM_SERVER, RP_ERR_BAD_FRAME);
}

static void test_unknown_flag_bits(void **state)
{
  (void)state;
  for (unsigned bit = 1; bit < 8; bit++) {
    struct rp_header h = request(RP_OP_READ);
    h.flags = (uint8_t)(1u << bit);
    expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
    struct rp_header r = reply_to(RP_OP_READ);
    r.flags |= (uint8_t)(1u << bit);
    expect_refused(&r, RP_FROM_SERVER, RP_ERR_BAD_FRAME);
  }
}

static void test_unknown_op(void **state)
{
  (void)state;
  for (unsigned op = 0; op < 256; op++) {
    if (rp_op_is_known((uint8_t)op))
      continue;
    struct rp_header h = request(RP_OP_PING);
    h.op = (uint8_t)op;
    expect_refused(&h, RP_FROM_CLIENT, RP_ERR_UNKNOWN_OP);
    struct rp_header r = reply_to(RP_OP_PING);
    r.op = (uint8_t)op;
    expect_refused(&r, RP_FROM_SERVER, RP_ERR_UNKNOWN_OP);
    assert_string_equal(rp_op_name((uint8_t)op), "UNKNOWN");
  }
  /* exactly the ten ops in wire.h are known */
  unsigned known = 0;
  for (unsigned op = 0; op < 256; op++)
    known += rp_op_is_known((uint8_t)op);
  assert_int_equal(known, N_OPS);
}

static void test_client_sends_reply_or_advise(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_OPS; i++) {
    struct rp_header r = reply_to(all_ops[i]);
    expect_refused(&r, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  }
  struct rp_header adv = request(RP_OP_ADVISE);
  expect_refused(&adv, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
}

static void test_server_sends_request(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_OPS; i++) {
    struct rp_header h = request(all_ops[i]);
    expect_refused(&h, RP_FROM_SERVER, RP_ERR_BAD_FRAME);
  }
}

static void test_status_on_request(void **state)
{
  (void)state;
  struct rp_header h = request(RP_OP_WRITE);
  h.status = RP_ERR_INTERNAL;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  h = request(RP_OP_HELLO);
  h.status = 1;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
}

static void test_control_payload_limit(void **state)
{
  (void)state;
  static const uint8_t control[] = { RP_OP_HELLO, RP_OP_AUTH, RP_OP_RESERVE,
                                     RP_OP_STAT,  RP_OP_PING, RP_OP_GOODBYE };
  for (size_t i = 0; i < sizeof control; i++) {
    struct rp_header h = request(control[i]), out;
    h.length = RP_MAX_CONTROL_PAYLOAD;
    assert_int_equal(roundtrip(&h, RP_FROM_CLIENT, &out, NULL), RP_OK);
    h.length = RP_MAX_CONTROL_PAYLOAD + 1;
    expect_refused(&h, RP_FROM_CLIENT, RP_ERR_TOO_BIG);
    h.length = UINT32_MAX;
    expect_refused(&h, RP_FROM_CLIENT, RP_ERR_TOO_BIG);

    struct rp_header r = reply_to(control[i]);
    r.length = RP_MAX_CONTROL_PAYLOAD + 1;
    expect_refused(&r, RP_FROM_SERVER, RP_ERR_TOO_BIG);
  }
  struct rp_header adv = reply_to(RP_OP_ADVISE);
  adv.length = RP_MAX_CONTROL_PAYLOAD + 1;
  expect_refused(&adv, RP_FROM_SERVER, RP_ERR_TOO_BIG);
}

static void test_write_length(void **state)
{
  (void)state;
  static const uint32_t bad[] = { 0, 1, RP_PAGE_SIZE - 1, RP_PAGE_SIZE + 1,
                                  2 * RP_PAGE_SIZE };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct rp_header h = request(RP_OP_WRITE);
    h.length = bad[i];
    expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  }
  /* a huge WRITE is also too big, not only malformed */
  struct rp_header h = request(RP_OP_WRITE);
  h.length = RP_MAX_CONTROL_PAYLOAD + 1;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_TOO_BIG);
  /* a WRITE reply carries nothing */
  struct rp_header r = reply_to(RP_OP_WRITE);
  r.length = RP_PAGE_SIZE;
  expect_refused(&r, RP_FROM_SERVER, RP_ERR_BAD_FRAME);
}

static void test_read_request_with_payload(void **state)
{
  (void)state;
  struct rp_header h = request(RP_OP_READ);
  h.length = RP_PAGE_SIZE;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  h.length = 1;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  struct rp_header f = request(RP_OP_FREE);
  f.length = 8;
  expect_refused(&f, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
}

static void test_read_reply_wrong_length(void **state)
{
  (void)state;
  static const uint32_t bad[] = { 0, 1, RP_PAGE_SIZE - 1, RP_PAGE_SIZE + 1 };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct rp_header r = reply_to(RP_OP_READ);
    r.length = bad[i];
    expect_refused(&r, RP_FROM_SERVER, RP_ERR_BAD_FRAME);
  }
  struct rp_header r = reply_to(RP_OP_FREE);
  r.length = 4;
  expect_refused(&r, RP_FROM_SERVER, RP_ERR_BAD_FRAME);
}

static void test_error_reply_to_hot_op(void **state)
{
  (void)state;
  static const uint8_t hot[] = { RP_OP_WRITE, RP_OP_READ, RP_OP_FREE };
  for (size_t i = 0; i < sizeof hot; i++) {
    struct rp_header req = request(hot[i]), r, out;
    rp_header_reply(&r, &req, RP_ERR_OUT_OF_RANGE, 57); /* an Error message */
    const char *why = "unset";
    assert_int_equal(roundtrip(&r, RP_FROM_SERVER, &out, &why), RP_OK);
    assert_null(why);
    assert_int_equal(out.status, RP_ERR_OUT_OF_RANGE);
    assert_int_equal(out.length, 57);
    r.length = 0; /* an error with no message is allowed too */
    assert_int_equal(roundtrip(&r, RP_FROM_SERVER, &out, NULL), RP_OK);
    r.length = RP_MAX_CONTROL_PAYLOAD + 1;
    expect_refused(&r, RP_FROM_SERVER, RP_ERR_TOO_BIG);
  }
}

static void test_slot_range(void **state)
{
  (void)state;
  static const uint8_t hot[] = { RP_OP_WRITE, RP_OP_READ, RP_OP_FREE };
  for (size_t i = 0; i < sizeof hot; i++) {
    struct rp_header h = request(hot[i]), out;
    h.slot = RP_MAX_SLOT;
    if (hot[i] == RP_OP_FREE)
      h.count = 1;
    assert_int_equal(roundtrip(&h, RP_FROM_CLIENT, &out, NULL), RP_OK);
    assert_true(out.slot == RP_MAX_SLOT);
    h.slot = RP_MAX_SLOT + 1;
    expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
    h.slot = UINT64_MAX;
    expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  }
}

static void test_free_count(void **state)
{
  (void)state;
  struct rp_header h = request(RP_OP_FREE), out;
  h.count = 1;
  assert_int_equal(roundtrip(&h, RP_FROM_CLIENT, &out, NULL), RP_OK);
  h.count = RP_MAX_FREE_COUNT;
  assert_int_equal(roundtrip(&h, RP_FROM_CLIENT, &out, NULL), RP_OK);
  assert_int_equal(out.count, RP_MAX_FREE_COUNT);
  h.count = 0;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  h.count = RP_MAX_FREE_COUNT + 1;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  h.count = UINT32_MAX;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
}

static void test_count_on_write_and_read(void **state)
{
  (void)state;
  struct rp_header h = request(RP_OP_WRITE);
  h.count = 1;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
  h = request(RP_OP_READ);
  h.count = 7;
  expect_refused(&h, RP_FROM_CLIENT, RP_ERR_BAD_FRAME);
}

static void test_names_and_advice(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_OPS; i++)
    assert_string_not_equal(rp_op_name(all_ops[i]), "UNKNOWN");
  static const uint16_t errors[] = {
    RP_ERR_BAD_FRAME,  RP_ERR_UNKNOWN_OP,   RP_ERR_VERSION,       RP_ERR_AUTH,
    RP_ERR_NOT_AUTHED, RP_ERR_NO_SPACE,     RP_ERR_PRESSURE,      RP_ERR_OUT_OF_RANGE,
    RP_ERR_NOT_FOUND,  RP_ERR_TOO_BIG,      RP_ERR_SHUTTING_DOWN, RP_ERR_INTERNAL,
    RP_ERR_TIMEOUT,    RP_ERR_DISCONNECTED, RP_ERR_CONNECT,
  };
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
    assert_string_not_equal(rp_status_name(errors[i]), "unknown status");
    assert_true(strlen(rp_status_advice(errors[i])) > 10);
  }
  assert_string_equal(rp_status_name(RP_OK), "ok");
  assert_string_equal(rp_status_name(9999), "unknown status");
  assert_non_null(rp_status_advice(9999));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_layout_is_little_endian),
    cmocka_unit_test(test_request_roundtrip_every_op),
    cmocka_unit_test(test_reply_roundtrip_every_op),
    cmocka_unit_test(test_reply_header_copies_request),
    cmocka_unit_test(test_bad_magic),
    cmocka_unit_test(test_unknown_flag_bits),
    cmocka_unit_test(test_unknown_op),
    cmocka_unit_test(test_client_sends_reply_or_advise),
    cmocka_unit_test(test_server_sends_request),
    cmocka_unit_test(test_status_on_request),
    cmocka_unit_test(test_control_payload_limit),
    cmocka_unit_test(test_write_length),
    cmocka_unit_test(test_read_request_with_payload),
    cmocka_unit_test(test_read_reply_wrong_length),
    cmocka_unit_test(test_error_reply_to_hot_op),
    cmocka_unit_test(test_slot_range),
    cmocka_unit_test(test_free_count),
    cmocka_unit_test(test_count_on_write_and_read),
    cmocka_unit_test(test_names_and_advice),
  };
  return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}
