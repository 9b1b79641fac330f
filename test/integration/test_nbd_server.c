/* rampart-nbd-server, the engine's own NBD server: real rampartd processes, the real
 * server binary, and libnbd as the client, with QD32 asynchronous requests as fio and
 * the kernel send them. Every byte read back is checked against a shadow copy: through
 * a rampartd killed with SIGKILL mid-stream, with two connections at once (whose
 * threads complete each other's requests), after refused requests and a client that
 * breaks the protocol, and a SIGTERM with requests in flight must end cleanly. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <libnbd.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <endian.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "nbd_handshake.h"
#include "nbd_protocol.h"
#include "xorshift.h"

#define PAGE 4096u
#define QD 32u
#define MAX_LEN (16u * PAGE)

struct setup {
  struct rp_test_cluster cluster;
  char sock[700], log[700];
  pid_t server;
  uint64_t size;
  uint8_t *shadow;
  uint64_t rng;
};

static const char *server_path(void)
{
  const char *p = getenv("RAMPART_NBD_SERVER");
  if (!p)
    fail_msg("RAMPART_NBD_SERVER is not set: run the tests through ctest");
  return p;
}

static void print_log(const char *path)
{
  rp_test_print_file(path, "rampart-nbd-server: ");
}

/* Starts rampart-nbd-server over the cluster with extra settings, and waits for the
 * line it prints once it listens. */
static pid_t spawn_server(struct setup *s, const char *sock, const char *log,
                          const char *const *extra);

static void wait_for_log(pid_t pid, const char *log, const char *what);

static void start_server(struct setup *s, const char *const *extra)
{
  struct rp_test_cluster *c = &s->cluster;
  snprintf(s->sock, sizeof s->sock, "%s/nbd.sock", c->dir);
  snprintf(s->log, sizeof s->log, "%s/nbd-server.log", c->dir);
  s->server = spawn_server(s, s->sock, s->log, extra);
  wait_for_log(s->server, s->log, "rampart-nbd-server: serving");
}

/* rampart-nbd-server on sock over the cluster, with extra settings; its output in log. */
static pid_t spawn_server(struct setup *s, const char *sock, const char *log,
                          const char *const *extra)
{
  struct rp_test_cluster *c = &s->cluster;
  char servers[1024] = "servers=", key[700], tmp[700];
  for (unsigned i = 0; i < c->n; i++) {
    strcat(servers, c->servers[i].addr);
    strcat(servers, i + 1 < c->n ? "," : "");
  }
  snprintf(key, sizeof key, "key=%s", c->key_path);
  snprintf(tmp, sizeof tmp, "tmpdir=%s", c->dir);
  const char *argv[32] = { server_path(), "--unix", sock, "mlock=false", servers, key, tmp };
  unsigned a = 7;
  for (unsigned i = 0; extra && extra[i] && a < 31; i++)
    argv[a++] = extra[i];
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(fd);
  return pid;
}

static void wait_for_log(pid_t pid, const char *log, const char *what)
{
  for (unsigned waited = 0; !rp_test_file_has(log, what); waited += 20) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      print_log(log);
      fail_msg("rampart-nbd-server exited before saying '%s' (its log is above)", what);
    }
    if (waited > 20000) {
      print_log(log);
      fail_msg("rampart-nbd-server did not say '%s' within 20 s", what);
    }
    usleep(20000);
  }
}

static struct nbd_handle *connect_client(struct setup *s)
{
  struct nbd_handle *nbd = nbd_create();
  assert_non_null(nbd);
  if (nbd_connect_unix(nbd, s->sock) < 0) {
    print_log(s->log);
    fail_msg("libnbd cannot connect: %s", nbd_get_error());
  }
  int64_t size = nbd_get_size(nbd);
  assert_true(size > 0);
  if (!s->shadow) {
    s->size = (uint64_t)size;
    s->shadow = calloc(1, s->size);
    assert_non_null(s->shadow);
  }
  assert_int_equal((uint64_t)size, s->size);
  return nbd;
}

static void setup_all(struct setup *s, unsigned servers, const char *const *extra)
{
  s->rng = 0x9e3779b97f4a7c15ull;
  assert_int_equal(rp_test_cluster_start(&s->cluster, servers, "96M", NULL), 0);
  start_server(s, extra);
}

/* SIGTERM, and it must exit 0 within 20 s, then the cluster stops (and checks its
 * servers lived and exited cleanly). */
static void stop_all(struct setup *s)
{
  if (s->server > 0) {
    kill(s->server, SIGTERM);
    int status = -1;
    unsigned waited = 0;
    while (waitpid(s->server, &status, WNOHANG) != s->server) {
      if (waited > 20000) {
        kill(s->server, SIGKILL);
        waitpid(s->server, &status, 0);
        print_log(s->log);
        fail_msg("rampart-nbd-server did not stop within 20 s of SIGTERM");
      }
      usleep(20000);
      waited += 20;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      char how[96];
      print_log(s->log);
      fail_msg("rampart-nbd-server ended with %s on SIGTERM",
               rp_test_describe_status(status, how, sizeof how));
    }
  }
  free(s->shadow);
  rp_test_cluster_stop(&s->cluster);
}

/* ---- asynchronous requests, QD at a time ------------------------------------------- */

struct in_flight {
  struct setup *s;
  uint8_t buf[MAX_LEN];
  uint64_t off;
  uint32_t len;
  bool is_read, busy;
  int error;
};

