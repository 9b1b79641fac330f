/* The page-in path's latency tools against real rampartd processes: a reaper that spins
 * (poll-us=) and servers that spin (--poll-us) still read back every byte written, spin
 * only while a request is out and, the reaper, not under CPU pressure (poll-pressure=),
 * and stop on SIGTERM; and the hop stamps
 * (RAMPART_HOP_TRACE, common/hop_trace.h) follow each QD1 page-in through the engine,
 * the wire and the server, in order, with the server's stamps from the server's process;
 * a reply that comes after the reaper left is read at once (a blocking call's: the
 * sockets go back to the I/O thread as the reaper leaves), while a reaper at QD32 keeps
 * the sockets lent between its passes; and requests sent with
 * rampart_submit are in the request-time histogram.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "clock.h"
#include "engine_cluster.h"
#include "hop_trace.h"
#include "rampart.h"

#define PAGE RAMPART_PAGE_SIZE
#define PAGES 256u
#define SPIN_US "2000" /* long enough that a spin which did not stop would show */

struct one_io {
  struct rampart_io io;
  atomic_bool done;
  int result;
};

static void on_done(struct rampart_io *io, int result)
{
  struct one_io *o = io->user;
  o->result = result;
  atomic_store(&o->done, true);
}

/* One request at a time, waited for in rampart_reap, as a QD1 page-in is. */
static int qd1(struct rampart_engine *e, enum rampart_op op, uint64_t page, uint8_t *buf)
{
  struct one_io o = {
    .io = { .op = op, .offset = page * PAGE, .length = PAGE, .buf = buf, .done = on_done }
  };
  o.io.user = &o;
  rp_hop(RP_HOP_FRONTEND_IN);
  rampart_submit(e, &o.io);
  while (!atomic_load(&o.done))
    rampart_reap(e);
  rp_hop(RP_HOP_FRONTEND_OUT);
  return o.result;
}

static void fill(uint8_t *buf, uint64_t page)
{
  for (size_t i = 0; i < PAGE; i++)
    buf[i] = (uint8_t)(page * 131 + i * 7 + (i >> 9));
}

static void write_then_read_back(struct rampart_engine *e)
{
  uint8_t want[PAGE], got[PAGE];
  for (uint64_t p = 0; p < PAGES; p++) {
    fill(want, p);
    assert_int_equal(qd1(e, RAMPART_OP_WRITE, p, want), 0);
  }
  for (uint64_t p = 0; p < PAGES; p++) {
    uint64_t page = (p * 97) % PAGES;
    fill(want, page);
    memset(got, 0, sizeof got);
    assert_int_equal(qd1(e, RAMPART_OP_READ, page, got), 0);
    assert_memory_equal(got, want, PAGE);
  }
}

/* utime + stime, ms, of a process (all its threads). */
static double cpu_ms(pid_t pid)
{
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  const char *p = strrchr(line, ')');
  assert_non_null(p);
  unsigned long utime = 0, stime = 0;
  /* fields 14 and 15; p points at the end of field 2 */
  assert_int_equal(
    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime), 2);
  return (double)(utime + stime) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

