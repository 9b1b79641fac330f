/* Connecting to a rampartd and the version-2 handshake (docs/protocol.md, "Handshake"),
 * for client_conn.c: a non-blocking socket driven by poll() against one deadline that
 * covers connect, HELLO/Challenge (whose MAC proves the server holds the key before
 * anything else is sent), AUTH (tagged: our MAC and the resume token) and Welcome
 * (tagged). Everything runs in the caller's buffer (the connection's receive buffer,
 * unused until the handshake ends), so connecting allocates nothing when the address
 * is given resolved.
 */
#include "client_handshake.h"

#include <errno.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "message.h"
#include "rampart.pb-c.h"

/* The handshake runs in the connection's receive buffer, unused until it ends: the
 * request frame, the reply's payload, and the decoded messages (a bump arena given to
 * protobuf-c), so a handshake allocates nothing. */
#define HS_FRAME_AT 0u
#define HS_REPLY_AT CLIENT_MAX_FRAME
#define HS_ARENA_AT (2u * CLIENT_MAX_FRAME)
#define HS_ARENA_SIZE (CLIENT_HANDSHAKE_BUF - HS_ARENA_AT)

struct handshake {
  int fd;
  uint64_t started_ns; /* connect began: a timeout says how long the whole took */
  uint64_t deadline_ns;
  const char *peer;
  uint8_t *buf;      /* the connection's receive buffer */
  bool zerocopy;     /* the socket took SO_ZEROCOPY: requests go out with MSG_ZEROCOPY */
  uint32_t zc_sends; /* sends made with MSG_ZEROCOPY, for the connection's count */
  size_t arena_used;
  ProtobufCAllocator arena;
};

static void *arena_alloc(void *data, size_t size)
{
  struct handshake *hs = data;
  size_t at = (hs->arena_used + 15u) & ~(size_t)15u;
  if (size > HS_ARENA_SIZE || at > HS_ARENA_SIZE - size)
    return NULL;
  hs->arena_used = at + size;
  return hs->buf + HS_ARENA_AT + at;
}

static void arena_free(void *data, void *p)
{
  (void)data;
  (void)p; /* the whole arena is dropped with the handshake */
}

