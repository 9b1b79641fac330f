/* rampart-nbd-server: the rampart engine as an NBD server of its own, with no thread per
 * request.
 *
 *   rampart-nbd-server --unix /run/rampart/nbd.sock size=4G servers=... key=...
 *
 * The same KEY=VALUE settings as `nbdkit rampart`. Each client connection is served on
 * one thread (nbd_server_conn.c) that takes a batch of requests per wake and reads the
 * engine's replies itself, where nbdkit runs each request on a worker thread of its own
 * that sleeps until the engine's I/O thread wakes it. It prints the address it listens
 * on to stdout once clients can connect; SIGTERM or SIGINT stops it once every request
 * in flight has been answered, or its client has not read the answers for STOPPING_MS.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include "nbd_protocol.h"
#include "nbd_server_conn.h"
#include "parse.h"
#include "rampart.h"

#define MAX_CONNECTIONS 64
#define MAX_DEPTH 512 /* two iovecs a reply: one sendmsg (IOV_MAX 1024) takes them all */
#define MAX_REQUEST (32u << 20)
/* What each connection holds outside --max-buffered: room to keep buffers for a swap
 * device's bursts of larger requests (merged writes, readahead) between them. */
#define UNSHARED_BUFFERS (2u << 20)
/* Once stopping, a client that does not read the replies to what it sent goes this
 * long after the stop: SIGTERM ends the daemon within it, plus the engine's time. */
#define STOPPING_MS 5000u
#define MAX_TIMEOUT_S 3600u

static const char usage[] =
  "usage: rampart-nbd-server (--unix PATH | --tcp HOST:PORT) [--depth N]\n"
  "                          [--max-buffered SIZE] [--handshake-timeout S]\n"
  "                          [--stall-timeout S] KEY=VALUE...\n"
  "       rampart-nbd-server --state-layout\n"
  "  --unix PATH     listen on a unix socket (created mode 0600; an old one is replaced)\n"
  "  --tcp H:P       listen on TCP, e.g. 127.0.0.1:10809 (NBD carries no authentication:\n"
  "                  keep it on loopback or a trusted network)\n"
  "  --depth N       requests in flight per connection (default 256; at most 512)\n"
  "  --max-buffered SIZE  request buffers of all connections together, past the first\n"
  "                  2M of each (default 128M, at least 32M); a connection holds at most\n"
  "                  32M. A client whose next request does not fit waits, unread, until\n"
  "                  replies drain\n"
  "  --handshake-timeout S  seconds a client has for the whole handshake (default 10)\n"
  "  --stall-timeout S  a client that leaves a request half sent, or does not read its\n"
  "                  replies, for S seconds is closed (default 30). An idle connection\n"
  "                  never is: a swap device can be idle for hours\n"
  "  --state-layout  print the layout of the state this build takes over, and exit\n"
  "  With NOTIFY_SOCKET set it tells its supervisor READY=1 once it serves or stands\n"
  "  by, and RAMPART_TOOK_OVER=1 at a takeover (the sd_notify protocol).\n"
  "  Requests must be aligned to 4096 bytes (NBD_INFO_BLOCK_SIZE says so) and at most\n"
  "  32 MiB long. Any export name reaches the one device. At most 64 connections, and\n"
  "  32 options in a handshake. SIGTERM answers what clients have sent, then ends; a\n"
  "  client that does not read those replies is closed 5 s after it.\n"
  "  KEY=VALUE       nbdkit rampart's keys, so one command line serves either:\n"
  "  mlock=BOOL      lock the daemon's memory (default true; a swap device must)\n"
  "  standby=BOOL    with state=: listen, then wait beside the daemon serving that state\n"
  "                  and take it over the moment it dies (docs/recovery.md)\n"
  "  and the engine's settings:\n";

struct options {
  const char *unix_path;
  const char *tcp;
  unsigned depth;
  uint64_t max_buffered;
  unsigned handshake_s, stall_s;
  struct rampart_frontend_switches switches;
};

