/* The engine's life cycle and its I/O thread (src/README.md maps the layers).
 *
 * One lock makes the engine single-threaded. The I/O thread holds it except while its
 * loop sleeps in the poll (libev's release/acquire callbacks, the pattern of libev's
 * own thread-locking example). With submit=inline (the default, config.c), a frontend
 * that finds the lock free starts its request itself: seals the pages, places them and
 * sends the frames on its own time slice, then sleeps until the reply wakes it. One that
 * finds the lock taken, and every request under submit=handover, is pushed on a
 * lock-free stack and the I/O thread is woken with ev_async (the hand-over), which
 * starts it on its next pass. Either way a request is started under the lock, so the
 * engine's state has one writer at a time (docs/engine.md, "Run to completion").
 * Replies run on the I/O thread, or on a frontend thread waiting in rampart_reap
 * (engine_reap.c: it is lent the sockets); timers and reconnects always run on the I/O
 * thread. Each request is split into per-page operations from a fixed pool; when the
 * pool is empty the request waits its turn, so a burst of I/O never allocates.
 * A function another thread runs on the engine (engine_call, a stats snapshot) is a
 * message of its own, taken the same two ways: inline, or on a stack the loop's wake runs.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cluster_follow.h"
#include "control_socket.h"
#include "engine_internal.h"
#include "engine_restore.h"
#include "event_arena.h"
#include "fifo.h"
#include "log.h"
#include "page_mover.h"
#include "page_read.h"
#include "page_rmw.h"
#include "page_write.h"
#include "page_write_pending.h"
#include "state_segment.h"
#include "hop_trace.h"
#include "secret.h"
#include "server_health.h"
#include "server_transport.h"
#include "state_record.h"
#include "stats_file.h"
#include "thread_start.h"

/* Bucket k counts requests of at most 2^k microseconds (rampart.h). */
static unsigned latency_bucket(uint64_t ns)
{
  uint64_t us = (ns + 999) / 1000;
  unsigned k = us <= 1 ? 0 : 64u - (unsigned)__builtin_clzll(us - 1);
  return k < RAMPART_LATENCY_BUCKETS - 1 ? k : RAMPART_LATENCY_BUCKETS - 1;
}

