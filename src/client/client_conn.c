/* One authenticated connection to one rampartd (see client.h).
 *
 * Connecting and the handshake are client_handshake.c's; this file is the connection
 * once it is up (the hot path), its memory (a pool, so reconnects allocate nothing) and
 * the blocking helpers.
 *
 * After it, everything runs on a libev loop:
 *   - submit gives the request the next id, links it into the in-flight table (an
 *     intrusive hash: power-of-two bucket array chained through next_in_bucket, so no
 *     allocation per request) and appends it to the send queue (next_queued);
 *   - the write watcher drains the queue with sendmsg: many requests' headers and pages
 *     per syscall, partial writes resumed from sent_bytes;
 *   - the read watcher reads big chunks into one buffer (a pooled connection: a scratch
 *     buffer it shares with the process, see "scratch buffers") and parses every whole
 *     frame in it, each validated by rp_header_decode before its length is believed;
 *   - a timer looks at the oldest request still in flight (ids and deadlines grow
 *     together, so the oldest id holds the earliest deadline); one past its deadline
 *     fails the connection, since its reply could still arrive later on the stream.
 *
 * A peer that breaks the protocol in any way (unknown id, reply before the request was
 * fully sent, wrong op, bad header, undecodable push, a frame whose authentication tag
 * fails) fails the connection: every request in flight completes with
 * RP_ERR_DISCONNECTED and on_disconnect runs once.
 *
 * Frame authentication (proto/frame_auth.h): from AUTH on, every frame we send carries
 * a tag under the client-to-server key, computed when the frame is first put in a
 * sendmsg batch (queue order is wire order, so sequence numbers match), and every frame
 * we receive is checked under the server-to-client key before anything looks further
 * than its header.
 */
#include "client.h"

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/errqueue.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "client_handshake.h"
#include "clock.h"
#include "fifo.h"
#include "hop_trace.h"
#include "log.h"
#include "message.h"
#include "msgf.h"
#include "rampart.pb-c.h"

/* A connection made without a pool (rampartctl, tests) reads into a buffer of its own
 * this big. Pooled connections (the engine's, one per server) keep only POOLED_RBUF_SIZE,
 * enough for the part of a data frame that straddles two reads, and read their bursts
 * into a scratch buffer shared by the process (see "Scratch buffers" below), so a
 * connection costs a few KiB however many servers a client uses. */
#define RBUF_SIZE (256u * 1024u)
#define POOLED_RBUF_SIZE (8u * 1024u)
/* Power of two; ids are sequential, so with up to NBUCKETS requests in flight every
 * chain holds one. The engine keeps at most ENGINE_PAGE_OPS (512) in flight over all
 * its servers: chains of two at worst. */
#define NBUCKETS 256u
/* Scratch buffers for the whole process: a burst read on any pooled connection (the
 * loop reads one socket at a time) and a handshake (one per thread opening a
 * connection: the engine's attach, its reconnect helpers, a runtime add). */
#define SCRATCH_BUFFERS 6u
#define SCRATCH_SIZE RBUF_SIZE
#define MAX_BATCH 256u /* requests per sendmsg (two iovecs each at most) */
#define DEFAULT_CONNECT_TIMEOUT_MS 5000u
#define DEFAULT_REQUEST_TIMEOUT_MS 10000u

#ifndef SO_EE_ORIGIN_ZEROCOPY
#define SO_EE_ORIGIN_ZEROCOPY 5
#endif
#ifndef SO_EE_CODE_ZEROCOPY_COPIED
#define SO_EE_CODE_ZEROCOPY_COPIED 1
#endif

_Static_assert((NBUCKETS & (NBUCKETS - 1)) == 0, "NBUCKETS must be a power of two");
_Static_assert(RBUF_SIZE >= CLIENT_HANDSHAKE_BUF, "the handshake runs in the receive buffer");
_Static_assert(SCRATCH_SIZE >= CLIENT_HANDSHAKE_BUF, "a handshake runs in a scratch buffer");
_Static_assert(SCRATCH_SIZE >= CLIENT_MAX_FRAME, "a scratch buffer holds any frame");
_Static_assert(POOLED_RBUF_SIZE >= RP_HEADER_SIZE + RP_PAGE_SIZE + RP_TAG_LEN,
               "a pooled connection's buffer holds a whole data frame");

struct rp_conn {
  int fd;
  char peer[300];
  struct ev_loop *loop;
  struct ev_loop *private_loop; /* made by a blocking helper when none was attached */
  ev_io rio;
  ev_io wio;
  ev_timer tick;
  bool connected; /* false once failed or closed */
  bool close_pending;
  bool disconnect_reported;
  int depth;         /* > 0 while inside one of our libev callbacks */
  bool reading_lent; /* the owner reads the socket itself (rp_conn_lend_reading) */
  /* Watchers started that a sleeping loop must be woken to see (rp_conn_loop_changes) */
  unsigned loop_changes;
  uint32_t request_timeout_ms;
  uint64_t next_id;
  uint64_t oldest_id; /* no request with a smaller id is in flight */
  size_t in_flight;
  struct rp_request **buckets;
  struct rp_request *q_head, *q_tail;
  uint8_t *rbuf; /* bytes received and not yet parsed: [rstart, rend) */
  size_t rbuf_size;
  size_t rstart, rend;
  rp_advise_fn on_advise;
  rp_disconnect_fn on_disconnect;
  void *cb_user;
  struct rp_error why;         /* why the connection failed */
  struct rp_frame_auth tx, rx; /* client->server and server->client tags */
  struct rp_conn_pool *pool;   /* the pool this connection's memory belongs to, or NULL */
  /* Zero-copy sends (see flush_queue): on when the socket took SO_ZEROCOPY. Each
   * sendmsg that sent something takes the next number; the kernel reports on the
   * socket's error queue which numbers it is done with. */
  bool zerocopy;
  bool zc_wait;           /* the kernel refused more (ENOBUFS): wait for completions */
  uint32_t zc_sent;       /* zero-copy sendmsg calls */
  uint32_t zc_completed;  /* of them, reported done */
  uint32_t zc_copied_run; /* completions in a row the kernel reports it copied */
};

/* Memory for connections, made once (see client.h): each entry is a whole connection
 * with its bucket array and receive buffer, and keeps its frame-authentication cipher
 * contexts between uses, so a connection opened from the pool allocates nothing. */
struct rp_conn_pool {
  unsigned n;
  struct pool_entry {
    _Atomic bool taken;
    struct rp_conn *conn;
  } entries[];
};

/* A request made by the blocking helpers. Control ops (RESERVE, STAT, GOODBYE) are
 * only ever submitted through this wrapper: their payload lives in `out` (page points
 * there, count holds its length) and a successful reply's payload is copied to `reply`. */
