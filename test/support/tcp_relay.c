/* A misbehaving TCP relay for tests (see tcp_relay.h).
 *
 * One thread runs a poll() loop over the listening sockets, every relayed pair and a
 * pipe the test thread writes to. Commands are a few flags under a mutex: the test
 * thread sets them, wakes the loop through the pipe and waits on a condition variable
 * until the loop has applied them, so the loop is the only code that touches sockets.
 */
#include "tcp_relay.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF_SIZE (256u * 1024u)
#define MAX_PAIRS 256u

struct pair {
  int client;         /* accepted from the test's client */
  int server;         /* to the real server; -1 while held */
  unsigned port;      /* which relayed server */
  uint8_t *to_server; /* client -> server bytes not yet sent */
  size_t ts_len, ts_off;
  uint8_t *to_client;
  size_t tc_len, tc_off;
};

struct port {
  int listen_fd;
  struct sockaddr_in upstream;
  char addr[32];
  bool refuse, hold;
  bool reset_requested;
  uint64_t accepted;
};

struct rp_test_relay {
  pthread_t thread;
  int wake[2];
  pthread_mutex_t lock;
  pthread_cond_t applied;
  uint64_t requests, done; /* command generations, under lock */
  bool stop;
  unsigned n;
  struct port ports[RP_TEST_RELAY_MAX];
  struct pair *pairs[MAX_PAIRS];
  unsigned npairs;
  /* Closed pairs kept for the next connection: a test counting the heap allocations of
   * its own process (test_io_allocations) sees none from a relay that is warmed up. */
  struct pair *spare[MAX_PAIRS];
  unsigned nspare;
};

