/* bench/floor's server: what any memory server must do per page, and nothing more.
 * One blocking recv takes whatever has arrived (a whole batch, when the client sent it
 * in one writev); every complete frame in it has its tag checked and is served (a WRITE's
 * page copied into the preallocated store, a READ answered from it); then all the
 * replies go out in one writev, a READ's page straight from the store. */
#include "floor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* A recv holds at most a QD of frames plus the marks: one reply each. */
#define MAX_REPLIES (FLOOR_MAX_QD + 8u)

struct server {
  struct floor_link link;
  uint8_t *store;
  uint64_t store_pages;
  uint8_t *recv_buf;
  size_t have;          /* bytes in recv_buf */
  uint8_t *reply_bytes; /* reply headers and tags, back to back */
  size_t reply_len;
  struct iovec iov[3 * MAX_REPLIES];
  int iovcnt;
  struct floor_shared *shared;
  bool goodbye;
};

/* Copies a page into the store. The store is far larger than the caches and slots come
 * at random, so an ordinary copy first reads each destination line from memory only to
 * overwrite it whole; streaming stores skip that read. */
static void store_page(uint8_t *dst, const uint8_t *src)
{
#if defined(__SSE2__)
  for (size_t i = 0; i < FLOOR_PAGE; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
    _mm_stream_si128((__m128i *)(dst + i), a);
    _mm_stream_si128((__m128i *)(dst + i + 16), b);
    _mm_stream_si128((__m128i *)(dst + i + 32), c);
    _mm_stream_si128((__m128i *)(dst + i + 48), d);
  }
  _mm_sfence();
#else
  memcpy(dst, src, FLOOR_PAGE);
#endif
}

static int fail(struct server *s, const char *what)
{
  snprintf(s->shared->error, sizeof s->shared->error, "server: %s", what);
  return -1;
}

/* Adds bytes to the reply batch, joining them to the previous iovec when they follow it
 * (consecutive acknowledgements are one run of bytes). */
static void add_iov(struct server *s, const uint8_t *base, size_t len)
{
  struct iovec *last = s->iovcnt ? &s->iov[s->iovcnt - 1] : NULL;
  if (last && (const uint8_t *)last->iov_base + last->iov_len == base) {
    last->iov_len += len;
    return;
  }
  s->iov[s->iovcnt++] = (struct iovec){ .iov_base = (void *)base, .iov_len = len };
}

/* Queues the reply to `req`: its header, `payload` (a store page, or NULL), its tag. */
static int reply(struct server *s, const struct rp_header *req, const uint8_t *payload)
{
  uint32_t len = payload ? FLOOR_PAGE : 0;
  struct rp_header h;
  rp_header_reply(&h, req, RP_OK, len);
  uint8_t *out = s->reply_bytes + s->reply_len;
  rp_header_encode(&h, out);
  if (rp_frame_tag(&s->link.send_auth, out, payload, len, out + RP_HEADER_SIZE) < 0)
    return fail(s, "cannot tag a reply");
  s->reply_len += FLOOR_BARE_FRAME;
  add_iov(s, out, RP_HEADER_SIZE);
  if (payload)
    add_iov(s, payload, FLOOR_PAGE);
  add_iov(s, out + RP_HEADER_SIZE, RP_TAG_LEN);
  return 0;
}

static void mark(struct server *s, uint64_t id)
{
  struct floor_mark *m = &s->shared->server[id == FLOOR_MARK_START ? 0 : 1];
  getrusage(RUSAGE_SELF, &m->usage);
  m->syscalls = s->link.syscalls;
}

/* Serves one whole frame at `f`; its header decoded into h. */
static int serve_frame(struct server *s, const uint8_t *f, const struct rp_header *h)
{
  const uint8_t *payload = f + RP_HEADER_SIZE;
  if (!rp_frame_verify(&s->link.recv_auth, f, payload, h->length, payload + h->length))
    return fail(s, "a frame failed its tag");
  switch (h->op) {
  case RP_OP_WRITE:
    if (h->slot >= s->store_pages)
      return fail(s, "WRITE past the store");
    store_page(s->store + h->slot * FLOOR_PAGE, payload);
    s->shared->pages_stored++;
    return reply(s, h, NULL);
  case RP_OP_READ:
    if (h->slot >= s->store_pages)
      return fail(s, "READ past the store");
    s->shared->pages_served++;
    return reply(s, h, s->store + h->slot * FLOOR_PAGE);
  case RP_OP_PING:
    mark(s, h->id);
    return reply(s, h, NULL);
  case RP_OP_GOODBYE:
    s->goodbye = true;
    return reply(s, h, NULL);
  default:
    return fail(s, "unexpected op");
  }
}

/* Serves every complete frame in the buffer; keeps a partial one for the next recv. */
static int serve_buffer(struct server *s)
{
  size_t pos = 0;
  while (s->have - pos >= RP_HEADER_SIZE) {
    struct rp_header h;
    const char *why = NULL;
    if (rp_header_decode(s->recv_buf + pos, RP_FROM_CLIENT, &h, &why) != RP_OK)
      return fail(s, why ? why : "bad header");
    size_t need = RP_HEADER_SIZE + h.length + RP_TAG_LEN;
    if (s->have - pos < need)
      break;
    if (s->reply_len + FLOOR_BARE_FRAME > MAX_REPLIES * FLOOR_BARE_FRAME)
      return fail(s, "more frames in flight than the floor allows");
    if (serve_frame(s, s->recv_buf + pos, &h) < 0)
      return -1;
    pos += need;
  }
  if (s->iovcnt && floor_writev_all(&s->link, s->iov, s->iovcnt) < 0)
    return fail(s, "cannot send replies");
  s->iovcnt = 0;
  s->reply_len = 0;
  memmove(s->recv_buf, s->recv_buf + pos, s->have - pos);
  s->have -= pos;
  return 0;
}

int floor_serve(int fd, const struct rp_session_keys *keys, uint64_t store_pages,
                struct floor_shared *shared)
{
  struct server s = { .link = { .fd = fd }, .store_pages = store_pages, .shared = shared };
  s.store = mmap(NULL, store_pages * FLOOR_PAGE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  s.recv_buf = malloc(FLOOR_RECV_BUFFER);
  s.reply_bytes = malloc(MAX_REPLIES * FLOOR_BARE_FRAME);
  int r = -1;
  if (s.store == MAP_FAILED || !s.recv_buf || !s.reply_bytes) {
    s.store = NULL;
    fail(&s, "out of memory for the store");
    goto out;
  }
  if (rp_frame_auth_init(&s.link.recv_auth, keys->client_to_server) < 0 ||
      rp_frame_auth_init(&s.link.send_auth, keys->server_to_client) < 0) {
    fail(&s, "cannot key the frame tags");
    goto out;
  }
  while (!s.goodbye) {
    ssize_t n = floor_recv_some(&s.link, s.recv_buf + s.have, FLOOR_RECV_BUFFER - s.have);
    if (n <= 0) {
      fail(&s, n == 0 ? "the client closed without GOODBYE" : strerror(errno));
      goto out;
    }
    s.have += (size_t)n;
    if (serve_buffer(&s) < 0)
      goto out;
  }
  r = 0;
out:
  rp_frame_auth_free(&s.link.recv_auth);
  rp_frame_auth_free(&s.link.send_auth);
  if (s.store)
    munmap(s.store, store_pages * FLOOR_PAGE);
  free(s.recv_buf);
  free(s.reply_bytes);
  return r;
}
