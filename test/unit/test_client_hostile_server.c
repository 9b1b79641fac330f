/* librampart against a fake server in a thread that lies: a Challenge whose MAC proves
 * nothing, replies to ids never sent, wrong ops, wrong lengths, 4 GiB headers, bad
 * pushes, a reply whose authentication tag is wrong. The fake server holds the key (but
 * for BAD_SERVER_MAC) and tags its frames, so its lies reach the checks behind the tag. Every lie must fail the connection cleanly (RP_ERR_AUTH at the handshake,
 * otherwise every request RP_ERR_DISCONNECTED and on_disconnect once with
 * RP_ERR_BAD_FRAME), never crash or hand back wrong bytes; honest but awkward
 * behaviour (a reply dribbled one byte at a time, an undecodable Error) must work. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "client.h"
#include "frame_auth.h"
#include "message.h"

enum scenario {
  HONEST_DRIBBLE, /* READ reply sent one byte per write */
  BAD_SERVER_MAC, /* Challenge with a MAC made without the key */
  SHORT_NONCE,    /* Challenge with a 5-byte nonce */
  UNKNOWN_ID,     /* reply to an id that was never sent */
  WRONG_OP,       /* WRITE reply to a READ */
  SHORT_PAGE,     /* READ reply carrying 100 bytes */
  HUGE_LENGTH,    /* header claiming 0xFFFFFFFF bytes */
  BAD_PUSH,       /* id 0 frame that is not an ADVISE */
  JUNK_ERROR, /* error status with an undecodable Error payload: request fails, conn lives */
  GARBAGE,    /* random bytes */
  BAD_TAG,    /* an honest READ reply whose tag has one bit flipped */
  BIG_ERROR,  /* error status with the largest payload, sent in two parts: request
                       fails, conn lives */
};

struct fake {
  int lfd;
  uint16_t port;
  enum scenario scenario;
  struct rp_key key;
  pthread_t thread;
};

static int read_full(int fd, void *buf, size_t len)
{
  uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static void write_full(int fd, const void *buf, size_t len)
{
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    p += n;
    len -= (size_t)n;
  }
}

/* Reads one client frame; payload into buf (<= cap). */
/* One client frame into buf (payload only); with rx, its tag is read and checked. */
static int read_frame(int fd, struct rp_header *h, uint8_t *buf, size_t cap,
                      struct rp_frame_auth *rx)
{
  uint8_t hb[RP_HEADER_SIZE], tag[RP_TAG_LEN];
  if (read_full(fd, hb, sizeof hb) < 0)
    return -1;
  if (rp_header_decode(hb, RP_FROM_CLIENT, h, NULL) != RP_OK || h->length > cap)
    return -1;
  if (read_full(fd, buf, h->length) < 0)
    return -1;
  if (rx &&
      (read_full(fd, tag, sizeof tag) < 0 || !rp_frame_verify(rx, hb, buf, h->length, tag)))
    return -1;
  return 0;
}

/* Tags the frame of n bytes at out (room for the tag after it); returns its new size. */
static size_t tag_frame(struct rp_frame_auth *tx, uint8_t *out, size_t n)
{
  assert_int_equal(rp_frame_tag(tx, out, out + RP_HEADER_SIZE, n - RP_HEADER_SIZE, out + n),
                   0);
  return n + RP_TAG_LEN;
}

