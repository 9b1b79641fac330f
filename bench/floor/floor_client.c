/* bench/floor's client: seals and tags QD frames at a time straight into one send
 * buffer and sends each batch in one call; one blocking recv takes every reply that has
 * arrived, and each is checked (and, for a READ, its page opened into the caller's
 * buffer) before the slots it freed are refilled. Nothing is allocated per frame. */
#include "clock.h"
#include "floor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "xorshift.h"

#define PLAIN_PAGES 64u /* distinct source pages, so the cipher never sees one page only */

struct slot_seal {
  uint64_t version;
  uint8_t tag[FLOOR_SEAL_TAG];
};

struct floor_client {
  struct floor_link link;
  struct floor_sealer sealer;
  uint64_t store_pages;
  struct slot_seal *seals; /* per slot: what opening it needs (rampart's page_seal) */
  uint8_t *plain;          /* PLAIN_PAGES source pages */
  uint8_t *opened;         /* FLOOR_MAX_QD destination pages for reads */
  uint8_t *send_buf;       /* FLOOR_MAX_QD frames */
  uint8_t *recv_buf;
  size_t have;
  uint64_t next_id, rng;
  unsigned inflight;
  uint64_t done; /* pages completed */
  bool mark_answered, goodbye_answered;
};


struct floor_client *floor_client_new(int fd, const struct rp_session_keys *keys,
                                      uint64_t store_pages)
{
  struct floor_client *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->link.fd = fd;
  c->store_pages = store_pages;
  c->rng = UINT64_C(0x9E3779B97F4A7C15);
  c->next_id = 16;
  uint8_t page_key[FLOOR_SEAL_KEY];
  c->seals = calloc(store_pages, sizeof *c->seals);
  c->plain = malloc((size_t)PLAIN_PAGES * FLOOR_PAGE);
  c->opened = malloc((size_t)FLOOR_MAX_QD * FLOOR_PAGE);
  c->send_buf = malloc((size_t)FLOOR_MAX_QD * FLOOR_PAGE_FRAME);
  c->recv_buf = malloc(FLOOR_RECV_BUFFER);
  if (!c->seals || !c->plain || !c->opened || !c->send_buf || !c->recv_buf ||
      rp_random_bytes(page_key, sizeof page_key) < 0 ||
      rp_random_bytes(c->plain, (size_t)PLAIN_PAGES * FLOOR_PAGE) < 0 ||
      floor_sealer_init(&c->sealer, page_key) < 0 ||
      rp_frame_auth_init(&c->link.send_auth, keys->client_to_server) < 0 ||
      rp_frame_auth_init(&c->link.recv_auth, keys->server_to_client) < 0) {
    floor_client_free(c);
    return NULL;
  }
  /* touched now, as a pager's buffers are locked at start */
  memset(c->opened, 0, (size_t)FLOOR_MAX_QD * FLOOR_PAGE);
  memset(c->send_buf, 0, (size_t)FLOOR_MAX_QD * FLOOR_PAGE_FRAME);
  memset(c->recv_buf, 0, FLOOR_RECV_BUFFER);
  return c;
}

void floor_client_free(struct floor_client *c)
{
  if (!c)
    return;
  floor_sealer_free(&c->sealer);
  rp_frame_auth_free(&c->link.send_auth);
  rp_frame_auth_free(&c->link.recv_auth);
  free(c->seals);
  free(c->plain);
  free(c->opened);
  free(c->send_buf);
  free(c->recv_buf);
  free(c);
}

/* Builds a frame for op at `out`: header, then (WRITE) the page sealed in place, then
 * the frame tag. Returns the frame's length. */
static size_t build_frame(struct floor_client *c, uint8_t op, uint64_t slot, uint64_t id,
                          uint8_t *out)
{
  struct rp_header h = { .magic = RP_FRAME_MAGIC, .op = op, .id = id, .slot = slot };
  uint8_t *payload = out + RP_HEADER_SIZE;
  if (op == RP_OP_WRITE) {
    h.length = FLOOR_PAGE;
    struct slot_seal *seal = &c->seals[slot];
    seal->version = floor_seal(&c->sealer, slot, c->plain + (slot % PLAIN_PAGES) * FLOOR_PAGE,
                               payload, seal->tag);
  }
  rp_header_encode(&h, out);
  if (rp_frame_tag(&c->link.send_auth, out, payload, h.length, payload + h.length) < 0)
    return 0;
  return RP_HEADER_SIZE + h.length + RP_TAG_LEN;
}

/* Checks one reply; a READ's page is opened into a destination buffer. */
static int take_reply(struct floor_client *c, const uint8_t *f, const struct rp_header *h,
                      char *err, size_t errlen)
{
  const uint8_t *payload = f + RP_HEADER_SIZE;
  if (!rp_frame_verify(&c->link.recv_auth, f, payload, h->length, payload + h->length)) {
    snprintf(err, errlen, "a reply failed its frame tag");
    return -1;
  }
  if (h->status != RP_OK) {
    snprintf(err, errlen, "the server answered %s", rp_status_name(h->status));
    return -1;
  }
  switch (h->op) {
  case RP_OP_READ: {
    if (h->slot >= c->store_pages) {
      snprintf(err, errlen, "a READ reply for slot %llu, past the store",
               (unsigned long long)h->slot);
      return -1;
    }
    const struct slot_seal *seal = &c->seals[h->slot];
    uint8_t *dest = c->opened + (h->id % FLOOR_MAX_QD) * FLOOR_PAGE;
    if (!floor_open(&c->sealer, h->slot, seal->version, seal->tag, payload, dest)) {
      snprintf(err, errlen, "page %llu read back failed its seal",
               (unsigned long long)h->slot);
      return -1;
    }
    c->inflight--;
    c->done++;
    return 0;
  }
  case RP_OP_WRITE:
    c->inflight--;
    c->done++;
    return 0;
  case RP_OP_PING:
    c->mark_answered = true;
    return 0;
  case RP_OP_GOODBYE:
    c->goodbye_answered = true;
    return 0;
  default:
    snprintf(err, errlen, "unexpected reply op %u", h->op);
    return -1;
  }
}

