/* The public API's types (rampart.h includes this, so a frontend still includes
 * rampart.h only): the page size, the policies, a request, a server's state, why a page
 * moved, the stats. A header of its own because the page ops speak them too: they carry
 * the requests, keep the servers' states and fill the stats.
 *
 * Errors: none: types and constants, and rampart_move_reason_name, which cannot fail (a
 * reason out of range is named "?").
 */
#ifndef RAMPART_TYPES_H
#define RAMPART_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#define RAMPART_PAGE_SIZE 4096u
#define RAMPART_MAX_SERVERS 128u /* servers one device may list */
/* Server table entries the stats report: the listed servers, and a new one each time a
 * lost server comes back empty or is replaced (an incarnation). The table holds more
 * (ENGINE_MAX_INCARNATIONS); past this many, the stats leave out the oldest entries that
 * are retired (replaced or removed, and holding nothing), then the newest. */
#define RAMPART_MAX_INCARNATIONS 255u

enum rampart_redundancy {
  RAMPART_REDUNDANCY_AUTO = 0,   /* parity-log with 3+ servers, mirror with 2, none with 1 */
  RAMPART_REDUNDANCY_NONE,       /* striping only: a lost server loses its pages */
  RAMPART_REDUNDANCY_MIRROR,     /* two servers per page */
  RAMPART_REDUNDANCY_PARITY_LOG, /* parity logging: 1 + 1/S transfers per page */
  RAMPART_REDUNDANCY_WRITE_THROUGH, /* remote plus local disk: survives any server losses */
};

enum rampart_op {
  RAMPART_OP_READ,
  RAMPART_OP_WRITE,
  RAMPART_OP_TRIM,
  RAMPART_OP_ZERO,
  RAMPART_OP_FLUSH
};

#define RAMPART_IO_FUA 0x1u /* write: complete only once durable as the policy defines */
/* Its submitter does not wait in rampart_reap for it (it answers from the completion, or
 * sleeps elsewhere), so the I/O thread must read its reply: started while the servers'
 * sockets are lent and no reaper is inside, it gives them back to the I/O thread; a
 * reaper that leaves with only such replies due gives them back at once, not a grace
 * later for a thread that will not come (docs/engine.md, "Who reads the replies"). */
#define RAMPART_IO_NO_REAPER 0x2u

struct rampart_io;
typedef void (*rampart_io_done_fn)(struct rampart_io *io, int result);

/* A caller-owned request. offset and length are multiples of 4 KiB (swap and ublk only
 * issue such); the engine never allocates per request. */
struct rampart_io {
  enum rampart_op op;
  uint32_t flags;
  uint64_t offset;
  uint32_t length;
  void *buf;               /* READ: filled; WRITE: read from; others: unused */
  rampart_io_done_fn done; /* result 0 or -errno; runs on the engine's I/O thread, or
                                 on a thread in rampart_reap or starting requests */
  void *user;
  /* owned by the engine */
  struct rampart_io *next;
  uint32_t pages_started;
  uint32_t pages_pending;
  int result;
  uint64_t submitted_ns; /* for the request-time histogram */
};

/* A server's health, the one state machine's states (src/engine/server_health.c, and
 * docs/engine.md "Server health"): UP (ADVISED: up, under memory pressure) ->
 * RECONNECTING (its connection dropped; it keeps our session for a lease) -> UP again
 * with every page, or LOST (its pages are rebuilt; a server that returns after that
 * joins as a new, empty one). New states go here, once, for the engine and the stats. */
enum rampart_server_health {
  RAMPART_SERVER_UP,
  RAMPART_SERVER_ADVISED,
  RAMPART_SERVER_RECONNECTING,
  RAMPART_SERVER_LOST,
  RAMPART_SERVER_REMOVED
};
/* (REMOVED: an operator removed it and it was drained, or it was lost and rebuilt: the
 * device holds nothing there and will not reconnect; see rampart_server_drain.) */

struct rampart_server_stats {
  uint32_t index; /* its entry in the engine's server table (its incarnation) */
  char address[80];
  enum rampart_server_health state;
  uint64_t pages_live;   /* current versions of logical pages stored there */
  uint64_t pages_stored; /* live + inactive + parity */
  uint64_t pages_reserved;
  bool suspect;                /* returned a page that failed verification: being emptied */
  uint64_t integrity_failures; /* copies from it that failed verification */
  /* Live pages that depend on it (stored there, or in a group with a copy there): what
   * losing it would put at risk, and what draining it has left to move. */
  uint64_t pages_dependent;
  bool draining; /* drain or remove asked: nothing new goes there */
  bool drained;  /* ... and it holds nothing now (until added again) */
  bool removing; /* removed once drained */
};

/* Why the mover rewrote a page (page_mover.c): its group touched a lost server
 * (rebuild), a server whose copies failed verification (evacuate), a server under
 * memory pressure (migrate), a server being drained (drain); its group could no longer
 * rebuild it (protect); its group was sparse (clean); it came back from the spill store
 * (unspill); its group sat on a server much fuller than the rest (rebalance). */
enum rampart_move_reason {
  RAMPART_MOVE_REBUILD,
  RAMPART_MOVE_EVACUATE,
  RAMPART_MOVE_MIGRATE,
  RAMPART_MOVE_PROTECT,
  RAMPART_MOVE_CLEAN,
  RAMPART_MOVE_UNSPILL,
  RAMPART_MOVE_DRAIN,
  RAMPART_MOVE_REBALANCE,
  RAMPART_MOVE_REASONS
};
const char *rampart_move_reason_name(enum rampart_move_reason reason);