static double thread_cpu_ms(void)
{
  struct rusage u;
  assert_int_equal(getrusage(RUSAGE_THREAD, &u), 0);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

/* Every byte comes back through a spinning reaper and spinning servers; with nothing out,
 * neither spins: an idle second costs the engine's process and each server a few ticks,
 * not the second a spin would, and a reaper with nothing out sleeps at once. The servers stop on SIGTERM (rp_test_cluster_stop fails
 * the test on one that does not exit 0). */
static void test_spinning_reaper_and_servers_read_back_and_idle(void **state)
{
  (void)state;
  static const char *const spin[] = { "--poll-us", SPIN_US, NULL };
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start_args(&c, 3, "64M", spin), 0);
  /* poll-pressure=100: a loaded machine's pressure would pause the spin under test. */
  const char *extra[] = { "redundancy",    "mirror", "poll-us", SPIN_US,
                          "poll-pressure", "100",    NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, PAGES * 4, extra);
  write_then_read_back(e);
  double server0[3];
  for (unsigned i = 0; i < 3; i++)
    server0[i] = cpu_ms(c.servers[i].pid);
  /* Reaping with nothing out: each call sleeps until its safety-net timeout (100 ms). */
  double self0 = thread_cpu_ms();
  for (unsigned k = 0; k < 10; k++)
    rampart_reap(e);
  double self = thread_cpu_ms() - self0;
  print_message("10 reaps with nothing out: %.2f ms of this thread's CPU (a spin: 20)\n",
                self);
  assert_true(self < 10);
  for (unsigned i = 0; i < 3; i++) {
    double used = cpu_ms(c.servers[i].pid) - server0[i];
    print_message("an idle second: server %u used %.0f ms of CPU\n", i, used);
    assert_true(used < 300);
  }
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

/* A reaper that spins takes a CPU, which pays only while one is idle for the server:
 * with poll-pressure=0 any CPU pressure the kernel reports pauses the spin from the
 * tick that first has a figure, and the reaper sleeps at once; with poll-pressure=100
 * it spins whatever the pressure. Every byte comes back either way. */
static void qd1_reads_with_spin(struct rp_test_cluster *c, const char *pressure,
                                struct rampart_stats *st)
{
  const char *extra[] = { "redundancy",    "mirror", "poll-us", SPIN_US,
                          "poll-pressure", pressure, NULL };
  struct rampart_engine *e = rp_test_engine_open(c, PAGES * 4, extra);
  /* Two ticks' samples make the first figure: a loaded machine may take longer. */
  for (unsigned tries = 0; strcmp(pressure, "0") == 0; tries++) {
    rampart_get_stats(e, st);
    if (st->reap_spin_paused)
      break;
    assert_true(tries < 500);
    rp_test_sleep_ms(10);
  }
  write_then_read_back(e);
  rampart_get_stats(e, st);
  rampart_close(e);
}

static void test_a_reaper_does_not_spin_under_cpu_pressure(void **state)
{
  (void)state;
  if (access("/proc/pressure/cpu", R_OK) != 0) {
    printf("skipped: this kernel has no /proc/pressure/cpu (PSI)\n");
    skip();
  }
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start(&c, 3, "64M", NULL), 0);
  struct rampart_stats paused, spinning;
  qd1_reads_with_spin(&c, "0", &paused);
  qd1_reads_with_spin(&c, "100", &spinning);
  rp_test_cluster_stop(&c);
  print_message(
    "poll-pressure=0: %llu waits spun, paused %llu ticks; poll-pressure=100: "
    "%llu spun (%llu answered while spinning), paused %llu ticks\n",
    (unsigned long long)paused.reap_spins, (unsigned long long)paused.reap_spin_paused_ticks,
    (unsigned long long)spinning.reap_spins, (unsigned long long)spinning.reap_spins_answered,
    (unsigned long long)spinning.reap_spin_paused_ticks);
  assert_int_equal(paused.reap_spins, 0);
  assert_true(paused.reap_spin_paused);
  assert_true(paused.reap_spin_paused_ticks >= 1);
  assert_true(spinning.reap_spins > PAGES);
  assert_true(spinning.reap_spins_answered > 0);
  assert_int_equal(spinning.reap_spin_paused_ticks, 0);
  assert_false(spinning.reap_spin_paused);
}

/* Two frontend threads reap at once, each waking on an eventfd of its own that its
 * requests' done callbacks write, as rampart-nbd-server's connection threads and
 * rampart-ublk's queues do. One reads the sockets; the other waits on its own fd. When
 * the reader leaves (its own reply came) and goes idle while the waiter's reply is still
 * out, the waiter must be told to read in its place: else that reply sits on a lent
 * socket nobody polls until the waiter's 100 ms safety net. Two servers, stopped while
 * the requests go out, resumed one after the other, make that order certain. */
struct waiter_read {
  struct rampart_engine *e;
  uint64_t page;
  int own_fd;
  atomic_bool done;
  int result;
  uint64_t done_ns;
  uint8_t buf[PAGE];
};

static void on_done_wake(struct rampart_io *io, int result)
{
  struct waiter_read *w = io->user;
  w->result = result;
  w->done_ns = rp_now_ns();
  atomic_store(&w->done, true);
  uint64_t one = 1;
  ssize_t ignored = write(w->own_fd, &one, sizeof one);
  (void)ignored;
}

