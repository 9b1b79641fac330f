/* Hostile bytes on raw sockets: random noise, a truncated frame, a header claiming
 * 4 GiB, an unknown op, a HELLO followed by a half frame and a vanishing peer. Each
 * time the server counts a protocol error, drops that connection, and a legitimate
 * client on another connection keeps writing and reading correctly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "message.h"
#include "page_io.h"
#include "server_process.h"

struct fixture {
  char dir[256];
  struct rp_test_server server;
  struct rp_conn *good;
  uint64_t round;
};

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0)
    return -1;
  /* test_many_hostile_connections_at_once opens 32 from one address: room for all of
   * them, so each one's garbage is read and counted (test_server_flood covers the
   * default budget of 8, past which connections are refused unread). */
  const char *args[] = { "--memory", "32M", "--max-unauthenticated-per-address", "64", NULL };
  if (rp_test_server_start(&f.server, f.dir, args) < 0)
    return -1;
  struct rp_error err;
  f.good = rp_test_connect(&f.server, NULL, NULL, NULL, &err);
  if (!f.good || rp_reserve_sync(f.good, 1000, NULL, NULL, &err) < 0) {
    fprintf(stderr, "legitimate client: %s\n", err.message);
    return -1;
  }
  *state = &f;
  return 0;
}

static int teardown(void **state)
{
  struct fixture *f = *state;
  if (!f)
    return 0;
  rp_conn_close(f->good);
  int status = rp_test_server_stop(&f->server);
  rp_test_tmpdir_remove(f->dir);
  return status == 0 ? 0 : -1;
}

static uint64_t protocol_errors(struct fixture *f)
{
  struct rp_server_stat st;
  struct rp_error err;
  if (rp_stat_sync(f->good, &st, &err) < 0)
    fail_msg("stat on the legitimate connection: %s", err.message);
  return st.errors_protocol;
}

static void send_all(int fd, const void *buf, size_t len)
{
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return; /* the server may already have closed: that is allowed */
    p += n;
    len -= (size_t)n;
  }
}

/* True when the server closes fd within timeout_ms (EOF or reset), draining any reply. */
static bool closed_by_server(int fd, int timeout_ms)
{
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long spent = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
    if (spent >= timeout_ms)
      return false;
    if (poll(&p, 1, (int)(timeout_ms - spent)) <= 0)
      return false;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
      return true;
  }
}

