/* One NBD client of rampart-nbd-server (nbd_server_conn.h).
 *
 * A pass of the thread's loop: read what the socket holds (one recv, into a buffer big
 * enough for a whole batch of small requests), start every complete request, submit
 * them as one list, send every reply ready in one sendmsg, then wait. While requests are
 * in the engine it waits in rampart_reap_or_fd, reading the servers' replies itself,
 * with an epoll fd standing for "the client sent more, or another thread completed one
 * of ours" in the same poll; with none in the engine it sleeps on the client alone.
 *
 * Memory: a request's buffer past its first page is counted against the connection's
 * share and, past its unshared part, the daemon's (nbd_buffer_budget.h) before it is
 * allocated; a header whose buffer does not fit stays in the receive buffer, and the
 * socket is not read, until replies drain. Time: a send that moves nothing for stall_ms, or a request left half sent that
 * long, closes the connection; an idle one is never closed. */
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

#include "clock.h"
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
 * the next one up to KEPT_BUFFER and while the connection's buffers stay within
 * unshared_buffers, freed after its reply past that: a swap device's bursts of larger
 * requests allocate once, and an idle connection holds none of the daemon's budget. */
#define FIRST_BUFFER 4096u
#define KEPT_BUFFER (1u << 20)
/* A connection waiting for the daemon's budget (not its own) tries again this often:
 * the bytes come back on other connections' threads, which do not wake it. */
#define BUDGET_RETRY_MS 10
/* A wait for the client to read its replies looks at a stop this often. */
#define SEND_POLL_MS 100

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
  const struct nbd_server_limits *limits;
  int fd, epoll_fd;
  bool watching_client; /* fd is in epoll_fd's set */
  unsigned depth;
  uint64_t buffered; /* bytes of owned buffers, in flight or kept (charge, uncharge) */
  struct request *requests, *free_requests;
  uint8_t *pages;       /* FIRST_BUFFER bytes per request */
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
  uint32_t discarding; /* payload bytes of a refused write, still to be read and dropped */
  uint64_t last_receive_ms;  /* when bytes last came, or reading resumed: a half-sent
                               request's clock */
  uint64_t stop_deadline_ms; /* once stopping: replies unsent after this are dropped */
  bool waiting_for_buffer;   /* the next header's buffer does not fit the budgets yet */
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
  case 0:
    return 0;
  case EPERM:
    return NBD_EPERM;
  case ENOMEM:
    return NBD_ENOMEM;
  case EINVAL:
    return NBD_EINVAL;
  case ENOSPC:
    return NBD_ENOSPC;
  case EOVERFLOW:
    return NBD_EOVERFLOW;
  case EOPNOTSUPP:
    return NBD_ENOTSUP;
  case ESHUTDOWN:
    return NBD_ESHUTDOWN;
  default:
    return NBD_EIO;
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

/* The part of a connection's buffered bytes drawn on the daemon's budget. */
static uint64_t shared_part(const struct nbd_server_conn *c, uint64_t buffered)
{
  uint64_t own = c->limits->unshared_buffers;
  return buffered > own ? buffered - own : 0;
}

/* bytes more for this connection's buffers, within its share and the daemon's. */
static bool charge(struct nbd_server_conn *c, uint64_t bytes)
{
  if (bytes > c->limits->connection_buffers - c->buffered)
    return false;
  uint64_t shared = shared_part(c, c->buffered + bytes) - shared_part(c, c->buffered);
  if (shared && !nbd_buffer_budget_take(c->limits->all_buffers, shared))
    return false;
  c->buffered += bytes;
  return true;
}

static void uncharge(struct nbd_server_conn *c, uint64_t bytes)
{
  uint64_t shared = shared_part(c, c->buffered) - shared_part(c, c->buffered - bytes);
  c->buffered -= bytes;
  if (shared)
    nbd_buffer_budget_give(c->limits->all_buffers, shared);
}

static void own_page(struct nbd_server_conn *c, struct request *r)
{
  if (owns_buffer(r)) {
    free(r->buf);
    uncharge(c, r->cap);
  }
  r->buf = c->pages + (size_t)(r - c->requests) * FIRST_BUFFER;
  r->cap = FIRST_BUFFER;
}

/* The buffers kept by requests not in use, back to the budgets. */
static void drop_kept_buffers(struct nbd_server_conn *c)
{
  for (struct request *r = c->free_requests; r && c->buffered > 0; r = r->next)
    own_page(c, r);
}

enum fit { FIT_DONE, FIT_LATER, FIT_NO_MEMORY };

/* A buffer of length bytes for r. FIT_LATER: the budgets cannot give it until replies
 * drain. */
