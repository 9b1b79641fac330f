/* rampart_reap: a frontend thread that reads its own replies (docs/engine.md, "Who
 * reads the replies").
 *
 * Without it every batch of replies costs two wakes: the I/O thread's, in its poll, and
 * the submitting thread's, when the I/O thread hands the completions over. A frontend
 * that calls rampart_reap while it waits is lent the reading of every connected socket:
 * it polls them itself, reads and handles the replies under the engine's lock (the I/O
 * thread sleeps in its poll meanwhile, as for an inline start), does what the loop
 * would do before its next poll (the mover, parked ops, sending what is queued), and
 * its requests complete on its own thread: one wake per batch, no hand-over.
 *
 * The I/O thread keeps timers, reconnects, write watchers and every socket not lent. A
 * reaper that leaves while replies are still awaited gives the I/O thread the sockets at
 * once when no frontend request is out for a reaper to come back for (only FREEs, moves,
 * requests whose submitters do not reap, RAMPART_IO_NO_REAPER: reap_leave), and such a
 * request that starts while the sockets are lent and no reaper is inside takes them back
 * itself (engine_reap_request_starts); with frontend requests out, it starts the I/O
 * thread's grace timer, and if no reaper has come back when it fires, 2 to 4 ms later,
 * the I/O thread takes the sockets back and reads what comes. Left lent with nobody to
 * read them, replies would lie unread until the next reaper, or until the I/O thread
 * took the sockets back two of its ticks later (under swap through rampart-fuse, 40 to
 * 140 ms for over a hundred requests a second). Given back at every leave, they would go
 * back and forth on every pass of a thread that reaps at depth (rampart-nbd-server's
 * connections, ublk's queues), an epoll_ctl per socket and a wake of the I/O thread each
 * time, which more than halves the reads a second at QD32. With nothing awaited the
 * sockets stay lent, and the next QD1 reaper finds them so. The I/O thread also takes
 * them back once no reaper has come for two ticks (engine_reap_tick), and wakes a reaper
 * asleep here when it completed frontend requests itself (timeouts, failures,
 * hand-overs: engine_reap_wake).
 *
 * A reply from a server on the same rack comes back in tens of microseconds, about what
 * a sleeping thread costs to wake on a virtual machine. So while a frame is out on a lent
 * socket the reaper first spins, polling without a timeout, for at most poll-us, and
 * sleeps only after that (io_uring's hybrid polling, Fastswap's polling for the faulting
 * page). With nothing out it sleeps at once: a spin can only end in a reply. Nor does
 * it spin while the machine's runnable tasks wait for CPUs (poll-pressure=, sampled
 * each tick from /proc/pressure/cpu): the spin would hold a CPU the server, the loop
 * device's worker or the application is waiting for, and the page-in would get slower
 * (docs/page-in.md has both sides measured).
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "engine_internal.h"
#include "server_health.h"

/* The longest a reaper sleeps before it looks again on its own: a safety net only, for a
 * socket closed and replaced while it slept in poll. */
#define REAP_POLL_MS 100

/* How long sockets lent to a reaper that left with replies due wait for one to come
 * back, at least: a thread that reaps at depth comes back within microseconds, one that
 * lost its CPU for a moment within a few milliseconds. At 1 ms a QD32 reaper on a
 * 2-core machine loses its sockets about once in 40 passes (test_page_in); at 2 ms,
 * about once in a thousand. */
#define REAP_GRACE_S 0.002

/* Sockets one reaper polls at most. Only current servers are connected (a replaced
 * incarnation has no connection), and a device lists RAMPART_MAX_SERVERS; the bound is
 * on the stack of the frontend's thread, not ENGINE_MAX_INCARNATIONS. A socket past it
 * stays with the I/O thread's loop, which still reads it. */
#define REAP_SOCKETS (2u * RAMPART_MAX_SERVERS)

struct lent_socket {
  unsigned server;
  struct rp_conn *conn;
};

/* Whether a reply is still to come on some connection: a request of another thread, a
 * FREE, a move. */
static bool replies_awaited(const struct rampart_engine *e)
{
  for (unsigned i = 0; i < e->set.nservers; i++) {
    const struct rp_conn *c = e->set.servers[i]->conn;
    if (c && rp_conn_in_flight(c) > 0)
      return true;
  }
  return false;
}

