/* Connection floods against a real rampartd (docs/security.md): an attacker who can reach the
 * port but holds no key must not be able to keep a client with the key out, nor make
 * the server hold memory for it.
 *
 * - 1,000 idle and 1,000 garbage connections from 127.0.0.2 while an authenticated
 *   client on 127.0.0.1 writes and reads pages (every byte checked), and a new client
 *   connects in the middle of the flood; the flood is refused with an Error frame that
 *   says why.
 * - A handshake that stalls is closed after the 2 s handshake deadline.
 * - A reply buffer that grew to megabytes during a burst goes back to its small size
 *   (the server says so in its log, and its resident memory falls back).
 * - Past --max-connections authenticated connections, or --max-sessions-per-key
 *   sessions, a client is refused after AUTH with a sentence naming the limit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "client.h"
#include "message.h"
#include "page_io.h"
#include "frame_auth.h"
#include "server_process.h"

#define FLOOD_IDLE 1000
#define FLOOD_GARBAGE 1000
#define GOOD_PAGES 512

struct fixture {
  char dir[256];
  char key_path[512];
  struct rp_key key;
  struct rp_test_server server;
};

static double now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  nanosleep(&ts, NULL);
}

/* Two thousand sockets on our side, and as many on the server's (it inherits this). */
static void raise_nofile(void)
{
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rlim_t want = 16384;
  if (rl.rlim_max < want) {
    struct rlimit hard = { want, want };
    if (setrlimit(RLIMIT_NOFILE, &hard) == 0)
      return;
    want = rl.rlim_max;
  }
  rl.rlim_cur = want;
  setrlimit(RLIMIT_NOFILE, &rl);
}

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  raise_nofile();
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0 ||
      rp_test_write_key(f.dir, "key", f.key_path, sizeof f.key_path, &f.key) < 0)
    return -1;
  /* This host's own memory pressure must not refuse our reservations. */
  char psi[600];
  snprintf(psi, sizeof psi, "%s/psi", f.dir);
  if (rp_test_write_file(psi, "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n") < 0)
    return -1;
  const char *args[] = { "--memory",        "64M", "--key", f.key_path, "--verbose",
                         "--pressure-file", psi,   NULL };
  if (rp_test_server_start(&f.server, f.dir, args) < 0)
    return -1;
  *state = &f;
  return 0;
}

static int teardown(void **state)
{
  struct fixture *f = *state;
  if (!f)
    return 0;
  int rc = rp_test_server_stop_clean(&f->server);
  rp_test_tmpdir_remove(f->dir);
  return rc;
}

/* A TCP connection to the server from source address `src` (blocking), or -1. */
static int connect_from(const struct fixture *f, const char *src)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a = { .sin_family = AF_INET };
  inet_pton(AF_INET, src, &a.sin_addr);
  struct sockaddr_in to = { .sin_family = AF_INET,
                            .sin_port = htons((uint16_t)atoi(f->server.port)) };
  inet_pton(AF_INET, f->server.host, &to.sin_addr);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
      connect(fd, (struct sockaddr *)&to, sizeof to) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* ---- the flood ---------------------------------------------------------------- */

struct flood {
  const struct fixture *f;
  int fds[FLOOD_IDLE + FLOOD_GARBAGE];
  int opened;
  atomic_bool done;
};

static void *flood_main(void *arg)
{
  struct flood *fl = arg;
  uint8_t junk[64];
  for (int i = 0; i < FLOOD_IDLE + FLOOD_GARBAGE; i++) {
    int fd = connect_from(fl->f, "127.0.0.2");
    fl->fds[i] = fd;
    if (fd < 0)
      continue;
    fl->opened++;
    if (i % 2 == 1) { /* every other one sends garbage and stays open */
      rp_random_bytes(junk, sizeof junk);
      junk[0] = 'X';
      ssize_t ignored = send(fd, junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)ignored;
    }
  }
  atomic_store(&fl->done, true);
  return NULL;
}

/* What the server sent on fd before closing it: the Error frame's status and text. */
static bool read_refusal(int fd, uint16_t *status, char *text, size_t textlen)
{
  uint8_t buf[1024];
  size_t got = 0;
  while (got < sizeof buf) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, 0) <= 0)
      break;
    ssize_t n = recv(fd, buf + got, sizeof buf - got, MSG_DONTWAIT);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  struct rp_header h;
  if (got < RP_HEADER_SIZE || rp_header_decode(buf, RP_FROM_SERVER, &h, NULL) != RP_OK ||
      got < RP_HEADER_SIZE + h.length || h.status == RP_OK)
    return false;
  Rampart__Error *e = rampart__error__unpack(NULL, h.length, buf + RP_HEADER_SIZE);
  if (!e)
    return false;
  *status = h.status;
  snprintf(text, textlen, "%s", e->message ? e->message : "");
  rampart__error__free_unpacked(e, NULL);
  return true;
}

