/* libFuzzer target for rampart-nbd-server's side of a connection
 * (nbd/nbd_server_handshake.c, nbd/nbd_server_conn.c): what an NBD client sends. One
 * engine serves every input: standalone, a 4 MiB RAM disk with no servers, so what is
 * fuzzed is the NBD server, not the network. Each input is the byte stream a client
 * sends on one connection (a socketpair). The first byte picks the mode: odd, the input
 * is the whole stream from the greeting on (client flags, options, garbage: the
 * handshake must refuse what is wrong and never wait past the stream's end); even, a
 * valid handshake (fixed newstyle, NBD_OPT_GO) goes first and the input is the
 * transmission phase: requests, payloads and garbage. The client's side is shut once
 * the input is written, so the connection ends by EOF.
 *
 * The buffer budgets are small (one largest request per connection, a quarter of it
 * unshared; two for the daemon, of which another connection holds half a request's
 * worth), so pipelined reads and writes wait for replies to drain; refused writes'
 * payloads are read and dropped.
 *
 * Properties: the connection's thread ends (no hang, no crash; ASan and UBSan clean);
 * whatever the server sent after the handshake is a sequence of simple replies, each
 * with the reply magic; every byte of the budgets comes back when it ends.
 */
#include <endian.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nbd_buffer_budget.h"
#include "nbd_protocol.h"
#include "nbd_server_conn.h"
#include "rampart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_BLOCK (1u << 20)
#define HELD_ELSEWHERE (MAX_BLOCK / 2) /* as if another connection had it */

static struct rampart_engine *engine;
static const struct nbd_server_export export = {
  .size = 4u << 20,
  .transmission_flags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
                        NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES,
  .min_block = 4096,
  .preferred_block = 4096,
  .max_block = MAX_BLOCK,
};

static struct nbd_buffer_budget all_buffers;
static const struct nbd_server_limits limits = {
  .depth = 32,
  .connection_buffers = MAX_BLOCK,
  .unshared_buffers = MAX_BLOCK / 4,
  .all_buffers = &all_buffers,
  .handshake_ms = 10000,
  .stall_ms = 10000,
  .stopping_ms = 1000,
};

static void quiet(int level, const char *line)
{
  (void)level;
  (void)line;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  rampart_set_log_sink(quiet);
  signal(SIGPIPE, SIG_IGN); /* as rampart-nbd-server does: a client that left is an error */
  struct rampart_config *config = rampart_config_new();
  char err[256];
  if (!config || rampart_config_set(config, "size", "4M", err, sizeof err) < 0 ||
      !(engine = rampart_open(config, err, sizeof err))) {
    fprintf(stderr, "fuzz_nbd_server: cannot open a standalone engine: %s\n", err);
    abort();
  }
  rampart_config_free(config);
  nbd_buffer_budget_init(&all_buffers, 2 * MAX_BLOCK);
  if (!nbd_buffer_budget_take(&all_buffers, HELD_ELSEWHERE))
    abort();
  return 0;
}

/* Everything the server sends until it closes. */
static size_t read_all(int fd, uint8_t *buf, size_t cap)
{
  size_t got = 0;
  for (;;) {
    uint8_t sink[65536];
    uint8_t *to = got < cap ? buf + got : sink;
    size_t room = got < cap ? cap - got : sizeof sink;
    ssize_t n = read(fd, to, room);
    if (n <= 0)
      return got < cap ? got : cap;
    got += (size_t)n;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1)
    return 0;
  bool raw = data[0] & 1;
  data++;
  size--;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    abort();
  int big = 8 << 20; /* the whole input fits: the write below never waits for the server */
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  char err[256];
  struct nbd_server_conn *conn = nbd_server_conn_start(engine, sv[0], &export, &limits, err,
                                                       sizeof err);
  if (!conn)
    abort();
  size_t skip_out = 0;
  if (!raw) {
    struct __attribute__((packed)) {
      uint32_t client_flags;
      uint64_t magic;
      uint32_t option, length;
      uint32_t name_length;
      uint16_t nrequests;
    } go = { htobe32(NBD_HANDSHAKE_FIXED_NEWSTYLE | NBD_HANDSHAKE_NO_ZEROES),
             htobe64(NBD_OPTION_MAGIC),
             htobe32(NBD_OPT_GO),
             htobe32(6),
             0,
             0 };
    if (write(sv[1], &go, sizeof go) != (ssize_t)sizeof go)
      abort();
    /* greeting, NBD_REP_INFO (export), NBD_REP_ACK */
    skip_out = 18 + (20 + 12) + 20;
  }
  for (size_t off = 0; off < size;) {
    ssize_t n = write(sv[1], data + off, size - off);
    if (n <= 0)
      break; /* the server closed early: a refused handshake or a broken request */
    off += (size_t)n;
  }
  shutdown(sv[1], SHUT_WR);
  static uint8_t out[1 << 20];
  size_t got = read_all(sv[1], out, sizeof out);
  close(sv[1]);
  nbd_server_conn_join(conn);
  if (atomic_load(&all_buffers.used) != HELD_ELSEWHERE) {
    fprintf(stderr, "the connection ended holding %llu bytes of the buffer budget\n",
            (unsigned long long)(atomic_load(&all_buffers.used) - HELD_ELSEWHERE));
    abort();
  }
  if (raw || got <= skip_out)
    return 0;
  /* After the handshake: simple replies, each with its magic (a read's data between
   * them is only checked for where it ends when its length is known, so only the first
   * reply is checked when reads with data may be among them). */
  uint32_t magic;
  if (got - skip_out >= 4) {
    memcpy(&magic, out + skip_out, 4);
    if (be32toh(magic) != NBD_SIMPLE_REPLY_MAGIC) {
      fprintf(stderr, "the first reply has magic 0x%08x\n", be32toh(magic));
      abort();
    }
  }
  return 0;
}
