/* The engine's state: struct rampart_engine and the structs it holds by value (the
 * servers, the pools, the queues, what it counts), shared by the files of this folder
 * that run page ops; engine_internal.h adds engine.c's own calls, and the clock is
 * engine_now_ns here.
 *
 * Everything here is owned by whoever holds the engine's lock (the I/O thread, or a
 * frontend thread starting its request: see `lock`) unless a comment says otherwise.
 * A part whose state no other file needs keeps it in a struct of its own, defined in
 * its .c file, and the engine holds a pointer (the mover, the servers' shared health):
 * what is left here is what several files really share.
 *
 * Errors: none here (types, and inline helpers that cannot fail).
 */
#ifndef RAMPART_ENGINE_CORE_H
#define RAMPART_ENGINE_CORE_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "client.h"
#include "clock.h"
#include "cpu_pressure.h"
#include "engine_settings.h"
#include "local_store.h"
#include "page_map.h"
#include "page_seal.h"
#include "parity_code.h"
#include "parity_group.h"
#include "placement_order.h"
#include "rampart_types.h"
#include "redundancy_policy.h"
#include "slot_allocator.h"
#include "spill_quarantine.h"
#include "spill_store.h"

_Static_assert(RAMPART_PAGE_SIZE == RP_PAGE_SIZE, "the device's page is the wire's");

struct page_op;
struct server;
struct page_rmw;
struct stats_file;
struct rampart_engine;

/* The engine's clock: monotonic nanoseconds. */
static inline uint64_t engine_now_ns(void)
{
  return rp_now_ns();
}

#define ENGINE_PAGE_OPS 512u         /* per-page operations in flight at once */
#define ENGINE_DEGRADED_READS 16u    /* degraded reads in flight at once */
#define ENGINE_PARITY_BUFFERS 64u    /* open + sealing groups at once */
#define ENGINE_FREE_REQUESTS 1024u   /* FREEs in flight (server_frees.c) */
#define ENGINE_FREES_PER_SERVER 256u /* ... of them to one server */
#define ENGINE_MOVES 32u             /* rebuild/clean/migrate pages in flight */
/* Server table entries: the listed servers and every incarnation after them (a lost
 * server back empty, a replacement). Each is allocated when it is made (server_set.c),
 * so the bound costs a pointer per entry until it is used. */
#define ENGINE_MAX_INCARNATIONS 4096u
_Static_assert(ENGINE_MAX_INCARNATIONS <= SERVER_INDEX_NONE,
               "every server table index fits a server_index, NONE apart");
_Static_assert(ENGINE_MAX_INCARNATIONS <= PLACEMENT_MAX_SERVERS,
               "every server table entry must fit in a placement sweep");

struct rampart_engine;
struct reconnect_attempt;
struct server_transport_filter;
/* A server's health between a dropped connection and its return (server_health.c).
 * Owned by the I/O thread like the rest; a reconnect attempt runs in a helper thread
 * that gets a copy of what it needs and hands its result back as a message. */
struct server_health {
  uint64_t since_ns;        /* RECONNECTING: when the connection failed */
  uint64_t lost_at_ns;      /* RECONNECTING: declared LOST then (lease=) */
  uint64_t replay_until_ns; /* RECONNECTING: queued requests given up then (io-timeout=) */
  uint32_t backoff_ms;      /* before the next attempt; grows while attempts fail */
  uint32_t attempts;        /* attempts since the connection failed */
  bool attempting;          /* a helper thread is connecting now */
  bool silent;              /* it failed by not answering (a stall or a partition,
                                   not a reset): writes go elsewhere rather than wait */
  bool writes_given_up;     /* this outage: writes no longer wait for it */
  bool past_blip;           /* this outage has lasted timeout= (set by the tick, which
                                   then woke what waited): no longer a blip */
  bool replaced;            /* LOST, and a new incarnation took its address */
  struct reconnect_attempt *attempt; /* what a shared helper thread runs for it, made
                                        with the server, reused by every attempt */
  ev_timer retry;                    /* starts the next attempt */
  /* Requests that must reach this server's session (writes, frees) and were in flight
   * when its connection dropped or were sent since: resent in order on resume. */
  struct rp_request *replay_head, *replay_tail;
  uint32_t replay_count;
  uint32_t replay_writes; /* of which writes: FREEs wait too, but nobody waits on them */
  char last_failure[384]; /* the last failed attempt's cause */

