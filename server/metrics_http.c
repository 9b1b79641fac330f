/* The metrics listener (see metrics_http.h). A scraper connects, sends one request,
 * gets one response and the connection is closed: Prometheus opens a connection per
 * scrape anyway, and this keeps every client a three-state machine (reading, writing,
 * free). */
#include "metrics_http.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "metrics_render.h"

#define METRICS_CLIENTS 8        /* scrapers served at once; more are closed at accept */
#define METRICS_REQUEST_MAX 2048 /* request line and headers */
#define METRICS_RESPONSE_MAX (64 * 1024)
#define METRICS_IDLE_SECONDS 5.0 /* a client that neither finishes nor reads is closed */

struct metrics_client {
  int fd; /* -1: slot free */
  ev_io io;
  ev_timer idle;
  struct rps_metrics_http *owner;
  size_t req_len;
  size_t resp_len, resp_sent;
  char req[METRICS_REQUEST_MAX + 1];
  char *resp; /* METRICS_RESPONSE_MAX, allocated at start */
};

struct rps_metrics_http {
  struct ev_loop *loop;
  struct rps_server *srv;
  int listen_fd;
  ev_io listen_io;
  char *body; /* the rendered text, before the headers go in front */
  struct metrics_client clients[METRICS_CLIENTS];
};

static void client_close(struct metrics_client *c)
{
  struct ev_loop *loop = c->owner->loop;
  ev_io_stop(loop, &c->io);
  ev_timer_stop(loop, &c->idle);
  close(c->fd);
  c->fd = -1;
}

/* Status line, headers and body into the client's response buffer. */
static void respond(struct metrics_client *c, const char *status, const char *body,
                    size_t body_len, bool head_only)
{
  int n = snprintf(c->resp, METRICS_RESPONSE_MAX,
                   "HTTP/1.1 %s\r\n"
                   "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                   "Content-Length: %zu\r\n"
                   "Connection: close\r\n\r\n",
                   status, body_len);
  size_t len = n > 0 ? (size_t)n : 0;
  if (!head_only && len + body_len <= METRICS_RESPONSE_MAX) {
    memcpy(c->resp + len, body, body_len);
    len += body_len;
  }
  c->resp_len = len;
  c->resp_sent = 0;
}

static void respond_text(struct metrics_client *c, const char *status, const char *text)
{
  respond(c, status, text, strlen(text), false);
}

/* Answers the request in c->req (complete: it holds the blank line). */
static void handle_request(struct metrics_client *c)
{
  struct rps_metrics_http *mh = c->owner;
  char method[8], target[256], version[16];
  if (sscanf(c->req, "%7s %255s %15s", method, target, version) != 3 ||
      strncmp(version, "HTTP/1.", 7) != 0) {
    respond_text(c, "400 Bad Request", "rampartd: not an HTTP/1.x request line\n");
    return;
  }
  bool head = strcmp(method, "HEAD") == 0;
  if (strcmp(method, "GET") != 0 && !head) {
    respond_text(c, "405 Method Not Allowed", "rampartd: only GET /metrics is served\n");
    return;
  }
  size_t path_len = strcspn(target, "?");
  if (path_len != strlen("/metrics") || strncmp(target, "/metrics", path_len) != 0) {
    respond_text(c, "404 Not Found", "rampartd: the counters are at /metrics\n");
    return;
  }
  /* Room is left for the headers in the response buffer. */
  size_t cap = METRICS_RESPONSE_MAX - 512;
  size_t len = rps_metrics_render(mh->srv, mh->body, cap);
  if (len >= cap) {
    rp_log(RP_LOG_ERROR, "--metrics: the metrics text (%zu bytes) outgrew its buffer", len);
    respond_text(c, "500 Internal Server Error", "rampartd: metrics too large\n");
    return;
  }
  respond(c, "200 OK", mh->body, len, head);
}

static bool request_complete(const struct metrics_client *c)
{
  return strstr(c->req, "\r\n\r\n") != NULL || strstr(c->req, "\n\n") != NULL;
}

static void start_writing(struct metrics_client *c)
{
  struct ev_loop *loop = c->owner->loop;
  ev_io_stop(loop, &c->io);
  ev_io_set(&c->io, c->fd, EV_WRITE);
  ev_io_start(loop, &c->io);
}

