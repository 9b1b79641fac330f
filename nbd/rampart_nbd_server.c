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
 * in flight has been answered.
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

#include "clock.h"
#include "nbd_protocol.h"
#include "nbd_server_conn.h"
#include "parse.h"
#include "rampart.h"

#define MAX_CONNECTIONS 64
#define MAX_DEPTH 512 /* two iovecs a reply: one sendmsg (IOV_MAX 1024) takes them all */

/* What a standby holds to give back at takeover, as nbdkit rampart's standby does. */
#define STANDBY_RESERVE (2u << 20)

static const char usage[] =
  "usage: rampart-nbd-server (--unix PATH | --tcp HOST:PORT) [--depth N] KEY=VALUE...\n"
  "       rampart-nbd-server --state-layout\n"
  "  --unix PATH     listen on a unix socket (created mode 0600; an old one is replaced)\n"
  "  --tcp H:P       listen on TCP, e.g. 127.0.0.1:10809 (NBD carries no authentication:\n"
  "                  keep it on loopback or a trusted network)\n"
  "  --depth N       requests in flight per connection (default 256; at most 512)\n"
  "  --state-layout  print the layout of the state this build takes over, and exit\n"
  "  Requests must be aligned to 4096 bytes (NBD_INFO_BLOCK_SIZE says so) and at most\n"
  "  32 MiB long. Any export name reaches the one device.\n"
  "  KEY=VALUE       nbdkit rampart's keys, so one command line serves either:\n"
  "  mlock=BOOL      lock the daemon's memory (default true; a swap device must)\n"
  "  standby=BOOL    with state=: listen, then wait beside the daemon serving that state\n"
  "                  and take it over the moment it dies (docs/recovery.md)\n"
  "  and the engine's settings:\n";

struct options {
  const char *unix_path;
  const char *tcp;
  unsigned long depth;
  bool lock_memory;
  bool standby;
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
  if (strcmp(a, "--depth") == 0) {
    uint64_t v;
    if (rp_parse_uint("--depth", value, MAX_DEPTH, &v, err, sizeof err) < 0 || v == 0) {
      fprintf(stderr, "rampart-nbd-server: --depth '%s': give a number from 1 to %u\n",
              value ? value : "", MAX_DEPTH);
      return -1;
    }
    o->depth = (unsigned long)v;
    return 2;
  }
  if (strncmp(a, "mlock=", 6) == 0 || strncmp(a, "standby=", 8) == 0) {
    /* the plugin's own switches, taken here too; every other key is the engine's */
    bool mlock = a[0] == 'm';
    if (rp_parse_bool(mlock ? "mlock" : "standby", strchr(a, '=') + 1,
                      mlock ? &o->lock_memory : &o->standby, err, sizeof err) < 0) {
      fprintf(stderr, "rampart-nbd-server: %s\n", err);
      return -1;
    }
    return 1;
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
  if (o->standby && !rampart_config_state_path(config)) {
    fprintf(stderr, "rampart-nbd-server: standby=true needs state=PATH, the same as the "
            "serving daemon's: a standby takes over the state it leaves when it dies\n");
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
  uint64_t died_ms = 0;
  if (o->standby) {
    if (rampart_standby_for_state("rampart-nbd-server", config, STANDBY_RESERVE, err,
                                  sizeof err) < 0) {
      fprintf(stderr, "rampart-nbd-server: standby: %s\n", err);
      return NULL;
    }
    died_ms = rp_now_ms();
  }
  struct rampart_engine *engine = rampart_open(config, err, sizeof err);
  if (!engine) {
    fprintf(stderr, "rampart-nbd-server: %s\n", err);
    return NULL;
  }
  if (o->standby && !rampart_took_over(engine)) {
    /* Its segment was gone (removed by hand): an empty device in place of the one that
     * died would hand the kernel zeros for every page it swapped out. */
    fprintf(stderr, "rampart-nbd-server: standby: there was no state left at %s to take "
            "over: refusing to serve an empty device in place of the one that died\n",
            rampart_config_state_path(config));
    rampart_close(engine);
    return NULL;
  }
  if (o->standby)
    fprintf(stderr, "rampart-nbd-server: took %s over %llu ms after its pager died\n",
            rampart_config_state_path(config), (unsigned long long)(rp_now_ms() - died_ms));
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
                       const struct nbd_server_export *export, unsigned depth,
                       struct nbd_server_conn **conns, unsigned *n)
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
  struct nbd_server_conn *c = nbd_server_conn_start(engine, fd, export, depth, err, sizeof err);
  if (c)
    conns[(*n)++] = c;
  else
    fprintf(stderr, "rampart-nbd-server: %s\n", err);
}

int main(int argc, char **argv)
{
  struct options o = { .depth = 256, .lock_memory = true };
  char err[512];
  const struct rampart_frontend_args args = { "rampart-nbd-server", usage, take_option,
                                              check_options, &o };
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
  rampart_process_harden(o.lock_memory);
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
    .min_block = 4096, .preferred_block = 4096, .max_block = 32u << 20,
  };
  printf("%s\n", o.unix_path ? o.unix_path : o.tcp);
  fflush(stdout);
  fprintf(stderr, "rampart-nbd-server: serving %llu bytes on %s, %lu requests in flight "
          "per connection\n", (unsigned long long)export.size,
          o.unix_path ? o.unix_path : o.tcp, o.depth);
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
      sig = read(signal_fd, &si, sizeof si) == (ssize_t)sizeof si ? (int)si.ssi_signo : SIGTERM;
    } else if (r > 0 && p[0].revents) {
      accept_one(listen_fd, engine, &export, (unsigned)o.depth, conns, &n);
    }
  }
  fprintf(stderr, "rampart-nbd-server: %s: stopping once the %u connection(s) answered "
          "what is in flight\n", strsignal(sig), n);
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
