/* rampartctl device SOCKET ...: commands to a running device's control= socket
 * (src/engine/control_socket.c, docs/elastic.md).
 *
 *   servers                 the servers table
 *   add HOST:PORT           one more server
 *   drain HOST:PORT         move everything off it; waits, printing progress and an ETA
 *   remove HOST:PORT        drain, then forget it; waits the same way
 *   reload                  the cluster= file again: add the new, remove the missing
 * --no-wait returns once a drain or remove has started. Ctrl-C stops the watching, not the
 * drain: running the same command again watches it again.
 */
#include "clock.h"
#include "device_control.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define REPLY_MAX 65536u
#define EXIT_USAGE 2

static int device_control_usage(const char *why)
{
  fprintf(stderr, "rampartctl: device SOCKET: %s\n(run 'rampartctl --help' for usage)\n",
          why);
  return EXIT_USAGE;
}

/* Sends one command line, reads the whole reply into out. 0 ok, 1 the device refused
 * (out holds why), -1 the socket could not be used (out holds why). */
static int device_command(const char *socket_path, const char *line, char *out, size_t outlen)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
    snprintf(out, outlen,
             "cannot connect to %s: %s (is the device running with control=%s, "
             "and are you its owner, root for a swap device?)",
             socket_path, strerror(errno), socket_path);
    if (fd >= 0)
      close(fd);
    return -1;
  }
  size_t len = strlen(line);
  if (send(fd, line, len, MSG_NOSIGNAL) != (ssize_t)len ||
      send(fd, "\n", 1, MSG_NOSIGNAL) != 1) {
    snprintf(out, outlen, "cannot send to %s: %s", socket_path, strerror(errno));
    close(fd);
    return -1;
  }
  size_t n = 0;
  ssize_t r;
  while (n + 1 < outlen && (r = read(fd, out + n, outlen - 1 - n)) != 0) {
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      break;
    n += (size_t)r;
  }
  out[n] = '\0';
  close(fd);
  char *body = strchr(out, '\n');
  if (!body) {
    snprintf(out, outlen, "%s closed without an answer (the device may be stopping)",
             socket_path);
    return -1;
  }
  *body++ = '\0';
  bool ok = strcmp(out, "ok") == 0;
  memmove(out, body, strlen(body) + 1);
  size_t m = strlen(out);
  while (m > 0 && out[m - 1] == '\n')
    out[--m] = '\0';
  return ok ? 0 : 1;
}

struct server_row {
  char state[32], note[32];
  uint64_t dependent;
  bool found;
};

/* The row of `address` in a servers table. */
static struct server_row find_row(const char *table, const char *address)
{
  struct server_row row = { .found = false };
  for (const char *p = table; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    char addr[128], state[32], note[32];
    unsigned long long live, stored, reserved, dependent;
    if (sscanf(p, "%127s %31s %llu %llu %llu %llu %31s", addr, state, &live, &stored,
               &reserved, &dependent, note) == 7 &&
        strcmp(addr, address) == 0) {
      memcpy(row.state, state, sizeof row.state);
      memcpy(row.note, note, sizeof row.note);
      row.dependent = dependent;
      row.found = true; /* the newest incarnation is the last row: keep reading */
    }
  }
  return row;
}


/* Watches a drain until it ends: a progress line every few seconds with an ETA. */
static int watch_drain(const char *socket_path, const char *address, bool remove)
{
  char *table = malloc(REPLY_MAX);
  if (!table)
    return 1;
  printf("(Ctrl-C stops watching, not the %s; run the same command again to watch it)\n",
         remove ? "removal" : "drain");
  double start = rp_now_seconds(), last_print = 0;
  uint64_t first = UINT64_MAX;
  int rc = 1;
  for (;;) {
    int r = device_command(socket_path, "servers", table, REPLY_MAX);
    if (r != 0) {
      fprintf(stderr, "rampartctl: %s\n", table);
      break;
    }
    struct server_row row = find_row(table, address);
    if (!row.found) {
      fprintf(stderr, "rampartctl: %s is no longer listed by the device\n", address);
      break;
    }
    bool running = strcmp(row.note, "draining") == 0 || strcmp(row.note, "removing") == 0;
    if (!running) {
      double took = rp_now_seconds() - start;
      if (strcmp(row.state, "removed") == 0)
        printf("removed %s after %.1f s: nothing of this device is left there\n", address,
               took);
      else if (strcmp(row.state, "lost") == 0)
        printf("%s was lost: its pages are rebuilt on the other servers (see 'servers')\n",
               address);
      else
        printf("drained %s after %.1f s: no page depends on it; it takes no new pages until "
               "added again\n",
               address, took);
      rc = 0;
      break;
    }
    if (first == UINT64_MAX)
      first = row.dependent;
    double t = rp_now_seconds();
    if (t - last_print >= 2.0) {
      double rate = t - start > 0.5
                      ? (double)(first - (row.dependent < first ? row.dependent : first)) /
                          (t - start)
                      : 0.0;
      if (rate > 0)
        printf("%s %s: %llu pages left, %.0f pages/s, about %.0f s to go\n",
               remove ? "removing" : "draining", address, (unsigned long long)row.dependent,
               rate, (double)row.dependent / rate);
      else
        printf("%s %s: %llu pages left\n", remove ? "removing" : "draining", address,
               (unsigned long long)row.dependent);
      fflush(stdout);
      last_print = t;
    }
    usleep(250 * 1000);
  }
  free(table);
  return rc;
}

int device_control_main(const char *socket_path, int argc, char **argv)
{
  bool wait = true;
  const char *words[2] = { NULL, NULL };
  int nwords = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--no-wait") == 0)
      wait = false;
    else if (nwords < 2)
      words[nwords++] = argv[i];
    else
      return device_control_usage("too many arguments");
  }
  const char *cmd = nwords ? words[0] : "servers";
  const char *arg = nwords > 1 ? words[1] : NULL;
  bool needs_arg = strcmp(cmd, "add") == 0 || strcmp(cmd, "drain") == 0 ||
                   strcmp(cmd, "remove") == 0;
  bool takes_none = strcmp(cmd, "servers") == 0 || strcmp(cmd, "reload") == 0;
  if (!needs_arg && !takes_none)
    return device_control_usage("unknown device command: use servers, add, drain, remove or "
                                "reload");
  if (needs_arg && !arg)
    return device_control_usage("this device command needs HOST:PORT");
  if (takes_none && arg)
    return device_control_usage("this device command takes no argument");
  char line[512];
  snprintf(line, sizeof line, "%s%s%s", cmd, arg ? " " : "", arg ? arg : "");
  char *reply = malloc(REPLY_MAX);
  if (!reply)
    return 1;
  int r = device_command(socket_path, line, reply, REPLY_MAX);
  if (r < 0 || r == 1) {
    fprintf(stderr, "rampartctl: %s\n", reply);
    free(reply);
    return 1;
  }
  puts(reply);
  free(reply);
  fflush(stdout);
  bool drains = strcmp(cmd, "drain") == 0 || strcmp(cmd, "remove") == 0;
  if (drains && wait)
    return watch_drain(socket_path, arg, strcmp(cmd, "remove") == 0);
  return 0;
}