/* One blocking recv, and every complete reply in the buffer taken. */
static int receive(struct floor_client *c, char *err, size_t errlen)
{
  ssize_t n = floor_recv_some(&c->link, c->recv_buf + c->have, FLOOR_RECV_BUFFER - c->have);
  if (n <= 0) {
    snprintf(err, errlen, "the server closed the connection%s", n < 0 ? " (error)" : "");
    return -1;
  }
  c->have += (size_t)n;
  size_t pos = 0;
  while (c->have - pos >= RP_HEADER_SIZE) {
    struct rp_header h;
    const char *why = NULL;
    if (rp_header_decode(c->recv_buf + pos, RP_FROM_SERVER, &h, &why) != RP_OK) {
      snprintf(err, errlen, "bad reply header: %s", why ? why : "?");
      return -1;
    }
    size_t need = RP_HEADER_SIZE + h.length + RP_TAG_LEN;
    if (c->have - pos < need)
      break;
    if (take_reply(c, c->recv_buf + pos, &h, err, errlen) < 0)
      return -1;
    pos += need;
  }
  memmove(c->recv_buf, c->recv_buf + pos, c->have - pos);
  c->have -= pos;
  return 0;
}

/* Sends `count` new frames of op in one call; sequential slots from *next_slot when it
 * is given, else random ones. */
static int send_batch(struct floor_client *c, uint8_t op, unsigned count, uint64_t *next_slot,
                      char *err, size_t errlen)
{
  size_t len = 0;
  for (unsigned i = 0; i < count; i++) {
    uint64_t slot = next_slot ? (*next_slot)++ : rp_xorshift64s(&c->rng) % c->store_pages;
    size_t n = build_frame(c, op, slot, c->next_id++, c->send_buf + len);
    if (n == 0) {
      snprintf(err, errlen, "cannot seal or tag a frame (OpenSSL failed)");
      return -1;
    }
    len += n;
  }
  if (floor_send_all(&c->link, c->send_buf, len) < 0) {
    snprintf(err, errlen, "cannot send to the server");
    return -1;
  }
  c->inflight += count;
  return 0;
}

/* A PING that brackets the measured window: the server takes its account when it
 * serves it; nothing else is in flight. */
static int exchange_mark(struct floor_client *c, uint64_t id, char *err, size_t errlen)
{
  size_t n = build_frame(c, RP_OP_PING, 0, id, c->send_buf);
  c->mark_answered = false;
  if (n == 0 || floor_send_all(&c->link, c->send_buf, n) < 0) {
    snprintf(err, errlen, "cannot send a mark to the server");
    return -1;
  }
  while (!c->mark_answered)
    if (receive(c, err, errlen) < 0)
      return -1;
  return 0;
}

int floor_client_prefill(struct floor_client *c, char *err, size_t errlen)
{
  uint64_t next = 0;
  while (next < c->store_pages) {
    uint64_t left = c->store_pages - next;
    if (send_batch(c, RP_OP_WRITE, left < 32 ? (unsigned)left : 32u, &next, err, errlen) < 0)
      return -1;
    while (c->inflight)
      if (receive(c, err, errlen) < 0)
        return -1;
  }
  return 0;
}

int floor_client_run(struct floor_client *c, enum floor_form form, unsigned qd,
                     double seconds, struct floor_result *out, char *err, size_t errlen)
{
  uint8_t op = form == FLOOR_WRITE ? RP_OP_WRITE : RP_OP_READ;
  memset(out, 0, sizeof *out);
  out->form = form;
  out->qd = qd;
  if (exchange_mark(c, FLOOR_MARK_START, err, errlen) < 0)
    return -1;
  getrusage(RUSAGE_SELF, &out->client[0].usage);
  out->client[0].syscalls = c->link.syscalls;
  uint64_t done0 = c->done;
  double t0 = rp_now_seconds(), end = t0 + seconds;
  while (rp_now_seconds() < end) {
    if (c->inflight < qd && send_batch(c, op, qd - c->inflight, NULL, err, errlen) < 0)
      return -1;
    if (receive(c, err, errlen) < 0)
      return -1;
  }
  while (c->inflight)
    if (receive(c, err, errlen) < 0)
      return -1;
  out->seconds = rp_now_seconds() - t0;
  getrusage(RUSAGE_SELF, &out->client[1].usage);
  out->client[1].syscalls = c->link.syscalls;
  out->pages = c->done - done0;
  return exchange_mark(c, FLOOR_MARK_END, err, errlen);
}

int floor_client_goodbye(struct floor_client *c)
{
  char err[128];
  size_t n = build_frame(c, RP_OP_GOODBYE, 0, c->next_id++, c->send_buf);
  if (n == 0 || floor_send_all(&c->link, c->send_buf, n) < 0)
    return -1;
  while (!c->goodbye_answered)
    if (receive(c, err, sizeof err) < 0)
      return -1;
  return 0;
}
