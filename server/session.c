/* Session table (see session.h). Sessions are few (one per client, not per page) and
 * looked up only during a handshake, so a list scanned with a constant-time compare is
 * enough: no index structure to get wrong. */
#include "session.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "dlist.h"
#include "log.h"

static void set_name(struct rps_session *s, const char *client_name)
{
  /* The name comes from the client: keep it printable so it cannot forge log lines. */
  size_t n = 0;
  for (const char *p = client_name ? client_name : ""; *p && n < sizeof s->client_name - 1;
       p++)
    s->client_name[n++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
  s->client_name[n] = '\0';
  if (n == 0)
    snprintf(s->client_name, sizeof s->client_name, "unnamed");
}

static void lease_expired(struct ev_loop *loop, ev_timer *w, int revents)
{
  struct rps_session *s = w->data;
  struct rps_sessions *t = s->table;
  rp_log(RP_LOG_INFO, "session %s (%s) expired after its %g s lease: freed %llu pages", s->id,
         s->client_name, t->lease_seconds, (unsigned long long)rps_account_stored(s->acct));
  t->expired++;
  rps_session_destroy(t, s);
}

struct rps_sessions *rps_sessions_create(struct ev_loop *loop, struct rps_store *store,
                                         double lease_seconds)
{
  struct rps_sessions *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  t->loop = loop;
  t->store = store;
  t->lease_seconds = lease_seconds;
  return t;
}

void rps_sessions_destroy(struct rps_sessions *t)
{
  if (!t)
    return;
  while (t->head)
    rps_session_destroy(t, t->head);
  free(t);
}

struct rps_session *rps_session_create(struct rps_sessions *t, void *conn,
                                       const char *client_name)
{
  struct rps_session *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  if (rp_random_bytes(s->token, sizeof s->token) < 0 ||
      !(s->acct = rps_account_create(t->store))) {
    free(s);
    return NULL;
  }
  for (int i = 0; i < 4; i++)
    snprintf(s->id + 2 * i, 3, "%02x", s->token[i]);
  set_name(s, client_name);
  s->table = t;
  s->conn = conn;
  ev_timer_init(&s->lease, lease_expired, t->lease_seconds, 0.);
  s->lease.data = s;
  DLIST_PUSH(t->head, s, prev, next);
  t->attached++;
  return s;
}

struct rps_session *rps_session_find(struct rps_sessions *t, const uint8_t *token, size_t len)
{
  if (len != RP_TOKEN_LEN)
    return NULL;
  for (struct rps_session *s = t->head; s; s = s->next)
    if (CRYPTO_memcmp(s->token, token, RP_TOKEN_LEN) == 0)
      return s;
  return NULL;
}

void *rps_session_attach(struct rps_sessions *t, struct rps_session *s, void *conn,
                         const char *client_name)
{
  void *old = s->conn;
  if (!old) {
    ev_timer_stop(t->loop, &s->lease);
    t->detached--;
    t->attached++;
  }
  s->conn = conn;
  set_name(s, client_name);
  return old;
}

void rps_session_detach(struct rps_sessions *t, struct rps_session *s)
{
  if (!s->conn)
    return;
  s->conn = NULL;
  t->attached--;
  t->detached++;
  ev_timer_set(&s->lease, t->lease_seconds, 0.);
  ev_timer_start(t->loop, &s->lease);
}

uint32_t rps_sessions_count(const struct rps_sessions *t)
{
  return t->attached + t->detached;
}

void rps_session_destroy(struct rps_sessions *t, struct rps_session *s)
{
  if (s->conn) {
    t->attached--;
  } else {
    ev_timer_stop(t->loop, &s->lease);
    t->detached--;
  }
  DLIST_UNLINK(t->head, s, prev, next);
  rps_account_destroy(t->store, s->acct);
  OPENSSL_cleanse(s->token, sizeof s->token);
  free(s);
}
