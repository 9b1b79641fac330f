/* Client connections (see connection.h).
 *
 * Lifetime rule: nothing below the libev callbacks ever frees a connection. Code that
 * decides a connection must end sets `dead` (drop it now) or enters ST_CLOSING (send
 * what is queued, typically an Error, then drop it); the callback that is running frees
 * it on the way out, in finish(). So no function ever touches freed memory, however
 * deep the error is found.
 *
 * Timeouts share one ev_timer per connection: the handshake must end within
 * --handshake-timeout (2 s) of accept, a frame once begun must arrive whole within 30 s
 * (slow-loris), queued replies must make progress within 60 s, and a closing connection
 * lingers at most 5 s (1 s before it authenticated). The timer is re-armed lazily: when
 * it fires early it just recomputes, which keeps the hot path free of timer churn.
 *
 * Memory follows trust. Until a connection proves the key it has 4 KiB buffers (the
 * receive buffer grows only to hold one announced control frame), so a flood of
 * connections that never authenticate costs little; it then gets the 256 KiB receive
 * buffer that lets a pipelining client cost one read() per many pages. The reply buffer
 * grows by doubling while a client does not read its replies, and goes back to its
 * initial size once drained, so a burst does not leave megabytes behind.
 */
#include "connection.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admission.h"
#include "dlist.h"
#include "fault_injection.h"
#include "frame_auth.h"
#include "hop_trace.h"
#include "log.h"
#include "message.h"
#include "rps_server.h"
#include "server_stat.h"

#define IN_BUF_SIZE (256u * 1024u)
#define HS_BUF_SIZE 4096u          /* both buffers, before the key is proven */
#define OUT_INITIAL (256u * 1024u) /* what a drained reply buffer goes back to */
#define OUT_KEEP (1u << 20)        /* a buffer this size or less is kept as is */
#define OUT_HIGH_WATER (8u << 20)
#define OUT_LOW_WATER (OUT_HIGH_WATER / 2)
#define FRAME_TIMEOUT 30.0
#define WRITE_STALL_TIMEOUT 60.0
#define CLOSE_LINGER 5.0
#define CLOSE_LINGER_UNAUTHED 1.0
#define ERROR_FRAME_MAX (RP_HEADER_SIZE + 640u) /* Error text is at most 511 bytes */
#define ERROR_FRAME_ROOM (ERROR_FRAME_MAX + RP_TAG_LEN)

enum conn_state { ST_HELLO, ST_AUTH, ST_READY, ST_CLOSING };

struct rps_conn {
  struct rps_server *srv;
  int fd;
  enum conn_state state;
  bool dead;      /* free on the way out of the current callback */
  bool throttled; /* reading paused: too many replies queued */
  bool shut_wr;
  bool authed; /* proved the key; no longer counted as unauthenticated */
  ev_io rio, wio;
  ev_timer deadline;
  ev_tstamp accepted_at, frame_started, write_waiting_since, closing_since;

  uint8_t *in;
  size_t in_start, in_end, in_cap;
  uint8_t *out;
  size_t out_start, out_end, out_cap;
  size_t out_peak; /* largest out_cap since the buffer was last shrunk */

  uint8_t client_nonce[RP_NONCE_LEN];
  uint8_t server_nonce[RP_NONCE_LEN];
  uint8_t resume_token[RP_TOKEN_LEN];
  bool want_resume;
  /* Frame authentication (frame_auth.h): rx checks the client's frames from AUTH on,
   * tx tags ours from the reply to AUTH on (tagging_out). */
  struct rp_frame_auth rx, tx;
  bool tagging_out;
  char client_name[64];
  char peer[64];
  struct rps_session *session;
  struct rps_addr_key addr;
  struct rps_conn *prev, *next;
  struct rps_conn *unauth_prev, *unauth_next; /* oldest first, until authed */
};

static void conn_free(struct rps_conn *c);
static void process_input(struct rps_conn *c);

/* ---- output buffer ---------------------------------------------------------------- */

static size_t out_pending(const struct rps_conn *c)
{
  return c->out_end - c->out_start;
}

/* Room for n more bytes at the end of the output buffer, or NULL (connection marked
 * dead) when memory runs out. */
static uint8_t *out_reserve(struct rps_conn *c, size_t n)
{
  if (c->out_cap - c->out_end >= n)
    return c->out + c->out_end;
  if (c->out_start > 0) {
    memmove(c->out, c->out + c->out_start, out_pending(c));
    c->out_end -= c->out_start;
    c->out_start = 0;
    if (c->out_cap - c->out_end >= n)
      return c->out + c->out_end;
  }
  size_t cap = c->out_cap * 2;
  while (cap - c->out_end < n)
    cap *= 2;
  uint8_t *p = realloc(c->out, cap);
  if (!p) {
    rp_log(RP_LOG_ERROR, "%s: out of memory for replies; closing", c->peer);
    c->dead = true;
    return NULL;
  }
  c->out = p;
  c->out_cap = cap;
  if (cap > c->out_peak)
    c->out_peak = cap;
  return c->out + c->out_end;
}

/* The reply buffer is empty: give back what a burst made it grow to. Freed rather than
 * realloc'd, as there is nothing to copy; on failure the big buffer simply stays. */
