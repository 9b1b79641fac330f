/* The page-op protocol: one page of work, its stages, its waits and its completions.
 *
 * Every operation on a page goes through here: a frontend's read or write of one page
 * (engine.c starts them), and a move (page_mover.c: rebuild, cleaning, migration,
 * unspill, drain, rebalance), which is a read whose verified bytes become a write.
 * page_read.c and page_write.c carry an op through its read or its write; what a
 * failure means is decided there, in one place per edge (docs/engine.md, "The page-op
 * protocol"). This file owns the op's life: the pool, the stage and the one function
 * that changes it, the waits, and the end.
 *
 *                 page_op_get: FREE
 *           a read, a move |      | a write
 *                          v      |
 *   REBUILDING <------> READING   |     a read: its copy, or its group's pieces;
 *        |                 |      |     either starts over from the map as it needs
 *        |                 v      |     (into WRITING from a read: a move's alone)
 *        +-----------> WRITING <--+     placing its version: a member, a disk copy or
 *                       |  ^  |         the spill store in flight; placed again
 *                       |  +--+
 *                       v
 *                     ENDING            its outcome known, a sub-request still out
 *
 *   READING, REBUILDING, WRITING, ENDING --page_op_finished--> FREE (the owner told)
 *
 * A read starts in READING and never writes; a write starts in WRITING and never
 * reads; a move starts in READING and writes once its read verified. Waiting (for a
 * buffer, cleaning, a server, its page's write) is not a stage of its own: an op waits
 * in READING, REBUILDING or WRITING and resumes in the same one, from the page map.
 * A transition the table does not allow stops the engine with an internal error: it
 * means two paths think they own the op, and going on would complete some request
 * with another one's bytes.
 *
 * Errors: an op completes with 0 or negative errno (CONTRIBUTING.md, convention
 * 2): -EIO for a page that cannot be read correctly, -ENOSPC when nothing has room.
 */
#ifndef RAMPART_PAGE_OP_H
#define RAMPART_PAGE_OP_H

#include <stdbool.h>
#include <stdint.h>

#include "client.h"
#include "page_map.h"
#include "page_seal.h"
#include "server_index.h"
#include "spill_store.h"

struct rampart_engine;
struct rampart_io;
struct page_op;

/* What the op is for. It does not change: a move stays a move while it writes. */
enum page_op_kind { PAGE_OP_READ, PAGE_OP_WRITE, PAGE_OP_MOVE };

/* Where the op is in its life (the diagram above). */
enum page_op_stage {
  PAGE_OP_FREE,       /* in the pool */
  PAGE_OP_READING,    /* reading its page: a server's copy, the spill store, local RAM */
  PAGE_OP_REBUILDING, /* a degraded read: the other pieces of its group in flight */
  PAGE_OP_WRITING,    /* placing its version and writing it; placed again on failure */
  PAGE_OP_ENDING,     /* a write whose outcome is known, with a sub-request still out
                          (a mirror copy, a disk copy): it ends with the last of them */
  PAGE_OP_STAGES
};

/* What a page op is waiting for. It waits for one thing at a time, on that thing's
 * queue, and leaves it only through page_op_resume, called by the event that ends
 * the wait: it then starts over from the page map. Every wait is bounded: a buffer
 * frees as groups seal, cleaning's moves in flight end (the tick checks too), a server
 * returns or io-timeout passes, and a read waits for writes of its page io-timeout at
 * most in all (the tick checks), then takes its copy as failed verification. */
enum page_op_wait {
  PAGE_OP_NOT_WAITING,
  PAGE_OP_WAITS_FOR_BUFFER,   /* a parity buffer or a degraded read's (e->wait_head) */
  PAGE_OP_WAITS_FOR_CLEANING, /* writes: cleaning behind the overwrite rate (e->wait_head) */
  PAGE_OP_WAITS_FOR_SERVER,   /* a reconnecting server (server_health.c) */
  PAGE_OP_WAITS_FOR_WRITE,    /* reads: the write of its page in flight (page_read.c) */
};

/* Who a page op works for, and what it is told as it goes. page_read and page_write
 * carry an op to the end of its read or its write and tell the owner; they never ask
 * who the owner is. Two owners: the frontends' requests (engine.c) and the mover's
 * moves (page_mover.c). */
struct page_op_owner {
  /* The op's read ended: 0 with op->buf holding the page as verified, or -errno. */
  void (*read_ended)(struct page_op *op, int result);
  /* The op is over (after its read, or its write); the engine takes it back next. */
  void (*ended)(struct page_op *op, int result);
};

