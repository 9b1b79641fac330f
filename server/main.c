/* rampartd: parse the settings, bind, (daemonize,) serve until SIGTERM.
 *
 * The process holds the cluster key and other hosts' pages, so before anything else it
 * makes itself non-dumpable (no core file, no ptrace or /proc/PID/mem by the same
 * user), keeps the key in secret memory (common/secret.h) that every exit path wipes,
 * and with --mlock locks itself in RAM so no page it holds is written to this host's
 * swap.
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
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

#include "auth.h"
#include "etcd_announce.h"
#include "file_create.h"
#include "hop_trace.h"
#include "listener.h"
#include "log.h"
#include "metrics_http.h"
#include "options.h"
#include "parse.h"
#include "secret.h"
#include "server.h"

/* The cluster key, in secret memory; wiped by forget_key on every way out. */
static struct rp_key *cluster_key;

static void forget_key(void)
{
  rp_secret_free(cluster_key, sizeof *cluster_key);
  cluster_key = NULL;
}

static void syslog_sink(enum rp_log_level level, const char *line)
{
  static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
  syslog(prio[level], "%s", line);
}

/* Double fork: the daemon is not a session leader, so it can never reacquire a
 * terminal. Returns the write end of a pipe the daemon uses to report readiness; the
 * original process never returns (it exits with the daemon's verdict). */
static int daemonize(const char *bound, const char *metrics_bound)
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
    forget_key(); /* exit() runs it too; explicit, as this process's work is done */
    if (n != 1) {
      fprintf(stderr, "rampartd: the daemon failed to start (see the system log)\n");
      exit(1);
    }
    printf("rampartd: listening on %s\n", bound);
    if (metrics_bound[0])
      printf("rampartd: metrics on http://%s/metrics\n", metrics_bound);
    fflush(stdout);
    exit(0);
  }
  close(pipefd[0]);
  setsid();
  pid = fork();
  if (pid < 0 || pid > 0) {
    forget_key(); /* _exit skips atexit handlers */
    _exit(pid < 0 ? 1 : 0);
  }
  if (chdir("/") < 0) {
    forget_key();
    _exit(1);
  }
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
  int fd = rp_file_create(path, 0644);
  FILE *f = fd >= 0 ? fdopen(fd, "we") : NULL;
  if (!f) {
    rp_log(RP_LOG_ERROR, "cannot write --pid-file %s: %s", path, rp_file_why(errno));
    if (fd >= 0)
      close(fd);
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
    rp_log(RP_LOG_WARN,
           "RLIMIT_NOFILE is %llu, less than the %llu descriptors "
           "--max-connections and --max-unauthenticated may need: raise it (systemd: "
           "LimitNOFILE=) or lower those limits",
           (unsigned long long)rl.rlim_cur, (unsigned long long)need);
}

/* A reply buffer that grew during a burst is freed when drained (connection.c); glibc
 * would otherwise raise its mmap threshold after the first such free and keep later
 * buffers in a heap it rarely trims, so the memory never went back to the host. A
 * fixed threshold disables that adjustment. */
static void tune_malloc(void)
{
  mallopt(M_MMAP_THRESHOLD, 512 * 1024);
}

/* True when this process may lock memory past RLIMIT_MEMLOCK (CAP_IPC_LOCK, bit 14 of
 * the effective set). */
static bool has_cap_ipc_lock(void)
{
  FILE *f = fopen("/proc/self/status", "re");
  char line[256];
  unsigned long long eff = 0;
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f))
    found = sscanf(line, "CapEff: %llx", &eff) == 1;
  if (f)
    fclose(f);
  return found && (eff & (1ull << 14));
}

/* --mlock: the whole --memory may end up locked, so a finite RLIMIT_MEMLOCK without
 * CAP_IPC_LOCK is refused up front, on the operator's terminal, rather than failing
 * writes later. 0, or -1 with err. */
static int check_memlock(const struct rps_options *opt, char *err, size_t errlen)
{
  struct rlimit rl;
  char mem[32];
  rp_format_bytes(opt->memory, mem, sizeof mem);
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      !has_cap_ipc_lock()) {
    char lim[32];
    rp_format_bytes((uint64_t)rl.rlim_cur, lim, sizeof lim);
    snprintf(err, errlen,
             "--mlock: RLIMIT_MEMLOCK is %s, but the %s of --memory (and the "
             "connection buffers) must be lockable: under systemd set LimitMEMLOCK=infinity "
             "(rampartd.service does), in a shell run 'ulimit -l unlimited' as root, or give "
             "rampartd CAP_IPC_LOCK; or run without --mlock, accepting that stored pages "
             "may be swapped to this host's disk",
             lim, mem);
    return -1;
  }
  return 0;
}

/* --mlock, in the process that serves (locks are not inherited across fork): every
 * page mapped from now on is locked as it is first touched (MCL_ONFAULT: a 2 MiB chunk
 * costs RAM page by page, as without locking). 0, or -1 with err. */
static int lock_memory(char *err, size_t errlen)
{
  if (mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) < 0) {
    snprintf(err, errlen,
             "--mlock: mlockall failed: %s (RLIMIT_MEMLOCK too low? under "
             "systemd set LimitMEMLOCK=infinity; or run without --mlock)",
             strerror(errno));
    return -1;
  }
  return 0;
}

/* --etcd: the address devices are told is --advertise, or the bound one when that
 * names this host (a wildcard does not). NULL after logging why. */
