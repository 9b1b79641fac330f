/* libFuzzer target for the server's side of a whole connection (server/connection.c,
 * session.c, page_store.c behind it): frame reassembly, the handshake state machine and
 * every op after it, in-process. A real rps_server runs on a libev loop in this process;
 * each input is the byte stream a client sends on one connection (a socketpair), and the
 * loop runs until the server has nothing more to say. The first input byte picks the
 * mode: odd, the input is the whole stream from its first byte (the handshake state
 * machine: HELLO, the challenge, AUTH and their refusals); even, this harness first does
 * a real handshake itself (it checks the server's MAC, answers with the right MAC under
 * the test key, and keys both directions' frame authentication), and the input is what a
 * logged-in client sends after it: the harness cuts it into frames at the lengths their
 * headers claim and appends each whole frame's valid tag (proto/frame_auth.h), so
 * RESERVE, WRITE, READ, FREE, STAT, PING and GOODBYE and the sessions behind them are
 * reached, not only the refusals. With bit 1 of the first byte also set (tamper mode),
 * the next three input bytes name one byte of that tagged stream (16-bit position) and a
 * value XORed into it: the tag check itself is fuzzed.
 *
 * Properties: the server survives every input (ASan/UBSan check its memory), it never
 * writes more than it could owe (no unbounded reply to a bounded input), and after the
 * connection closes it holds no connection. Logged in, every frame the server sends
 * carries a valid tag; in tamper mode it answers at most the frames before the tampered
 * one, plus one Error (a tampered header can fail to decode before its tag is read).
 * RAMPART_FUZZ_SEED_DIR=DIR writes a seed corpus first (valid frames from proto/wire.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "connection.h"
#include "auth.h"
#include "frame_auth.h"
#include "log.h"
#include "message.h"
#include "options.h"
#include "server.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static struct ev_loop *loop;
static struct rps_options opt;
static char psi_path[64];

/* The harness's own end of the frame authentication, when it logged in. */
static struct rp_frame_auth c_tx, c_rx;
static bool logged_in;
static uint8_t sbuf[1 << 20]; /* what the server sent, not yet parsed */
static size_t slen;
static size_t server_frames; /* whole tagged frames the server sent after the login */

/* Parses what the server sent after the login: each frame must decode and carry a valid
 * tag under the server-to-client key. */
static void parse_server_output(const uint8_t *b, size_t n)
{
  if (!logged_in)
    return;
  if (n > sizeof sbuf - slen)
    abort(); /* more than a megabyte not yet framed: the bound below catches floods */
  memcpy(sbuf + slen, b, n);
  slen += n;
  size_t off = 0;
  while (slen - off >= RP_HEADER_SIZE) {
    struct rp_header h;
    if (rp_header_decode(sbuf + off, RP_FROM_SERVER, &h, NULL) != RP_OK) {
      /* The one exception: the Error answering a header that did not decode echoes that
       * header's op and id, which may be anything. Its status and length are sane. */
      const uint8_t *raw = sbuf + off;
      h.status = (uint16_t)(raw[6] | raw[7] << 8);
      h.length = (uint32_t)raw[8] | (uint32_t)raw[9] << 8 | (uint32_t)raw[10] << 16 |
                 (uint32_t)raw[11] << 24;
      if (h.status == RP_OK || h.length > RP_MAX_CONTROL_PAYLOAD)
        abort(); /* the server sent a frame its own protocol forbids */
    }
    size_t total = RP_HEADER_SIZE + h.length + RP_TAG_LEN;
    if (slen - off < total)
      break;
    if (!rp_frame_verify(&c_rx, sbuf + off, sbuf + off + RP_HEADER_SIZE, h.length,
                         sbuf + off + RP_HEADER_SIZE + h.length))
      abort(); /* the server tagged a frame wrongly */
    server_frames++;
    off += total;
  }
  memmove(sbuf, sbuf + off, slen - off);
  slen -= off;
}

static void quiet_sink(enum rp_log_level level, const char *line)
{
  (void)level;
  (void)line;
}

/* Runs the loop until nothing happens for a few turns; reads and discards what the
 * server sends so it never blocks on a full socket. Returns the bytes it sent. */
static size_t run_and_drain(int client_fd)
{
  size_t got = 0;
  for (int idle = 0, turns = 0; idle < 4 && turns < 10000; turns++) {
    ev_run(loop, EVRUN_NOWAIT);
    bool progress = false;
    char buf[65536];
    ssize_t r;
    while (client_fd >= 0 && (r = read(client_fd, buf, sizeof buf)) > 0) {
      got += (size_t)r;
      progress = true;
      parse_server_output((const uint8_t *)buf, (size_t)r);
    }
    idle = progress ? 0 : idle + 1;
  }
  return got;
}

