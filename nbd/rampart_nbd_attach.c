/* rampart-nbd-attach: attaches /dev/nbdN to nbdkit rampart over a unix socket, and keeps
 * it attached across the death of the nbdkit serving it.
 *
 *   rampart-nbd-attach [--device /dev/nbdN] [--export NAME] [--timeout S]
 *                      [--dead-timeout S] [--connections N] SOCKET [STANDBY-SOCKET...]
 *
 * It does what nbd-client does to attach (the handshake, then the kernel's netlink
 * NBD_CMD_CONNECT), with the dead-connection timeout set, so that when the serving
 * nbdkit dies the kernel holds the device's requests instead of failing them. Then it
 * stays, locked in memory, and on the daemon's death (its pidfd, or the driver's
 * NBD_CMD_LINK_DEAD) connects to the first socket that answers, normally the standby
 * (nbdkit rampart standby=true) that has just taken the state over, and hands the
 * driver the new connection with NBD_CMD_RECONFIGURE. Debian 12's nbd-client cannot:
 * its -persist re-runs the ioctl path, where the device fails every request while it
 * is disconnected (docs/recovery.md).
 *
 * --connections N gives the driver N connections to the same daemon: it makes a
 * hardware queue of each and spreads the requests over them, so N threads of
 * rampart-nbd-server (one per connection) serve the device. A move takes all N to the
 * new daemon in one reconfigure.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "deferred_log.h"
#include "nbd_handshake.h"
#include "nbd_netlink.h"
#include "rampart.h"

#define MAX_SOCKETS 8
#define MAX_CONNECTIONS 16
/* How long, after the daemon's death, to wait for the driver's notice that its
 * connection died before reconnecting anyway. */
#define DEAD_NOTICE_WAIT_MS 2000

static const char usage[] =
  "usage: rampart-nbd-attach [--device /dev/nbdN] [--export NAME] [--timeout S]\n"
  "                          [--dead-timeout S] [--connections N] SOCKET "
  "[STANDBY-SOCKET...]\n"
  "  Attaches an NBD device to the nbdkit listening on SOCKET (a unix socket), prints\n"
  "  it, and stays in the foreground (a line 'DEVICE reconnected SOCKET' on each move). When "
  "that nbdkit dies, the device's requests wait (up to\n"
  "  --dead-timeout, default 120 s) while this connects to the first of the sockets\n"
  "  that answers, normally a standby's (nbdkit rampart standby=true state=...), and\n"
  "  the device carries on there. SIGTERM or SIGINT detaches the device and exits.\n"
  "  --device       the device to use (default: the first free one); printed on stdout\n"
  "  --export       the export name (default: '')\n"
  "  --timeout      seconds a request may go unanswered before the driver drops the\n"
  "                 connection and sends it again (default 30). A request in flight\n"
  "                 when its daemon dies is sent again only then.\n"
  "  --connections  connections to the daemon, 1 to 16 (default 1): the driver spreads\n"
  "                 requests over them, and each has a thread of its own there\n"
  "  Run nbdkit with --foreground (as systemd does): the socket then names the\n"
  "  daemon's own pid, whose end this watches besides the driver's notices.\n";

struct attach {
  const char *sockets[MAX_SOCKETS];
  unsigned nsockets;
  unsigned connections; /* to the serving daemon, all to the same socket */
  unsigned serving;     /* index into sockets of the one the device uses */
  const char *export_name;
  struct nbd_device_settings device;
  struct nbd_netlink nl;
  int signal_fd;
  int daemon_pidfd; /* the serving nbdkit, -1 when it cannot be watched that way */
  pid_t daemon_pid;
  char backend[128];
};

static bool parse_seconds(const char *s, uint64_t *out)
{
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || v == 0 || v > 86400 || s[0] == '-')
    return false;
  *out = v;
  return true;
}