static void out_shrink(struct rps_conn *c)
{
  if (c->out_cap <= OUT_KEEP)
    return;
  uint8_t *p = malloc(OUT_INITIAL);
  if (!p)
    return;
  free(c->out);
  c->out = p;
  rp_log(c->srv->opt->verbose ? RP_LOG_INFO : RP_LOG_DEBUG,
         "%s (%s): reply buffer back to "
         "%u KiB after a burst that needed %zu KiB",
         c->peer, c->client_name, OUT_INITIAL / 1024, c->out_peak / 1024);
  c->out_cap = OUT_INITIAL;
  c->out_peak = OUT_INITIAL;
}

/* Room in the receive buffer for a whole frame of `need` bytes from its start. */
static bool in_fit(struct rps_conn *c, size_t need)
{
  if (c->in_cap >= need)
    return true;
  uint8_t *p = realloc(c->in, need);
  if (!p) {
    rp_log(RP_LOG_ERROR, "%s: out of memory for a receive buffer; closing", c->peer);
    c->dead = true;
    return false;
  }
  c->in = p;
  c->in_cap = need;
  return true;
}

/* Appends the frame of n bytes built at p (the end of the output buffer, with
 * RP_TAG_LEN bytes of room after it) to what is sent: with its tag once the handshake
 * has reached the reply to AUTH. */
static void out_commit(struct rps_conn *c, uint8_t *p, size_t n)
{
  if (c->tagging_out) {
    if (rp_frame_tag(&c->tx, p, p + RP_HEADER_SIZE, n - RP_HEADER_SIZE, p + n) < 0) {
      rp_log(RP_LOG_ERROR,
             "%s: cannot compute a frame's authentication tag (libcrypto "
             "failed); closing",
             c->peer);
      c->dead = true;
      return;
    }
    n += RP_TAG_LEN;
  }
  c->out_end += n;
}

static void send_msg(struct rps_conn *c, const struct rp_header *req,
                     const ProtobufCMessage *msg)
{
  size_t need = RP_HEADER_SIZE + (msg ? protobuf_c_message_get_packed_size(msg) : 0);
  uint8_t *p = out_reserve(c, need + RP_TAG_LEN);
  if (!p)
    return;
  struct rp_header h;
  rp_header_reply(&h, req, RP_OK, 0);
  size_t n = rp_frame_build(p, need, &h, msg);
  if (n == 0) {
    rp_log(RP_LOG_ERROR, "%s: %s reply does not fit in a frame; closing", c->peer,
           rp_op_name(req->op));
    c->dead = true;
    return;
  }
  out_commit(c, p, n);
}