static const uint8_t client_nonce[RP_NONCE_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8 };

static Rampart__Hello seed_hello(void)
{
  Rampart__Hello hello = RAMPART__HELLO__INIT;
  hello.magic = RP_HELLO_MAGIC;
  hello.version = RP_PROTOCOL_VERSION;
  hello.client_nonce = (ProtobufCBinaryData){ RP_NONCE_LEN, (uint8_t *)client_nonce };
  hello.client_name = "fuzz";
  return hello;
}

/* Reads one whole frame from the server into buf (running the loop meanwhile); with
 * tagged, its tag too, which must verify. Returns the frame's size less the tag. */
static size_t read_frame(int fd, uint8_t *buf, size_t cap, struct rp_header *h, bool tagged)
{
  size_t got = 0, want = RP_HEADER_SIZE;
  for (int turns = 0; got < want && turns < 10000; turns++) {
    ev_run(loop, EVRUN_NOWAIT);
    ssize_t r = read(fd, buf + got, want - got);
    if (r > 0)
      got += (size_t)r;
    if (got == RP_HEADER_SIZE && want == RP_HEADER_SIZE) {
      if (rp_header_decode(buf, RP_FROM_SERVER, h, NULL) != RP_OK ||
          RP_HEADER_SIZE + h->length + RP_TAG_LEN > cap)
        abort(); /* the server sent a frame its own protocol forbids */
      want += h->length + (tagged ? RP_TAG_LEN : 0);
    }
  }
  if (got < want)
    abort(); /* no answer to a valid HELLO or AUTH */
  if (tagged) {
    got -= RP_TAG_LEN;
    if (!rp_frame_verify(&c_rx, buf, buf + RP_HEADER_SIZE, h->length, buf + got))
      abort(); /* the Welcome's tag is wrong */
  }
  return got;
}

static void send_all(int fd, const uint8_t *buf, size_t n)
{
  for (size_t sent = 0; sent < n;) {
    ssize_t w = write(fd, buf + sent, n - sent);
    if (w > 0)
      sent += (size_t)w;
    ev_run(loop, EVRUN_NOWAIT);
  }
}

/* HELLO, the server's challenge (whose MAC must check out), and a tagged AUTH with the
 * right MAC: as a real client. Keys c_tx and c_rx. */
static void handshake(int fd, const struct rp_key *key)
{
  static uint8_t buf[RP_MAX_CONTROL_FRAME + RP_TAG_LEN];
  Rampart__Hello hello = seed_hello();
  struct rp_header req = rp_request_header(RP_OP_HELLO, 1), h;
  send_all(fd, buf, rp_frame_build(buf, sizeof buf, &req, &hello.base));
  size_t n = read_frame(fd, buf, sizeof buf, &h, false);
  Rampart__Challenge *ch = rampart__challenge__unpack(NULL, n - RP_HEADER_SIZE,
                                                      buf + RP_HEADER_SIZE);
  if (!ch || h.status != RP_OK || ch->server_nonce.len != RP_NONCE_LEN)
    abort();
  uint8_t mac[RP_MAC_LEN], sn[RP_NONCE_LEN];
  memcpy(sn, ch->server_nonce.data, RP_NONCE_LEN);
  rp_auth_server_mac(key, client_nonce, sn, mac);
  if (!rp_mac_matches(mac, ch->server_mac.data, ch->server_mac.len))
    abort(); /* the server could not prove the key it holds */
  rampart__challenge__free_unpacked(ch, NULL);
  struct rp_session_keys keys;
  rp_session_keys_derive(key, client_nonce, sn, &keys);
  if (rp_frame_auth_init(&c_tx, keys.client_to_server) < 0 ||
      rp_frame_auth_init(&c_rx, keys.server_to_client) < 0)
    abort();
  rp_auth_client_mac(key, sn, client_nonce, mac);
  Rampart__Auth auth = RAMPART__AUTH__INIT;
  auth.client_mac = (ProtobufCBinaryData){ RP_MAC_LEN, mac };
  req = rp_request_header(RP_OP_AUTH, 2);
  n = rp_frame_build(buf, sizeof buf - RP_TAG_LEN, &req, &auth.base);
  if (rp_frame_tag(&c_tx, buf, buf + RP_HEADER_SIZE, n - RP_HEADER_SIZE, buf + n) < 0)
    abort();
  send_all(fd, buf, n + RP_TAG_LEN);
  read_frame(fd, buf, sizeof buf, &h, true);
  if (h.status != RP_OK)
    abort(); /* the right key was refused */
}

