/* One NBD client of rampart-nbd-server (nbd_server_conn.h).
 *
 * A pass of the thread's loop: read what the socket holds (one recv, into a buffer big
 * enough for a whole batch of small requests), start every complete request, submit
 * them as one list, send every reply ready in one sendmsg, then wait. While requests are
 * in the engine it waits in rampart_reap_or_fd, reading the servers' replies itself,
 * with an epoll fd standing for "the client sent more, or another thread completed one
 * of ours" in the same poll; with none in the engine it sleeps on the client alone. */
#include "nbd_server_conn.h"

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fifo.h"
#include "hop_trace.h"
#include "mailbox.h"
#include "nbd_protocol.h"

/* The receive buffer: 64 KiB holds a batch of 32 queued 4 KiB writes with their headers
 * (fio's QD32, the kernel's swap-out bursts); a larger write's payload goes straight
 * into its own buffer. */
#define RECEIVE_BUFFER (256u << 10)
/* Every request starts with a page of its own, taken with the connection: a swap device's
 * requests are mostly single pages, and those then never allocate, even while the
 * machine has no memory to give. A larger request gets a buffer of its own, kept for
 * the next one up to KEPT_BUFFER and freed after its reply past that, so a few big
 * requests do not leave every slot holding megabytes. */
#define FIRST_BUFFER 4096u
#define KEPT_BUFFER (1u << 20)
#define HANDSHAKE_TIMEOUT_S 30

struct request {
  struct rampart_io io;
  struct nbd_server_conn *conn;
  struct request *next; /* the free list */
  uint8_t *buf;
  uint32_t cap;
  bool reply_data; /* a read that succeeded: its bytes follow the reply */
  struct __attribute__((packed)) {
    uint32_t magic, error;
    uint64_t handle;
  } reply;
};

struct nbd_server_conn {
  struct rampart_engine *engine;
  struct nbd_server_export export;
  int fd, epoll_fd;
  bool watching_client; /* fd is in epoll_fd's set */
  unsigned depth;
  struct request *requests, *free_requests;
  uint8_t *pages; /* FIRST_BUFFER bytes per request */
  unsigned outstanding; /* taken from the free list, reply not sent yet */
  /* Replies ready (struct request *), in the order they completed: those completed on
   * this thread, and those another thread completed, posted to `done` and moved here. */
  void **ready;
  unsigned nready;
  struct rp_mailbox done; /* its event_fd is in epoll_fd's set */
  /* What was received and not yet taken; a write whose payload is still coming. */
  uint8_t *in;
  size_t in_start, in_end;
  struct request *filling;
  uint32_t filled;
  bool closing;
  bool send_failed;
  atomic_bool stop_asked, ended;
  pthread_t thread;
  struct iovec *iov;
};

static _Thread_local struct nbd_server_conn *conn_of_this_thread;

static void say(const struct nbd_server_conn *c, const char *what)
{
  fprintf(stderr, "rampart-nbd-server: connection %d: %s\n", c->fd, what);
}

static uint32_t nbd_error_of(int result)
{
  switch (-result) {
  case 0: return 0;
  case EPERM: return NBD_EPERM;
  case ENOMEM: return NBD_ENOMEM;
  case EINVAL: return NBD_EINVAL;
  case ENOSPC: return NBD_ENOSPC;
  case EOVERFLOW: return NBD_EOVERFLOW;
  case EOPNOTSUPP: return NBD_ENOTSUP;
  case ESHUTDOWN: return NBD_ESHUTDOWN;
  default: return NBD_EIO;
  }
}

/* Runs on this connection's thread (in rampart_submit_list or rampart_reap_or_fd), or on
 * another: the engine's I/O thread, or another connection's while it reaps. */
static void on_engine_done(struct rampart_io *io, int result)
{
  struct request *r = io->user;
  struct nbd_server_conn *c = r->conn;
  r->reply.error = htobe32(nbd_error_of(result));
  r->reply_data = io->op == RAMPART_OP_READ && result == 0;
  if (c == conn_of_this_thread)
    c->ready[c->nready++] = r;
  else
    rp_mailbox_post(&c->done, r);
}

static void answer_now(struct nbd_server_conn *c, struct request *r, uint32_t nbd_error)
{
  r->reply.error = htobe32(nbd_error);
  r->reply_data = false;
  c->ready[c->nready++] = r;
}

/* Larger than its page of `pages`: allocated for it (fit_buffer rounds up to pages). */
static bool owns_buffer(const struct request *r)
{
  return r->cap > FIRST_BUFFER;
}

static void own_page(struct nbd_server_conn *c, struct request *r)
{
  if (owns_buffer(r))
    free(r->buf);
  r->buf = c->pages + (size_t)(r - c->requests) * FIRST_BUFFER;
  r->cap = FIRST_BUFFER;
}