static void send_error(struct rps_conn *c, const struct rp_header *req, enum rp_status st,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void send_error(struct rps_conn *c, const struct rp_header *req, enum rp_status st,
                       const char *fmt, ...)
{
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  uint8_t *p = out_reserve(c, ERROR_FRAME_ROOM);
  if (!p)
    return;
  size_t n = rp_frame_build_error(p, ERROR_FRAME_MAX, req, st, "%s", text);
  if (n > 0)
    out_commit(c, p, n);
}

/* Sends what the socket takes now; waits for writability for the rest. */
static void flush_out(struct rps_conn *c)
{
  struct ev_loop *loop = c->srv->loop;
  /* Stamped before the send, not after: the send wakes the client, which may take this
   * core from the server until it sleeps again. */
  if (out_pending(c) > 0)
    rp_hop(RP_HOP_SERVER_OUT);
  while (out_pending(c) > 0) {
    ssize_t n = send(c->fd, c->out + c->out_start, out_pending(c),
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c->out_start += (size_t)n;
      c->srv->stats.bytes_out += (uint64_t)n;
      c->write_waiting_since = ev_now(loop);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (c->write_waiting_since == 0)
        c->write_waiting_since = ev_now(loop);
      ev_io_start(loop, &c->wio);
      return;
    }
    rp_log(RP_LOG_DEBUG, "%s: send failed: %s", c->peer, n < 0 ? strerror(errno) : "0 bytes");
    c->dead = true;
    return;
  }
  c->out_start = c->out_end = 0;
  c->write_waiting_since = 0;
  out_shrink(c);
  ev_io_stop(loop, &c->wio);
  if (c->state == ST_CLOSING && !c->shut_wr) {
    /* Half-close so the peer reads our Error before it sees the end; we keep reading
     * (and dropping) its data, since closing with unread input sends a RST that could
     * destroy the Error in flight. */
    shutdown(c->fd, SHUT_WR);
    c->shut_wr = true;
  }
}

/* ---- closing -------------------------------------------------------------------- */

static void begin_closing(struct rps_conn *c)
{
  if (c->state == ST_CLOSING)
    return;
  c->state = ST_CLOSING;
  c->closing_since = ev_now(c->srv->loop);
  c->in_start = c->in_end = 0;
  c->throttled = false;
  ev_io_start(c->srv->loop, &c->rio);
}

static void protocol_error(struct rps_conn *c, const struct rp_header *h, enum rp_status st,
                           const char *why)
{
  c->srv->stats.errors_protocol++;
  rp_log(RP_LOG_WARN, "%s (%s): protocol error, closing: %s", c->peer, c->client_name, why);
  send_error(c, h, st, "%s: %s", why, rp_status_advice(st));
  begin_closing(c);
}

/* ---- deadlines ------------------------------------------------------------------ */

static ev_tstamp earliest(ev_tstamp a, ev_tstamp b)
{
  if (a == 0)
    return b;
  if (b == 0)
    return a;
  return a < b ? a : b;
}

/* The next moment something must have happened, with what it is; 0 when none. */
static ev_tstamp next_deadline(const struct rps_conn *c, const char **what)
{
  ev_tstamp d = 0;
  const char *w = NULL;
  if (c->state == ST_CLOSING) {
    d = c->closing_since + (c->authed ? CLOSE_LINGER : CLOSE_LINGER_UNAUTHED);
    w = "closing connection lingered";
  } else {
    if (c->state != ST_READY) {
      d = c->accepted_at + (ev_tstamp)c->srv->opt->handshake_timeout;
      w = "handshake not finished within --handshake-timeout";
    }
    if (c->frame_started && earliest(d, c->frame_started + FRAME_TIMEOUT) != d) {
      d = c->frame_started + FRAME_TIMEOUT;
      w = "frame not completed within 30 s of its start";
    }
  }
  if (c->write_waiting_since &&
      earliest(d, c->write_waiting_since + WRITE_STALL_TIMEOUT) != d) {
    d = c->write_waiting_since + WRITE_STALL_TIMEOUT;
    w = "client read none of its replies for 60 s";
  }
  if (what)
    *what = w;
  return d;
}

static void arm_deadline(struct rps_conn *c)
{
  struct ev_loop *loop = c->srv->loop;
  ev_tstamp d = next_deadline(c, NULL);
  if (d == 0) {
    ev_timer_stop(loop, &c->deadline);
    return;
  }
  ev_tstamp after = d - ev_now(loop);
  if (after < 0)
    after = 0;
  /* An armed timer that fires no later than needed will re-check when it fires. */
  if (ev_is_active(&c->deadline)) {
    if (ev_timer_remaining(loop, &c->deadline) <= after + 0.5)
      return;
    ev_timer_stop(loop, &c->deadline);
  }
  ev_timer_set(&c->deadline, after, 0.);
  ev_timer_start(loop, &c->deadline);
}

/* Every callback ends here: free a dead connection, else re-arm its deadline. */
static void finish(struct rps_conn *c)
{
  if (c->dead)
    conn_free(c);
  else
    arm_deadline(c);
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
  struct rps_conn *c = w->data;
  const char *what;
  ev_tstamp d = next_deadline(c, &what);
  if (d != 0 && d <= ev_now(loop) + 0.001) {
    if (c->state != ST_CLOSING)
      rp_log(RP_LOG_WARN, "%s (%s): %s; closing", c->peer, c->client_name, what);
    c->dead = true;
  }
  finish(c);
}

/* ---- the handshake ---------------------------------------------------------------- */

/* Both directions' frame authentication, keyed from the cluster key and both nonces.
 * The client's frames are checked from AUTH on; ours are tagged from the reply to AUTH
 * on (tagging_out), so that a refusal of AUTH goes out untagged. */
static bool start_frame_auth(struct rps_conn *c)
{
  struct rp_session_keys keys;
  rp_session_keys_derive(c->srv->key, c->client_nonce, c->server_nonce, &keys);
  bool ok = rp_frame_auth_init(&c->rx, keys.client_to_server) == 0 &&
            rp_frame_auth_init(&c->tx, keys.server_to_client) == 0;
  rp_session_keys_wipe(&keys);
  return ok;
}

static void handle_hello(struct rps_conn *c, const struct rp_header *h,
                         const uint8_t *payload)
{
  struct rps_server *srv = c->srv;
  Rampart__Hello *m = rampart__hello__unpack(NULL, h->length, payload);
  if (!m) {
    protocol_error(c, h, RP_ERR_BAD_FRAME, "HELLO payload is not a Hello message");
    return;
  }
  if (m->magic != RP_HELLO_MAGIC || m->version != RP_PROTOCOL_VERSION) {
    srv->stats.errors_protocol++;
    rp_log(RP_LOG_WARN,
           "%s: client speaks protocol version %u (hello magic %#x); we "
           "speak %u; closing",
           c->peer, m->version, m->magic, RP_PROTOCOL_VERSION);
    send_error(c, h, RP_ERR_VERSION,
               "this rampartd speaks protocol version %u and the "
               "client sent version %u (hello magic %#x): %s",
               RP_PROTOCOL_VERSION, m->version, m->magic, rp_status_advice(RP_ERR_VERSION));
    begin_closing(c);
  } else if (m->client_nonce.len != RP_NONCE_LEN) {
    protocol_error(c, h, RP_ERR_BAD_FRAME, "Hello.client_nonce is not 32 bytes");
  } else {
    memcpy(c->client_nonce, m->client_nonce.data, RP_NONCE_LEN);
    size_t n = 0;
    for (const char *p = m->client_name ? m->client_name : "";
         *p && n < sizeof c->client_name - 1; p++)
      c->client_name[n++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    c->client_name[n] = '\0';
    if (rp_random_bytes(c->server_nonce, RP_NONCE_LEN) < 0) {
      rp_log(RP_LOG_ERROR, "getrandom failed: %s", strerror(errno));
      send_error(c, h, RP_ERR_INTERNAL, "the server could not make a nonce");
      begin_closing(c);
    } else if (!start_frame_auth(c)) {
      rp_log(RP_LOG_ERROR, "%s: cannot set up frame authentication (libcrypto failed)",
             c->peer);
      send_error(c, h, RP_ERR_INTERNAL, "the server could not set up frame authentication");
      begin_closing(c);
    } else {
      /* The server proves the key first: the client sends its resume token (in AUTH)
       * only to a server that has. */
      uint8_t server_mac[RP_MAC_LEN];
      rp_auth_server_mac(srv->key, c->client_nonce, c->server_nonce, server_mac);
      Rampart__Challenge ch = RAMPART__CHALLENGE__INIT;
      ch.version = RP_PROTOCOL_VERSION;
      ch.server_nonce.data = c->server_nonce;
      ch.server_nonce.len = RP_NONCE_LEN;
      ch.server_name = (char *)srv->opt->name;
      ch.server_mac.data = server_mac;
      ch.server_mac.len = RP_MAC_LEN;
      send_msg(c, h, &ch.base);
      c->state = ST_AUTH;
    }
  }
  rampart__hello__free_unpacked(m, NULL);
}

/* ---- unauthenticated connections ------------------------------------------------ */

static void unauth_add(struct rps_conn *c)
{
  struct rps_server *srv = c->srv;
  DLIST_PUSH_TAIL(srv->unauth_oldest, srv->unauth_newest, c, unauth_prev, unauth_next);
  srv->nunauth++;
}

/* The connection proved the key, or is going: it no longer uses the handshake budget. */
static void unauth_leave(struct rps_conn *c)
{
  struct rps_server *srv = c->srv;
  if (c->authed)
    return;
  c->authed = true;
  DLIST_REMOVE(srv->unauth_oldest, srv->unauth_newest, c, unauth_prev, unauth_next);
  srv->nunauth--;
  rps_addr_count_remove(srv->unauth_by_addr, &c->addr);
}

/* Why this authenticated connection cannot be served, or NULL when it can. Resuming a
 * session still attached elsewhere frees that connection, so it needs no new room. */
static const char *over_limit(struct rps_conn *c, struct rps_session *resuming, char *why,
                              size_t whylen)
{
  struct rps_server *srv = c->srv;
  const struct rps_options *o = srv->opt;
  if (!(resuming && resuming->conn) && srv->nauth >= o->max_connections) {
    snprintf(why, whylen,
             "rampartd already serves %u authenticated connections "
             "(--max-connections): try again later, use another server, or raise the "
             "limit",
             srv->nauth);
    return why;
  }
  if (!resuming && rps_sessions_count(srv->sessions) >= o->max_sessions_per_key) {
    /* Short: the client library keeps the first 200 characters. */
    snprintf(why, whylen,
             "this key holds %u sessions here (--max-sessions-per-key): "
             "reconnect by resuming a session, wait %llu s for old leases, or raise the "
             "limit",
             rps_sessions_count(srv->sessions), (unsigned long long)o->lease_seconds);
    return why;
  }
  return NULL;
}

/* Binds the authenticated connection to its session: the one named by the resume
 * token if it is still alive, else a new one. */
static bool bind_session(struct rps_conn *c, struct rps_session *s, bool *resumed)
{
  struct rps_sessions *t = c->srv->sessions;
  *resumed = s != NULL;
  if (s) {
    struct rps_conn *old = rps_session_attach(t, s, c, c->client_name);
    if (old) {
      /* The client gave up on that connection (it is resuming elsewhere): it is
       * half-open, and must not detach the session when it finally goes. */
      rp_log(RP_LOG_INFO,
             "%s: session %s resumed from a new connection; closing the old "
             "one from %s",
             c->peer, s->id, old->peer);
      old->session = NULL;
      conn_free(old);
    }
  } else {
    if (c->want_resume)
      rp_log(RP_LOG_INFO,
             "%s (%s): asked to resume a session that is gone (lease "
             "expired or server restarted); starting a new, empty one",
             c->peer, c->client_name);
    s = rps_session_create(t, c, c->client_name);
    if (!s)
      return false;
  }
  c->session = s;
  return true;
}

static void handle_auth(struct rps_conn *c, const struct rp_header *h, const uint8_t *payload)
{
  struct rps_server *srv = c->srv;
  Rampart__Auth *m = rampart__auth__unpack(NULL, h->length, payload);
  if (!m) {
    protocol_error(c, h, RP_ERR_BAD_FRAME, "AUTH payload is not an Auth message");
    return;
  }
  uint8_t expected[RP_MAC_LEN];
  rp_auth_client_mac(srv->key, c->server_nonce, c->client_nonce, expected);
  bool ok = rp_mac_matches(expected, m->client_mac.data, m->client_mac.len);
  size_t token_len = m->resume_token.len;
  if (ok && token_len == RP_TOKEN_LEN)
    memcpy(c->resume_token, m->resume_token.data, RP_TOKEN_LEN);
  rampart__auth__free_unpacked(m, NULL);
  if (ok && token_len != 0 && token_len != RP_TOKEN_LEN) {
    protocol_error(c, h, RP_ERR_BAD_FRAME, "Auth.resume_token is neither empty nor 32 bytes");
    return;
  }
  c->want_resume = ok && token_len == RP_TOKEN_LEN;
  if (!ok) {
    srv->stats.errors_auth++;
    rp_log(RP_LOG_WARN, "%s (%s): wrong cluster key; closing", c->peer, c->client_name);
    send_error(c, h, RP_ERR_AUTH, "wrong cluster key: %s", rp_status_advice(RP_ERR_AUTH));
    begin_closing(c);
    return;
  }
  struct rps_session *resuming =
    c->want_resume ? rps_session_find(srv->sessions, c->resume_token, RP_TOKEN_LEN) : NULL;
  char why[400];
  if (over_limit(c, resuming, why, sizeof why)) {
    srv->stats.errors_refused++;
    rp_log(RP_LOG_WARN, "%s (%s): refused after authenticating: %s", c->peer, c->client_name,
           why);
    send_error(c, h, RP_ERR_NO_SPACE, "%s", why);
    begin_closing(c);
    return;
  }
  bool resumed;
  if (!bind_session(c, resuming, &resumed)) {
    send_error(c, h, RP_ERR_INTERNAL,
               "the server could not create a session (out of "
               "memory)");
    begin_closing(c);
    return;
  }
  struct rps_store_stats ss;
  rps_store_get_stats(srv->store, &ss);
  Rampart__Welcome w = RAMPART__WELCOME__INIT;
  w.session_token.data = c->session->token;
  w.session_token.len = RP_TOKEN_LEN;
  w.resumed = resumed;
  w.page_size = RP_PAGE_SIZE;
  w.capacity_pages = ss.capacity_pages;
  w.free_pages = ss.free_pages;
  w.lease_seconds = (uint32_t)srv->opt->lease_seconds;
  w.reserved_pages = rps_account_reserved(c->session->acct);
  w.pressure = rps_pressure_active(srv->pressure);
  c->tagging_out = true; /* from the Welcome on, every frame we send is tagged */
  send_msg(c, h, &w.base);
  c->state = ST_READY;
  unauth_leave(c);
  srv->nauth++;
  rp_log(srv->opt->verbose ? RP_LOG_INFO : RP_LOG_DEBUG,
         "%s (%s): authenticated, %s session "
         "%s with %llu pages",
         c->peer, c->client_name, resumed ? "resumed" : "new", c->session->id,
         (unsigned long long)rps_account_stored(c->session->acct));
}

/* ---- ops -------------------------------------------------------------------------- */

static void refused(struct rps_conn *c, const struct rp_header *h, enum rp_status st,
                    const char *msg)
{
  if (st == RP_ERR_NO_SPACE || st == RP_ERR_PRESSURE || st == RP_ERR_OUT_OF_RANGE)
    c->srv->stats.errors_refused++;
  if (c->srv->opt->verbose)
    rp_log(RP_LOG_INFO, "%s (%s): %s refused: %s", c->peer, c->client_name, rp_op_name(h->op),
           msg);
  send_error(c, h, st, "%s", msg);
}

static void handle_reserve(struct rps_conn *c, const struct rp_header *h,
                           const uint8_t *payload)
{
  struct rps_server *srv = c->srv;
  Rampart__Reserve *m = rampart__reserve__unpack(NULL, h->length, payload);
  if (!m) {
    protocol_error(c, h, RP_ERR_BAD_FRAME, "RESERVE payload is not a Reserve message");
    return;
  }
  uint64_t pages = m->pages;
  rampart__reserve__free_unpacked(m, NULL);
  char msg[400];
  enum rp_status st = rps_store_reserve(srv->store, c->session->acct, pages,
                                        rps_pressure_active(srv->pressure), msg, sizeof msg);
  if (st != RP_OK) {
    refused(c, h, st, msg);
    return;
  }
  struct rps_store_stats ss;
  rps_store_get_stats(srv->store, &ss);
  Rampart__ReserveReply r = RAMPART__RESERVE_REPLY__INIT;
  r.reserved_pages = rps_account_reserved(c->session->acct);
  r.free_pages = ss.free_pages;
  send_msg(c, h, &r.base);
}

static void handle_stat(struct rps_conn *c, const struct rp_header *h, const uint8_t *payload)
{
  Rampart__StatRequest *m = rampart__stat_request__unpack(NULL, h->length, payload);
  if (!m) {
    protocol_error(c, h, RP_ERR_BAD_FRAME, "STAT payload is not a StatRequest message");
    return;
  }
  rampart__stat_request__free_unpacked(m, NULL);
  Rampart__Stat st = RAMPART__STAT__INIT;
  rps_server_fill_stat(c->srv, c->session, &st);
  send_msg(c, h, &st.base);
}

static void handle_write(struct rps_conn *c, const struct rp_header *h,
                         const uint8_t *payload)
{
  char msg[400];
  c->srv->stats.ops_write++;
  if (rps_fault_refuses_write(c->srv->opt->test_fault, msg, sizeof msg)) {
    refused(c, h, RP_ERR_INTERNAL, msg);
    return;
  }
  enum rp_status st = rps_store_write(c->srv->store, c->session->acct, h->slot, payload, msg,
                                      sizeof msg);
  if (st == RP_OK) {
    rps_fault_on_write(c->srv->opt->test_fault, c->srv->store, h->slot, payload);
    send_msg(c, h, NULL);
  } else {
    refused(c, h, st, msg);
  }
}

static void handle_read(struct rps_conn *c, const struct rp_header *h)
{
  char msg[400];
  const uint8_t *page;
  c->srv->stats.ops_read++;
  enum rp_status st = rps_store_read(c->srv->store, c->session->acct, h->slot, &page, msg,
                                     sizeof msg);
  if (st != RP_OK) {
    refused(c, h, st, msg);
    return;
  }
  uint8_t *p = out_reserve(c, RP_HEADER_SIZE + RP_PAGE_SIZE + RP_TAG_LEN);
  if (!p)
    return;
  struct rp_header r;
  rp_header_reply(&r, h, RP_OK, RP_PAGE_SIZE);
  rp_header_encode(&r, p);
  memcpy(p + RP_HEADER_SIZE, page, RP_PAGE_SIZE);
  /* A corrupting server (fault injection) corrupts the page it stores, not the wire:
   * the tag covers what the server meant to send. */
  rps_fault_read_reply(c->srv->opt->test_fault, c->srv->store, c->session->acct, h->slot,
                       p + RP_HEADER_SIZE);
  out_commit(c, p, RP_HEADER_SIZE + RP_PAGE_SIZE);
}

static void handle_free(struct rps_conn *c, const struct rp_header *h)
{
  char msg[400];
  c->srv->stats.ops_free++;
  enum rp_status st = rps_store_free(c->srv->store, c->session->acct, h->slot, h->count, msg,
                                     sizeof msg);
  if (st == RP_OK)
    send_msg(c, h, NULL);
  else
    refused(c, h, st, msg);
}

static void handle_goodbye(struct rps_conn *c, const struct rp_header *h)
{
  rp_log(c->srv->opt->verbose ? RP_LOG_INFO : RP_LOG_DEBUG,
         "%s (%s): goodbye; freeing "
         "session %s and its %llu pages",
         c->peer, c->client_name, c->session->id,
         (unsigned long long)rps_account_stored(c->session->acct));
  rps_session_destroy(c->srv->sessions, c->session);
  c->session = NULL;
  send_msg(c, h, NULL);
  begin_closing(c);
}

static void dispatch_ready(struct rps_conn *c, const struct rp_header *h,
                           const uint8_t *payload)
{
  switch (h->op) {
  case RP_OP_WRITE:
    handle_write(c, h, payload);
    break;
  case RP_OP_READ:
    handle_read(c, h);
    break;
  case RP_OP_FREE:
    handle_free(c, h);
    break;
  case RP_OP_RESERVE:
    handle_reserve(c, h, payload);
    break;
  case RP_OP_STAT:
    handle_stat(c, h, payload);
    break;
  case RP_OP_PING:
    send_msg(c, h, NULL);
    break;
  case RP_OP_GOODBYE:
    handle_goodbye(c, h);
    break;
  case RP_OP_HELLO:
  case RP_OP_AUTH:
    protocol_error(c, h, RP_ERR_BAD_FRAME, "HELLO or AUTH after the handshake finished");
    break;
  default:
    protocol_error(c, h, RP_ERR_UNKNOWN_OP, "op not served by rampartd");
    break;
  }
}

static void dispatch(struct rps_conn *c, const struct rp_header *h, const uint8_t *payload)
{
  enum rp_op expected = c->state == ST_HELLO ? RP_OP_HELLO : RP_OP_AUTH;
  if (c->state == ST_READY) {
    dispatch_ready(c, h, payload);
  } else if (h->op != expected) {
    c->srv->stats.errors_protocol++;
    rp_log(RP_LOG_WARN, "%s: %s before the handshake finished; closing", c->peer,
           rp_op_name(h->op));
    send_error(c, h, RP_ERR_NOT_AUTHED,
               "%s sent before the handshake finished (expected "
               "%s): %s",
               rp_op_name(h->op), rp_op_name(expected), rp_status_advice(RP_ERR_NOT_AUTHED));
    begin_closing(c);
  } else if (h->op == RP_OP_HELLO) {
    handle_hello(c, h, payload);
  } else {
    handle_auth(c, h, payload);
  }
}

/* ---- reading ---------------------------------------------------------------------- */

/* A frame whose tag is wrong. On AUTH, the client's key is not ours: an untagged
 * refusal, as for a wrong MAC. After the handshake, the frame did not come from the
 * client at this point of the stream (injected, replayed, reordered, altered or cut):
 * nothing after it can be trusted, and nothing it asked is done. The connection is
 * dropped without a reply (the stream is not the client's any more); the session goes
 * into its lease, and the client resumes it. */
static void tag_failed(struct rps_conn *c, const struct rp_header *h)
{
  c->srv->stats.errors_auth++;
  if (c->state == ST_AUTH) {
    rp_log(RP_LOG_WARN,
           "%s (%s): AUTH failed its authentication tag: wrong cluster key; "
           "closing",
           c->peer, c->client_name);
    send_error(c, h, RP_ERR_AUTH, "wrong cluster key: %s", rp_status_advice(RP_ERR_AUTH));
    begin_closing(c);
    return;
  }
  rp_log(RP_LOG_WARN,
         "%s (%s): a %s frame (id %llu) failed its authentication tag: "
         "injected, replayed, reordered or altered on the way; dropping the connection "
         "(session %s stays for its lease)",
         c->peer, c->client_name, rp_op_name(h->op), (unsigned long long)h->id,
         c->session ? c->session->id : "-");
  c->dead = true;
}

/* Handles every whole frame in the input buffer, unless the replies back up. */
static void process_input(struct rps_conn *c)
{
  struct ev_loop *loop = c->srv->loop;
  bool completed = false;
  while (c->state != ST_CLOSING && !c->dead) {
    if (out_pending(c) >= OUT_HIGH_WATER) {
      c->throttled = true;
      ev_io_stop(loop, &c->rio);
      break;
    }
    size_t avail = c->in_end - c->in_start;
    if (avail < RP_HEADER_SIZE)
      break;
    struct rp_header h;
    const char *why;
    enum rp_status st = rp_header_decode(c->in + c->in_start, RP_FROM_CLIENT, &h, &why);
    if (st != RP_OK && c->state == ST_READY) {
      /* After the handshake a header that does not decode cannot have its tag checked
       * (its length is not to be trusted), so it may be anyone's: an attacker who
       * altered a byte of a real request, or reflected one of our own replies. Answer
       * it and the reply, tagged and carrying the request's id, would be an
       * authenticated refusal of a request the client did send. Drop the connection
       * unanswered, as for a failed tag: the client resumes and resends. */
      c->srv->stats.errors_protocol++;
      rp_log(RP_LOG_WARN,
             "%s (%s): a frame header that does not decode (%s) after the "
             "handshake: altered on the way, or a client that is not rampart; dropping "
             "the connection (session %s stays for its lease)",
             c->peer, c->client_name, why, c->session ? c->session->id : "-");
      c->dead = true;
      break;
    }
    if (st != RP_OK) {
      protocol_error(c, &h, st, why);
      break;
    }
    /* From AUTH on, the client's frames carry a tag after the payload. */
    bool tagged = c->state == ST_READY || (c->state == ST_AUTH && h.op == RP_OP_AUTH);
    size_t total = (size_t)RP_HEADER_SIZE + h.length + (tagged ? RP_TAG_LEN : 0);
    if (avail < total) {
      in_fit(c, total); /* a handshake buffer may be too small */
      break;
    }
    const uint8_t *frame = c->in + c->in_start;
    if (tagged && !rp_frame_verify(&c->rx, frame, frame + RP_HEADER_SIZE, h.length,
                                   frame + RP_HEADER_SIZE + h.length)) {
      tag_failed(c, &h);
      break;
    }
    dispatch(c, &h, frame + RP_HEADER_SIZE);
    if (c->state == ST_CLOSING)
      break; /* begin_closing emptied the buffer */
    c->in_start += total;
    completed = true;
    if (c->state == ST_READY && c->in_cap < IN_BUF_SIZE && !in_fit(c, IN_BUF_SIZE))
      break;
  }
  if (c->in_start == c->in_end)
    c->in_start = c->in_end = 0;
  /* A frame's 30 s start when its first byte is buffered; a throttled connection's
   * buffered frames are whole and wait on us, not on the client. */
  if (c->throttled || c->in_end == c->in_start)
    c->frame_started = 0;
  else if (completed || c->frame_started == 0)
    c->frame_started = ev_now(loop);
  if (!c->dead)
    flush_out(c);
}

/* ST_CLOSING: read and drop until EOF, so the close never turns into a RST. */
static void drain_input(struct rps_conn *c)
{
  for (;;) {
    ssize_t n = read(c->fd, c->in, c->in_cap);
    if (n > 0)
      continue;
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    c->dead = true; /* EOF or reset: the peer is done */
    return;
  }
}

static void on_readable(struct ev_loop *loop, ev_io *w, int revents)
{
  struct rps_conn *c = w->data;
  if (c->state == ST_CLOSING) {
    drain_input(c);
    finish(c);
    return;
  }
  /* Whole frames were consumed, so what is left is one partial frame (< 65 KiB), and
   * process_input made room for all of it. */
  if (c->in_start > 0) {
    memmove(c->in, c->in + c->in_start, c->in_end - c->in_start);
    c->in_end -= c->in_start;
    c->in_start = 0;
  }
  ssize_t n;
  do
    n = read(c->fd, c->in + c->in_end, c->in_cap - c->in_end);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return;
  if (n <= 0) {
    if (c->in_end > 0) {
      /* A frame cut off is a broken frame, whether the peer crashed or lied. */
      c->srv->stats.errors_protocol++;
      rp_log(RP_LOG_INFO, "%s (%s): connection ended in the middle of a frame", c->peer,
             c->client_name);
    }
    if (n < 0 && errno != ECONNRESET)
      rp_log(RP_LOG_DEBUG, "%s: read failed: %s", c->peer, strerror(errno));
    if (c->state == ST_AUTH && c->in_end == 0) {
      /* A client hangs up after our challenge when our MAC did not check out: the
       * server proves the key first, so a key mismatch shows here. */
      c->srv->stats.errors_auth++;
      rp_log(RP_LOG_WARN,
             "%s (%s): the client hung up after our challenge without "
             "AUTH: it holds another cluster key (or none), or it is not a rampart client",
             c->peer, c->client_name);
    }
    c->dead = true;
    finish(c);
    return;
  }
  rp_hop(RP_HOP_SERVER_IN);
  c->in_end += (size_t)n;
  c->srv->stats.bytes_in += (uint64_t)n;
  process_input(c);
  finish(c);
}

static void on_writable(struct ev_loop *loop, ev_io *w, int revents)
{
  struct rps_conn *c = w->data;
  flush_out(c);
  if (!c->dead && c->throttled && out_pending(c) < OUT_LOW_WATER) {
    c->throttled = false;
    process_input(c);
    if (!c->throttled && c->state != ST_CLOSING)
      ev_io_start(loop, &c->rio);
  }
  finish(c);
}

/* ---- lifetime ---------------------------------------------------------------------- */

static void tune_socket(int fd)
{
  int one = 1, idle = 10, intvl = 5, cnt = 3;
  /* Unacknowledged data older than this kills the connection: a half-open peer must
   * not hold a session attached (and its pages out of lease) forever. */
  unsigned int user_timeout_ms = 30000;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

int rps_conn_start(struct rps_server *srv, int fd, const char *peer,
                   const struct rps_addr_key *addr)
{
  struct rps_conn *c = calloc(1, sizeof *c);
  if (c) {
    c->in = malloc(HS_BUF_SIZE);
    c->out = malloc(HS_BUF_SIZE);
  }
  if (!c || !c->in || !c->out || rps_addr_count_add(srv->unauth_by_addr, addr) < 0) {
    if (c) {
      free(c->in);
      free(c->out);
    }
    free(c);
    close(fd);
    rp_log(RP_LOG_ERROR, "out of memory for a new connection from %s", peer);
    return -1;
  }
  tune_socket(fd);
  c->srv = srv;
  c->fd = fd;
  c->addr = *addr;
  c->in_cap = HS_BUF_SIZE;
  c->out_cap = HS_BUF_SIZE;
  c->out_peak = HS_BUF_SIZE;
  c->accepted_at = ev_now(srv->loop);
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  snprintf(c->client_name, sizeof c->client_name, "unauthenticated");
  ev_io_init(&c->rio, on_readable, fd, EV_READ);
  ev_io_init(&c->wio, on_writable, fd, EV_WRITE);
  ev_init(&c->deadline, on_deadline);
  c->rio.data = c->wio.data = c->deadline.data = c;
  ev_io_start(srv->loop, &c->rio);

  DLIST_PUSH(srv->conns, c, prev, next);
  srv->nconns++;
  unauth_add(c);
  arm_deadline(c);
  rp_log(RP_LOG_DEBUG, "connection from %s", peer);
  return 0;
}

static void conn_free(struct rps_conn *c)
{
  struct rps_server *srv = c->srv;
  if (c->session)
    rps_session_detach(srv->sessions, c->session);
  ev_io_stop(srv->loop, &c->rio);
  ev_io_stop(srv->loop, &c->wio);
  ev_timer_stop(srv->loop, &c->deadline);
  close(c->fd);
  DLIST_UNLINK(srv->conns, c, prev, next);
  srv->nconns--;
  if (c->authed)
    srv->nauth--;
  else
    unauth_leave(c);
  rp_log(RP_LOG_DEBUG, "%s (%s): connection closed", c->peer, c->client_name);
  rp_frame_auth_free(&c->rx);
  rp_frame_auth_free(&c->tx);
  free(c->in);
  free(c->out);
  free(c);
}

bool rps_conn_drop_oldest_unauthenticated(struct rps_server *srv)
{
  struct rps_conn *c = srv->unauth_oldest;
  if (!c)
    return false;
  rp_log(RP_LOG_DEBUG,
         "%s: dropped before finishing its handshake, to make room under "
         "--max-unauthenticated",
         c->peer);
  conn_free(c);
  return true;
}

void rps_conn_refuse(struct rps_server *srv, int fd, const char *why)
{
  uint8_t frame[ERROR_FRAME_MAX];
  struct rp_header req = rp_request_header(RP_OP_HELLO, 0);
  size_t n = rp_frame_build_error(frame, sizeof frame, &req, RP_ERR_NO_SPACE, "%s", why);
  /* Best effort: a fresh socket's buffer always takes one small frame. */
  ssize_t ignored = send(fd, frame, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
  close(fd);
}

uint64_t rps_conn_broadcast_advise(struct rps_server *srv, bool pressure, const char *reason,
                                   uint64_t free_pages)
{
  Rampart__Advise a = RAMPART__ADVISE__INIT;
  a.pressure = pressure;
  a.reason = (char *)reason;
  a.free_pages = free_pages;
  struct rp_header req = rp_request_header(RP_OP_ADVISE, 0);
  uint64_t sent = 0;
  for (struct rps_conn *c = srv->conns; c; c = c->next) {
    if (c->state != ST_READY || c->dead)
      continue;
    send_msg(c, &req, &a.base);
    /* Sent from the loop's next turn, in on_writable, where the connection may die. */
    ev_io_start(srv->loop, &c->wio);
    sent++;
  }
  return sent;
}

void rps_conn_close_all(struct rps_server *srv)
{
  while (srv->conns)
    conn_free(srv->conns);
}
