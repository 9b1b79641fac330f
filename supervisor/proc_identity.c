/* Recorded processes and their pidfds (proc_identity.h). */
#include "proc_identity.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "swap_context.h"
#include "swap_state.h"

bool proc_start_time(pid_t pid, char *buf, size_t buflen)
{
  char path[64], stat[1024];
  if (pid <= 0)
    return false;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return false;
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = '\0';
  /* After the name, which may hold ' ' and ')': field 3 on; the start time is field 22. */
  char *p = strrchr(stat, ')');
  if (!p)
    return false;
  p++;
  for (int field = 3; field < 22 && p; field++)
    p = strchr(p + 1, ' ');
  if (!p)
    return false;
  size_t len = strcspn(p + 1, " ");
  snprintf(buf, buflen, "%.*s", (int)len, p + 1);
  return len > 0;
}

bool proc_exe(pid_t pid, char *buf, size_t buflen)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
  ssize_t n = readlink(path, buf, buflen - 1);
  if (n <= 0)
    return false;
  buf[n] = '\0';
  static const char deleted[] = " (deleted)";
  size_t dl = sizeof deleted - 1;
  if ((size_t)n > dl && strcmp(buf + n - dl, deleted) == 0)
    buf[n - dl] = '\0';
  return true;
}

void swap_identity_record(const struct swap_context *c, pid_t pid, bool with_exe)
{
  char start[32], exe[4096] = "", key[32];
  if (!proc_start_time(pid, start, sizeof start))
    return; /* it ended already: whoever waits for it says so */
  if (with_exe)
    proc_exe(pid, exe, sizeof exe);
  snprintf(key, sizeof key, "proc_%d", (int)pid);
  swap_state_set(c, key, "%s%s%s", start, *exe ? " " : "", exe);
}

struct identity {
  pid_t pid;
  bool any;   /* the state records some identity */
  bool found; /* ... and one for pid */
  char start[32];
  char exe[4096];
};

static void note_identity(const char *line, void *arg)
{
  struct identity *id = arg;
  if (strncmp(line, "proc_", 5) != 0)
    return;
  id->any = true;
  if (atoi(line + 5) != (int)id->pid)
    return;
  const char *eq = strchr(line, '=');
  if (!eq)
    return;
  id->found = true;
  const char *v = eq + 1, *space = strchr(v, ' ');
  size_t len = space ? (size_t)(space - v) : strlen(v);
  snprintf(id->start, sizeof id->start, "%.*s", (int)len, v);
  snprintf(id->exe, sizeof id->exe, "%s", space ? space + 1 : "");
}

/* The state's proc_ lines, for pid. */
static void identity_load(const struct swap_context *c, pid_t pid, struct identity *id)
{
  *id = (struct identity){ .pid = pid };
  swap_state_file_lines(c, "state", note_identity, id);
}

/* A device started by a rampart-swap that recorded no identities (one upgraded under it)
 * is still stopped and upgraded: its pids are taken for its processes only while they run
 * one of the programs rampart-swap starts, which an unrelated process that was given a
 * pid since does not. */
static bool legacy_program(const struct swap_context *c, pid_t pid)
{
  char exe[4096], found[4096], real[4096];
  if (!proc_exe(pid, exe, sizeof exe))
    return false;
  const char *base = strrchr(exe, '/');
  base = base ? base + 1 : exe;
  static const char *const known[] = {
    "rampart-ublk", "rampart-nbd-server", "rampart-nbd-attach", "rampart-fuse", "nbdkit",
    "nbdfuse",      "rampartctl",         "rampart-swap",       "bash"
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(base, known[i]) == 0)
      return true;
  const char *progs[] = { c->prog.ublk, c->prog.nbd_server, c->prog.nbd_attach, c->prog.fuse,
                          c->prog.nbdkit };
  for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++)
    if (swap_find_program(progs[i], found, sizeof found) && realpath(found, real) &&
        strcmp(real, exe) == 0)
      return true;
  return false;
}

bool swap_pid_alive(const struct swap_context *c, pid_t pid)
{
  char start[32];
  if (!proc_start_time(pid, start, sizeof start))
    return false;
  struct identity id;
  identity_load(c, pid, &id);
  if (!id.found && !id.any)
    return legacy_program(c, pid);
  return id.found && strcmp(id.start, start) == 0;
}