static struct rp_conn *connect_good(const struct fixture *f, struct rp_error *err)
{
  struct rp_conn_options o = {
    .host = f->server.host, .port = f->server.port, .key = &f->key, .client_name = "good"
  };
  return rp_conn_open(&o, NULL, err);
}

static void test_flood_does_not_keep_a_keyed_client_out(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  struct rp_conn *good = connect_good(f, &err);
  if (!good)
    fail_msg("authenticated client: %s", err.message);
  assert_int_equal(rp_reserve_sync(good, GOOD_PAGES, NULL, NULL, &err), 0);

  static struct flood fl;
  memset(&fl, 0, sizeof fl);
  fl.f = f;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, flood_main, &fl), 0);

  uint64_t rounds = 0, pages = 0, failed = 0, mismatched = 0;
  bool newcomer_ok = false, newcomer_tried = false;
  char newcomer_err[400] = "";
  double t0 = now_s();
  while (!atomic_load(&fl.done) || rounds < 4) {
    struct rp_test_io_result res;
    uint64_t seed = 77 + rounds;
    rp_test_pages(good, RP_OP_WRITE, 0, GOOD_PAGES, 32, seed, &res);
    failed += res.failed;
    rp_test_pages(good, RP_OP_READ, 0, GOOD_PAGES, 32, seed, &res);
    failed += res.failed;
    mismatched += res.mismatched;
    pages += 2 * GOOD_PAGES;
    rounds++;
    if (!newcomer_tried && atomic_load(&fl.done)) {
      /* A client that connects now, with the whole flood still open, gets in too. */
      newcomer_tried = true;
      struct rp_conn *late = connect_good(f, &err);
      if (late) {
        newcomer_ok = rp_ping_sync(late, &err) == 0;
        rp_conn_close(late);
      }
      if (!newcomer_ok)
        snprintf(newcomer_err, sizeof newcomer_err, "%s", err.message);
    }
    if (now_s() - t0 > 120)
      break;
  }
  pthread_join(th, NULL);
  fprintf(stderr,
          "flood: %d of %d connections opened from 127.0.0.2 in %.1f s; the keyed "
          "client moved %llu pages in %llu rounds: %llu failed, %llu differed; a newcomer "
          "mid-flood %s%s\n",
          fl.opened, FLOOD_IDLE + FLOOD_GARBAGE, now_s() - t0, (unsigned long long)pages,
          (unsigned long long)rounds, (unsigned long long)failed,
          (unsigned long long)mismatched,
          newcomer_ok ? "got in" : "was refused: ", newcomer_err);

  /* Idle connections beyond the per-address budget were refused, in words. */
  int refused = 0;
  uint16_t status = 0;
  char text[512] = "";
  for (int i = 0; i < FLOOD_IDLE + FLOOD_GARBAGE; i += 2) {
    uint16_t st;
    char t[512];
    if (fl.fds[i] >= 0 && read_refusal(fl.fds[i], &st, t, sizeof t)) {
      if (refused++ == 0) {
        status = st;
        snprintf(text, sizeof text, "%s", t);
      }
    }
  }
  fprintf(stderr,
          "flood: %d idle connections were refused with an Error frame; the "
          "first said (status %u): %s\n",
          refused, status, text);
  for (int i = 0; i < FLOOD_IDLE + FLOOD_GARBAGE; i++)
    if (fl.fds[i] >= 0)
      close(fl.fds[i]);

  assert_true(fl.opened > FLOOD_IDLE);
  assert_int_equal(failed, 0);
  assert_int_equal(mismatched, 0);
  assert_true(rp_conn_is_connected(good));
  assert_true(newcomer_ok);
  assert_true(refused > FLOOD_IDLE / 2);
  assert_int_equal(status, RP_ERR_NO_SPACE);
  assert_non_null(strstr(text, "unauthenticated"));
  assert_int_equal(rp_goodbye_sync(good, &err), 0);
  rp_conn_close(good);
}

/* ---- the handshake deadline ------------------------------------------------------ */