/* One read, waited for in rampart_reap_or_fd; then the thread ends: it goes idle. */
static void *read_once(void *arg)
{
  struct waiter_read *w = arg;
  struct rampart_io io = { .op = RAMPART_OP_READ,
                           .offset = w->page * PAGE,
                           .length = PAGE,
                           .buf = w->buf,
                           .done = on_done_wake,
                           .user = w };
  rampart_submit(w->e, &io);
  while (!atomic_load(&w->done))
    if (rampart_reap_or_fd(w->e, w->own_fd)) {
      uint64_t count;
      ssize_t ignored = read(w->own_fd, &count, sizeof count);
      (void)ignored;
    }
  return NULL;
}

/* The server (0 or 1) each page was written to, redundancy=none: found from the stats. */
static unsigned written_to(struct rampart_engine *e, uint64_t before[2])
{
  struct rampart_stats st;
  rampart_get_stats(e, &st);
  unsigned at = st.servers[0].pages_live > before[0] ? 0 : 1;
  before[0] = st.servers[0].pages_live;
  before[1] = st.servers[1].pages_live;
  return at;
}

/* A device on two servers, redundancy=none, with eight pages written: on[s] is a page
 * stored on server s, so that stopping a server stalls that page's reads alone. */
static struct rampart_engine *open_on_two_servers(struct rp_test_cluster *c, uint64_t on[2])
{
  assert_int_equal(rp_test_cluster_start(c, 2, "64M", NULL), 0);
  const char *extra[] = { "redundancy", "none", NULL };
  struct rampart_engine *e = rp_test_engine_open(c, PAGES * 4, extra);
  uint8_t want[PAGE];
  uint64_t live[2] = { 0, 0 };
  on[0] = on[1] = UINT64_MAX;
  for (uint64_t p = 0; p < 8; p++) {
    fill(want, p);
    assert_int_equal(qd1(e, RAMPART_OP_WRITE, p, want), 0);
    unsigned s = written_to(e, live);
    if (on[s] == UINT64_MAX)
      on[s] = p;
  }
  assert_true(on[0] != UINT64_MAX && on[1] != UINT64_MAX);
  return e;
}

/* Until n requests are out to the servers, their replies due: on a loaded machine a
 * thread just started takes longer to send its read than any fixed sleep (CI's
 * sanitizer lane once took over 20 ms). Asking for the stats wakes the I/O thread, so
 * the caller gives it a moment to sleep again where that matters. */
static void wait_for_requests_out(struct rampart_engine *e, uint32_t n)
{
  struct rampart_stats st;
  for (unsigned tries = 0;; tries++) {
    rampart_get_stats(e, &st);
    if (st.server_requests_in_flight == n)
      return;
    assert_true(tries < 5000);
    rp_test_sleep_ms(1);
  }
}