static void on_readable(struct metrics_client *c)
{
  ssize_t n = recv(c->fd, c->req + c->req_len, METRICS_REQUEST_MAX - c->req_len, 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    client_close(c);
    return;
  }
  if (n < 0)
    return;
  c->req_len += (size_t)n;
  c->req[c->req_len] = '\0';
  if (request_complete(c))
    handle_request(c);
  else if (c->req_len == METRICS_REQUEST_MAX)
    respond_text(c, "431 Request Header Fields Too Large",
                 "rampartd: a metrics request must fit in 2 KiB\n");
  else
    return;
  start_writing(c);
}

static void on_writable(struct metrics_client *c)
{
  ssize_t n = send(c->fd, c->resp + c->resp_sent, c->resp_len - c->resp_sent, MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (n < 0) {
    client_close(c);
    return;
  }
  c->resp_sent += (size_t)n;
  if (c->resp_sent == c->resp_len) {
    shutdown(c->fd, SHUT_WR);
    client_close(c);
  }
}

static void on_client(struct ev_loop *loop, ev_io *w, int revents)
{
  struct metrics_client *c = w->data;
  ev_timer_again(loop, &c->idle);
  if (revents & EV_READ)
    on_readable(c);
  else if (revents & EV_WRITE)
    on_writable(c);
}

static void on_idle(struct ev_loop *loop, ev_timer *w, int revents)
{
  client_close(w->data);
}

static struct metrics_client *free_slot(struct rps_metrics_http *mh)
{
  for (unsigned i = 0; i < METRICS_CLIENTS; i++)
    if (mh->clients[i].fd < 0)
      return &mh->clients[i];
  return NULL;
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
  struct rps_metrics_http *mh = w->data;
  for (int i = 0; i < METRICS_CLIENTS; i++) {
    int fd = accept4(mh->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return; /* EAGAIN, or out of descriptors: the page protocol's accept says so */
    struct metrics_client *c = free_slot(mh);
    if (!c) {
      close(fd); /* every slot busy: this scrape fails, the next one will do */
      continue;
    }
    c->fd = fd;
    c->req_len = 0;
    c->req[0] = '\0';
    ev_io_set(&c->io, fd, EV_READ);
    ev_io_start(loop, &c->io);
    ev_timer_again(loop, &c->idle);
  }
}

struct rps_metrics_http *rps_metrics_http_start(struct ev_loop *loop, int listen_fd,
                                                struct rps_server *srv)
{
  struct rps_metrics_http *mh = calloc(1, sizeof *mh);
  if (!mh) {
    close(listen_fd);
    return NULL;
  }
  mh->loop = loop;
  mh->srv = srv;
  mh->listen_fd = -1;
  bool ok = (mh->body = malloc(METRICS_RESPONSE_MAX)) != NULL;
  for (unsigned i = 0; i < METRICS_CLIENTS; i++) {
    struct metrics_client *c = &mh->clients[i];
    c->fd = -1;
    c->owner = mh;
    ok = ok && (c->resp = malloc(METRICS_RESPONSE_MAX)) != NULL;
    ev_init(&c->io, on_client);
    c->io.data = c;
    ev_init(&c->idle, on_idle);
    c->idle.repeat = METRICS_IDLE_SECONDS;
    c->idle.data = c;
  }
  if (!ok) {
    rps_metrics_http_stop(mh);
    close(listen_fd);
    return NULL;
  }
  mh->listen_fd = listen_fd;
  ev_io_init(&mh->listen_io, on_accept, listen_fd, EV_READ);
  mh->listen_io.data = mh;
  ev_io_start(loop, &mh->listen_io);
  return mh;
}

void rps_metrics_http_stop(struct rps_metrics_http *mh)
{
  if (!mh)
    return;
  if (mh->listen_fd >= 0) {
    ev_io_stop(mh->loop, &mh->listen_io);
    close(mh->listen_fd);
  }
  for (unsigned i = 0; i < METRICS_CLIENTS; i++) {
    struct metrics_client *c = &mh->clients[i];
    if (c->fd >= 0)
      client_close(c);
    free(c->resp);
  }
  free(mh->body);
  free(mh);
}
