/* A device that follows its cluster in etcd (see cluster_follow.h). */
#include "cluster_follow.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cluster_keys.h"
#include "rampart.h"
#include "engine_internal.h"
#include "etcd_gateway.h"
#include "file_create.h"
#include "log.h"
#include "thread_start.h"

#define REGISTRY_MAX 1024u        /* servers registered at once */
#define REPLY_MAX (1024u * 1024u) /* one page of a range read, one watch message */
#define CALL_TIMEOUT_MS 3000u
#define WATCH_WINDOW_MS 5000u /* re-watch (and look at the losses) this often */
#define REFUSED_RETRY_MS 60000u
#define ADDS_PER_PASS 8u
#define THREAD_STACK (256u * 1024u)
#define RECORD_TTL_S 30u /* devices/ record: gone 30 s after a crash */
#define RECORD_KEEPALIVE_MS 10000u

struct cluster_follow {
  struct rampart_engine *e;            /* through rampart.h and server_membership.c */
  const struct rampart_config *config; /* the engine's, which outlives this */
  pthread_t thread;
  atomic_bool stopping;
  atomic_bool live; /* the watch is established */
  atomic_uint_fast64_t events, watch_restarts;
  bool changed; /* an event since the last pass (thread's) */
  struct rp_etcd *etcd;
  struct rp_cluster_registry reg;
  /* per registry entry, for the ID it holds at generation[i] (reset when it changes) */
  uint32_t *generation;
  uint64_t *refused_until_ms;
  bool *drain_refusal_logged;
  struct rampart_stats *stats; /* the engine's table, copied each pass */
  char members_written[RAMPART_MAX_SERVERS * RAMPART_ADDRESS_LEN];
  /* devices/CLIENT/DEVICE: which servers this device uses, for operators (rampartctl
   * cluster); never read by a device */
  char record_key[RP_ETCD_KEY_MAX];
  char record_value[RP_ETCD_VALUE_MAX];
  int64_t record_lease;
  bool record_due;
  uint64_t record_kept_ms;
  char err[600], msg[2048];
};

static void endpoints_url(const struct rampart_config *c, char *out, size_t len)
{
  bool tls = c->etcd_cacert[0] || c->etcd_cert[0];
  size_t n = 0;
  out[0] = '\0';
  for (const char *p = c->etcd_endpoints; *p && n < len;) {
    size_t l = strcspn(p, ",");
    n += (size_t)snprintf(out + n, len - n, "%s%s%.*s", n ? "," : "",
                          tls ? "https://" : "http://", (int)l, p);
    p += l;
    if (*p == ',')
      p++;
  }
}

static struct rp_etcd *etcd_client(const struct rampart_config *c, char *err, size_t errlen)
{
  char urls[2048];
  endpoints_url(c, urls, sizeof urls);
  struct rp_etcd_options o = {
    .endpoints = urls,
    .cacert = c->etcd_cacert,
    .cert = c->etcd_cert,
    .key = c->etcd_key,
    .timeout_ms = CALL_TIMEOUT_MS,
    .reply_max = REPLY_MAX,
  };
  return rp_etcd_new(&o, err, errlen);
}

static void cache_path(const struct rampart_config *c, char *out, size_t len)
{
  if (c->cluster_cache[0])
    snprintf(out, len, "%s", c->cluster_cache);
  else if (c->state_path[0])
    snprintf(out, len, "%s.servers", c->state_path);
  else
    snprintf(out, len, "/var/lib/rampart/cluster-%s.servers", c->etcd_cluster);
}

/* The set as a cluster file (one HOST:PORT a line), replaced atomically. */
static int write_cache(const char *path, const char *cluster,
                       char (*servers)[RAMPART_ADDRESS_LEN], unsigned n)
{
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (rp_file_replaceable(path) < 0)
    return -1;
  int fd = rp_file_create(tmp, 0644);
  FILE *f = fd >= 0 ? fdopen(fd, "we") : NULL;
  if (!f) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  fprintf(f, "# the servers etcd gave cluster %s, for an attach while etcd is down\n",
          cluster);
  for (unsigned i = 0; i < n; i++)
    fprintf(f, "%s\n", servers[i]);
  bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) < 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* ---- choosing servers ------------------------------------------------------------------ */

static bool candidate(const struct rp_cluster_server *s)
{
  return s->registered && s->advertised && !s->draining && !s->pressure &&
         s->free_pages > 0 && strlen(s->address) < RAMPART_ADDRESS_LEN;
}

