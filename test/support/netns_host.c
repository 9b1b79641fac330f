/* A test "host" in its own network namespace (netns_host.h). */
#include "netns_host.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server_process.h"

const char *rp_test_ip_path(void)
{
  static const char *const candidates[] = { "/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip",
                                            "/bin/ip" };
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
    if (access(candidates[i], X_OK) == 0)
      return candidates[i];
  return NULL;
}

static const char *tool_path(const char *name)
{
  static char path[64];
  static const char *const dirs[] = { "/usr/sbin", "/sbin", "/usr/bin", "/bin" };
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dirs[i], name);
    if (access(path, X_OK) == 0)
      return path;
  }
  return NULL;
}

/* Runs argv (argv[0] a path); 0 when it exited 0, else -1 with its output on stderr
 * unless quiet. */
static int run(bool quiet, const char *const *argv)
{
  char out[2048];
  int status = rp_test_run_program(argv, out, sizeof out, 10000);
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return 0;
  if (!quiet) {
    fprintf(stderr, "test: netns:");
    for (size_t i = 0; argv[i]; i++)
      fprintf(stderr, " %s", argv[i]);
    fprintf(stderr, " failed: %s\n", out);
  }
  return -1;
}

#define IP(...) run(false, (const char *const[]){ rp_test_ip_path(), __VA_ARGS__, NULL })

bool rp_test_netns_supported(char *why, size_t whylen)
{
  if (geteuid() != 0) {
    snprintf(why, whylen, "needs root to make network namespaces and veth pairs");
    return false;
  }
  if (!rp_test_ip_path()) {
    snprintf(why, whylen, "no ip(8): install iproute2");
    return false;
  }
  char name[32];
  snprintf(name, sizeof name, "rp%dprobe", (int)getpid());
  if (run(true, (const char *const[]){ rp_test_ip_path(), "netns", "add", name, NULL }) < 0) {
    snprintf(why, whylen,
             "'ip netns add' is refused here (no CAP_SYS_ADMIN, or no "
             "network namespaces in this kernel)");
    return false;
  }
  run(true, (const char *const[]){ rp_test_ip_path(), "netns", "del", name, NULL });
  return true;
}

/* A namespace of this name is this very process's (the pid is in the name), left by an
 * earlier case that failed before its teardown: stop what runs in it (its rampartd) and
 * remove it with its veth pair, so one failed case does not fail every later one. */
static void remove_leftover(const struct rp_test_netns *ns)
{
  char path[96];
  snprintf(path, sizeof path, "/run/netns/%s", ns->name);
  if (access(path, F_OK) != 0)
    return;
  char cmd[160];
  snprintf(cmd, sizeof cmd, "%s netns pids %s 2>/dev/null", rp_test_ip_path(), ns->name);
  FILE *p = popen(cmd, "r");
  if (p) {
    long pid;
    while (fscanf(p, "%ld", &pid) == 1)
      if (pid > 1 && pid != (long)getpid())
        kill((pid_t)pid, SIGKILL);
    pclose(p);
  }
  run(true, (const char *const[]){ rp_test_ip_path(), "link", "del", ns->veth_host, NULL });
  run(true, (const char *const[]){ rp_test_ip_path(), "netns", "del", ns->name, NULL });
}

int rp_test_netns_create(struct rp_test_netns *ns, unsigned index)
{
  memset(ns, 0, sizeof *ns);
  int pid = (int)getpid();
  unsigned net = (unsigned)pid % 250, base = index * 4;
  if (index > 60)
    return -1;
  snprintf(ns->name, sizeof ns->name, "rp%dn%u", pid, index);
  snprintf(ns->veth_host, sizeof ns->veth_host, "rp%dh%u", pid % 10000000, index);
  snprintf(ns->veth_ns, sizeof ns->veth_ns, "rp%ds%u", pid % 10000000, index);
  snprintf(ns->host_ip, sizeof ns->host_ip, "10.213.%u.%u", net, base + 1);
  snprintf(ns->ns_ip, sizeof ns->ns_ip, "10.213.%u.%u", net, base + 2);
  char host_cidr[32], ns_cidr[32];
  snprintf(host_cidr, sizeof host_cidr, "%s/30", ns->host_ip);
  snprintf(ns_cidr, sizeof ns_cidr, "%s/30", ns->ns_ip);
  remove_leftover(ns);
  if (IP("netns", "add", ns->name) < 0) {
    ns->name[0] = '\0';
    return -1;
  }
  if (IP("link", "add", ns->veth_host, "type", "veth", "peer", "name", ns->veth_ns) < 0 ||
      IP("link", "set", ns->veth_ns, "netns", ns->name) < 0 ||
      IP("addr", "add", host_cidr, "dev", ns->veth_host) < 0 ||
      IP("link", "set", ns->veth_host, "up") < 0 ||
      IP("-n", ns->name, "addr", "add", ns_cidr, "dev", ns->veth_ns) < 0 ||
      IP("-n", ns->name, "link", "set", ns->veth_ns, "up") < 0 ||
      IP("-n", ns->name, "link", "set", "lo", "up") < 0) {
    rp_test_netns_destroy(ns);
    return -1;
  }
  return 0;
}

