/* A real etcd cluster for tests (see etcd_cluster.h). */
#include "etcd_cluster.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server_process.h"

#define ETCD_PATH "/usr/bin/etcd"
#define ETCDCTL_PATH "/usr/bin/etcdctl"

static const char *etcd_path(void)
{
  const char *p = getenv("RAMPART_ETCD");
  return p && p[0] ? p : ETCD_PATH;
}

static const char *etcdctl_path(void)
{
  const char *p = getenv("RAMPART_ETCDCTL");
  return p && p[0] ? p : ETCDCTL_PATH;
}

const char *rp_test_etcd_missing(void)
{
  if (access(etcd_path(), X_OK) != 0)
    return "etcd is not installed (apt-get install etcd-server etcd-client; "
           "scripts/setup does)";
  if (access(etcdctl_path(), X_OK) != 0)
    return "etcdctl is not installed (apt-get install etcd-client; scripts/setup does)";
  return NULL;
}

/* A port free on loopback now. Bound and closed: another process could take it before
 * etcd does, which on a test machine is rare and shows as a failed start. */
static unsigned free_port(void)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t len = sizeof a;
  unsigned port = 0;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0)
    close(fd);
  return port;
}

static pid_t spawn_member(struct rp_test_etcd *c, unsigned i, bool existing)
{
  struct rp_test_etcd_member *m = &c->m[i];
  char name[16], client[64], peer[64];
  snprintf(name, sizeof name, "m%u", i);
  snprintf(client, sizeof client, "http://127.0.0.1:%u", m->client_port);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%u", m->peer_port);
  int out = open(m->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (out < 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, STDIN_FILENO);
    /* Elections in a fraction of a second, so the tests' leader kill is short; the
     * defaults (100 ms heartbeat, 1 s election) would do, only slower. */
    execl(etcd_path(), etcd_path(), "--name", name, "--data-dir", m->data_dir,
          "--listen-client-urls", client, "--advertise-client-urls", client,
          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
          "--initial-cluster", c->initial_cluster, "--initial-cluster-token",
          "rampart-test", "--initial-cluster-state", existing ? "existing" : "new",
          "--heartbeat-interval", "50", "--election-timeout", "500",
          "--logger", "zap", "--log-level", "warn", (char *)NULL);
    _exit(127);
  }
  close(out);
  return pid;
}

int rp_test_etcdctl(struct rp_test_etcd *c, const char *const *args, char *out,
                    size_t outlen)
{
  const char *argv[32];
  unsigned n = 0;
  argv[n++] = etcdctl_path();
  argv[n++] = "--endpoints";
  argv[n++] = c->endpoints;
  argv[n++] = "--dial-timeout=1s";
  argv[n++] = "--command-timeout=3s";
  for (unsigned i = 0; args && args[i] && n < 31; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  setenv("ETCDCTL_API", "3", 1);
  return rp_test_run_program(argv, out, outlen, 10000);
}

int rp_test_etcd_wait_healthy(struct rp_test_etcd *c, unsigned timeout_ms)
{
  uint64_t deadline = rp_test_now_ms() + timeout_ms;
  char out[2048];
  const char *put[] = { "put", "/rampart-test/health", "ok", NULL };
  while (rp_test_now_ms() < deadline) {
    int st = rp_test_etcdctl(c, put, out, sizeof out);
    if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
      return 0;
    rp_test_sleep_ms(200);
  }
  return -1;
}

static void echo_logs(const struct rp_test_etcd *c)
{
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++) {
    FILE *f = fopen(c->m[i].log_path, "re");
    char line[1024];
    fprintf(stderr, "--- etcd member %u (%s) ---\n", i, c->m[i].log_path);
    unsigned lines = 0;
    while (f && fgets(line, sizeof line, f) && lines++ < 40)
      fputs(line, stderr);
    if (f)
      fclose(f);
  }
}

