/* libFuzzer target for the client's side of a connection (src/client/client_conn.c): what a
 * server sends, from its challenge and Welcome to the replies of the hot path. Each input
 * is the byte stream a fake server (a thread here) sends on one loopback connection to
 * rp_conn_open. The first input byte picks the mode: odd, the input is the whole stream
 * from the start (challenge, Welcome, refusals, garbage: the handshake must refuse what
 * is wrong, with a message, and never hang past its timeout); even, the thread first
 * answers the handshake correctly (a challenge with the right MAC under the test key,
 * then a tagged Welcome), and the input is what the server sends after it: replies to the
 * reads, writes and frees the client has in flight, unsolicited ADVISEs, and garbage. The
 * thread cuts it into frames at the lengths their headers claim and appends each whole
 * frame's valid tag (proto/frame_auth.h), so the fuzzer reaches past the tag check. With
 * bit 1 of the first byte also set (tamper mode), the next three bytes name one byte of
 * that tagged stream (16-bit position) and a value XORed into it: the tag check itself
 * is fuzzed.
 *
 * Properties: rp_conn_open fails with a message or succeeds; after it succeeds, every
 * request completes exactly once (the callbacks count) with a status, and a READ that
 * succeeded got a whole page. The server's stream ends with the input, so everything ends
 * by EOF, not by a timeout.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "auth.h"
#include "client.h"
#include "frame_auth.h"
#include "log.h"
#include "message.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define NREQ 6

static int listen_fd;
static char port[16];
static struct rp_key key;

struct fake_server {
  const uint8_t *stream;
  size_t len;
  bool login;
  bool tamper;
  size_t tamper_pos;
  uint8_t tamper_xor;
  struct rp_frame_auth rx, tx;
};

static void quiet_sink(enum rp_log_level level, const char *line)
{
  (void)level;
  (void)line;
}

static bool read_exact(int fd, uint8_t *buf, size_t n)
{
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r <= 0)
      return false;
    got += (size_t)r;
  }
  return true;
}

/* One whole client frame (with rx: and its tag, which must verify); false at EOF or
 * on a frame the client should never send. */
static bool read_frame(int fd, uint8_t *buf, size_t cap, struct rp_header *h,
                       struct rp_frame_auth *rx)
{
  if (!read_exact(fd, buf, RP_HEADER_SIZE))
    return false;
  if (rp_header_decode(buf, RP_FROM_CLIENT, h, NULL) != RP_OK)
    abort(); /* the client broke its own protocol */
  size_t tag = rx ? RP_TAG_LEN : 0;
  if (RP_HEADER_SIZE + h->length + tag > cap ||
      !read_exact(fd, buf + RP_HEADER_SIZE, h->length + tag))
    return false;
  if (rx && !rp_frame_verify(rx, buf, buf + RP_HEADER_SIZE, h->length,
                             buf + RP_HEADER_SIZE + h->length))
    abort(); /* the client tagged its AUTH wrongly */
  return true;
}

static void write_all(int fd, const uint8_t *buf, size_t n)
{
  for (size_t sent = 0; sent < n;) {
    ssize_t w = write(fd, buf + sent, n - sent);
    if (w <= 0)
      return; /* the client hung up: the rest is never read */
    sent += (size_t)w;
  }
}