struct ctl_request {
  struct rp_request req;
  uint8_t out[64];
  uint8_t *reply;
  size_t reply_len;
  bool finished;
};

static bool is_control_op(uint8_t op)
{
  return op == RP_OP_RESERVE || op == RP_OP_STAT || op == RP_OP_GOODBYE;
}

static uint32_t payload_len(const struct rp_request *r)
{
  if (r->op == RP_OP_WRITE)
    return RP_PAGE_SIZE;
  if (is_control_op(r->op))
    return r->count;
  return 0;
}

static uint32_t frame_len(const struct rp_request *r)
{
  return RP_HEADER_SIZE + payload_len(r) + RP_TAG_LEN;
}

/* ---- in-flight table ---- */

static struct rp_request *table_find(const struct rp_conn *c, uint64_t id)
{
  struct rp_request *r = c->buckets[id & (NBUCKETS - 1)];
  while (r && r->id != id)
    r = r->next_in_bucket;
  return r;
}

static void table_insert(struct rp_conn *c, struct rp_request *r)
{
  struct rp_request **b = &c->buckets[r->id & (NBUCKETS - 1)];
  r->next_in_bucket = *b;
  *b = r;
  c->in_flight++;
}

static void table_remove(struct rp_conn *c, struct rp_request *r)
{
  struct rp_request **p = &c->buckets[r->id & (NBUCKETS - 1)];
  while (*p && *p != r)
    p = &(*p)->next_in_bucket;
  if (*p) {
    *p = r->next_in_bucket;
    r->next_in_bucket = NULL;
    c->in_flight--;
  }
}

/* ---- failure and completion ---- */

static void complete(struct rp_request *r, uint16_t status)
{
  r->status = status;
  r->done(r);
}

static void stop_watchers(struct rp_conn *c)
{
  if (!c->loop)
    return;
  ev_io_stop(c->loop, &c->rio);
  ev_io_stop(c->loop, &c->wio);
  ev_timer_stop(c->loop, &c->tick);
}

static bool zc_pending(const struct rp_conn *c)
{
  return c->zc_sent != c->zc_completed;
}

/* Takes every request out of the table and the queue, closes the socket, and completes
 * them: `timed_out` (if any) with RP_ERR_TIMEOUT, the rest with RP_ERR_DISCONNECTED. */