/* Seconds until the server closes fd, or -1 after limit_s. */
static double seconds_until_closed(int fd, double limit_s)
{
  double t0 = now_s();
  for (;;) {
    double left = limit_s - (now_s() - t0);
    if (left <= 0)
      return -1;
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
      continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
      return now_s() - t0;
  }
}

static void test_stalled_handshake_closed_after_deadline(void **state)
{
  struct fixture *f = *state;
  /* One connection says nothing; then one sends half a HELLO header and stops. */
  int quiet = connect_from(f, "127.0.0.1");
  assert_true(quiet >= 0);
  uint8_t hdr[RP_HEADER_SIZE];
  struct rp_header h = rp_request_header(RP_OP_HELLO, 1);
  h.length = 80;
  rp_header_encode(&h, hdr);
  double a = seconds_until_closed(quiet, 15);
  close(quiet);
  int half = connect_from(f, "127.0.0.1");
  assert_true(half >= 0);
  assert_int_equal(send(half, hdr, 16, MSG_NOSIGNAL), 16);
  double b = seconds_until_closed(half, 15);
  fprintf(stderr,
          "stalled handshakes closed after %.2f s (silent) and %.2f s (half a "
          "header)\n",
          a, b);
  close(half);
  assert_true(a >= 1.5 && a <= 4.0);
  assert_true(b >= 1.5 && b <= 4.0);
}

/* ---- the reply buffer after a burst ------------------------------------------------ */

static void send_all(int fd, const void *buf, size_t len)
{
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    assert_true(n > 0);
    p += n;
    len -= (size_t)n;
  }
}

static void recv_all(int fd, void *buf, size_t len)
{
  uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    assert_true(n > 0);
    p += n;
    len -= (size_t)n;
  }
}

/* A raw protocol-v2 connection: the socket and, once AUTH is sent, each direction's
 * frame authentication (inactive before). */
struct raw_conn {
  int fd;
  struct rp_frame_auth tx, rx;
};

/* Sends one frame (header + payload), tagged once tx is keyed. */
static void raw_send(struct raw_conn *rc, const uint8_t *frame, size_t n)
{
  send_all(rc->fd, frame, n);
  if (rp_frame_auth_active(&rc->tx)) {
    uint8_t tag[RP_TAG_LEN];
    assert_int_equal(
      rp_frame_tag(&rc->tx, frame, frame + RP_HEADER_SIZE, n - RP_HEADER_SIZE, tag), 0);
    send_all(rc->fd, tag, sizeof tag);
  }
}

/* Receives one frame into hb/payload (payload_cap bytes), checking its tag once rx is
 * keyed; returns the payload length. */
static size_t raw_recv(struct raw_conn *rc, struct rp_header *h, uint8_t hb[RP_HEADER_SIZE],
                       uint8_t *payload, size_t payload_cap)
{
  recv_all(rc->fd, hb, RP_HEADER_SIZE);
  assert_int_equal(rp_header_decode(hb, RP_FROM_SERVER, h, NULL), RP_OK);
  assert_true(h->length <= payload_cap);
  recv_all(rc->fd, payload, h->length);
  if (rp_frame_auth_active(&rc->rx)) {
    uint8_t tag[RP_TAG_LEN];
    recv_all(rc->fd, tag, sizeof tag);
    assert_true(rp_frame_verify(&rc->rx, hb, payload, h->length, tag));
  }
  return h->length;
}

/* Sends one control request and returns its reply's payload (caller frees). */
static uint8_t *exchange(struct raw_conn *rc, enum rp_op op, uint64_t id,
                         const ProtobufCMessage *msg, struct rp_header *reply)
{
  uint8_t frame[RP_MAX_CONTROL_FRAME];
  struct rp_header h = rp_request_header(op, id);
  size_t n = rp_frame_build(frame, sizeof frame, &h, msg);
  assert_true(n > 0);
  raw_send(rc, frame, n);
  uint8_t hb[RP_HEADER_SIZE];
  uint8_t *p = malloc(RP_MAX_CONTROL_FRAME);
  assert_non_null(p);
  raw_recv(rc, reply, hb, p, RP_MAX_CONTROL_FRAME);
  assert_int_equal(reply->status, RP_OK);
  return p;
}

/* A raw connection logged in with the key (protocol v2: the server proves the key in
 * its Challenge, every frame from AUTH on is tagged), holding one page at slot 0. */
