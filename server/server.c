/* The server process around its connections (see server.h): accepting, the pressure
 * callback that advises clients, STAT, and a clean shutdown on SIGTERM/SIGINT that
 * frees everything, so a sanitizer run ends with no leak to hide real ones. */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "connection.h"
#include "log.h"

static void peer_name(const struct sockaddr_storage *ss, char *out, size_t outlen)
{
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    snprintf(out, outlen, "%s:%u", host, ntohs(in->sin_port));
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    snprintf(out, outlen, "[%s]:%u", host, ntohs(in6->sin6_port));
  } else {
    snprintf(out, outlen, "unknown peer");
  }
}

static void on_accept_pause_over(struct ev_loop *loop, ev_timer *w, int revents)
{
  struct rps_server *srv = w->data;
  ev_io_start(loop, &srv->listen_io);
}

/* A flood is refused thousands of times a second: say so once a second, with a count. */
static void log_refusal(struct rps_server *srv, const char *peer, const char *why)
{
  ev_tstamp now = ev_now(srv->loop);
  if (now - srv->refusal_logged_at < 1.0) {
    srv->refusals_unlogged++;
    return;
  }
  rp_log(RP_LOG_WARN,
         "refused connection from %s: %s (and %llu more refused in the last "
         "second)",
         peer, why, (unsigned long long)srv->refusals_unlogged);
  srv->refusal_logged_at = now;
  srv->refusals_unlogged = 0;
}

/* Unauthenticated connections have their own budget, apart from authenticated ones
 * (see admission.h): one address past its share is refused in words; past the total,
 * the handshake that has waited longest makes room, so a flood from many addresses
 * slows a real client's handshake down but cannot lock it out. */
static void admit(struct rps_server *srv, int fd, const char *peer,
                  const struct sockaddr_storage *ss)
{
  const struct rps_options *o = srv->opt;
  struct rps_addr_key key = rps_addr_key_of(ss);
  uint32_t from_here = rps_addr_count(srv->unauth_by_addr, &key);
  if (from_here >= o->max_unauthenticated_per_address) {
    char why[300];
    snprintf(why, sizeof why,
             "%u unauthenticated connections from this address are "
             "already in their handshake (rampartd's --max-unauthenticated-per-address): "
             "finish or close those first",
             from_here);
    srv->stats.connections_refused++;
    log_refusal(srv, peer, why);
    rps_conn_refuse(srv, fd, why);
    return;
  }
  if (srv->nunauth >= o->max_unauthenticated && rps_conn_drop_oldest_unauthenticated(srv))
    srv->stats.connections_dropped++;
  rps_conn_start(srv, fd, peer, &key);
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
  struct rps_server *srv = w->data;
  /* Bounded, so a connection storm cannot starve the connections already served. */
  for (int i = 0; i < 64; i++) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int fd = accept4(srv->listen_fd, (struct sockaddr *)&ss, &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* The pending connection stays queued; stop the level-triggered watcher from
         * spinning on it and try again in a second. */
        rp_log(RP_LOG_WARN, "cannot accept a connection: %s; pausing accepts for 1 s",
               strerror(errno));
        ev_io_stop(loop, &srv->listen_io);
        ev_timer_set(&srv->accept_pause, 1.0, 0.);
        ev_timer_start(loop, &srv->accept_pause);
        return;
      }
      continue; /* EINTR, ECONNABORTED and friends concern one connection only */
    }
    char peer[64];
    peer_name(&ss, peer, sizeof peer);
    admit(srv, fd, peer, &ss);
  }
}

static void on_pressure_change(void *arg, bool pressure, const char *reason)
{
  struct rps_server *srv = arg;
  rps_store_keep_warm(srv->store, !pressure);
  struct rps_store_stats ss;
  rps_store_get_stats(srv->store, &ss);
  uint64_t n = rps_conn_broadcast_advise(srv, pressure, reason, ss.free_pages);
  srv->stats.advises_sent += n;
  rp_log(pressure ? RP_LOG_WARN : RP_LOG_INFO,
         "memory pressure %s: %s; advised %llu "
         "client%s",
         pressure ? "began" : "ended", reason, (unsigned long long)n, n == 1 ? "" : "s");
}

/* Draining is how an operator removes a server without any client running degraded:
 * every client is advised to move its pages elsewhere, no new pages are taken, and once
 * 'rampartctl stat' shows nothing stored the server can stop. */
static void on_drain_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
  struct rps_server *srv = w->data;
  if (rps_pressure_draining(srv->pressure)) {
    rp_log(RP_LOG_INFO, "SIGUSR1: already draining");
    return;
  }
  rp_log(RP_LOG_WARN,
         "SIGUSR1: draining: clients are asked to move their pages away and "
         "no new pages are taken; stop this server once 'rampartctl stat' shows 0 stored");
  rps_pressure_drain(srv->pressure);
}