/* The grace timer, on the I/O thread under the engine's lock: a reaper came back since
 * it last looked (or is inside), so it looks again one grace later; none came, so the
 * I/O thread reads the replies due. With none due it stops, and the sockets stay lent. */
static void on_reap_grace(struct ev_loop *loop, ev_timer *w, int revents)
{
  struct rampart_engine *e = w->data;
  if (!e->reap.holds || !replies_awaited(e)) {
    ev_timer_stop(loop, w);
    e->reap.grace_armed = false;
  } else if (e->reap.inside || e->reap.entries != e->reap.grace_entries) {
    e->reap.grace_entries = e->reap.entries; /* it repeats */
  } else {
    ev_timer_stop(loop, w);
    e->reap.grace_armed = false;
    engine_reap_give_back(e);
    e->reap.hand_backs++;
  }
}

int engine_reap_init(struct rampart_engine *e)
{
  ev_timer_init(&e->reap.grace, on_reap_grace, 0., REAP_GRACE_S);
  e->reap.grace.data = e;
  e->reap.event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (e->config.poll_us > 0 && e->config.poll_pressure < 100)
    cpu_pressure_open(&e->reap.pressure);
  return e->reap.event_fd < 0 ? -1 : 0;
}

void engine_reap_start_grace(struct rampart_engine *e)
{
  if (e->reap.grace_armed && !ev_is_active(&e->reap.grace))
    ev_timer_again(e->loop, &e->reap.grace);
}

void engine_reap_destroy(struct rampart_engine *e)
{
  if (e->reap.event_fd >= 0)
    close(e->reap.event_fd);
  e->reap.event_fd = -1;
  cpu_pressure_close(&e->reap.pressure);
}

static void reap_event_post(struct rampart_engine *e)
{
  uint64_t one = 1;
  while (write(e->reap.event_fd, &one, sizeof one) < 0 && errno == EINTR)
    ;
}

void engine_reap_wake(struct rampart_engine *e)
{
  if (!e->reap.sleeping || e->frontend_completions == e->reap.seen)
    return;
  e->reap.sleeping = false;
  reap_event_post(e);
}

void engine_reap_give_back(struct rampart_engine *e)
{
  if (!e->reap.holds)
    return;
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (e->set.servers[i]->conn)
      rp_conn_lend_reading(e->set.servers[i]->conn, false);
  e->reap.holds = false;
}

/* Lent sockets stay lent when their reaper leaves with nothing due, for the next QD1
 * reaper; a request whose submitter will not reap would find nobody reading them, and
 * its reply would wait for engine_reap_tick, 100 to 200 ms. Starting it inline, the
 * watchers the give-back starts wake the loop (release_inline). */
void engine_reap_request_starts(struct rampart_engine *e, const struct rampart_io *io)
{
  if ((io->flags & RAMPART_IO_NO_REAPER) && e->reap.holds && !e->reap.inside) {
    engine_reap_give_back(e);
    e->reap.hand_backs++;
  }
}

/* Unknown pressure (no PSI in the kernel) leaves the spin as poll-us= asks. */
static void weigh_spinning(struct rampart_engine *e)
{
  int pct = cpu_pressure_sample(&e->reap.pressure, rp_now_ns());
  e->reap.spin_paused = pct >= 0 && (unsigned)pct >= e->config.poll_pressure;
  e->reap.spin_paused_ticks += e->reap.spin_paused;
}

void engine_reap_tick(struct rampart_engine *e)
{
  if (e->reap.pressure.fd >= 0)
    weigh_spinning(e);
  if (e->reap.inside || !e->reap.holds) {
    e->reap.absent_ticks = 0;
    return;
  }
  if (++e->reap.absent_ticks >= 2)
    engine_reap_give_back(e);
}

/* Every connected socket is lent to this thread (new ones too: a reconnect attaches its
 * connection to the loop). Returns how many; pfd[n] is the I/O thread's wake and
 * pfd[n + 1] the caller's own fd. *awaited: whether a frame is out on one of them. */