/* The server counted one more protocol error and the legitimate client still works. */
static void expect_survived(struct fixture *f, uint64_t before, uint64_t at_least)
{
  uint64_t now = before;
  for (int i = 0; i < 300 && now < before + at_least; i++) {
    struct timespec ts = { 0, 10 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    now = protocol_errors(f);
  }
  if (now < before + at_least)
    fail_msg("stat errors_protocol went from %llu to %llu, expected at least +%llu: the "
             "server must count every malformed or cut-off frame as a protocol error",
             (unsigned long long)before, (unsigned long long)now,
             (unsigned long long)at_least);
  struct rp_test_io_result res;
  uint64_t seed = 1000 + f->round++;
  assert_int_equal(rp_test_pages(f->good, RP_OP_WRITE, 0, 1000, 32, seed, &res), 0);
  assert_int_equal(rp_test_pages(f->good, RP_OP_READ, 0, 1000, 32, seed, &res), 0);
  assert_int_equal(res.mismatched, 0);
  assert_true(rp_conn_is_connected(f->good));
}

static void put_header(uint8_t *out, uint8_t op, uint32_t length, uint64_t id)
{
  struct rp_header h = rp_request_header((enum rp_op)op, id);
  h.length = length;
  rp_header_encode(&h, out);
}

static void test_random_bytes(void **state)
{
  struct fixture *f = *state;
  uint64_t before = protocol_errors(f);
  int fd = rp_test_raw_connect(&f->server);
  assert_true(fd >= 0);
  uint8_t junk[8192];
  assert_int_equal(rp_random_bytes(junk, sizeof junk), 0);
  junk[0] = 'X'; /* never the frame magic by chance */
  send_all(fd, junk, sizeof junk);
  assert_true(closed_by_server(fd, 5000));
  close(fd);
  expect_survived(f, before, 1);
}

static void test_truncated_frame(void **state)
{
  struct fixture *f = *state;
  uint64_t before = protocol_errors(f);
  int fd = rp_test_raw_connect(&f->server);
  assert_true(fd >= 0);
  uint8_t buf[RP_HEADER_SIZE + 20];
  put_header(buf, RP_OP_HELLO, 100, 1);
  memset(buf + RP_HEADER_SIZE, 0x08, 20);
  send_all(fd, buf, sizeof buf);
  close(fd); /* 80 bytes of the frame never come */
  expect_survived(f, before, 1);
}

static void test_length_four_gigabytes(void **state)
{
  struct fixture *f = *state;
  uint64_t before = protocol_errors(f);
  int fd = rp_test_raw_connect(&f->server);
  assert_true(fd >= 0);
  uint8_t buf[RP_HEADER_SIZE + 64];
  put_header(buf, RP_OP_HELLO, 0xFFFFFFFFu, 1);
  memset(buf + RP_HEADER_SIZE, 0x41, 64);
  send_all(fd, buf, sizeof buf);
  assert_true(closed_by_server(fd, 5000));
  close(fd);
  /* The same after a WRITE header: a page op may not claim more than a page either. */
  fd = rp_test_raw_connect(&f->server);
  assert_true(fd >= 0);
  put_header(buf, RP_OP_WRITE, 0xFFFFFFFFu, 1);
  send_all(fd, buf, sizeof buf);
  assert_true(closed_by_server(fd, 5000));
  close(fd);
  expect_survived(f, before, 2);
}

static void test_unknown_op(void **state)
{
  struct fixture *f = *state;
  uint64_t before = protocol_errors(f);
  int fd = rp_test_raw_connect(&f->server);
  assert_true(fd >= 0);
  uint8_t buf[RP_HEADER_SIZE];
  put_header(buf, 99, 0, 1);
  send_all(fd, buf, sizeof buf);
  assert_true(closed_by_server(fd, 5000));
  close(fd);
  expect_survived(f, before, 1);
}

static void test_hello_then_vanish_mid_frame(void **state)
{
  struct fixture *f = *state;
  uint64_t before = protocol_errors(f);
  int fd = rp_test_raw_connect(&f->server);
  assert_true(fd >= 0);
  uint8_t nonce[RP_NONCE_LEN];
  assert_int_equal(rp_random_bytes(nonce, sizeof nonce), 0);
  Rampart__Hello hello = RAMPART__HELLO__INIT;
  hello.magic = RP_HELLO_MAGIC;
  hello.version = RP_PROTOCOL_VERSION;
  hello.client_nonce.data = nonce;
  hello.client_nonce.len = sizeof nonce;
  hello.client_name = "vanishing";
  static uint8_t frame[RP_MAX_CONTROL_FRAME];
  struct rp_header h = rp_request_header(RP_OP_HELLO, 1);
  size_t len = rp_frame_build(frame, sizeof frame, &h, &hello.base);
  assert_true(len > RP_HEADER_SIZE);
  send_all(fd, frame, len);

  /* The server answers with a Challenge. */
  uint8_t hb[RP_HEADER_SIZE];
  size_t got = 0;
  while (got < sizeof hb) {
    ssize_t n = recv(fd, hb + got, sizeof hb - got, 0);
    assert_true(n > 0);
    got += (size_t)n;
  }
  struct rp_header reply;
  assert_int_equal(rp_header_decode(hb, RP_FROM_SERVER, &reply, NULL), RP_OK);
  assert_int_equal(reply.op, RP_OP_HELLO);
  assert_int_equal(reply.status, RP_OK);
  assert_int_equal(reply.id, 1);

  /* Half of an AUTH header, then gone. */
  put_header(frame, RP_OP_AUTH, 34, 2);
  send_all(fd, frame, RP_HEADER_SIZE / 2);
  close(fd);
  expect_survived(f, before, 1);
}

static void test_many_hostile_connections_at_once(void **state)
{
  struct fixture *f = *state;
  uint64_t before = protocol_errors(f);
  enum { N = 32 };
  int fds[N];
  for (int i = 0; i < N; i++) {
    fds[i] = rp_test_raw_connect(&f->server);
    assert_true(fds[i] >= 0);
  }
  for (int i = 0; i < N; i++) {
    uint8_t junk[512];
    assert_int_equal(rp_random_bytes(junk, sizeof junk), 0);
    junk[0] = 'Y';
    send_all(fds[i], junk, sizeof junk);
  }
  for (int i = 0; i < N; i++) {
    assert_true(closed_by_server(fds[i], 5000));
    close(fds[i]);
  }
  expect_survived(f, before, N);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_random_bytes),
    cmocka_unit_test(test_truncated_frame),
    cmocka_unit_test(test_length_four_gigabytes),
    cmocka_unit_test(test_unknown_op),
    cmocka_unit_test(test_hello_then_vanish_mid_frame),
    cmocka_unit_test(test_many_hostile_connections_at_once),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