static bool fit_buffer(struct nbd_server_conn *c, struct request *r, uint32_t length)
{
  if (r->cap >= length)
    return true;
  uint32_t cap = (length + 4095u) & ~4095u;
  uint8_t *buf = aligned_alloc(4096, cap);
  if (!buf)
    return false;
  if (owns_buffer(r))
    free(r->buf); /* too small */
  r->buf = buf;
  r->cap = cap;
  return true;
}

static void release(struct nbd_server_conn *c, struct request *r)
{
  if (r->cap > KEPT_BUFFER)
    own_page(c, r);
  r->next = c->free_requests;
  c->free_requests = r;
  c->outstanding--;
}

/* One request header at p. Returns the request to submit, or NULL: answered at once,
 * a write whose payload is still to come, or the connection is closing. */
static struct request *take_request(struct nbd_server_conn *c, const uint8_t *p)
{
  struct __attribute__((packed)) {
    uint32_t magic;
    uint16_t flags, type;
    uint64_t handle, offset;
    uint32_t length;
  } h;
  memcpy(&h, p, sizeof h);
  if (be32toh(h.magic) != NBD_REQUEST_MAGIC) {
    say(c, "a request without NBD's request magic: the client is out of step; closing");
    c->closing = true;
    return NULL;
  }
  uint16_t type = be16toh(h.type), flags = be16toh(h.flags);
  uint32_t length = be32toh(h.length);
  if (type == NBD_CMD_DISC) {
    c->closing = true;
    return NULL;
  }
  struct request *r = c->free_requests;
  c->free_requests = r->next;
  c->outstanding++;
  rp_hop(RP_HOP_FRONTEND_IN);
  r->reply.magic = htobe32(NBD_SIMPLE_REPLY_MAGIC);
  r->reply.handle = h.handle; /* opaque: echoed as sent */
  struct rampart_io *io = &r->io;
  memset(io, 0, sizeof *io);
  io->offset = be64toh(h.offset);
  io->length = length;
  io->done = on_engine_done;
  io->user = r;
  bool data = type == NBD_CMD_READ || type == NBD_CMD_WRITE;
  if (data && length > c->export.max_block) {
    if (type == NBD_CMD_WRITE) {
      char why[160];
      snprintf(why, sizeof why, "a write of %u bytes, over the %u this server takes "
               "(NBD_INFO_BLOCK_SIZE): its payload cannot be taken; closing", length,
               c->export.max_block);
      say(c, why);
      release(c, r);
      c->closing = true;
      return NULL;
    }
    answer_now(c, r, NBD_EOVERFLOW);
    return NULL;
  }
  if (data && !fit_buffer(c, r, length)) {
    if (type == NBD_CMD_WRITE) {
      say(c, "out of memory for a write's payload; closing");
      release(c, r);
      c->closing = true;
      return NULL;
    }
    answer_now(c, r, NBD_ENOMEM);
    return NULL;
  }
  io->buf = r->buf;
  switch (type) {
  case NBD_CMD_READ:
    io->op = RAMPART_OP_READ;
    return r;
  case NBD_CMD_WRITE:
    io->op = RAMPART_OP_WRITE;
    io->flags = flags & NBD_CMD_FLAG_FUA ? RAMPART_IO_FUA : 0;
    c->filling = r;
    c->filled = 0;
    return NULL;
  case NBD_CMD_FLUSH:
    io->op = RAMPART_OP_FLUSH;
    return r;
  case NBD_CMD_TRIM:
    io->op = RAMPART_OP_TRIM;
    return r;
  case NBD_CMD_WRITE_ZEROES:
    io->op = RAMPART_OP_ZERO;
    return r;
  default:
    answer_now(c, r, NBD_EINVAL);
    return NULL;
  }
}

/* The requests one pass takes, for one rampart_submit_list. */
struct batch {
  struct rampart_io *head, *tail;
};

/* Every complete request in the receive buffer, onto the batch. */
static void take_requests(struct nbd_server_conn *c, struct batch *b)
{
  while (!c->closing) {
    size_t held = c->in_end - c->in_start;
    struct request *r = NULL;
    if (c->filling) {
      uint32_t want = c->filling->io.length - c->filled;
      uint32_t k = held < want ? (uint32_t)held : want;
      if (k > 0) /* (a write of 0 bytes has no buffer) */
        memcpy(c->filling->buf + c->filled, c->in + c->in_start, k);
      c->in_start += k;
      c->filled += k;
      if (c->filled < c->filling->io.length)
        break;
      r = c->filling;
      c->filling = NULL;
    } else {
      if (held < NBD_REQUEST_SIZE || !c->free_requests)
        break;
      r = take_request(c, c->in + c->in_start);
      c->in_start += NBD_REQUEST_SIZE;
    }
    if (r)
      FIFO_APPEND(b->head, b->tail, &r->io, next);
  }
  if (c->in_start == c->in_end)
    c->in_start = c->in_end = 0;
}

