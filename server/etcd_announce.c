/* rampartd's registration in etcd (see etcd_announce.h).
 *
 *   servers/ID  address, failure domain, capacity, version: put once a lease is granted
 *   free/ID     free pages, pressure, draining: put at once when pressure or draining
 *               flips, and when free memory has moved by 5% of capacity, at most every
 *               5 s (free memory moves with every client's reservation; 1,000 servers
 *               must not write it a thousand times a second)
 *
 * Both under one lease (TTL 10 s, kept alive every 3 s), so a server that dies leaves
 * the registry within 10 s; a clean stop revokes it. A lease etcd forgot (etcd was down
 * longer than the TTL) is granted again and both keys are written again.
 */
#include "etcd_announce.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "cluster_keys.h"
#include "etcd_gateway.h"
#include "log.h"
#include "thread_start.h"

#define LEASE_TTL_S 10u
#define KEEPALIVE_MS 3000u
#define FREE_STEP_PERCENT 5u
#define FREE_MIN_INTERVAL_MS 5000u
#define RETRY_MAX_MS 5000u
#define CALL_TIMEOUT_MS 2000u
#define REPLY_MAX (16u * 1024u)
#define THREAD_STACK (256u * 1024u)

struct snapshot {
  uint64_t capacity_pages, free_pages;
  bool pressure, draining;
};

struct rps_announce {
  struct rps_server *srv;
  ev_timer feed; /* the loop's side: copies numbers once a second */
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bool stopping;          /* under lock */
  struct snapshot latest; /* under lock */
  bool changed;           /* under lock */
  /* the thread's own */
  struct rp_etcd *etcd;
  int64_t lease;
  struct snapshot published;
  uint64_t free_put_ms, keepalive_ok_ms;
  bool free_put_once;
  char server_key[RP_ETCD_KEY_MAX], free_key[RP_ETCD_KEY_MAX];
  char server_value[RP_ETCD_VALUE_MAX], free_value[RP_ETCD_VALUE_MAX];
  char advertise[RP_CLUSTER_ADDRESS_LEN];
  char err[512];
  bool down_logged;
};

static struct snapshot take_snapshot(struct rps_server *srv)
{
  struct rps_store_stats ss;
  rps_store_get_stats(srv->store, &ss);
  return (struct snapshot){
    .capacity_pages = ss.capacity_pages,
    .free_pages = ss.free_pages,
    .pressure = rps_pressure_active(srv->pressure),
    .draining = rps_pressure_draining(srv->pressure),
  };
}

static void on_feed(struct ev_loop *loop, ev_timer *w, int revents)
{
  struct rps_announce *a = w->data;
  struct snapshot s = take_snapshot(a->srv);
  pthread_mutex_lock(&a->lock);
  if (memcmp(&s, &a->latest, sizeof s) != 0) {
    a->latest = s;
    a->changed = true;
    pthread_cond_signal(&a->wake);
  }
  pthread_mutex_unlock(&a->lock);
}

static void log_down(struct rps_announce *a, const char *what)
{
  if (a->down_logged)
    return;
  a->down_logged = true;
  rp_log(RP_LOG_WARN,
         "etcd: cannot %s: %s; serving goes on, and this server keeps trying "
         "to register",
         what, a->err);
}

static int put_free(struct rps_announce *a, const struct snapshot *s)
{
  rp_cluster_free_value(a->free_value, sizeof a->free_value, s->free_pages, s->pressure,
                        s->draining);
  if (rp_etcd_put(a->etcd, a->free_key, a->free_value, a->lease, a->err, sizeof a->err) < 0)
    return -1;
  if (s->draining && !a->published.draining)
    rp_log(RP_LOG_INFO, "etcd: draining published: devices that follow the cluster move "
                        "their pages off this server");
  a->published = *s;
  a->free_put_ms = rp_now_ms();
  a->free_put_once = true;
  return 0;
}