static unsigned lend_sockets(struct rampart_engine *e, struct pollfd *pfd,
                             struct lent_socket *lent, int own_fd, bool *awaited)
{
  unsigned n = 0;
  *awaited = false;
  for (unsigned i = 0; i < e->set.nservers && n < REAP_SOCKETS; i++) {
    struct rp_conn *c = e->set.servers[i]->conn;
    int fd = c ? rp_conn_fd(c) : -1;
    if (fd < 0)
      continue;
    rp_conn_lend_reading(c, true);
    e->reap.holds = true;
    *awaited = *awaited || rp_conn_in_flight(c) > 0;
    pfd[n] = (struct pollfd){ .fd = fd, .events = POLLIN };
    lent[n] = (struct lent_socket){ .server = i, .conn = c };
    n++;
  }
  pfd[n] = (struct pollfd){ .fd = e->reap.event_fd, .events = POLLIN };
  pfd[n + 1] = (struct pollfd){ .fd = own_fd, .events = POLLIN }; /* poll skips fd -1 */
  return n;
}

/* The sockets poll found readable, read under the lock. A connection may have failed
 * or been replaced while this thread slept: only one still in its place, still lent, on
 * the same socket is read. True if one failed here: what follows a failure (the
 * server's health, reconnects, rebuilds) is the loop's to run. */
static bool read_ready(struct rampart_engine *e, const struct pollfd *pfd,
                       const struct lent_socket *lent, unsigned n)
{
  bool failed = false;
  for (unsigned k = 0; k < n; k++) {
    if (!pfd[k].revents)
      continue;
    struct rp_conn *c = lent[k].server < e->set.nservers
                          ? e->set.servers[lent[k].server]->conn
                          : NULL;
    if (c == lent[k].conn && rp_conn_reading_lent(c) && rp_conn_fd(c) == pfd[k].fd) {
      rp_conn_read_now(c);
      c = e->set.servers[lent[k].server]->conn;
      failed = failed || c != lent[k].conn || rp_conn_fd(c) < 0;
    }
  }
  return failed;
}

/* Whether a lent socket was readable (not only the wake or the caller's own fd). */
static bool any_readable(const struct pollfd *pfd, unsigned n)
{
  for (unsigned k = 0; k < n; k++)
    if (pfd[k].revents)
      return true;
  return false;
}

/* poll, spinning first for at most spin_ns without a timeout (*answered: whether
 * something came while it spun); then sleeping up to REAP_POLL_MS. */
static int poll_spinning(struct pollfd *pfd, unsigned nfds, uint64_t spin_ns, bool *answered)
{
  int ready;
  *answered = false;
  if (spin_ns > 0) {
    uint64_t until = rp_now_ns() + spin_ns;
    do {
      while ((ready = poll(pfd, nfds, 0)) < 0 && errno == EINTR)
        ;
      if (ready != 0) {
        *answered = ready > 0;
        return ready;
      }
    } while (rp_now_ns() < until);
  }
  while ((ready = poll(pfd, nfds, REAP_POLL_MS)) < 0 && errno == EINTR)
    ;
  return ready;
}

/* Frontend requests in flight whose threads wait in rampart_reap: all submitted and not
 * completed, less those no reaper comes back for (RAMPART_IO_NO_REAPER: the blocking
 * calls' own, sleeping on a futex, and those answered from their completion). The total
 * is read first and counted last, so the figure errs low, towards handing the sockets
 * back. */
static bool reapers_will_return(const struct rampart_engine *e)
{
  uint64_t out = atomic_load(&e->frontend_submitted) - e->frontend_completions;
  uint64_t unreaped = atomic_load(&e->unreaped_submitted) - e->unreaped_completions;
  return out > unreaped;
}

void engine_reap_before_loop_sleeps(struct rampart_engine *e)
{
  if (e->reap.holds && !e->reap.inside && replies_awaited(e) && !reapers_will_return(e)) {
    engine_reap_give_back(e); /* in the prepare watcher: the poll about to run sees them */
    e->reap.hand_backs++;
  }
}

/* The reaper goes: a waiter comes back to read in its place. With replies due and no
 * frontend request left for a reaper to come back for (a FREE, a move, a request marked
 * RAMPART_IO_NO_REAPER: a blocking call's, one answered from its completion), the I/O
 * thread gets the sockets now. With frontend requests out,
 * their threads come back to read: the I/O thread starts its grace timer
 * (engine_reap_start_grace, from its wake) unless it runs already, one wake per grace
 * at most however often reapers come and go, and takes the sockets only if none did. */
