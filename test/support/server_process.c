/* Test helpers for real rampartd processes (see server_process.h). */
#include "server_process.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define LISTEN_LINE "rampartd: listening on "
#define START_TIMEOUT_MS 10000
#define STOP_TIMEOUT_MS 10000

uint64_t rp_test_now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void rp_test_sleep_ms(unsigned ms)
{
  usleep(ms * 1000u);
}

static void sleep_ms(unsigned ms)
{
  struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

int rp_test_tmpdir(char *out, size_t outlen)
{
  const char *base = getenv("TMPDIR");
  if (!base || !*base)
    base = "/tmp";
  if ((size_t)snprintf(out, outlen, "%s/rampart-test-XXXXXX", base) >= outlen)
    return -1;
  if (!mkdtemp(out)) {
    fprintf(stderr, "test: mkdtemp %s: %s\n", out, strerror(errno));
    return -1;
  }
  return 0;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
  remove(path);
  return 0;
}

void rp_test_tmpdir_remove(const char *dir)
{
  if (dir && dir[0])
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

int rp_test_write_key(const char *dir, const char *name, char *path, size_t pathlen,
                      struct rp_key *key)
{
  char err[512];
  if ((size_t)snprintf(path, pathlen, "%s/%s", dir, name) >= pathlen)
    return -1;
  if (rp_key_generate(path, err, sizeof err) < 0) {
    fprintf(stderr, "test: %s\n", err);
    return -1;
  }
  if (key && rp_key_load(path, key, err, sizeof err) < 0) {
    fprintf(stderr, "test: %s\n", err);
    return -1;
  }
  return 0;
}

int rp_test_write_file(const char *path, const char *text)
{
  char tmp[1024];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid()) >= sizeof tmp)
    return -1;
  FILE *f = fopen(tmp, "w");
  if (!f)
    return -1;
  fputs(text, f);
  if (fclose(f) != 0)
    return -1;
  return rename(tmp, path);
}

const char *rp_test_rampartd_path(void)
{
  const char *p = getenv("RAMPARTD");
  if (!p || !*p) {
    fprintf(stderr, "test: RAMPARTD is not set: run the tests through ctest, or set "
                    "RAMPARTD=/path/to/rampartd\n");
    return NULL;
  }
  return p;
}

const char *rp_test_rampartd_faults_path(void)
{
  const char *p = getenv("RAMPARTD_FAULTS");
  if (!p || !*p) {
    fprintf(stderr, "test: RAMPARTD_FAULTS is not set: run the tests through ctest in a "
                    "build with -DRAMPART_TEST_FAULTS=ON, or set "
                    "RAMPARTD_FAULTS=/path/to/rampartd-faults\n");
    return NULL;
  }
  return p;
}

/* The binary for these arguments: the test-only one when they ask for a fault. */
static const char *rampartd_for(const char *const *args)
{
  for (size_t i = 0; args && args[i]; i++)
    if (strncmp(args[i], "--test-fault", 12) == 0)
      return rp_test_rampartd_faults_path();
  return rp_test_rampartd_path();
}

static void echo_file(const char *label, const char *path)
{
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  char line[1024];
  while (fgets(line, sizeof line, f))
    fprintf(stderr, "%s%s", label, line);
  fclose(f);
}

static pid_t spawn(const char *const *args, int out_fd, int err_fd)
{
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed test */
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    execv(args[0], (char *const *)args);
    fprintf(stderr, "test: cannot run %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  return pid;
}

/* Looks for the listening line in the stdout file; fills host/port. */
static bool find_listen_line(struct rp_test_server *s)
{
  FILE *f = fopen(s->stdout_path, "r");
  if (!f)
    return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    char *p = strstr(line, LISTEN_LINE);
    char *nl = strchr(line, '\n');
    if (!p || !nl)
      continue;
    *nl = '\0';
    p += strlen(LISTEN_LINE);
    char *colon = strrchr(p, ':');
    if (!colon)
      continue;
    *colon = '\0';
    const char *host = p;
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
      p[hl - 1] = '\0';
      host = p + 1;
    }
    snprintf(s->host, sizeof s->host, "%s", host);
    snprintf(s->port, sizeof s->port, "%s", colon + 1);
    snprintf(s->addr, sizeof s->addr, "%s:%s", s->host, s->port);
    found = s->port[0] != '\0';
  }
  fclose(f);
  return found;
}