int rp_test_etcd_start(struct rp_test_etcd *c, const char *dir)
{
  memset(c, 0, sizeof *c);
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  size_t ep = 0, ic = 0;
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++) {
    struct rp_test_etcd_member *m = &c->m[i];
    m->client_port = free_port();
    m->peer_port = free_port();
    if (!m->client_port || !m->peer_port)
      return -1;
    snprintf(m->data_dir, sizeof m->data_dir, "%s/etcd-m%u", dir, i);
    snprintf(m->log_path, sizeof m->log_path, "%s/etcd-m%u.log", dir, i);
    ep += (size_t)snprintf(c->endpoints + ep, sizeof c->endpoints - ep, "%shttp://127.0.0.1:%u",
                           i ? "," : "", m->client_port);
    ic += (size_t)snprintf(c->initial_cluster + ic, sizeof c->initial_cluster - ic,
                           "%sm%u=http://127.0.0.1:%u", i ? "," : "", i, m->peer_port);
  }
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++) {
    c->m[i].pid = spawn_member(c, i, false);
    if (c->m[i].pid < 0) {
      c->m[i].pid = 0;
      rp_test_etcd_stop(c);
      return -1;
    }
  }
  if (rp_test_etcd_wait_healthy(c, 20000) < 0) {
    fprintf(stderr, "etcd did not become healthy within 20 s\n");
    echo_logs(c);
    rp_test_etcd_stop(c);
    return -1;
  }
  return 0;
}

static int wait_gone(pid_t pid, unsigned timeout_ms)
{
  uint64_t deadline = rp_test_now_ms() + timeout_ms;
  int status;
  do {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD))
      return 0;
    rp_test_sleep_ms(20);
  } while (rp_test_now_ms() < deadline);
  return -1;
}

int rp_test_etcd_member_kill(struct rp_test_etcd *c, unsigned i)
{
  if (i >= RP_TEST_ETCD_MEMBERS || c->m[i].pid <= 0)
    return -1;
  kill(c->m[i].pid, SIGKILL);
  wait_gone(c->m[i].pid, 5000);
  c->m[i].pid = 0;
  return 0;
}

int rp_test_etcd_member_stop(struct rp_test_etcd *c, unsigned i)
{
  if (i >= RP_TEST_ETCD_MEMBERS || c->m[i].pid <= 0)
    return -1;
  kill(c->m[i].pid, SIGTERM);
  if (wait_gone(c->m[i].pid, 5000) < 0) {
    kill(c->m[i].pid, SIGKILL);
    wait_gone(c->m[i].pid, 5000);
  }
  c->m[i].pid = 0;
  return 0;
}

int rp_test_etcd_member_start(struct rp_test_etcd *c, unsigned i)
{
  if (i >= RP_TEST_ETCD_MEMBERS || c->m[i].pid > 0)
    return -1;
  pid_t pid = spawn_member(c, i, true);
  if (pid < 0)
    return -1;
  c->m[i].pid = pid;
  return 0;
}

void rp_test_etcd_stop(struct rp_test_etcd *c)
{
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++)
    if (c->m[i].pid > 0)
      rp_test_etcd_member_stop(c, i);
}

int rp_test_etcd_leader(struct rp_test_etcd *c)
{
  for (unsigned i = 0; i < RP_TEST_ETCD_MEMBERS; i++) {
    if (c->m[i].pid <= 0)
      continue;
    char ep[64], out[4096];
    snprintf(ep, sizeof ep, "--endpoints=http://127.0.0.1:%u", c->m[i].client_port);
    const char *argv[] = { etcdctl_path(), ep, "endpoint", "status", "-w", "fields", NULL };
    setenv("ETCDCTL_API", "3", 1);
    int st = rp_test_run_program(argv, out, sizeof out, 5000);
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      continue;
    const char *mid = strstr(out, "\"MemberID\" : ");
    const char *lead = strstr(out, "\"Leader\" : ");
    if (mid && lead && strtoull(mid + 13, NULL, 10) == strtoull(lead + 11, NULL, 10))
      return (int)i;
  }
  return -1;
}