static void *fake_main(void *arg)
{
  struct fake *f = arg;
  int fd = accept(f->lfd, NULL, NULL);
  if (fd < 0)
    return NULL;
  static uint8_t buf[RP_MAX_CONTROL_FRAME];
  static uint8_t out[RP_MAX_CONTROL_FRAME + RP_PAGE_SIZE];
  struct rp_header h, r;
  uint8_t cnonce[RP_NONCE_LEN], snonce[RP_NONCE_LEN];
  struct rp_frame_auth rx = { 0 }, tx = { 0 };

  if (read_frame(fd, &h, buf, sizeof buf, NULL) < 0 || h.op != RP_OP_HELLO)
    goto out;
  Rampart__Hello *hello = rampart__hello__unpack(NULL, h.length, buf);
  if (!hello || hello->client_nonce.len != RP_NONCE_LEN)
    goto out;
  memcpy(cnonce, hello->client_nonce.data, RP_NONCE_LEN);
  rampart__hello__free_unpacked(hello, NULL);
  rp_random_bytes(snonce, sizeof snonce);
  uint8_t mac[RP_MAC_LEN], token[RP_TOKEN_LEN];
  if (f->scenario == BAD_SERVER_MAC) {
    struct rp_key none = { .len = 0 };
    rp_auth_server_mac(&none, cnonce, snonce, mac); /* "proves" without knowing the key */
  } else {
    rp_auth_server_mac(&f->key, cnonce, snonce, mac);
  }
  Rampart__Challenge ch = RAMPART__CHALLENGE__INIT;
  ch.version = RP_PROTOCOL_VERSION;
  ch.server_nonce.data = snonce;
  ch.server_nonce.len = f->scenario == SHORT_NONCE ? 5 : RP_NONCE_LEN;
  ch.server_name = "liar";
  ch.server_mac.data = mac;
  ch.server_mac.len = sizeof mac;
  rp_header_reply(&r, &h, RP_OK, 0);
  write_full(fd, out, rp_frame_build(out, sizeof out, &r, &ch.base));

  struct rp_session_keys keys;
  rp_session_keys_derive(&f->key, cnonce, snonce, &keys);
  assert_int_equal(rp_frame_auth_init(&rx, keys.client_to_server), 0);
  assert_int_equal(rp_frame_auth_init(&tx, keys.server_to_client), 0);
  if (read_frame(fd, &h, buf, sizeof buf, &rx) < 0 || h.op != RP_OP_AUTH)
    goto out;
  rp_random_bytes(token, sizeof token);
  Rampart__Welcome w = RAMPART__WELCOME__INIT;
  w.session_token.data = token;
  w.session_token.len = sizeof token;
  w.page_size = RP_PAGE_SIZE;
  w.capacity_pages = w.free_pages = 100;
  w.lease_seconds = 60;
  rp_header_reply(&r, &h, RP_OK, 0);
  write_full(fd, out, tag_frame(&tx, out, rp_frame_build(out, sizeof out, &r, &w.base)));

  /* The test's one READ (or the client closing). */
  if (read_frame(fd, &h, buf, sizeof buf, &rx) < 0)
    goto out;
  size_t n = 0;
  switch (f->scenario) {
  case HONEST_DRIBBLE:
    rp_header_reply(&r, &h, RP_OK, RP_PAGE_SIZE);
    rp_header_encode(&r, out);
    for (size_t i = 0; i < RP_PAGE_SIZE; i++)
      out[RP_HEADER_SIZE + i] = (uint8_t)(i * 7 + h.slot);
    n = tag_frame(&tx, out, RP_HEADER_SIZE + RP_PAGE_SIZE);
    for (size_t i = 0; i < n; i++)
      write_full(fd, out + i, 1);
    n = 0;
    break;
  case BAD_TAG:
    rp_header_reply(&r, &h, RP_OK, RP_PAGE_SIZE);
    rp_header_encode(&r, out);
    memset(out + RP_HEADER_SIZE, 0x11, RP_PAGE_SIZE);
    n = tag_frame(&tx, out, RP_HEADER_SIZE + RP_PAGE_SIZE);
    out[n - 1] ^= 1;
    break;
  case UNKNOWN_ID:
    rp_header_reply(&r, &h, RP_OK, RP_PAGE_SIZE);
    r.id += 1000;
    rp_header_encode(&r, out);
    n = tag_frame(&tx, out, RP_HEADER_SIZE + RP_PAGE_SIZE);
    break;
  case WRONG_OP:
    rp_header_reply(&r, &h, RP_OK, 0);
    r.op = RP_OP_WRITE;
    rp_header_encode(&r, out);
    n = tag_frame(&tx, out, RP_HEADER_SIZE);
    break;
  case SHORT_PAGE:
    rp_header_reply(&r, &h, RP_OK, 100);
    rp_header_encode(&r, out);
    n = RP_HEADER_SIZE + 100;
    break;
  case HUGE_LENGTH:
    rp_header_reply(&r, &h, RP_OK, 0xFFFFFFFFu);
    rp_header_encode(&r, out);
    n = RP_HEADER_SIZE + 4096;
    break;
  case BAD_PUSH:
    rp_header_reply(&r, &h, RP_OK, RP_PAGE_SIZE);
    r.id = 0;
    rp_header_encode(&r, out);
    n = tag_frame(&tx, out, RP_HEADER_SIZE + RP_PAGE_SIZE);
    break;
  case JUNK_ERROR:
    rp_header_reply(&r, &h, RP_ERR_NOT_FOUND, 7);
    rp_header_encode(&r, out);
    memcpy(out + RP_HEADER_SIZE, "\xff\xff\xff\xff\xff\xff\xff", 7);
    n = tag_frame(&tx, out, RP_HEADER_SIZE + 7);
    break;
  case BIG_ERROR:
    /* Larger than a pooled connection's own buffer, and split so that its first part
     * is left over from one read to the next. */
    rp_header_reply(&r, &h, RP_ERR_NOT_FOUND, RP_MAX_CONTROL_PAYLOAD);
    rp_header_encode(&r, out);
    memset(out + RP_HEADER_SIZE, 0xff, RP_MAX_CONTROL_PAYLOAD);
    n = tag_frame(&tx, out, RP_HEADER_SIZE + RP_MAX_CONTROL_PAYLOAD);
    write_full(fd, out, 5000);
    usleep(50000);
    write_full(fd, out + 5000, n - 5000);
    n = 0;
    break;
  case GARBAGE:
    rp_random_bytes(out, 2000);
    out[0] = 'Z';
    n = 2000;
    break;
  default:
    break;
  }
  if (n)
    write_full(fd, out, n);
  /* Wait for the client to hang up, answering nothing more. */
  while (read(fd, buf, sizeof buf) > 0) {
  }
out:
  rp_frame_auth_free(&rx);
  rp_frame_auth_free(&tx);
  close(fd);
  return NULL;
}