static int remaining_ms(uint64_t deadline_ns)
{
  uint64_t now = rp_now_ns();
  if (now >= deadline_ns)
    return 0;
  uint64_t ms = (deadline_ns - now + 999999u) / 1000000u;
  return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

static unsigned long long ms_since(uint64_t then_ns)
{
  uint64_t now = rp_now_ns();
  return now > then_ns ? (now - then_ns) / 1000000u : 0;
}

/* What the kernel still holds of what we sent: a request that never left this host
 * (unsent bytes) is our side's stall, one sent and acknowledged is the server's. */
static void describe_send_queue(int fd, char *out, size_t len)
{
  int unacked = 0, unsent = 0;
  if (ioctl(fd, SIOCOUTQ, &unacked) < 0 || ioctl(fd, SIOCOUTQNSD, &unsent) < 0)
    snprintf(out, len, "send queue unknown: %s", strerror(errno));
  else
    snprintf(out, len, "%d bytes unsent, %d unacknowledged", unsent, unacked - unsent);
}

/* The phase of a handshake a timeout names: sending op's request, or waiting for its
 * reply (the Challenge to HELLO, the Welcome to AUTH). */
static void describe_phase(enum rp_op op, bool sending, char *out, size_t len)
{
  if (sending)
    snprintf(out, len, "sending %s to", rp_op_name(op));
  else
    snprintf(out, len, "waiting for the %s (%s sent) from",
             op == RP_OP_HELLO ? "Challenge" : "Welcome", rp_op_name(op));
}

/* Waits for fd to become ready for POLLOUT (sending op's request) or POLLIN (its reply).
 * 0, or -1 with err naming the phase, how long the handshake ran and what the socket
 * still holds (timeout or poll error). */
static int hs_wait(struct handshake *hs, enum rp_op op, bool sending, struct rp_error *err)
{
  for (;;) {
    int ms = remaining_ms(hs->deadline_ns);
    if (ms == 0) {
      char phase[64], queue[96];
      describe_phase(op, sending, phase, sizeof phase);
      describe_send_queue(hs->fd, queue, sizeof queue);
      rp_error_set(err, RP_ERR_TIMEOUT, "timed out after %llu ms %s %s (%s): %s",
                   ms_since(hs->started_ns), phase, hs->peer, queue,
                   rp_status_advice(RP_ERR_TIMEOUT));
      return -1;
    }
    struct pollfd p = { .fd = hs->fd, .events = sending ? POLLOUT : POLLIN };
    int n = poll(&p, 1, ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      char phase[64];
      describe_phase(op, sending, phase, sizeof phase);
      rp_error_set(err, RP_ERR_CONNECT, "poll failed %s %s: %s", phase, hs->peer,
                   strerror(errno));
      return -1;
    }
    if (n > 0)
      return 0;
  }
}

/* Sends buf (sending op's request), or receives into it (its reply), all len bytes
 * before the handshake's deadline. 0, or -1 with err. */
static int hs_transfer(struct handshake *hs, enum rp_op op, uint8_t *buf, size_t len,
                       bool sending, struct rp_error *err)
{
  size_t done = 0;
  while (done < len) {
    int flags = MSG_NOSIGNAL | MSG_DONTWAIT | (sending && hs->zerocopy ? MSG_ZEROCOPY : 0);
    ssize_t n = sending ? send(hs->fd, buf + done, len - done, flags)
                        : recv(hs->fd, buf + done, len - done, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == ENOBUFS && (flags & MSG_ZEROCOPY)) {
      hs->zerocopy = false; /* no option memory for it: copy, as the data path then does */
      continue;
    }
    if (n >= 0 && (flags & MSG_ZEROCOPY))
      hs->zc_sends++;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (hs_wait(hs, op, sending, err) < 0)
        return -1;
      continue;
    }
    if (sending && n < 0) {
      rp_error_set(err, RP_ERR_CONNECT, "cannot send the handshake to %s: %s: %s", hs->peer,
                   strerror(errno), rp_status_advice(RP_ERR_CONNECT));
      return -1;
    }
    if (!sending && n <= 0) {
      rp_error_set(err, RP_ERR_CONNECT,
                   "%s closed the connection during the handshake%s%s: "
                   "is it a rampartd of this version? %s",
                   hs->peer, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "",
                   rp_status_advice(RP_ERR_CONNECT));
      return -1;
    }
    done += (size_t)n;
  }
  return 0;
}

/* Sends one control request and receives its reply. With tx, the request is tagged;
 * with rx, a successful reply must carry a valid tag (a refusal, status not OK, comes
 * untagged: the server refuses AUTH before it tags anything). On success *payload is a
 * pointer into the handshake's buffer (*len bytes), valid until the next exchange. A server error is turned into err
 * with the server's own sentence and our advice. */
static int hs_exchange(struct handshake *hs, enum rp_op op, uint64_t id,
                       const ProtobufCMessage *msg, struct rp_frame_auth *tx,
                       struct rp_frame_auth *rx, uint8_t **payload, size_t *len,
                       struct rp_error *err)
{
  uint8_t *frame = hs->buf + HS_FRAME_AT;
  struct rp_header h = rp_request_header(op, id);
  size_t flen = rp_frame_build(frame, RP_MAX_CONTROL_FRAME, &h, msg);
  if (flen != 0 && tx) {
    if (rp_frame_tag(tx, frame, frame + RP_HEADER_SIZE, flen - RP_HEADER_SIZE, frame + flen) <
        0)
      flen = 0;
    else
      flen += RP_TAG_LEN;
  }
  if (flen == 0) {
    rp_error_set(err, RP_ERR_INTERNAL, "cannot build the %s frame", rp_op_name(op));
    return -1;
  }
  if (hs_transfer(hs, op, frame, flen, true, err) < 0)
    return -1;