static bool domain_used(const struct rp_cluster_registry *r, const bool *taken,
                        const char *domain)
{
  for (unsigned i = 0; i < r->n; i++)
    if (taken[i] && strcmp(r->servers[i].domain, domain) == 0)
      return true;
  return false;
}

/* The best candidate not taken (nor excluded): a domain not used yet first, then the
 * most free memory. -1 when none. */
static int best_candidate(const struct rp_cluster_registry *r, const bool *taken,
                          const bool *excluded)
{
  int best = -1;
  bool best_new_domain = false;
  for (unsigned i = 0; i < r->n; i++) {
    const struct rp_cluster_server *s = &r->servers[i];
    if (taken[i] || (excluded && excluded[i]) || !candidate(s))
      continue;
    bool new_domain = !domain_used(r, taken, s->domain);
    if (best < 0 || (new_domain && !best_new_domain) ||
        (new_domain == best_new_domain && s->free_pages > r->servers[best].free_pages)) {
      best = (int)i;
      best_new_domain = new_domain;
    }
  }
  return best;
}

unsigned cluster_follow_choose(const struct rp_cluster_registry *r, unsigned count,
                               unsigned *out)
{
  bool *taken = calloc(r->n ? r->n : 1, sizeof *taken);
  unsigned n = 0;
  int at;
  while (taken && n < count && (at = best_candidate(r, taken, NULL)) >= 0) {
    taken[at] = true;
    out[n++] = (unsigned)at;
  }
  free(taken);
  return n;
}

struct rampart_config *cluster_follow_pick(const struct rampart_config *c, char *err,
                                           size_t errlen)
{
  struct rampart_config *out = malloc(sizeof *out);
  struct rp_cluster_registry reg = { 0 };
  struct rp_etcd *etcd = NULL;
  char path[4200], why[600] = "";
  if (!out) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  *out = *c;
  out->nservers = 0;
  cache_path(c, path, sizeof path);
  if (rp_cluster_registry_init(&reg, c->etcd_cluster, REGISTRY_MAX, why, sizeof why) < 0) {
    snprintf(err, errlen, "cluster=etcd://: %s", why);
    goto fail;
  }
  etcd = etcd_client(c, why, sizeof why);
  if (etcd && rp_cluster_registry_read(&reg, etcd, NULL, why, sizeof why) == 0) {
    unsigned registered = 0;
    for (unsigned i = 0; i < reg.n; i++)
      registered += reg.servers[i].registered;
    unsigned *chosen = calloc(REGISTRY_MAX, sizeof *chosen);
    unsigned got = chosen ? cluster_follow_choose(&reg, c->etcd_count, chosen) : 0;
    for (unsigned i = 0; i < got; i++)
      snprintf(out->servers[out->nservers++], RAMPART_ADDRESS_LEN, "%.*s",
               RAMPART_ADDRESS_LEN - 1, reg.servers[chosen[i]].address);
    free(chosen);
    if (out->nservers == 0) {
      snprintf(err, errlen,
               "cluster=etcd://.../%s: etcd (%s) lists %u registered server%s "
               "and none can take pages now (none registered, or all draining or under "
               "memory pressure): start rampartd --etcd ... --cluster %s on the memory "
               "servers",
               c->etcd_cluster, rp_etcd_endpoint(etcd), registered,
               registered == 1 ? "" : "s", c->etcd_cluster);
      goto fail;
    }
    rp_log(RP_LOG_INFO, "etcd: cluster %s: %u of %u registered servers chosen (count=%u)",
           c->etcd_cluster, out->nservers, registered, c->etcd_count);
    if (write_cache(path, c->etcd_cluster, out->servers, out->nservers) < 0)
      rp_log(RP_LOG_WARN,
             "etcd: cannot write the set down in %s (%s): an attach while "
             "etcd is down will have no set to use; set cluster-cache=PATH",
             path, rp_file_why(errno));
  } else {
    char ferr[600];
    if (config_read_cluster_file(out, path, ferr, sizeof ferr) < 0 || out->nservers == 0) {
      snprintf(err, errlen,
               "cluster=etcd://.../%s: etcd cannot be read (%s), and there is "
               "no set written down from an earlier attach (%s): start etcd, or give "
               "servers=",
               c->etcd_cluster, etcd ? why : "no client", ferr);
      goto fail;
    }
    rp_log(RP_LOG_WARN,
           "etcd: cluster %s cannot be read (%s): attaching with the last set "
           "written down, %u servers from %s",
           c->etcd_cluster, why, out->nservers, path);
  }
  out->etcd_picked = true;
  rp_etcd_free(etcd);
  rp_cluster_registry_free(&reg);
  return out;
fail:
  rp_etcd_free(etcd);
  rp_cluster_registry_free(&reg);
  free(out);
  return NULL;
}