bool swap_pid_ours(const struct swap_context *c, pid_t pid, const char *what)
{
  char exe[4096], start[32];
  if (swap_pid_alive(c, pid)) {
    struct identity id;
    identity_load(c, pid, &id);
    if (!id.exe[0])
      return true;
    if (!proc_exe(pid, exe, sizeof exe))
      return false;
    if (strcmp(exe, id.exe) == 0)
      return true;
  }
  if (!proc_start_time(pid, start, sizeof start))
    return false; /* ended: nothing to say */
  if (!proc_exe(pid, exe, sizeof exe))
    snprintf(exe, sizeof exe, "?");
  warn("%s (pid %d) has ended, and pid %d is now another process (%s): left alone", what,
       (int)pid, (int)pid, exe);
  char path[2400];
  if (access(swap_state_path(c, "state", path, sizeof path), W_OK) == 0)
    swap_state_set(c, "left_alone", "%d (%s; now %s)", (int)pid, what, exe);
  return false;
}

int swap_pidfd(const struct swap_context *c, pid_t pid)
{
  if (pid <= 0)
    return -1;
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0)
    return -1;
  /* Checked after the open: a match now proves the pidfd is the recorded process. */
  if (!swap_pid_alive(c, pid)) {
    close(fd);
    return -1;
  }
  return fd;
}

bool pidfd_wait_gone(int pidfd, int ms)
{
  struct pollfd p = { .fd = pidfd, .events = POLLIN };
  int r;
  do
    r = poll(&p, 1, ms);
  while (r < 0 && errno == EINTR);
  return r > 0;
}

/* A process whose pidfd says it ended may still be a zombie until its parent (often init,
 * for a daemon whose 'on' has returned) reaps it; what 'off' promises is that it is gone,
 * so this waits for that too, up to 5 s more. A failing 'on' is itself the parent of the
 * supervisors and the listener it forked, and reaps them here. */
static void wait_reaped(pid_t pid)
{
  char start[32];
  for (int i = 0; i < 500 && proc_start_time(pid, start, sizeof start); i++) {
    if (waitpid(pid, NULL, WNOHANG) == pid)
      break;
    struct timespec t = { 0, 10 * 1000000L };
    nanosleep(&t, NULL);
  }
}

bool swap_wait_gone(const struct swap_context *c, pid_t pid, int ms)
{
  int fd = swap_pidfd(c, pid);
  if (fd < 0)
    return true;
  bool gone = pidfd_wait_gone(fd, ms);
  close(fd);
  if (gone)
    wait_reaped(pid);
  return gone;
}

static int pidfd_signal(int pidfd, int sig)
{
  return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

void swap_stop_pid(const struct swap_context *c, pid_t pid, const char *what)
{
  if (!swap_pid_ours(c, pid, what))
    return;
  int fd = swap_pidfd(c, pid);
  if (fd < 0)
    return;
  pidfd_signal(fd, SIGTERM);
  if (!pidfd_wait_gone(fd, 10000)) {
    warn("%s (pid %d) ignored SIGTERM for 10 s; killing it", what, (int)pid);
    pidfd_signal(fd, SIGKILL);
    if (!pidfd_wait_gone(fd, 5000)) {
      close(fd);
      swap_die("%s (pid %d) survives SIGKILL; stop it by hand", what, (int)pid);
    }
  }
  close(fd);
  wait_reaped(pid);
}

bool swap_kill_pid(const struct swap_context *c, pid_t pid, const char *what)
{
  if (!swap_pid_ours(c, pid, what))
    return true;
  int fd = swap_pidfd(c, pid);
  if (fd < 0)
    return true;
  pidfd_signal(fd, SIGKILL);
  bool gone = pidfd_wait_gone(fd, 5000);
  close(fd);
  if (gone)
    wait_reaped(pid);
  return gone;
}

const char *proc_memory(pid_t pid, char *buf, size_t buflen)
{
  char path[64], line[256];
  long rss = -1, locked = -1;
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  snprintf(buf, buflen, "?");
  if (!f)
    return buf;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "VmRSS:", 6) == 0)
      rss = atol(line + 6);
    else if (strncmp(line, "VmLck:", 6) == 0)
      locked = atol(line + 6);
  }
  fclose(f);
  if (rss >= 0)
    snprintf(buf, buflen, "%ld MiB resident, %ld MiB locked", (rss + 1023) / 1024,
             (locked < 0 ? 0 : locked + 1023) / 1024);
  return buf;
}