/* Answers HELLO and AUTH as an honest server with the test key; keys fs->rx, fs->tx. */
static bool answer_handshake(int fd, struct fake_server *fs)
{
  static uint8_t buf[RP_MAX_CONTROL_FRAME + RP_TAG_LEN];
  struct rp_header h, r;
  if (!read_frame(fd, buf, sizeof buf, &h, NULL) || h.op != RP_OP_HELLO)
    return false;
  Rampart__Hello *hello = rampart__hello__unpack(NULL, h.length, buf + RP_HEADER_SIZE);
  if (!hello || hello->client_nonce.len != RP_NONCE_LEN)
    abort(); /* the client's own HELLO did not parse */
  uint8_t cn[RP_NONCE_LEN], sn[RP_NONCE_LEN], mac[RP_MAC_LEN], token[RP_TOKEN_LEN];
  memcpy(cn, hello->client_nonce.data, RP_NONCE_LEN);
  rampart__hello__free_unpacked(hello, NULL);
  memset(sn, 7, sizeof sn);
  memset(token, 9, sizeof token);
  rp_auth_server_mac(&key, cn, sn, mac);
  Rampart__Challenge ch = RAMPART__CHALLENGE__INIT;
  ch.version = RP_PROTOCOL_VERSION;
  ch.server_nonce = (ProtobufCBinaryData){ RP_NONCE_LEN, sn };
  ch.server_name = "fuzz";
  ch.server_mac = (ProtobufCBinaryData){ RP_MAC_LEN, mac };
  rp_header_reply(&r, &h, RP_OK, 0);
  write_all(fd, buf, rp_frame_build(buf, sizeof buf, &r, &ch.base));
  struct rp_session_keys keys;
  rp_session_keys_derive(&key, cn, sn, &keys);
  if (rp_frame_auth_init(&fs->rx, keys.client_to_server) < 0 ||
      rp_frame_auth_init(&fs->tx, keys.server_to_client) < 0)
    abort();
  if (!read_frame(fd, buf, sizeof buf, &h, &fs->rx) || h.op != RP_OP_AUTH)
    return false;
  Rampart__Welcome w = RAMPART__WELCOME__INIT;
  w.session_token = (ProtobufCBinaryData){ RP_TOKEN_LEN, token };
  w.page_size = RP_PAGE_SIZE;
  w.capacity_pages = 1024;
  w.free_pages = 1024;
  w.lease_seconds = 60;
  rp_header_reply(&r, &h, RP_OK, 0);
  size_t n = rp_frame_build(buf, sizeof buf - RP_TAG_LEN, &r, &w.base);
  if (rp_frame_tag(&fs->tx, buf, buf + RP_HEADER_SIZE, n - RP_HEADER_SIZE, buf + n) < 0)
    abort();
  write_all(fd, buf, n + RP_TAG_LEN);
  return true;
}

/* The input as an honest server would send it: whole frames (at the lengths their
 * headers claim) each followed by its tag; what does not form one goes as it is. */
static size_t tag_stream(struct fake_server *fs, uint8_t *out)
{
  const uint8_t *in = fs->stream;
  size_t len = fs->len, o = 0, i = 0;
  while (len - i >= RP_HEADER_SIZE) {
    struct rp_header h;
    if (rp_header_decode(in + i, RP_FROM_SERVER, &h, NULL) != RP_OK ||
        len - i - RP_HEADER_SIZE < h.length)
      break;
    size_t n = RP_HEADER_SIZE + h.length;
    memcpy(out + o, in + i, n);
    if (rp_frame_tag(&fs->tx, out + o, out + o + RP_HEADER_SIZE, h.length, out + o + n) < 0)
      abort();
    o += n + RP_TAG_LEN;
    i += n;
  }
  memcpy(out + o, in + i, len - i);
  o += len - i;
  if (fs->tamper && o > 0)
    out[fs->tamper_pos % o] ^= fs->tamper_xor;
  return o;
}

static void *fake_server_main(void *arg)
{
  struct fake_server *fs = arg;
  int fd = accept(listen_fd, NULL, NULL);
  if (fd < 0)
    return NULL;
  if (!fs->login) {
    write_all(fd, fs->stream, fs->len);
  } else if (answer_handshake(fd, fs)) {
    static uint8_t tagged[128 * 1024 + 48 * 1024];
    write_all(fd, tagged, tag_stream(fs, tagged));
  }
  rp_frame_auth_free(&fs->rx);
  rp_frame_auth_free(&fs->tx);
  shutdown(fd, SHUT_WR);
  uint8_t sink[65536];
  while (read(fd, sink, sizeof sink) > 0) {
  }
  close(fd);
  return NULL;
}

struct tally {
  unsigned done[NREQ];
  unsigned completed;
};

static void on_done(struct rp_request *req)
{
  struct tally *t = req->user;
  t->done[req->id % NREQ]++; /* ids are per connection; any fixed map will do */
  t->completed++;
}