static enum fit fit_buffer(struct nbd_server_conn *c, struct request *r, uint32_t length)
{
  if (r->cap >= length)
    return FIT_DONE;
  uint32_t cap = (length + 4095u) & ~4095u;
  own_page(c, r); /* too small */
  if (!charge(c, cap)) {
    drop_kept_buffers(c);
    if (!charge(c, cap))
      return FIT_LATER;
  }
  uint8_t *buf = aligned_alloc(4096, cap);
  if (!buf) {
    uncharge(c, cap);
    return FIT_NO_MEMORY;
  }
  r->buf = buf;
  r->cap = cap;
  return FIT_DONE;
}

static void release(struct nbd_server_conn *c, struct request *r)
{
  if (r->cap > KEPT_BUFFER || c->buffered > c->limits->unshared_buffers)
    own_page(c, r);
  r->next = c->free_requests;
  c->free_requests = r;
  c->outstanding--;
}

struct request_header {
  uint32_t magic;
  uint16_t flags, type;
  uint64_t handle; /* opaque: echoed as sent */
  uint64_t offset;
  uint32_t length;
};

static void decode_header(const uint8_t *p, struct request_header *h)
{
  struct __attribute__((packed)) {
    uint32_t magic;
    uint16_t flags, type;
    uint64_t handle, offset;
    uint32_t length;
  } w;
  memcpy(&w, p, sizeof w);
  *h = (struct request_header){ be32toh(w.magic), be16toh(w.flags),  be16toh(w.type),
                                w.handle,         be64toh(w.offset), be32toh(w.length) };
}

/* The error a well-formed request is refused with before the engine sees it, or 0: an
 * unknown command or flag, a range not aligned to min_block or not inside the export.
 * Checked here, before a buffer is taken for it. */
static uint32_t refusal(const struct nbd_server_conn *c, const struct request_header *h)
{
  uint16_t allowed = NBD_CMD_FLAG_FUA;
  switch (h->type) {
  case NBD_CMD_WRITE_ZEROES:
    allowed |= NBD_CMD_FLAG_NO_HOLE; /* zeros are stored as trimmed pages either way */
    break;
  case NBD_CMD_READ:
  case NBD_CMD_WRITE:
  case NBD_CMD_TRIM:
  case NBD_CMD_FLUSH:
    break;
  default:
    return NBD_EINVAL;
  }
  if (h->flags & ~allowed) /* DF and the rest belong to options this server refused */
    return NBD_EINVAL;
  if (h->type == NBD_CMD_FLUSH)
    return 0;
  if (h->offset % c->export.min_block || h->length % c->export.min_block)
    return NBD_EINVAL;
  if (h->offset > c->export.size || h->length > c->export.size - h->offset)
    return h->type == NBD_CMD_READ ? NBD_EINVAL : NBD_ENOSPC;
  return 0;
}

/* The first free request, for the request h. */
static struct request *take_free(struct nbd_server_conn *c, const struct request_header *h)
{
  struct request *r = c->free_requests;
  c->free_requests = r->next;
  c->outstanding++;
  rp_hop(RP_HOP_FRONTEND_IN);
  r->reply.magic = htobe32(NBD_SIMPLE_REPLY_MAGIC);
  r->reply.handle = h->handle;
  struct rampart_io *io = &r->io;
  memset(io, 0, sizeof *io);
  io->offset = h->offset;
  io->length = h->length;
  io->done = on_engine_done;
  io->user = r;
  io->buf = r->buf;
  return r;
}

enum take { TAKE_ANSWERED, TAKE_SUBMIT, TAKE_LATER };

/* The request whose header is h, with a request free for it. TAKE_SUBMIT: *out goes to
 * the engine. TAKE_ANSWERED: answered at once, a write whose payload is still to come,
 * or the connection is closing. TAKE_LATER: its buffer does not fit yet; the header is
 * left where it is. */