/* One of the daemon's own arguments (struct rampart_frontend_args's option). */
static int take_option(void *ctx, const char *a, const char *value)
{
  struct options *o = ctx;
  char err[512];
  if (strcmp(a, "--unix") == 0 || strcmp(a, "--tcp") == 0) {
    if (!value) {
      fprintf(stderr, "rampart-nbd-server: %s needs a value\n%s", a, usage);
      return -1;
    }
    *(a[2] == 'u' ? &o->unix_path : &o->tcp) = value;
    return 2;
  }
  if (strcmp(a, "--depth") == 0)
    return rampart_frontend_count("rampart-nbd-server", a, value, MAX_DEPTH, "a number",
                                  &o->depth);
  if (strcmp(a, "--handshake-timeout") == 0)
    return rampart_frontend_count("rampart-nbd-server", a, value, MAX_TIMEOUT_S,
                                  "whole seconds", &o->handshake_s);
  if (strcmp(a, "--stall-timeout") == 0)
    return rampart_frontend_count("rampart-nbd-server", a, value, MAX_TIMEOUT_S,
                                  "whole seconds", &o->stall_s);
  if (strcmp(a, "--max-buffered") == 0) {
    uint64_t v;
    if (!value || rp_parse_size(a, value, &v, err, sizeof err) < 0 || v < MAX_REQUEST) {
      fprintf(stderr,
              "rampart-nbd-server: --max-buffered '%s': give a size of at least "
              "32M (one request of the longest this server takes), e.g. 128M\n",
              value ? value : "");
      return -1;
    }
    o->max_buffered = v;
    return 2;
  }
  return 0;
}

/* The options together, once every argument is read. */
static int check_options(void *ctx, const struct rampart_config *config)
{
  const struct options *o = ctx;
  if (!o->unix_path == !o->tcp) {
    fprintf(stderr, "rampart-nbd-server: give one of --unix PATH or --tcp HOST:PORT\n");
    return -1;
  }
  return 0;
}

/* The engine: opened at once, or, for a standby, once the daemon it stands by for has
 * died, over the state that daemon left. NULL after saying why. */
static struct rampart_engine *open_engine(const struct options *o,
                                          const struct rampart_config *config)
{
  char err[512];
  struct rampart_engine *engine = o->switches.standby
                                    ? rampart_open_standby("rampart-nbd-server", config, err,
                                                           sizeof err)
                                    : rampart_open(config, err, sizeof err);
  if (!engine)
    fprintf(stderr, "rampart-nbd-server: %s%s\n", o->switches.standby ? "standby: " : "",
            err);
  return engine;
}