/* 0 parsed, 1 help printed, 2 bad usage (said). */
static int parse_args(struct attach *a, int argc, char **argv)
{
  a->device.index = -1;
  a->device.block_size = RAMPART_PAGE_SIZE;
  a->device.timeout_s = 30;
  a->device.dead_conn_timeout_s = 120;
  a->export_name = "";
  a->connections = 1;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      fputs(usage, stdout);
      return 1;
    }
    if (arg[0] == '-' && arg[1] == '-') {
      if (!value) {
        fprintf(stderr, "rampart-nbd-attach: %s needs a value\n%s", arg, usage);
        return 2;
      }
      i++;
      if (strcmp(arg, "--device") == 0) {
        char *end;
        const char *digits = strncmp(value, "/dev/nbd", 8) == 0 ? value + 8 : value;
        long n = strtol(digits, &end, 10);
        if (end == digits || *end || n < 0 || n > 65535) {
          fprintf(stderr, "rampart-nbd-attach: --device %s is not /dev/nbdN\n", value);
          return 2;
        }
        a->device.index = (int)n;
      } else if (strcmp(arg, "--connections") == 0) {
        char *end;
        errno = 0;
        unsigned long n = strtoul(value, &end, 10);
        if (errno || end == value || *end || value[0] == '-' || n < 1 ||
            n > MAX_CONNECTIONS) {
          fprintf(stderr,
                  "rampart-nbd-attach: --connections %s is not a number from 1 to %u\n",
                  value, MAX_CONNECTIONS);
          return 2;
        }
        a->connections = (unsigned)n;
      } else if (strcmp(arg, "--export") == 0) {
        a->export_name = value;
      } else if (strcmp(arg, "--timeout") == 0 || strcmp(arg, "--dead-timeout") == 0) {
        uint64_t *target = arg[2] == 't' ? &a->device.timeout_s
                                         : &a->device.dead_conn_timeout_s;
        if (!parse_seconds(value, target)) {
          fprintf(stderr,
                  "rampart-nbd-attach: %s %s is not a number of seconds from 1 "
                  "to 86400\n",
                  arg, value);
          return 2;
        }
      } else {
        fprintf(stderr, "rampart-nbd-attach: unknown option %s\n%s", arg, usage);
        return 2;
      }
      continue;
    }
    if (a->nsockets == MAX_SOCKETS) {
      fprintf(stderr, "rampart-nbd-attach: at most %u sockets\n", MAX_SOCKETS);
      return 2;
    }
    if (strlen(arg) >= sizeof((struct sockaddr_un *)0)->sun_path) {
      fprintf(stderr, "rampart-nbd-attach: the socket path %s is too long\n", arg);
      return 2;
    }
    a->sockets[a->nsockets++] = arg;
  }
  if (a->nsockets == 0) {
    fprintf(stderr, "rampart-nbd-attach: name the nbdkit's unix socket\n%s", usage);
    return 2;
  }
  return 0;
}

/* A connected, negotiated socket to path, or -1 with err. The reads wait up to
 * wait_s: a standby accepts only once it has taken the state over. */
static int open_export(const struct attach *a, const char *path, unsigned wait_s,
                       struct nbd_export *export, pid_t *peer, char *err, size_t errlen)
{
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return -1;
  }
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
    snprintf(err, errlen, "cannot connect to %s: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  struct timeval tv = { .tv_sec = wait_s };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  char why[400];
  if (nbd_handshake(fd, a->export_name, export, why, sizeof why) < 0) {
    snprintf(err, errlen, "%s: %s", path, why);
    close(fd);
    return -1;
  }
  /* The driver sets its own timeouts on the socket it is given. */
  struct timeval none = { 0 };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
  struct ucred cred;
  socklen_t len = sizeof cred;
  *peer = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
  return fd;
}

static void close_all(int *fds, unsigned n)
{
  for (unsigned i = 0; i < n; i++)
    close(fds[i]);
}

/* a->connections negotiated sockets to path in fds, all of one export: 0, or -1 with
 * err and none left open. */
static int open_connections(const struct attach *a, const char *path, unsigned wait_s,
                            int *fds, struct nbd_export *export, pid_t *peer, char *err,
                            size_t errlen)
{
  for (unsigned i = 0; i < a->connections; i++) {
    struct nbd_export this;
    fds[i] = open_export(a, path, wait_s, &this, peer, err, errlen);
    if (fds[i] >= 0 && i > 0 && this.size != export->size) {
      snprintf(err, errlen, "%s changed its size between two connections", path);
      close(fds[i]);
      fds[i] = -1;
    }
    if (fds[i] < 0) {
      close_all(fds, i);
      return -1;
    }
    if (i == 0)
      *export = this;
  }
  return 0;
}

/* Watches the serving daemon's life: its death is the first sign, before the driver's. A
 * daemon that forked after listening (nbdkit without --foreground) has another pid than
 * the one the socket names; then only the driver's notice tells. */
static void watch_daemon(struct attach *a, pid_t pid)
{
  if (a->daemon_pidfd >= 0)
    close(a->daemon_pidfd);
  a->daemon_pid = pid;
  a->daemon_pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
}

/* true: a signal to stop came while waiting ms. */
static bool wait_or_stop(const struct attach *a, int ms)
{
  struct pollfd p = { .fd = a->signal_fd, .events = POLLIN };
  return poll(&p, 1, ms) > 0;
}

