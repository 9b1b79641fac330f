/* The control= socket: how an operator changes the servers of a running device
 * (`rampartctl device SOCKET add|drain|remove|reload|servers`, docs/elastic.md).
 *
 * A unix stream socket, mode 0600 (only its owner, root for a swap device, may change
 * where swap lives). One command a connection: a line "COMMAND [ARGUMENT]\n"; the reply
 * is "ok\n" or "error\n", then the command's message, then the socket closes. One thread
 * serves it, one command at a time, so two operators' commands never interleave; the
 * commands block in it (an add connects to the new server), never in the I/O thread.
 *
 * Not a SIGHUP: nbdkit takes SIGHUP as a signal to exit, and an operator's reflex to
 * reload a daemon must not take swap away. systemd's ExecReload= runs `reload` here.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control_socket.h"
#include "rampart.h"
#include "fd_io.h"
#include "file_create.h"
#include "log.h"
#include "thread_start.h"

/* An add connects, handshakes and reserves here (a private libev loop): the reconnect helpers
 * size, not RLIMIT_STACK's 8 MiB locked under mlockall. */
#define CONTROL_STACK_BYTES (256u * 1024u)
#define CONTROL_LINE_MAX 512u
#define CONTROL_REPLY_MAX 65536u
#define CONTROL_READ_TIMEOUT_MS 2000

struct control_socket {
  struct rampart_engine *engine;
  int listen_fd;
  int stop_pipe[2];
  pthread_t thread;
  bool thread_started;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  char *reply; /* CONTROL_REPLY_MAX bytes */
};

/* ---- commands -------------------------------------------------------------------------- */

/* The servers table: one row a server, whitespace-separated columns with no spaces in a
 * column, so scripts (and rampartctl's drain progress) can read it. */
static int command_servers(struct rampart_engine *e, char *out, size_t len)
{
  struct rampart_stats *st = malloc(sizeof *st);
  if (!st) {
    snprintf(out, len, "out of memory");
    return -ENOMEM;
  }
  rampart_get_stats(e, st);
  size_t n = (size_t)snprintf(out, len, "%-22s %-12s %10s %10s %10s %10s %s\n", "SERVER",
                              "STATE", "LIVE", "STORED", "RESERVED", "DEPENDENT", "NOTE");
  for (unsigned i = 0; i < st->nservers && n < len; i++) {
    const struct rampart_server_stats *s = &st->servers[i];
    const char *note = s->removing   ? "removing"
                       : s->draining ? "draining"
                       : s->drained  ? "drained"
                       : s->suspect  ? "suspect"
                                     : "-";
    n += (size_t)snprintf(
      out + n, len - n, "%-22s %-12s %10llu %10llu %10llu %10llu %s\n", s->address,
      rampart_server_health_name(s->state), (unsigned long long)s->pages_live,
      (unsigned long long)s->pages_stored, (unsigned long long)s->pages_reserved,
      (unsigned long long)s->pages_dependent, note);
  }
  if (n < len)
    snprintf(out + n, len - n,
             "moves: drain %llu, rebalance %llu, rebuild %llu pages; "
             "degraded reads %llu; lost pages %llu",
             (unsigned long long)st->moves_by_reason[RAMPART_MOVE_DRAIN],
             (unsigned long long)st->moves_by_reason[RAMPART_MOVE_REBALANCE],
             (unsigned long long)st->moves_by_reason[RAMPART_MOVE_REBUILD],
             (unsigned long long)st->pages_degraded_reads,
             (unsigned long long)st->pages_lost);
  free(st);
  return 0;
}

static int control_run(struct rampart_engine *e, char *line, char *out, size_t len)
{
  char *arg = strchr(line, ' ');
  if (arg) {
    *arg++ = '\0';
    arg += strspn(arg, " ");
  }
  bool has_arg = arg && *arg;
  if (strcmp(line, "servers") == 0 && !has_arg)
    return command_servers(e, out, len);
  if (strcmp(line, "reload") == 0 && !has_arg)
    return rampart_cluster_reload(e, out, len);
  if (strcmp(line, "add") == 0 && has_arg)
    return rampart_server_add(e, arg, out, len);
  if (strcmp(line, "drain") == 0 && has_arg)
    return rampart_server_drain(e, arg, false, out, len);
  if (strcmp(line, "remove") == 0 && has_arg)
    return rampart_server_drain(e, arg, true, out, len);
  snprintf(out, len,
           "unknown command '%s%s%s': use servers, add HOST:PORT, drain HOST:PORT, "
           "remove HOST:PORT or reload",
           line, has_arg ? " " : "", has_arg ? arg : "");
  return -EINVAL;
}

/* ---- the thread ------------------------------------------------------------------------ */

/* Reads one line (without its newline) within the timeout; false if none came. */
static bool read_line(int fd, char *line, size_t len)
{
  size_t n = 0;
  while (n + 1 < len) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, CONTROL_READ_TIMEOUT_MS) <= 0)
      return false;
    ssize_t r = read(fd, line + n, len - 1 - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    n += (size_t)r;
    if (memchr(line, '\n', n))
      break;
  }
  line[n] = '\0';
  line[strcspn(line, "\r\n")] = '\0';
  return n > 0;
}

/* A send that fails is left at that: the client went away, and there is nothing to
 * tell it. */