static void set_nonblocking(int fd)
{
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Close with an RST rather than a FIN: what the peer sees when a middlebox forgets it. */
static void close_with_reset(int fd)
{
  if (fd < 0)
    return;
  struct linger l = { .l_onoff = 1, .l_linger = 0 };
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

static void pair_free(struct rp_test_relay *r, unsigned k, bool reset)
{
  struct pair *p = r->pairs[k];
  if (reset) {
    close_with_reset(p->client);
    close_with_reset(p->server);
  } else {
    close(p->client);
    if (p->server >= 0)
      close(p->server);
  }
  r->spare[r->nspare++] = p;
  r->pairs[k] = r->pairs[--r->npairs];
}

static int connect_upstream(const struct port *pt)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (connect(fd, (const struct sockaddr *)&pt->upstream, sizeof pt->upstream) < 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_nonblocking(fd);
  return fd;
}

static void accept_one(struct rp_test_relay *r, unsigned port_index)
{
  struct port *pt = &r->ports[port_index];
  int fd = accept4(pt->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0)
    return;
  pthread_mutex_lock(&r->lock);
  pt->accepted++;
  bool refuse = pt->refuse, hold = pt->hold;
  pthread_mutex_unlock(&r->lock);
  if (refuse || r->npairs == MAX_PAIRS) {
    close_with_reset(fd);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct pair *p = r->nspare ? r->spare[--r->nspare] : calloc(1, sizeof *p);
  if (!p) {
    close_with_reset(fd);
    return;
  }
  if (!p->to_server) {
    p->to_server = malloc(BUF_SIZE);
    p->to_client = malloc(BUF_SIZE);
  }
  p->client = fd;
  p->server = -1;
  p->port = port_index;
  p->ts_len = p->ts_off = p->tc_len = p->tc_off = 0;
  if (!hold)
    p->server = connect_upstream(pt);
  if (!p->to_server || !p->to_client || (!hold && p->server < 0)) {
    free(p->to_server);
    free(p->to_client);
    free(p);
    close_with_reset(fd);
    return;
  }
  r->pairs[r->npairs++] = p;
}

/* Moves bytes from fd into buf; false when the connection is finished (EOF or error). */
static bool pump_in(int fd, uint8_t *buf, size_t *len, size_t *off)
{
  if (*off == *len)
    *off = *len = 0;
  if (*len == BUF_SIZE)
    return true;
  ssize_t n = read(fd, buf + *len, BUF_SIZE - *len);
  if (n == 0)
    return false;
  if (n < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  *len += (size_t)n;
  return true;
}

static bool pump_out(int fd, const uint8_t *buf, size_t len, size_t *off)
{
  if (*off == len)
    return true;
  ssize_t n = send(fd, buf + *off, len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  *off += (size_t)n;
  return true;
}

/* Applies the test thread's commands: resets, and releasing held connections. */
static void apply_commands(struct rp_test_relay *r)
{
  pthread_mutex_lock(&r->lock);
  bool reset[RP_TEST_RELAY_MAX], hold[RP_TEST_RELAY_MAX];
  for (unsigned i = 0; i < r->n; i++) {
    reset[i] = r->ports[i].reset_requested;
    r->ports[i].reset_requested = false;
    hold[i] = r->ports[i].hold;
  }
  uint64_t generation = r->requests;
  pthread_mutex_unlock(&r->lock);
  for (unsigned k = r->npairs; k-- > 0;) {
    struct pair *p = r->pairs[k];
    if (reset[p->port]) {
      pair_free(r, k, true);
    } else if (p->server < 0 && !hold[p->port]) {
      p->server = connect_upstream(&r->ports[p->port]);
      if (p->server < 0)
        pair_free(r, k, true);
    }
  }
  pthread_mutex_lock(&r->lock);
  r->done = generation;
  pthread_cond_broadcast(&r->applied);
  pthread_mutex_unlock(&r->lock);
}

static void *relay_main(void *arg)
{
  struct rp_test_relay *r = arg;
  struct pollfd fds[1 + RP_TEST_RELAY_MAX + 2 * MAX_PAIRS];
  for (;;) {
    pthread_mutex_lock(&r->lock);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->lock);
    if (stop)
      break;
    unsigned nfds = 0;
    fds[nfds++] = (struct pollfd){ .fd = r->wake[0], .events = POLLIN };
    for (unsigned i = 0; i < r->n; i++)
      fds[nfds++] = (struct pollfd){ .fd = r->ports[i].listen_fd, .events = POLLIN };
    unsigned first_pair = nfds;
    for (unsigned k = 0; k < r->npairs; k++) {
      struct pair *p = r->pairs[k];
      short ce = 0, se = 0;
      if (p->server >= 0) {
        if (p->ts_len < BUF_SIZE)
          ce |= POLLIN;
        if (p->tc_off < p->tc_len)
          ce |= POLLOUT;
        if (p->tc_len < BUF_SIZE)
          se |= POLLIN;
        if (p->ts_off < p->ts_len)
          se |= POLLOUT;
      }
      /* A held client is not read: what it sends waits in its socket until released. */
      fds[nfds++] = (struct pollfd){ .fd = p->server >= 0 ? p->client : -1, .events = ce };
      fds[nfds++] = (struct pollfd){ .fd = p->server, .events = se };
    }
    int n = poll(fds, nfds, 1000);
    if (n < 0 && errno != EINTR)
      break;
    if (n <= 0)
      continue;
    if (fds[0].revents) {
      char drain[64];
      while (read(r->wake[0], drain, sizeof drain) > 0) {
      }
      apply_commands(r);
      continue; /* the pair table may have changed under the poll set */
    }
    unsigned pairs_polled = r->npairs;
    for (unsigned k = pairs_polled; k-- > 0;) {
      struct pair *p = r->pairs[k];
      const struct pollfd *c = &fds[first_pair + 2 * k], *s = &fds[first_pair + 2 * k + 1];
      if (p->server < 0)
        continue;
      bool alive = true;
      if (c->revents & (POLLIN | POLLHUP | POLLERR))
        alive &= pump_in(p->client, p->to_server, &p->ts_len, &p->ts_off);
      if (s->revents & (POLLIN | POLLHUP | POLLERR))
        alive &= pump_in(p->server, p->to_client, &p->tc_len, &p->tc_off);
      alive &= pump_out(p->server, p->to_server, p->ts_len, &p->ts_off);
      alive &= pump_out(p->client, p->to_client, p->tc_len, &p->tc_off);
      if (!alive)
        pair_free(r, k, false);
    }
    for (unsigned i = 0; i < r->n; i++)
      if (fds[1 + i].revents & POLLIN)
        accept_one(r, i);
  }
  return NULL;
}

static int listen_loopback(struct port *pt)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
    close(fd);
    return -1;
  }
  pt->listen_fd = fd;
  snprintf(pt->addr, sizeof pt->addr, "127.0.0.1:%u", ntohs(a.sin_port));
  return 0;
}

struct rp_test_relay *rp_test_relay_start(unsigned n, const struct rp_test_server *servers)
{
  if (n == 0 || n > RP_TEST_RELAY_MAX)
    return NULL;
  struct rp_test_relay *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->n = n;
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->applied, NULL);
  if (pipe2(r->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
    fprintf(stderr, "relay: pipe: %s\n", strerror(errno));
    free(r);
    return NULL;
  }
  for (unsigned i = 0; i < n; i++) {
    struct port *pt = &r->ports[i];
    pt->listen_fd = -1;
    pt->upstream.sin_family = AF_INET;
    pt->upstream.sin_port = htons((uint16_t)atoi(servers[i].port));
    if (inet_pton(AF_INET, servers[i].host, &pt->upstream.sin_addr) != 1 ||
        listen_loopback(pt) < 0) {
      fprintf(stderr, "relay: cannot relay to %s\n", servers[i].addr);
      for (unsigned k = 0; k < i; k++)
        close(r->ports[k].listen_fd);
      close(r->wake[0]);
      close(r->wake[1]);
      free(r);
      return NULL;
    }
  }
  if (pthread_create(&r->thread, NULL, relay_main, r) != 0) {
    fprintf(stderr, "relay: cannot start its thread\n");
    for (unsigned i = 0; i < n; i++)
      close(r->ports[i].listen_fd);
    close(r->wake[0]);
    close(r->wake[1]);
    free(r);
    return NULL;
  }
  return r;
}

/* Wakes the relay thread and waits until it has applied every command given so far. */
static void command(struct rp_test_relay *r)
{
  uint64_t want = ++r->requests; /* under lock: the caller holds it */
  ssize_t ignored = write(r->wake[1], "x", 1);
  (void)ignored;
  while (r->done < want)
    pthread_cond_wait(&r->applied, &r->lock);
  pthread_mutex_unlock(&r->lock);
}

static void set_flags(struct rp_test_relay *r, unsigned i, int reset, int refuse, int hold)
{
  pthread_mutex_lock(&r->lock);
  for (unsigned k = 0; k < r->n; k++) {
    if (i != RP_TEST_RELAY_ALL && k != i)
      continue;
    struct port *pt = &r->ports[k];
    if (reset > 0)
      pt->reset_requested = true;
    if (refuse >= 0)
      pt->refuse = refuse;
    if (hold >= 0)
      pt->hold = hold;
  }
  command(r);
}

void rp_test_relay_reset(struct rp_test_relay *r, unsigned i)
{
  set_flags(r, i, 1, -1, -1);
}

void rp_test_relay_refuse(struct rp_test_relay *r, unsigned i, bool on)
{
  set_flags(r, i, 0, on, -1);
}

void rp_test_relay_hold(struct rp_test_relay *r, unsigned i, bool on)
{
  set_flags(r, i, 0, -1, on);
}

uint64_t rp_test_relay_accepted(struct rp_test_relay *r, unsigned i)
{
  pthread_mutex_lock(&r->lock);
  uint64_t n = r->ports[i].accepted;
  pthread_mutex_unlock(&r->lock);
  return n;
}

const char *rp_test_relay_addr(const struct rp_test_relay *r, unsigned i)
{
  return r->ports[i].addr;
}

void rp_test_relay_stop(struct rp_test_relay *r)
{
  if (!r)
    return;
  pthread_mutex_lock(&r->lock);
  r->stop = true;
  pthread_mutex_unlock(&r->lock);
  ssize_t ignored = write(r->wake[1], "x", 1);
  (void)ignored;
  pthread_join(r->thread, NULL);
  while (r->npairs)
    pair_free(r, r->npairs - 1, false);
  while (r->nspare) {
    struct pair *p = r->spare[--r->nspare];
    free(p->to_server);
    free(p->to_client);
    free(p);
  }
  for (unsigned i = 0; i < r->n; i++)
    close(r->ports[i].listen_fd);
  close(r->wake[0]);
  close(r->wake[1]);
  pthread_mutex_destroy(&r->lock);
  pthread_cond_destroy(&r->applied);
  free(r);
}