static void fail_all(struct rp_conn *c, struct rp_request *timed_out, const char *what)
{
  c->connected = false;
  stop_watchers(c);
  if (c->fd >= 0) {
    /* A plain close would let the kernel go on sending (and retransmitting) what is
     * queued from the requests' own memory after they complete below and their buffers
     * are reused: authenticated, so the server would drop it, but not encrypted when
     * sealing is off. Reset the connection instead, which drops the queue; the server
     * treats it as any dropped connection and keeps the session for a resume. */
    if (zc_pending(c)) {
      struct linger reset = { .l_onoff = 1, .l_linger = 0 };
      (void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    }
    close(c->fd);
    c->fd = -1;
  }
  struct rp_request *list = NULL;
  for (size_t i = 0; i < NBUCKETS; i++) {
    struct rp_request *r = c->buckets[i];
    while (r) {
      struct rp_request *next = r->next_in_bucket;
      r->next_in_bucket = list;
      list = r;
      r = next;
    }
    c->buckets[i] = NULL;
  }
  c->in_flight = 0;
  c->q_head = c->q_tail = NULL;

  if (timed_out) {
    rp_msgf(timed_out->error_message, sizeof timed_out->error_message,
            "%s to %s got no reply within %u ms", rp_op_name(timed_out->op), c->peer,
            c->request_timeout_ms);
    complete(timed_out, RP_ERR_TIMEOUT);
  }
  while (list) {
    struct rp_request *r = list;
    list = r->next_in_bucket;
    r->next_in_bucket = NULL;
    r->next_queued = NULL;
    rp_msgf(r->error_message, sizeof r->error_message, "connection to %s lost: %s", c->peer,
            what);
    complete(r, RP_ERR_DISCONNECTED);
  }
}

/* The connection is unusable: record why, fail everything, tell the owner once. */
static void conn_fail(struct rp_conn *c, uint16_t code, struct rp_request *timed_out,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void conn_fail(struct rp_conn *c, uint16_t code, struct rp_request *timed_out,
                      const char *fmt, ...)
{
  if (!c->connected)
    return;
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  rp_error_set(&c->why, code, "connection to %s failed: %s: %s", c->peer, what,
               rp_status_advice(code));
  fail_all(c, timed_out, what);
  if (!c->disconnect_reported && !c->close_pending) {
    c->disconnect_reported = true;
    if (c->on_disconnect)
      c->on_disconnect(c, &c->why, c->cb_user);
  }
}

/* ---- scratch buffers ----
 *
 * A burst of replies (a whole batch of pages) needs a big buffer only for the moment it
 * is read and parsed, and a handshake needs one only while it runs; neither needs one
 * per connection. The process keeps SCRATCH_BUFFERS of them, made with the first pool
 * and freed with the last, so that pooled connections still allocate nothing. A reader
 * that finds none free reads into its connection's own small buffer instead (more
 * reads, same result); a handshake that finds none free takes heap memory for its
 * duration. */
static struct {
  pthread_mutex_t lock; /* pools made and freed */
  unsigned pools;       /* alive: the buffers exist while any pool does */
  uint8_t *buf[SCRATCH_BUFFERS];
  _Atomic bool taken[SCRATCH_BUFFERS];
} scratch = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int scratch_ref(void)
{
  int rc = 0;
  pthread_mutex_lock(&scratch.lock);
  if (scratch.pools == 0) {
    for (unsigned i = 0; i < SCRATCH_BUFFERS && rc == 0; i++) {
      scratch.buf[i] = malloc(SCRATCH_SIZE);
      rc = scratch.buf[i] ? 0 : -1;
    }
    if (rc < 0)
      for (unsigned i = 0; i < SCRATCH_BUFFERS; i++) {
        free(scratch.buf[i]);
        scratch.buf[i] = NULL;
      }
  }
  if (rc == 0)
    scratch.pools++;
  pthread_mutex_unlock(&scratch.lock);
  return rc;
}

static void scratch_unref(void)
{
  pthread_mutex_lock(&scratch.lock);
  if (--scratch.pools == 0)
    for (unsigned i = 0; i < SCRATCH_BUFFERS; i++) {
      free(scratch.buf[i]);
      scratch.buf[i] = NULL;
    }
  pthread_mutex_unlock(&scratch.lock);
}

/* Only for a pooled connection: its pool keeps the buffers alive. -1: none free. */
static int scratch_take(void)
{
  for (unsigned i = 0; i < SCRATCH_BUFFERS; i++) {
    bool expected = false;
    if (atomic_compare_exchange_strong(&scratch.taken[i], &expected, true))
      return (int)i;
  }
  return -1;
}

static void scratch_give_back(int i)
{
  atomic_store(&scratch.taken[i], false);
}

void rp_conn_scratch_hold(bool hold)
{
  for (unsigned i = 0; i < SCRATCH_BUFFERS; i++)
    atomic_store(&scratch.taken[i], hold);
}

/* Makes c's own receive buffer at least `need` bytes: only for a control frame larger
 * than a pooled connection's buffer, which the data path never sends. 0, or -1. */
static int rbuf_grow(struct rp_conn *c, size_t need)
{
  if (need <= c->rbuf_size)
    return 0;
  if (need < CLIENT_MAX_FRAME)
    need = CLIENT_MAX_FRAME;
  uint8_t *bigger = realloc(c->rbuf, need);
  if (!bigger)
    return -1;
  c->rbuf = bigger;
  c->rbuf_size = need;
  return 0;
}

/* A connection's memory, ready for a connection: from the pool when it has a free entry,
 * else from the heap with a receive buffer of rbuf_size. */
static struct rp_conn *conn_take(struct rp_conn_pool *pool, size_t rbuf_size)
{
  if (pool) {
    for (unsigned i = 0; i < pool->n; i++) {
      bool expected = false;
      if (atomic_compare_exchange_strong(&pool->entries[i].taken, &expected, true))
        return pool->entries[i].conn;
    }
  }
  struct rp_conn *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->buckets = calloc(NBUCKETS, sizeof *c->buckets);
  c->rbuf = malloc(rbuf_size);
  c->rbuf_size = rbuf_size;
  if (!c->buckets || !c->rbuf) {
    free(c->buckets);
    free(c->rbuf);
    free(c);
    return NULL;
  }
  return c;
}

/* Back to the pool (its buffers and cipher contexts kept, the keys overwritten), or
 * freed if it came from the heap. */
static void conn_give_back(struct rp_conn *c)
{
  struct rp_conn_pool *pool = c->pool;
  if (pool) {
    for (unsigned i = 0; i < pool->n; i++)
      if (pool->entries[i].conn == c) {
        rp_frame_auth_forget(&c->tx);
        rp_frame_auth_forget(&c->rx);
        atomic_store(&pool->entries[i].taken, false);
        return;
      }
  }
  rp_frame_auth_free(&c->tx);
  rp_frame_auth_free(&c->rx);
  free(c->buckets);
  free(c->rbuf);
  free(c);
}

/* Every field as a new connection has it, keeping the memory it owns. */
static void conn_reset(struct rp_conn *c, struct rp_conn_pool *pool)
{
  struct rp_request **buckets = c->buckets;
  uint8_t *rbuf = c->rbuf;
  size_t rbuf_size = c->rbuf_size;
  struct rp_frame_auth tx = c->tx, rx = c->rx;
  memset(c, 0, sizeof *c);
  memset(buckets, 0, NBUCKETS * sizeof *buckets);
  c->buckets = buckets;
  c->rbuf = rbuf;
  c->rbuf_size = rbuf_size;
  c->tx = tx;
  c->rx = rx;
  c->pool = pool;
  c->fd = -1;
}

static void conn_destroy(struct rp_conn *c)
{
  c->depth++; /* a nested rp_conn_close from a callback must not free twice */
  if (c->connected)
    fail_all(c, NULL, "the connection was closed by its owner");
  stop_watchers(c);
  if (c->fd >= 0)
    close(c->fd);
  if (c->private_loop)
    ev_loop_destroy(c->private_loop);
  conn_give_back(c);
}

struct rp_conn_pool *rp_conn_pool_new(unsigned n)
{
  struct rp_conn_pool *pool = calloc(1, sizeof *pool + n * sizeof pool->entries[0]);
  if (!pool)
    return NULL;
  if (scratch_ref() < 0) {
    free(pool);
    return NULL;
  }
  for (unsigned i = 0; i < n; i++) {
    struct rp_conn *c = conn_take(NULL, POOLED_RBUF_SIZE);
    if (c && (rp_frame_auth_prepare(&c->tx) < 0 || rp_frame_auth_prepare(&c->rx) < 0)) {
      conn_give_back(c);
      c = NULL;
    }
    if (!c) {
      rp_conn_pool_free(pool);
      return NULL;
    }
    c->pool = pool;
    pool->entries[i].conn = c;
    pool->n = i + 1;
  }
  return pool;
}

size_t rp_conn_pool_bytes(const struct rp_conn_pool *pool)
{
  if (!pool)
    return 0;
  return sizeof *pool +
         pool->n * (sizeof pool->entries[0] + sizeof(struct rp_conn) +
                    NBUCKETS * sizeof(struct rp_request *) + POOLED_RBUF_SIZE) +
         (size_t)SCRATCH_BUFFERS * SCRATCH_SIZE;
}

void rp_conn_pool_free(struct rp_conn_pool *pool)
{
  if (!pool)
    return;
  for (unsigned i = 0; i < pool->n; i++) {
    struct rp_conn *c = pool->entries[i].conn;
    c->pool = NULL; /* so conn_give_back frees it */
    conn_give_back(c);
  }
  free(pool);
  scratch_unref();
}

/* Every libev callback brackets its work with enter/leave, so that rp_conn_close
 * called from a request's done callback is deferred until we no longer touch c. */
static void enter(struct rp_conn *c)
{
  c->depth++;
}

static void leave(struct rp_conn *c)
{
  if (--c->depth == 0 && c->close_pending)
    conn_destroy(c);
}

/* ---- writing ---- */

/* Zero-copy sends. On a TCP connection every sendmsg carries MSG_ZEROCOPY: the kernel
 * builds its packets from the requests' own memory (header, page, tag) instead of
 * copying them into page fragments of its own (sk_page_frag_refill). A pager needs
 * that: inside the memory shortage it relieves, a copying send waits for a fresh page
 * below the min watermark, in reclaim the I/O thread cannot do (as an IO_FLUSHER it
 * may not swap), while the swap-out it would finish is what reclaim waits for. A
 * zero-copy send only pins pages that are locked already and needs no more than
 * skb heads, which come back as sends complete. Where the kernel copies after all
 * (loopback, a device without scatter-gather) the completion says so, and the
 * connection stops asking: there zero-copy only adds work (docs/performance.md, "Figures
 * from the code": about twice the engine's CPU per read on loopback).
 *
 * The kernel reads that memory until the server has acknowledged it, so a request's
 * header, tag and page stay as they are until its reply (client.h). A buffer changed
 * earlier (only possible after a connection failed: its requests complete while their
 * bytes may still be queued on the closed socket, and the caller may reuse them)
 * reaches the server with a tag that fails, and the server drops that connection
 * instead of storing the frame; the caller's resumed session replays its writes.
 *
 * The kernel reports which sends it is done with on the socket's error queue, and they
 * must be read: they hold the socket's option memory, and once that is full a zero-copy
 * send fails with ENOBUFS. A non-empty error queue makes the socket readable (POLLERR),
 * so the read watcher drains it, into a buffer on the stack. */

/* Copied completions in a row after which a connection stops asking for zero-copy. */
enum { ZC_COPIED_RUN_LIMIT = 64 };

static void zc_drain(struct rp_conn *c)
{
  while (c->fd >= 0) {
    union {
      char buf[CMSG_SPACE(sizeof(struct sock_extended_err) + sizeof(struct sockaddr_in6))];
      struct cmsghdr align;
    } ctl;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    if (recvmsg(c->fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
      if (errno == EINTR)
        continue;
      return; /* EAGAIN: the queue is empty */
    }
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
      if (!((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
            (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)) ||
          cm->cmsg_len < CMSG_LEN(sizeof(struct sock_extended_err)))
        continue;
      struct sock_extended_err ee;
      memcpy(&ee, CMSG_DATA(cm), sizeof ee);
      if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY || ee.ee_errno != 0)
        continue;
      /* Sends ee_info..ee_data (inclusive, counting from 0, wrapping) are done. */
      c->zc_completed += ee.ee_data - ee.ee_info + 1;
      c->zc_wait = false;
      /* Loopback copies every send, for good: stop asking. A packet socket (tcpdump)
       * or a checksum fallback makes the kernel copy some sends of a connection that
       * is zero-copy otherwise; one such report must not take the protection away for
       * the connection's life, so only a long unbroken run of them does. */
      if (!(ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED)) {
        c->zc_copied_run = 0;
      } else if (c->zerocopy && ++c->zc_copied_run >= ZC_COPIED_RUN_LIMIT) {
        c->zerocopy = false;
        rp_log(RP_LOG_DEBUG,
               "%s: the kernel copied the last %u sends on this connection "
               "(loopback, or no scatter-gather on the way): plain sends from now on",
               c->peer, c->zc_copied_run);
      }
    }
  }
}

/* Adds what is left to send of one part of a frame, `*off` bytes of the frame being
 * sent already; *off becomes what is already sent of the parts after it. */
static void add_unsent(struct iovec *iov, int *niov, uint8_t *part, uint32_t len,
                       uint32_t *off)
{
  if (*off >= len) {
    *off -= len;
    return;
  }
  iov[*niov].iov_base = part + *off;
  iov[*niov].iov_len = len - *off;
  (*niov)++;
  *off = 0;
}

static void flush_queue(struct rp_conn *c)
{
  bool copy = false; /* this batch without MSG_ZEROCOPY (see ENOBUFS below) */
  if (c->zc_wait) {
    /* The kernel holds too many zero-copy sends of ours: the read watcher resumes the
     * queue once it has drained completions. */
    if (c->loop && ev_is_active(&c->wio))
      ev_io_stop(c->loop, &c->wio);
    return;
  }
  while (c->connected && c->q_head) {
    struct iovec iov[3 * MAX_BATCH];
    int niov = 0;
    unsigned k = 0;
    for (struct rp_request *r = c->q_head; r && k < MAX_BATCH; r = r->next_queued, k++) {
      uint32_t off = r->sent_bytes;
      uint32_t plen = payload_len(r);
      if (!r->tagged) {
        struct rp_header h = rp_request_header((enum rp_op)r->op, r->id);
        h.length = plen;
        if (r->op == RP_OP_WRITE || r->op == RP_OP_READ || r->op == RP_OP_FREE)
          h.slot = r->slot;
        if (r->op == RP_OP_FREE)
          h.count = r->count;
        rp_header_encode(&h, r->header);
        if (rp_frame_tag(&c->tx, r->header, r->page, plen, r->tag) < 0) {
          conn_fail(c, RP_ERR_INTERNAL, NULL,
                    "cannot compute a frame's authentication "
                    "tag (libcrypto failed)");
          return;
        }
        r->tagged = true;
      }
      add_unsent(iov, &niov, r->header, RP_HEADER_SIZE, &off);
      add_unsent(iov, &niov, r->page, plen, &off);
      iov[niov].iov_base = r->tag + off;
      iov[niov].iov_len = RP_TAG_LEN - off;
      niov++;
    }
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)niov;
    int flags = MSG_NOSIGNAL | MSG_DONTWAIT;
    if (c->zerocopy && !copy)
      flags |= MSG_ZEROCOPY;
    /* Stamped before the send: over loopback the server may read and answer the
     * frame before sendmsg returns here. */
    rp_hop(RP_HOP_WIRE_OUT);
    ssize_t n = sendmsg(c->fd, &msg, flags);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!ev_is_active(&c->wio))
          ev_io_start(c->loop, &c->wio);
        c->loop_changes++; /* the loop must now wait for the socket to drain */
        return;
      }
      if (errno == ENOBUFS && (flags & MSG_ZEROCOPY)) {
        /* No option memory for one more zero-copy send: read the completions waiting,
         * and if sends of ours are still out, let their completions (the read
         * watcher) resume the queue. With none out, this batch is copied. */
        zc_drain(c);
        if (zc_pending(c)) {
          c->zc_wait = true;
          if (ev_is_active(&c->wio))
            ev_io_stop(c->loop, &c->wio);
          return;
        }
        copy = true;
        continue;
      }
      conn_fail(c, RP_ERR_DISCONNECTED, NULL, "cannot send: %s", strerror(errno));
      return;
    }
    if (flags & MSG_ZEROCOPY)
      c->zc_sent++;
    copy = false;
    size_t left = (size_t)n;
    while (left > 0 && c->q_head) {
      struct rp_request *r = c->q_head;
      size_t rest = frame_len(r) - r->sent_bytes;
      if (left >= rest) {
        left -= rest;
        r->sent_bytes = frame_len(r);
        FIFO_POP(c->q_head, c->q_tail, r, next_queued);
      } else {
        r->sent_bytes += (uint32_t)left;
        left = 0;
      }
    }
  }
  if (c->loop && ev_is_active(&c->wio))
    ev_io_stop(c->loop, &c->wio);
}