/* The input as a logged-in client sends it: cut into frames at the lengths their headers
 * claim, each whole frame followed by its tag. What does not form a whole frame (a
 * header that does not decode, a frame cut short) goes out as it is. *frame_ends gets
 * the stream offset where each tagged frame ends. Returns the stream's length. */
static size_t tag_stream(const uint8_t *in, size_t len, uint8_t *out, size_t *frame_ends,
                         size_t max_frames, size_t *nframes)
{
  size_t o = 0, i = 0;
  *nframes = 0;
  while (len - i >= RP_HEADER_SIZE) {
    struct rp_header h;
    if (rp_header_decode(in + i, RP_FROM_CLIENT, &h, NULL) != RP_OK ||
        len - i - RP_HEADER_SIZE < h.length)
      break;
    size_t n = RP_HEADER_SIZE + h.length;
    memcpy(out + o, in + i, n);
    if (rp_frame_tag(&c_tx, out + o, out + o + RP_HEADER_SIZE, h.length, out + o + n) < 0)
      abort();
    o += n + RP_TAG_LEN;
    i += n;
    if (*nframes < max_frames)
      frame_ends[(*nframes)++] = o;
  }
  memcpy(out + o, in + i, len - i);
  return o + (len - i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1 || size > 256 * 1024)
    return 0;
  struct rp_key key;
  memset(&key, 0, sizeof key);
  memcpy(key.bytes, "fuzz-key-fuzz-key-fuzz-key-fuzz-key-0123", 40);
  key.len = 40;
  /* A listening socket the server owns but nobody connects to. */
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0 || listen(lfd, 1) < 0)
    abort();
  struct rps_server srv;
  char err[512];
  if (rps_server_init(&srv, loop, &opt, &key, lfd, err, sizeof err) < 0) {
    fprintf(stderr, "fuzz_server_conn: %s\n", err);
    abort();
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
    abort();
  struct rps_addr_key addr;
  memset(&addr, 0, sizeof addr);
  if (rps_conn_start(&srv, sv[1], "fuzz", &addr) < 0)
    abort();
  const uint8_t *in = data + 1;
  size_t left = size - 1;
  static uint8_t tagged[256 * 1024 + 64 * 1024];
  static size_t frame_ends[16384];
  size_t nframes = 0, tampered_frame = SIZE_MAX;
  logged_in = false;
  slen = 0;
  server_frames = 0;
  if (!(data[0] & 1)) {
    bool tamper = data[0] & 2;
    size_t pos = 0;
    uint8_t flip = 0;
    if (tamper) {
      if (left < 3)
        tamper = false;
      else {
        pos = (size_t)in[0] | (size_t)in[1] << 8;
        flip = in[2] ? in[2] : 0x80;
        in += 3;
        left -= 3;
      }
    }
    handshake(sv[0], &key);
    logged_in = true;
    left = tag_stream(in, left, tagged, frame_ends, sizeof frame_ends / sizeof frame_ends[0],
                      &nframes);
    in = tagged;
    if (tamper && left > 0) {
      pos %= left;
      tagged[pos] ^= flip;
      tampered_frame = 0;
      while (tampered_frame < nframes && frame_ends[tampered_frame] <= pos)
        tampered_frame++;
    }
  }
  size_t sent = 0, replies = 0;
  while (sent < left) {
    ssize_t w = write(sv[0], in + sent, left - sent);
    if (w > 0)
      sent += (size_t)w;
    else if (w < 0 && errno != EAGAIN)
      break; /* the server closed the connection: the rest is never read */
    replies += run_and_drain(sv[0]);
    if (w <= 0 && srv.nconns == 0)
      break;
  }
  shutdown(sv[0], SHUT_WR);
  replies += run_and_drain(sv[0]);
  close(sv[0]);
  run_and_drain(-1);
  /* Each frame in is at most one reply out, and a reply is at most a page plus a
   * bounded control message: a flood of bytes from a small input is a bug. */
  if (replies > 64 * 1024 + (left / RP_HEADER_SIZE + 4) * (RP_PAGE_SIZE + 4096))
    abort();
  /* Tampered: nothing from the tampered frame on was answered, but one Error for a
   * header that failed to decode. (A flip past the last whole frame changes only bytes
   * that never formed one.) */
  if (tampered_frame != SIZE_MAX && tampered_frame < nframes &&
      server_frames > tampered_frame + 1)
    abort();
  rps_server_cleanup(&srv);
  if (srv.nconns != 0)
    abort();
  rp_frame_auth_free(&c_tx);
  rp_frame_auth_free(&c_rx);
  logged_in = false;
  return 0;
}