  for (;;) {
    uint8_t hb[RP_HEADER_SIZE];
    if (hs_transfer(hs, op, hb, sizeof hb, false, err) < 0)
      return -1;
    struct rp_header rh;
    const char *why = NULL;
    if (rp_header_decode(hb, RP_FROM_SERVER, &rh, &why) != RP_OK) {
      rp_error_set(err, RP_ERR_BAD_FRAME,
                   "%s answered the handshake with a bad frame (%s): %s", hs->peer,
                   why ? why : "?", rp_status_advice(RP_ERR_BAD_FRAME));
      return -1;
    }
    bool tagged = rx && rh.status == RP_OK;
    size_t plen = rh.length + (tagged ? RP_TAG_LEN : 0);
    uint8_t *p = hs->buf + HS_REPLY_AT; /* length <= 64 KiB: decode checked */
    if (hs_transfer(hs, op, p, plen, false, err) < 0)
      return -1;
    if (tagged && !rp_frame_verify(rx, hb, p, rh.length, p + rh.length)) {
      rp_error_set(err, RP_ERR_AUTH,
                   "%s answered %s with a frame whose authentication tag "
                   "is wrong (altered on the way, or a server with another key): %s",
                   hs->peer, rp_op_name(op), rp_status_advice(RP_ERR_AUTH));
      return -1;
    }
    if (rh.id == 0 && rh.op == RP_OP_ADVISE) { /* a push before the session exists */
      continue;
    }
    /* A server that refuses the connection before reading our request (rampartd at
     * --max-connections) cannot know its id and answers with id 0: its sentence is the
     * reason, whatever frame it came in. */
    bool refused_unread = rh.id == 0 && rh.status != RP_OK;
    if (!refused_unread && (rh.id != id || rh.op != op)) {
      rp_error_set(err, RP_ERR_BAD_FRAME, "%s answered %s with an unexpected %s frame: %s",
                   hs->peer, rp_op_name(op), rp_op_name(rh.op),
                   rp_status_advice(RP_ERR_BAD_FRAME));
      return -1;
    }
    if (rh.status != RP_OK) {
      char said[200];
      client_copy_server_message(said, sizeof said, p, rh.length, rh.status);
      if (refused_unread) {
        /* The sentence is all there is to say: our advice for the status code (NO_SPACE
         * would suggest asking for less) does not fit a refused connection. */
        rp_error_set(err, rh.status, "%s refused the connection: %s", hs->peer, said);
        return -1;
      }
      const char *what = op == RP_OP_AUTH ? "refused authentication"
                                          : "refused the handshake";
      rp_error_set(err, rh.status, "%s %s: %s%s%s", hs->peer, what, said,
                   client_advice_sep(said, rh.status), client_advice_text(said, rh.status));
      return -1;
    }
    *payload = p;
    *len = rh.length;
    return 0;
  }
}

static int connect_one(const struct addrinfo *ai, struct handshake *hs, int *last_errno)
{
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai->ai_protocol);
  if (fd < 0) {
    *last_errno = errno;
    return -1;
  }
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
    return fd;
  if (errno != EINPROGRESS) {
    *last_errno = errno;
    close(fd);
    return -1;
  }
  for (;;) {
    int ms = remaining_ms(hs->deadline_ns);
    if (ms == 0) {
      *last_errno = ETIMEDOUT;
      close(fd);
      return -1;
    }
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    int n = poll(&p, 1, ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      *last_errno = errno;
      close(fd);
      return -1;
    }
    if (n == 0)
      continue; /* loop re-checks the deadline */
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
      soerr = errno;
    if (soerr != 0) {
      *last_errno = soerr;
      close(fd);
      return -1;
    }
    return fd;
  }
}