/* The device's connections died: new ones, from the first socket that answers, starting
 * with the one the device used (a daemon that is alive and timed out a request), then
 * the standbys. Keeps trying: the kernel holds requests for dead_conn_timeout, fails
 * them after, and takes a connection back even then. The driver answers a reconfigure
 * that finds no dead connection with success and drops the sockets, so this runs only
 * once the driver has said a connection died (serve). A notice that comes after the
 * wait for them, of a connection this reconfigure already replaced, costs one more round
 * of handshakes the driver drops: a notice is never thrown away, for one that meant a
 * new death would leave that connection's requests waiting until they fail. false:
 * stopped by a signal. */
static bool reconnect(struct attach *a, const char *why)
{
  uint64_t start = rp_now_ms();
  char err[512] = "";
  /* A handshake that hangs longer holds up the next socket in the list. */
  unsigned wait_s =
    (unsigned)(a->device.dead_conn_timeout_s < 30 ? a->device.dead_conn_timeout_s : 30);
  for (unsigned attempt = 0;; attempt++) {
    for (unsigned k = 0; k < a->nsockets; k++) {
      unsigned i = (a->serving + k) % a->nsockets;
      struct nbd_export export;
      pid_t peer;
      int fds[MAX_CONNECTIONS];
      if (open_connections(a, a->sockets[i], wait_s, fds, &export, &peer, err, sizeof err) <
          0)
        continue;
      if (export.size != a->device.size) {
        snprintf(err, sizeof err,
                 "%s serves %llu bytes, the device has %llu: not that "
                 "one",
                 a->sockets[i], (unsigned long long)export.size,
                 (unsigned long long)a->device.size);
        close_all(fds, a->connections);
        continue;
      }
      int r = nbd_netlink_reconfigure(&a->nl, &a->device, fds, a->connections);
      close_all(fds, a->connections); /* the driver holds its own references */
      if (r < 0) {
        snprintf(err, sizeof err, "the driver refused the new connection to %s: %s",
                 a->sockets[i], strerror(-r));
        continue;
      }
      a->serving = i;
      watch_daemon(a, peer);
      deferred_log("/dev/nbd%d reconnected to %s (pid %d) %llu ms "
                   "after %s",
                   a->device.index, a->sockets[i], (int)peer,
                   (unsigned long long)(rp_now_ms() - start), why);
      /* stdout, for scripts: the device once attached, then a line per reconnect. */
      printf("/dev/nbd%d reconnected %s\n", a->device.index, a->sockets[i]);
      fflush(stdout);
      return true;
    }
    if (attempt % 50 == 0)
      deferred_log("/dev/nbd%d: no daemon answers yet (%s); the "
                   "device's requests wait up to %llu s: start nbdkit rampart with the same "
                   "state= on one of the sockets",
                   a->device.index, err, (unsigned long long)a->device.dead_conn_timeout_s);
    if (wait_or_stop(a, rp_now_ms() - start < 10000 ? 100 : 1000))
      return false;
  }
}

/* What the driver's multicast said: how many connections of this device died (all of
 * them when a notice may have been lost: the socket overran), 0 for nothing about it. */
static unsigned drain_notices(struct attach *a)
{
  int index;
  unsigned dead = 0;
  while ((index = nbd_netlink_read_event(&a->nl)) != NBD_NETLINK_NO_EVENT) {
    if (index == a->device.index)
      dead++;
    else if (index == NBD_NETLINK_EVENTS_LOST)
      dead = a->connections;
  }
  return dead;
}

/* Waits up to ms for the driver's notices to count `want` dead connections, adding to
 * *dead: one reconfigure then replaces them all, where one per notice would open a
 * connection for each and leave the driver to drop the spares. true: a stop signal. */
static bool await_notices(struct attach *a, unsigned *dead, unsigned want, int ms)
{
  struct pollfd q[2] = { { .fd = a->signal_fd, .events = POLLIN },
                         { .fd = a->nl.events_fd, .events = POLLIN } };
  for (uint64_t t0 = rp_now_ms(); *dead < want && rp_now_ms() - t0 < (uint64_t)ms;) {
    if (poll(q, 2, 50) > 0 && q[0].revents)
      return true;
    if (q[1].revents)
      *dead += drain_notices(a);
  }
  return false;
}

static bool device_still_attached(const struct attach *a)
{
  char path[64];
  snprintf(path, sizeof path, "/sys/block/nbd%d/pid", a->device.index);
  return access(path, F_OK) == 0;
}

