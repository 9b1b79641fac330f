/* Every frame after the handshake is authenticated (docs/security.md, docs/protocol.md).
 *
 * An attacker who can inject bytes into the TCP stream between a real client and a
 * real rampartd, but does not hold the cluster key: a relay thread here sits between
 * them, forwards everything, records the client's frames, and injects what the test
 * hands it between two of the client's frames. A forged GOODBYE, READ, WRITE and FREE
 * and a replayed WRITE are each refused: the server drops the connection (and logs
 * why), the session survives, the client resumes it on a new connection, and every page
 * reads back as the client last wrote it.
 *
 * A fake server that does not hold the key (it answers HELLO with a Challenge whose MAC
 * is wrong) never receives the session's resume token: the client refuses it with
 * RP_ERR_AUTH and a sentence before sending anything more.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "fd_io.h"
#include "message.h"
#include "server_process.h"
#include "wire.h"

#if __has_include("frame_auth.h")
#include "frame_auth.h"
#define TAG_LEN RP_TAG_LEN
#else
#define TAG_LEN 0u /* protocol version 1: no tags (the test then shows the attacks work) */
#endif

#define NPAGES 16u
#define MAX_RECORDED 64u

/* ---- the relay: client <-> relay <-> rampartd ---- */

struct recorded {
  uint8_t op;
  uint64_t slot;
  size_t len;
  uint8_t bytes[RP_HEADER_SIZE + RP_PAGE_SIZE + 16];
};

struct relay {
  int lfd;
  char port[16];
  const struct rp_test_server *srv;
  pthread_t th;
  int wake[2];
  pthread_mutex_t mu;
  uint8_t inject[RP_HEADER_SIZE + RP_PAGE_SIZE + 64];
  size_t inject_len;     /* > 0: waiting to be injected */
  unsigned sessions;     /* connections relayed so far */
  bool alter_next_write; /* set the count field of the client's next WRITE header */
  bool stop;
  struct recorded rec[MAX_RECORDED];
  unsigned nrec;
};

/* One relayed connection. Client-to-server bytes are cut into frames (the first, HELLO,
 * untagged; every later one followed by its tag) so injections land between two whole
 * frames, as an attacker splicing the stream would place them. */
static void relay_one(struct relay *r, int cfd)
{
  int sfd = rp_test_raw_connect(r->srv);
  if (sfd < 0) {
    close(cfd);
    return;
  }
  static uint8_t cbuf[1 << 20];
  size_t clen = 0;
  unsigned frames = 0;
  for (;;) {
    struct pollfd p[3] = { { .fd = cfd, .events = POLLIN },
                           { .fd = sfd, .events = POLLIN },
                           { .fd = r->wake[0], .events = POLLIN } };
    if (poll(p, 3, 200) < 0 && errno != EINTR)
      break;
    pthread_mutex_lock(&r->mu);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    if (stop)
      break;
    if (p[2].revents & POLLIN) {
      char c;
      ssize_t ignored = read(r->wake[0], &c, 1);
      (void)ignored;
    }
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      uint8_t b[65536];
      ssize_t n = recv(sfd, b, sizeof b, 0);
      if (n <= 0 || rp_send_full(cfd, b, (size_t)n) < 0)
        break;
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = recv(cfd, cbuf + clen, sizeof cbuf - clen, 0);
      if (n <= 0)
        break;
      clen += (size_t)n;
      for (;;) {
        if (clen < RP_HEADER_SIZE)
          break;
        struct rp_header h;
        if (rp_header_decode(cbuf, RP_FROM_CLIENT, &h, NULL) != RP_OK)
          fail_msg("relay: the client sent a bad frame");
        size_t total = RP_HEADER_SIZE + h.length + (frames > 0 ? TAG_LEN : 0);
        if (clen < total)
          break;
        pthread_mutex_lock(&r->mu);
        if (h.op == RP_OP_WRITE && r->nrec < MAX_RECORDED) {
          struct recorded *rec = &r->rec[r->nrec++];
          rec->op = h.op;
          rec->slot = h.slot;
          rec->len = total;
          memcpy(rec->bytes, cbuf, total);
        }
        if (h.op == RP_OP_WRITE && r->alter_next_write) {
          /* an attacker flips one header byte of a frame in flight: count = 1, which
           * no WRITE may carry */
          cbuf[12] = 1;
          r->alter_next_write = false;
        }
        pthread_mutex_unlock(&r->mu);
        if (rp_send_full(sfd, cbuf, total) < 0)
          goto out;
        frames++;
        memmove(cbuf, cbuf + total, clen - total);
        clen -= total;
      }
    }
    /* Inject only between whole client frames. */
    pthread_mutex_lock(&r->mu);
    if (r->inject_len > 0 && clen == 0) {
      bool ok = rp_send_full(sfd, r->inject, r->inject_len) == 0;
      r->inject_len = 0;
      pthread_mutex_unlock(&r->mu);
      if (!ok)
        break;
    } else {
      pthread_mutex_unlock(&r->mu);
    }
  }
