/* The etcd client (etcd/etcd_gateway.c) against a real three-member etcd on loopback:
 * put and range read back through the JSON gateway, a key under a lease goes with the
 * lease, a watch sees puts and deletions, the client carries on through another
 * member when the leader is killed, and past an endpoint that is not etcd at all.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "etcd_cluster.h"
#include "etcd_gateway.h"
#include "server_process.h"

struct rig {
  char dir[512];
  struct rp_test_etcd etcd;
  struct rp_etcd *client;
  char err[512];
};

static int rig_setup(void **state)
{
  const char *why = rp_test_etcd_missing();
  if (why) {
    printf("skipped: %s\n", why);
    return 0; /* each test skips */
  }
  static struct rig r;
  memset(&r, 0, sizeof r);
  if (rp_test_tmpdir(r.dir, sizeof r.dir) < 0 || rp_test_etcd_start(&r.etcd, r.dir) < 0)
    return -1;
  struct rp_etcd_options o = { .endpoints = r.etcd.endpoints, .timeout_ms = 2000 };
  r.client = rp_etcd_new(&o, r.err, sizeof r.err);
  if (!r.client)
    return -1;
  *state = &r;
  return 0;
}

static int rig_teardown(void **state)
{
  struct rig *r = *state;
  if (!r)
    return 0;
  rp_etcd_free(r->client);
  rp_test_etcd_stop(&r->etcd);
  rp_test_tmpdir_remove(r->dir);
  return 0;
}

#define NEED_ETCD(state) \
  do { \
    if (!*(state)) \
      skip(); \
  } while (0)

struct seen {
  char keys[16][128];
  char values[16][128];
  bool deleted[16];
  unsigned n;
  bool live;
};

static void collect(void *arg, const char *key, const char *value)
{
  struct seen *s = arg;
  if (s->n < 16) {
    snprintf(s->keys[s->n], sizeof s->keys[0], "%s", key);
    snprintf(s->values[s->n++], sizeof s->values[0], "%s", value);
  }
}

static void test_put_range_delete(void **state)
{
  NEED_ETCD(state);
  struct rig *r = *state;
  assert_int_equal(rp_etcd_put(r->client, "/t/a/x", "{\"v\":1}", 0, r->err, sizeof r->err),
                   0);
  assert_int_equal(rp_etcd_put(r->client, "/t/a/y", "two", 0, r->err, sizeof r->err), 0);
  assert_int_equal(rp_etcd_put(r->client, "/t/b/z", "other prefix", 0, r->err, sizeof r->err),
                   0);
  struct seen s = { 0 };
  int64_t rev = 0;
  assert_int_equal(
    rp_etcd_range_prefix(r->client, "/t/a/", collect, &s, &rev, r->err, sizeof r->err), 0);
  assert_int_equal(s.n, 2);
  assert_string_equal(s.keys[0], "/t/a/x");
  assert_string_equal(s.values[0], "{\"v\":1}");
  assert_string_equal(s.keys[1], "/t/a/y");
  assert_string_equal(s.values[1], "two");
  assert_true(rev > 0);
  assert_int_equal(rp_etcd_delete(r->client, "/t/a/x", r->err, sizeof r->err), 0);
  memset(&s, 0, sizeof s);
  assert_int_equal(
    rp_etcd_range_prefix(r->client, "/t/a/", collect, &s, NULL, r->err, sizeof r->err), 0);
  assert_int_equal(s.n, 1);
  assert_string_equal(s.keys[0], "/t/a/y");
}

static void test_lease_expires_and_revokes(void **state)
{
  NEED_ETCD(state);
  struct rig *r = *state;
  int64_t lease = 0, ttl = 0;
  assert_int_equal(rp_etcd_lease_grant(r->client, 2, &lease, r->err, sizeof r->err), 0);
  assert_true(lease != 0);
  assert_int_equal(rp_etcd_put(r->client, "/t/lease/k", "v", lease, r->err, sizeof r->err),
                   0);
  assert_int_equal(rp_etcd_lease_keepalive(r->client, lease, &ttl, r->err, sizeof r->err), 0);
  assert_true(ttl > 0);
  /* No keep-alive: the key goes with the lease, and the keep-alive then says so. */
  rp_test_sleep_ms(3500);
  struct seen s = { 0 };
  assert_int_equal(
    rp_etcd_range_prefix(r->client, "/t/lease/", collect, &s, NULL, r->err, sizeof r->err),
    0);
  assert_int_equal(s.n, 0);
  assert_int_equal(rp_etcd_lease_keepalive(r->client, lease, &ttl, r->err, sizeof r->err), 0);
  assert_int_equal(ttl, 0);
  /* A revoke deletes at once. */
  assert_int_equal(rp_etcd_lease_grant(r->client, 60, &lease, r->err, sizeof r->err), 0);
  assert_int_equal(rp_etcd_put(r->client, "/t/lease/k2", "v", lease, r->err, sizeof r->err),
                   0);
  assert_int_equal(rp_etcd_lease_revoke(r->client, lease, r->err, sizeof r->err), 0);
  memset(&s, 0, sizeof s);
  assert_int_equal(
    rp_etcd_range_prefix(r->client, "/t/lease/", collect, &s, NULL, r->err, sizeof r->err),
    0);
  assert_int_equal(s.n, 0);
}

static void on_event(void *arg, bool deleted, const char *key, const char *value)
{
  struct seen *s = arg;
  if (s->n < 16) {
    s->deleted[s->n] = deleted;
    collect(arg, key, value);
  }
}

static void on_live(void *arg)
{
  ((struct seen *)arg)->live = true;
}

