/* A fake etcd gateway that lies on one path (see etcd_liar.h). */
#include "etcd_liar.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fd_io.h"
#include "server_process.h"

#define HEAD_MAX 16384u
#define BODY_MAX (4u << 20)

struct request {
  char head[HEAD_MAX + 1];
  size_t head_len;
  char path[256];
  char *body;
  size_t body_len;
};

static int connect_loopback(unsigned port)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
    return fd;
  if (fd >= 0)
    close(fd);
  return -1;
}

/* Reads one request: its head up to the blank line, then Content-Length bytes of body
 * (answering "Expect: 100-continue" first). 0, or -1. */
static int read_request(int fd, struct request *q)
{
  char *end = NULL;
  q->head_len = 0;
  while (!end) {
    if (q->head_len == HEAD_MAX)
      return -1;
    ssize_t got = recv(fd, q->head + q->head_len, HEAD_MAX - q->head_len, 0);
    if (got <= 0)
      return -1;
    q->head_len += (size_t)got;
    q->head[q->head_len] = '\0';
    end = strstr(q->head, "\r\n\r\n");
  }
  size_t head = (size_t)(end + 4 - q->head);
  if (sscanf(q->head, "%*s %255s", q->path) != 1)
    return -1;
  size_t length = 0;
  for (char *line = strstr(q->head, "\r\n"); line && line < end;
       line = strstr(line + 2, "\r\n")) {
    if (strncasecmp(line + 2, "Content-Length:", 15) == 0)
      length = strtoull(line + 17, NULL, 10);
    if (strncasecmp(line + 2, "Expect: 100-continue", 20) == 0 &&
        rp_send_full(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0)
      return -1;
  }
  if (length > BODY_MAX || !(q->body = malloc(length + 1)))
    return -1;
  size_t have = q->head_len - head < length ? q->head_len - head : length;
  memcpy(q->body, q->head + head, have);
  while (have < length) {
    ssize_t got = recv(fd, q->body + have, length - have, 0);
    if (got <= 0)
      return -1;
    have += (size_t)got;
  }
  q->body[length] = '\0';
  q->body_len = length;
  return 0;
}

/* The request to the member, then its reply back until the member closes (a watch
 * streams), the client leaves, or the liar stops. */
static void relay(struct rp_test_etcd_liar *l, int client, const struct request *q)
{
  int up = connect_loopback(l->upstream_port);
  if (up < 0)
    return;
  char head[512];
  int n = snprintf(head, sizeof head,
                   "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                   "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                   q->path, q->body_len);
  if (rp_send_full(up, head, (size_t)n) == 0 && rp_send_full(up, q->body, q->body_len) == 0) {
    atomic_fetch_add(&l->relayed, 1);
    char buf[65536];
    while (!atomic_load(&l->stopping)) {
      struct pollfd p[2] = { { .fd = up, .events = POLLIN },
                             { .fd = client, .events = POLLIN } };
      if (poll(p, 2, 100) < 0 && errno != EINTR)
        break;
      if (p[1].revents)
        break; /* the client sends nothing more: it left */
      if (!p[0].revents)
        continue;
      ssize_t got = recv(up, buf, sizeof buf, 0);
      if (got <= 0 || rp_send_full(client, buf, (size_t)got) < 0)
        break;
    }
  }
  close(up);
}

struct connection {
  struct rp_test_etcd_liar *l;
  int fd;
};

static void *serve(void *arg)
{
  struct connection *c = arg;
  struct rp_test_etcd_liar *l = c->l;
  struct request *q = calloc(1, sizeof *q);
  if (q && read_request(c->fd, q) == 0) {
    if (strcmp(q->path, l->path) == 0) {
      char head[256];
      int n = snprintf(head, sizeof head,
                       "HTTP/1.1 200 OK\r\nContent-Type: application/json"
                       "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                       strlen(l->lie));
      if (rp_send_full(c->fd, head, (size_t)n) == 0 &&
          rp_send_full(c->fd, l->lie, strlen(l->lie)) == 0)
        atomic_fetch_add(&l->lies, 1);
    } else {
      relay(l, c->fd, q);
    }
  }
  if (q)
    free(q->body);
  free(q);
  close(c->fd);
  free(c);
  atomic_fetch_sub(&l->serving, 1);
  return NULL;
}

static void *accept_loop(void *arg)
{
  struct rp_test_etcd_liar *l = arg;
  int fd;
  while ((fd = accept4(l->listen_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
    struct connection *c = malloc(sizeof *c);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    atomic_fetch_add(&l->serving, 1);
    if (c) {
      *c = (struct connection){ .l = l, .fd = fd };
    }
    if (!c || pthread_create(&t, &attr, serve, c) != 0) {
      atomic_fetch_sub(&l->serving, 1);
      close(fd);
      free(c);
    }
    pthread_attr_destroy(&attr);
  }
  return NULL;
}

int rp_test_etcd_liar_start(struct rp_test_etcd_liar *l, unsigned upstream_port,
                            const char *path, const char *lie)
{
  memset(l, 0, sizeof *l);
  l->upstream_port = upstream_port;
  l->lie = lie;
  snprintf(l->path, sizeof l->path, "%s", path);
  l->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t len = sizeof a;
  if (l->listen_fd < 0 || bind(l->listen_fd, (struct sockaddr *)&a, sizeof a) < 0 ||
      listen(l->listen_fd, 64) < 0 ||
      getsockname(l->listen_fd, (struct sockaddr *)&a, &len) < 0 ||
      pthread_create(&l->thread, NULL, accept_loop, l) != 0) {
    fprintf(stderr, "etcd liar: cannot listen on loopback: %s\n", strerror(errno));
    if (l->listen_fd >= 0)
      close(l->listen_fd);
    return -1;
  }
  l->port = ntohs(a.sin_port);
  return 0;
}

void rp_test_etcd_liar_stop(struct rp_test_etcd_liar *l)
{
  atomic_store(&l->stopping, true);
  shutdown(l->listen_fd, SHUT_RDWR); /* accept fails: the thread ends */
  pthread_join(l->thread, NULL);
  close(l->listen_fd);
  uint64_t until = rp_test_now_ms() + 5000;
  while (atomic_load(&l->serving) > 0 && rp_test_now_ms() < until)
    rp_test_sleep_ms(10);
}

int rp_test_http_post(unsigned port, const char *path, const char *body, size_t body_len,
                      char *out, size_t outlen, unsigned timeout_ms)
{
  int fd = connect_loopback(port);
  if (fd < 0)
    return -1;
  char head[512];
  int n = snprintf(head, sizeof head,
                   "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                   "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                   path, body_len);
  size_t have = 0;
  out[0] = '\0';
  if (rp_send_full(fd, head, (size_t)n) == 0 && rp_send_full(fd, body, body_len) == 0) {
    uint64_t until = rp_test_now_ms() + timeout_ms;
    while (have + 1 < outlen && rp_test_now_ms() < until) {
      struct pollfd p = { .fd = fd, .events = POLLIN };
      if (poll(&p, 1, 100) <= 0)
        continue;
      ssize_t got = recv(fd, out + have, outlen - 1 - have, 0);
      if (got <= 0)
        break;
      have += (size_t)got;
      out[have] = '\0';
    }
  }
  close(fd);
  int status = -1;
  return sscanf(out, "HTTP/1.1 %d", &status) == 1 ? status : -1;
}