/* Request latency as the frontend sees it (the blocking calls, submit to wake-up), per
 * op (READ..FLUSH), in power-of-two buckets counted in place: bucket k holds requests
 * that took at most 2^k microseconds (k < RAMPART_LATENCY_BUCKETS - 1), the last one the
 * rest. Not cumulative; the Prometheus renderer sums them. */
#define RAMPART_LATENCY_OPS 5u
#define RAMPART_LATENCY_BUCKETS 24u

struct rampart_stats {
  uint64_t device_pages;
  enum rampart_redundancy redundancy;
  uint32_t group_size;
  uint32_t parity;         /* parity pages per group (parity=; 0 without parity) */
  uint32_t nservers;       /* entries in servers[] */
  uint32_t server_entries; /* entries in the engine's server table: nservers, or more
                                  when some were left out (RAMPART_MAX_INCARNATIONS) */
  struct rampart_server_stats servers[RAMPART_MAX_INCARNATIONS]; /* nservers of them */
  uint64_t groups_open, groups_sealed, groups_reclaimed, groups_cleaned;
  bool cleaning;      /* cleaning is running now */
  bool cleaning_idle; /* ... in idle time (else: the overflow runs short) */
  /* Cleaning's cost: frontend writes that replaced a version (pages overwritten), pages
   * cleaning put on the wire again, and the writes that waited for cleaning (the
   * overflow was spent), since open. Rewrites per overwrite = clean_rewrites / pages_overwritten. */
  uint64_t pages_overwritten, clean_rewrites, writes_waited_for_cleaning;
  double live_ratio; /* live data pages / data pages held by sealed groups */
  uint64_t pages_remote, pages_spilled, pages_local_ram, pages_zero;
  uint64_t pages_degraded_reads, pages_lost, read_errors;
  /* The prefetcher (prefetch=), since open: pages it read ahead, frontend pages it
   * answered (of which joined a prefetch still in flight), pages it read that nothing
   * read (evicted, or written before they were read); now: pages ready in its cache,
   * in flight, and the bytes its cache holds locked. */
  uint64_t prefetch_issued, prefetch_hits, prefetch_joins, prefetch_wasted;
  uint32_t prefetch_cached_pages, prefetch_in_flight;
  uint64_t prefetch_bytes_locked;
  /* Live pages whose group can no longer rebuild them (its parity could not be stored,
   * or covers a copy that never reached its server): one loss from gone until the mover
   * rewrites them into whole groups. */
  uint64_t pages_unprotected;
  /* Groups holding live pages by the losses they can still take: one more (a parity=2
   * group that lost one piece, or any whole parity=1 group), and none (one more loss and
   * their pages on it are gone: unprotected, or as many pieces lost as parities). */
  uint32_t groups_one_spare, groups_no_spare;
  uint64_t integrity_failures; /* stored pages that failed verification (bad server?) */
  bool encrypted;              /* encrypt=on */
  uint64_t rebuild_pages_done, rebuild_pages_pending;
  /* The rebuild running now, or else the last one: pages of groups on a lost server
   * written again, and the time since the first loss (to the end, once finished). */
  bool rebuild_running;
  uint32_t rebuilds_finished;
  uint64_t rebuild_pages_moved;
  double rebuild_seconds;
  uint32_t moves_in_flight, ops_waiting;
  /* Health: servers whose connection dropped and that are not (yet) lost; reads and
   * writes waiting for one of them to come back (FREEs wait too, uncounted: nobody waits
   * on them), and how long the oldest has waited;
   * sessions resumed and requests sent again on them, since open. */
  uint32_t servers_reconnecting;
  uint32_t requests_waiting;
  uint64_t oldest_wait_ms;
  uint64_t resumes, requests_replayed;
  /* The frontend's blocking requests (rampart_pread and the like) in the engine now:
   * with the device idle, anything but 0 is a request the engine has not completed. */
  uint32_t frontend_requests;
  /* Requests sent to servers whose replies have not come yet, now: reads, writes, FREEs,
   * moves. */
  uint32_t server_requests_in_flight;
  uint64_t pages_written, wire_bytes_written; /* wire bytes / page written */
  uint64_t spill_capacity_pages, spill_used_pages;
  uint64_t client_memory_bytes;                   /* everything below */
  uint64_t client_memory_fixed_bytes;             /* buffers and pools, whatever the size */
  uint64_t moves_by_reason[RAMPART_MOVE_REASONS]; /* pages moves started, since open */
  uint64_t latency_count[RAMPART_LATENCY_OPS][RAMPART_LATENCY_BUCKETS];
  uint64_t latency_sum_ns[RAMPART_LATENCY_OPS];
  /* cluster=etcd:// (cluster_follow.c): following at all, the watch established now,
   * registry events seen and watches started again since open */
  bool etcd_following, etcd_watch_live;
  uint64_t etcd_events, etcd_watch_restarts;
  /* Times the sockets lent to a frontend thread reading replies (rampart_reap) went back
   * to the I/O thread while replies were still due, since open: no reaper came back for
   * them, or a request no reaper comes back for started (RAMPART_IO_NO_REAPER). Under a
   * steady load a reaper keeps them; a count that rises with the requests is sockets
   * going back and forth (an epoll_ctl each, and a wake). */
  uint64_t reap_hand_backs;
  bool reap_sockets_lent; /* lent to a frontend thread now, the I/O thread not reading them */
  /* poll-us=: waits that spun, those of them a reply ended, ticks whose CPU pressure
   * paused the spin (poll-pressure=), and whether it is paused now */
  uint64_t reap_spins, reap_spins_answered, reap_spin_paused_ticks;
  bool reap_spin_paused;
};

#endif