static int on_complete(void *user, int *error)
{
  struct in_flight *f = user;
  f->busy = false;
  f->error = *error;
  if (*error == 0 && f->is_read && memcmp(f->buf, f->s->shadow + f->off, f->len) != 0) {
    size_t at = 0;
    while (f->buf[at] == f->s->shadow[f->off + at])
      at++;
    f->error = -1; /* told apart from an errno by check_slot */
    fprintf(stderr, "read of %u bytes at %llu: byte %zu is wrong\n", f->len,
            (unsigned long long)f->off, at);
  }
  return 1;
}

static void check_slot(struct in_flight *f, struct nbd_handle *nbd)
{
  if (f->error == -1)
    fail_msg("a read returned wrong bytes (above)");
  if (f->error)
    fail_msg("a %s of %u bytes at %llu failed: %s (%s)", f->is_read ? "read" : "write",
             f->len, (unsigned long long)f->off, strerror(f->error), nbd_get_error());
}

static void wait_free_slot(struct nbd_handle *nbd, struct in_flight *slots, unsigned n,
                           unsigned *which)
{
  for (;;) {
    for (unsigned i = 0; i < n; i++)
      if (!slots[i].busy) {
        check_slot(&slots[i], nbd);
        *which = i;
        return;
      }
    if (nbd_poll(nbd, 10000) <= 0)
      fail_msg("no reply within 10 s: %s", nbd_get_error());
  }
}

static void drain(struct nbd_handle *nbd, struct in_flight *slots, unsigned n)
{
  for (unsigned i = 0; i < n; i++) {
    while (slots[i].busy)
      if (nbd_poll(nbd, 10000) <= 0)
        fail_msg("no reply within 10 s: %s", nbd_get_error());
    check_slot(&slots[i], nbd);
  }
}

/* A write of random bytes in [lo, hi) pages, or a read checked on completion. A page
 * that has a write in flight is neither read nor written again until it completes:
 * the order of two requests in flight at once is the client's to avoid. */
static bool overlaps(const struct in_flight *slots, unsigned n, uint64_t off, uint32_t len)
{
  for (unsigned i = 0; i < n; i++)
    if (slots[i].busy && off < slots[i].off + slots[i].len && slots[i].off < off + len)
      return true;
  return false;
}

static void issue(struct setup *s, struct nbd_handle *nbd, struct in_flight *slots,
                  unsigned n, uint64_t lo, uint64_t hi, bool read)
{
  unsigned i;
  wait_free_slot(nbd, slots, n, &i);
  struct in_flight *f = &slots[i];
  uint64_t off;
  uint32_t len;
  do {
    len = PAGE * (1 + (uint32_t)(rp_xorshift64s(&s->rng) % (MAX_LEN / PAGE)));
    off = PAGE * (lo + rp_xorshift64s(&s->rng) % (hi - lo - len / PAGE + 1));
  } while (overlaps(slots, n, off, len));
  *f = (struct in_flight){ .s = s, .off = off, .len = len, .is_read = read, .busy = true };
  nbd_completion_callback cb = { .callback = on_complete, .user_data = f };
  int64_t r;
  if (read) {
    r = nbd_aio_pread(nbd, f->buf, len, off, cb, 0);
  } else {
    for (uint32_t k = 0; k < len; k += 8) {
      uint64_t v = rp_xorshift64s(&s->rng);
      memcpy(f->buf + k, &v, 8);
    }
    memcpy(s->shadow + off, f->buf, len);
    r = nbd_aio_pwrite(nbd, f->buf, len, off, cb, 0);
  }
  if (r < 0)
    fail_msg("cannot queue a request: %s", nbd_get_error());
}

