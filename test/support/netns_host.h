/* Test helper: a "host" in a network namespace of its own, joined to the test's namespace
 * by a veth pair, so a test can do to one server's network what real networks do:
 *
 *   partition   the link goes down (TCP sees nothing: no RST, no FIN), then heals;
 *   impair      packets are delayed and lost. With sch_netem in the kernel this is
 *               `tc qdisc … netem delay D loss L%`; a kernel without it (this project's
 *               CI machine has none) gets the loss from an nftables rule in the host's
 *               namespace (`numgen random mod 100 < L drop`, real drops that TCP must
 *               retransmit) and a token-bucket rate limit instead of a fixed delay. The
 *               helper says which it applied.
 *
 * Names carry the test's PID (rp<pid>n<i>, rp<pid>h<i>), so two test runs do not clash,
 * and addresses come from 10.213.<pid % 250>.0/24, one /30 per host: nothing outside
 * namespaces this process made is ever addressed. Everything is undone by
 * rp_test_netns_destroy; the namespace and the veth pair die with it.
 */
#ifndef RAMPART_TEST_NETNS_HOST_H
#define RAMPART_TEST_NETNS_HOST_H

#include <stdbool.h>
#include <stddef.h>

struct rp_test_netns {
  char name[24];      /* namespace, "" when not created */
  char veth_host[16]; /* the end in the test's own namespace, where the engine runs */
  char veth_ns[16];   /* the end in the server's namespace */
  char host_ip[20];   /* address of the test's end */
  char ns_ip[20];     /* address of the server inside its namespace */
};

/* True when this process may make namespaces and veth pairs (root, iproute2 present,
 * the kernel allows it); otherwise false with the reason in why. */
bool rp_test_netns_supported(char *why, size_t whylen);

/* Creates host number index (0..60). 0, or -1 with a message on stderr. */
int rp_test_netns_create(struct rp_test_netns *ns, unsigned index);
void rp_test_netns_destroy(struct rp_test_netns *ns);

/* The path of ip(8), for `ip netns exec NAME PROGRAM …`. */
const char *rp_test_ip_path(void);

/* Partition (up = false) or heal (up = true) the host's link. 0 or -1. */
int rp_test_netns_link(struct rp_test_netns *ns, bool up);

/* Delay and loss on the host's link, both directions; how gets what was applied. 0 or -1.
 * rp_test_netns_unimpair takes it off again. */
int rp_test_netns_impair(struct rp_test_netns *ns, unsigned delay_ms, unsigned loss_pct,
                         char *how, size_t howlen);
int rp_test_netns_unimpair(struct rp_test_netns *ns);

#endif