static void on_writable(struct ev_loop *loop, ev_io *w, int revents)
{
  struct rp_conn *c = w->data;
  enter(c);
  flush_queue(c);
  leave(c);
}

void rp_conn_flush(struct rp_conn *c)
{
  if (!c->connected || c->close_pending || !c->q_head)
    return;
  enter(c);
  flush_queue(c);
  leave(c);
}

/* ---- reading ---- */

static void handle_push(struct rp_conn *c, const struct rp_header *h, const uint8_t *payload)
{
  if (h->op != RP_OP_ADVISE || h->status != RP_OK) {
    conn_fail(c, RP_ERR_BAD_FRAME, NULL, "server pushed a %s frame (status %u) with id 0",
              rp_op_name(h->op), h->status);
    return;
  }
  Rampart__Advise *a = rampart__advise__unpack(NULL, h->length, payload);
  if (!a) {
    conn_fail(c, RP_ERR_BAD_FRAME, NULL, "server sent an ADVISE that does not decode");
    return;
  }
  if (c->on_advise)
    c->on_advise(c, a->pressure, a->reason ? a->reason : "", a->free_pages, c->cb_user);
  rampart__advise__free_unpacked(a, NULL);
}

static void handle_frame(struct rp_conn *c, const struct rp_header *h, const uint8_t *payload)
{
  if (h->id == 0) {
    handle_push(c, h, payload);
    return;
  }
  struct rp_request *r = table_find(c, h->id);
  if (!r) {
    conn_fail(c, RP_ERR_BAD_FRAME, NULL,
              "server answered request id %" PRIu64 " which is not in flight", h->id);
    return;
  }
  if (r->op != h->op) {
    conn_fail(c, RP_ERR_BAD_FRAME, NULL,
              "server answered %s request id %" PRIu64 " with a %s reply", rp_op_name(r->op),
              h->id, rp_op_name(h->op));
    return;
  }
  if (r->sent_bytes != frame_len(r)) {
    conn_fail(c, RP_ERR_BAD_FRAME, NULL,
              "server answered request id %" PRIu64 " before it was sent", h->id);
    return;
  }
  table_remove(c, r);
  rp_hop(RP_HOP_ENGINE_REPLY);
  if (h->status != RP_OK) {
    client_copy_server_message(r->error_message, sizeof r->error_message, payload, h->length,
                               h->status);
    if (is_control_op(r->op))
      ((struct ctl_request *)r)->reply_len = 0;
    complete(r, h->status);
    return;
  }
  if (r->op == RP_OP_READ) {
    /* rp_header_decode guarantees exactly RP_PAGE_SIZE bytes on a successful READ. */
    memcpy(r->page, payload, RP_PAGE_SIZE);
  } else if (is_control_op(r->op)) {
    struct ctl_request *ctl = (struct ctl_request *)r;
    ctl->reply = malloc(h->length ? h->length : 1);
    if (!ctl->reply) {
      rp_msgf(r->error_message, sizeof r->error_message, "out of memory for a reply");
      complete(r, RP_ERR_INTERNAL);
      return;
    }
    memcpy(ctl->reply, payload, h->length);
    ctl->reply_len = h->length;
  }
  complete(r, RP_OK);
}