/* Every page of [lo, hi) read back at QD and compared. */
static void verify_range(struct setup *s, struct nbd_handle *nbd, uint64_t lo, uint64_t hi)
{
  static struct in_flight slots[QD];
  memset(slots, 0, sizeof slots);
  for (uint64_t page = lo; page < hi; page += MAX_LEN / PAGE) {
    unsigned i;
    wait_free_slot(nbd, slots, QD, &i);
    struct in_flight *f = &slots[i];
    uint64_t pages = hi - page < MAX_LEN / PAGE ? hi - page : MAX_LEN / PAGE;
    *f = (struct in_flight){ .s = s,
                             .off = page * PAGE,
                             .len = (uint32_t)(pages * PAGE),
                             .is_read = true,
                             .busy = true };
    nbd_completion_callback cb = { .callback = on_complete, .user_data = f };
    if (nbd_aio_pread(nbd, f->buf, f->len, f->off, cb, 0) < 0)
      fail_msg("cannot queue a read: %s", nbd_get_error());
  }
  drain(nbd, slots, QD);
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_every_byte_through_a_server_killed_mid_stream(void **state)
{
  (void)state;
  struct setup s = { 0 };
  const char *extra[] = { "size=48M", "redundancy=parity-log", "group=4",
                          "lease=1",  "timeout=1000",          NULL };
  setup_all(&s, 5, extra);
  struct nbd_handle *nbd = connect_client(&s);
  /* what the server says of its block sizes, as the handshake gave them */
  assert_int_equal(nbd_get_block_size(nbd, LIBNBD_SIZE_MINIMUM), PAGE);
  assert_int_equal(nbd_can_flush(nbd), 1);
  assert_int_equal(nbd_can_trim(nbd), 1);
  assert_int_equal(nbd_can_zero(nbd), 1);
  assert_int_equal(nbd_can_fua(nbd), 1);
  assert_int_equal(nbd_can_multi_conn(nbd), 1);
  static struct in_flight slots[QD];
  uint64_t pages = s.size / PAGE;
  for (unsigned k = 0; k < 3000; k++) {
    if (k == 1500)
      assert_true(rp_test_server_kill(&s.cluster.servers[2]) >= 0);
    issue(&s, nbd, slots, QD, 0, pages, k % 4 == 3);
    if (k % 500 == 499) { /* trims and zeroes between the streams, in order */
      drain(nbd, slots, QD);
      uint64_t off = PAGE * (rp_xorshift64s(&s.rng) % (pages - 64));
      if (nbd_trim(nbd, 32 * PAGE, off, 0) < 0 ||
          nbd_zero(nbd, 16 * PAGE, off + 48 * PAGE, 0) < 0 || nbd_flush(nbd, 0) < 0)
        fail_msg("trim, zero or flush failed: %s", nbd_get_error());
      memset(s.shadow + off, 0, 32 * PAGE);
      memset(s.shadow + off + 48 * PAGE, 0, 16 * PAGE);
    }
  }
  drain(nbd, slots, QD);
  verify_range(&s, nbd, 0, pages);
  nbd_shutdown(nbd, 0);
  nbd_close(nbd);
  stop_all(&s);
}

static void test_two_connections_at_once(void **state)
{
  (void)state;
  struct setup s = { 0 };
  const char *extra[] = { "size=32M", "redundancy=parity-log", "group=2", NULL };
  setup_all(&s, 3, extra);
  struct nbd_handle *a = connect_client(&s), *b = connect_client(&s);
  static struct in_flight slots_a[QD], slots_b[QD];
  uint64_t half = s.size / PAGE / 2;
  for (unsigned k = 0; k < 2000; k++) {
    issue(&s, a, slots_a, QD, 0, half, k % 3 == 2);
    issue(&s, b, slots_b, QD, half, 2 * half, k % 3 == 1);
  }
  drain(a, slots_a, QD);
  drain(b, slots_b, QD);
  if (nbd_flush(a, 0) < 0)
    fail_msg("flush: %s", nbd_get_error());
  /* each reads the half the other wrote */
  verify_range(&s, a, half, 2 * half);
  verify_range(&s, b, 0, half);
  nbd_shutdown(a, 0);
  nbd_close(a);
  nbd_shutdown(b, 0);
  nbd_close(b);
  stop_all(&s);
}

/* A raw client past the handshake: our own client half (nbd_handshake.c). */
static int raw_client(struct setup *s)
{
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  assert_true(strlen(s->sock) < sizeof a.sun_path);
  memcpy(a.sun_path, s->sock, strlen(s->sock) + 1);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  struct timeval t = { .tv_sec = 10 };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  struct nbd_export ex;
  char err[256];
  if (nbd_handshake(fd, "anything", &ex, err, sizeof err) < 0)
    fail_msg("handshake: %s", err);
  assert_int_equal(ex.size, s->size);
  return fd;
}

/* One request header, as a client sends it. */
static void put_request_flags(uint8_t *to, uint32_t magic, uint16_t flags, uint16_t type,
                              uint64_t handle, uint64_t off, uint32_t len)
{
  struct __attribute__((packed)) {
    uint32_t magic;
    uint16_t flags, type;
    uint64_t handle, offset;
    uint32_t length;
  } h = { htobe32(magic), htobe16(flags), htobe16(type), handle, htobe64(off), htobe32(len) };
  memcpy(to, &h, sizeof h);
}

static void put_request(uint8_t *to, uint32_t magic, uint16_t type, uint64_t handle,
                        uint64_t off, uint32_t len)
{
  put_request_flags(to, magic, 0, type, handle, off, len);
}

/* A simple reply's error and handle, its magic checked. */
struct simple_reply {
  uint32_t error;
  uint64_t handle;
};

static struct simple_reply read_reply(int fd)
{
  struct __attribute__((packed)) {
    uint32_t magic, error;
    uint64_t handle;
  } reply;
  assert_int_equal(read(fd, &reply, sizeof reply), (ssize_t)sizeof reply);
  assert_int_equal(be32toh(reply.magic), NBD_SIMPLE_REPLY_MAGIC);
  return (struct simple_reply){ be32toh(reply.error), reply.handle };
}

static void send_request(int fd, uint32_t magic, uint16_t type, uint64_t off, uint32_t len)
{
  uint8_t h[NBD_REQUEST_SIZE];
  put_request(h, magic, type, 7, off, len);
  assert_int_equal(write(fd, h, sizeof h), (ssize_t)sizeof h);
}

/* The server closes the connection: the read sees its end, not a timeout. */
static void assert_closed(int fd)
{
  uint8_t b[64];
  ssize_t n;
  while ((n = read(fd, b, sizeof b)) > 0)
    ;
  if (n < 0)
    fail_msg("the server did not close the connection: %s", strerror(errno));
}

static void test_bad_requests_get_errors_and_lose_nothing(void **state)
{
  (void)state;
  struct setup s = { 0 };
  const char *extra[] = { "size=8M", NULL };
  setup_all(&s, 2, extra);
  struct nbd_handle *nbd = connect_client(&s);
  uint8_t page[PAGE];
  memset(page, 0x5a, sizeof page);
  assert_int_equal(nbd_pwrite(nbd, page, PAGE, 3 * PAGE, 0), 0);
  memcpy(s.shadow + 3 * PAGE, page, PAGE);
  /* Requests libnbd would refuse itself in strict mode reach the server: they fail with
   * the errors the protocol names, and the connection goes on. */
  assert_int_equal(nbd_set_strict_mode(nbd, 0), 0);
  assert_true(nbd_pread(nbd, page, 512, 100, 0) < 0);
  assert_int_equal(nbd_get_errno(), EINVAL);
  assert_true(nbd_pwrite(nbd, page, PAGE, s.size, 0) < 0); /* past the end */
  assert_true(nbd_get_errno() == EINVAL || nbd_get_errno() == ENOSPC);
  assert_true(nbd_pread(nbd, page, PAGE, s.size - PAGE / 2, 0) < 0);
  assert_int_equal(nbd_pread(nbd, page, PAGE, 3 * PAGE, 0), 0);
  assert_memory_equal(page, s.shadow + 3 * PAGE, PAGE);

  /* A client out of step (no request magic), and one whose write is over the 32 MiB the
   * server takes: each is closed, with the reason in the log, and nothing else ends. */
  int fd = raw_client(&s);
  send_request(fd, 0xdeadbeef, NBD_CMD_READ, 0, PAGE);
  assert_closed(fd);
  close(fd);
  fd = raw_client(&s);
  send_request(fd, NBD_REQUEST_MAGIC, NBD_CMD_WRITE, 0, 64u << 20);
  assert_closed(fd);
  close(fd);
  /* an unknown command gets EINVAL, and the connection goes on */
  fd = raw_client(&s);
  send_request(fd, NBD_REQUEST_MAGIC, 99, 0, 0);
  struct simple_reply reply = read_reply(fd);
  assert_int_equal(reply.error, NBD_EINVAL);
  assert_int_equal(reply.handle, 7);
  send_request(fd, NBD_REQUEST_MAGIC, NBD_CMD_DISC, 0, 0);
  assert_closed(fd);
  close(fd);
  assert_true(rp_test_file_has(s.log, "without NBD's request magic"));
  assert_true(rp_test_file_has(s.log, "over the 33554432 this server takes"));
  /* the first connection still serves, and the bytes are there */
  assert_int_equal(nbd_pread(nbd, page, PAGE, 3 * PAGE, 0), 0);
  assert_memory_equal(page, s.shadow + 3 * PAGE, PAGE);
  nbd_shutdown(nbd, 0);
  nbd_close(nbd);
  stop_all(&s);
}

/* NBD_CMD_FLAG_DF: only for structured replies, which this server does not offer. */
#define NBD_CMD_FLAG_DF 0x4u

/* Writes refused before the engine (a flag that was not offered, a range past the end)
 * get their errors, and their payloads are read and dropped: the page keeps its bytes
 * and the next request on the connection is answered. */
static void test_refused_writes_drop_their_payloads(void **state)
{
  (void)state;
  struct setup s = { 0 };
  const char *extra[] = { "size=8M", NULL };
  setup_all(&s, 2, extra);
  struct nbd_handle *nbd = connect_client(&s);
  uint8_t page[PAGE];
  memset(page, 0x5a, sizeof page);
  assert_int_equal(nbd_pwrite(nbd, page, PAGE, 3 * PAGE, 0), 0);
  int fd = raw_client(&s);
  enum { ONE = NBD_REQUEST_SIZE + PAGE };
  static uint8_t out[2 * ONE + NBD_REQUEST_SIZE];
  memset(out, 0xee, sizeof out);
  put_request_flags(out, NBD_REQUEST_MAGIC, NBD_CMD_FLAG_DF, NBD_CMD_WRITE, 8, 3 * PAGE,
                    PAGE);
  put_request(out + ONE, NBD_REQUEST_MAGIC, NBD_CMD_WRITE, 9, s.size, PAGE);
  put_request(out + 2 * ONE, NBD_REQUEST_MAGIC, NBD_CMD_READ, 10, 3 * PAGE, PAGE);
  assert_int_equal(write(fd, out, sizeof out), (ssize_t)sizeof out);
  uint32_t error_of[3] = { 0 };
  bool seen[3] = { false };
  for (unsigned i = 0; i < 3; i++) {
    struct simple_reply reply = read_reply(fd);
    assert_true(reply.handle >= 8 && reply.handle <= 10 && !seen[reply.handle - 8]);
    seen[reply.handle - 8] = true;
    error_of[reply.handle - 8] = reply.error;
    if (reply.handle == 10 && reply.error == 0) {
      uint8_t in[PAGE];
      size_t got = 0;
      ssize_t n;
      while (got < PAGE && (n = read(fd, in + got, PAGE - got)) > 0)
        got += (size_t)n;
      assert_int_equal(got, PAGE);
      assert_memory_equal(in, page, PAGE); /* not the refused write's 0xee */
    }
  }
  assert_int_equal(error_of[0], NBD_EINVAL);
  assert_int_equal(error_of[1], NBD_ENOSPC);
  assert_int_equal(error_of[2], 0);
  close(fd);
  nbd_shutdown(nbd, 0);
  nbd_close(nbd);
  stop_all(&s);
}

static void test_sigterm_answers_what_is_in_flight(void **state)
{
  (void)state;
  struct setup s = { 0 };
  const char *extra[] = { "size=16M", NULL };
  setup_all(&s, 2, extra);
  s.size = 16u << 20;
  int fd = raw_client(&s);
  /* QD writes in one send, so all are in the server's socket when SIGTERM comes */
  enum { ONE = NBD_REQUEST_SIZE + PAGE };
  static uint8_t burst[QD * ONE];
  for (unsigned i = 0; i < QD; i++) {
    put_request(burst + i * ONE, NBD_REQUEST_MAGIC, NBD_CMD_WRITE, i, (uint64_t)i * 7 * PAGE,
                PAGE);
    memset(burst + i * ONE + NBD_REQUEST_SIZE, (int)i, PAGE);
  }
  assert_int_equal(write(fd, burst, sizeof burst), (ssize_t)sizeof burst);
  kill(s.server, SIGTERM);
  /* Every one is answered, without error, before the connection ends. */
  bool answered[QD] = { false };
  for (unsigned i = 0; i < QD; i++) {
    struct __attribute__((packed)) {
      uint32_t magic, error;
      uint64_t handle;
    } reply;
    ssize_t n = read(fd, &reply, sizeof reply);
    if (n != (ssize_t)sizeof reply) {
      waitpid(s.server, NULL, 0);
      print_log(s.log);
    }
    if (n != (ssize_t)sizeof reply)
      fail_msg("the connection ended after %u of the %u writes sent before SIGTERM were "
               "answered",
               i, QD);
    assert_int_equal(be32toh(reply.magic), NBD_SIMPLE_REPLY_MAGIC);
    assert_int_equal(be32toh(reply.error), 0);
    assert_true(reply.handle < QD && !answered[reply.handle]);
    answered[reply.handle] = true;
  }
  assert_closed(fd);
  close(fd);
  int status;
  assert_int_equal(waitpid(s.server, &status, 0), s.server);
  s.server = 0;
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_true(rp_test_file_has(s.log, "stopping once"));
  stop_all(&s);
}

/* The daemon's crash, as rampart-swap deploys it: a standby with the same settings and
 * standby=true waits on its own socket; the serving one is killed with SIGKILL; the
 * standby takes the state over, and a client reconnecting to the standby's socket (as
 * rampart-nbd-attach moves /dev/nbdN) reads every byte written before the kill. */
static void test_a_standby_takes_over_a_killed_server(void **state)
{
  (void)state;
  struct setup s = { 0 };
  char statep[700];
  assert_int_equal(rp_test_cluster_start(&s.cluster, 3, "96M", NULL), 0);
  s.rng = 0x5eed;
  snprintf(statep, sizeof statep, "state=%s/state", s.cluster.dir);
  const char *extra[] = { "size=16M", statep, "lease=30", NULL };
  start_server(&s, extra);
  char sock_b[700], log_b[700];
  snprintf(sock_b, sizeof sock_b, "%s/standby.sock", s.cluster.dir);
  snprintf(log_b, sizeof log_b, "%s/standby.log", s.cluster.dir);
  const char *standby_extra[] = { "size=16M", statep, "lease=30", "standby=true", NULL };
  pid_t standby = spawn_server(&s, sock_b, log_b, standby_extra);
  wait_for_log(standby, log_b, "standing by for the pager serving");

  struct nbd_handle *nbd = connect_client(&s);
  static struct in_flight slots[QD];
  for (unsigned k = 0; k < 1000; k++)
    issue(&s, nbd, slots, QD, 0, s.size / PAGE, k % 4 == 3);
  drain(nbd, slots, QD);
  assert_int_equal(nbd_flush(nbd, 0), 0);
  nbd_close(nbd);
  kill(s.server, SIGKILL);
  waitpid(s.server, NULL, 0);
  s.server = standby;
  strcpy(s.sock, sock_b);
  strcpy(s.log, log_b);
  wait_for_log(standby, log_b, "after its pager died");
  nbd = connect_client(&s);
  verify_range(&s, nbd, 0, s.size / PAGE);
  nbd_shutdown(nbd, 0);
  nbd_close(nbd);
  stop_all(&s);
}

/* ---- hostile clients ---------------------------------------------------------------- */

/* A unix socket connected to the server, with its greeting read (so the server has
 * taken it and its handshake has begun), or -1 when the server closed it at once (all
 * its connections are taken). */
static int connect_greeted(const struct setup *s)
{
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  memcpy(a.sun_path, s->sock, strlen(s->sock) + 1);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  struct timeval t = { .tv_sec = 10 };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  uint8_t greeting[18];
  size_t got = 0;
  ssize_t n;
  while (got < sizeof greeting && (n = read(fd, greeting + got, sizeof greeting - got)) > 0)
    got += (size_t)n;
  if (got < sizeof greeting) {
    close(fd);
    return -1;
  }
  return fd;
}

/* True once the server has closed its side of fd (poll says HUP), within ms. */
static bool closed_within(int fd, unsigned ms)
{
  struct pollfd p = { .fd = fd, .events = POLLRDHUP };
  return poll(&p, 1, (int)ms) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

/* A write of 16 pages of random bytes at page, read back and compared. False when the
 * client was not served (nbd_get_error says why). */
static bool try_write_read_back(struct setup *s, struct nbd_handle *nbd, uint64_t page)
{
  static uint8_t out[16 * PAGE], in[16 * PAGE];
  for (size_t k = 0; k < sizeof out; k += 8) {
    uint64_t v = rp_xorshift64s(&s->rng);
    memcpy(out + k, &v, 8);
  }
  if (nbd_pwrite(nbd, out, sizeof out, page * PAGE, 0) < 0 ||
      nbd_pread(nbd, in, sizeof in, page * PAGE, 0) < 0)
    return false;
  assert_memory_equal(in, out, sizeof out);
  return true;
}

static void write_read_back(struct setup *s, struct nbd_handle *nbd, uint64_t page)
{
  if (!try_write_read_back(s, nbd, page))
    fail_msg("a client beside the hostile ones was not served: %s", nbd_get_error());
}

/* SIGTERM must end the server, with status 0, within ms. */
static void assert_stops_within(struct setup *s, unsigned ms)
{
  uint64_t start = rp_test_now_ms();
  kill(s->server, SIGTERM);
  int status;
  while (waitpid(s->server, &status, WNOHANG) != s->server) {
    if (rp_test_now_ms() - start > ms) {
      kill(s->server, SIGKILL);
      waitpid(s->server, &status, 0);
      s->server = 0;
      print_log(s->log);
      fail_msg("rampart-nbd-server did not end within %u ms of SIGTERM", ms);
    }
    rp_test_sleep_ms(20);
  }
  s->server = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    char how[96];
    print_log(s->log);
    fail_msg("rampart-nbd-server ended with %s on SIGTERM",
             rp_test_describe_status(status, how, sizeof how));
  }
  printf("SIGTERM ended rampart-nbd-server in %llu ms\n",
         (unsigned long long)(rp_test_now_ms() - start));
}

#define HOSTILE 2
#define HUGE_READ (32u << 20)
/* The server's resident memory may grow by the buffers the hostile connections may
 * hold (32 MiB each), the other client's, and little more. */
#define RSS_GROWTH_BOUND_KIB (160l << 10)

/* Watches a process's resident memory from a thread of its own, and kills it the
 * moment it grows past the bound: the test's own client may be stuck behind the
 * server's work, and a server without a bound would take the machine's memory. */
struct rss_watch {
  pid_t pid;
  long base_kib;
  atomic_long peak_kib;
  atomic_bool stop, killed;
  pthread_t thread;
};

static void *watch_rss(void *arg)
{
  struct rss_watch *w = arg;
  while (!atomic_load(&w->stop)) {
    long kib = rp_test_process_status_kib(w->pid, "VmRSS");
    if (kib > atomic_load(&w->peak_kib))
      atomic_store(&w->peak_kib, kib);
    if (kib - w->base_kib > RSS_GROWTH_BOUND_KIB) {
      kill(w->pid, SIGKILL);
      atomic_store(&w->killed, true);
      return NULL;
    }
    rp_test_sleep_ms(5);
  }
  return NULL;
}

/* Ends the watch; fails the test, the server reaped, if it had to kill it. */
static void end_rss_watch(struct rss_watch *w, struct setup *s)
{
  atomic_store(&w->stop, true);
  pthread_join(w->thread, NULL);
  if (!atomic_load(&w->killed))
    return;
  waitpid(s->server, NULL, 0);
  s->server = 0;
  fail_msg("rampart-nbd-server's resident memory grew by %ld MiB, past the %ld MiB bound, "
           "for %u clients' unread reads (killed there)",
           (atomic_load(&w->peak_kib) - w->base_kib) >> 10, RSS_GROWTH_BOUND_KIB >> 10,
           HOSTILE);
}

/* Clients that pipeline 256 reads of 32 MiB each and never read a reply: each may make
 * the daemon hold one read's buffer, not 8 GiB; a client beside them is served; and
 * SIGTERM ends the daemon in seconds though they never read what it answers. */
static void test_clients_that_pipeline_huge_reads_hold_bounded_memory(void **state)
{
  (void)state;
  struct setup s = { 0 };
  const char *extra[] = { "size=64M", NULL };
  setup_all(&s, 2, extra);
  struct nbd_handle *nbd = connect_client(&s);
  write_read_back(&s, nbd, 0);
  static struct rss_watch w;
  w = (struct rss_watch){ .pid = s.server,
                          .base_kib = rp_test_process_status_kib(s.server, "VmRSS") };
  assert_true(w.base_kib > 0);
  atomic_store(&w.peak_kib, w.base_kib);
  assert_int_equal(pthread_create(&w.thread, NULL, watch_rss, &w), 0);
  int hostile[HOSTILE];
  static uint8_t burst[256 * NBD_REQUEST_SIZE];
  for (unsigned i = 0; i < 256; i++)
    put_request(burst + i * NBD_REQUEST_SIZE, NBD_REQUEST_MAGIC, NBD_CMD_READ, i, 0,
                HUGE_READ);
  for (unsigned h = 0; h < HOSTILE; h++) {
    hostile[h] = raw_client(&s);
    assert_int_equal(write(hostile[h], burst, sizeof burst), (ssize_t)sizeof burst);
  }
  /* served while the reads are answered and their replies pile up unread */
  for (unsigned k = 0; k < 10; k++) {
    bool served = try_write_read_back(&s, nbd, 64 + k * 16);
    if (!served)
      end_rss_watch(&w, &s);
    if (!served)
      fail_msg("a client beside the hostile ones was not served: %s", nbd_get_error());
    rp_test_sleep_ms(200);
  }
  end_rss_watch(&w, &s);
  printf("resident memory %ld MiB before the hostile clients, at most %ld MiB with them "
         "(bound: +%ld MiB)\n",
         w.base_kib >> 10, atomic_load(&w.peak_kib) >> 10, RSS_GROWTH_BOUND_KIB >> 10);
  nbd_close(nbd);
  assert_stops_within(&s, 10000);
  assert_true(rp_test_file_has(s.log, "stopping, and the client has not read its replies"));
  for (unsigned h = 0; h < HOSTILE; h++)
    close(hostile[h]);
  stop_all(&s);
}

/* Waits for every command in cookies to complete; fails on an error. */
static void wait_commands(struct nbd_handle *nbd, const int64_t *cookies, unsigned n)
{
  for (unsigned i = 0; i < n; i++) {
    int r;
    while ((r = nbd_aio_command_completed(nbd, cookies[i])) == 0)
      if (nbd_poll(nbd, 10000) <= 0)
        fail_msg("no reply within 10 s: %s", nbd_get_error());
    if (r < 0)
      fail_msg("request %u of a deep queue failed: %s", i, nbd_get_error());
  }
}

/* The kernel's queue of large requests (depth 128, up to 2 MiB each) far exceeds one
 * connection's 32 MiB of buffers: the server holds the rest back, unread, and every
 * request succeeds with its bytes. */
static void test_a_deep_queue_of_large_requests_waits_and_never_fails(void **state)
{
  (void)state;
  struct setup s = { 0 };
  const char *extra[] = { "size=64M", NULL };
  setup_all(&s, 2, extra);
  struct nbd_handle *nbd = connect_client(&s);
  enum { BIG = 2u << 20, SLOTS = 32, READS = 128 };
  uint8_t *data = malloc((size_t)SLOTS * BIG), *in = malloc((size_t)READS * BIG);
  assert_non_null(data);
  assert_non_null(in);
  for (size_t k = 0; k < (size_t)SLOTS * BIG; k += 8) {
    uint64_t v = rp_xorshift64s(&s.rng);
    memcpy(data + k, &v, 8);
  }
  static int64_t cookies[READS];
  uint64_t start = rp_test_now_ms();
  for (unsigned i = 0; i < SLOTS; i++)
    cookies[i] = nbd_aio_pwrite(nbd, data + (size_t)i * BIG, BIG, (uint64_t)i * BIG,
                                NBD_NULL_COMPLETION, 0);
  wait_commands(nbd, cookies, SLOTS);
  for (unsigned i = 0; i < READS; i++)
    cookies[i] = nbd_aio_pread(nbd, in + (size_t)i * BIG, BIG, (uint64_t)(i % SLOTS) * BIG,
                               NBD_NULL_COMPLETION, 0);
  wait_commands(nbd, cookies, READS);
  for (unsigned i = 0; i < READS; i++)
    if (memcmp(in + (size_t)i * BIG, data + (size_t)(i % SLOTS) * BIG, BIG) != 0)
      fail_msg("read %u of a deep queue returned wrong bytes", i);
  printf("%u writes and %u reads of 2 MiB, all at once, in %llu ms\n", SLOTS, READS,
         (unsigned long long)(rp_test_now_ms() - start));
  free(data);
  free(in);
  nbd_shutdown(nbd, 0);
  nbd_close(nbd);
  stop_all(&s);
}

/* 64 clients that send their handshake a byte every 2 s hold every connection the
 * server takes; once the handshake's deadline (10 s) has passed they are closed, and a
 * new client is served. */
static void test_slow_handshakes_do_not_keep_a_client_out(void **state)
{
  (void)state;
  struct setup s = { 0 };
  const char *extra[] = { "size=8M", NULL };
  setup_all(&s, 2, extra);
  enum { SLOW = 64 };
  int slow[SLOW];
  for (unsigned i = 0; i < SLOW; i++) {
    slow[i] = connect_greeted(&s);
    assert_true(slow[i] >= 0);
  }
  /* fixed newstyle, then an NBD_OPT_LIST option, one byte at a time */
  struct __attribute__((packed)) {
    uint32_t flags;
    uint64_t magic;
    uint32_t option, length;
  } stream = { htobe32(NBD_HANDSHAKE_FIXED_NEWSTYLE), htobe64(NBD_OPTION_MAGIC),
               htobe32(NBD_OPT_LIST), 0 };
  const uint8_t *bytes = (const uint8_t *)&stream;
  int full = connect_greeted(&s);
  assert_int_equal(full, -1); /* every connection is taken */
  assert_true(rp_test_file_has(s.log, "64 are open already"));
  uint64_t start = rp_test_now_ms();
  bool served = false;
  for (unsigned sent = 0; !served && sent < 12; sent++) { /* 24 s at most */
    for (unsigned i = 0; i < SLOW; i++)
      send(slow[i], bytes + sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    rp_test_sleep_ms(2000);
    int fd = connect_greeted(&s);
    if (fd >= 0) {
      close(fd);
      served = true;
    }
  }
  unsigned long waited = (unsigned long)(rp_test_now_ms() - start);
  if (!served) {
    print_log(s.log);
    fail_msg("no new client was let in for %lu ms while 64 clients trickled their "
             "handshakes",
             waited);
  }
  printf("a new client got a connection %lu ms after 64 slow handshakes took them all\n",
         waited);
  assert_true(rp_test_file_has(s.log, "its time ran out"));
  struct nbd_handle *nbd = connect_client(&s);
  write_read_back(&s, nbd, 16);
  nbd_shutdown(nbd, 0);
  nbd_close(nbd);
  for (unsigned i = 0; i < SLOW; i++)
    close(slow[i]);
  stop_all(&s);
}

/* A client that sends reads and never reads the replies is closed once its replies
 * have waited --stall-timeout (2 s here), and so is one that leaves a write half sent;
 * a client beside them is served all along, and one that stays idle is never closed. */
static void test_clients_that_stall_are_closed_idle_ones_are_not(void **state)
{
  (void)state;
  struct setup s = { 0 };
  const char *extra[] = { "size=32M", "--stall-timeout", "2", NULL };
  setup_all(&s, 2, extra);
  struct nbd_handle *nbd = connect_client(&s);
  int idle = raw_client(&s), half = raw_client(&s), fd = raw_client(&s);
  /* a write of 64 KiB of which 1000 bytes come */
  static uint8_t partial[NBD_REQUEST_SIZE + 1000];
  put_request(partial, NBD_REQUEST_MAGIC, NBD_CMD_WRITE, 1, 0, 16 * PAGE);
  assert_int_equal(write(half, partial, sizeof partial), (ssize_t)sizeof partial);
  /* 64 reads of 1 MiB: far more than the socket holds */
  static uint8_t burst[64 * NBD_REQUEST_SIZE];
  for (unsigned i = 0; i < 64; i++)
    put_request(burst + i * NBD_REQUEST_SIZE, NBD_REQUEST_MAGIC, NBD_CMD_READ, i,
                (uint64_t)i * (1u << 20) % s.size, 1u << 20);
  /* The clock starts before the burst is written: the server's stall clock can start
   * while write() is still returning, and a later start reads short under load. */
  uint64_t start = rp_test_now_ms();
  assert_int_equal(write(fd, burst, sizeof burst), (ssize_t)sizeof burst);
  bool closed = false;
  for (unsigned k = 0; !closed && k < 40; k++) {
    write_read_back(&s, nbd, 16 * (k % 64));
    closed = closed_within(fd, 200);
  }
  unsigned long waited = (unsigned long)(rp_test_now_ms() - start);
  if (!closed) {
    print_log(s.log);
    fail_msg("a client that read no replies was still connected %lu ms later", waited);
  }
  printf("a client that read no replies was closed after %lu ms\n", waited);
  assert_true(waited >= 2000);
  assert_true(rp_test_file_has(s.log, "has not read its replies for 2 s"));
  assert_true(closed_within(half, 2000));
  assert_true(rp_test_file_has(s.log, "left a request half sent for 2 s"));
  close(fd);
  close(half);
  /* idle for longer than the stall timeout, and still served */
  send_request(idle, NBD_REQUEST_MAGIC, NBD_CMD_FLUSH, 0, 0);
  struct simple_reply reply = read_reply(idle);
  assert_int_equal(reply.error, 0);
  assert_int_equal(reply.handle, 7);
  close(idle);
  write_read_back(&s, nbd, 100);
  nbd_shutdown(nbd, 0);
  nbd_close(nbd);
  stop_all(&s);
}

/* The handshake takes at most 32 options, and only the client flags it knows. */
static void test_handshake_bounds(void **state)
{
  (void)state;
  struct setup s = { 0 };
  const char *extra[] = { "size=8M", NULL };
  setup_all(&s, 2, extra);
  int fd = connect_greeted(&s);
  assert_true(fd >= 0);
  uint32_t flags = htobe32(NBD_HANDSHAKE_FIXED_NEWSTYLE | NBD_HANDSHAKE_NO_ZEROES);
  assert_int_equal(write(fd, &flags, 4), 4);
  struct __attribute__((packed)) {
    uint64_t magic;
    uint32_t option, length;
  } list = { htobe64(NBD_OPTION_MAGIC), htobe32(NBD_OPT_LIST), 0 };
  for (unsigned i = 0; i < 40; i++)
    if (send(fd, &list, sizeof list, MSG_NOSIGNAL) != (ssize_t)sizeof list)
      break; /* closed already */
  assert_closed(fd);
  close(fd);
  assert_true(rp_test_file_has(s.log, "more than 32 options"));
  fd = connect_greeted(&s);
  assert_true(fd >= 0);
  flags = htobe32(NBD_HANDSHAKE_FIXED_NEWSTYLE | 0x100);
  assert_int_equal(write(fd, &flags, 4), 4);
  assert_closed(fd);
  close(fd);
  assert_true(rp_test_file_has(s.log, "client flags this server does not know"));
  stop_all(&s);
}

static void test_arguments_refused_with_a_reason(void **state)
{
  (void)state;
  static const struct rp_test_refusal cases[] = {
    { { "--unix", "/tmp/x.sock", "--depth", "lots", "size=1M", NULL },
      "--depth 'lots': give a number" },
    { { "size=1M", NULL }, "give one of --unix PATH or --tcp HOST:PORT" },
    { { "--unix", "/tmp/x.sock", "size=lots", NULL }, "size" },
    { { "--unix", "/tmp/x.sock", "colour=red", "size=1M", NULL }, "colour" },
    { { "--unix", "/tmp/x.sock", "--frobnicate", NULL },
      "unexpected argument '--frobnicate'" },
    { { "--unix", "/tmp/x.sock", "mlock=maybe", "size=1M", NULL },
      "mlock=maybe: give true or false" },
    { { "--unix", "/tmp/x.sock", "standby=true", "size=1M", NULL },
      "standby=true needs state=PATH" },
    { { "--unix", "/tmp/x.sock", "--max-buffered", "1M", "size=1M", NULL }, "at least 32M" },
    { { "--unix", "/tmp/x.sock", "--stall-timeout", "0", "size=1M", NULL },
      "whole seconds from 1" },
  };
  rp_test_expect_refusals(server_path(), cases, sizeof cases / sizeof cases[0]);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_every_byte_through_a_server_killed_mid_stream),
    cmocka_unit_test(test_two_connections_at_once),
    cmocka_unit_test(test_bad_requests_get_errors_and_lose_nothing),
    cmocka_unit_test(test_sigterm_answers_what_is_in_flight),
    cmocka_unit_test(test_a_standby_takes_over_a_killed_server),
    cmocka_unit_test(test_refused_writes_drop_their_payloads),
    cmocka_unit_test(test_clients_that_pipeline_huge_reads_hold_bounded_memory),
    cmocka_unit_test(test_a_deep_queue_of_large_requests_waits_and_never_fails),
    cmocka_unit_test(test_slow_handshakes_do_not_keep_a_client_out),
    cmocka_unit_test(test_clients_that_stall_are_closed_idle_ones_are_not),
    cmocka_unit_test(test_handshake_bounds),
    cmocka_unit_test(test_arguments_refused_with_a_reason),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
