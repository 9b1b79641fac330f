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
#include <sys/prctl.h>
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
  snprintf(client, sizeof client, "%s://127.0.0.1:%u", c->tls ? "https" : "http",
           m->client_port);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%u", m->peer_port);
  int out = open(m->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (out < 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    /* A test that fails stops nothing by hand: etcd goes with the test process. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, STDIN_FILENO);
    /* Elections in a fraction of a second, so the tests' leader kill is short; the
     * defaults (100 ms heartbeat, 1 s election) would do, only slower. */
    if (c->tls)
      execl(etcd_path(), etcd_path(), "--name", name, "--data-dir", m->data_dir,
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", c->initial_cluster, "--initial-cluster-token",
            "rampart-test", "--initial-cluster-state", existing ? "existing" : "new",
            "--heartbeat-interval", "50", "--election-timeout", "500", "--cert-file",
            c->server_cert, "--key-file", c->server_key, "--client-cert-auth",
            "--trusted-ca-file", c->ca, "--logger", "zap", "--log-level", "warn",
            (char *)NULL);
    else
      execl(etcd_path(), etcd_path(), "--name", name, "--data-dir", m->data_dir,
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", c->initial_cluster, "--initial-cluster-token",
            "rampart-test", "--initial-cluster-state", existing ? "existing" : "new",
            "--heartbeat-interval", "50", "--election-timeout", "500", "--logger", "zap",
            "--log-level", "warn", (char *)NULL);
    _exit(127);
  }
  close(out);
  return pid;
}

int rp_test_etcdctl(struct rp_test_etcd *c, const char *const *args, char *out, size_t outlen)
{
  const char *argv[32];
  unsigned n = 0;
  argv[n++] = etcdctl_path();
  argv[n++] = "--endpoints";
  argv[n++] = c->endpoints;
  argv[n++] = "--dial-timeout=1s";
  argv[n++] = "--command-timeout=3s";
  char cacert[700], cert[700], key[700];
  if (c->tls) {
    snprintf(cacert, sizeof cacert, "--cacert=%s", c->ca);
    snprintf(cert, sizeof cert, "--cert=%s", c->client_cert);
    snprintf(key, sizeof key, "--key=%s", c->client_key);
    argv[n++] = cacert;
    argv[n++] = cert;
    argv[n++] = key;
  }
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

static int start_members(struct rp_test_etcd *c, const char *dir);

int rp_test_etcd_start(struct rp_test_etcd *c, const char *dir)
{
  memset(c, 0, sizeof *c);
  return start_members(c, dir);
}

static int openssl(const char *const *args)
{
  char out[4096];
  const char *argv[32] = { "/usr/bin/openssl" };
  unsigned n = 1;
  for (unsigned i = 0; args[i] && n < 31; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  int st = rp_test_run_program(argv, out, sizeof out, 20000);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "openssl %s failed:\n%s\n", args[0], out);
    return -1;
  }
  return 0;
}

/* A key and a certificate the CA signs, for 127.0.0.1, with the usages given. */
static int issue(const struct rp_test_etcd *c, const char *dir, const char *name,
                 const char *usage, char *cert, char *key)
{
  char csr[600], ext[600], text[256];
  snprintf(cert, 600, "%s/%s.pem", dir, name);
  snprintf(key, 600, "%s/%s.key", dir, name);
  snprintf(csr, sizeof csr, "%s/%s.csr", dir, name);
  snprintf(ext, sizeof ext, "%s/%s.ext", dir, name);
  snprintf(text, sizeof text, "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=%s\n", usage);
  if (rp_test_write_file(ext, text) < 0)
    return -1;
  const char *req[] = {
    "req",           "-new",    "-newkey", "ec",   "-pkeyopt", "ec_paramgen_curve:prime256v1",
    "-nodes",        "-keyout", key,       "-out", csr,        "-subj",
    "/CN=127.0.0.1", NULL
  };
  const char *sign[] = { "x509",   "-req",        "-in",
                         csr,      "-CA",         c->ca,
                         "-CAkey", c->server_key, "-CAcreateserial",
                         "-days",  "2",           "-out",
                         cert,     "-extfile",    ext,
                         NULL };
  return openssl(req) < 0 || openssl(sign) < 0 ? -1 : 0;
}

int rp_test_etcd_start_tls(struct rp_test_etcd *c, const char *dir)
{
  memset(c, 0, sizeof *c);
  c->tls = true;
  char ca_key[600];
  snprintf(c->ca, sizeof c->ca, "%s/ca.pem", dir);
  snprintf(ca_key, sizeof ca_key, "%s/ca.key", dir);
  const char *ca[] = { "req",    "-x509",    "-newkey",
                       "ec",     "-pkeyopt", "ec_paramgen_curve:prime256v1",
                       "-nodes", "-keyout",  ca_key,
                       "-out",   c->ca,      "-days",
                       "2",      "-subj",    "/CN=rampart test CA",
                       NULL };
  if (openssl(ca) < 0)
    return -1;
  /* issue() signs with the key in server_key: the CA's, until the server's own. */
  snprintf(c->server_key, sizeof c->server_key, "%s", ca_key);
  char server_cert[600], server_key[600];
  if (issue(c, dir, "client", "clientAuth", c->client_cert, c->client_key) < 0 ||
      issue(c, dir, "server", "serverAuth,clientAuth", server_cert, server_key) < 0)
    return -1;
  snprintf(c->server_cert, sizeof c->server_cert, "%s", server_cert);
  snprintf(c->server_key, sizeof c->server_key, "%s", server_key);
  return start_members(c, dir);
}

static int start_members(struct rp_test_etcd *c, const char *dir)
{
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
    ep += (size_t)snprintf(c->endpoints + ep, sizeof c->endpoints - ep, "%s%s://127.0.0.1:%u",
                           i ? "," : "", c->tls ? "https" : "http", m->client_port);
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
    snprintf(ep, sizeof ep, "--endpoints=%s://127.0.0.1:%u", c->tls ? "https" : "http",
             c->m[i].client_port);
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