  /* For the log (server_health.c): when a failure is logged, and what the line that
   * declares the server lost says of its attempts. */
  uint64_t failure_logged_ns; /* the last line about a failed attempt */
  uint32_t failures_unlogged; /* attempts failed since that line */
  uint64_t attempt_queued_ns; /* when the attempt now queued or running was queued */
};

struct server {
  unsigned index;
  struct rampart_engine *engine; /* its owner, for the transport's callbacks */
  char address[RAMPART_ADDRESS_LEN];
  char host[256];
  char port[16];
  /* The address its first connection reached: reconnects use it, so they neither
   * block the loop nor allocate in getaddrinfo (addr_len 0: not known yet). */
  struct sockaddr_storage addr;
  socklen_t addr_len;
  bool unlisted;      /* its etcd registration is gone: placed on no more */
  char domain[64];    /* its failure domain in etcd ("": not known) */
  unsigned domain_id; /* the same number for the same domain; 0: not known */
  enum rampart_server_health state;
  struct rp_conn *conn;
  uint8_t token[RP_TOKEN_LEN];
  struct slot_allocator slots;
  uint64_t reserved_pages;
  /* FREEs (server_frees.c): sent and not answered, and waiting for a FREE request, their
   * slots still held (in no order: each frees its own slot). */
  unsigned frees_in_flight;
  struct waiting_slots {
    uint32_t *slots;
    uint32_t count, cap;
  } frees_waiting;
  bool advised;                /* under memory pressure: place nothing new */
  bool suspect;                /* returned a page that failed verification: place nothing
                                   new, move everything off (page_read.c) */
  uint64_t integrity_failures; /* copies from it that failed verification */
  bool rebuild_needed;         /* LOST, and its groups not yet all moved */
  /* Membership (server_membership.c). leaving: a drain or remove was asked: nothing new
   * is placed there and the mover rewrites every group with a copy there; once it holds
   * no slot it is drained (and, remove_when_drained, its session ended and it REMOVED). */
  bool leaving;
  bool remove_when_drained;
  bool drained; /* leaving, and found holding nothing */
  uint64_t leaving_since_ns;
  /* Where its connections' memory comes from: the engine's pool, or for a server added
   * to the running device a pool of its own (shared by its later incarnations). */
  struct rp_conn_pool *pool;
  struct server_health health;
};

/* A degraded read's pieces: every member but the lost one, and up to two parities. */
#define DEGRADED_PIECES (GROUP_MAX_DATA + GROUP_MAX_PARITY)

struct degraded_read {
  struct degraded_read *next;
  struct page_op *op;
  uint32_t group;
  unsigned lost_member;
  unsigned pending;
  bool failed;
  bool unanswered; /* a piece failed with its server coming back: its
                                   connection dropped, or it refused and reconnects */
  unsigned pieces;
  unsigned covered;                  /* data members the parity pieces cover (the code's k) */
  bool xor_only;                     /* one member missing, rebuilt from P: the XOR of all */
  uint8_t piece_id[DEGRADED_PIECES]; /* per piece: a member index, PARITY_PIECE_P or _Q */
  server_index piece_server[DEGRADED_PIECES]; /* where each piece was sent: the group's own
                                   entry may be cleared meanwhile (group_member_lost drops
                                   its parity server) */
  struct rp_request reqs[DEGRADED_PIECES];
  uint8_t *pages; /* DEGRADED_PIECES * 4 KiB scratch */
};

/* The parity of an open or sealing group. A member is XORed from `page` into `spare`,
 * and the two then swap (parity_buffer_add): `page` is whole at every instant, which a
 * pager killed in the middle of an XOR needs (state_segment.h). */
struct parity_buffer {
  struct parity_buffer *next;
  struct rampart_engine *engine;
  uint8_t *page;             /* the XOR of the members added so far */
  uint8_t *spare;            /* the next XOR is written here */
  uint8_t *q_page, *q_spare; /* parity=2: Q of the members so far, and its next; they
                                   swap with `page` and `spare` (parity_code.h) */
  unsigned current;          /* which of the buffer's two pages `page` is (0 or 1) */
  uint32_t group;
  struct page_op *waiter;  /* mirror: the write that completes once this copy is stored */
  struct rp_request req;   /* P's write */
  struct rp_request q_req; /* Q's write, under parity=2 */
  unsigned writes_out;     /* parity writes not yet answered for good */
  bool write_failed;       /* one of them was not stored */
};