static bool all_done(void *arg)
{
  return ((struct tally *)arg)->completed == NREQ;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1 || size > 128 * 1024)
    return 0;
  struct fake_server fs = { .stream = data + 1, .len = size - 1, .login = !(data[0] & 1) };
  if (fs.login && (data[0] & 2) && fs.len >= 3) {
    fs.tamper = true;
    fs.tamper_pos = (size_t)data[1] | (size_t)data[2] << 8;
    fs.tamper_xor = data[3] ? data[3] : 0x80;
    fs.stream += 3;
    fs.len -= 3;
  }
  pthread_t th;
  if (pthread_create(&th, NULL, fake_server_main, &fs) != 0)
    abort();
  struct rp_conn_options o;
  memset(&o, 0, sizeof o);
  o.host = "127.0.0.1";
  o.port = port;
  o.key = &key;
  o.client_name = "fuzz";
  o.connect_timeout_ms = 2000;
  o.request_timeout_ms = 2000;
  struct rp_session_info info;
  struct rp_error err;
  memset(&err, 0, sizeof err);
  struct rp_conn *c = rp_conn_open(&o, &info, &err);
  if (!c) {
    if (!err.message[0])
      abort(); /* a refusal must say why */
  } else {
    static uint8_t pages[NREQ][RP_PAGE_SIZE];
    static struct rp_request reqs[NREQ];
    struct tally t;
    memset(&t, 0, sizeof t);
    static const uint8_t ops[NREQ] = { RP_OP_READ, RP_OP_WRITE, RP_OP_READ,
                                       RP_OP_FREE, RP_OP_PING,  RP_OP_READ };
    if (!rp_conn_loop(c))
      abort();
    for (unsigned i = 0; i < NREQ; i++) {
      memset(&reqs[i], 0, sizeof reqs[i]);
      reqs[i].op = ops[i];
      reqs[i].slot = i;
      reqs[i].count = 1;
      reqs[i].page = pages[i];
      reqs[i].done = on_done;
      reqs[i].user = &t;
      rp_conn_submit(c, &reqs[i]);
    }
    if (!rp_conn_wait(c, all_done, &t, 10000))
      abort(); /* the stream ended, so every request must have ended too */
    rp_conn_close(c);
    if (t.completed != NREQ)
      abort(); /* completed twice */
  }
  pthread_join(th, NULL);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  rp_log_set_sink(quiet_sink);
  memcpy(key.bytes, "fuzz-key-fuzz-key-fuzz-key-fuzz-key-0123", 40);
  key.len = 40;
  listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t alen = sizeof a;
  if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof a) < 0 ||
      listen(listen_fd, 16) < 0 || getsockname(listen_fd, (struct sockaddr *)&a, &alen) < 0)
    abort();
  snprintf(port, sizeof port, "%u", ntohs(a.sin_port));
  const char *dir = getenv("RAMPART_FUZZ_SEED_DIR");
  if (dir && *dir) {
    /* A logged-in stream: a page for READ id 1, an empty reply to WRITE id 2, then
     * garbage; and the same in tamper mode with a byte of the page flipped. */
    static uint8_t seed[8192];
    size_t n = 0;
    seed[n++] = 0;
    struct rp_header req = rp_request_header(RP_OP_READ, 1), r;
    rp_header_reply(&r, &req, RP_OK, RP_PAGE_SIZE);
    rp_header_encode(&r, seed + n);
    n += RP_HEADER_SIZE;
    memset(seed + n, 0x3c, RP_PAGE_SIZE);
    n += RP_PAGE_SIZE;
    req = rp_request_header(RP_OP_WRITE, 2);
    rp_header_reply(&r, &req, RP_OK, 0);
    rp_header_encode(&r, seed + n);
    n += RP_HEADER_SIZE;
    memcpy(seed + n, "garbage", 7);
    n += 7;
    for (int tampered = 0; tampered < 2; tampered++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", dir, tampered ? "session-tampered" : "session");
      FILE *f = fopen(path, "w");
      if (!f)
        continue;
      if (tampered) {
        static const uint8_t mode[4] = { 2, 100, 0, 0x40 }; /* flip a bit of the page */
        fwrite(mode, 1, sizeof mode, f);
        fwrite(seed + 1, 1, n - 1, f);
      } else {
        fwrite(seed, 1, n, f);
      }
      fclose(f);
    }
  }
  return 0;
}