/* One recv. True when the socket may hold more (the read filled what was offered). */
static bool receive(struct nbd_server_conn *c)
{
  void *to;
  size_t room;
  bool direct = c->filling && c->in_start == c->in_end;
  if (direct) { /* a write's payload, straight into its buffer */
    to = c->filling->buf + c->filled;
    room = c->filling->io.length - c->filled;
  } else {
    if (c->in_start > 0) {
      memmove(c->in, c->in + c->in_start, c->in_end - c->in_start);
      c->in_end -= c->in_start;
      c->in_start = 0;
    }
    to = c->in + c->in_end;
    room = RECEIVE_BUFFER - c->in_end;
  }
  ssize_t n;
  while ((n = recv(c->fd, to, room, MSG_DONTWAIT)) < 0 && errno == EINTR)
    ;
  if (n == 0) {
    c->closing = true; /* the client left or shut its side: answer what is in flight */
    return false;
  }
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      char why[128];
      snprintf(why, sizeof why, "cannot read from the client: %s; closing", strerror(errno));
      say(c, why);
      c->closing = true;
    }
    return false;
  }
  if (direct)
    c->filled += (uint32_t)n;
  else
    c->in_end += (size_t)n;
  return (size_t)n == room;
}

/* Every ready reply, in one sendmsg where the socket takes it (a read's data
 * follows its header), then their requests go back to the free list. */
static void send_replies(struct nbd_server_conn *c)
{
  c->nready += rp_mailbox_take_woken(&c->done, c->ready + c->nready);
  unsigned sent = 0;
  while (sent < c->nready) {
    unsigned niov = 0, first = sent;
    size_t bytes = 0;
    for (; sent < c->nready && niov + 2 <= IOV_MAX; sent++) {
      struct request *r = c->ready[sent];
      c->iov[niov++] = (struct iovec){ &r->reply, sizeof r->reply };
      bytes += sizeof r->reply;
      if (r->reply_data) {
        c->iov[niov++] = (struct iovec){ r->buf, r->io.length };
        bytes += r->io.length;
      }
    }
    struct iovec *iov = c->iov;
    while (bytes > 0 && !c->send_failed) {
      struct msghdr m = { .msg_iov = iov, .msg_iovlen = niov };
      ssize_t n = sendmsg(c->fd, &m, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0) {
        char why[128];
        snprintf(why, sizeof why, "cannot send replies: %s; closing", strerror(errno));
        say(c, why);
        c->send_failed = true; /* nothing more is sent; what is in the engine is waited for */
        c->closing = true;
        break;
      }
      bytes -= (size_t)n;
      while (n > 0 && (size_t)n >= iov->iov_len) {
        n -= (ssize_t)iov->iov_len;
        iov++;
        niov--;
      }
      if (n > 0) {
        iov->iov_base = (uint8_t *)iov->iov_base + n;
        iov->iov_len -= (size_t)n;
      }
    }
    rp_hop(RP_HOP_FRONTEND_OUT);
    for (unsigned i = first; i < sent; i++)
      release(c, c->ready[i]);
  }
  c->nready = 0;
}

/* The client's socket is in epoll_fd's set only while its requests can be taken: with
 * no free request (or closing) its readability would end every wait at once. */
static void watch_client(struct nbd_server_conn *c, bool want)
{
  if (want == c->watching_client)
    return;
  struct epoll_event ev = { .events = EPOLLIN, .data.fd = c->fd };
  if (epoll_ctl(c->epoll_fd, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, c->fd, &ev) == 0)
    c->watching_client = want;
}

/* Whether more requests can be read: not closing, and a request free for them (or a
 * write's payload still to come). */
static bool can_take_requests(const struct nbd_server_conn *c)
{
  return !c->closing && (c->free_requests || c->filling);
}