struct free_request {
  struct free_request *next;
  struct rampart_engine *engine;
  server_index server;
  struct rp_request req;
};

/* A write the dead process had in flight when it stopped (engine_restore.c): its bytes,
 * sent again to the member slot it was placed in, and the version it replaced, to fall
 * back to if the new one is never stored. Entries never move (a replay is in flight
 * from one); `kept` says whether the entry still holds its old version. */
struct recovered_write {
  struct rampart_engine *engine;
  uint64_t page;
  page_entry new_entry;
  page_entry old_entry;
  struct page_seal old_seal;
  bool kept;
  bool installed;     /* the map named the new version: the old one is pinned.
                                   Not installed: the member joined its group (its parity
                                   covers it) but the page is still the old version */
  page_entry joining; /* a retry's placement that joined its group but that
                                   the map never named (0: none): sent again too */
  struct rp_request joining_req;
  uint8_t *bytes;        /* the new version as sealed, copied from the state */
  struct rp_request req; /* the replay of a member write */
  unsigned replays;      /* replays in flight (req, joining_req) */
  bool recorded;         /* its record in the state still stands, for a pager
                                   killed again: until nothing is kept and no replay is
                                   in flight (its op is withheld meanwhile) */
};

struct state_segment;
struct page_mover;
struct prefetch;
struct server_health_shared;

/* The servers (server_set.c; their health: server_health.c; membership:
 * server_membership.c). Every part reads it; those files change it. */
struct server_set {
  /* incarnations: a server that returns empty gets a new entry. Each entry is
   * allocated when it is made and never moves (libev holds its timer, a reconnect
   * attempt its address); servers[0..nservers-1] are all allocated. */
  struct server *servers[ENGINE_MAX_INCARNATIONS];
  unsigned nservers;
  /* Per entry, for page_mover_live_by_server's callers on the I/O thread (the stats, a
   * drain, the mover): grown with the table, so no caller puts the bound on its stack. */
  uint64_t *live, *at_risk;
  unsigned per_entry_capacity;
  struct rp_conn_pool *conn_pool; /* every server connection's memory, made at open */
  /* a filter over the transport (server_transport.h), or NULL: the tests' faults */
  const struct server_transport_filter *transport_filter;
  void *transport_filter_ctx;
  bool closing; /* server_set_close runs: no reconnects, no replays */
};

/* Where new pages go (page_write.c; state_record.c saves the open group, engine_restore.c
 * restores it). */
struct write_placement {
  struct placement_order member_order; /* servers for members: each once per sweep */
  unsigned parity_cursor;              /* rotation of the parity server */
  /* the open group, its parity server and the parity's slot there (reserved at open) */
  uint32_t open_group; /* GROUP_NONE when none */
  server_index open_parity_server;
  uint32_t open_parity_slot;
  server_index open_q_server; /* parity=2: Q's server and slot, reserved at open too */
  uint32_t open_q_slot;
  /* Failure domains (placement_domains.c): whether the open group keeps to the
   * per-domain bound, the ids handed out, and what the log has said (DOMAINS_SAID_*
   * bits: each once a device). */
  bool open_spread;
  unsigned domain_ids;
  uint8_t domains_said;
};

enum { DOMAINS_SAID_SPREAD = 1, DOMAINS_SAID_NOT = 2 };

/* What the engine counts, for stats-file=, metrics-file= and rampartctl (engine.c
 * reports them; each path counts its own). */
struct engine_counters {
  uint64_t pages_written, wire_bytes_written;
  uint64_t degraded_reads, read_errors, pages_lost;
  uint64_t integrity_failures; /* stored pages that failed verification */
  uint64_t writes_replayed;    /* after a restart (engine_restore.c) */
  uint64_t writes_rolled_back;
  /* Cleaning's cost, for "rewrites per overwrite": frontend writes of a page that held a
   * version already, and pages cleaning put on the wire again (page_write.c). */
  uint64_t pages_overwritten, clean_rewrites;
  uint64_t writes_waited_for_cleaning; /* writes that waited: the overflow ran out */
  uint64_t frontend_pages_started;     /* the mover's idle test (page_mover.c) */
};

/* The engine, by owner: its settings (`config`, the policy's row), the page map and
 * seals, the group table, the stores (spill, local), the servers (`set`), where new
 * pages go (`placement`), the page ops' pools and queues (page_op.c), the thread that
 * runs it, the mover and the servers' health (each a struct of its own, private to its
 * file), what it counts (`counters`) and, with state=, its state segment. */