static struct fake *fake_start(enum scenario s, const struct rp_key *key)
{
  struct fake *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->scenario = s;
  f->key = *key;
  f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(f->lfd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(f->lfd, 4), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
  f->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
  return f;
}

static void fake_stop(struct fake *f)
{
  shutdown(f->lfd, SHUT_RDWR);
  pthread_join(f->thread, NULL);
  close(f->lfd);
  free(f);
}

static struct rp_key test_key(void)
{
  struct rp_key k;
  memset(&k, 0, sizeof k);
  k.len = 32;
  memset(k.bytes, 0x42, k.len);
  return k;
}

static struct rp_conn *open_fake(struct fake *f, const struct rp_key *key,
                                 struct rp_conn_pool *pool, struct rp_error *err)
{
  char port[16];
  snprintf(port, sizeof port, "%u", f->port);
  struct rp_conn_options o;
  memset(&o, 0, sizeof o);
  o.host = "127.0.0.1";
  o.port = port;
  o.key = key;
  o.connect_timeout_ms = 3000;
  o.request_timeout_ms = 3000;
  o.pool = pool;
  return rp_conn_open(&o, NULL, err);
}

struct watch {
  int disconnects;
  uint16_t code;
};

static void on_disconnect(struct rp_conn *c, const struct rp_error *why, void *user)
{
  struct watch *w = user;
  w->disconnects++;
  w->code = why->code;
}

/* How the connection is made: on its own, or from a pool (small, reading through the
 * process's scratch buffers), or from a pool with every scratch buffer busy. */
enum conn_kind { OWN_BUFFER, POOLED, POOLED_NO_SCRATCH };

/* Opens, does one READ, returns its status; fills *w. */
static uint16_t one_read_as(enum scenario s, enum conn_kind kind, struct watch *w,
                            bool *still_connected, uint8_t page[RP_PAGE_SIZE])
{
  struct rp_key key = test_key();
  struct fake *f = fake_start(s, &key);
  struct rp_error err;
  struct rp_conn_pool *pool = kind == OWN_BUFFER ? NULL : rp_conn_pool_new(1);
  if (kind != OWN_BUFFER)
    assert_non_null(pool);
  if (kind == POOLED_NO_SCRATCH)
    rp_conn_scratch_hold(true);
  struct rp_conn *c = open_fake(f, &key, pool, &err);
  if (!c)
    fail_msg("handshake with the fake server: %s", err.message);
  memset(w, 0, sizeof *w);
  rp_conn_set_callbacks(c, NULL, on_disconnect, w);
  memset(page, 0xEE, RP_PAGE_SIZE);
  uint16_t status = rp_read_sync(c, 3, page, &err) == 0 ? RP_OK : err.code;
  *still_connected = rp_conn_is_connected(c);
  rp_conn_close(c);
  if (kind == POOLED_NO_SCRATCH)
    rp_conn_scratch_hold(false);
  rp_conn_pool_free(pool);
  fake_stop(f);
  return status;
}

static uint16_t one_read(enum scenario s, struct watch *w, bool *still_connected,
                         uint8_t page[RP_PAGE_SIZE])
{
  return one_read_as(s, OWN_BUFFER, w, still_connected, page);
}

static void test_dribbled_reply_is_reassembled(void **state)
{
  struct watch w;
  bool connected;
  uint8_t page[RP_PAGE_SIZE];
  assert_int_equal(one_read(HONEST_DRIBBLE, &w, &connected, page), RP_OK);
  for (size_t i = 0; i < RP_PAGE_SIZE; i++)
    assert_int_equal(page[i], (uint8_t)(i * 7 + 3));
  assert_true(connected);
  assert_int_equal(w.disconnects, 0);
}

static void test_server_without_key_is_refused(void **state)
{
  struct rp_key key = test_key();
  struct fake *f = fake_start(BAD_SERVER_MAC, &key);
  struct rp_error err;
  assert_null(open_fake(f, &key, NULL, &err));
  assert_int_equal(err.code, RP_ERR_AUTH);
  assert_non_null(strstr(err.message, "key"));
  fake_stop(f);
}

static void test_short_nonce_is_refused(void **state)
{
  struct rp_key key = test_key();
  struct fake *f = fake_start(SHORT_NONCE, &key);
  struct rp_error err;
  assert_null(open_fake(f, &key, NULL, &err));
  assert_int_equal(err.code, RP_ERR_BAD_FRAME);
  fake_stop(f);
}

static void expect_protocol_failure(enum scenario s)
{
  struct watch w;
  bool connected;
  uint8_t page[RP_PAGE_SIZE];
  uint8_t untouched[RP_PAGE_SIZE];
  memset(untouched, 0xEE, sizeof untouched);
  assert_int_equal(one_read(s, &w, &connected, page), RP_ERR_DISCONNECTED);
  assert_false(connected);
  assert_int_equal(w.disconnects, 1);
  assert_int_equal(w.code, RP_ERR_BAD_FRAME);
  /* No byte of a lying reply reached the caller's page. */
  assert_memory_equal(page, untouched, RP_PAGE_SIZE);
}

static void test_unknown_id(void **state)
{
  expect_protocol_failure(UNKNOWN_ID);
}

static void test_wrong_op(void **state)
{
  expect_protocol_failure(WRONG_OP);
}

static void test_short_page(void **state)
{
  expect_protocol_failure(SHORT_PAGE);
}

static void test_huge_length(void **state)
{
  expect_protocol_failure(HUGE_LENGTH);
}

static void test_bad_push(void **state)
{
  expect_protocol_failure(BAD_PUSH);
}

static void test_garbage(void **state)
{
  expect_protocol_failure(GARBAGE);
}

static void test_bad_tag(void **state)
{
  expect_protocol_failure(BAD_TAG);
}

/* A pooled connection keeps only a few KiB of its own: a reply dribbled in, or one
 * larger than that, must come through whole whether it reads through a scratch buffer
 * or, when every one is busy, through its own. */
static void test_pooled_connection_reassembles_frames(void **state)
{
  const enum conn_kind kinds[] = { POOLED, POOLED_NO_SCRATCH };
  for (unsigned k = 0; k < 2; k++) {
    struct watch w;
    bool connected;
    uint8_t page[RP_PAGE_SIZE];
    assert_int_equal(one_read_as(HONEST_DRIBBLE, kinds[k], &w, &connected, page), RP_OK);
    for (size_t i = 0; i < RP_PAGE_SIZE; i++)
      assert_int_equal(page[i], (uint8_t)(i * 7 + 3));
    assert_true(connected);
    assert_int_equal(w.disconnects, 0);
    assert_int_equal(one_read_as(BIG_ERROR, kinds[k], &w, &connected, page),
                     RP_ERR_NOT_FOUND);
    assert_true(connected);
    assert_int_equal(w.disconnects, 0);
  }
}

static void test_undecodable_error_payload(void **state)
{
  struct watch w;
  bool connected;
  uint8_t page[RP_PAGE_SIZE];
  assert_int_equal(one_read(JUNK_ERROR, &w, &connected, page), RP_ERR_NOT_FOUND);
  assert_true(connected);
  assert_int_equal(w.disconnects, 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_dribbled_reply_is_reassembled),
    cmocka_unit_test(test_server_without_key_is_refused),
    cmocka_unit_test(test_short_nonce_is_refused),
    cmocka_unit_test(test_unknown_id),
    cmocka_unit_test(test_wrong_op),
    cmocka_unit_test(test_short_page),
    cmocka_unit_test(test_huge_length),
    cmocka_unit_test(test_bad_push),
    cmocka_unit_test(test_garbage),
    cmocka_unit_test(test_bad_tag),
    cmocka_unit_test(test_undecodable_error_payload),
    cmocka_unit_test(test_pooled_connection_reassembles_frames),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