static void parse_frames(struct rp_conn *c)
{
  while (c->connected && !c->close_pending && c->rend - c->rstart >= RP_HEADER_SIZE) {
    struct rp_header h;
    const char *why = NULL;
    enum rp_status st = rp_header_decode(c->rbuf + c->rstart, RP_FROM_SERVER, &h, &why);
    if (st != RP_OK) {
      conn_fail(c, RP_ERR_BAD_FRAME, NULL, "bad frame from server: %s", why ? why : "?");
      return;
    }
    /* decode bounded length to RP_MAX_CONTROL_PAYLOAD, so this cannot overflow and the
     * frame fits in the buffer once compacted. */
    size_t total = (size_t)RP_HEADER_SIZE + h.length + RP_TAG_LEN;
    if (c->rend - c->rstart < total)
      return;
    const uint8_t *frame = c->rbuf + c->rstart;
    const uint8_t *payload = frame + RP_HEADER_SIZE;
    if (!rp_frame_verify(&c->rx, frame, payload, h.length, payload + h.length)) {
      rp_log(RP_LOG_WARN,
             "%s: a %s frame (id %" PRIu64 ") from the server failed its "
             "authentication tag; dropping the connection",
             c->peer, rp_op_name(h.op), h.id);
      conn_fail(c, RP_ERR_BAD_FRAME, NULL,
                "a %s frame from the server failed its "
                "authentication tag (altered, injected or replayed on the way)",
                rp_op_name(h.op));
      return;
    }
    c->rstart += total;
    handle_frame(c, &h, payload);
  }
  if (c->rstart == c->rend)
    c->rstart = c->rend = 0;
}

/* A pooled connection reads its burst into a scratch buffer, its unparsed bytes moved
 * there first: for the time of one callback, c->rbuf is the scratch buffer. -1 when it
 * reads into its own buffer. */
static int read_in_scratch(struct rp_conn *c, uint8_t **own, size_t *own_size)
{
  if (!c->pool)
    return -1;
  int k = scratch_take();
  if (k < 0)
    return -1;
  *own = c->rbuf;
  *own_size = c->rbuf_size;
  size_t unparsed = c->rend - c->rstart;
  memcpy(scratch.buf[k], c->rbuf + c->rstart, unparsed);
  c->rbuf = scratch.buf[k];
  c->rbuf_size = SCRATCH_SIZE;
  c->rstart = 0;
  c->rend = unparsed;
  return k;
}

/* Back to the connection's own buffer with what is left unparsed: at most one frame,
 * part received. */
static void read_in_own(struct rp_conn *c, int k, uint8_t *own, size_t own_size)
{
  uint8_t *from = c->rbuf + c->rstart;
  size_t unparsed = c->connected && !c->close_pending ? c->rend - c->rstart : 0;
  c->rbuf = own;
  c->rbuf_size = own_size;
  c->rstart = c->rend = 0;
  if (unparsed > 0 && rbuf_grow(c, unparsed) < 0) {
    scratch_give_back(k);
    conn_fail(c, RP_ERR_INTERNAL, NULL,
              "out of memory for a %zu-byte frame from the "
              "server",
              unparsed);
    return;
  }
  memcpy(c->rbuf, from, unparsed);
  c->rend = unparsed;
  scratch_give_back(k);
}