static int do_connect(const struct rp_conn_options *o, struct handshake *hs,
                      struct rp_error *err)
{
  int last_errno = ECONNREFUSED;
  int fd = -1;
  if (o->addr) { /* resolved once by the caller: no getaddrinfo (it allocates) */
    struct addrinfo ai = { .ai_family = o->addr->sa_family,
                           .ai_socktype = SOCK_STREAM,
                           .ai_addr = (struct sockaddr *)o->addr,
                           .ai_addrlen = o->addr_len };
    fd = connect_one(&ai, hs, &last_errno);
  } else {
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(o->host, o->port, &hints, &res);
    if (gai != 0) {
      rp_error_set(err, RP_ERR_CONNECT, "cannot resolve %s: %s: %s", hs->peer,
                   gai_strerror(gai), rp_status_advice(RP_ERR_CONNECT));
      return -1;
    }
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
      fd = connect_one(ai, hs, &last_errno);
      if (last_errno == ETIMEDOUT && fd < 0)
        break;
    }
    freeaddrinfo(res);
  }
  if (fd < 0) {
    uint16_t code = last_errno == ETIMEDOUT ? RP_ERR_TIMEOUT : RP_ERR_CONNECT;
    rp_error_set(err, code, "cannot connect to %s: %s after %llu ms: %s", hs->peer,
                 strerror(last_errno), ms_since(hs->started_ns), rp_status_advice(code));
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  /* The handshake's requests go out as the data path's do, from the caller's locked
   * buffer (client_conn.c, "Zero-copy sends"): a copying send takes a fresh page
   * fragment, and a reconnect runs when the pager's host may have none to give. */
  hs->zerocopy = setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) == 0;
  hs->fd = fd;
  return 0;
}

/* Version 2: HELLO (no token) -> Challenge, whose MAC proves the server holds the key
 * before we send anything else -> AUTH (tagged: our MAC and the resume token) ->
 * Welcome (tagged). */
static int handshake(const struct rp_conn_options *o, struct handshake *hs,
                     struct rp_frame_auth *tx, struct rp_frame_auth *rx,
                     struct rp_session_info *info, struct rp_error *err)
{
  static const struct rp_key no_key = { .len = 0 };
  const struct rp_key *key = o->key ? o->key : &no_key;

  uint8_t client_nonce[RP_NONCE_LEN];
  if (rp_random_bytes(client_nonce, sizeof client_nonce) < 0) {
    rp_error_set(err, RP_ERR_INTERNAL, "cannot get random bytes for the handshake nonce");
    return -1;
  }
  Rampart__Hello hello = RAMPART__HELLO__INIT;
  hello.magic = RP_HELLO_MAGIC;
  hello.version = RP_PROTOCOL_VERSION;
  hello.client_nonce.data = client_nonce;
  hello.client_nonce.len = sizeof client_nonce;
  hello.client_name = (char *)(o->client_name ? o->client_name : "rampart");
  uint8_t *p = NULL;
  size_t len = 0;
  if (hs_exchange(hs, RP_OP_HELLO, 1, &hello.base, NULL, NULL, &p, &len, err) < 0)
    return -1;
  Rampart__Challenge *ch = rampart__challenge__unpack(&hs->arena, len, p);
  if (!ch) {
    rp_error_set(err, RP_ERR_BAD_FRAME, "%s sent a Challenge that does not decode: %s",
                 hs->peer, rp_status_advice(RP_ERR_BAD_FRAME));
    return -1;
  }
  if (ch->version != RP_PROTOCOL_VERSION) {
    rp_error_set(err, RP_ERR_VERSION, "%s speaks protocol version %u, this client %u: %s",
                 hs->peer, ch->version, RP_PROTOCOL_VERSION,
                 rp_status_advice(RP_ERR_VERSION));
    rampart__challenge__free_unpacked(ch, &hs->arena);
    return -1;
  }
  if (ch->server_nonce.len != RP_NONCE_LEN) {
    rp_error_set(err, RP_ERR_BAD_FRAME, "%s sent a %zu-byte nonce instead of %u: %s",
                 hs->peer, ch->server_nonce.len, RP_NONCE_LEN,
                 rp_status_advice(RP_ERR_BAD_FRAME));
    rampart__challenge__free_unpacked(ch, &hs->arena);
    return -1;
  }
  uint8_t server_nonce[RP_NONCE_LEN];
  memcpy(server_nonce, ch->server_nonce.data, RP_NONCE_LEN);
  uint8_t expect[RP_MAC_LEN];
  rp_auth_server_mac(key, client_nonce, server_nonce, expect);
  bool server_proved = rp_mac_matches(expect, ch->server_mac.data, ch->server_mac.len);
  rampart__challenge__free_unpacked(ch, &hs->arena);
  if (!server_proved) {
    /* Nothing more goes to it: no MAC of ours, and above all no resume token. */
    rp_error_set(err, RP_ERR_AUTH,
                 "wrong cluster key: %s could not prove it holds ours "
                 "(%s); nothing was sent to it: %s",
                 hs->peer,
                 key->len ? "it was started with another key, or with none, or it is not "
                            "the server it claims to be"
                          : "it expects a key and this client has none",
                 rp_status_advice(RP_ERR_AUTH));
    return -1;
  }
  struct rp_session_keys keys;
  rp_session_keys_derive(key, client_nonce, server_nonce, &keys);
  int rc = rp_frame_auth_init(tx, keys.client_to_server) |
           rp_frame_auth_init(rx, keys.server_to_client);
  rp_session_keys_wipe(&keys);
  if (rc != 0) {
    rp_error_set(err, RP_ERR_INTERNAL,
                 "cannot set up frame authentication (libcrypto "
                 "failed)");
    return -1;
  }

