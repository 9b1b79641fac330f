/* Test helper: a real three-member etcd cluster on loopback (Debian's etcd-server),
 * started in a temporary directory and stopped by PID. Members can be killed, stopped
 * and started again on the same data, and the leader found, so tests can take etcd
 * away under a running device.
 *
 * Tests that need etcd skip (cmocka's skip(), with the reason printed) when
 * rp_test_etcd_missing() says the binaries are not installed; scripts/setup installs
 * them (scripts/deps.txt).
 */
#ifndef RAMPART_TEST_ETCD_CLUSTER_H
#define RAMPART_TEST_ETCD_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define RP_TEST_ETCD_MEMBERS 3

struct rp_test_etcd_member {
  pid_t pid; /* 0 when not running */
  unsigned client_port, peer_port;
  char data_dir[512];
  char log_path[512];
};

struct rp_test_etcd {
  struct rp_test_etcd_member m[RP_TEST_ETCD_MEMBERS];
  char dir[512];
  char endpoints[256]; /* "http://127.0.0.1:A,http://127.0.0.1:B,http://127.0.0.1:C" */
  char initial_cluster[512];
  /* rp_test_etcd_start_tls: clients must use https and a certificate the CA signed */
  bool tls;
  char ca[600], client_cert[600], client_key[600], server_cert[600], server_key[600];
};

/* NULL when etcd and etcdctl are installed, else why the test must skip. */
const char *rp_test_etcd_missing(void);

/* Starts the three members under dir and waits (up to 20 s) until the cluster answers
 * a write. 0, or -1 with the members' logs echoed. */
int rp_test_etcd_start(struct rp_test_etcd *c, const char *dir);
/* The same with TLS on the client port and client certificates required: a CA, a
 * server certificate for 127.0.0.1 and a client certificate are made with the openssl
 * command under dir (c->ca, c->client_cert, c->client_key), and the endpoints are
 * https://. */
int rp_test_etcd_start_tls(struct rp_test_etcd *c, const char *dir);
/* Stops every member still running (SIGTERM, then SIGKILL after 5 s). */
void rp_test_etcd_stop(struct rp_test_etcd *c);

/* One member: SIGKILL, SIGTERM (a clean stop), or start again on its data. 0 or -1. */
int rp_test_etcd_member_kill(struct rp_test_etcd *c, unsigned i);
int rp_test_etcd_member_stop(struct rp_test_etcd *c, unsigned i);
int rp_test_etcd_member_start(struct rp_test_etcd *c, unsigned i);
/* Waits until the members running answer a write (up to timeout_ms). 0 or -1. */
int rp_test_etcd_wait_healthy(struct rp_test_etcd *c, unsigned timeout_ms);

/* The index of the member that leads, or -1. */
int rp_test_etcd_leader(struct rp_test_etcd *c);

/* Runs etcdctl (v3 API, the cluster's endpoints) with args (NULL-terminated); its
 * output goes to out. The wait status, or -1. */
int rp_test_etcdctl(struct rp_test_etcd *c, const char *const *args, char *out,
                    size_t outlen);

#endif