out:
  close(sfd);
  close(cfd);
}

static void *relay_main(void *arg)
{
  struct relay *r = arg;
  for (;;) {
    struct pollfd p = { .fd = r->lfd, .events = POLLIN };
    int n = poll(&p, 1, 100);
    pthread_mutex_lock(&r->mu);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    if (stop)
      return NULL;
    if (n <= 0)
      continue;
    int cfd = accept(r->lfd, NULL, NULL);
    if (cfd < 0)
      continue;
    pthread_mutex_lock(&r->mu);
    r->sessions++;
    pthread_mutex_unlock(&r->mu);
    relay_one(r, cfd);
  }
}

static int listen_loopback(char port[16])
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t alen = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4) < 0 ||
      getsockname(fd, (struct sockaddr *)&a, &alen) < 0)
    return -1;
  snprintf(port, 16, "%u", ntohs(a.sin_port));
  return fd;
}

static void relay_start(struct relay *r, const struct rp_test_server *srv)
{
  memset(r, 0, sizeof *r);
  r->srv = srv;
  r->lfd = listen_loopback(r->port);
  assert_true(r->lfd >= 0);
  assert_int_equal(pipe(r->wake), 0);
  pthread_mutex_init(&r->mu, NULL);
  assert_int_equal(pthread_create(&r->th, NULL, relay_main, r), 0);
}

static void relay_stop(struct relay *r)
{
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_mutex_unlock(&r->mu);
  ssize_t ignored = write(r->wake[1], "x", 1);
  (void)ignored;
  pthread_join(r->th, NULL);
  close(r->lfd);
  close(r->wake[0]);
  close(r->wake[1]);
  pthread_mutex_destroy(&r->mu);
}

static void relay_inject(struct relay *r, const uint8_t *bytes, size_t len)
{
  pthread_mutex_lock(&r->mu);
  assert_true(len <= sizeof r->inject);
  memcpy(r->inject, bytes, len);
  r->inject_len = len;
  pthread_mutex_unlock(&r->mu);
  ssize_t ignored = write(r->wake[1], "x", 1);
  (void)ignored;
}

/* ---- fixture ---- */

struct fixture {
  char dir[256];
  char key_path[512];
  struct rp_key key;
  struct rp_test_server srv;
  struct rp_test_server via; /* the relay's address, for rp_test_connect */
  struct relay relay;
  uint8_t token[RP_TOKEN_LEN];
  uint8_t pages[NPAGES][RP_PAGE_SIZE]; /* what the client last wrote */
};

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0 ||
      rp_test_write_key(f.dir, "key", f.key_path, sizeof f.key_path, &f.key) < 0)
    return -1;
  *state = &f;
  return 0;
}

static int teardown(void **state)
{
  struct fixture *f = *state;
  if (f)
    rp_test_tmpdir_remove(f->dir);
  return 0;
}

static bool disconnected(void *arg)
{
  return !rp_conn_is_connected(arg);
}

static struct rp_conn *connect_via_relay(struct fixture *f, const uint8_t *token,
                                         struct rp_session_info *info)
{
  struct rp_error err;
  struct rp_conn *c = rp_test_connect(&f->via, &f->key, token, info, &err);
  if (!c)
    fail_msg("connect through the relay: %s", err.message);
  return c;
}