static enum take take_request(struct nbd_server_conn *c, const struct request_header *h,
                              struct request **out)
{
  if (h->magic != NBD_REQUEST_MAGIC) {
    say(c, "a request without NBD's request magic: the client is out of step; closing");
    c->closing = true;
    return TAKE_ANSWERED;
  }
  if (h->type == NBD_CMD_DISC) {
    c->closing = true;
    return TAKE_ANSWERED;
  }
  bool write = h->type == NBD_CMD_WRITE, data = write || h->type == NBD_CMD_READ;
  if (data && h->length > c->export.max_block) {
    if (write) {
      char why[160];
      snprintf(why, sizeof why,
               "a write of %u bytes, over the %u this server takes "
               "(NBD_INFO_BLOCK_SIZE): its payload cannot be taken; closing",
               h->length, c->export.max_block);
      say(c, why);
      c->closing = true;
      return TAKE_ANSWERED;
    }
    answer_now(c, take_free(c, h), NBD_EOVERFLOW);
    return TAKE_ANSWERED;
  }
  uint32_t refused = refusal(c, h);
  if (refused) {
    if (write)
      c->discarding = h->length;
    answer_now(c, take_free(c, h), refused);
    return TAKE_ANSWERED;
  }
  if (data) {
    enum fit fit = fit_buffer(c, c->free_requests, h->length);
    if (fit == FIT_LATER)
      return TAKE_LATER;
    if (fit == FIT_NO_MEMORY && write) {
      say(c, "out of memory for a write's payload; closing");
      c->closing = true;
      return TAKE_ANSWERED;
    }
    if (fit == FIT_NO_MEMORY) {
      answer_now(c, take_free(c, h), NBD_ENOMEM);
      return TAKE_ANSWERED;
    }
  }
  struct request *r = take_free(c, h);
  struct rampart_io *io = &r->io;
  switch (h->type) {
  case NBD_CMD_READ:
    io->op = RAMPART_OP_READ;
    break;
  case NBD_CMD_WRITE:
    io->op = RAMPART_OP_WRITE;
    io->flags = h->flags & NBD_CMD_FLAG_FUA ? RAMPART_IO_FUA : 0;
    c->filling = r;
    c->filled = 0;
    return TAKE_ANSWERED;
  case NBD_CMD_FLUSH:
    io->op = RAMPART_OP_FLUSH;
    break;
  case NBD_CMD_TRIM:
    io->op = RAMPART_OP_TRIM;
    break;
  default: /* NBD_CMD_WRITE_ZEROES: refusal let no other through */
    io->op = RAMPART_OP_ZERO;
    break;
  }
  *out = r;
  return TAKE_SUBMIT;
}

/* The requests one pass takes, for one rampart_submit_list. */
struct batch {
  struct rampart_io *head, *tail;
};

/* Every complete request in the receive buffer, onto the batch, until one's buffer
 * does not fit. */
static void take_requests(struct nbd_server_conn *c, struct batch *b)
{
  c->waiting_for_buffer = false;
  while (!c->closing) {
    size_t held = c->in_end - c->in_start;
    struct request *r = NULL;
    if (c->discarding) {
      uint32_t k = held < c->discarding ? (uint32_t)held : c->discarding;
      c->in_start += k;
      c->discarding -= k;
      if (c->discarding)
        break;
    } else if (c->filling) {
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
      struct request_header h;
      decode_header(c->in + c->in_start, &h);
      if (take_request(c, &h, &r) == TAKE_LATER) {
        c->waiting_for_buffer = true;
        break;
      }
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
  if (room == 0) /* (only whole headers waiting for a request or a buffer fill it) */
    return false;
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
  c->last_receive_ms = rp_now_ms();
  if (direct)
    c->filled += (uint32_t)n;
  else
    c->in_end += (size_t)n;
  return (size_t)n == room;
}

/* When replies the client does not read are given up: stall_ms after the last byte
 * that went (since_ms), and once stopping, stopping_ms after the stop was seen. */
static uint64_t send_deadline(struct nbd_server_conn *c, uint64_t since_ms)
{
  uint64_t deadline = since_ms + c->limits->stall_ms;
  if (atomic_load(&c->stop_asked)) {
    if (!c->stop_deadline_ms)
      c->stop_deadline_ms = rp_now_ms() + c->limits->stopping_ms;
    if (c->stop_deadline_ms < deadline)
      deadline = c->stop_deadline_ms;
  }
  return deadline;
}

/* Waits until the socket takes more, the client has read nothing for too long, or a
 * stop shortens the wait. False when the replies are given up. */
static bool wait_writable(struct nbd_server_conn *c, uint64_t since_ms)
{
  for (;;) {
    uint64_t now = rp_now_ms(), deadline = send_deadline(c, since_ms);
    if (now >= deadline) {
      char why[160];
      if (atomic_load(&c->stop_asked))
        snprintf(why, sizeof why,
                 "stopping, and the client has not read its replies for "
                 "%llu ms; closing",
                 (unsigned long long)(now - since_ms));
      else
        snprintf(why, sizeof why,
                 "the client has not read its replies for %u s "
                 "(--stall-timeout); closing",
                 c->limits->stall_ms / 1000);
      say(c, why);
      return false;
    }
    uint64_t wait = deadline - now < SEND_POLL_MS ? deadline - now : SEND_POLL_MS;
    struct pollfd p = { .fd = c->fd, .events = POLLOUT };
    if (poll(&p, 1, (int)wait) > 0)
      return true;
  }
}

/* iov's bytes, all of them unless the client stops reading them (then send_failed). */
static void send_all(struct nbd_server_conn *c, struct iovec *iov, unsigned niov,
                     size_t bytes)
{
  uint64_t stuck_since_ms = 0;
  while (bytes > 0 && !c->send_failed) {
    struct msghdr m = { .msg_iov = iov, .msg_iovlen = niov };
    ssize_t n = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!stuck_since_ms)
        stuck_since_ms = rp_now_ms();
      if (!wait_writable(c, stuck_since_ms))
        c->send_failed = true;
      continue;
    }
    if (n < 0) {
      char why[128];
      snprintf(why, sizeof why, "cannot send replies: %s; closing", strerror(errno));
      say(c, why);
      c->send_failed = true;
      break;
    }
    stuck_since_ms = 0;
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
  if (c->send_failed)
    c->closing = true; /* nothing more is sent; what is in the engine is waited for */
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
    send_all(c, c->iov, niov, bytes);
    rp_hop(RP_HOP_FRONTEND_OUT);
    for (unsigned i = first; i < sent; i++)
      release(c, c->ready[i]);
  }
  c->nready = 0;
}