static int register_now(struct rps_announce *a, const struct snapshot *s)
{
  if (rp_etcd_lease_grant(a->etcd, LEASE_TTL_S, &a->lease, a->err, sizeof a->err) < 0) {
    a->lease = 0;
    return -1;
  }
  rp_cluster_server_value(a->server_value, sizeof a->server_value, a->advertise,
                          a->srv->opt->failure_domain, s->capacity_pages, RAMPARTD_VERSION);
  if (rp_etcd_put(a->etcd, a->server_key, a->server_value, a->lease, a->err, sizeof a->err) <
        0 ||
      put_free(a, s) < 0) {
    char ignored[128];
    rp_etcd_lease_revoke(a->etcd, a->lease, ignored, sizeof ignored);
    a->lease = 0;
    return -1;
  }
  a->keepalive_ok_ms = rp_now_ms();
  rp_log(RP_LOG_INFO, "etcd: registered as %s (lease %llx, %u s) at %s", a->server_key,
         (unsigned long long)a->lease, LEASE_TTL_S, rp_etcd_endpoint(a->etcd));
  a->down_logged = false;
  return 0;
}

static bool free_is_due(const struct rps_announce *a, const struct snapshot *s)
{
  if (!a->free_put_once || s->pressure != a->published.pressure ||
      s->draining != a->published.draining)
    return true;
  uint64_t step = s->capacity_pages * FREE_STEP_PERCENT / 100u;
  uint64_t moved = s->free_pages > a->published.free_pages
                     ? s->free_pages - a->published.free_pages
                     : a->published.free_pages - s->free_pages;
  return moved > 0 && moved >= step && rp_now_ms() - a->free_put_ms >= FREE_MIN_INTERVAL_MS;
}

static void keep_alive(struct rps_announce *a)
{
  int64_t ttl = 0;
  if (rp_etcd_lease_keepalive(a->etcd, a->lease, &ttl, a->err, sizeof a->err) < 0) {
    log_down(a, "keep the registration alive");
    /* Past the TTL etcd has dropped the keys: register again when it answers. */
    if (rp_now_ms() - a->keepalive_ok_ms > LEASE_TTL_S * 1000u)
      a->lease = 0;
    return;
  }
  if (ttl == 0) {
    rp_log(RP_LOG_WARN,
           "etcd: the registration's lease expired (etcd was out of reach "
           "longer than %u s); registering again",
           LEASE_TTL_S);
    a->lease = 0;
    return;
  }
  a->keepalive_ok_ms = rp_now_ms();
  if (a->down_logged) {
    rp_log(RP_LOG_INFO, "etcd: reachable again at %s", rp_etcd_endpoint(a->etcd));
    a->down_logged = false;
  }
}

static void *announce_thread(void *arg)
{
  struct rps_announce *a = arg;
  uint64_t next_keepalive = 0, retry_ms = 250;
  for (;;) {
    pthread_mutex_lock(&a->lock);
    struct snapshot s = a->latest;
    a->changed = false;
    bool stopping = a->stopping;
    pthread_mutex_unlock(&a->lock);
    if (stopping)
      break;
    uint64_t wait_ms;
    if (a->lease == 0) {
      if (register_now(a, &s) < 0) {
        log_down(a, "register");
        wait_ms = retry_ms;
        retry_ms = retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : retry_ms * 2;
      } else {
        retry_ms = 250;
        next_keepalive = rp_now_ms() + KEEPALIVE_MS;
        wait_ms = KEEPALIVE_MS;
      }
    } else {
      if (rp_now_ms() >= next_keepalive) {
        keep_alive(a);
        next_keepalive = rp_now_ms() + (a->down_logged ? 1000u : KEEPALIVE_MS);
      }
      if (a->lease && free_is_due(a, &s) && put_free(a, &s) < 0)
        log_down(a, "publish free memory");
      uint64_t now = rp_now_ms();
      wait_ms = next_keepalive > now ? next_keepalive - now : 0;
      /* A free-memory step held back by the rate limit is looked at again when due. */
      if (a->lease && !free_is_due(a, &s) && s.free_pages != a->published.free_pages &&
          a->free_put_ms + FREE_MIN_INTERVAL_MS > now &&
          a->free_put_ms + FREE_MIN_INTERVAL_MS - now < wait_ms)
        wait_ms = a->free_put_ms + FREE_MIN_INTERVAL_MS - now;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(wait_ms / 1000u);
    until.tv_nsec += (long)(wait_ms % 1000u) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&a->lock);
    while (!a->stopping && !a->changed &&
           pthread_cond_timedwait(&a->wake, &a->lock, &until) != ETIMEDOUT)
      ;
    pthread_mutex_unlock(&a->lock);
  }
  if (a->lease) {
    if (rp_etcd_lease_revoke(a->etcd, a->lease, a->err, sizeof a->err) == 0)
      rp_log(RP_LOG_INFO, "etcd: registration withdrawn (%s)", a->server_key);
    else
      rp_log(RP_LOG_WARN,
             "etcd: cannot withdraw the registration: %s; it expires within "
             "%u s",
             a->err, LEASE_TTL_S);
  }
  return NULL;
}