void rp_test_netns_destroy(struct rp_test_netns *ns)
{
  if (!ns->name[0])
    return;
  /* Deleting either end of a veth pair deletes both; the namespace goes with its
   * last process. */
  run(true, (const char *const[]){ rp_test_ip_path(), "link", "del", ns->veth_host, NULL });
  IP("netns", "del", ns->name);
  ns->name[0] = '\0';
}

int rp_test_netns_link(struct rp_test_netns *ns, bool up)
{
  /* The server namespace's end: with it down, the test's end loses its carrier and keeps
   * its route, so packets from either side go nowhere and neither TCP stack hears anything,
   * which is what a pulled cable or a dead switch does. Not the test's end: downing that
   * removes the test's route, so the engine's connects went out by the default route
   * and were refused at once by whatever answers there, which no partition does. */
  return IP("-n", ns->name, "link", "set", ns->veth_ns, up ? "up" : "down");
}

static bool kernel_has_netem(const char *tc, const char *dev)
{
  if (run(true, (const char *const[]){ tc, "qdisc", "add", "dev", dev, "root", "netem",
                                       "delay", "1ms", NULL }) < 0)
    return false;
  run(true, (const char *const[]){ tc, "qdisc", "del", "dev", dev, "root", NULL });
  return true;
}

int rp_test_netns_impair(struct rp_test_netns *ns, unsigned delay_ms, unsigned loss_pct,
                         char *how, size_t howlen)
{
  const char *tcp = tool_path("tc");
  if (!tcp) {
    fprintf(stderr, "test: no tc(8): install iproute2\n");
    return -1;
  }
  char tc[64], delay[16], loss[16];
  snprintf(tc, sizeof tc, "%s", tcp);
  snprintf(delay, sizeof delay, "%ums", delay_ms);
  snprintf(loss, sizeof loss, "%u%%", loss_pct);
  if (kernel_has_netem(tc, ns->veth_host)) {
    /* Half the delay each way, so a round trip costs delay_ms. */
    char half[16];
    snprintf(half, sizeof half, "%ums", delay_ms / 2);
    if (run(false, (const char *const[]){ tc, "qdisc", "add", "dev", ns->veth_host, "root",
                                          "netem", "delay", half, "loss", loss, NULL }) < 0 ||
        IP("netns", "exec", ns->name, tc, "qdisc", "add", "dev", ns->veth_ns, "root", "netem",
           "delay", half, "loss", loss) < 0)
      return -1;
    snprintf(how, howlen, "netem: %s round trip, %s loss each way", delay, loss);
    return 0;
  }
  const char *nftp = tool_path("nft");
  if (!nftp) {
    fprintf(stderr, "test: this kernel has no sch_netem and there is no nft(8) for the "
                    "loss: install nftables\n");
    return -1;
  }
  char nft[64], rule[320];
  snprintf(nft, sizeof nft, "%s", nftp);
  snprintf(rule, sizeof rule,
           "table inet rp_impair { chain in { type filter hook input priority 0; "
           "numgen random mod 100 < %u drop; }; chain out { type filter hook output "
           "priority 0; numgen random mod 100 < %u drop; }; }",
           loss_pct, loss_pct);
  /* A rate limit whose queue holds delay_ms of traffic: under load, packets wait that
   * long, the nearest this kernel comes to a fixed delay without netem. */
  char latency[16];
  snprintf(latency, sizeof latency, "%ums", delay_ms);
  if (IP("netns", "exec", ns->name, nft, rule) < 0 ||
      run(false, (const char *const[]){ tc, "qdisc", "add", "dev", ns->veth_host, "root",
                                        "tbf", "rate", "40mbit", "burst", "32kb", "latency",
                                        latency, NULL }) < 0)
    return -1;
  snprintf(how, howlen,
           "no sch_netem in this kernel: nftables drops %s of packets each "
           "way, and a 40 Mbit/s token bucket queues up to %s",
           loss, delay);
  return 0;
}

int rp_test_netns_unimpair(struct rp_test_netns *ns)
{
  const char *tcp = tool_path("tc");
  char tc[64];
  snprintf(tc, sizeof tc, "%s", tcp ? tcp : "tc");
  run(true, (const char *const[]){ tc, "qdisc", "del", "dev", ns->veth_host, "root", NULL });
  run(true, (const char *const[]){ rp_test_ip_path(), "netns", "exec", ns->name, tc, "qdisc",
                                   "del", "dev", ns->veth_ns, "root", NULL });
  const char *nft = tool_path("nft");
  if (nft) {
    char n[64];
    snprintf(n, sizeof n, "%s", nft);
    run(true, (const char *const[]){ rp_test_ip_path(), "netns", "exec", ns->name, n,
                                     "delete", "table", "inet", "rp_impair", NULL });
  }
  return 0;
}