static void on_stop_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
  struct rps_server *srv = w->data;
  rp_log(RP_LOG_INFO, "signal %d: shutting down", w->signum);
  srv->stopping = true;
  ev_break(loop, EVBREAK_ALL);
}

int rps_server_init(struct rps_server *srv, struct ev_loop *loop,
                    const struct rps_options *opt, const struct rp_key *key, int listen_fd,
                    char *err, size_t errlen)
{
  memset(srv, 0, sizeof *srv);
  srv->loop = loop;
  srv->opt = opt;
  srv->key = key;
  srv->listen_fd = listen_fd;
  srv->started = ev_now(loop);
  srv->store = rps_store_create(opt->memory / RP_PAGE_SIZE);
  if (srv->store)
    rps_store_set_locked(srv->store, opt->mlock);
  srv->unauth_by_addr = rps_addr_counts_create();
  if (srv->store && srv->unauth_by_addr)
    srv->sessions = rps_sessions_create(loop, srv->store, (double)opt->lease_seconds);
  srv->pressure_cfg.psi_path = opt->pressure_file;
  srv->pressure_cfg.meminfo_path = opt->meminfo_file;
  srv->pressure_cfg.psi_threshold = opt->psi_threshold;
  srv->pressure_cfg.min_available = opt->min_available;
  srv->pressure_cfg.interval = (double)opt->pressure_interval_ms / 1000.0;
  if (srv->sessions)
    srv->pressure = rps_pressure_create(loop, &srv->pressure_cfg, on_pressure_change, srv);
  if (!srv->pressure) {
    snprintf(err, errlen, "out of memory setting up the page store");
    rps_server_cleanup(srv);
    return -1;
  }
  ev_io_init(&srv->listen_io, on_accept, listen_fd, EV_READ);
  srv->listen_io.data = srv;
  ev_io_start(loop, &srv->listen_io);
  ev_init(&srv->accept_pause, on_accept_pause_over);
  srv->accept_pause.data = srv;
  ev_signal_init(&srv->sig_term, on_stop_signal, SIGTERM);
  ev_signal_init(&srv->sig_int, on_stop_signal, SIGINT);
  srv->sig_term.data = srv;
  srv->sig_int.data = srv;
  ev_signal_start(loop, &srv->sig_term);
  ev_signal_start(loop, &srv->sig_int);
  ev_signal_init(&srv->sig_drain, on_drain_signal, SIGUSR1);
  srv->sig_drain.data = srv;
  ev_signal_start(loop, &srv->sig_drain);
  return 0;
}

static uint64_t pages_served(const struct rps_server *srv)
{
  return srv->stats.ops_read + srv->stats.ops_write;
}

/* --poll-us: after a pass that served pages, the next request of a busy client is
 * usually microseconds away, less than what a wake from epoll_wait costs on a virtual
 * machine. So the loop keeps looking without sleeping (epoll_wait with no timeout) for
 * up to poll-us after the last page it served, and sleeps once that passes quietly. */
void rps_server_run(struct rps_server *srv)
{
  uint64_t spin_ns = (uint64_t)srv->opt->poll_us * 1000u;
  if (spin_ns == 0) {
    ev_run(srv->loop, 0);
    return;
  }
  while (!srv->stopping) {
    uint64_t served = pages_served(srv);
    if (!ev_run(srv->loop, EVRUN_ONCE))
      return; /* no watcher left */
    if (pages_served(srv) == served)
      continue;
    uint64_t until = rp_now_ns() + spin_ns;
    while (!srv->stopping && rp_now_ns() < until) {
      served = pages_served(srv);
      ev_run(srv->loop, EVRUN_NOWAIT);
      if (pages_served(srv) != served)
        until = rp_now_ns() + spin_ns;
    }
  }
}

void rps_server_cleanup(struct rps_server *srv)
{
  struct ev_loop *loop = srv->loop;
  ev_io_stop(loop, &srv->listen_io);
  ev_timer_stop(loop, &srv->accept_pause);
  ev_signal_stop(loop, &srv->sig_term);
  ev_signal_stop(loop, &srv->sig_int);
  ev_signal_stop(loop, &srv->sig_drain);
  if (srv->listen_fd >= 0)
    close(srv->listen_fd);
  srv->listen_fd = -1;
  rps_conn_close_all(srv);
  rps_pressure_destroy(srv->pressure);
  rps_sessions_destroy(srv->sessions);
  rps_store_destroy(srv->store);
  rps_addr_counts_destroy(srv->unauth_by_addr);
  srv->unauth_by_addr = NULL;
  srv->pressure = NULL;
  srv->sessions = NULL;
  srv->store = NULL;
}