struct engine_call;

struct rampart_engine {
  struct rampart_config config;
  enum rampart_redundancy policy;
  const struct redundancy_policy *redundancy; /* the policy's behaviour (its table row) */
  unsigned group_size;
  unsigned parities; /* parity pages per group: 0, 1, or 2 under parity=2 */
  uint64_t pages;

  struct rp_key *key; /* the cluster key, on a secret page (common/secret.h) */
  struct page_map map;
  struct page_sealer sealer;
  /* One bit per page: its newest write has not completed (page_write_pending.c). The
   * mover leaves such pages alone: unlike a server connection, the spill store does not
   * order a read after a write still in flight, so moving the page could copy what was
   * there before; and a read that meets one waits for it. */
  uint64_t *write_pending;
  struct group_table groups;
  struct spill_store *spill;
  struct spill_quarantine quarantine;
  bool spill_named_by_state; /* state= chose spill= (PATH.spill): removed with the state */
  struct local_store local;

  struct server_set set;
  struct write_placement placement;

  /* pools */
  struct page_op *ops;
  struct page_op *free_ops;
  uint8_t *op_scratch;
  struct degraded_read *degraded;
  struct degraded_read *free_degraded;
  struct parity_buffer *parity;
  uint8_t *parity_pages;   /* two pages per parity buffer */
  uint8_t *parity_q_pages; /* parity=2: two more per buffer, for Q */
  struct parity_buffer *free_parity;
  struct free_request *frees;
  struct free_request *free_frees;
  uint64_t frees_waiting; /* FREEs in the servers' frees_waiting, together */

  /* queues of work waiting for a pool */
  struct rampart_io *io_head, *io_tail;  /* frontend requests with pages to start */
  struct page_op *wait_head, *wait_tail; /* ops waiting for a parity buffer / degraded ctx */
  struct page_op *reads_awaiting_write;  /* reads of a page whose write is in flight
                                                 (page_write_pending.c): restarted when it
                                                 ends */
  bool starting_ios;

  /* Who runs the engine: the holder of `lock`. The I/O thread holds it except while
   * its loop sleeps in the poll (libev's release/acquire callbacks); a frontend thread
   * that finds it free starts its own request and sends it (engine.c, "run to
   * completion"). loop_sleeping: the I/O thread let go of it to poll (read under it).
   * loop_changes: watchers the engine started (with those of each connection,
   * rp_conn_loop_changes): a frontend that changed them wakes the loop to see them. */
  pthread_mutex_t lock;
  bool loop_sleeping;
  /* Requests that completed during one pass of the loop, handed to their frontends
   * together just before it polls again (engine.c, deliver_completions), so that a
   * frontend woken by the first finds the whole batch: fewer wakes per reply.
   * defer_completions: the I/O thread is inside a pass (read and written under `lock`). */
  bool defer_completions;
  struct rampart_io *done_head, *done_tail;
  uint64_t frontend_completions;       /* frontend requests completed, ever (under `lock`) */
  _Atomic uint64_t frontend_submitted; /* ... and submitted, ever (rampart_submit_list) */
  /* The same for those of them no reaper comes back for (RAMPART_IO_NO_REAPER);
   * completions under `lock`. */
  uint64_t unreaped_completions;
  _Atomic uint64_t unreaped_submitted;
  unsigned loop_changes;
  /* rampart_reap (engine_reap.c): a frontend thread reading the replies itself.
   * inside: one is in rampart_reap; sleeping: it sleeps in its poll, and the I/O thread
   * writes event_fd once frontend_completions has passed seen; waiting: threads in
   * rampart_reap while another was inside, told through event_fd when it leaves;
   * holds: sockets are lent to it; absent_ticks: ticks since one was last inside, while
   * it holds them. grace: the I/O thread's timer, running while a reaper that left
   * with replies due may come back (grace_armed); entries counts reapers that came in,
   * so that the timer sees whether one came since it last looked (grace_entries).
   * pressure: the machine's CPU pressure, sampled each tick while poll-us= is set;
   * spin_paused: it was at poll-pressure= or over at the last tick, and a reaper sleeps
   * at once; spins: waits that spun, spins_answered: of them, those a reply ended. */
  struct {
    int event_fd;
    bool inside, sleeping, holds, grace_armed, spin_paused;
    unsigned waiting;
    uint64_t seen;
    unsigned absent_ticks;
    uint64_t entries, grace_entries, hand_backs;
    uint64_t spins, spins_answered, spin_paused_ticks;
    struct cpu_pressure pressure;
    ev_timer grace;
  } reap;
  /* thread hand-over: frontend threads that find the engine busy push onto `incoming`
   * (lock-free stack) and wake the I/O thread */
  _Atomic(struct rampart_io *) incoming;
  /* engine_call from a thread that finds the engine busy: a stack the loop's wake runs */
  _Atomic(struct engine_call *) calls;
  struct ev_loop *loop;
  ev_async wake;
  ev_timer tick;
  ev_io spill_watcher;
  pthread_t thread;
  atomic_bool stopping;
  bool draining; /* closing: no new moves, wait for those in flight */
  unsigned drain_ticks;
  bool thread_started;