int rp_test_server_start_argv(struct rp_test_server *s, const char *dir,
                              const char *const *args)
{
  static int counter;
  memset(s, 0, sizeof *s);
  int n = ++counter;
  snprintf(s->stdout_path, sizeof s->stdout_path, "%s/rampartd-%d.out", dir, n);
  snprintf(s->stderr_path, sizeof s->stderr_path, "%s/rampartd-%d.err", dir, n);
  int out_fd = open(s->stdout_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err_fd = open(s->stderr_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || err_fd < 0) {
    fprintf(stderr, "test: cannot create server output files in %s\n", dir);
    if (out_fd >= 0)
      close(out_fd);
    if (err_fd >= 0)
      close(err_fd);
    return -1;
  }
  pid_t pid = spawn(args, out_fd, err_fd);
  close(out_fd);
  close(err_fd);
  if (pid < 0)
    return -1;
  s->pid = pid;
  uint64_t deadline = rp_test_now_ms() + START_TIMEOUT_MS;
  while (rp_test_now_ms() < deadline) {
    if (find_listen_line(s))
      return 0;
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      s->pid = 0;
      fprintf(stderr, "test: rampartd exited before listening (status 0x%x); its output:\n",
              status);
      echo_file("  rampartd stdout: ", s->stdout_path);
      echo_file("  rampartd stderr: ", s->stderr_path);
      return -1;
    }
    sleep_ms(10);
  }
  fprintf(stderr, "test: rampartd did not print '%s...' within %d ms; its stderr:\n",
          LISTEN_LINE, START_TIMEOUT_MS);
  echo_file("  rampartd stderr: ", s->stderr_path);
  rp_test_server_kill(s);
  return -1;
}

int rp_test_server_start(struct rp_test_server *s, const char *dir,
                         const char *const *extra_args)
{
  const char *bin = rampartd_for(extra_args);
  if (!bin)
    return -1;
  const char *args[64];
  size_t n = 0;
  args[n++] = bin;
  args[n++] = "--listen";
  args[n++] = "127.0.0.1:0";
  args[n++] = "--foreground";
  bool own_pressure = false;
  for (size_t i = 0; extra_args && extra_args[i]; i++) {
    if (n + 3 >= sizeof args / sizeof args[0])
      return -1;
    own_pressure |= strcmp(extra_args[i], "--pressure-file") == 0 ||
                    strcmp(extra_args[i], "--psi-threshold") == 0;
    args[n++] = extra_args[i];
  }
  /* A server reads the host's memory pressure and refuses reservations past its
   * threshold. The machine running the tests is not what a test is about (a swap test
   * in a memory cgroup alongside raises the host's PSI): unless the test chose, the
   * server reads a calm pressure file of its own. */
  static char calm[600];
  if (!own_pressure) {
    snprintf(calm, sizeof calm, "%s/calm-psi", dir);
    if (rp_test_write_file(calm, RP_TEST_PSI_CALM) < 0)
      return -1;
    args[n++] = "--pressure-file";
    args[n++] = calm;
  }
  args[n] = NULL;
  return rp_test_server_start_argv(s, dir, args);
}

static int wait_exit(pid_t pid, uint32_t timeout_ms, int *status)
{
  uint64_t deadline = rp_test_now_ms() + timeout_ms;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid)
      return 0;
    if (r < 0 && errno != EINTR)
      return -1;
    if (rp_test_now_ms() >= deadline)
      return 1;
    sleep_ms(5);
  }
}