static void reap_leave(struct rampart_engine *e)
{
  e->reap.inside = false;
  if (e->reap.waiting)
    reap_event_post(e);
  if (!e->reap.holds || !replies_awaited(e))
    return;
  if (!reapers_will_return(e)) {
    engine_reap_give_back(e); /* a grace timer running stops at its next look */
    e->reap.hand_backs++;
    ev_async_send(e->loop, &e->wake);
  } else if (!e->reap.grace_armed) {
    e->reap.grace_armed = true;
    e->reap.grace_entries = e->reap.entries;
    ev_async_send(e->loop, &e->wake);
  }
}

void rampart_reap(struct rampart_engine *e)
{
  rampart_reap_or_fd(e, -1);
}

bool rampart_reap_or_fd(struct rampart_engine *e, int own_fd)
{
  struct pollfd pfd[REAP_SOCKETS + 2];
  struct lent_socket lent[REAP_SOCKETS];
  pthread_mutex_lock(&e->lock);
  if (!e->loop_sleeping || atomic_load(&e->stopping) || e->reap.inside) {
    /* No loop to share the engine with (not started, or closing), or another thread
     * reaps: wait for the I/O thread to complete something, or for the reaper to leave
     * (it posts event_fd then, and this thread comes back to read in its place: else a
     * reply of ours that comes after it left waits on a lent socket nobody polls). The
     * reaper's own sleeping flag is its own: a waiter leaves it alone. */
    bool reaper_inside = e->reap.inside;
    e->reap.seen = e->frontend_completions;
    if (reaper_inside)
      e->reap.waiting++;
    else
      e->reap.sleeping = true;
    pthread_mutex_unlock(&e->lock);
    struct pollfd wake[2] = { { .fd = e->reap.event_fd, .events = POLLIN },
                              { .fd = own_fd, .events = POLLIN } };
    if (poll(wake, 2, REAP_POLL_MS) > 0 && wake[0].revents) {
      uint64_t count;
      ssize_t ignored = read(e->reap.event_fd, &count, sizeof count);
      (void)ignored;
    }
    if (reaper_inside) {
      pthread_mutex_lock(&e->lock);
      e->reap.waiting--;
      pthread_mutex_unlock(&e->lock);
    }
    return own_fd >= 0 && wake[1].revents;
  }
  e->reap.inside = true;
  e->reap.entries++;
  uint64_t entered = e->frontend_completions;
  bool awaited;
  unsigned n = lend_sockets(e, pfd, lent, own_fd, &awaited);
  bool own_ready = false;
  for (;;) {
    uint64_t spin_ns = awaited && !e->reap.spin_paused ? (uint64_t)e->config.poll_us * 1000u
                                                       : 0;
    bool answered;
    e->reap.seen = e->frontend_completions;
    e->reap.sleeping = true;
    pthread_mutex_unlock(&e->lock);
    int ready = poll_spinning(pfd, n + 2, spin_ns, &answered);
    if (ready > 0 && pfd[n].revents) {
      uint64_t count;
      ssize_t ignored = read(e->reap.event_fd, &count, sizeof count);
      (void)ignored;
    }
    pthread_mutex_lock(&e->lock);
    e->reap.sleeping = false;
    e->reap.spins += spin_ns > 0;
    e->reap.spins_answered += answered && any_readable(pfd, n);
    if (!e->loop_sleeping || atomic_load(&e->stopping))
      break; /* closing: the I/O thread finishes what is left */
    unsigned changes = engine_loop_changes(e);
    e->defer_completions = true; /* handed over together below, as the loop does */
    bool failed = ready > 0 && read_ready(e, pfd, lent, n);
    engine_before_poll(e);
    engine_deliver_completions(e);
    e->defer_completions = false;
    /* Requests waiting for page ops, and ops parked on a buffer, are started again as
     * ops end, here as on the loop; what is left for the loop is a watcher it does not
     * know of yet, a server to reconnect or a failure. */
    if (failed || engine_loop_changes(e) != changes || server_health_any_waiting(e))
      ev_async_send(e->loop, &e->wake);
    own_ready = ready > 0 && pfd[n + 1].revents;
    if (e->frontend_completions != entered || ready == 0 || own_ready)
      break;
    n = lend_sockets(e, pfd, lent, own_fd, &awaited);
  }
  reap_leave(e);
  pthread_mutex_unlock(&e->lock);
  return own_ready;
}