static size_t count_in_file(const char *path, const char *needle)
{
  FILE *fp = fopen(path, "r");
  if (!fp)
    return 0;
  char line[1024];
  size_t n = 0;
  while (fgets(line, sizeof line, fp))
    n += strstr(line, needle) != NULL;
  fclose(fp);
  return n;
}

static size_t tag_failures_logged(struct fixture *f)
{
  return count_in_file(f->srv.stdout_path, "authentication tag") +
         count_in_file(f->srv.stderr_path, "authentication tag");
}

/* Every page reads back as last written, over a resumed session. */
static struct rp_conn *resume_and_verify(struct fixture *f, const char *after)
{
  struct rp_session_info info;
  struct rp_conn *c = connect_via_relay(f, f->token, &info);
  if (!info.resumed)
    fail_msg("after %s the session was gone: the server had freed it", after);
  assert_memory_equal(info.token, f->token, RP_TOKEN_LEN);
  assert_int_equal(info.reserved_pages, NPAGES);
  for (uint64_t s = 0; s < NPAGES; s++) {
    uint8_t got[RP_PAGE_SIZE];
    struct rp_error err;
    if (rp_read_sync(c, s, got, &err) < 0)
      fail_msg("after %s: READ of slot %u: %s", after, (unsigned)s, err.message);
    if (memcmp(got, f->pages[s], RP_PAGE_SIZE) != 0)
      fail_msg("after %s: slot %u does not read back as the client wrote it", after,
               (unsigned)s);
  }
  return c;
}

/* Injects a frame into the client's stream while the client is idle and expects the
 * server to drop the connection, log why, and keep the session. */
static struct rp_conn *attack(struct fixture *f, struct rp_conn *c, const uint8_t *frame,
                              size_t len, const char *what)
{
  size_t logged = tag_failures_logged(f);
  relay_inject(&f->relay, frame, len);
  if (!rp_conn_wait(c, disconnected, c, 5000))
    fail_msg("%s: the server did not drop the connection", what);
  rp_conn_close(c);
  c = resume_and_verify(f, what);
  /* the log line is written before the connection is closed */
  for (int i = 0; i < 50 && tag_failures_logged(f) == logged; i++)
    usleep(20000);
  if (tag_failures_logged(f) <= logged)
    fail_msg("%s: the server logged no failed authentication tag", what);
  return c;
}

static size_t forged(uint8_t *out, uint8_t op, uint64_t slot, uint32_t count, bool page)
{
  struct rp_header h = rp_request_header((enum rp_op)op, 900 + op);
  h.slot = slot;
  h.count = count;
  h.length = page ? RP_PAGE_SIZE : 0;
  rp_header_encode(&h, out);
  size_t n = RP_HEADER_SIZE;
  if (page) {
    memset(out + n, 0xEE, RP_PAGE_SIZE);
    n += RP_PAGE_SIZE;
  }
  /* The best an attacker without the key can do for a tag: guess. */
  assert_int_equal(rp_random_bytes(out + n, 16), 0);
  return n + TAG_LEN;
}