int rp_test_server_stop(struct rp_test_server *s)
{
  if (s->pid <= 0)
    return -1;
  int status = -1;
  /* A paused server must wake up to handle SIGTERM. SIGCONT goes first: sent after,
   * it can land while the server is already exiting, and under the sanitizers exit is
   * when LeakSanitizer stops the process's threads with ptrace to scan them. One CI run
   * saw a server log "stopped" and then never exit; a signal arriving in that window is
   * the one thing this harness could have done to it. */
  kill(s->pid, SIGCONT);
  kill(s->pid, SIGTERM);
  int r = wait_exit(s->pid, STOP_TIMEOUT_MS, &status);
  if (r == 1) {
    fprintf(stderr, "test: rampartd %d ignored SIGTERM for %d ms: killing it\n", (int)s->pid,
            STOP_TIMEOUT_MS);
    kill(s->pid, SIGKILL);
    r = wait_exit(s->pid, STOP_TIMEOUT_MS, &status);
  }
  if (r == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    fprintf(stderr, "test: rampartd %d ended with status 0x%x; its stderr:\n", (int)s->pid,
            status);
    echo_file("  rampartd stderr: ", s->stderr_path);
  }
  s->pid = 0;
  return r == 0 ? status : -1;
}

const char *rp_test_describe_status(int status, char *buf, size_t len)
{
  if (status == -1)
    snprintf(buf, len, "no status (not reaped)");
  else if (WIFEXITED(status))
    snprintf(buf, len, "exit %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, len, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    snprintf(buf, len, "wait status 0x%x", status);
  return buf;
}

static int report_death(struct rp_test_server *s, int status)
{
  char how[96];
  fprintf(stderr,
          "test: rampartd %s died during the test (%s) before it was asked to stop; "
          "its stderr:\n",
          s->addr, rp_test_describe_status(status, how, sizeof how));
  echo_file("  rampartd stderr: ", s->stderr_path);
  return -1;
}

int rp_test_server_stop_clean(struct rp_test_server *s)
{
  if (s->pid <= 0)
    return s->died ? report_death(s, s->died_status) : 0;
  int status;
  if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
    s->pid = 0;
    s->died = true;
    s->died_status = status;
    return report_death(s, status);
  }
  status = rp_test_server_stop(s); /* echoes stderr itself on a bad exit */
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int rp_test_server_kill(struct rp_test_server *s)
{
  if (s->pid <= 0)
    return -1;
  int status = -1;
  kill(s->pid, SIGKILL);
  int r = wait_exit(s->pid, STOP_TIMEOUT_MS, &status);
  s->pid = 0;
  return r == 0 ? status : -1;
}

int rp_test_server_pause(struct rp_test_server *s)
{
  return s->pid > 0 ? kill(s->pid, SIGSTOP) : -1;
}

int rp_test_server_resume(struct rp_test_server *s)
{
  return s->pid > 0 ? kill(s->pid, SIGCONT) : -1;
}

bool rp_test_server_alive(struct rp_test_server *s)
{
  if (s->pid <= 0)
    return false;
  int status;
  if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
    s->pid = 0;
    s->died = true;
    s->died_status = status;
    return false;
  }
  return true;
}

int rp_test_run_program(const char *const *argv, char *out, size_t outlen,
                        uint32_t timeout_ms)
{
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return -1;
  pid_t pid = spawn(argv, p[1], p[1]);
  close(p[1]);
  if (pid < 0) {
    close(p[0]);
    return -1;
  }
  size_t got = 0;
  if (outlen)
    out[0] = '\0';
  uint64_t deadline = rp_test_now_ms() + timeout_ms;
  bool eof = false;
  while (!eof) {
    uint64_t now = rp_test_now_ms();
    if (now >= deadline)
      break;
    struct pollfd pfd = { .fd = p[0], .events = POLLIN };
    int n = poll(&pfd, 1, (int)(deadline - now));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    char buf[4096];
    ssize_t r = read(p[0], buf, sizeof buf);
    if (r <= 0) {
      eof = true;
      break;
    }
    size_t take = (size_t)r;
    if (outlen && got + take > outlen - 1)
      take = outlen - 1 - got;
    memcpy(out + got, buf, take);
    got += take;
    if (outlen)
      out[got] = '\0';
  }
  close(p[0]);
  int status = -1;
  uint64_t now = rp_test_now_ms();
  uint32_t left = now < deadline ? (uint32_t)(deadline - now) : 0;
  int r = wait_exit(pid, eof ? left + 1000 : 0, &status);
  if (r != 0) {
    fprintf(stderr, "test: %s did not finish within %u ms: killing it\n", argv[0],
            timeout_ms);
    kill(pid, SIGKILL);
    wait_exit(pid, STOP_TIMEOUT_MS, &status);
    return -1;
  }
  return status;
}