static void serve_one(struct control_socket *c, int fd)
{
  char line[CONTROL_LINE_MAX];
  if (!read_line(fd, line, sizeof line)) {
    static const char said[] =
      "error\nno command within 2 s: send one line, e.g. 'servers'\n";
    rp_send_full(fd, said, sizeof said - 1);
    return;
  }
  c->reply[0] = '\0';
  int rc = control_run(c->engine, line, c->reply, CONTROL_REPLY_MAX);
  if (rc < 0)
    rp_log(RP_LOG_WARN, "control: '%s' refused: %s", line, c->reply);
  const char *status = rc < 0 ? "error\n" : "ok\n";
  rp_send_full(fd, status, strlen(status));
  rp_send_full(fd, c->reply, strlen(c->reply));
  rp_send_full(fd, "\n", 1);
}

static void *control_thread_main(void *arg)
{
  struct control_socket *c = arg;
  for (;;) {
    struct pollfd p[2] = { { .fd = c->listen_fd, .events = POLLIN },
                           { .fd = c->stop_pipe[0], .events = POLLIN } };
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      rp_log(RP_LOG_ERROR,
             "control socket %s: poll failed: %s; it no longer takes "
             "commands",
             c->path, strerror(errno));
      return NULL;
    }
    if (p[1].revents)
      return NULL;
    int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    serve_one(c, fd);
    close(fd);
  }
}

/* ---- open and close -------------------------------------------------------------------- */

/* A socket file left by a device that is gone is removed; one a device still listens on
 * is not taken over. */
static int clear_stale(const char *path, const struct sockaddr_un *addr, char *err,
                       size_t errlen)
{
  struct stat st;
  if (lstat(path, &st) < 0)
    return 0;
  if (S_ISLNK(st.st_mode)) {
    snprintf(err, errlen, "control=%s: %s", path, rp_file_why(ELOOP));
    return -1;
  }
  if (!S_ISSOCK(st.st_mode)) {
    snprintf(err, errlen,
             "control=%s exists and is not a socket: remove it or choose "
             "another path",
             path);
    return -1;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (const struct sockaddr *)addr, sizeof *addr) == 0) {
    close(fd);
    snprintf(err, errlen,
             "control=%s: another device listens there: give each device its "
             "own control socket",
             path);
    return -1;
  }
  if (fd >= 0)
    close(fd);
  unlink(path);
  return 0;
}

struct control_socket *control_socket_open(struct rampart_engine *e, const char *path,
                                           char *err, size_t errlen)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  if (strlen(path) >= sizeof addr.sun_path) {
    snprintf(err, errlen, "control=%s: a unix socket path must be shorter than %zu bytes",
             path, sizeof addr.sun_path);
    return NULL;
  }
  struct control_socket *c = calloc(1, sizeof *c);
  if (!c || !(c->reply = malloc(CONTROL_REPLY_MAX))) {
    free(c);
    snprintf(err, errlen, "out of memory for the control socket");
    return NULL;
  }
  c->engine = e;
  c->listen_fd = c->stop_pipe[0] = c->stop_pipe[1] = -1;
  snprintf(c->path, sizeof c->path, "%s", path);
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  if (clear_stale(path, &addr, err, errlen) < 0)
    goto fail;
  c->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  /* fchmod before bind: Linux creates the socket file with the socket's mode (less the
   * umask), so it is never open to others, not even between bind and chmod. The chmod
   * after it follows no link: one swapped in for the socket is refused, its target
   * untouched. */
  if (c->listen_fd < 0 || fchmod(c->listen_fd, 0600) < 0 ||
      bind(c->listen_fd, (struct sockaddr *)&addr, sizeof addr) < 0 ||
      fchmodat(AT_FDCWD, path, 0600, AT_SYMLINK_NOFOLLOW) < 0 ||
      listen(c->listen_fd, 8) < 0) {
    snprintf(err, errlen, "control=%s: cannot listen there: %s", path, strerror(errno));
    goto fail;
  }
  if (pipe2(c->stop_pipe, O_CLOEXEC) < 0) {
    snprintf(err, errlen, "control=%s: %s", path, strerror(errno));
    goto fail;
  }
  int rc = rp_thread_start(&c->thread, "rampart-ctl", CONTROL_STACK_BYTES,
                           control_thread_main, c);
  if (rc != 0) {
    snprintf(err, errlen, "control=%s: cannot start its thread: %s", path, strerror(rc));
    goto fail;
  }
  c->thread_started = true;
  rp_log(RP_LOG_INFO,
         "control socket %s: rampartctl device %s servers|add|drain|remove|"
         "reload",
         path, path);
  return c;
fail:
  control_socket_close(c);
  return NULL;
}

void control_socket_close(struct control_socket *c)
{
  if (!c)
    return;
  if (c->thread_started) {
    char byte = 0;
    ssize_t ignored = write(c->stop_pipe[1], &byte, 1);
    (void)ignored;
    pthread_join(c->thread, NULL);
  }
  if (c->listen_fd >= 0) {
    close(c->listen_fd);
    unlink(c->path);
  }
  for (int i = 0; i < 2; i++)
    if (c->stop_pipe[i] >= 0)
      close(c->stop_pipe[i]);
  free(c->reply);
  free(c);
}