static void test_injected_frames_are_refused(void **state)
{
  struct fixture *f = *state;
  /* A pressure file of its own: other work on the test machine putting its memory
   * under pressure must not make the server refuse this test's reservation. */
  char psi[600];
  snprintf(psi, sizeof psi, "%s/psi", f->dir);
  assert_int_equal(
    rp_test_write_file(psi, "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0);
  const char *args[] = { "--memory",        "16M", "--lease", "60", "--key", f->key_path,
                         "--pressure-file", psi,   NULL };
  assert_int_equal(rp_test_server_start(&f->srv, f->dir, args), 0);
  f->via = f->srv;
  relay_start(&f->relay, &f->srv);
  snprintf(f->via.port, sizeof f->via.port, "%s", f->relay.port);

  struct rp_session_info info;
  struct rp_conn *c = connect_via_relay(f, NULL, &info);
  assert_false(info.resumed);
  memcpy(f->token, info.token, RP_TOKEN_LEN);
  struct rp_error err;
  assert_int_equal(rp_reserve_sync(c, NPAGES, NULL, NULL, &err), 0);
  for (uint64_t s = 0; s < NPAGES; s++) {
    rp_test_fill_page(f->pages[s], 1, s);
    assert_int_equal(rp_write_sync(c, s, f->pages[s], &err), 0);
  }
  /* A recording of slot 1's first WRITE, then newer contents for it. */
  pthread_mutex_lock(&f->relay.mu);
  struct recorded old = f->relay.rec[1];
  pthread_mutex_unlock(&f->relay.mu);
  assert_int_equal(old.slot, 1);
  rp_test_fill_page(f->pages[1], 2, 1);
  assert_int_equal(rp_write_sync(c, 1, f->pages[1], &err), 0);

  uint8_t frame[RP_HEADER_SIZE + RP_PAGE_SIZE + 16];
  size_t n = forged(frame, RP_OP_GOODBYE, 0, 0, false);
  c = attack(f, c, frame, n, "a forged GOODBYE");
  n = forged(frame, RP_OP_WRITE, 3, 0, true);
  c = attack(f, c, frame, n, "a forged WRITE");
  n = forged(frame, RP_OP_FREE, 0, NPAGES, false);
  c = attack(f, c, frame, n, "a forged FREE");
  n = forged(frame, RP_OP_READ, 2, 0, false);
  c = attack(f, c, frame, n, "a forged READ");
  c = attack(f, c, old.bytes, old.len, "a replayed WRITE");

  /* The session is whole and the connection after the attacks works as ever. */
  struct rp_server_stat st;
  assert_int_equal(rp_stat_sync(c, &st, &err), 0);
  assert_int_equal(st.session_stored_pages, NPAGES);
  assert_int_equal(st.ops_free, 0);
  assert_int_equal(rp_goodbye_sync(c, &err), 0);
  rp_conn_close(c);
  relay_stop(&f->relay);
  assert_int_equal(rp_test_server_stop_clean(&f->srv), 0);
}

/* An attacker without the key alters one byte of a WRITE's header in flight (count = 1,
 * which no WRITE may carry). The frame must fail like any altered frame: the connection
 * drops and the write completes RP_ERR_DISCONNECTED, so the engine resends it on the
 * resumed session. On 83b068b, rampartd refuses the undecodable header with an Error
 * that echoes the header's id and op and is *tagged* under the session key
 * (connection.c process_input -> protocol_error -> send_error -> out_commit), so the
 * client verifies it and completes its own WRITE with RP_ERR_BAD_FRAME, as if the server
 * had answered it: the attacker chooses which in-flight request (by id and op) gets an
 * authenticated refusal, and the engine treats it as answered (server_request_failed
 * does not resend it; on_member_written marks the group member lost). */
static void test_altered_header_is_not_an_answer(void **state)
{
  struct fixture *f = *state;
  char psi[600];
  snprintf(psi, sizeof psi, "%s/psi", f->dir);
  assert_int_equal(
    rp_test_write_file(psi, "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0);
  const char *args[] = { "--memory",        "16M", "--lease", "60", "--key", f->key_path,
                         "--pressure-file", psi,   NULL };
  assert_int_equal(rp_test_server_start(&f->srv, f->dir, args), 0);
  f->via = f->srv;
  relay_start(&f->relay, &f->srv);
  snprintf(f->via.port, sizeof f->via.port, "%s", f->relay.port);

  struct rp_session_info info;
  struct rp_conn *c = connect_via_relay(f, NULL, &info);
  memcpy(f->token, info.token, RP_TOKEN_LEN);
  struct rp_error err;
  assert_int_equal(rp_reserve_sync(c, NPAGES, NULL, NULL, &err), 0);
  for (uint64_t s = 0; s < NPAGES; s++) {
    rp_test_fill_page(f->pages[s], 1, s);
    assert_int_equal(rp_write_sync(c, s, f->pages[s], &err), 0);
  }

  pthread_mutex_lock(&f->relay.mu);
  f->relay.alter_next_write = true;
  pthread_mutex_unlock(&f->relay.mu);
  uint8_t newer[RP_PAGE_SIZE];
  rp_test_fill_page(newer, 3, 5);
  memset(&err, 0, sizeof err);
  int rc = rp_write_sync(c, 5, newer, &err);
  printf("the altered WRITE completed: rc %d, status %u: %s\n", rc, err.code, err.message);
  assert_int_equal(rc, -1);
  if (err.code != RP_ERR_DISCONNECTED)
    fail_msg("an altered WRITE completed with status %u (%s), an authenticated answer from "
             "the server, instead of %u (disconnected): the attacker chose a request's "
             "answer",
             err.code, rp_status_name(err.code), RP_ERR_DISCONNECTED);
  if (!rp_conn_wait(c, disconnected, c, 5000))
    fail_msg("the server did not drop the connection");
  rp_conn_close(c);
  c = resume_and_verify(f, "an altered WRITE header"); /* slot 5 as first written */
  assert_int_equal(rp_goodbye_sync(c, &err), 0);
  rp_conn_close(c);
  relay_stop(&f->relay);
  assert_int_equal(rp_test_server_stop_clean(&f->srv), 0);
}

/* ---- a fake server without the key ---- */

struct fake {
  int lfd;
  char port[16];
  uint8_t got[4096]; /* everything the client sent */
  size_t got_len;
};

static void *fake_main(void *arg)
{
  struct fake *fk = arg;
  int fd = accept(fk->lfd, NULL, NULL);
  if (fd < 0)
    return NULL;
  /* HELLO */
  while (fk->got_len < RP_HEADER_SIZE) {
    ssize_t n = recv(fd, fk->got + fk->got_len, sizeof fk->got - fk->got_len, 0);
    if (n <= 0)
      goto out;
    fk->got_len += (size_t)n;
  }
  struct rp_header h, r;
  if (rp_header_decode(fk->got, RP_FROM_CLIENT, &h, NULL) != RP_OK)
    goto out;
  while (fk->got_len < RP_HEADER_SIZE + h.length) {
    ssize_t n = recv(fd, fk->got + fk->got_len, sizeof fk->got - fk->got_len, 0);
    if (n <= 0)
      goto out;
    fk->got_len += (size_t)n;
  }
  uint8_t sn[RP_NONCE_LEN];
  rp_random_bytes(sn, sizeof sn);
  Rampart__Challenge ch = RAMPART__CHALLENGE__INIT;
  ch.version = RP_PROTOCOL_VERSION;
  ch.server_nonce.data = sn;
  ch.server_nonce.len = RP_NONCE_LEN;
  ch.server_name = "harvester";
  uint8_t out[512];
  rp_header_reply(&r, &h, RP_OK, 0);
  size_t len = rp_frame_build(out, sizeof out - 34, &r, &ch.base);
  assert_true(len > 0);
  /* Challenge.server_mac (field 4, 32 bytes) appended by hand: a MAC made up without
   * the key. (Appending a field to a packed protobuf message sets it.) */
  out[len++] = 4 << 3 | 2;
  out[len++] = RP_MAC_LEN;
  rp_random_bytes(out + len, RP_MAC_LEN);
  len += RP_MAC_LEN;
  r.length = (uint32_t)(len - RP_HEADER_SIZE);
  rp_header_encode(&r, out);
  rp_send_full(fd, out, len);
  /* Whatever the client sends next, until it hangs up. */
  for (;;) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, 3000) <= 0)
      break;
    ssize_t n = recv(fd, fk->got + fk->got_len, sizeof fk->got - fk->got_len, 0);
    if (n <= 0)
      break;
    fk->got_len += (size_t)n;
  }
out:
  close(fd);
  return NULL;
}

static void test_fake_server_never_gets_the_token(void **state)
{
  struct fixture *f = *state;
  struct fake fk;
  memset(&fk, 0, sizeof fk);
  fk.lfd = listen_loopback(fk.port);
  assert_true(fk.lfd >= 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, fake_main, &fk), 0);

  uint8_t token[RP_TOKEN_LEN];
  for (unsigned i = 0; i < RP_TOKEN_LEN; i++)
    token[i] = (uint8_t)(0xC0 + i);
  struct rp_conn_options o;
  memset(&o, 0, sizeof o);
  o.host = "127.0.0.1";
  o.port = fk.port;
  o.key = &f->key;
  o.client_name = "victim";
  o.resume_token = token;
  o.connect_timeout_ms = 2000;
  struct rp_error err;
  memset(&err, 0, sizeof err);
  struct rp_session_info info;
  struct rp_conn *c = rp_conn_open(&o, &info, &err);
  if (c)
    rp_conn_close(c);
  pthread_join(th, NULL);
  close(fk.lfd);

  bool harvested = false;
  for (size_t i = 0; i + RP_TOKEN_LEN <= fk.got_len; i++)
    harvested |= memcmp(fk.got + i, token, RP_TOKEN_LEN) == 0;
  if (harvested)
    fail_msg("the fake server received the client's resume token");
  assert_null(c);
  assert_int_equal(err.code, RP_ERR_AUTH);
  printf("client said: %s\n", err.message);
  assert_non_null(strstr(err.message, "127.0.0.1:"));
  assert_non_null(strstr(err.message, "key"));
  /* nothing after HELLO: the client hung up without answering the challenge */
  struct rp_header h;
  assert_int_equal(rp_header_decode(fk.got, RP_FROM_CLIENT, &h, NULL), RP_OK);
  assert_int_equal(h.op, RP_OP_HELLO);
  assert_int_equal(fk.got_len, RP_HEADER_SIZE + h.length);
}