/* The client's socket is in epoll_fd's set only while its requests can be taken: with
 * no free request (or closing) its readability would end every wait at once. A
 * half-sent request's clock starts again when it is watched again: the time this side
 * was not reading is not the client's. */
static void watch_client(struct nbd_server_conn *c, bool want)
{
  if (want == c->watching_client)
    return;
  struct epoll_event ev = { .events = EPOLLIN, .data.fd = c->fd };
  if (epoll_ctl(c->epoll_fd, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, c->fd, &ev) == 0)
    c->watching_client = want;
  if (want)
    c->last_receive_ms = rp_now_ms();
}

/* Whether more requests can be read: not closing, and a request free for them (or a
 * write's payload still to come), and the last header's buffer not waiting for the
 * budgets. */
static bool can_take_requests(const struct nbd_server_conn *c)
{
  return !c->closing && !c->waiting_for_buffer &&
         (c->free_requests || c->filling || c->discarding);
}

/* A request the client has begun and not finished sending, while this side would
 * take it: its clock is last_receive_ms. */
static bool request_half_sent(const struct nbd_server_conn *c)
{
  return can_take_requests(c) && (c->filling || c->discarding || c->in_end > c->in_start);
}

/* How long the wait with nothing in the engine may last, in ms (-1: for ever); closes
 * a connection whose half-sent request has waited stall_ms. */
static int idle_wait_ms(struct nbd_server_conn *c)
{
  if (c->waiting_for_buffer)
    return BUDGET_RETRY_MS;
  if (request_half_sent(c)) {
    uint64_t waited = rp_now_ms() - c->last_receive_ms;
    if (waited >= c->limits->stall_ms) {
      char why[160];
      snprintf(why, sizeof why,
               "the client left a request half sent for %u s "
               "(--stall-timeout); closing",
               c->limits->stall_ms / 1000);
      say(c, why);
      c->closing = true;
      return 0;
    }
    return (int)(c->limits->stall_ms - waited);
  }
  return -1;
}

static void serve(struct nbd_server_conn *c)
{
  bool readable = true;
  for (;;) {
    struct batch batch = { NULL, NULL };
    if (c->waiting_for_buffer && !c->closing) {
      send_replies(c); /* what completed since gives its buffer back first */
      take_requests(c, &batch);
    }
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
      if (request_half_sent(c) && idle_wait_ms(c) == 0)
        continue; /* closing: it stalled mid-request */
      readable = rampart_reap_or_fd(c->engine, c->epoll_fd) && can_take;
    } else {
      int ms = idle_wait_ms(c);
      if (ms == 0)
        continue;
      struct pollfd p = { .fd = c->epoll_fd, .events = POLLIN };
      while (poll(&p, 1, ms) < 0 && errno == EINTR)
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
  char err[256];
  int r = nbd_server_handshake(c->fd, c->done.event_fd, &c->export, c->limits->handshake_ms,
                               err, sizeof err);
  if (r < 0)
    say(c, err);
  if (r == 0)
    serve(c); /* a stop asked during the handshake's last reply is seen at once */
  drop_kept_buffers(c);
  shutdown(c->fd, SHUT_RDWR);
  atomic_store(&c->ended, true);
  return NULL;
}

static void conn_free(struct nbd_server_conn *c)
{
  if (c->requests)
    for (unsigned i = 0; i < c->depth; i++)
      if (owns_buffer(&c->requests[i])) {
        free(c->requests[i].buf);
        uncharge(c, c->requests[i].cap);
      }
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
                                              const struct nbd_server_limits *limits,
                                              char *err, size_t errlen)
{
  unsigned depth = limits->depth;
  struct nbd_server_conn *c = calloc(1, sizeof *c);
  if (!c) {
    close(fd);
    snprintf(err, errlen, "out of memory for a connection");
    return NULL;
  }
  c->engine = engine;
  c->export = *export;
  c->limits = limits;
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
