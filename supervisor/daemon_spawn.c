/* The daemons' supervisors, the notify listener and their messages (daemon_spawn.h). */
#include "daemon_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tools/notify_listen.h"
#include "proc_identity.h"
#include "swap_context.h"
#include "swap_state.h"

extern char **environ;

/* In a forked child: a session of its own, spared by the OOM killer, stdin from
 * /dev/null and both outputs appended to log; keep_fd is moved to fd 3 and every other
 * descriptor closed, so no lock or socket of rampart-swap's lives on in a daemon. */
static void become_detached(const char *log, int keep_fd)
{
  setsid();
  int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (adj >= 0) {
    (void)!write(adj, "-1000", 5);
    close(adj);
  }
  int in = open("/dev/null", O_RDONLY);
  int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (in >= 0)
    dup2(in, STDIN_FILENO);
  if (out >= 0) {
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
  }
  if (keep_fd >= 0)
    dup2(keep_fd, 3);
  close_range(keep_fd >= 0 ? 4 : 3, ~0U, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGINT, SIG_DFL); /* 'on' catches them to undo itself; a supervisor does not */
  signal(SIGTERM, SIG_DFL);
}

/* The supervisor: starts the daemon, tells its pid on fd 3 (0 when it cannot be run),
 * waits for it and writes how it ended. */
static _Noreturn void supervise(const char *tag, const char *const argv[], const char *log,
                                int pipe_w, const char *notify, const char *ld_preload)
{
  become_detached(log, pipe_w);
  setenv("NOTIFY_SOCKET", notify, 1);
  if (ld_preload)
    setenv("LD_PRELOAD", ld_preload, 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addclose(&fa, 3);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0], &fa, &attr, (char *const *)argv, environ);
  char line[32];
  int len = snprintf(line, sizeof line, "%d\n", rc == 0 ? (int)pid : 0);
  (void)!write(3, line, (size_t)len);
  close(3);
  if (rc != 0) {
    fprintf(stderr, SWAP_ME ": %s: cannot run %s: %s\n", tag, argv[0], strerror(rc));
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  fprintf(stderr, SWAP_ME ": %s exited with status %d\n", tag, code);
  _exit(0);
}

/* The daemon's pid from the supervisor's pipe, within ms; 0 when none came. */
static pid_t read_pid(int fd, int ms)
{
  char buf[32];
  size_t used = 0;
  struct pollfd p = { .fd = fd, .events = POLLIN };
  while (used < sizeof buf - 1 && poll(&p, 1, ms) > 0) {
    ssize_t n = read(fd, buf + used, sizeof buf - 1 - used);
    if (n <= 0)
      break;
    used += (size_t)n;
    if (memchr(buf, '\n', used))
      break;
  }
  buf[used] = '\0';
  return (pid_t)atoi(buf);
}

pid_t swap_spawn(const struct swap_context *c, const char *tag, const char *const argv[],
                 const char *ld_preload)
{
  char log[2400], notify[2400], file[300];
  snprintf(file, sizeof file, "%s.log", tag);
  swap_state_path(c, file, log, sizeof log);
  swap_state_path(c, "notify", notify, sizeof notify);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0)
    swap_die("cannot start %s: %s", tag, strerror(errno));
  fflush(stdout);
  fflush(stderr);
  pid_t sup = fork();
  if (sup < 0)
    swap_die("cannot start %s: %s", tag, strerror(errno));
  if (sup == 0) {
    close(fds[0]);
    supervise(tag, argv, log, fds[1], notify, ld_preload);
  }
  close(fds[1]);
  swap_identity_record(c, sup, false);
  swap_state_set(c, "supervisor_pid", "%d", (int)sup);
  pid_t pid = read_pid(fds[0], 10000);
  close(fds[0]);
  char tail[1024];
  if (pid <= 0)
    swap_die("%s did not start within 10 s: %s", tag, file_tail(log, 3, tail, sizeof tail));
  swap_identity_record(c, pid, false);
  char key[32];
  snprintf(key, sizeof key, "log_%d", (int)pid);
  swap_state_set(c, key, "%s", log);
  return pid;
}