static struct raw_conn raw_login(const struct fixture *f)
{
  struct raw_conn rc = { .fd = connect_from(f, "127.0.0.1") };
  assert_true(rc.fd >= 0);
  uint8_t cn[RP_NONCE_LEN];
  rp_random_bytes(cn, sizeof cn);
  Rampart__Hello hello = RAMPART__HELLO__INIT;
  hello.magic = RP_HELLO_MAGIC;
  hello.version = RP_PROTOCOL_VERSION;
  hello.client_nonce.data = cn;
  hello.client_nonce.len = sizeof cn;
  hello.client_name = "burst";
  struct rp_header rh;
  uint8_t *p = exchange(&rc, RP_OP_HELLO, 1, &hello.base, &rh);
  Rampart__Challenge *ch = rampart__challenge__unpack(NULL, rh.length, p);
  assert_non_null(ch);
  assert_int_equal(ch->server_nonce.len, RP_NONCE_LEN);
  uint8_t sn[RP_NONCE_LEN];
  memcpy(sn, ch->server_nonce.data, sizeof sn);
  uint8_t mac[RP_MAC_LEN];
  rp_auth_client_mac(&f->key, sn, cn, mac);
  rampart__challenge__free_unpacked(ch, NULL);
  free(p);
  struct rp_session_keys keys;
  rp_session_keys_derive(&f->key, cn, sn, &keys);
  assert_int_equal(rp_frame_auth_init(&rc.tx, keys.client_to_server), 0);
  assert_int_equal(rp_frame_auth_init(&rc.rx, keys.server_to_client), 0);
  rp_session_keys_wipe(&keys);
  Rampart__Auth auth = RAMPART__AUTH__INIT;
  auth.client_mac.data = mac;
  auth.client_mac.len = sizeof mac;
  free(exchange(&rc, RP_OP_AUTH, 2, &auth.base, &rh));
  Rampart__Reserve res = RAMPART__RESERVE__INIT;
  res.pages = 1;
  free(exchange(&rc, RP_OP_RESERVE, 3, &res.base, &rh));
  uint8_t frame[RP_HEADER_SIZE + RP_PAGE_SIZE];
  struct rp_header w = rp_request_header(RP_OP_WRITE, 4);
  w.length = RP_PAGE_SIZE;
  rp_header_encode(&w, frame);
  rp_test_fill_page(frame + RP_HEADER_SIZE, 5, 0);
  raw_send(&rc, frame, sizeof frame);
  uint8_t hb[RP_HEADER_SIZE];
  raw_recv(&rc, &rh, hb, frame, sizeof frame);
  assert_int_equal(rh.status, RP_OK);
  return rc;
}

static void raw_close(struct raw_conn *rc)
{
  close(rc->fd);
  rp_frame_auth_free(&rc->tx);
  rp_frame_auth_free(&rc->rx);
}

/* The server's resident memory in KiB (VmRSS). */
static long server_rss_kib(const struct fixture *f)
{
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%ld/status", (long)f->server.pid);
  FILE *fp = fopen(path, "re");
  long kib = -1;
  while (fp && fgets(line, sizeof line, fp))
    if (sscanf(line, "VmRSS: %ld", &kib) == 1)
      break;
  if (fp)
    fclose(fp);
  return kib;
}

static bool log_mentions(const struct fixture *f, const char *needle)
{
  FILE *fp = fopen(f->server.stderr_path, "re");
  char line[1024];
  bool found = false;
  while (fp && !found && fgets(line, sizeof line, fp))
    found = strstr(line, needle) != NULL;
  if (fp)
    fclose(fp);
  return found;
}

#define BURST_READS 3000u