/* ---- following --------------------------------------------------------------------------- */

static int registry_index(const struct rp_cluster_registry *r, const char *address)
{
  for (unsigned i = 0; i < r->n; i++)
    if (strcmp(r->servers[i].address, address) == 0)
      return (int)i;
  return -1;
}

static bool is_member(const struct rampart_server_stats *s)
{
  return s->state != RAMPART_SERVER_REMOVED && s->state != RAMPART_SERVER_LOST;
}

static bool drain_announced(const struct rp_cluster_server *r)
{
  return r && r->registered && r->advertised && r->draining;
}

/* An entry given to another ID starts with nothing remembered of the one before. */
static void forget_reused_entries(struct cluster_follow *f)
{
  for (unsigned i = 0; i < f->reg.n; i++) {
    if (f->generation[i] == f->reg.servers[i].generation)
      continue;
    f->generation[i] = f->reg.servers[i].generation;
    f->refused_until_ms[i] = 0;
    f->drain_refusal_logged[i] = false;
  }
}

/* Members that announced a drain and are not draining yet are asked to (a drain that
 * the others cannot hold is refused, and asked again on a later pass: a server added
 * meanwhile may bring the room). A refusal is logged once a server. */
static void request_drains(struct cluster_follow *f)
{
  struct rampart_stats *st = f->stats;
  rampart_get_stats(f->e, st);
  for (unsigned i = 0; i < st->nservers; i++) {
    const struct rampart_server_stats *m = &st->servers[i];
    int at = registry_index(&f->reg, m->address);
    if (!is_member(m) || m->draining || at < 0 || !drain_announced(&f->reg.servers[at]))
      continue;
    int rc = rampart_server_drain(f->e, m->address, true, f->msg, sizeof f->msg);
    if (rc == 0 || !f->drain_refusal_logged[at])
      rp_log(rc < 0 ? RP_LOG_WARN : RP_LOG_INFO, "etcd: %s announced a drain: %s%s",
             m->address, f->msg, rc < 0 ? " (asked again as the cluster changes)" : "");
    f->drain_refusal_logged[at] = rc < 0;
  }
}

/* One look at the registry against the device's servers: drains asked, keys gone, and
 * additions while fewer than count= take pages (a server that announced a drain counts
 * as leaving, so its replacement comes first when the others lack the room). */
static void reconcile(struct cluster_follow *f)
{
  struct rampart_engine *e = f->e;
  struct rampart_stats *st = f->stats;
  forget_reused_entries(f);
  request_drains(f);
  rampart_get_stats(e, st);
  bool *taken = calloc(REGISTRY_MAX, sizeof *taken);
  if (!taken)
    return;
  unsigned active = 0;
  for (unsigned i = 0; i < st->nservers; i++) {
    const struct rampart_server_stats *m = &st->servers[i];
    if (!is_member(m))
      continue;
    int at = registry_index(&f->reg, m->address);
    const struct rp_cluster_server *r = at >= 0 ? &f->reg.servers[at] : NULL;
    if (at >= 0)
      taken[at] = true;
    bool listed = r && r->registered;
    if (server_membership_set_listed(e, m->address, listed, r ? r->domain : NULL))
      rp_log(RP_LOG_INFO, "etcd: %s %s", m->address,
             listed ? "is registered again: it takes new pages again"
                    : "left the registry (its lease expired or it stopped): no new pages go "
                      "there; it is not declared lost, its pages stay while it answers");
    if (!m->draining && !drain_announced(r) && listed && m->state == RAMPART_SERVER_UP)
      active++;
  }
  uint64_t now = rp_now_ms();
  bool *excluded = calloc(REGISTRY_MAX, sizeof *excluded);
  for (unsigned i = 0; excluded && i < f->reg.n; i++)
    excluded[i] = f->refused_until_ms[i] > now;
  unsigned adds = 0, added = 0;
  int at;
  while (excluded && active < f->config->etcd_count && adds < ADDS_PER_PASS &&
         !atomic_load(&f->stopping) && (at = best_candidate(&f->reg, taken, excluded)) >= 0) {
    const struct rp_cluster_server *c = &f->reg.servers[at];
    adds++;
    int rc = rampart_server_add(e, c->address, f->msg, sizeof f->msg);
    if (rc < 0) {
      f->refused_until_ms[at] = rp_now_ms() + REFUSED_RETRY_MS;
      excluded[at] = true;
      rp_log(RP_LOG_WARN,
             "etcd: registered server %s (domain %s) refused, not used for "
             "%u s: %s",
             c->address, c->domain, REFUSED_RETRY_MS / 1000u, f->msg);
      continue;
    }
    taken[at] = true;
    active++;
    added++;
    rp_log(RP_LOG_INFO, "etcd: %s", f->msg);
  }
  free(excluded);
  free(taken);
  if (added)
    request_drains(f);
  /* The set as it is now, written down for an attach while etcd is down. */
  rampart_get_stats(e, st);
  char(*set)[RAMPART_ADDRESS_LEN] = calloc(RAMPART_MAX_SERVERS, RAMPART_ADDRESS_LEN);
  char joined[sizeof f->members_written];
  size_t jn = 0;
  unsigned n = 0;
  joined[0] = '\0';
  for (unsigned i = 0; set && i < st->nservers && n < RAMPART_MAX_SERVERS; i++) {
    if (!is_member(&st->servers[i]) || st->servers[i].draining)
      continue;
    snprintf(set[n++], RAMPART_ADDRESS_LEN, "%s", st->servers[i].address);
    jn += (size_t)snprintf(joined + jn, sizeof joined - jn, "%s,", st->servers[i].address);
  }
  if (set && n && strcmp(joined, f->members_written) != 0) {
    char path[4200];
    cache_path(f->config, path, sizeof path);
    if (write_cache(path, f->config->etcd_cluster, set, n) == 0)
      memcpy(f->members_written, joined, jn + 1);
    if (jn > 0)
      joined[jn - 1] = '\0'; /* the last comma */
    snprintf(f->record_value, sizeof f->record_value, "%.*s", (int)sizeof f->record_value - 1,
             joined);
    f->record_due = true;
  }
  free(set);
}