static void test_a_waiting_reaper_reads_once_the_reader_leaves(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  uint64_t on[2];
  struct rampart_engine *e = open_on_two_servers(&c, on);
  uint8_t want[PAGE];
  static struct waiter_read reader, waiter;
  reader = (struct waiter_read){ .e = e, .page = on[0] };
  waiter = (struct waiter_read){ .e = e, .page = on[1] };
  reader.own_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  waiter.own_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  assert_true(reader.own_fd >= 0 && waiter.own_fd >= 0);
  kill(c.servers[0].pid, SIGSTOP);
  kill(c.servers[1].pid, SIGSTOP);
  pthread_t tr, tw;
  assert_int_equal(pthread_create(&tr, NULL, read_once, &reader), 0);
  wait_for_requests_out(e, 1); /* the reader is in rampart_reap: it holds the sockets */
  assert_int_equal(pthread_create(&tw, NULL, read_once, &waiter), 0);
  wait_for_requests_out(e, 2);
  rp_test_sleep_ms(5); /* the waiter waits on its own fd */
  kill(c.servers[0].pid, SIGCONT);
  pthread_join(tr, NULL); /* the reader's reply came; it is gone */
  rp_test_sleep_ms(5);
  uint64_t resumed = rp_now_ns();
  kill(c.servers[1].pid, SIGCONT);
  pthread_join(tw, NULL);
  double after_ms = (double)(waiter.done_ns - resumed) / 1e6;
  print_message("the waiter's read ended %.1f ms after its server resumed\n", after_ms);
  assert_int_equal(reader.result, 0);
  assert_int_equal(waiter.result, 0);
  fill(want, on[0]);
  assert_memory_equal(reader.buf, want, PAGE);
  fill(want, on[1]);
  assert_memory_equal(waiter.buf, want, PAGE);
  /* Told at once, the waiter reads its reply as it comes: a few ms on a loaded machine.
   * Not told, it sleeps out its 100 ms safety net: 60 ms or more after the resume. */
  assert_true(after_ms < 40);
  close(reader.own_fd);
  close(waiter.own_fd);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

static uint64_t requests_timed(const struct rampart_stats *st, enum rampart_op op)
{
  uint64_t n = 0;
  for (unsigned k = 0; k < RAMPART_LATENCY_BUCKETS; k++)
    n += st->latency_count[op][k];
  return n;
}

/* Requests sent with rampart_submit, as rampart-fuse, the ublk target and
 * rampart-nbd-server send them, are in the request-time histogram: each once, none
 * in the last bucket (past 4 s), the mean at least a microsecond. (Only the synchronous calls
 * were counted once, and the metrics of those frontends said nothing.) */
static void test_submitted_requests_are_timed(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start(&c, 2, "64M", NULL), 0);
  const char *extra[] = { "redundancy", "none", NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, PAGES * 4, extra);
  write_then_read_back(e);
  struct rampart_stats st;
  rampart_get_stats(e, &st);
  assert_int_equal(requests_timed(&st, RAMPART_OP_WRITE), PAGES);
  assert_int_equal(requests_timed(&st, RAMPART_OP_READ), PAGES);
  assert_int_equal(st.latency_count[RAMPART_OP_READ][RAMPART_LATENCY_BUCKETS - 1], 0);
  double mean_us = (double)st.latency_sum_ns[RAMPART_OP_READ] / PAGES / 1e3;
  print_message("%u reads through rampart_submit: %.1f us each on average\n", PAGES, mean_us);
  assert_true(mean_us >= 1.0 && mean_us < 60e6);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

/* A request whose thread does not reap (it waits on its own fd), its server stalled,
 * while another thread reads a page as the reaper and goes: once the stalled server
 * answers, the reply is read at once, by the I/O thread the reaper gave the sockets back
 * to. (Left lent, it waited for the next reaper or for the I/O thread to take them back
 * two ticks later: 100 to 200 ms.) */
static void test_a_reply_after_the_reaper_left_is_read(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  uint64_t on[2];
  struct rampart_engine *e = open_on_two_servers(&c, on);
  uint8_t want[PAGE], got[PAGE];
  double worst_ms = 0;
  for (unsigned round = 0; round < 3; round++) {
    static struct waiter_read stalled;
    stalled = (struct waiter_read){ .e = e, .page = on[0] };
    stalled.own_fd = eventfd(0, EFD_CLOEXEC);
    assert_true(stalled.own_fd >= 0);
    struct rampart_io io = { .op = RAMPART_OP_READ,
                             .offset = on[0] * PAGE,
                             .length = PAGE,
                             .buf = stalled.buf,
                             .done = on_done_wake,
                             .user = &stalled };
    kill(c.servers[0].pid, SIGSTOP);
    rampart_submit(e, &io);
    fill(want, on[1]);
    assert_int_equal(qd1(e, RAMPART_OP_READ, on[1], got), 0); /* reaps, and goes */
    assert_memory_equal(got, want, PAGE);
    rp_test_sleep_ms(5);
    uint64_t resumed = rp_now_ns();
    kill(c.servers[0].pid, SIGCONT);
    uint64_t count;
    assert_int_equal(read(stalled.own_fd, &count, sizeof count), (ssize_t)sizeof count);
    double after_ms = (double)(stalled.done_ns - resumed) / 1e6;
    worst_ms = after_ms > worst_ms ? after_ms : worst_ms;
    assert_int_equal(stalled.result, 0);
    fill(want, on[0]);
    assert_memory_equal(stalled.buf, want, PAGE);
    close(stalled.own_fd);
  }
  print_message("a reply that came after the reaper left was read %.1f ms after its server "
                "resumed, at worst\n",
                worst_ms);
  assert_true(worst_ms < 40);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

/* A blocking call (rampart_pread) sleeps on a futex, not in rampart_reap: when the
 * reaper leaves with its reply due and no other frontend request out, nobody would come
 * back for it, so the sockets go back to the I/O thread as the reaper leaves, not a
 * grace later. */
struct blocking_read {
  struct rampart_engine *e;
  uint64_t page;
  int result;
  uint8_t buf[PAGE];
};

static void *pread_once(void *arg)
{
  struct blocking_read *b = arg;
  b->result = rampart_pread(b->e, b->buf, PAGE, b->page * PAGE);
  return NULL;
}

/* A request out to a stopped server, from another thread that does not reap for it;
 * this thread reads a page as the reaper and goes. Its reply due, the sockets go back to
 * the I/O thread as the reaper leaves, not a grace later. */
static void reaper_leaves_with_an_unreaped_reply_due(struct blocking_read *(*start_stalled)(
  struct rampart_engine *e, uint64_t page, pthread_t *t))
{
  struct rp_test_cluster c;
  uint64_t on[2];
  struct rampart_engine *e = open_on_two_servers(&c, on);
  uint8_t want[PAGE], got[PAGE];
  fill(want, on[1]);
  struct rampart_stats st;
  rampart_get_stats(e, &st);
  uint64_t hand_backs = st.reap_hand_backs;
  assert_int_equal(qd1(e, RAMPART_OP_READ, on[1], got), 0); /* nothing due: stays lent */
  kill(c.servers[0].pid, SIGSTOP);
  pthread_t t;
  struct blocking_read *stalled = start_stalled(e, on[0], &t);
  wait_for_requests_out(e, 1); /* its read, to the stopped server */
  rp_test_sleep_ms(5);         /* the I/O thread, woken for the stats, sleeps again */
  assert_int_equal(qd1(e, RAMPART_OP_READ, on[1], got), 0); /* reaps, and goes */
  assert_memory_equal(got, want, PAGE);
  rampart_get_stats(e, &st);
  print_message("sockets handed back as the reaper left: %llu; lent now: %s\n",
                (unsigned long long)(st.reap_hand_backs - hand_backs),
                st.reap_sockets_lent ? "yes" : "no");
  /* Lent still, they would wait for a grace timer, 2 ms on. (On a loaded machine the I/O
   * thread may have taken them back before this reaper came, past its two ticks, and
   * read the reply itself: then there was nothing to hand back.) */
  assert_false(st.reap_sockets_lent);
  kill(c.servers[0].pid, SIGCONT);
  pthread_join(t, NULL);
  assert_int_equal(stalled->result, 0);
  fill(want, on[0]);
  assert_memory_equal(stalled->buf, want, PAGE);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

static struct blocking_read *start_blocking_read(struct rampart_engine *e, uint64_t page,
                                                 pthread_t *t)
{
  static struct blocking_read b;
  b = (struct blocking_read){ .e = e, .page = page };
  assert_int_equal(pthread_create(t, NULL, pread_once, &b), 0);
  return &b;
}

static void test_a_blocking_calls_reply_goes_to_the_io_thread_at_once(void **state)
{
  (void)state;
  reaper_leaves_with_an_unreaped_reply_due(start_blocking_read);
}

/* A request answered from its completion (rampart-fuse's): submitted with
 * RAMPART_IO_NO_REAPER by a thread that goes on to other work. */
struct answered_read {
  struct blocking_read r; /* the harness reads its result and buffer */
  struct rampart_io io;
  sem_t done;
};

static void answer_on_completion(struct rampart_io *io, int result)
{
  struct answered_read *a = io->user;
  a->r.result = result;
  sem_post(&a->done);
}

static void *wait_for_answer(void *arg)
{
  struct answered_read *a = arg;
  while (sem_wait(&a->done) < 0)
    ;
  sem_destroy(&a->done);
  return NULL;
}

static struct blocking_read *start_answered_read(struct rampart_engine *e, uint64_t page,
                                                 pthread_t *t)
{
  static struct answered_read a;
  a = (struct answered_read){ .r = { .e = e, .page = page } };
  assert_int_equal(sem_init(&a.done, 0, 0), 0);
  a.io = (struct rampart_io){ .op = RAMPART_OP_READ,
                              .flags = RAMPART_IO_NO_REAPER,
                              .offset = page * PAGE,
                              .length = PAGE,
                              .buf = a.r.buf,
                              .done = answer_on_completion,
                              .user = &a };
  rampart_submit(e, &a.io);
  assert_int_equal(pthread_create(t, NULL, wait_for_answer, &a), 0);
  return &a.r;
}

static void test_an_answered_requests_reply_goes_to_the_io_thread_at_once(void **state)
{
  (void)state;
  reaper_leaves_with_an_unreaped_reply_due(start_answered_read);
}

/* The sockets stay lent when a QD1 reaper leaves with nothing due. A request whose
 * submitter does not reap, started then, takes them back to the I/O thread: else its
 * reply lies on a socket nobody polls until the I/O thread's two ticks, 100 to 200 ms
 * (found in review: 190.8, 99.4, 98.3, 98.3, 99.5 ms). */
static void test_a_request_nobody_reaps_for_takes_the_lent_sockets(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  uint64_t on[2];
  struct rampart_engine *e = open_on_two_servers(&c, on);
  uint8_t want[PAGE], got[PAGE];
  double worst_ms[2] = { 0, 0 };
  for (unsigned round = 0; round < 6; round++) {
    bool blocking = round % 2;
    fill(want, on[1]);
    assert_int_equal(qd1(e, RAMPART_OP_READ, on[1], got), 0); /* nothing due: stays lent */
    assert_memory_equal(got, want, PAGE);
    uint64_t start = rp_now_ns();
    struct blocking_read *r;
    if (blocking) {
      static struct blocking_read b;
      b = (struct blocking_read){ .e = e, .page = on[0] };
      pread_once(&b);
      r = &b;
    } else {
      pthread_t t;
      r = start_answered_read(e, on[0], &t);
      pthread_join(t, NULL);
    }
    double ms = (double)(rp_now_ns() - start) / 1e6;
    worst_ms[blocking] = ms > worst_ms[blocking] ? ms : worst_ms[blocking];
    assert_int_equal(r->result, 0);
    fill(want, on[0]);
    assert_memory_equal(r->buf, want, PAGE);
  }
  print_message("after a QD1 reaper left: an answered read took %.2f ms at worst, a "
                "blocking one %.2f ms\n",
                worst_ms[0], worst_ms[1]);
  assert_true(worst_ms[0] < 40 && worst_ms[1] < 40);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

/* 32 reads in flight from one thread that reaps between batches, as a connection thread
 * of rampart-nbd-server or a ublk queue does: it leaves rampart_reap with replies due on
 * every pass, and comes back microseconds later. The sockets stay lent to it: handing
 * them back to the I/O thread at each leave (an epoll_ctl per socket and a wake) more
 * than halves the reads a second at QD32. A few hand-backs are fair (the thread may lose
 * its CPU for milliseconds), not one per pass. */
#define QD32_DEPTH 32u
#define QD32_READS 20000u

static void test_a_reaper_at_qd32_keeps_the_sockets(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  uint64_t on[2];
  struct rampart_engine *e = open_on_two_servers(&c, on);
  static struct one_io ios[QD32_DEPTH];
  static uint8_t bufs[QD32_DEPTH][PAGE];
  struct rampart_stats st;
  rampart_get_stats(e, &st);
  uint64_t hand_backs = st.reap_hand_backs;
  unsigned started = 0, finished = 0, passes = 0;
  for (unsigned i = 0; i < QD32_DEPTH; i++) {
    ios[i] = (struct one_io){ .io = { .op = RAMPART_OP_READ,
                                      .length = PAGE,
                                      .buf = bufs[i],
                                      .done = on_done,
                                      .user = &ios[i] } };
    ios[i].io.offset = (i % 8) * PAGE;
    rampart_submit(e, &ios[i].io);
    started++;
  }
  uint8_t want[PAGE];
  while (finished < started) {
    rampart_reap(e);
    passes++;
    for (unsigned i = 0; i < QD32_DEPTH; i++) {
      if (!atomic_load(&ios[i].done))
        continue;
      assert_int_equal(ios[i].result, 0);
      uint64_t page = ios[i].io.offset / PAGE;
      fill(want, page);
      assert_memory_equal(bufs[i], want, PAGE);
      finished++;
      if (started < QD32_READS) {
        atomic_store(&ios[i].done, false);
        ios[i].io.offset = ((page + 1) % 8) * PAGE;
        rampart_submit(e, &ios[i].io);
        started++;
      } else {
        ios[i].io.offset = UINT64_MAX; /* finished for good: not counted again */
        atomic_store(&ios[i].done, false);
      }
    }
  }
  rampart_get_stats(e, &st);
  hand_backs = st.reap_hand_backs - hand_backs;
  print_message("%u reads at QD32 in %u passes of rampart_reap: sockets handed back %llu "
                "times\n",
                finished, passes, (unsigned long long)hand_backs);
  assert_true(hand_backs * 10 < passes);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

static int by_ns(const void *a, const void *b)
{
  const struct rp_hop_stamp *x = a, *y = b;
  return x->ns < y->ns ? -1 : x->ns > y->ns;
}

/* With RAMPART_HOP_TRACE set before the servers and the engine start, each QD1 request
 * leaves its eight stamps in hop order, the server's two from a server's process. */
static void test_hop_stamps_follow_each_page_in(void **state)
{
  (void)state;
  char dir[512], trace[600];
  assert_int_equal(rp_test_tmpdir(dir, sizeof dir), 0);
  snprintf(trace, sizeof trace, "%s/hops", dir);
  setenv(RP_HOP_TRACE_ENV, trace, 1);
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start(&c, 3, "64M", NULL), 0);
  const char *extra[] = { "redundancy", "mirror", "poll-us", "0", NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, PAGES * 4, extra);
  unsetenv(RP_HOP_TRACE_ENV);
  assert_non_null(rp_hop_trace);
  write_then_read_back(e);
  rampart_close(e);
  rp_test_cluster_stop(&c);

  uint64_t n = atomic_load(&rp_hop_trace->next);
  assert_true(n > 0 && n < rp_hop_trace->capacity);
  struct rp_hop_stamp *s = malloc(n * sizeof *s);
  assert_non_null(s);
  memcpy(s, rp_hop_trace->stamp, n * sizeof *s);
  qsort(s, n, sizeof *s, by_ns);
  /* Each hop at its first stamp after the hop before it, as bench/hops reads them. */
  uint64_t at[RP_HOP_COUNT] = { 0 };
  const uint32_t self = (uint32_t)getpid();
  bool server_in_from_server = false;
  unsigned reads_and_writes = 0, from_server = 0;
  for (uint64_t i = 0; i < n; i++) {
    unsigned h = s[i].hop;
    if (h == RP_HOP_FRONTEND_IN) {
      memset(at, 0, sizeof at);
      at[h] = s[i].ns;
      continue;
    }
    if (h >= RP_HOP_COUNT || !at[h - 1] || at[h])
      continue;
    at[h] = s[i].ns;
    /* (A mirror write's two servers may answer in either order: the in and the out
     * taken may be two servers', but both are a server's.) */
    if (h == RP_HOP_SERVER_IN)
      server_in_from_server = s[i].pid != self;
    if (h == RP_HOP_SERVER_OUT && server_in_from_server && s[i].pid != self)
      from_server++;
    if (h == RP_HOP_FRONTEND_OUT)
      reads_and_writes++;
  }
  free(s);
  print_message("%u of %u page-ins with every hop stamped, %u with the server's own\n",
                reads_and_writes, 2 * PAGES, from_server);
  /* Every request completes with its frontend-out stamp; a mirror write's second copy
   * and the engine's own traffic add stamps, never take one away. */
  assert_int_equal(reads_and_writes, 2 * PAGES);
  assert_int_equal(from_server, 2 * PAGES);
  rp_test_tmpdir_remove(dir);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_spinning_reaper_and_servers_read_back_and_idle),
    cmocka_unit_test(test_a_reaper_does_not_spin_under_cpu_pressure),
    cmocka_unit_test(test_hop_stamps_follow_each_page_in),
    cmocka_unit_test(test_a_waiting_reaper_reads_once_the_reader_leaves),
    cmocka_unit_test(test_submitted_requests_are_timed),
    cmocka_unit_test(test_a_reply_after_the_reaper_left_is_read),
    cmocka_unit_test(test_a_reaper_at_qd32_keeps_the_sockets),
    cmocka_unit_test(test_a_blocking_calls_reply_goes_to_the_io_thread_at_once),
    cmocka_unit_test(test_an_answered_requests_reply_goes_to_the_io_thread_at_once),
    cmocka_unit_test(test_a_request_nobody_reaps_for_takes_the_lent_sockets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