static void test_watch_from_revision(void **state)
{
  NEED_ETCD(state);
  struct rig *r = *state;
  int64_t rev = 0;
  struct seen s = { 0 };
  assert_int_equal(
    rp_etcd_range_prefix(r->client, "/t/w/", collect, &s, &rev, r->err, sizeof r->err), 0);
  /* Changes made before the watch starts are still seen: it starts at rev + 1. */
  assert_int_equal(rp_etcd_put(r->client, "/t/w/1", "one", 0, r->err, sizeof r->err), 0);
  assert_int_equal(rp_etcd_delete(r->client, "/t/w/1", r->err, sizeof r->err), 0);
  assert_int_equal(rp_etcd_put(r->client, "/t/x/ignored", "x", 0, r->err, sizeof r->err), 0);
  memset(&s, 0, sizeof s);
  int64_t next = 0;
  assert_int_equal(rp_etcd_watch_prefix(r->client, "/t/w/", rev + 1, on_event, on_live, NULL,
                                        &s, 1500, &next, r->err, sizeof r->err),
                   0);
  assert_true(s.live);
  assert_int_equal(s.n, 2);
  assert_string_equal(s.keys[0], "/t/w/1");
  assert_string_equal(s.values[0], "one");
  assert_false(s.deleted[0]);
  assert_true(s.deleted[1]);
  assert_true(next > rev + 2);
}

static void test_leader_killed(void **state)
{
  NEED_ETCD(state);
  struct rig *r = *state;
  int leader = rp_test_etcd_leader(&r->etcd);
  assert_true(leader >= 0);
  assert_int_equal(rp_test_etcd_member_kill(&r->etcd, (unsigned)leader), 0);
  /* The client moves on to the others once a new leader is elected. */
  uint64_t deadline = rp_test_now_ms() + 10000;
  int rc;
  do
    rc = rp_etcd_put(r->client, "/t/after", "leader gone", 0, r->err, sizeof r->err);
  while (rc < 0 && rp_test_now_ms() < deadline);
  assert_int_equal(rc, 0);
  struct seen s = { 0 };
  assert_int_equal(
    rp_etcd_range_prefix(r->client, "/t/after", collect, &s, NULL, r->err, sizeof r->err), 0);
  assert_int_equal(s.n, 1);
  assert_int_equal(rp_test_etcd_member_start(&r->etcd, (unsigned)leader), 0);
}

/* An HTTP server that is not etcd (another program on a port an endpoint names): every
 * request gets a 404, as an unknown path does anywhere. */
struct not_etcd {
  int listen_fd;
  unsigned port;
  _Atomic unsigned answered;
  pthread_t thread;
};

static void *not_etcd_serve(void *arg)
{
  struct not_etcd *n = arg;
  static const char reply[] = "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
                              "Content-Length: 9\r\nConnection: close\r\n\r\nnot found";
  int fd;
  while ((fd = accept(n->listen_fd, NULL, NULL)) >= 0) {
    char buf[4096];
    ssize_t got = read(fd, buf, sizeof buf); /* the request line and headers */
    if (got > 0 && write(fd, reply, sizeof reply - 1) == (ssize_t)(sizeof reply - 1))
      n->answered++;
    close(fd);
  }
  return NULL;
}

static void not_etcd_start(struct not_etcd *n)
{
  n->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(n->listen_fd >= 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t len = sizeof a;
  assert_int_equal(bind(n->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(n->listen_fd, 8), 0);
  assert_int_equal(getsockname(n->listen_fd, (struct sockaddr *)&a, &len), 0);
  n->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&n->thread, NULL, not_etcd_serve, n), 0);
}

static void not_etcd_stop(struct not_etcd *n)
{
  shutdown(n->listen_fd, SHUT_RDWR); /* accept fails: the thread ends */
  pthread_join(n->thread, NULL);
  close(n->listen_fd);
}

static void test_endpoint_that_is_not_etcd(void **state)
{
  NEED_ETCD(state);
  struct rig *r = *state;
  struct not_etcd n;
  not_etcd_start(&n);
  /* Listed first: the client must go on to the members behind it. */
  char endpoints[1024];
  snprintf(endpoints, sizeof endpoints, "http://127.0.0.1:%u,%s", n.port, r->etcd.endpoints);
  struct rp_etcd_options o = { .endpoints = endpoints, .timeout_ms = 2000 };
  struct rp_etcd *c = rp_etcd_new(&o, r->err, sizeof r->err);
  assert_non_null(c);
  assert_int_equal(rp_etcd_put(c, "/t/n/x", "past a 404", 0, r->err, sizeof r->err), 0);
  struct seen s = { 0 };
  assert_int_equal(rp_etcd_range_prefix(c, "/t/n/", collect, &s, NULL, r->err, sizeof r->err),
                   0);
  assert_int_equal(s.n, 1);
  assert_string_equal(s.values[0], "past a 404");
  assert_true(n.answered >= 1);
  rp_etcd_free(c);
  /* Alone, it is named, with what to check. */
  snprintf(endpoints, sizeof endpoints, "http://127.0.0.1:%u", n.port);
  c = rp_etcd_new(&o, r->err, sizeof r->err);
  assert_non_null(c);
  assert_int_equal(rp_etcd_put(c, "/t/n/y", "never", 0, r->err, sizeof r->err), -1);
  printf("alone: %s\n", r->err);
  assert_non_null(strstr(r->err, "HTTP 404: no etcd v3 gateway there"));
  assert_non_null(strstr(r->err, endpoints));
  rp_etcd_free(c);
  not_etcd_stop(&n);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_put_range_delete),
    cmocka_unit_test(test_lease_expires_and_revokes),
    cmocka_unit_test(test_watch_from_revision),
    cmocka_unit_test(test_leader_killed),
    cmocka_unit_test(test_endpoint_that_is_not_etcd),
  };
  return cmocka_run_group_tests(tests, rig_setup, rig_teardown);
}