void swap_start_notify_listener(const struct swap_context *c)
{
  char sock[2400], log[2400], tail[1024];
  swap_state_path(c, "notify", sock, sizeof sock);
  swap_state_path(c, "notify.log", log, sizeof log);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    swap_die("cannot start the notify listener: %s", strerror(errno));
  if (pid == 0) {
    become_detached(log, -1);
    char *args[] = { sock, NULL };
    _exit(notify_listen_main(1, args));
  }
  swap_state_set(c, "notify_pid", "%d", (int)pid);
  struct stat st;
  for (int i = 0; i <= 100 && !(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode)); i++)
    swap_sleep_ms(100);
  if (!(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode)))
    swap_die("the notify listener did not make %s within 10 s: %s", sock,
             file_tail(log, 3, tail, sizeof tail));
  swap_identity_record(c, pid, true);
}

/* Calls fn on each line of notify.log that pid sent, the "PID " cut off; stops when fn
 * returns true. */
static bool notify_lines(const struct swap_context *c, pid_t pid,
                         bool (*fn)(const char *line, void *arg), void *arg)
{
  char path[2400], prefix[32];
  FILE *f = fopen(swap_state_path(c, "notify.log", path, sizeof path), "re");
  if (!f)
    return false;
  int plen = snprintf(prefix, sizeof prefix, "%d ", (int)pid);
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  bool stopped = false;
  while (!stopped && (n = getline(&line, &cap, f)) >= 0) {
    if (n > 0 && line[n - 1] == '\n')
      line[n - 1] = '\0';
    if (strncmp(line, prefix, (size_t)plen) == 0)
      stopped = fn(line + plen, arg);
  }
  free(line);
  fclose(f);
  return stopped;
}

static bool line_is(const char *line, void *kv)
{
  return strcmp(line, kv) == 0;
}

bool swap_notified(const struct swap_context *c, pid_t pid, const char *kv)
{
  return pid > 0 && notify_lines(c, pid, line_is, (void *)kv);
}

struct status_find {
  const char *prefix;
  char *buf;
  size_t buflen;
  bool found;
};

static bool status_line(const char *line, void *arg)
{
  struct status_find *s = arg;
  size_t plen = strlen(s->prefix);
  if (strncmp(line, "STATUS=", 7) == 0 && strncmp(line + 7, s->prefix, plen) == 0) {
    snprintf(s->buf, s->buflen, "%s", line + 7 + plen);
    s->found = true;
  }
  return false;
}

bool swap_notified_status(const struct swap_context *c, pid_t pid, const char *prefix,
                          char *buf, size_t buflen)
{
  struct status_find s = { prefix, buf, buflen, false };
  buf[0] = '\0';
  notify_lines(c, pid, status_line, &s);
  return s.found;
}

const char *file_tail(const char *path, int n, char *buf, size_t buflen)
{
  buf[0] = '\0';
  FILE *f = fopen(path, "re");
  if (!f)
    return buf;
  char lines[8][512];
  int count = 0;
  if (n > 8)
    n = 8;
  while (fgets(lines[count % n], sizeof lines[0], f))
    count++;
  fclose(f);
  size_t used = 0;
  for (int i = count > n ? count - n : 0; i < count && used < buflen; i++) {
    char *l = lines[i % n];
    l[strcspn(l, "\n")] = '\0';
    used += (size_t)snprintf(buf + used, buflen - used, "%s ", l);
  }
  return buf;
}

void swap_wait_notified(const struct swap_context *c, pid_t pid, const char *kv, int seconds,
                        const char *what)
{
  char key[32], log[2400] = "", tail[1024];
  snprintf(key, sizeof key, "log_%d", (int)pid);
  swap_state_get(c, key, log, sizeof log);
  for (int i = 0; i < seconds * 10; i++) {
    if (swap_notified(c, pid, kv)) {
      swap_identity_record(c, pid, true);
      return;
    }
    if (!swap_pid_alive(c, pid)) {
      swap_sleep_ms(200);
      if (swap_notified(c, pid, kv))
        return;
      swap_die("%s: it exited. Its log (%s) ends: %s", what, log,
               file_tail(log, 5, tail, sizeof tail));
    }
    swap_sleep_ms(100);
  }
  swap_die("%s within %d s. Its log (%s) ends: %s", what, seconds, log,
           file_tail(log, 5, tail, sizeof tail));
}