static void test_reply_buffer_shrinks_after_burst(void **state)
{
  struct fixture *f = *state;
  struct raw_conn rc = raw_login(f);
  long before = server_rss_kib(f);

  /* 3000 READs sent at once while we read none of the 12 MiB of replies: the server
   * queues them until its reply buffer passes its high-water mark. */
  static uint8_t reqs[BURST_READS * (RP_HEADER_SIZE + RP_TAG_LEN)];
  for (uint32_t i = 0; i < BURST_READS; i++) {
    uint8_t *at = reqs + (size_t)i * (RP_HEADER_SIZE + RP_TAG_LEN);
    struct rp_header h = rp_request_header(RP_OP_READ, 100 + i);
    rp_header_encode(&h, at);
    assert_int_equal(rp_frame_tag(&rc.tx, at, NULL, 0, at + RP_HEADER_SIZE), 0);
  }
  send_all(rc.fd, reqs, sizeof reqs);
  sleep_ms(1000);
  long peak = server_rss_kib(f);

  static uint8_t reply[RP_PAGE_SIZE];
  uint8_t hb[RP_HEADER_SIZE];
  uint8_t expect[RP_PAGE_SIZE];
  rp_test_fill_page(expect, 5, 0);
  for (uint32_t i = 0; i < BURST_READS; i++) {
    struct rp_header h;
    assert_int_equal(raw_recv(&rc, &h, hb, reply, sizeof reply), RP_PAGE_SIZE);
    assert_int_equal(h.status, RP_OK);
    assert_int_equal(h.id, 100 + i);
    assert_memory_equal(reply, expect, RP_PAGE_SIZE);
  }
  long after = -1;
  bool logged = false;
  for (int i = 0; i < 50 && !logged; i++) {
    sleep_ms(100);
    logged = log_mentions(f, "reply buffer back to");
  }
  after = server_rss_kib(f);
  fprintf(stderr,
          "server RSS: %ld KiB before the burst, %ld KiB with replies queued, %ld "
          "KiB after they were read; shrink logged: %s\n",
          before, peak, after, logged ? "yes" : "no");
  raw_close(&rc);
  assert_true(logged);
  assert_true(peak - before >= 6 * 1024); /* the burst did fill the buffer */
  /* The allocator is only predictable without the sanitizer's quarantine. */
  const char *asan = getenv("RAMPART_ASAN_RUNTIME");
  if (!asan || !asan[0])
    assert_true(after - before <= 2 * 1024);
}

/* ---- limits on authenticated connections and sessions ------------------------------ */

static void test_connection_and_session_limits(void **state)
{
  struct fixture *f = *state;
  struct rp_test_server small;
  memset(&small, 0, sizeof small);
  const char *args[] = { "--memory",
                         "16M",
                         "--key",
                         f->key_path,
                         "--max-connections",
                         "2",
                         "--max-sessions-per-key",
                         "3",
                         NULL };
  assert_int_equal(rp_test_server_start(&small, f->dir, args), 0);
  struct rp_error err;
  struct rp_session_info info;
  struct rp_conn *a = rp_test_connect(&small, &f->key, NULL, &info, &err);
  struct rp_conn *b = rp_test_connect(&small, &f->key, NULL, NULL, &err);
  assert_non_null(a);
  assert_non_null(b);
  /* A third authenticated connection is one past --max-connections. */
  struct rp_conn *c = rp_test_connect(&small, &f->key, NULL, NULL, &err);
  fprintf(stderr, "third connection: %s\n", c ? "accepted" : err.message);
  assert_null(c);
  assert_int_equal(err.code, RP_ERR_NO_SPACE);
  assert_non_null(strstr(err.message, "--max-connections"));
  /* a's session resumed from a new connection displaces a, so it needs no new room. */
  uint8_t token[RP_TOKEN_LEN];
  memcpy(token, info.token, sizeof token);
  struct rp_session_info again;
  struct rp_conn *a2 = rp_test_connect(&small, &f->key, token, &again, &err);
  if (!a2)
    fail_msg("resume at the connection limit: %s", err.message);
  assert_true(again.resumed);
  rp_conn_close(a);
  /* Sessions: a's (resumed by a2) and b's are alive; dropping b leaves its session in
   * its lease, so after one more new session the key holds 3, its limit. */
  rp_conn_close(b);
  sleep_ms(200);
  struct rp_conn *d = rp_test_connect(&small, &f->key, NULL, NULL, &err);
  assert_non_null(d);
  rp_conn_close(d);
  sleep_ms(200);
  struct rp_conn *e = rp_test_connect(&small, &f->key, NULL, NULL, &err);
  fprintf(stderr, "fourth session: %s\n", e ? "accepted" : err.message);
  assert_null(e);
  assert_int_equal(err.code, RP_ERR_NO_SPACE);
  assert_non_null(strstr(err.message, "--max-sessions-per-key"));
  assert_int_equal(rp_ping_sync(a2, &err), 0);
  rp_conn_close(a2);
  assert_int_equal(rp_test_server_stop_clean(&small), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_flood_does_not_keep_a_keyed_client_out),
    cmocka_unit_test(test_stalled_handshake_closed_after_deadline),
    cmocka_unit_test(test_reply_buffer_shrinks_after_burst),
    cmocka_unit_test(test_connection_and_session_limits),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