static int listen_unix(const char *path, char *err, size_t errlen)
{
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  if (strlen(path) >= sizeof a.sun_path) {
    snprintf(err, errlen, "--unix %s: the path is longer than a unix socket's %zu bytes",
             path, sizeof a.sun_path - 1);
    return -1;
  }
  strcpy(a.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "cannot make a unix socket: %s", strerror(errno));
    return -1;
  }
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
    unlink(path); /* a socket a stopped server left */
  mode_t old = umask(077);
  int r = bind(fd, (struct sockaddr *)&a, sizeof a);
  umask(old);
  if (r < 0 || listen(fd, 16) < 0) {
    snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

static int listen_tcp(const char *hostport, char *err, size_t errlen)
{
  char host[256], port[16];
  if (rp_parse_hostport(hostport, host, sizeof host, port, sizeof port, err, errlen) < 0)
    return -1;
  struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
  int r = getaddrinfo(host, port, &hints, &ai);
  if (r != 0) {
    snprintf(err, errlen, "--tcp %s: %s", hostport, gai_strerror(r));
    return -1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0) {
    snprintf(err, errlen, "cannot listen on %s: %s", hostport, strerror(errno));
    if (fd >= 0)
      close(fd);
    fd = -1;
  }
  freeaddrinfo(ai);
  return fd;
}

/* Joins the connections that have ended; returns how many are left. */
static unsigned join_ended(struct nbd_server_conn **conns, unsigned n)
{
  unsigned kept = 0;
  for (unsigned i = 0; i < n; i++) {
    if (nbd_server_conn_ended(conns[i]))
      nbd_server_conn_join(conns[i]);
    else
      conns[kept++] = conns[i];
  }
  return kept;
}

static void accept_one(int listen_fd, struct rampart_engine *engine,
                       const struct nbd_server_export *export,
                       const struct nbd_server_limits *limits, struct nbd_server_conn **conns,
                       unsigned *n)
{
  int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0)
    return; /* the client gave up already, or EMFILE: the next poll tries again */
  if (*n == MAX_CONNECTIONS) {
    fprintf(stderr, "rampart-nbd-server: refusing a connection: %u are open already\n",
            MAX_CONNECTIONS);
    close(fd);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* fails on unix: no matter */
  char err[256];
  struct nbd_server_conn *c = nbd_server_conn_start(engine, fd, export, limits, err,
                                                    sizeof err);
  if (c)
    conns[(*n)++] = c;
  else
    fprintf(stderr, "rampart-nbd-server: %s\n", err);
}

int main(int argc, char **argv)
{
  struct options o = { .depth = 256,
                       .max_buffered = 128u << 20,
                       .handshake_s = 10,
                       .stall_s = 30,
                       .switches = RAMPART_FRONTEND_SWITCHES_DEFAULT };
  char err[512];
  const struct rampart_frontend_args args = { "rampart-nbd-server", usage, take_option,
                                              check_options,        &o,    &o.switches };
  int status;
  struct rampart_config *config = rampart_config_from_arguments(&args, argc, argv, &status);
  if (!config)
    return status;
  /* Signals come through a signalfd in the accept loop's poll: blocked before any thread
   * exists, so every one inherits the mask. */
  sigset_t stop_signals;
  rampart_block_stop_signals(&stop_signals);
  signal(SIGPIPE, SIG_IGN);
  int signal_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC);
  int listen_fd = o.unix_path ? listen_unix(o.unix_path, err, sizeof err)
                              : listen_tcp(o.tcp, err, sizeof err);
  if (listen_fd < 0 || signal_fd < 0) {
    if (signal_fd < 0)
      snprintf(err, sizeof err, "cannot make a signalfd: %s", strerror(errno));
    fprintf(stderr, "rampart-nbd-server: %s\n", err);
    rampart_config_free(config);
    return 1;
  }
  /* Listening before a standby's wait: the socket is there for rampart-nbd-attach to
   * reconnect to, and its connection waits in the backlog until the takeover. */
  rampart_process_harden(o.switches.lock_memory);
  struct rampart_engine *engine = open_engine(&o, config);
  if (!engine) {
    if (o.unix_path)
      unlink(o.unix_path);
    rampart_config_free(config);
    return 1;
  }
  struct nbd_server_export export = {
    .size = rampart_size(engine),
    .transmission_flags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
                          NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES |
                          NBD_FLAG_CAN_MULTI_CONN, /* a flush covers every connection */
    .min_block = 4096,
    .preferred_block = 4096,
    .max_block = MAX_REQUEST,
  };
  struct nbd_buffer_budget all_buffers;
  nbd_buffer_budget_init(&all_buffers, o.max_buffered);
  const struct nbd_server_limits limits = {
    .depth = o.depth,
    .connection_buffers = MAX_REQUEST,
    .unshared_buffers = UNSHARED_BUFFERS,
    .all_buffers = &all_buffers,
    .handshake_ms = o.handshake_s * 1000u,
    .stall_ms = o.stall_s * 1000u,
    .stopping_ms = STOPPING_MS,
  };
  printf("%s\n", o.unix_path ? o.unix_path : o.tcp);
  fflush(stdout);
  if (!o.switches.standby) /* a standby said it took over */
    rampart_notify(RAMPART_NOTICE_SERVING, o.unix_path ? o.unix_path : o.tcp);
  char buffered[32];
  fprintf(stderr,
          "rampart-nbd-server: serving %llu bytes on %s, %u requests in flight "
          "per connection, %s of request buffers in all, handshake %u s, stall %u s\n",
          (unsigned long long)export.size, o.unix_path ? o.unix_path : o.tcp, o.depth,
          rp_format_bytes(o.max_buffered, buffered, sizeof buffered), o.handshake_s,
          o.stall_s);
  struct nbd_server_conn *conns[MAX_CONNECTIONS];
  unsigned n = 0;
  int sig = 0;
  while (!sig) {
    struct pollfd p[2] = { { .fd = listen_fd, .events = POLLIN },
                           { .fd = signal_fd, .events = POLLIN } };
    int r = poll(p, 2, 1000);
    n = join_ended(conns, n);
    if (r > 0 && p[1].revents) {
      struct signalfd_siginfo si;
      sig = read(signal_fd, &si, sizeof si) == (ssize_t)sizeof si ? (int)si.ssi_signo
                                                                  : SIGTERM;
    } else if (r > 0 && p[0].revents) {
      accept_one(listen_fd, engine, &export, &limits, conns, &n);
    }
  }
  fprintf(stderr,
          "rampart-nbd-server: %s: stopping once the %u connection(s) answered "
          "what is in flight (a client that does not read its replies: %u s)\n",
          strsignal(sig), n, STOPPING_MS / 1000);
  rampart_notify(RAMPART_NOTICE_STOPPING, o.unix_path ? o.unix_path : o.tcp);
  close(listen_fd);
  if (o.unix_path)
    unlink(o.unix_path);
  for (unsigned i = 0; i < n; i++)
    nbd_server_conn_stop(conns[i]);
  for (unsigned i = 0; i < n; i++)
    nbd_server_conn_join(conns[i]);
  rampart_close(engine);
  rampart_config_free(config);
  close(signal_fd);
  return 0;
}