static struct rps_announce *start_announcing(struct rps_server *srv, const char *bound)
{
  const char *advertise = srv->opt->advertise[0] ? srv->opt->advertise : bound;
  if (!srv->opt->advertise[0] &&
      (strncmp(bound, "0.0.0.0:", 8) == 0 || strncmp(bound, "[::]:", 5) == 0)) {
    rp_log(RP_LOG_ERROR,
           "--etcd: this server listens on every address (%s); say which one "
           "devices should use with --advertise HOST:PORT",
           bound);
    return NULL;
  }
  char err[600];
  struct rps_announce *a = rps_announce_start(srv, advertise, err, sizeof err);
  if (!a)
    rp_log(RP_LOG_ERROR, "%s", err);
  return a;
}

static int run(const struct rps_options *opt)
{
  char err[1024];
  cluster_key = rp_secret_alloc(sizeof *cluster_key);
  if (!cluster_key) {
    fprintf(stderr, "rampartd: cannot map memory for the key: %s\n", strerror(errno));
    return 1;
  }
  if (opt->key_path[0] && rp_key_load(opt->key_path, cluster_key, err, sizeof err) < 0) {
    fprintf(stderr, "rampartd: --key: %s\n", err);
    return 2;
  }
  if (opt->mlock && check_memlock(opt, err, sizeof err) < 0) {
    fprintf(stderr, "rampartd: %s\n", err);
    return 1;
  }
  char bound[128];
  int exit_code = 1;
  int fd = rps_listener_open(opt->listen_host, opt->listen_port, cluster_key->len > 0, bound,
                             sizeof bound, &exit_code, err, sizeof err);
  if (fd < 0) {
    fprintf(stderr, "rampartd: %s\n", err);
    return exit_code;
  }
  /* Bound before daemonizing too, so a taken metrics port is an error on the terminal.
   * No key rule here: the counters hold no page and no key. */
  char metrics_bound[128] = "";
  int metrics_fd = -1;
  if (opt->metrics_host[0]) {
    metrics_fd = rps_listener_open(opt->metrics_host, opt->metrics_port, true, metrics_bound,
                                   sizeof metrics_bound, &exit_code, err, sizeof err);
    if (metrics_fd < 0) {
      fprintf(stderr, "rampartd: --metrics: %s\n", err);
      close(fd);
      return exit_code;
    }
  }
  int ready_fd = opt->foreground ? -1 : daemonize(bound, metrics_bound);
  raise_nofile(opt);
  tune_malloc();
  if (opt->mlock && lock_memory(err, sizeof err) < 0) {
    rp_log(RP_LOG_ERROR, "%s", err);
    close(fd);
    if (metrics_fd >= 0)
      close(metrics_fd);
    return 1;
  }

  if (rp_hop_trace_start(err, sizeof err) < 0) {
    rp_log(RP_LOG_ERROR, "%s", err);
    close(fd);
    if (metrics_fd >= 0)
      close(metrics_fd);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
  if (!loop) {
    rp_log(RP_LOG_ERROR, "cannot start the event loop");
    close(fd);
    if (metrics_fd >= 0)
      close(metrics_fd);
    return 1;
  }
  struct rps_server srv;
  if (rps_server_init(&srv, loop, opt, cluster_key, fd, err, sizeof err) < 0) {
    rp_log(RP_LOG_ERROR, "%s", err);
    if (metrics_fd >= 0)
      close(metrics_fd);
    ev_loop_destroy(loop);
    return 1;
  }
  struct rps_metrics_http *metrics = NULL;
  if (metrics_fd >= 0 && !(metrics = rps_metrics_http_start(loop, metrics_fd, &srv))) {
    rp_log(RP_LOG_ERROR, "--metrics: out of memory for the metrics listener");
    rps_server_cleanup(&srv);
    ev_loop_destroy(loop);
    return 1;
  }
  if (opt->pid_file[0] && write_pid_file(opt->pid_file) < 0) {
    rps_metrics_http_stop(metrics);
    rps_server_cleanup(&srv);
    ev_loop_destroy(loop);
    return 1;
  }
  char mem[32];
  rp_log(RP_LOG_INFO, "serving %s of pages as '%s' on %s (%s, lease %llu s)",
         rp_format_bytes(opt->memory, mem, sizeof mem), opt->name, bound,
         cluster_key->len ? "cluster key required" : "no key, loopback only",
         (unsigned long long)opt->lease_seconds);
  rps_fault_announce(opt->test_fault);
  struct rps_announce *announce = NULL;
  if (opt->etcd_endpoints[0] && !(announce = start_announcing(&srv, bound))) {
    rps_metrics_http_stop(metrics);
    rps_server_cleanup(&srv);
    ev_loop_destroy(loop);
    return 1;
  }
  if (ready_fd >= 0) {
    ssize_t ignored = write(ready_fd, "k", 1);
    (void)ignored;
    close(ready_fd);
  } else {
    printf("rampartd: listening on %s\n", bound);
    if (metrics_bound[0])
      printf("rampartd: metrics on http://%s/metrics\n", metrics_bound);
    fflush(stdout);
  }

  rps_server_run(&srv);

  rps_announce_stop(announce); /* first: devices stop choosing a server that is going */
  rps_metrics_http_stop(metrics);
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
  /* First of all: from here on this process may hold the key and other hosts' pages. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  atexit(forget_key);
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
  int rc = run(&opt);
  forget_key();
  return rc;
}
