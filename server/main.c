/* rampartd: parse the settings, bind, (daemonize,) serve until SIGTERM.
 *
 * The socket is bound before daemonizing so that "port in use" and a refused address
 * reach the operator's terminal with a non-zero exit, and the parent waits for the
 * daemon to say it is ready before it prints "listening on" and exits 0: a script that
 * starts rampartd can rely on both.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

#include "auth.h"
#include "listener.h"
#include "log.h"
#include "options.h"
#include "parse.h"
#include "server.h"

static void syslog_sink(enum rp_log_level level, const char *line)
{
  static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
  syslog(prio[level], "%s", line);
}

/* Double fork: the daemon is not a session leader, so it can never reacquire a
 * terminal. Returns the write end of a pipe the daemon uses to report readiness; the
 * original process never returns (it exits with the daemon's verdict). */
static int daemonize(const char *bound)
{
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) {
    fprintf(stderr, "rampartd: cannot create a pipe: %s\n", strerror(errno));
    exit(1);
  }
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "rampartd: cannot fork: %s\n", strerror(errno));
    exit(1);
  }
  if (pid > 0) {
    close(pipefd[1]);
    char ok;
    ssize_t n;
    do
      n = read(pipefd[0], &ok, 1);
    while (n < 0 && errno == EINTR);
    waitpid(pid, NULL, 0);
    if (n != 1) {
      fprintf(stderr, "rampartd: the daemon failed to start (see the system log)\n");
      exit(1);
    }
    printf("rampartd: listening on %s\n", bound);
    fflush(stdout);
    exit(0);
  }
  close(pipefd[0]);
  setsid();
  pid = fork();
  if (pid < 0)
    _exit(1);
  if (pid > 0)
    _exit(0);
  if (chdir("/") < 0)
    _exit(1);
  umask(022);
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    if (null > STDERR_FILENO)
      close(null);
  }
  openlog("rampartd", LOG_PID, LOG_DAEMON);
  rp_log_set_sink(syslog_sink);
  return pipefd[1];
}

static int write_pid_file(const char *path)
{
  FILE *f = fopen(path, "we");
  if (!f) {
    rp_log(RP_LOG_ERROR, "cannot write --pid-file %s: %s", path, strerror(errno));
    return -1;
  }
  fprintf(f, "%ld\n", (long)getpid());
  fclose(f);
  return 0;
}

/* Every connection is a descriptor: the soft limit (often 1024) would make accept fail
 * long before --max-connections plus the handshake budget is reached. */
static void raise_nofile(const struct rps_options *opt)
{
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
    return;
  rlim_t need = (rlim_t)opt->max_connections + opt->max_unauthenticated + 64;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
    rp_log(RP_LOG_WARN, "RLIMIT_NOFILE is %llu, less than the %llu descriptors "
           "--max-connections and --max-unauthenticated may need: raise it (systemd: "
           "LimitNOFILE=) or lower those limits", (unsigned long long)rl.rlim_cur,
           (unsigned long long)need);
}

/* A reply buffer that grew during a burst is freed when drained (connection.c); glibc
 * would otherwise raise its mmap threshold after the first such free and keep later
 * buffers in a heap it rarely trims, so the memory never went back to the host. A
 * fixed threshold disables that adjustment. */
static void tune_malloc(void)
{
  mallopt(M_MMAP_THRESHOLD, 512 * 1024);
}

static int run(const struct rps_options *opt)
{
  struct rp_key key;
  memset(&key, 0, sizeof key);
  char err[1024];
  if (opt->key_path[0] && rp_key_load(opt->key_path, &key, err, sizeof err) < 0) {
    fprintf(stderr, "rampartd: --key: %s\n", err);
    return 2;
  }
  char bound[128];
  int exit_code = 1;
  int fd = rps_listener_open(opt->listen_host, opt->listen_port, key.len > 0, bound,
                             sizeof bound, &exit_code, err, sizeof err);
  if (fd < 0) {
    fprintf(stderr, "rampartd: %s\n", err);
    return exit_code;
  }
  int ready_fd = opt->foreground ? -1 : daemonize(bound);
  raise_nofile(opt);
  tune_malloc();

  signal(SIGPIPE, SIG_IGN);
  struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
  if (!loop) {
    rp_log(RP_LOG_ERROR, "cannot start the event loop");
    close(fd);
    return 1;
  }
  struct rps_server srv;
  if (rps_server_init(&srv, loop, opt, &key, fd, err, sizeof err) < 0) {
    rp_log(RP_LOG_ERROR, "%s", err);
    ev_loop_destroy(loop);
    return 1;
  }
  if (opt->pid_file[0] && write_pid_file(opt->pid_file) < 0) {
    rps_server_cleanup(&srv);
    ev_loop_destroy(loop);
    return 1;
  }
  char mem[32];
  rp_log(RP_LOG_INFO, "serving %s of pages as '%s' on %s (%s, lease %llu s)",
         rp_format_bytes(opt->memory, mem, sizeof mem), opt->name, bound,
         key.len ? "cluster key required" : "no key, loopback only",
         (unsigned long long)opt->lease_seconds);
  rps_fault_announce(opt->test_fault);
  if (ready_fd >= 0) {
    ssize_t ignored = write(ready_fd, "k", 1);
    (void)ignored;
    close(ready_fd);
  } else {
    printf("rampartd: listening on %s\n", bound);
    fflush(stdout);
  }

  rps_server_run(&srv);

  rps_server_cleanup(&srv);
  rps_fault_release();
  ev_loop_destroy(loop);
  if (opt->pid_file[0])
    unlink(opt->pid_file);
  rp_log(RP_LOG_INFO, "stopped");
  return 0;
}

int main(int argc, char **argv)
{
  rp_log_set_program("rampartd");
  static struct rps_options opt; /* PATH_MAX strings: keep them off the stack */
  char err[1024];
  switch (rps_options_parse(argc, argv, &opt, err, sizeof err)) {
  case RPS_OPTIONS_EXIT_OK:
    return 0;
  case RPS_OPTIONS_BAD:
    fprintf(stderr, "rampartd: %s\n", err);
    return 2;
  case RPS_OPTIONS_OK:
    break;
  }
  if (opt.verbose)
    rp_log_set_level(RP_LOG_DEBUG);
  return run(&opt);
}