static void serve(struct nbd_server_conn *c)
{
  bool readable = true;
  for (;;) {
    struct batch batch = { NULL, NULL };
    bool can_take = can_take_requests(c);
    if (atomic_load(&c->stop_asked) && !c->closing) {
      /* Stopping: every request the client has sent is taken and answered, then the
       * connection ends. */
      bool more = true;
      while (more && can_take_requests(c)) {
        more = receive(c);
        take_requests(c, &batch);
      }
      c->closing = true;
      can_take = false;
    }
    if (can_take && readable) {
      readable = receive(c);
      take_requests(c, &batch);
    }
    if (batch.head)
      rampart_submit_list(c->engine, batch.head); /* one lock, one send per server */
    send_replies(c);
    if (c->closing && c->filling) { /* a write whose payload never came: not submitted */
      release(c, c->filling);
      c->filling = NULL;
    }
    if (c->closing && c->outstanding == 0)
      return;
    can_take = can_take_requests(c);
    watch_client(c, can_take);
    if (can_take && readable)
      continue;
    if (c->outstanding > 0) { /* (send_replies emptied the ready list) */
      readable = rampart_reap_or_fd(c->engine, c->epoll_fd) && can_take;
    } else {
      struct pollfd p = { .fd = c->epoll_fd, .events = POLLIN };
      while (poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
      readable = can_take;
    }
  }
}

static void *conn_main(void *arg)
{
  struct nbd_server_conn *c = arg;
  conn_of_this_thread = c;
  char name[16];
  snprintf(name, sizeof name, "rampart-nbd%d", c->fd);
  pthread_setname_np(pthread_self(), name);
  struct timeval limit = { .tv_sec = HANDSHAKE_TIMEOUT_S }, none = { 0 };
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  char err[256];
  int r = nbd_server_handshake(c->fd, c->done.event_fd, &c->export, err, sizeof err);
  if (r < 0)
    say(c, err);
  if (r == 0) {
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
    serve(c); /* a stop asked during the handshake's last reply is seen at once */
  }
  shutdown(c->fd, SHUT_RDWR);
  atomic_store(&c->ended, true);
  return NULL;
}

static void conn_free(struct nbd_server_conn *c)
{
  if (c->requests)
    for (unsigned i = 0; i < c->depth; i++)
      if (owns_buffer(&c->requests[i]))
        free(c->requests[i].buf);
  free(c->requests);
  free(c->pages);
  free(c->ready);
  rp_mailbox_free(&c->done);
  free(c->in);
  free(c->iov);
  if (c->epoll_fd >= 0)
    close(c->epoll_fd);
  if (c->fd >= 0)
    close(c->fd);
  free(c);
}

struct nbd_server_conn *nbd_server_conn_start(struct rampart_engine *engine, int fd,
                                              const struct nbd_server_export *export,
                                              unsigned depth, char *err, size_t errlen)
{
  struct nbd_server_conn *c = calloc(1, sizeof *c);
  if (!c) {
    close(fd);
    snprintf(err, errlen, "out of memory for a connection");
    return NULL;
  }
  c->engine = engine;
  c->export = *export;
  c->fd = fd;
  c->depth = depth;
  c->requests = calloc(depth, sizeof *c->requests);
  c->pages = aligned_alloc(4096, (size_t)depth * FIRST_BUFFER);
  c->ready = calloc(depth, sizeof *c->ready);
  c->in = malloc(RECEIVE_BUFFER);
  c->iov = calloc(IOV_MAX, sizeof *c->iov);
  c->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  int made = rp_mailbox_init(&c->done, depth, true);
  struct epoll_event ev = { .events = EPOLLIN, .data.fd = c->done.event_fd };
  if (!c->requests || !c->pages || !c->ready || made < 0 || !c->in || !c->iov ||
      c->epoll_fd < 0 || epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, c->done.event_fd, &ev) < 0) {
    snprintf(err, errlen, "cannot set up a connection: %s", strerror(errno ? errno : ENOMEM));
    conn_free(c);
    return NULL;
  }
  /* touched now: under mlockall's MCL_ONFAULT an untouched page would be faulted in at
   * its first request, which may come while the machine is out of memory */
  memset(c->pages, 0, (size_t)depth * FIRST_BUFFER);
  memset(c->in, 0, RECEIVE_BUFFER);
  for (unsigned i = 0; i < depth; i++) {
    c->requests[i].conn = c;
    own_page(c, &c->requests[i]);
    c->requests[i].next = i + 1 < depth ? &c->requests[i + 1] : NULL;
  }
  c->free_requests = &c->requests[0];
  int r = pthread_create(&c->thread, NULL, conn_main, c);
  if (r != 0) {
    snprintf(err, errlen, "cannot start a connection's thread: %s", strerror(r));
    conn_free(c);
    return NULL;
  }
  return c;
}

bool nbd_server_conn_ended(const struct nbd_server_conn *c)
{
  return atomic_load(&c->ended);
}

void nbd_server_conn_stop(struct nbd_server_conn *c)
{
  atomic_store(&c->stop_asked, true);
  /* Wakes the thread wherever it waits, on its mailbox's eventfd: in the handshake, or
   * in epoll_fd's set. */
  rp_mailbox_wake(&c->done);
}

void nbd_server_conn_join(struct nbd_server_conn *c)
{
  pthread_join(c->thread, NULL);
  conn_free(c);
}