static int serve(struct attach *a)
{
  for (;;) {
    struct pollfd p[3] = {
      { .fd = a->signal_fd, .events = POLLIN },
      { .fd = a->nl.events_fd, .events = POLLIN },
      { .fd = a->daemon_pidfd, .events = POLLIN },
    };
    int n = poll(p, a->daemon_pidfd >= 0 ? 3 : 2, 1000);
    if (n < 0 && errno != EINTR)
      return 1;
    if (p[0].revents)
      return 0;
    /* A connection died: the driver's notice, or the daemon's end, which the driver's
     * receive threads see a moment later (its notices normally come before the pidfd).
     * Either way every connection of a dead daemon ends within moments, one that timed
     * out a request only that one; the rest of the notices are waited for a bounded
     * time, so that one reconfigure replaces them all. */
    unsigned dead = p[1].revents ? drain_notices(a) : 0;
    char why[96] = "";
    int wait_ms = 200;
    if (dead) {
      snprintf(why, sizeof why, "the driver saw its connection die");
    } else if (a->daemon_pidfd >= 0 && p[2].revents) {
      snprintf(why, sizeof why, "its daemon (pid %d) died", (int)a->daemon_pid);
      watch_daemon(a, 0);
      wait_ms = DEAD_NOTICE_WAIT_MS;
    }
    if (why[0]) {
      if (await_notices(a, &dead, a->connections, wait_ms) || !reconnect(a, why))
        return 0;
      continue;
    }
    if (n == 0 && !device_still_attached(a)) {
      deferred_log("/dev/nbd%d was detached: exiting", a->device.index);
      return 2;
    }
  }
}

/* The stack a reconnect will use is touched now, while memory is plentiful: mlockall
 * keeps it, and a page fault there later could wait on the very device. */
static void prefault_stack(void)
{
  volatile char stack[128 * 1024];
  for (size_t i = 0; i < sizeof stack; i += 4096)
    stack[i] = 0;
}

int main(int argc, char **argv)
{
  struct attach a = { .signal_fd = -1, .daemon_pidfd = -1 };
  int parsed = parse_args(&a, argc, argv);
  if (parsed)
    return parsed == 1 ? 0 : 2;
  /* This process must keep running while the machine has no memory to give: the
   * device's requests wait on it. */
  rampart_process_harden(true);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_BLOCK, &stop, NULL);
  a.signal_fd = signalfd(-1, &stop, SFD_CLOEXEC);
  if (a.signal_fd < 0) {
    fprintf(stderr, "rampart-nbd-attach: signalfd: %s\n", strerror(errno));
    return 1;
  }
  prefault_stack();
  char err[512];
  if (nbd_netlink_open(&a.nl, err, sizeof err) < 0) {
    fprintf(stderr, "rampart-nbd-attach: %s\n", err);
    return 1;
  }
  struct nbd_export export;
  pid_t peer = 0;
  int fds[MAX_CONNECTIONS];
  int opened = -1;
  for (unsigned i = 0; i < a.nsockets && opened < 0; i++) {
    opened = open_connections(&a, a.sockets[i], 30, fds, &export, &peer, err, sizeof err);
    a.serving = i;
  }
  if (opened < 0) {
    fprintf(stderr, "rampart-nbd-attach: %s: start nbdkit rampart on that socket first\n",
            err);
    return 1;
  }
  a.device.size = export.size;
  a.device.server_flags = export.transmission_flags;
  snprintf(a.backend, sizeof a.backend, "rampart:%s", a.export_name);
  a.device.backend = a.backend;
  if (nbd_netlink_connect(&a.nl, &a.device, fds, a.connections, err, sizeof err) < 0) {
    fprintf(stderr, "rampart-nbd-attach: %s\n", err);
    return 1;
  }
  close_all(fds, a.connections);
  watch_daemon(&a, peer);
  printf("/dev/nbd%d\n", a.device.index);
  fflush(stdout);
  char device[32];
  snprintf(device, sizeof device, "/dev/nbd%d", a.device.index);
  rampart_notify(RAMPART_NOTICE_SERVING, device);
  deferred_log_start("rampart-nbd-attach");
  deferred_log("/dev/nbd%d attached to %s (pid %d), %u connection%s: %llu bytes; "
               "requests wait up to %llu s for a new daemon if it dies",
               a.device.index, a.sockets[a.serving], (int)peer, a.connections,
               a.connections == 1 ? "" : "s", (unsigned long long)a.device.size,
               (unsigned long long)a.device.dead_conn_timeout_s);
  int status = serve(&a);
  if (status == 0) {
    int r = nbd_netlink_disconnect(&a.nl, a.device.index);
    if (r < 0)
      deferred_log("cannot detach /dev/nbd%d: %s", a.device.index, strerror(-r));
    else
      deferred_log("/dev/nbd%d detached", a.device.index);
  }
  deferred_log_stop();
  nbd_netlink_close(&a.nl);
  return status == 2 ? 0 : status;
}
