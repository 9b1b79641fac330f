/* libFuzzer target for the server's side of a whole connection (server/connection.c,
 * session.c, page_store.c behind it): frame reassembly, the handshake state machine and
 * every op after it, in-process. A real rps_server runs on a libev loop in this process;
 * each input is the byte stream a client sends on one connection (a socketpair), and the
 * loop runs until the server has nothing more to say. The first input byte picks the
 * mode: odd, the input is the whole stream from its first byte (the handshake state
 * machine: HELLO, the challenge, AUTH and their refusals); even, this harness first does
 * a real handshake itself (it reads the server's nonce and answers with the right MAC
 * under the test key), and the input is what a logged-in client sends after it, so
 * RESERVE, WRITE, READ, FREE, STAT, PING and GOODBYE and the sessions behind them are
 * reached, not only the refusals.
 *
 * Properties: the server survives every input (ASan/UBSan check its memory), it never
 * writes more than it could owe (no unbounded reply to a bounded input), and after the
 * connection closes it holds no connection.
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

/* Reads one whole frame from the server into buf (running the loop meanwhile). */
static size_t read_frame(int fd, uint8_t *buf, size_t cap, struct rp_header *h)
{
  size_t got = 0, want = RP_HEADER_SIZE;
  for (int turns = 0; got < want && turns < 10000; turns++) {
    ev_run(loop, EVRUN_NOWAIT);
    ssize_t r = read(fd, buf + got, want - got);
    if (r > 0)
      got += (size_t)r;
    if (got == RP_HEADER_SIZE && want == RP_HEADER_SIZE) {
      if (rp_header_decode(buf, RP_FROM_SERVER, h, NULL) != RP_OK ||
          RP_HEADER_SIZE + h->length > cap)
        abort(); /* the server sent a frame its own protocol forbids */
      want += h->length;
    }
  }
  if (got < want)
    abort(); /* no answer to a valid HELLO or AUTH */
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

/* HELLO, the server's challenge, and AUTH with the right MAC: as a real client. */
static void handshake(int fd, const struct rp_key *key)
{
  static uint8_t buf[RP_MAX_CONTROL_FRAME];
  Rampart__Hello hello = seed_hello();
  struct rp_header req = rp_request_header(RP_OP_HELLO, 1), h;
  send_all(fd, buf, rp_frame_build(buf, sizeof buf, &req, &hello.base));
  size_t n = read_frame(fd, buf, sizeof buf, &h);
  Rampart__Challenge *ch = rampart__challenge__unpack(NULL, n - RP_HEADER_SIZE,
                                                      buf + RP_HEADER_SIZE);
  if (!ch || h.status != RP_OK || ch->server_nonce.len != RP_NONCE_LEN)
    abort();
  uint8_t mac[RP_MAC_LEN];
  rp_auth_client_mac(key, ch->server_nonce.data, client_nonce, mac);
  rampart__challenge__free_unpacked(ch, NULL);
  Rampart__Auth auth = RAMPART__AUTH__INIT;
  auth.client_mac = (ProtobufCBinaryData){ RP_MAC_LEN, mac };
  req = rp_request_header(RP_OP_AUTH, 2);
  send_all(fd, buf, rp_frame_build(buf, sizeof buf, &req, &auth.base));
  read_frame(fd, buf, sizeof buf, &h);
  if (h.status != RP_OK)
    abort(); /* the right key was refused */
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
  if (!(data[0] & 1))
    handshake(sv[0], &key);
  size_t sent = 0, replies = 0;
  const uint8_t *in = data + 1;
  size_t left = size - 1;
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
  rps_server_cleanup(&srv);
  if (srv.nconns != 0)
    abort();
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
static void add_message(uint8_t *seed, size_t *n, struct rp_header h, const ProtobufCMessage *m)
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

  n = 0;
  seed[n++] = 1;
  add_message(seed, &n, rp_request_header(RP_OP_HELLO, 1), &hello.base);
  Rampart__Auth auth = RAMPART__AUTH__INIT;
  auth.client_mac = (ProtobufCBinaryData){ RP_MAC_LEN, mac };
  add_message(seed, &n, rp_request_header(RP_OP_AUTH, 2), &auth.base);
  write_seed(dir, "keyed-wrong-auth", seed, n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  rp_log_set_sink(quiet_sink);
  loop = ev_loop_new(EVFLAG_AUTO);
  snprintf(psi_path, sizeof psi_path, "/tmp/rampart-fuzz-psi-%d", (int)getpid());
  FILE *f = fopen(psi_path, "w");
  if (!loop || !f)
    abort();
  fputs("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", f);
  fclose(f);
  char *args[] = { "rampartd", "--listen", "127.0.0.1:0", "--memory", "16M", "--lease", "1", "--pressure-file",
                   psi_path, NULL };
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