/* The device's record under a lease of its own: written when its set changes, kept
 * alive every 10 s, revoked at close. A failure only waits for the next pass. */
static void keep_record(struct cluster_follow *f)
{
  char err[300];
  uint64_t now = rp_now_ms();
  if (f->record_lease && now - f->record_kept_ms >= RECORD_KEEPALIVE_MS) {
    int64_t ttl = 0;
    if (rp_etcd_lease_keepalive(f->etcd, f->record_lease, &ttl, err, sizeof err) < 0)
      return;
    f->record_kept_ms = now;
    if (ttl == 0) {
      f->record_lease = 0;
      f->record_due = true;
    }
  }
  if (!f->record_due || !f->record_value[0])
    return;
  if (!f->record_lease &&
      rp_etcd_lease_grant(f->etcd, RECORD_TTL_S, &f->record_lease, err, sizeof err) < 0) {
    f->record_lease = 0;
    return;
  }
  if (rp_etcd_put(f->etcd, f->record_key, f->record_value, f->record_lease, err,
                  sizeof err) == 0) {
    f->record_due = false;
    f->record_kept_ms = now;
  }
}

static void on_event(void *arg, bool deleted, const char *key, const char *value)
{
  struct cluster_follow *f = arg;
  atomic_fetch_add(&f->events, 1);
  if (rp_cluster_registry_take(&f->reg, deleted, key, value) >= 0)
    f->changed = true;
}

static void on_live(void *arg)
{
  struct cluster_follow *f = arg;
  if (!atomic_exchange(&f->live, true))
    rp_log(RP_LOG_INFO, "etcd: watching cluster %s at %s", f->config->etcd_cluster,
           rp_etcd_endpoint(f->etcd));
}

/* Ends a watch window early: to stop, or to act on an event now. */
static bool watch_should_end(void *arg)
{
  struct cluster_follow *f = arg;
  return atomic_load(&f->stopping) || f->changed;
}

static void nap(struct cluster_follow *f, unsigned ms)
{
  for (unsigned t = 0; t < ms && !atomic_load(&f->stopping); t += 50)
    usleep(50 * 1000);
}