static void on_readable(struct ev_loop *loop, ev_io *w, int revents)
{
  struct rp_conn *c = w->data;
  enter(c);
  if (zc_pending(c))
    zc_drain(c);
  uint8_t *own = NULL;
  size_t own_size = 0;
  int k = read_in_scratch(c, &own, &own_size);
  for (int round = 0; round < 8 && c->connected && !c->close_pending; round++) {
    if (c->rstart > 0 && c->rbuf_size - c->rend < CLIENT_MAX_FRAME) {
      memmove(c->rbuf, c->rbuf + c->rstart, c->rend - c->rstart);
      c->rend -= c->rstart;
      c->rstart = 0;
    }
    /* Full with one frame not yet whole: only a connection's own buffer grows (a
     * scratch buffer holds any frame once compacted, and is not the connection's). */
    if (c->rend == c->rbuf_size && (k >= 0 || rbuf_grow(c, c->rbuf_size + 1) < 0)) {
      conn_fail(c, RP_ERR_INTERNAL, NULL,
                "no room for a frame larger than %zu bytes "
                "from the server",
                c->rbuf_size);
      break;
    }
    size_t space = c->rbuf_size - c->rend;
    ssize_t n = read(c->fd, c->rbuf + c->rend, space);
    if (n == 0) {
      conn_fail(c, RP_ERR_DISCONNECTED, NULL, "the server closed the connection");
      break;
    }
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        conn_fail(c, RP_ERR_DISCONNECTED, NULL, "cannot receive: %s", strerror(errno));
      else if (round == 0 && c->zc_sent)
        zc_drain(c); /* woken with nothing to read: the error queue, to be sure */
      break;
    }
    c->rend += (size_t)n;
    parse_frames(c);
    if ((size_t)n < space)
      break; /* the socket is drained */
  }
  if (k >= 0)
    read_in_own(c, k, own, own_size);
  /* Completions usually submit the next requests: send them now, in one sendmsg, rather
   * than after another trip through the loop. */
  if (c->connected && !c->close_pending && c->q_head)
    flush_queue(c);
  leave(c);
}

/* ---- request timeouts ---- */

static double tick_interval(const struct rp_conn *c)
{
  double s = c->request_timeout_ms / 4000.0;
  if (s < 0.01)
    s = 0.01;
  if (s > 0.5)
    s = 0.5;
  return s;
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
  struct rp_conn *c = w->data;
  enter(c);
  while (c->oldest_id < c->next_id && !table_find(c, c->oldest_id))
    c->oldest_id++;
  if (c->in_flight == 0) {
    ev_timer_stop(loop, w);
  } else {
    struct rp_request *r = table_find(c, c->oldest_id);
    if (r && r->deadline_ns <= rp_now_ns()) {
      table_remove(c, r);
      conn_fail(c, RP_ERR_TIMEOUT, r, "%s request got no reply within %u ms",
                rp_op_name(r->op), c->request_timeout_ms);
    }
  }
  leave(c);
}

/* ---- submitting ---- */

static bool attach_private(struct rp_conn *c)
{
  if (c->loop)
    return true;
  c->private_loop = ev_loop_new(EVFLAG_AUTO);
  if (!c->private_loop)
    return false;
  rp_conn_attach(c, c->private_loop);
  return true;
}

static void submit_any(struct rp_conn *c, struct rp_request *r)
{
  r->status = RP_OK;
  r->error_message[0] = '\0';
  r->next_in_bucket = NULL;
  r->next_queued = NULL;
  r->sent_bytes = 0;
  r->tagged = false;
  r->id = 0;
  if (!c->connected || c->close_pending) {
    rp_msgf(r->error_message, sizeof r->error_message, "connection to %s is closed", c->peer);
    complete(r, RP_ERR_DISCONNECTED);
    return;
  }
  if (!c->loop && !attach_private(c)) {
    rp_msgf(r->error_message, sizeof r->error_message, "cannot create an event loop");
    complete(r, RP_ERR_INTERNAL);
    return;
  }
  r->id = c->next_id++;
  r->deadline_ns = rp_now_ns() + (uint64_t)c->request_timeout_ms * 1000000u;
  table_insert(c, r);
  FIFO_APPEND(c->q_head, c->q_tail, r, next_queued);
  if (!ev_is_active(&c->wio))
    ev_io_start(c->loop, &c->wio);
  if (!ev_is_active(&c->tick)) {
    ev_timer_set(&c->tick, tick_interval(c), tick_interval(c));
    ev_timer_start(c->loop, &c->tick);
    c->loop_changes++;
  }
}

unsigned rp_conn_loop_changes(const struct rp_conn *c)
{
  return c->loop_changes;
}

void rp_conn_submit(struct rp_conn *conn, struct rp_request *req)
{
  const char *bad = NULL;
  switch (req->op) {
  case RP_OP_WRITE:
  case RP_OP_READ:
    if (!req->page)
      bad = "no page buffer";
    else if (req->slot > RP_MAX_SLOT)
      bad = "slot past 2^48";
    break;
  case RP_OP_FREE:
    if (req->slot > RP_MAX_SLOT)
      bad = "slot past 2^48";
    else if (req->count == 0 || req->count > RP_MAX_FREE_COUNT)
      bad = "FREE count is 0 or past RP_MAX_FREE_COUNT";
    else if (req->slot + req->count - 1 > RP_MAX_SLOT)
      bad = "FREE range past 2^48";
    break;
  case RP_OP_PING:
    break;
  default:
    bad = "op is not WRITE, READ, FREE or PING";
  }
  if (bad) {
    req->next_in_bucket = req->next_queued = NULL;
    req->sent_bytes = 0;
    rp_msgf(req->error_message, sizeof req->error_message, "invalid request: %s", bad);
    complete(req, RP_ERR_BAD_FRAME);
    return;
  }
  submit_any(conn, req);
}

struct ev_loop *rp_conn_loop(struct rp_conn *conn)
{
  if (!conn->loop && !attach_private(conn))
    return NULL;
  return conn->loop;
}

size_t rp_conn_in_flight(const struct rp_conn *conn)
{
  return conn->in_flight;
}

void rp_conn_attach(struct rp_conn *conn, struct ev_loop *loop)
{
  if (conn->loop == loop)
    return;
  stop_watchers(conn);
  conn->loop = loop;
  if (conn->connected) {
    ev_io_start(loop, &conn->rio);
    if (conn->q_head)
      ev_io_start(loop, &conn->wio);
    if (conn->in_flight) {
      ev_timer_set(&conn->tick, tick_interval(conn), tick_interval(conn));
      ev_timer_start(loop, &conn->tick);
    }
  }
}

void rp_conn_lend_reading(struct rp_conn *conn, bool lend)
{
  if (conn->reading_lent == lend)
    return;
  conn->reading_lent = lend;
  if (!conn->loop || !conn->connected)
    return;
  if (lend) {
    ev_io_stop(conn->loop, &conn->rio);
  } else {
    ev_io_start(conn->loop, &conn->rio);
    conn->loop_changes++;
  }
}

bool rp_conn_reading_lent(const struct rp_conn *conn)
{
  return conn->reading_lent;
}