int rp_test_run_rampartd(const char *const *args, char *out, size_t outlen,
                         uint32_t timeout_ms)
{
  const char *bin = rampartd_for(args);
  if (!bin)
    return -1;
  const char *argv[64];
  size_t n = 0;
  argv[n++] = bin;
  for (size_t i = 0; args && args[i] && n + 1 < sizeof argv / sizeof argv[0]; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  return rp_test_run_program(argv, out, outlen, timeout_ms);
}

struct rp_conn *rp_test_connect(const struct rp_test_server *s, const struct rp_key *key,
                                const uint8_t *resume_token, struct rp_session_info *info,
                                struct rp_error *err)
{
  struct rp_conn_options o;
  memset(&o, 0, sizeof o);
  o.host = s->host;
  o.port = s->port;
  o.key = key;
  o.client_name = "test";
  o.resume_token = resume_token;
  o.connect_timeout_ms = 5000;
  o.request_timeout_ms = 10000;
  return rp_conn_open(&o, info, err);
}

bool rp_test_server_stat(const struct rp_test_server *s, const struct rp_key *key,
                         struct rp_server_stat *ss)
{
  struct rp_session_info info;
  struct rp_error err;
  struct rp_conn *conn = rp_test_connect(s, key, NULL, &info, &err);
  if (!conn) {
    fprintf(stderr, "STAT of %s: %s\n", s->addr, err.message);
    return false;
  }
  bool ok = rp_stat_sync(conn, ss, &err) == 0;
  if (!ok)
    fprintf(stderr, "STAT of %s: %s\n", s->addr, err.message);
  rp_goodbye_sync(conn, &err);
  rp_conn_close(conn);
  return ok;
}

int rp_test_raw_connect(const struct rp_test_server *s)
{
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(s->host, s->port, &hints, &res) != 0)
    return -1;
  int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

void rp_test_fill_page(uint8_t *page, uint64_t seed, uint64_t slot)
{
  uint64_t x = seed ^ (slot * UINT64_C(0xD1B54A32D192ED03)) ^ UINT64_C(0x5851F42D4C957F2D);
  for (size_t i = 0; i < RP_PAGE_SIZE; i += 8) {
    uint64_t z = (x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    memcpy(page + i, &z, 8);
  }
}

bool rp_test_file_has(const char *path, const char *text)
{
  FILE *f = fopen(path, "r");
  char line[1024];
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f))
    found = strstr(line, text) != NULL;
  if (f)
    fclose(f);
  return found;
}

long rp_test_process_status_kib(pid_t pid, const char *field)
{
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long kib = -1;
  size_t n = strlen(field);
  while (f && kib < 0 && fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':')
      kib = strtol(line + n + 1, NULL, 10);
  if (f)
    fclose(f);
  return kib;
}

void rp_test_print_file(const char *path, const char *prefix)
{
  FILE *f = fopen(path, "r");
  char line[1024];
  while (f && fgets(line, sizeof line, f))
    printf("%s%s", prefix, line);
  if (f)
    fclose(f);
  fflush(stdout);
}

void rp_test_expect_refusals(const char *program, const struct rp_test_refusal *cases,
                             unsigned n)
{
  static char out[4096];
  for (unsigned i = 0; i < n; i++) {
    const char *argv[9] = { program };
    for (unsigned k = 0; k < 7 && cases[i].argv[k]; k++)
      argv[k + 1] = cases[i].argv[k];
    int status = rp_test_run_program(argv, out, sizeof out, 10000);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 2 || !strstr(out, cases[i].says))
      fail_msg("case %u: status %d, expected exit 2 saying '%s'; it said: %s", i, status,
               cases[i].says, out);
  }
}