static void write_seed(const char *dir, const char *name, const void *bytes, size_t len)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f)
    return;
  fwrite(bytes, 1, len, f);
  fclose(f);
}

/* Appends a whole frame to the seed being built. */
static void add_message(uint8_t *seed, size_t *n, struct rp_header h,
                        const ProtobufCMessage *m)
{
  size_t len = rp_frame_build(seed + *n, 65536 - *n, &h, m);
  if (len == 0)
    abort();
  *n += len;
}

static void add_page_op(uint8_t *seed, size_t *n, enum rp_op op, uint64_t id, uint64_t slot,
                        bool with_page)
{
  struct rp_header h = rp_request_header(op, id);
  h.slot = slot;
  h.length = with_page ? RP_PAGE_SIZE : 0;
  h.count = op == RP_OP_FREE ? 1 : 0;
  rp_header_encode(&h, seed + *n);
  *n += RP_HEADER_SIZE;
  if (with_page) {
    for (uint32_t i = 0; i < RP_PAGE_SIZE; i++)
      seed[*n + i] = (uint8_t)(i * 13 + slot);
    *n += RP_PAGE_SIZE;
  }
}

/* A logged-in session from RESERVE to GOODBYE (byte 0 even: the harness logs in), and a
 * raw HELLO followed by a wrong AUTH (byte 0 odd). */
static void write_seeds(const char *dir)
{
  static uint8_t seed[65536];
  uint8_t nonce[RP_NONCE_LEN], mac[RP_MAC_LEN];
  for (unsigned i = 0; i < RP_NONCE_LEN; i++)
    nonce[i] = (uint8_t)(i + 1);
  for (unsigned i = 0; i < RP_MAC_LEN; i++)
    mac[i] = (uint8_t)(0x80 + i);
  Rampart__Hello hello = seed_hello();
  Rampart__Reserve res = RAMPART__RESERVE__INIT;
  res.pages = 64;

  size_t n = 0;
  seed[n++] = 0; /* after the harness's own handshake */
  add_message(seed, &n, rp_request_header(RP_OP_RESERVE, 2), &res.base);
  add_page_op(seed, &n, RP_OP_WRITE, 3, 0, true);
  add_page_op(seed, &n, RP_OP_WRITE, 4, 1, true);
  add_page_op(seed, &n, RP_OP_READ, 5, 0, false);
  add_page_op(seed, &n, RP_OP_FREE, 6, 1, false);
  add_message(seed, &n, rp_request_header(RP_OP_STAT, 7), NULL);
  add_message(seed, &n, rp_request_header(RP_OP_GOODBYE, 8), NULL);
  write_seed(dir, "session", seed, n);
  /* The same session in tamper mode: a byte of the first WRITE's page flipped. */
  memmove(seed + 4, seed + 1, n - 1);
  seed[0] = 2;
  seed[1] = 200;
  seed[2] = 0;
  seed[3] = 0x01;
  write_seed(dir, "session-tampered", seed, n + 3);

  n = 0;
  seed[n++] = 1;
  add_message(seed, &n, rp_request_header(RP_OP_HELLO, 1), &hello.base);
  Rampart__Auth auth = RAMPART__AUTH__INIT;
  auth.client_mac = (ProtobufCBinaryData){ RP_MAC_LEN, mac };
  add_message(seed, &n, rp_request_header(RP_OP_AUTH, 2), &auth.base);
  write_seed(dir, "keyed-wrong-auth", seed, n);
}

/* libFuzzer ends a timed run with exit(): the file goes with it, not left in /tmp. */
static void remove_psi(void)
{
  unlink(psi_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  rp_log_set_sink(quiet_sink);
  loop = ev_loop_new(EVFLAG_AUTO);
  snprintf(psi_path, sizeof psi_path, "/tmp/rampart-fuzz-psi-%d", (int)getpid());
  FILE *f = fopen(psi_path, "w");
  if (!loop || !f)
    abort();
  atexit(remove_psi);
  fputs("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", f);
  fclose(f);
  char *args[] = { "rampartd", "--listen", "127.0.0.1:0",     "--memory", "16M",
                   "--lease",  "1",        "--pressure-file", psi_path,   NULL };
  char err[512];
  if (rps_options_parse(9, args, &opt, err, sizeof err) != RPS_OPTIONS_OK) {
    fprintf(stderr, "fuzz_server_conn: %s\n", err);
    abort();
  }
  const char *dir = getenv("RAMPART_FUZZ_SEED_DIR");
  if (dir && *dir)
    write_seeds(dir);
  return 0;
}