static void *follow_thread(void *arg)
{
  struct cluster_follow *f = arg;
  int64_t rev = 0;
  bool need_read = true, down_logged = false;
  unsigned backoff = 250;
  while (!atomic_load(&f->stopping)) {
    if (need_read) {
      if (rp_cluster_registry_read(&f->reg, f->etcd, &rev, f->err, sizeof f->err) < 0) {
        atomic_store(&f->live, false);
        if (!down_logged)
          rp_log(RP_LOG_WARN,
                 "etcd: cannot read cluster %s: %s; the device goes on with "
                 "its servers, and follows the cluster again once etcd answers",
                 f->config->etcd_cluster, f->err);
        down_logged = true;
        nap(f, backoff);
        backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
        continue;
      }
      need_read = false;
      backoff = 250;
      if (down_logged)
        rp_log(RP_LOG_INFO, "etcd: cluster %s read again at %s", f->config->etcd_cluster,
               rp_etcd_endpoint(f->etcd));
      down_logged = false;
      f->changed = false;
      reconcile(f);
      keep_record(f);
    }
    int64_t next = 0;
    int rc = rp_etcd_watch_prefix(f->etcd, f->reg.prefix, rev + 1, on_event, on_live,
                                  watch_should_end, f, WATCH_WINDOW_MS, &next, f->err,
                                  sizeof f->err);
    if (next > 0)
      rev = next - 1;
    if (rc < 0) {
      atomic_store(&f->live, false);
      atomic_fetch_add(&f->watch_restarts, 1);
      if (!down_logged)
        rp_log(RP_LOG_WARN, "etcd: the watch of cluster %s ended: %s; watching again",
               f->config->etcd_cluster, f->err);
      down_logged = true;
      need_read = true; /* a new watch starts from a fresh read: nothing missed */
      nap(f, backoff);
      backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
      continue;
    }
    f->changed = false;
    reconcile(f); /* after an event, or once a window: replacements after a loss */
    keep_record(f);
  }
  atomic_store(&f->live, false);
  if (f->record_lease) {
    char err[300];
    rp_etcd_lease_revoke(f->etcd, f->record_lease, err, sizeof err);
  }
  return NULL;
}

/* Frees what cluster_follow_start made, whichever part it got to (NULL: nothing). */
static void follow_free(struct cluster_follow *f)
{
  if (!f)
    return;
  rp_etcd_free(f->etcd);
  rp_cluster_registry_free(&f->reg);
  free(f->generation);
  free(f->refused_until_ms);
  free(f->drain_refusal_logged);
  free(f->stats);
  free(f);
}

int cluster_follow_start(struct rampart_engine *e, const struct rampart_config *c,
                         struct cluster_follow **followp, char *err, size_t errlen)
{
  struct cluster_follow *f = calloc(1, sizeof *f);
  if (!f) {
    snprintf(err, errlen, "out of memory for the etcd follower");
    return -1;
  }
  char why[300];
  if (rp_cluster_registry_init(&f->reg, c->etcd_cluster, REGISTRY_MAX, why, sizeof why) < 0) {
    snprintf(err, errlen, "cluster=etcd://: %s", why);
    goto fail;
  }
  if (!(f->generation = calloc(REGISTRY_MAX, sizeof *f->generation)) ||
      !(f->refused_until_ms = calloc(REGISTRY_MAX, sizeof *f->refused_until_ms)) ||
      !(f->drain_refusal_logged = calloc(REGISTRY_MAX, sizeof *f->drain_refusal_logged)) ||
      !(f->stats = malloc(sizeof *f->stats))) {
    snprintf(err, errlen, "out of memory for the etcd follower");
    goto fail;
  }
  f->e = e;
  f->config = c;
  if (!(f->etcd = etcd_client(c, err, errlen)))
    goto fail;
  char host[64] = "host";
  gethostname(host, sizeof host);
  host[sizeof host - 1] = '\0';
  char device[96];
  snprintf(device, sizeof device, "%s/pid-%ld", host, (long)getpid());
  rp_cluster_key(f->record_key, sizeof f->record_key, c->etcd_cluster, "devices", device);
  int rc = rp_thread_start(&f->thread, "rampart-etcd", THREAD_STACK, follow_thread, f);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start the etcd follower: %s", strerror(rc));
    goto fail;
  }
  *followp = f;
  return 0;
fail:
  follow_free(f);
  return -1;
}

void cluster_follow_stop(struct cluster_follow **followp)
{
  struct cluster_follow *f = *followp;
  if (!f)
    return;
  atomic_store(&f->stopping, true);
  pthread_join(f->thread, NULL);
  *followp = NULL;
  follow_free(f);
}

void cluster_follow_stats(const struct cluster_follow *f, struct rampart_stats *st)
{
  st->etcd_following = f != NULL;
  st->etcd_watch_live = f && atomic_load(&f->live);
  st->etcd_events = f ? atomic_load(&f->events) : 0;
  st->etcd_watch_restarts = f ? atomic_load(&f->watch_restarts) : 0;
}