/* Two relaxed atomic adds, no lock: a request may end on any thread that runs the engine. */
static void count_latency(struct rampart_engine *e, enum rampart_op op, uint64_t ns)
{
  atomic_fetch_add_explicit(&e->latency_count[op][latency_bucket(ns)], 1,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(&e->latency_sum_ns[op], ns, memory_order_relaxed);
}

/* Every frontend request ends here: counted, so that a thread in rampart_reap learns
 * that the I/O thread completed something (engine_reap_wake), and timed from its
 * submission, whichever frontend sent it. */
static void frontend_done(struct rampart_engine *e, struct rampart_io *io, int result)
{
  e->frontend_completions++;
  if (io->flags & RAMPART_IO_NO_REAPER)
    e->unreaped_completions++;
  if ((unsigned)io->op < RAMPART_LATENCY_OPS)
    count_latency(e, io->op, engine_now_ns() - io->submitted_ns);
  rp_hop(RP_HOP_ENGINE_DONE);
  io->done(io, result);
}

/* A frontend's request completes with its last page. */
void engine_request_page_ended(struct rampart_engine *e, struct rampart_io *io, int result)
{
  if (result < 0 && io->result == 0)
    io->result = result;
  if (--io->pages_pending != 0)
    return;
  if (!e->defer_completions) {
    frontend_done(e, io, io->result);
    return;
  }
  /* next is free once its last page started (engine_start_ios) */
  FIFO_APPEND(e->done_head, e->done_tail, io, next);
}

static void request_page_ended(struct page_op *op, int result)
{
  /* The prefetcher's hook: a write may wait (for a buffer, for cleaning) before it
   * places its version, and a prefetch meanwhile reads the version it replaces. */
  if (op->kind == PAGE_OP_WRITE)
    prefetch_forget(op->engine, op->page);
  engine_request_page_ended(op->engine, op->io, result);
}

/* The requests the last pass of the loop completed, in the order they completed. */
void engine_deliver_completions(struct rampart_engine *e)
{
  struct rampart_io *io;
  FIFO_TAKE_ALL(e->done_head, e->done_tail, io);
  while (io) {
    struct rampart_io *next = io->next; /* io belongs to its caller once done runs */
    frontend_done(e, io, io->result);
    io = next;
  }
}

static const struct page_op_owner frontend_request = {
  .read_ended = page_op_finished,
  .ended = request_page_ended,
};

/* ---- requests --------------------------------------------------------------- */

static bool io_is_valid(const struct rampart_engine *e, const struct rampart_io *io)
{
  if (io->op == RAMPART_OP_FLUSH)
    return true;
  if (io->offset % RAMPART_PAGE_SIZE || io->length % RAMPART_PAGE_SIZE)
    return false;
  uint64_t size = e->pages * RAMPART_PAGE_SIZE;
  return io->offset <= size && io->length <= size - io->offset;
}

static void io_queue(struct rampart_engine *e, struct rampart_io *io)
{
  FIFO_APPEND(e->io_head, e->io_tail, io, next);
}

void engine_start_ios(struct rampart_engine *e)
{
  if (e->starting_ios)
    return; /* an op finished synchronously inside the loop below; it continues */
  e->starting_ios = true;
  while (e->io_head) {
    struct rampart_io *io = e->io_head;
    uint32_t npages = io->length / RAMPART_PAGE_SIZE;
    bool last;
    do {
      uint32_t i = io->pages_started;
      last = i + 1 == npages;
      /* The prefetcher's hook: a page it holds, or is fetching, needs no op. */
      if (io->op == RAMPART_OP_READ) {
        enum prefetch_answer a = prefetch_answer(e, io, io->offset / RAMPART_PAGE_SIZE + i,
                                                 (uint8_t *)io->buf +
                                                   (size_t)i * RAMPART_PAGE_SIZE);
        if (a != PREFETCH_MISS) {
          io->pages_started++;
          if (last)
            FIFO_POP(e->io_head, e->io_tail, io, next); /* as below: io is the head */
          if (a == PREFETCH_COPIED)
            engine_request_page_ended(e, io, 0);
          continue;
        }
      }
      struct page_op *op = page_op_get(e);
      if (!op)
        goto out;
      io->pages_started++;
      op->owner = &frontend_request;
      op->kind = io->op == RAMPART_OP_READ ? PAGE_OP_READ : PAGE_OP_WRITE;
      op->io = io;
      op->page = io->offset / RAMPART_PAGE_SIZE + i;
      op->buf = (uint8_t *)io->buf + (size_t)i * RAMPART_PAGE_SIZE;
      /* Sealed once, here: whatever path the write then takes (parity, spill, local RAM,
       * retries), it stores the ciphertext in the op's own page, never the caller's. */
      if (op->kind == PAGE_OP_WRITE) {
        op->buf = (uint8_t *)page_seal(&e->sealer, op->page, op->buf, op->scratch, &op->seal);
        /* encrypt=off stores the caller's bytes as they are; with state= they go to the
         * op's page in the state too, to be sent again after a crash. */
        if (e->state && op->buf != op->scratch) {
          memcpy(op->scratch, op->buf, RAMPART_PAGE_SIZE);
          op->buf = op->scratch;
        }
      }
      if (last) {
        /* Once its last page starts, the request may complete (and its memory go back
         * to the caller) before the start returns: unlink it now, touch it never again. */
        FIFO_POP(e->io_head, e->io_tail, io, next); /* io is the head */
      }
      if (op->kind == PAGE_OP_READ) {
        page_read_start(op);
      } else {
        prefetch_forget(e, op->page); /* the prefetcher's hook: no stale copy answers */
        page_write_start(op);
      }
    } while (!last);
  }
out:
  e->starting_ios = false;
}

static void engine_snapshot_stats(struct rampart_engine *e, struct rampart_stats *st);

/* ---- flush under write-through: the spill store's group commit -------------------
 *
 * A flush must cover every write completed before it arrived: it waits in
 * flush_waiting for the store's next fdatasync (spill_store_group_sync), which takes
 * every flush waiting when it is submitted into flush_running. */
static void flush_cover(struct spill_group_sync *g)
{
  struct rampart_engine *e = g->user;
  FIFO_TAKE_ALL(e->flush_waiting, e->flush_waiting_tail, e->flush_running);
}

static void flush_synced(struct spill_group_sync *g, int result)
{
  struct rampart_engine *e = g->user;
  struct rampart_io *list = e->flush_running;
  e->flush_running = NULL;
  while (list) {
    struct rampart_io *next = list->next;
    frontend_done(e, list, result);
    list = next;
  }
}

static void flush_begin(struct rampart_engine *e, struct rampart_io *io)
{
  FIFO_APPEND(e->flush_waiting, e->flush_waiting_tail, io, next);
  spill_store_group_sync(e->spill, &e->flush_sync);
}

static void io_begin(struct rampart_engine *e, struct rampart_io *io)
{
  io->result = 0;
  io->pages_started = 0;
  if (!io_is_valid(e, io)) {
    frontend_done(e, io, -EINVAL);
    return;
  }
  uint32_t npages = io->length / RAMPART_PAGE_SIZE;
  switch (io->op) {
  case RAMPART_OP_FLUSH:
    if (e->redundancy->flush_syncs_disk && e->spill)
      flush_begin(e, io);
    else
      frontend_done(e, io, 0);
    return;
  case RAMPART_OP_TRIM:
  case RAMPART_OP_ZERO:
    /* Both leave the pages reading as zeros; no I/O, only bookkeeping. */
    for (uint32_t i = 0; i < npages; i++) {
      prefetch_forget(e, io->offset / RAMPART_PAGE_SIZE + i); /* the prefetcher's hook */
      page_write_trim(e, io->offset / RAMPART_PAGE_SIZE + i);
    }
    frontend_done(e, io, 0);
    return;
  case RAMPART_OP_READ:
  case RAMPART_OP_WRITE:
    if (npages == 0) {
      frontend_done(e, io, 0);
      return;
    }
    io->pages_pending = npages;
    engine_reap_request_starts(e, io); /* before it is sent, while io is still ours */
    /* (io may complete, and be reused, once it starts) */
    bool read = io->op == RAMPART_OP_READ;
    uint64_t first = io->offset / RAMPART_PAGE_SIZE;
    io_queue(e, io);
    engine_start_ios(e);
    /* The prefetcher's hook, after the read's own pages started: demand goes first. */
    if (read)
      prefetch_after_read(e, first, npages);
    return;
  }
  frontend_done(e, io, -EINVAL);
}

/* ---- the I/O thread ----------------------------------------------------------- */

static void on_wake(struct ev_loop *loop, ev_async *w, int revents)
{
  struct rampart_engine *e = w->data;
  if (atomic_load(&e->stopping)) {
    /* Let moves in flight finish (on_mover_prepare breaks the loop then), so closing
     * never tears a page move in half. */
    e->draining = true;
    if (page_mover_in_flight(e) == 0)
      ev_break(loop, EVBREAK_ALL);
    return;
  }
  /* The stack holds the newest first; reverse it so requests start in arrival order. */
  struct rampart_io *list = atomic_exchange(&e->incoming, NULL), *fifo = NULL;
  while (list) {
    struct rampart_io *next = list->next;
    list->next = fifo;
    fifo = list;
    list = next;
  }
  while (fifo) {
    struct rampart_io *next = fifo->next;
    io_begin(e, fifo);
    fifo = next;
  }
  engine_run_calls(e);
  server_transport_flush(e);
  if (e->spill)
    spill_store_flush_submissions(e->spill);
  engine_reap_start_grace(e);
}

/* The stats report for rampartctl and the Prometheus metrics, once a second: formatted
 * here, written by stats_file.c's threads. */
static void publish_reports(struct rampart_engine *e)
{
  struct rampart_stats st;
  engine_snapshot_stats(e, &st);
  if (e->stats_file) {
    rampart_format_stats(&st, e->report, STATS_FILE_MAX_REPORT);
    stats_file_publish(e->stats_file, e->report, strlen(e->report));
  }
  if (e->metrics_file) {
    size_t n = rampart_format_metrics(&st, e->report, STATS_FILE_MAX_REPORT);
    if (n < STATS_FILE_MAX_REPORT) {
      stats_file_publish(e->metrics_file, e->report, n);
    } else if (!e->metrics_too_big_logged) {
      rp_log(RP_LOG_WARN,
             "metrics-file=%s: the metrics outgrew their %u-byte buffer; not "
             "written",
             e->config.metrics_path, STATS_FILE_MAX_REPORT);
      e->metrics_too_big_logged = true;
    }
  }
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
  struct rampart_engine *e = w->data;
  if (e->draining && ++e->drain_ticks > 50) {
    rp_log(RP_LOG_WARN, "closing with %u page moves still in flight after 5 s",
           page_mover_in_flight(e));
    ev_break(loop, EVBREAK_ALL);
    return;
  }
  if (++e->ticks % 10 == 0) {
    if (e->read_errors_logged > 10)
      rp_log(RP_LOG_ERROR,
             "%u more pages could not be read or were lost in the last "
             "second (EIO)",
             e->read_errors_logged - 10);
    e->read_errors_logged = 0;
    if (e->stats_file || e->metrics_file)
      publish_reports(e);
  }
  server_health_tick(e);
  engine_restore_save_servers(e); /* states and flags; tokens are saved as they change */
  page_mover_tick(e);
  /* Ops waiting on cleaning are normally woken by a finished move; re-check them each
   * tick too, so that a move that never finishes slows writes down instead of hanging
   * them. */
  if (e->wait_head)
    page_op_run_waiting(e);
  if (e->reads_awaiting_write)
    page_read_expire_write_waits(e, engine_now_ns());
  if (e->spill)
    spill_quarantine_advance(&e->quarantine, e->spill);
  if (e->spill)
    spill_store_flush_submissions(e->spill);
  engine_reap_tick(e);
}

static void on_spill_ready(struct ev_loop *loop, ev_io *w, int revents)
{
  struct rampart_engine *e = w->data;
  uint64_t count;
  ssize_t ignored = read(spill_store_event_fd(e->spill), &count, sizeof count);
  (void)ignored;
  spill_store_reap(e->spill);
  spill_quarantine_advance(&e->quarantine, e->spill);
  spill_store_flush_submissions(e->spill);
}

/* Before each loop iteration blocks: keep the mover busy while it has work, let writes
 * that waited on cleaning go on once moves have finished, and send what is queued. */
static void on_mover_prepare(struct ev_loop *loop, ev_prepare *w, int revents)
{
  struct rampart_engine *e = w->data;
  if (e->draining && page_mover_in_flight(e) == 0) {
    ev_break(loop, EVBREAK_ALL);
    return;
  }
  engine_before_poll(e);
  engine_reap_before_loop_sleeps(e);
}

void engine_before_poll(struct rampart_engine *e)
{
  page_mover_run(e);
  if (page_mover_take_wakeup(e)) {
    page_op_run_waiting(e);
  }
  /* Everything this iteration's callbacks and the mover queued goes out now, one
   * sendmsg per server, before the poll: left to the connections' write watchers, each
   * burst would cost two epoll_ctl and a wake-up of the loop just to learn that an idle
   * socket is writable. */
  server_transport_flush(e);
  if (e->spill)
    spill_store_flush_submissions(e->spill);
}

/* libev calls these around its blocking poll and nowhere else: the engine is free for a
 * frontend exactly while the I/O thread has nothing to do. */
static void loop_release(struct ev_loop *loop)
{
  struct rampart_engine *e = ev_userdata(loop);
  engine_deliver_completions(e);
  e->defer_completions = false; /* a request started inline completes in its own pass */
  e->loop_sleeping = true;
  engine_reap_wake(e);
  pthread_mutex_unlock(&e->lock);
}

static void loop_acquire(struct ev_loop *loop)
{
  struct rampart_engine *e = ev_userdata(loop);
  pthread_mutex_lock(&e->lock);
  e->loop_sleeping = false;
  e->defer_completions = true;
}

static void *io_thread_main(void *arg)
{
  struct rampart_engine *e = arg;
  pthread_mutex_lock(&e->lock);
  ev_run(e->loop, 0);
  engine_deliver_completions(e);
  engine_reap_wake(e);
  e->defer_completions = false;
  e->loop_sleeping = false; /* no loop to run a request started inline from now on */
  pthread_mutex_unlock(&e->lock);
  return NULL;
}

unsigned engine_loop_changes(const struct rampart_engine *e)
{
  unsigned n = e->loop_changes;
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (e->set.servers[i]->conn)
      n += rp_conn_loop_changes(e->set.servers[i]->conn);
  return n;
}

static bool loop_needed(struct rampart_engine *e)
{
  return e->io_head || e->wait_head || server_health_any_waiting(e) ||
         page_mover_wakeup_pending(e);
}

/* A frontend thread may take the engine itself while the I/O thread sleeps in its poll
 * (submit=inline): hold_inline takes it, or says to hand over instead. release_inline
 * sends what the thread queued and wakes the loop when the thread left it something it
 * does not know of yet: a watcher started, or an op parked until a parity buffer, a
 * move or a server frees up (only the loop's passes start those again). */
static bool hold_inline(struct rampart_engine *e, unsigned *changes)
{
  if (!e->config.submit_inline || pthread_mutex_trylock(&e->lock) != 0)
    return false;
  if (!e->loop_sleeping || atomic_load(&e->stopping)) {
    pthread_mutex_unlock(&e->lock); /* not started yet, or closing: the hand-over */
    return false;
  }
  *changes = engine_loop_changes(e);
  return true;
}

static void release_inline(struct rampart_engine *e, unsigned changes)
{
  server_transport_flush(e);
  if (e->spill)
    spill_store_flush_submissions(e->spill);
  /* While a thread reaps (engine_reap.c) its passes do the loop's work before a poll
   * (the mover, ops parked on cleaning), and requests waiting for page ops start as its
   * replies end ops: only a watcher or a server to reconnect needs the loop then. */
  bool wake = engine_loop_changes(e) != changes ||
              (e->reap.holds ? server_health_any_waiting(e) : loop_needed(e));
  engine_reap_wake(e);
  pthread_mutex_unlock(&e->lock);
  if (wake)
    ev_async_send(e->loop, &e->wake);
}

/* Starts io and the requests linked after it on the calling thread, if it can hold the
 * engine: true when done (the replies still come through the loop or a reaper). */
static bool submit_inline(struct rampart_engine *e, struct rampart_io *io)
{
  unsigned changes;
  if (!hold_inline(e, &changes))
    return false;
  while (io) {
    struct rampart_io *next = io->next; /* io may complete, and be reused, in io_begin */
    io_begin(e, io);
    io = next;
  }
  release_inline(e, changes);
  return true;
}

void rampart_submit(struct rampart_engine *e, struct rampart_io *io)
{
  io->next = NULL;
  rampart_submit_list(e, io);
}

void rampart_submit_list(struct rampart_engine *e, struct rampart_io *first)
{
  rp_hop(RP_HOP_ENGINE_SUBMIT);
  uint64_t now = engine_now_ns();
  uint64_t n = 0, unreaped = 0;
  for (struct rampart_io *io = first; io; io = io->next, n++) {
    io->submitted_ns = now;
    unreaped += (io->flags & RAMPART_IO_NO_REAPER) != 0;
  }
  /* Counted before the total: a reaper that reads the total first (reapers_will_return)
   * never sees more requests with no reaper than requests. */
  if (unreaped)
    atomic_fetch_add(&e->unreaped_submitted, unreaped);
  atomic_fetch_add(&e->frontend_submitted, n);
  if (!first || submit_inline(e, first))
    return;
  /* incoming is a stack, taken in reverse: pushed newest first, the list keeps its order */
  struct rampart_io *top = NULL, *last = first;
  for (struct rampart_io *io = first, *next; io; io = next) {
    next = io->next;
    io->next = top;
    top = io;
  }
  struct rampart_io *head = atomic_load(&e->incoming);
  do
    last->next = head;
  while (!atomic_compare_exchange_weak(&e->incoming, &head, top));
  if (!head)
    ev_async_send(e->loop, &e->wake);
}

/* ---- blocking forms --------------------------------------------------------------- */

/* The caller sleeps on a futex rather than a mutex and condition variable: with a mutex
 * the woken caller would first block again on the lock the I/O thread still holds, a
 * second context switch per request (docs/performance.md has what it cost). The word
 * says whether anyone sleeps on it, so a request that ends before its caller goes to
 * sleep (started inline and ended there, refused, a trim) costs no wake. A wake that reaches the futex word after the caller has
 * returned lands on a dead stack address; that only ever wakes a futex waiter early,
 * and every futex waiter rechecks its condition. */
enum { SYNC_PENDING, SYNC_DONE, SYNC_SLEEPING };

struct sync_wait {
  _Atomic uint32_t state;
  int result;
};

static void sync_finish(struct sync_wait *w, int result)
{
  w->result = result;
  if (atomic_exchange_explicit(&w->state, SYNC_DONE, memory_order_acq_rel) == SYNC_SLEEPING)
    syscall(SYS_futex, &w->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void sync_done(struct rampart_io *io, int result)
{
  sync_finish(io->user, result);
}

static void sync_wait_for(struct sync_wait *w)
{
  uint32_t s = atomic_load_explicit(&w->state, memory_order_acquire);
  while (s != SYNC_DONE) {
    if (s == SYNC_PENDING &&
        !atomic_compare_exchange_weak_explicit(&w->state, &s, SYNC_SLEEPING,
                                               memory_order_acq_rel, memory_order_acquire))
      continue; /* s now holds what the word said instead */
    syscall(SYS_futex, &w->state, FUTEX_WAIT_PRIVATE, SYNC_SLEEPING, NULL, NULL, 0);
    s = atomic_load_explicit(&w->state, memory_order_acquire);
  }
}

int engine_run_sync(struct rampart_engine *e, enum rampart_op op, void *buf, uint32_t length,
                    uint64_t offset, uint32_t flags)
{
  struct sync_wait w = { .state = SYNC_PENDING };
  struct rampart_io io = { .op = op,
                           .flags = flags | RAMPART_IO_NO_REAPER, /* it sleeps on w */
                           .offset = offset,
                           .length = length,
                           .buf = buf,
                           .done = sync_done,
                           .user = &w };
  atomic_fetch_add_explicit(&e->frontend_waiting, 1, memory_order_relaxed);
  rampart_submit(e, &io);
  sync_wait_for(&w);
  atomic_fetch_sub_explicit(&e->frontend_waiting, 1, memory_order_relaxed);
  return w.result;
}

/* The aligned middle of [offset, offset+length) goes straight through; a partial first
 * or last page is read, patched and written back (page_rmw.c). */
struct span {
  uint64_t head_off;
  uint32_t head_len; /* partial first page, if any */
  uint64_t mid_off;
  uint32_t mid_len; /* whole pages */
  uint64_t tail_off;
  uint32_t tail_len; /* partial last page, if any */
};

static struct span split_span(uint32_t length, uint64_t offset)
{
  struct span sp = { 0 };
  uint64_t end = offset + length;
  uint64_t first_full = (offset + RAMPART_PAGE_SIZE - 1) & ~(uint64_t)(RAMPART_PAGE_SIZE - 1);
  uint64_t last_full = end & ~(uint64_t)(RAMPART_PAGE_SIZE - 1);
  if (first_full >= last_full) {
    /* Within one page, or straddling one page boundary with no whole page. */
    sp.head_off = offset;
    uint64_t page_end = (offset & ~(uint64_t)(RAMPART_PAGE_SIZE - 1)) + RAMPART_PAGE_SIZE;
    sp.head_len = (uint32_t)((end < page_end ? end : page_end) - offset);
    if (end > page_end) {
      sp.tail_off = page_end;
      sp.tail_len = (uint32_t)(end - page_end);
    }
    return sp;
  }
  if (offset < first_full) {
    sp.head_off = offset;
    sp.head_len = (uint32_t)(first_full - offset);
  }
  sp.mid_off = first_full;
  sp.mid_len = (uint32_t)(last_full - first_full);
  if (end > last_full) {
    sp.tail_off = last_full;
    sp.tail_len = (uint32_t)(end - last_full);
  }
  return sp;
}

static bool in_range(const struct rampart_engine *e, uint32_t length, uint64_t offset)
{
  uint64_t size = e->pages * RAMPART_PAGE_SIZE;
  return offset <= size && length <= size - offset;
}

int rampart_pread(struct rampart_engine *e, void *buf, uint32_t length, uint64_t offset)
{
  if (!in_range(e, length, offset))
    return -EINVAL;
  struct span sp = split_span(length, offset);
  uint8_t *p = buf;
  int r = 0;
  if (sp.head_len)
    r = page_rmw_read(e->rmw, p, sp.head_len, sp.head_off);
  if (r == 0 && sp.mid_len)
    r = engine_run_sync(e, RAMPART_OP_READ, p + (sp.mid_off - offset), sp.mid_len, sp.mid_off,
                        0);
  if (r == 0 && sp.tail_len)
    r = page_rmw_read(e->rmw, p + (sp.tail_off - offset), sp.tail_len, sp.tail_off);
  return r;
}

int rampart_pwrite(struct rampart_engine *e, const void *buf, uint32_t length,
                   uint64_t offset, uint32_t flags)
{
  if (!in_range(e, length, offset))
    return -EINVAL;
  struct span sp = split_span(length, offset);
  const uint8_t *p = buf;
  int r = 0;
  if (sp.head_len)
    r = page_rmw_write(e->rmw, p, sp.head_len, sp.head_off, flags);
  /* The engine never writes through io->buf on a write. */
  if (r == 0 && sp.mid_len)
    r = engine_run_sync(e, RAMPART_OP_WRITE, (void *)(p + (sp.mid_off - offset)), sp.mid_len,
                        sp.mid_off, flags);
  if (r == 0 && sp.tail_len)
    r = page_rmw_write(e->rmw, p + (sp.tail_off - offset), sp.tail_len, sp.tail_off, flags);
  return r;
}

int rampart_trim(struct rampart_engine *e, uint32_t length, uint64_t offset)
{
  if (!in_range(e, length, offset))
    return -EINVAL;
  struct span sp = split_span(length, offset);
  if (sp.mid_len == 0)
    return 0;
  return engine_run_sync(e, RAMPART_OP_TRIM, NULL, sp.mid_len, sp.mid_off, 0);
}

int rampart_zero(struct rampart_engine *e, uint32_t length, uint64_t offset)
{
  if (!in_range(e, length, offset))
    return -EINVAL;
  struct span sp = split_span(length, offset);
  int r = 0;
  if (sp.head_len)
    r = page_rmw_write(e->rmw, NULL, sp.head_len, sp.head_off, 0);
  if (r == 0 && sp.mid_len)
    r = engine_run_sync(e, RAMPART_OP_ZERO, NULL, sp.mid_len, sp.mid_off, 0);
  if (r == 0 && sp.tail_len)
    r = page_rmw_write(e->rmw, NULL, sp.tail_len, sp.tail_off, 0);
  return r;
}

int rampart_flush(struct rampart_engine *e)
{
  return engine_run_sync(e, RAMPART_OP_FLUSH, NULL, 0, 0, 0);
}

void rampart_warm_up(void)
{
  page_sealer_warm_up();
}

bool rampart_took_over(const struct rampart_engine *e)
{
  return e->state_recovered;
}

uint64_t rampart_size(const struct rampart_engine *e)
{
  return e->pages * RAMPART_PAGE_SIZE;
}

/* ---- stats ---------------------------------------------------------------------- */

/* Every server that matters is in the stats: the current ones, and old incarnations
 * that pages still depend on (being rebuilt from). Only a table longer than the stats
 * leaves entries out: first the oldest retired ones, which nothing depends on, then the
 * oldest other old incarnations; never a current server (there are at most
 * RAMPART_MAX_SERVERS of them). */
_Static_assert(RAMPART_MAX_SERVERS < RAMPART_MAX_INCARNATIONS,
               "the stats hold every listed server and incarnations past them");
_Static_assert(RAMPART_MAX_SERVERS < ENGINE_MAX_INCARNATIONS,
               "room for incarnations past the listed servers");

enum stats_rank { STATS_RETIRED, STATS_OLD, STATS_CURRENT, STATS_RANKS };

static enum stats_rank server_stats_rank(const struct server *s, uint64_t live,
                                         uint64_t at_risk)
{
  if (!s->health.replaced && s->state != RAMPART_SERVER_REMOVED)
    return STATS_CURRENT;
  return live == 0 && at_risk == 0 ? STATS_RETIRED : STATS_OLD;
}

/* How many entries of each rank to leave out, when the table outgrew the stats. */
static void stats_leave_out(const struct rampart_engine *e, unsigned leave_out[STATS_RANKS])
{
  unsigned excess = e->set.nservers > RAMPART_MAX_INCARNATIONS
                      ? e->set.nservers - RAMPART_MAX_INCARNATIONS
                      : 0;
  unsigned count[STATS_RANKS] = { 0 };
  for (unsigned i = 0; excess > 0 && i < e->set.nservers; i++)
    count[server_stats_rank(e->set.servers[i], e->set.live[i], e->set.at_risk[i])]++;
  for (unsigned r = 0; r < STATS_RANKS; r++) {
    leave_out[r] = excess < count[r] ? excess : count[r];
    excess -= leave_out[r];
  }
}

static void engine_snapshot_stats(struct rampart_engine *e, struct rampart_stats *st)
{
  memset(st, 0, sizeof *st);
  st->device_pages = e->pages;
  st->redundancy = e->policy;
  st->group_size = e->group_size;
  st->parity = e->parities;
  st->server_entries = e->set.nservers;
  uint64_t *live = e->set.live, *at_risk = e->set.at_risk;
  page_mover_live_by_server(e, live, at_risk);
  unsigned leave_out[STATS_RANKS];
  stats_leave_out(e, leave_out);
  for (unsigned i = 0; i < e->set.nservers && st->nservers < RAMPART_MAX_INCARNATIONS; i++) {
    struct server *s = e->set.servers[i];
    enum stats_rank rank = server_stats_rank(s, live[i], at_risk[i]);
    if (leave_out[rank] > 0) {
      leave_out[rank]--;
      continue;
    }
    struct rampart_server_stats *ss = &st->servers[st->nservers++];
    ss->index = i;
    snprintf(ss->address, sizeof ss->address, "%s", s->address);
    ss->state = s->state;
    ss->pages_live = live[i];
    /* The open group's parity slots are taken when the group opens but written only
     * when it seals: the server does not hold those pages yet. */
    bool group_open = e->redundancy->parity && e->placement.open_group != GROUP_NONE;
    unsigned parity_reserved = group_open && e->placement.open_parity_server == i;
    parity_reserved += group_open && e->parities > 1 && e->placement.open_q_server == i;
    ss->pages_stored = s->slots.in_use - parity_reserved;
    ss->pages_reserved = s->reserved_pages;
    ss->suspect = s->suspect;
    ss->integrity_failures = s->integrity_failures;
    ss->pages_dependent = at_risk[i];
    ss->draining = s->leaving && !s->drained && s->state != RAMPART_SERVER_REMOVED;
    ss->drained = s->leaving && s->drained;
    ss->removing = s->remove_when_drained && s->state != RAMPART_SERVER_REMOVED;
  }
  st->groups_open = e->groups.in_use;
  st->groups_sealed = e->groups.sealed;
  st->groups_reclaimed = e->groups.reclaimed;
  st->live_ratio = group_table_live_ratio(&e->groups);
  st->pages_zero = e->map.count[PAGE_ZERO];
  st->pages_remote = e->map.count[PAGE_REMOTE];
  st->pages_spilled = e->map.count[PAGE_SPILL];
  st->pages_local_ram = e->map.count[PAGE_LOCAL];
  st->pages_degraded_reads = e->counters.degraded_reads;
  st->pages_lost = e->counters.pages_lost;
  st->pages_unprotected = group_table_unprotected_live(&e->groups);
  page_mover_groups_by_spare(e, &st->groups_one_spare, &st->groups_no_spare);
  st->read_errors = e->counters.read_errors;
  st->integrity_failures = e->counters.integrity_failures;
  st->encrypted = e->sealer.encrypt;
  page_mover_stats(e, st);
  for (struct page_op *w = e->wait_head; w; w = w->next)
    st->ops_waiting++;
  for (struct page_op *w = e->reads_awaiting_write; w; w = w->next)
    st->ops_waiting++;
  server_health_stats(e, st);
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (e->set.servers[i]->rebuild_needed)
      st->rebuild_pages_pending += at_risk[i];
  st->pages_written = e->counters.pages_written;
  st->pages_overwritten = e->counters.pages_overwritten;
  st->clean_rewrites = e->counters.clean_rewrites;
  st->writes_waited_for_cleaning = e->counters.writes_waited_for_cleaning;
  st->wire_bytes_written = e->counters.wire_bytes_written;
  if (e->spill) {
    st->spill_capacity_pages = spill_store_capacity(e->spill);
    st->spill_used_pages = spill_store_used(e->spill);
  }
  for (unsigned op = 0; op < RAMPART_LATENCY_OPS; op++) {
    for (unsigned k = 0; k < RAMPART_LATENCY_BUCKETS; k++)
      st->latency_count[op][k] = atomic_load_explicit(&e->latency_count[op][k],
                                                      memory_order_relaxed);
    st->latency_sum_ns[op] = atomic_load_explicit(&e->latency_sum_ns[op],
                                                  memory_order_relaxed);
  }
  st->frontend_requests = atomic_load_explicit(&e->frontend_waiting, memory_order_relaxed);
  for (unsigned i = 0; i < e->set.nservers; i++)
    if (e->set.servers[i]->conn)
      st->server_requests_in_flight += rp_conn_in_flight(e->set.servers[i]->conn);
  st->client_memory_fixed_bytes =
    (uint64_t)ENGINE_PAGE_OPS * (sizeof(struct page_op) + RAMPART_PAGE_SIZE) +
    (uint64_t)ENGINE_PARITY_BUFFERS *
      (sizeof(struct parity_buffer) + (e->parities > 1 ? 3u : 1u) * RAMPART_PAGE_SIZE) +
    (uint64_t)ENGINE_DEGRADED_READS *
      (sizeof(struct degraded_read) + DEGRADED_PIECES * RAMPART_PAGE_SIZE) +
    (uint64_t)ENGINE_FREE_REQUESTS * sizeof(struct free_request) + sizeof *e +
    rampart_event_arena_bytes() + rp_conn_pool_bytes(e->set.conn_pool) +
    (uint64_t)e->set.nservers * (sizeof(struct server) + server_health_attempt_bytes()) +
    (uint64_t)e->set.per_entry_capacity * 2 * sizeof(uint64_t);
  prefetch_stats(e, st);
  st->client_memory_fixed_bytes += st->prefetch_bytes_locked;
  /* What grows with the device: map, pending bits, groups, per-server slot bitmaps. */
  st->client_memory_bytes = st->client_memory_fixed_bytes + page_map_memory_bytes(&e->map) +
                            page_sealer_memory_bytes(&e->sealer) + (e->pages + 63) / 64 * 8 +
                            group_table_memory_bytes(&e->groups);
  for (unsigned i = 0; i < e->set.nservers; i++)
    st->client_memory_bytes += slot_allocator_bytes(&e->set.servers[i]->slots);
  cluster_follow_stats(e->follow, st);
  st->reap_hand_backs = e->reap.hand_backs;
  st->reap_sockets_lent = e->reap.holds;
  st->reap_spins = e->reap.spins;
  st->reap_spins_answered = e->reap.spins_answered;
  st->reap_spin_paused_ticks = e->reap.spin_paused_ticks;
  st->reap_spin_paused = e->reap.spin_paused;
}

/* ---- calls: a function run on the engine for another thread ---------------------- */

/* A message of its own, not a device request: a frontend's rampart_io carries only I/O. */
struct engine_call {
  void (*fn)(struct rampart_engine *e, void *arg);
  void *arg;
  struct sync_wait wait;
  struct engine_call *next;
};

void engine_run_calls(struct rampart_engine *e)
{
  struct engine_call *list = atomic_exchange(&e->calls, NULL), *fifo = NULL;
  while (list) { /* a stack, newest first: run them in the order they came */
    struct engine_call *next = list->next;
    list->next = fifo;
    fifo = list;
    list = next;
  }
  while (fifo) {
    struct engine_call *next = fifo->next; /* the caller's stack frame, gone once finished */
    fifo->fn(e, fifo->arg);
    sync_finish(&fifo->wait, 0);
    fifo = next;
  }
}

void engine_call(struct rampart_engine *e, void (*fn)(struct rampart_engine *e, void *arg),
                 void *arg)
{
  unsigned changes;
  if (hold_inline(e, &changes)) {
    fn(e, arg);
    release_inline(e, changes);
    return;
  }
  struct engine_call c = { .fn = fn, .arg = arg, .wait = { .state = SYNC_PENDING } };
  struct engine_call *head = atomic_load(&e->calls);
  do
    c.next = head;
  while (!atomic_compare_exchange_weak(&e->calls, &head, &c));
  if (!head)
    ev_async_send(e->loop, &e->wake);
  sync_wait_for(&c.wait);
}

static void snapshot_stats_call(struct rampart_engine *e, void *stats)
{
  engine_snapshot_stats(e, stats);
}

void rampart_get_stats(struct rampart_engine *e, struct rampart_stats *stats)
{
  engine_call(e, snapshot_stats_call, stats);
}

static void (*frontend_log_sink)(int level, const char *line);

static void log_to_frontend(enum rp_log_level level, const char *line)
{
  frontend_log_sink((int)level, line);
}

void rampart_set_log_sink(void (*sink)(int level, const char *line))
{
  frontend_log_sink = sink;
  rp_log_set_sink(sink ? log_to_frontend : NULL);
}

/* ---- open and close -------------------------------------------------------------- */

static void *alloc_pages(size_t bytes)
{
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static int engine_alloc_pools(struct rampart_engine *e)
{
  e->ops = calloc(ENGINE_PAGE_OPS, sizeof *e->ops);
  /* With state= each op's bytes live in the state: a write in flight at a crash is sent
   * again from there (engine_restore.c). */
  e->op_scratch = e->state ? e->state->op_pages
                           : alloc_pages((size_t)ENGINE_PAGE_OPS * RAMPART_PAGE_SIZE);
  e->degraded = calloc(ENGINE_DEGRADED_READS, sizeof *e->degraded);
  e->parity = calloc(ENGINE_PARITY_BUFFERS, sizeof *e->parity);
  e->frees = calloc(ENGINE_FREE_REQUESTS, sizeof *e->frees);
  uint8_t *dr_pages = alloc_pages((size_t)ENGINE_DEGRADED_READS * DEGRADED_PIECES *
                                  RAMPART_PAGE_SIZE);
  /* With state= the parity of the open group lives in the state, to survive a crash. */
  uint8_t *parity_pages = e->state ? e->state->parity_pages
                                   : alloc_pages((size_t)2 * ENGINE_PARITY_BUFFERS *
                                                 RAMPART_PAGE_SIZE);
  e->parity_pages = parity_pages;
  /* Q's too, with state= whatever parity= is: a device taken over may hold parity=2
   * groups still open. */
  if (e->state)
    e->parity_q_pages = e->state->parity_q_pages;
  else if (e->parities > 1 && !(e->parity_q_pages = alloc_pages(
                                  (size_t)2 * ENGINE_PARITY_BUFFERS * RAMPART_PAGE_SIZE)))
    return -1;
  if (!e->ops || !e->op_scratch || !e->degraded || !e->parity || !e->frees || !dr_pages ||
      !parity_pages)
    return -1;
  for (unsigned i = ENGINE_PAGE_OPS; i-- > 0;) {
    e->ops[i].scratch = e->op_scratch + (size_t)i * RAMPART_PAGE_SIZE;
    e->ops[i].next = e->free_ops;
    e->free_ops = &e->ops[i];
  }
  for (unsigned i = ENGINE_DEGRADED_READS; i-- > 0;) {
    e->degraded[i].pages = dr_pages + (size_t)i * DEGRADED_PIECES * RAMPART_PAGE_SIZE;
    e->degraded[i].next = e->free_degraded;
    e->free_degraded = &e->degraded[i];
  }
  for (unsigned i = ENGINE_PARITY_BUFFERS; i-- > 0;) {
    e->parity[i].engine = e;
    parity_buffer_use_page(e, &e->parity[i], 0);
    e->parity[i].next = e->free_parity;
    e->free_parity = &e->parity[i];
  }
  for (unsigned i = ENGINE_FREE_REQUESTS; i-- > 0;) {
    e->frees[i].engine = e;
    e->frees[i].next = e->free_frees;
    e->free_frees = &e->frees[i];
  }
  return 0;
}

static void engine_free_pools(struct rampart_engine *e)
{
  if (e->degraded && e->degraded[0].pages)
    munmap(e->degraded[0].pages,
           (size_t)ENGINE_DEGRADED_READS * DEGRADED_PIECES * RAMPART_PAGE_SIZE);
  if (e->parity_pages && !e->state)
    munmap(e->parity_pages, (size_t)2 * ENGINE_PARITY_BUFFERS * RAMPART_PAGE_SIZE);
  if (e->parity_q_pages && !e->state)
    munmap(e->parity_q_pages, (size_t)2 * ENGINE_PARITY_BUFFERS * RAMPART_PAGE_SIZE);
  if (e->op_scratch && !e->state)
    munmap(e->op_scratch, (size_t)ENGINE_PAGE_OPS * RAMPART_PAGE_SIZE);
  free(e->ops);
  free(e->degraded);
  free(e->parity);
  free(e->frees);
}

static int engine_open_spill(struct rampart_engine *e, char *err, size_t errlen)
{
  uint64_t spill_pages = e->config.spill_size ? e->config.spill_size / RAMPART_PAGE_SIZE
                                              : e->pages;
  if (e->redundancy->disk_copy && spill_pages < e->pages) {
    snprintf(err, errlen,
             "write-through keeps a copy of every page on disk: spill-size= "
             "must be at least size=");
    return -1;
  }
  /* Standalone with all of size in RAM never spills: skip the file. */
  if (e->set.nservers == 0 && e->local.slots.capacity >= e->pages)
    return 0;
  struct spill_store_options so = {
    .path = e->config.spill_path[0] ? e->config.spill_path : NULL,
    .temp_dir = e->config.temp_dir[0] ? e->config.temp_dir : NULL,
    .pages = spill_pages,
  };
  e->spill = spill_store_open(&so, err, errlen);
  if (!e->spill)
    return -1;
  if (spill_quarantine_init(&e->quarantine, spill_pages) < 0) {
    snprintf(err, errlen, "out of memory for the spill store's slot lists");
    return -1;
  }
  if (e->redundancy->disk_copy)
    for (uint64_t p = 0; p < e->pages; p++)
      spill_store_claim_slot(e->spill, p);
  e->flush_sync =
    (struct spill_group_sync){ .cover = flush_cover, .synced = flush_synced, .user = e };
  return 0;
}

static int engine_start_loop(struct rampart_engine *e, char *err, size_t errlen)
{
  e->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
  if (!e->loop) {
    snprintf(err, errlen, "cannot create the event loop");
    return -1;
  }
  ev_set_userdata(e->loop, e);
  ev_set_loop_release_cb(e->loop, loop_release, loop_acquire);
  ev_async_init(&e->wake, on_wake);
  e->wake.data = e;
  ev_async_start(e->loop, &e->wake);
  server_health_init(e);
  ev_prepare_init(&e->mover_watcher, on_mover_prepare);
  e->mover_watcher.data = e;
  ev_prepare_start(e->loop, &e->mover_watcher);
  ev_timer_init(&e->tick, on_tick, 0.1, 0.1);
  e->tick.data = e;
  ev_timer_start(e->loop, &e->tick);
  if (e->spill) {
    ev_io_init(&e->spill_watcher, on_spill_ready, spill_store_event_fd(e->spill), EV_READ);
    e->spill_watcher.data = e;
    ev_io_start(e->loop, &e->spill_watcher);
  }
  return 0;
}

static int engine_open_sealer(struct rampart_engine *e, char *err, size_t errlen)
{
  const struct rampart_config *c = &e->config;
  struct rp_key master = { .len = 0 };
  if (c->enckey_path[0]) {
    char why[512];
    if (rp_key_load(c->enckey_path, &master, why, sizeof why) < 0) {
      snprintf(err, errlen, "enckey=%s: %s", c->enckey_path, why);
      return -1;
    }
  }
  int r = page_sealer_init(&e->sealer, e->pages, !c->encrypt_off,
                           master.len ? master.bytes : NULL, master.len, err, errlen);
  OPENSSL_cleanse(&master, sizeof master);
  if (r == 0 && c->encrypt_off)
    rp_log(RP_LOG_WARN, "encrypt=off: servers and the spill file see page contents in the "
                        "clear (pages are still checksummed)");
  return r;
}

static struct rampart_engine *open_engine(const struct rampart_config *config, char *err,
                                          size_t errlen);

/* cluster=etcd://: the servers are chosen from etcd first, and followed once open. */
struct rampart_engine *rampart_open(const struct rampart_config *config, char *err,
                                    size_t errlen)
{
  if (rp_hop_trace_start(err, errlen) < 0)
    return NULL;
  if (!config->etcd_cluster[0] || config->etcd_picked)
    return open_engine(config, err, errlen);
  if (rampart_config_check(config, err, errlen) < 0)
    return NULL;
  struct rampart_config *picked = cluster_follow_pick(config, err, errlen);
  if (!picked)
    return NULL;
  struct rampart_engine *e = open_engine(picked, err, errlen);
  free(picked);
  if (e && cluster_follow_start(e, &e->config, &e->follow, err, errlen) < 0) {
    rampart_close(e);
    return NULL;
  }
  return e;
}

static struct rampart_engine *open_engine(const struct rampart_config *config, char *err,
                                          size_t errlen)
{
  if (rampart_config_check(config, err, errlen) < 0)
    return NULL;
  rampart_event_arena_install(); /* before any loop exists (event_arena.c says why) */
  struct rampart_engine *e = calloc(1, sizeof *e);
  if (!e) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  e->config = *config;
  e->reap.event_fd = -1;
  e->reap.pressure.fd = -1;
  rampart_config_effective(config, &e->policy, &e->group_size);
  e->redundancy = redundancy_policy_of(e->policy);
  e->parities = !e->redundancy->parity                       ? 0u
                : e->policy == RAMPART_REDUNDANCY_PARITY_LOG ? config->parity
                                                             : 1u;
  e->pages = config->size / RAMPART_PAGE_SIZE;
  e->placement.open_group = GROUP_NONE;
  /* The parts with state of their own, before anything can fail: every later failure
   * ends in rampart_close, which asks them. */
  if (server_health_alloc(e) < 0 || page_mover_init(e) < 0) {
    server_health_release(e);
    free(e);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  pthread_mutex_init(&e->stats_lock, NULL);
  pthread_mutex_init(&e->lock, NULL);

  /* The cluster key lives on a page of its own: not in core dumps, never swapped,
   * wiped when the engine closes (a zero-length key when there is no key file). */
  e->key = rp_secret_alloc(sizeof *e->key);
  if (!e->key) {
    snprintf(err, errlen, "cannot map a page for the key: %s", strerror(errno));
    goto fail;
  }
  e->rmw = page_rmw_new(e);
  if (!e->rmw) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  if (config->key_path[0] && rp_key_load(config->key_path, e->key, err, errlen) < 0)
    goto fail;
  if (config->state_path[0]) {
    /* The map, seals and groups live in the state segment (state_segment.c); opening it
     * takes the device over when a pager died (engine_restore.c). */
    if (engine_restore_open(e, err, errlen) < 0)
      goto fail;
  } else if (engine_open_sealer(e, err, errlen) < 0 || page_map_init(&e->map, e->pages) < 0 ||
             group_table_init(&e->groups, (uint32_t)(e->pages / e->group_size / 4 + 64)) <
               0) {
    if (!err[0])
      snprintf(err, errlen, "out of memory setting up a %llu-page device",
               (unsigned long long)e->pages);
    goto fail;
  }
  e->write_pending = calloc((e->pages + 63) / 64, sizeof(uint64_t));
  if (!e->write_pending || engine_alloc_pools(e) < 0 || prefetch_init(e) < 0) {
    snprintf(err, errlen, "out of memory setting up a %llu-page device",
             (unsigned long long)e->pages);
    goto fail;
  }
  if (config->nservers == 0) {
    uint64_t mem = config->memory == UINT64_MAX ? config->size : config->memory;
    uint64_t local_pages = mem / RAMPART_PAGE_SIZE;
    if (local_pages > e->pages)
      local_pages = e->pages;
    if (local_store_init(&e->local, local_pages) < 0) {
      snprintf(err, errlen,
               "cannot map %llu bytes for memory=: lower memory=", (unsigned long long)mem);
      goto fail;
    }
  }
  if (engine_open_spill(e, err, errlen) < 0)
    goto fail;
  if (engine_start_loop(e, err, errlen) < 0)
    goto fail;
  if (engine_reap_init(e) < 0) {
    snprintf(err, errlen, "cannot make an eventfd: %s", strerror(errno));
    goto fail;
  }
  if (e->config.stats_path[0] || e->config.metrics_path[0]) {
    e->report = malloc(STATS_FILE_MAX_REPORT);
    if (!e->report) {
      snprintf(err, errlen, "out of memory for the stats report");
      goto fail;
    }
  }
  if (e->config.stats_path[0] && !(e->stats_file = stats_file_start(
                                     e->config.stats_path, "stats-file", true, err, errlen)))
    goto fail;
  if (e->config.metrics_path[0] &&
      !(e->metrics_file = stats_file_start(e->config.metrics_path, "metrics-file", false, err,
                                           errlen)))
    goto fail;
  if (e->state_recovered ? engine_restore_recover(e, err, errlen) < 0
                         : server_set_open(e, err, errlen) < 0)
    goto fail;
  int rc = rp_thread_start(&e->thread, "rampart-io", 0, io_thread_main, e);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start the I/O thread: %s", strerror(rc));
    goto fail;
  }
  e->thread_started = true;
  /* Last: a command may come in as soon as the socket exists. */
  if (e->config.control_path[0] &&
      !(e->control = control_socket_open(e, e->config.control_path, err, errlen)))
    goto fail;
  rp_log(RP_LOG_INFO, "device of %llu pages, %u servers, redundancy %s, group %u",
         (unsigned long long)e->pages, e->set.nservers, rampart_redundancy_name(e->policy),
         e->group_size);
  e->opened = true;
  return e;
fail:
  rampart_close(e);
  return NULL;
}

void rampart_close(struct rampart_engine *e)
{
  if (!e)
    return;
  cluster_follow_stop(
    &e->follow); /* first: it adds and drains servers through the I/O thread */
  control_socket_close(e->control); /* its commands need the I/O thread too */
  if (e->thread_started) {
    atomic_store(&e->stopping, true);
    ev_async_send(e->loop, &e->wake);
    pthread_join(e->thread, NULL);
  }
  engine_reap_give_back(e);       /* saying goodbye below needs the loop to read */
  stats_file_stop(e->stats_file); /* each removes its file */
  stats_file_stop(e->metrics_file);
  /* The I/O thread is gone, and saying goodbye below runs the loop on this thread:
   * only the connections may act now, not the mover, the tick or the wake-ups. */
  if (e->loop) {
    ev_prepare_stop(e->loop, &e->mover_watcher);
    ev_timer_stop(e->loop, &e->tick);
    ev_timer_stop(e->loop, &e->reap.grace);
    ev_async_stop(e->loop, &e->wake);
    if (e->spill)
      ev_io_stop(e->loop, &e->spill_watcher);
  }
  server_set_close(e);
  if (e->spill)
    spill_store_close(e->spill);
  spill_quarantine_destroy(&e->quarantine);
  if (e->loop)
    ev_loop_destroy(e->loop);
  local_store_destroy(&e->local);
  engine_reap_destroy(e);
  engine_free_pools(e);
  prefetch_destroy(e); /* after the ops: the last prefetch in flight landed above */
  group_table_destroy(&e->groups);
  page_map_destroy(&e->map);
  page_sealer_destroy(&e->sealer);
  /* A device that was served is detached cleanly here (its servers were told GOODBYE):
   * its state goes. One that failed to open keeps a state it was taking over. */
  engine_restore_close(e, e->opened || !e->state_recovered);
  free(e->write_pending);
  pthread_mutex_destroy(&e->stats_lock);
  pthread_mutex_destroy(&e->lock);
  page_rmw_free(e->rmw);
  free(e->report);
  page_mover_free(e);
  server_health_release(e);
  rp_secret_free(e->key, sizeof *e->key);
  free(e);
}