struct page_op {
  struct page_op *next;
  struct rampart_engine *engine;
  const struct page_op_owner *owner;
  enum page_op_kind kind;
  enum page_op_stage stage; /* changed by page_op_enter only */
  struct rampart_io *io;    /* NULL for moves */
  uint64_t page;            /* logical page */
  uint8_t *buf;             /* frontend slice, or the op's own scratch page */
  uint8_t *scratch;         /* 4 KiB owned by this op (moves) */
  page_entry placed;        /* writes: the entry this op installed */
  page_entry expected;      /* moves: only install if the map still holds this */
  uint8_t pending;          /* sub-requests outstanding */
  bool failed;
  bool move_rebuilds;           /* moves: its group had a copy on a lost server */
  bool move_cleans;             /* moves: cleaning's (its rewrites are counted) */
  bool waited_for_cleaning;     /* writes: counted once among those that waited */
  bool disk_started;            /* write-through: the disk copy was submitted */
  enum page_op_wait waits;      /* a writing op holds one pending count while it waits */
  int end_result;               /* ENDING: the result it ends with (write_finish) */
  bool copy_failed;             /* mirror: the second copy was not stored: place again */
  server_index server;          /* writes: server of the member in flight */
  uint8_t spill_epoch;          /* quarantine epoch of the op's spill I/O in flight */
  uint8_t member;               /* reads: the member being read */
  server_index read_server;     /* reads: the server that read went to. A failure blames
                                   it, not whatever the group names by then: a read does
                                   not pin its group, which may be reclaimed and its id
                                   reused meanwhile */
  uint32_t group;               /* reads: its group */
  uint8_t read_source;          /* reads: the page_location_kind it reads (REBUILDING: the
                                   kind it was, remote) */
  uint16_t verify_retries;      /* reads: restarts after a page failed verification */
  bool read_while_written;      /* reads: started while a write of the page was in flight,
                                   whose version the map already names but whose bytes
                                   may not have landed: a copy that fails verification
                                   then is read again, not blamed */
  uint8_t bad_copies;           /* moves: copies that failed verification (one more than
                                   the group's parities: the rebuilt page too), for the
                                   mover's verdict on a failed move */
  page_entry read_entry;        /* reads: the map entry being read */
  uint64_t wait_since_ns;       /* first waited for a reconnecting server (0: never) */
  uint64_t write_wait_since_ns; /* reads: first waited for a write of its page (0: never) */
  struct page_seal seal;        /* writes: the new version's seal; reads: the expected one */
  struct rp_request req;
  struct spill_io sio;
};


/* An op from the engine's pool, in FREE (its owner, kind and page are the caller's to
 * set before it starts), or NULL when all are in use: the caller waits its turn. */
struct page_op *page_op_get(struct rampart_engine *e);
/* The one way an op's stage changes. A transition the protocol does not have stops the
 * engine with an internal error (see above). */
void page_op_enter(struct page_op *op, enum page_op_stage next);
const char *page_op_stage_name(enum page_op_stage stage);
/* Writing its page: a write, or a move past its read (also while it ends). */
static inline bool page_op_is_writing(const struct page_op *op)
{
  return op->stage == PAGE_OP_WRITING || op->stage == PAGE_OP_ENDING;
}

/* Waits (enum page_op_wait): begin marks the op waiting (the caller queues it);
 * page_op_wait queues it on the engine's own list, for a buffer or cleaning; resume
 * ends the wait and starts the op over from the page map, reading or writing as it
 * was; run_waiting resumes the engine's list, when a buffer is handed back. */
void page_op_begin_wait(struct page_op *op, enum page_op_wait why);
void page_op_wait(struct rampart_engine *e, struct page_op *op, enum page_op_wait why);
void page_op_resume(struct page_op *op);
void page_op_run_waiting(struct rampart_engine *e);

/* The op is over: its owner is told (ended), the op goes back to the pool, and the
 * requests waiting for one start. */
void page_op_finished(struct page_op *op, int result);

/* After a restart, an op whose write record the state still needs (engine_restore.c) is
 * kept out of the pool, so no new write overwrites the record, until the record goes. */
void page_op_withhold(struct rampart_engine *e, struct page_op *op);
void page_op_release_withheld(struct rampart_engine *e, struct page_op *op);

#endif
