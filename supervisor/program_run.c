/* Short-lived programs (program_run.h). A timeout is kept with a pidfd, so waiting for
 * the output and for the end are one poll. */
#include "program_run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static long now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

static void set_output(posix_spawn_file_actions_t *fa, int fd, enum run_output mode,
                       int pipe_w)
{
  if (mode == RUN_CAPTURE && pipe_w >= 0)
    posix_spawn_file_actions_adddup2(fa, pipe_w, fd);
  else if (mode == RUN_DISCARD)
    posix_spawn_file_actions_addopen(fa, fd, "/dev/null", O_WRONLY, 0);
}

/* Reads the program's output into io->out until it closes it or the deadline passes;
 * false on the deadline. */
static bool read_output(int fd, int pidfd, const struct run_io *io, long deadline)
{
  size_t used = 0;
  bool open = fd >= 0;
  for (;;) {
    struct pollfd p[2] = { { .fd = open ? fd : -1, .events = POLLIN },
                           { .fd = open ? -1 : pidfd, .events = POLLIN } };
    int wait = -1;
    if (deadline) {
      long left = deadline - now_ms();
      if (left <= 0)
        return false;
      wait = (int)left;
    }
    int r = poll(p, 2, wait);
    if (r < 0 && errno == EINTR)
      continue;
    if (r == 0)
      return false;
    if (!open)
      return true;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) {
      open = false;
      if (pidfd < 0)
        return true;
      continue;
    }
    if (io->out && used + 1 < io->outlen) {
      size_t take = (size_t)n < io->outlen - 1 - used ? (size_t)n : io->outlen - 1 - used;
      memcpy(io->out + used, buf, take);
      used += take;
      io->out[used] = '\0';
    }
  }
}

int run_program(const char *const argv[], const struct run_io *io)
{
  static const struct run_io defaults = { 0 };
  if (!io)
    io = &defaults;
  bool capture = !io->append_to &&
                 (io->out_mode == RUN_CAPTURE || io->err_mode == RUN_CAPTURE);
  int fds[2] = { -1, -1 };
  if (io->out && io->outlen)
    io->out[0] = '\0';
  if (capture && pipe2(fds, O_CLOEXEC) < 0)
    return 127;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (io->append_to) {
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, io->append_to,
                                     O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  } else {
    set_output(&fa, STDOUT_FILENO, io->out_mode, fds[1]);
    set_output(&fa, STDERR_FILENO, io->err_mode, fds[1]);
  }
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (fds[1] >= 0)
    close(fds[1]);
  if (rc != 0) {
    if (fds[0] >= 0)
      close(fds[0]);
    return 127;
  }
  int pidfd = io->timeout_ms ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
  long deadline = io->timeout_ms ? now_ms() + io->timeout_ms : 0;
  bool in_time = true;
  if (fds[0] >= 0 || pidfd >= 0)
    in_time = read_output(fds[0], pidfd, io, deadline);
  if (!in_time)
    kill(pid, SIGKILL);
  if (fds[0] >= 0)
    close(fds[0]);
  if (pidfd >= 0)
    close(pidfd);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (!in_time)
    return 124;
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WEXITSTATUS(status) == 127 ? 127 : WEXITSTATUS(status);
}

bool run_quiet(const char *const argv[])
{
  struct run_io io = { .out_mode = RUN_DISCARD, .err_mode = RUN_DISCARD };
  return run_program(argv, &io) == 0;
}