int rp_conn_fd(const struct rp_conn *conn)
{
  return conn->connected && !conn->close_pending ? conn->fd : -1;
}

void rp_conn_read_now(struct rp_conn *conn)
{
  if (conn->connected && !conn->close_pending && conn->loop)
    on_readable(conn->loop, &conn->rio, EV_READ);
}

void rp_conn_set_callbacks(struct rp_conn *conn, rp_advise_fn on_advise,
                           rp_disconnect_fn on_disconnect, void *user)
{
  conn->on_advise = on_advise;
  conn->on_disconnect = on_disconnect;
  conn->cb_user = user;
}

bool rp_conn_is_connected(const struct rp_conn *conn)
{
  return conn->connected;
}

const char *rp_conn_peer(const struct rp_conn *conn)
{
  return conn->peer;
}

int rp_conn_peer_address(const struct rp_conn *conn, struct sockaddr_storage *addr,
                         socklen_t *addr_len)
{
  *addr_len = sizeof *addr;
  if (conn->fd < 0 || getpeername(conn->fd, (struct sockaddr *)addr, addr_len) < 0) {
    *addr_len = 0;
    return -1;
  }
  return 0;
}

void rp_conn_close(struct rp_conn *conn)
{
  if (!conn)
    return;
  if (conn->depth > 0) {
    /* Inside one of our callbacks: fail what is in flight now, free on the way out. */
    conn->close_pending = true;
    if (conn->connected)
      fail_all(conn, NULL, "the connection was closed by its owner");
    return;
  }
  conn_destroy(conn);
}

struct rp_conn *rp_conn_open(const struct rp_conn_options *opts, struct rp_session_info *info,
                             struct rp_error *err)
{
  struct rp_error local;
  if (!err)
    err = &local;
  memset(err, 0, sizeof *err);
  if (!opts || !opts->host || !opts->port) {
    rp_error_set(err, RP_ERR_CONNECT, "no server address given: pass HOST:PORT");
    return NULL;
  }
  struct rp_conn *c = conn_take(opts->pool, RBUF_SIZE);
  if (!c) {
    rp_error_set(err, RP_ERR_INTERNAL, "out of memory");
    return NULL;
  }
  conn_reset(c, c->pool);
  if (strchr(opts->host, ':'))
    rp_msgf(c->peer, sizeof c->peer, "[%s]:%s", opts->host, opts->port);
  else
    rp_msgf(c->peer, sizeof c->peer, "%s:%s", opts->host, opts->port);
  c->request_timeout_ms = opts->request_timeout_ms ? opts->request_timeout_ms
                                                   : DEFAULT_REQUEST_TIMEOUT_MS;
  c->next_id = 1;
  c->oldest_id = 1;
  if (opts->key && opts->key->len > RP_KEY_MAX_LEN) {
    rp_error_set(err, RP_ERR_AUTH, "key longer than %u bytes", RP_KEY_MAX_LEN);
    conn_destroy(c);
    return NULL;
  }

  uint32_t cto = opts->connect_timeout_ms ? opts->connect_timeout_ms
                                          : DEFAULT_CONNECT_TIMEOUT_MS;
  /* A pooled connection's own buffer is too small for the handshake: it runs in a
   * scratch buffer. */
  int k = c->rbuf_size < CLIENT_HANDSHAKE_BUF && c->pool ? scratch_take() : -1;
  uint8_t *heap = NULL;
  uint8_t *hs_buf = k >= 0 ? scratch.buf[k] : c->rbuf;
  if (k < 0 && c->rbuf_size < CLIENT_HANDSHAKE_BUF) {
    hs_buf = heap = malloc(CLIENT_HANDSHAKE_BUF);
    if (!heap) {
      rp_error_set(err, RP_ERR_INTERNAL, "out of memory for a handshake with %s", c->peer);
      conn_destroy(c);
      return NULL;
    }
  }
  uint32_t handshake_zc_sends = 0;
  int rc = client_connect(opts, c->peer, cto, hs_buf, CLIENT_HANDSHAKE_BUF, &c->tx, &c->rx,
                          &c->fd, &handshake_zc_sends, info, err);
  if (k >= 0)
    scratch_give_back(k);
  free(heap);
  if (rc < 0) {
    conn_destroy(c);
    return NULL;
  }
  c->connected = true;
  int one = 1;
  c->zerocopy = setsockopt(c->fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) == 0;
  c->zc_sent = handshake_zc_sends; /* their completions are counted like the rest */
  ev_io_init(&c->rio, on_readable, c->fd, EV_READ);
  ev_io_init(&c->wio, on_writable, c->fd, EV_WRITE);
  ev_timer_init(&c->tick, on_tick, 0.1, 0.1);
  c->rio.data = c->wio.data = c->tick.data = c;
  return c;
}

/* ---- blocking helpers ---- */

static void ctl_done(struct rp_request *r)
{
  ((struct ctl_request *)r)->finished = true;
}

/* Submits ctl and runs the loop until it completes. 0, or -1 with err filled. */
static int run_sync(struct rp_conn *c, struct ctl_request *ctl, const char *what,
                    struct rp_error *err)
{
  /* c may be freed by the time the request completes (an owner's callback closing it),
   * so everything needed afterwards is copied first. */
  char peer[sizeof c->peer];
  memcpy(peer, c->peer, sizeof peer);
  ctl->req.done = ctl_done;
  ctl->finished = false;
  ctl->reply = NULL;
  ctl->reply_len = 0;
  rp_conn_lend_reading(c, false); /* the loop below must see the reply */
  submit_any(c, &ctl->req);
  while (!ctl->finished)
    ev_run(c->loop, EVRUN_ONCE);
  if (ctl->req.status == RP_OK)
    return 0;
  free(ctl->reply);
  ctl->reply = NULL;
  const char *said = ctl->req.error_message[0] ? ctl->req.error_message
                                               : rp_status_name(ctl->req.status);
  rp_error_set(err, ctl->req.status, "%s on %s failed: %s%s%s", what, peer, said,
               client_advice_sep(said, ctl->req.status),
               client_advice_text(said, ctl->req.status));
  return -1;
}

static void ctl_init(struct ctl_request *ctl, uint8_t op)
{
  memset(ctl, 0, sizeof *ctl);
  ctl->req.op = op;
}

static int reply_malformed(struct rp_conn *c, struct ctl_request *ctl, const char *what,
                           struct rp_error *err)
{
  free(ctl->reply);
  ctl->reply = NULL;
  rp_error_set(err, RP_ERR_BAD_FRAME, "%s on %s: the reply does not decode: %s", what,
               c->peer, rp_status_advice(RP_ERR_BAD_FRAME));
  return -1;
}