  /* what the servers' health shares (server_health.c's own) */
  struct server_health_shared *health;

  /* the mover's own state (page_mover.c), and the watcher that runs it each iteration */
  struct page_mover *mover;
  /* the prefetcher's cache and trend (engine/prefetch.c), or NULL with prefetch=0 */
  struct prefetch *prefetch;
  ev_prepare mover_watcher;
  struct control_socket *control; /* control=, or NULL */
  struct cluster_follow *follow;  /* cluster=etcd://, or NULL (cluster_follow.c) */

  uint64_t ticks;
  uint32_t read_errors_logged; /* this second; see page_read.c */
  /* stats-file= and metrics-file=: their writer threads (or NULL), and the buffer the
   * loop formats each report into before handing it over */
  struct stats_file *stats_file, *metrics_file;
  char *report;
  bool metrics_too_big_logged;
  /* write-through flushes: those the fdatasync in flight covers, and those after it
   * (oldest first, so that flushes complete in the order they came); the spill store's
   * group commit decides which (engine.c, flush_begin) */
  struct rampart_io *flush_running, *flush_waiting, *flush_waiting_tail;
  struct spill_group_sync flush_sync;
  /* The frontend's request latency (engine_run_sync, any frontend thread: hence
   * atomic, relaxed). */
  _Atomic uint64_t latency_count[RAMPART_LATENCY_OPS][RAMPART_LATENCY_BUCKETS];
  _Atomic uint64_t latency_sum_ns[RAMPART_LATENCY_OPS];
  /* Blocking requests (engine_run_sync) submitted and not yet returned: when a device
   * hangs, tells a request lost inside the engine from one lost before or after it. */
  _Atomic uint32_t frontend_waiting;

  struct engine_counters counters;
  /* state= (state_segment.c): the pager's state segment, or NULL; after a restart
   * (engine_restore.c), the writes the dead process had in flight, and how many fell back
   * to the older version */
  struct state_segment *state;
  bool state_recovered; /* the state was left by a process that died */
  bool opened;          /* rampart_open finished: a close is a clean detach */
  struct recovered_write *recovered_writes; /* STATE_SEGMENT_WRITES entries */
  uint8_t *recovered_bytes;
  uint32_t nrecovered_writes; /* entries still kept */
  pthread_mutex_t stats_lock; /* guards the snapshot copied to other threads */
  /* sub-page reads and writes: their stripe locks (page_rmw.c) */
  struct page_rmw *rmw;
};

/* The data width new groups get with `placeable` servers to place on: group=, or the
 * servers less the parities when fewer than group + parities are left (each parity needs
 * a server of its own). */
static inline unsigned engine_group_width(const struct rampart_engine *e, unsigned placeable)
{
  if (e->parities && placeable > e->parities && placeable - e->parities < e->group_size)
    return placeable - e->parities;
  return e->group_size;
}

/* Placeable servers a new group needs: one member's, and each parity's own. */
static inline unsigned engine_servers_needed(const struct rampart_engine *e)
{
  return 1u + e->parities;
}

/* io-timeout=: the longest a request waits, for a server or for anything else (a
 * read for the write of its page): the lease unless it was given. */
static inline uint64_t engine_io_timeout_ns(const struct rampart_engine *e)
{
  return e->config.io_timeout_given ? (uint64_t)e->config.io_timeout_ms * 1000000u
                                    : (uint64_t)e->config.lease_seconds * 1000000000u;
}

/* Server slots one live page needs in groups of `width` data pages: the page, and its
 * share of the parity pages. */
static inline double engine_slots_per_page(const struct rampart_engine *e, unsigned width)
{
  return 1.0 + (double)e->parities / width;
}

#endif