  uint8_t mac[RP_MAC_LEN];
  rp_auth_client_mac(key, server_nonce, client_nonce, mac);
  Rampart__Auth auth = RAMPART__AUTH__INIT;
  auth.client_mac.data = mac;
  auth.client_mac.len = sizeof mac;
  if (o->resume_token) {
    auth.resume_token.data = (uint8_t *)o->resume_token;
    auth.resume_token.len = RP_TOKEN_LEN;
  }
  if (hs_exchange(hs, RP_OP_AUTH, 2, &auth.base, tx, rx, &p, &len, err) < 0)
    return -1;
  Rampart__Welcome *wel = rampart__welcome__unpack(&hs->arena, len, p);
  if (!wel) {
    rp_error_set(err, RP_ERR_BAD_FRAME, "%s sent a Welcome that does not decode: %s",
                 hs->peer, rp_status_advice(RP_ERR_BAD_FRAME));
    return -1;
  }
  if (wel->session_token.len != RP_TOKEN_LEN || wel->page_size != RP_PAGE_SIZE) {
    rp_error_set(err, RP_ERR_VERSION,
                 "%s sent a session token of %zu bytes and a page size "
                 "of %u (expected %u and %u): %s",
                 hs->peer, wel->session_token.len, wel->page_size, RP_TOKEN_LEN, RP_PAGE_SIZE,
                 rp_status_advice(RP_ERR_VERSION));
    rampart__welcome__free_unpacked(wel, &hs->arena);
    return -1;
  }
  if (info) {
    memset(info, 0, sizeof *info);
    memcpy(info->token, wel->session_token.data, RP_TOKEN_LEN);
    info->resumed = wel->resumed;
    info->page_size = wel->page_size;
    info->capacity_pages = wel->capacity_pages;
    info->free_pages = wel->free_pages;
    info->lease_seconds = wel->lease_seconds;
    info->reserved_pages = wel->reserved_pages;
    info->pressure = wel->pressure;
  }
  rampart__welcome__free_unpacked(wel, &hs->arena);
  return 0;
}

int client_connect(const struct rp_conn_options *o, const char *peer, uint32_t timeout_ms,
                   uint8_t *buf, size_t buf_len, struct rp_frame_auth *tx,
                   struct rp_frame_auth *rx, int *fd, uint32_t *zerocopy_sends,
                   struct rp_session_info *info, struct rp_error *err)
{
  if (buf_len < CLIENT_HANDSHAKE_BUF) {
    rp_error_set(err, RP_ERR_INTERNAL, "handshake buffer too small");
    return -1;
  }
  uint64_t now = rp_now_ns();
  struct handshake hs = { .fd = -1,
                          .started_ns = now,
                          .deadline_ns = now + (uint64_t)timeout_ms * 1000000u,
                          .peer = peer,
                          .buf = buf };
  hs.arena =
    (ProtobufCAllocator){ .alloc = arena_alloc, .free = arena_free, .allocator_data = &hs };
  if (do_connect(o, &hs, err) < 0)
    return -1;
  if (handshake(o, &hs, tx, rx, info, err) < 0) {
    close(hs.fd);
    return -1;
  }
  *fd = hs.fd;
  *zerocopy_sends = hs.zc_sends;
  return 0;
}