int rp_reserve_sync(struct rp_conn *conn, uint64_t pages, uint64_t *reserved_pages,
                    uint64_t *free_pages, struct rp_error *err)
{
  struct ctl_request ctl;
  ctl_init(&ctl, RP_OP_RESERVE);
  Rampart__Reserve msg = RAMPART__RESERVE__INIT;
  msg.pages = pages;
  size_t n = protobuf_c_message_get_packed_size(&msg.base);
  if (n > sizeof ctl.out) {
    rp_error_set(err, RP_ERR_INTERNAL, "Reserve message too large");
    return -1;
  }
  protobuf_c_message_pack(&msg.base, ctl.out);
  ctl.req.page = ctl.out;
  ctl.req.count = (uint32_t)n;
  char what[64];
  rp_msgf(what, sizeof what, "RESERVE of %" PRIu64 " pages", pages);
  if (run_sync(conn, &ctl, what, err) < 0)
    return -1;
  Rampart__ReserveReply *r = rampart__reserve_reply__unpack(NULL, ctl.reply_len, ctl.reply);
  if (!r)
    return reply_malformed(conn, &ctl, what, err);
  if (reserved_pages)
    *reserved_pages = r->reserved_pages;
  if (free_pages)
    *free_pages = r->free_pages;
  rampart__reserve_reply__free_unpacked(r, NULL);
  free(ctl.reply);
  return 0;
}

static int hot_sync(struct rp_conn *conn, uint8_t op, uint64_t slot, uint32_t count,
                    uint8_t *page, struct rp_error *err)
{
  struct ctl_request ctl;
  ctl_init(&ctl, op);
  ctl.req.slot = slot;
  ctl.req.count = count;
  ctl.req.page = page;
  char what[64];
  if (op == RP_OP_PING)
    rp_msgf(what, sizeof what, "PING");
  else
    rp_msgf(what, sizeof what, "%s of slot %" PRIu64, rp_op_name(op), slot);
  /* Same validation as the public path. */
  if ((op == RP_OP_WRITE || op == RP_OP_READ) && (!page || slot > RP_MAX_SLOT)) {
    rp_error_set(err, RP_ERR_BAD_FRAME, "%s: invalid request", what);
    return -1;
  }
  if (op == RP_OP_FREE && (slot > RP_MAX_SLOT || count == 0 || count > RP_MAX_FREE_COUNT ||
                           slot + count - 1 > RP_MAX_SLOT)) {
    rp_error_set(err, RP_ERR_BAD_FRAME, "%s: invalid count %u (1..%u)", what, count,
                 RP_MAX_FREE_COUNT);
    return -1;
  }
  return run_sync(conn, &ctl, what, err);
}

int rp_write_sync(struct rp_conn *conn, uint64_t slot, const uint8_t *page,
                  struct rp_error *err)
{
  return hot_sync(conn, RP_OP_WRITE, slot, 0, (uint8_t *)page, err);
}

int rp_read_sync(struct rp_conn *conn, uint64_t slot, uint8_t *page, struct rp_error *err)
{
  return hot_sync(conn, RP_OP_READ, slot, 0, page, err);
}

int rp_free_sync(struct rp_conn *conn, uint64_t slot, uint32_t count, struct rp_error *err)
{
  return hot_sync(conn, RP_OP_FREE, slot, count, NULL, err);
}

int rp_ping_sync(struct rp_conn *conn, struct rp_error *err)
{
  return hot_sync(conn, RP_OP_PING, 0, 0, NULL, err);
}

int rp_goodbye_sync(struct rp_conn *conn, struct rp_error *err)
{
  struct ctl_request ctl;
  ctl_init(&ctl, RP_OP_GOODBYE);
  if (run_sync(conn, &ctl, "GOODBYE", err) < 0)
    return -1;
  free(ctl.reply);
  return 0;
}

int rp_stat_sync(struct rp_conn *conn, struct rp_server_stat *stat, struct rp_error *err)
{
  struct ctl_request ctl;
  ctl_init(&ctl, RP_OP_STAT);
  if (run_sync(conn, &ctl, "STAT", err) < 0)
    return -1;
  Rampart__Stat *s = rampart__stat__unpack(NULL, ctl.reply_len, ctl.reply);
  if (!s)
    return reply_malformed(conn, &ctl, "STAT", err);
  memset(stat, 0, sizeof *stat);
  rp_msgf(stat->server_name, sizeof stat->server_name, "%s",
          s->server_name ? s->server_name : "");
  stat->version = s->version;
  stat->uptime_seconds = s->uptime_seconds;
  stat->page_size = s->page_size;
  stat->capacity_pages = s->capacity_pages;
  stat->reserved_pages = s->reserved_pages;
  stat->stored_pages = s->stored_pages;
  stat->stored_bytes = s->stored_bytes;
  stat->resident_bytes = s->resident_bytes;
  stat->clients_connected = s->clients_connected;
  stat->sessions_attached = s->sessions_attached;
  stat->sessions_detached = s->sessions_detached;
  stat->sessions_expired = s->sessions_expired;
  stat->ops_write = s->ops_write;
  stat->ops_read = s->ops_read;
  stat->ops_free = s->ops_free;
  stat->bytes_in = s->bytes_in;
  stat->bytes_out = s->bytes_out;
  stat->errors_protocol = s->errors_protocol;
  stat->errors_auth = s->errors_auth;
  stat->errors_refused = s->errors_refused;
  stat->pressure = s->pressure;
  stat->draining = s->draining;
  stat->psi_some_avg10 = s->psi_some_avg10;
  stat->mem_available_bytes = s->mem_available_bytes;
  stat->advises_sent = s->advises_sent;
  stat->session_stored_pages = s->session_stored_pages;
  stat->session_reserved_pages = s->session_reserved_pages;
  rampart__stat__free_unpacked(s, NULL);
  free(ctl.reply);
  return 0;
}

static void wait_expired(struct ev_loop *loop, ev_timer *w, int revents)
{
  *(bool *)w->data = true;
}

bool rp_conn_wait(struct rp_conn *conn, bool (*pred)(void *arg), void *arg,
                  uint32_t timeout_ms)
{
  if (pred(arg))
    return true;
  if (!conn->loop && !attach_private(conn))
    return false;
  rp_conn_lend_reading(conn, false); /* the loop below must see the replies */
  bool expired = false;
  ev_timer t;
  ev_now_update(conn->loop);
  ev_timer_init(&t, wait_expired, timeout_ms / 1000.0, 0.0);
  t.data = &expired;
  ev_timer_start(conn->loop, &t);
  while (!pred(arg) && !expired)
    ev_run(conn->loop, EVRUN_ONCE);
  ev_timer_stop(conn->loop, &t);
  return pred(arg);
}