/* A version 1 client (HELLO version 1, its resume token in HELLO) is told, in words,
 * that the versions differ and to upgrade both sides, and gets nothing else. */
static void test_version_1_client_told_to_upgrade(void **state)
{
  struct fixture *f = *state;
  const char *args[] = { "--memory", "16M", "--key", f->key_path, NULL };
  assert_int_equal(rp_test_server_start(&f->srv, f->dir, args), 0);
  int fd = rp_test_raw_connect(&f->srv);
  assert_true(fd >= 0);
  uint8_t nonce[RP_NONCE_LEN] = { 1 }, token[RP_TOKEN_LEN] = { 2 };
  Rampart__Hello hello = RAMPART__HELLO__INIT;
  hello.magic = RP_HELLO_MAGIC;
  hello.version = 1;
  hello.client_nonce.data = nonce;
  hello.client_nonce.len = sizeof nonce;
  hello.client_name = "old-client";
  uint8_t frame[512];
  struct rp_header req = rp_request_header(RP_OP_HELLO, 1);
  size_t n = rp_frame_build(frame, sizeof frame - 34, &req, &hello.base);
  /* version 1's Hello.resume_token (field 5), appended by hand */
  frame[n++] = 5 << 3 | 2;
  frame[n++] = RP_TOKEN_LEN;
  memcpy(frame + n, token, RP_TOKEN_LEN);
  n += RP_TOKEN_LEN;
  req.length = (uint32_t)(n - RP_HEADER_SIZE);
  rp_header_encode(&req, frame);
  assert_int_equal(rp_send_full(fd, frame, n), 0);

  uint8_t reply[4096];
  size_t got = 0;
  for (;;) {
    ssize_t r = recv(fd, reply + got, sizeof reply - got, 0);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  close(fd);
  struct rp_header h;
  assert_true(got >= RP_HEADER_SIZE);
  assert_int_equal(rp_header_decode(reply, RP_FROM_SERVER, &h, NULL), RP_OK);
  assert_int_equal(h.status, RP_ERR_VERSION);
  assert_int_equal(got, RP_HEADER_SIZE + h.length); /* one untagged Error, then the end */
  Rampart__Error *e = rampart__error__unpack(NULL, h.length, reply + RP_HEADER_SIZE);
  assert_non_null(e);
  printf("rampartd said: %s\n", e->message);
  assert_non_null(strstr(e->message, "version 2"));
  assert_non_null(strstr(e->message, "sent version 1"));
  assert_non_null(strstr(e->message, "both sides"));
  rampart__error__free_unpacked(e, NULL);
  assert_int_equal(rp_test_server_stop_clean(&f->srv), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_injected_frames_are_refused, setup, teardown),
    cmocka_unit_test_setup_teardown(test_altered_header_is_not_an_answer, setup, teardown),
    cmocka_unit_test_setup_teardown(test_fake_server_never_gets_the_token, setup, teardown),
    cmocka_unit_test_setup_teardown(test_version_1_client_told_to_upgrade, setup, teardown),
  };
  return cmocka_run_group_tests_name("server_frame_auth", tests, NULL, NULL);
}