struct rps_announce *rps_announce_start(struct rps_server *srv, const char *advertise,
                                        char *err, size_t errlen)
{
  const struct rps_options *o = srv->opt;
  struct rps_announce *a = calloc(1, sizeof *a);
  if (!a) {
    snprintf(err, errlen, "out of memory for the etcd announcer");
    return NULL;
  }
  a->srv = srv;
  snprintf(a->advertise, sizeof a->advertise, "%s", advertise);
  if (rp_cluster_key(a->server_key, sizeof a->server_key, o->cluster, "servers", advertise) <
        0 ||
      rp_cluster_key(a->free_key, sizeof a->free_key, o->cluster, "free", advertise) < 0) {
    snprintf(err, errlen, "--cluster or --advertise too long");
    free(a);
    return NULL;
  }
  struct rp_etcd_options eo = {
    .endpoints = o->etcd_endpoints,
    .cacert = o->etcd_cacert,
    .cert = o->etcd_cert,
    .key = o->etcd_key,
    .timeout_ms = CALL_TIMEOUT_MS,
    .reply_max = REPLY_MAX,
  };
  char why[512];
  a->etcd = rp_etcd_new(&eo, why, sizeof why);
  if (!a->etcd) {
    snprintf(err, errlen, "--etcd: %s", why);
    free(a);
    return NULL;
  }
  pthread_mutex_init(&a->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_cond_init(&a->wake, &ca);
  pthread_condattr_destroy(&ca);
  a->latest = take_snapshot(srv);
  /* A second thread that mallocs gets an arena of its own, a 64 MiB reservation that
   * mlockall counts as locked (VmLck) though little of it is ever touched; rampartd's
   * one other thread is the event loop, so one shared arena costs no contention. */
  mallopt(M_ARENA_MAX, 1);
  int rc = rp_thread_start(&a->thread, "rampartd-etcd", THREAD_STACK, announce_thread, a);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start the etcd thread: %s", strerror(rc));
    rp_etcd_free(a->etcd);
    free(a);
    return NULL;
  }
  ev_timer_init(&a->feed, on_feed, 1.0, 1.0);
  a->feed.data = a;
  ev_timer_start(srv->loop, &a->feed);
  return a;
}

void rps_announce_stop(struct rps_announce *a)
{
  if (!a)
    return;
  ev_timer_stop(a->srv->loop, &a->feed);
  pthread_mutex_lock(&a->lock);
  a->stopping = true;
  pthread_cond_signal(&a->wake);
  pthread_mutex_unlock(&a->lock);
  pthread_join(a->thread, NULL);
  rp_etcd_free(a->etcd);
  pthread_mutex_destroy(&a->lock);
  pthread_cond_destroy(&a->wake);
  free(a);
}
