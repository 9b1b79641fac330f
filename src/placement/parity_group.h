/* The parity log: groups (stripe rows) of pages and the XOR that protects them.
 *
 * The parity-logging design, generalised so every redundancy policy is a kind of group
 * (docs/engine.md): a group collects up to `capacity` data members, each a version of
 * some logical page stored at (server, slot); the client XORs each member into the
 * group's parity buffer while the group is open, and when it is full the parity is
 * stored on one more server and the group is sealed. A member stays on its server until
 * the whole group is reclaimed — deleting it alone would force a parity update — so a
 * rewritten or trimmed page only lowers its old group's live count.
 *
 * This file is pure bookkeeping and arithmetic: no sockets, no threads. The engine's I/O
 * thread owns the table.
 *
 * Errors: the table's set-up returns 0 or -1 (out of memory; CONTRIBUTING.md);
 * group operations cannot fail.
 */
#ifndef RAMPART_PARITY_GROUP_H
#define RAMPART_PARITY_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "page_map.h"
#include "server_index.h"

#define GROUP_MAX_DATA 16u                     /* largest group=S */
#define GROUP_MAX_PARITY 2u                    /* parity=2: P and Q (parity_code.h) */
#define GROUP_Q_RESERVED (GROUP_MAX_DATA + 1u) /* an open group's entry for Q's slot */
#define GROUP_NO_BUFFER 0xffffu
#define GROUP_NONE UINT32_MAX

enum group_state {
  GROUP_FREE = 0, /* on the free list */
  GROUP_OPEN,     /* taking members; its parity lives in the client's buffer */
  GROUP_SEALING,  /* full; parity write in flight, buffer still held */
  GROUP_SEALED,   /* parity stored on its server; buffer released */
};

struct group {
  uint8_t state;
  uint8_t capacity;    /* data members this group takes (S, or 1 for mirror) */
  uint8_t members;     /* data members placed so far */
  uint8_t has_parity;  /* 0 under none and write-through, or once unprotected */
  uint8_t unprotected; /* lost its parity: it cannot rebuild a member (see below) */
  uint8_t live;        /* members the page map still points at */
  uint8_t pins;        /* operations in flight on its slots (moves, degraded reads,
                                   member writes): it is not reclaimed until they end */
  uint8_t parities;    /* parity pages it carries while has_parity: 1 (P), or 2
                                   (P and Q) under parity=2 */
  uint32_t absent;     /* bit k: the piece at server[k] does not hold what the
                                   parities cover (its write failed); parity=2 only */
  uint16_t buffer;     /* parity buffer index while OPEN/SEALING */
  server_index server[GROUP_MAX_DATA + GROUP_MAX_PARITY]; /* [i] data member i; [capacity]
                                   the parity P, [capacity + 1] Q (SERVER_INDEX_NONE: not
                                   stored). While open, [GROUP_Q_RESERVED] is the slot Q
                                   reserved at open, where a restart finds it */
  uint32_t slot[GROUP_MAX_DATA + GROUP_MAX_PARITY];
  uint32_t page[GROUP_MAX_DATA]; /* logical page each member holds a version of */
  uint32_t next_free;
};

/* Groups live in fixed-size chunks that never move once allocated: code deep in a
 * completion callback may grow the table (a write re-entering placement) while a
 * caller up the stack still holds a struct group pointer. */
#define GROUP_CHUNK_SHIFT 12u
#define GROUP_CHUNK_SIZE (1u << GROUP_CHUNK_SHIFT)

/* Where chunks come from: the heap, or the pager's state segment (state_segment.h), whose
 * chunks outlive the process. alloc returns zeroed memory for chunk `index`. */
struct group_chunk_source {
  struct group *(*alloc)(void *ctx, uint32_t index);
  void (*release)(void *ctx, struct group *chunk);
  void *ctx;
};

struct group_table {
  struct group_chunk_source source;
  struct group **chunks;
  uint32_t nchunks;
  uint32_t count; /* groups allocated: nchunks * GROUP_CHUNK_SIZE */
  uint32_t in_use;
  uint32_t free_head;    /* GROUP_NONE when the free list is empty */
  uint64_t live_pages;   /* sum of every group's live count */
  uint32_t unprotected;  /* groups that dropped their parity and are not yet reclaimed */
  uint32_t short_groups; /* groups with an absent piece, not yet reclaimed */
  /* Sealed groups by live count: what cleaning would pay (pages to rewrite) and gain
   * (slots freed) at each threshold, without a scan of the table (page_mover.c). */
  uint32_t sealed_by_live[GROUP_MAX_DATA + 1];
  /* lifetime counters for stats */
  uint64_t opened, sealed, reclaimed;
};

int group_table_init(struct group_table *t, uint32_t initial_groups);
/* The same, with chunks from `source` (NULL: the heap). */
int group_table_init_from(struct group_table *t, uint32_t initial_groups,
                          const struct group_chunk_source *source);
/* Takes over `nchunks` chunks a killed process left in the pager's state, as they were:
 * the free list, the counts and each group's live count are worked out again from the
 * groups and the page map, and nothing can be in flight on them (pins 0). Groups still
 * open or sealing keep their parity buffer's index, for the caller to trust or not.
 * 0, or -1 (ENOMEM for the chunk array). */
int group_table_adopt(struct group_table *t, struct group **chunks, uint32_t nchunks,
                      const struct group_chunk_source *source, const struct page_map *map);
void group_table_destroy(struct group_table *t);

/* A new OPEN group taking `capacity` members (1..GROUP_MAX_DATA), or GROUP_NONE when the
 * table cannot grow (ENOMEM). The parity server is chosen by the caller, at seal time. */
uint32_t group_open(struct group_table *t, unsigned capacity, bool has_parity,
                    uint16_t buffer);
/* The same with `parities` parity pages (0, 1 or 2; GROUP_MAX_PARITY at most). */
uint32_t group_open_with(struct group_table *t, unsigned capacity, unsigned parities,
                         uint16_t buffer);

static inline struct group *group_get(const struct group_table *t, uint32_t id)
{
  return &t->chunks[id >> GROUP_CHUNK_SHIFT][id & (GROUP_CHUNK_SIZE - 1)];
}

/* Appends a member stored at (server, slot) holding a version of logical page `page`;
 * returns its member index. The group must be OPEN and not full. */
unsigned group_add_member(struct group_table *t, uint32_t id, server_index server,
                          uint32_t slot, uint32_t page);

static inline bool group_is_full(const struct group *g)
{
  return g->members == g->capacity;
}

/* Parity pages the group stores or will store: 0 once it dropped its parity. */
static inline unsigned group_parity_count(const struct group *g)
{
  return g->has_parity ? g->parities : 0u;
}

/* Where piece k of the group is: data member k for k < members, else its parity
 * k - members (P, then Q). Its entry in server[] and slot[]. */
static inline unsigned group_piece_entry(const struct group *g, unsigned k)
{
  return k < g->members ? k : g->capacity + (k - g->members);
}

/* Records where the parity went and moves the group to SEALING. */
void group_begin_seal(struct group_table *t, uint32_t id, server_index server, uint32_t slot);
/* The same for each of the group's parities: server[j] and slot[j] for parity j. */
void group_begin_seal_with(struct group_table *t, uint32_t id, const server_index *server,
                           const uint32_t *slot);
/* Parity stored: SEALED. Returns the parity buffer index to release. */
uint16_t group_finish_seal(struct group_table *t, uint32_t id);
/* A group without parity (none, write-through) is sealed as soon as it is full. */
void group_seal_without_parity(struct group_table *t, uint32_t id);

/* The group's parity no longer protects its members: it could not be stored, or it
 * covers a member whose copy never reached its server. has_parity drops to 0 (the caller
 * releases the parity's slot) and the group counts as unprotected until it is released,
 * so the mover knows to rewrite its live pages into whole groups. No-op for a group that
 * has no parity. */
void group_drop_parity(struct group_table *t, uint32_t id);

/* Under parity=2, a write of the piece at entry k (a member, or parity j at capacity + j)
 * failed, its server still there: the slot holds something the parities do not cover.
 * The group goes on with one loss fewer to spare, that piece counted as gone, and is
 * short until reclaimed, so the mover rewrites its live pages into whole groups. */
void group_mark_absent(struct group_table *t, uint32_t id, unsigned entry);

static inline bool group_piece_absent(const struct group *g, unsigned entry)
{
  return (g->absent >> entry) & 1u;
}

/* Live pages in unprotected groups: one loss from gone until the mover rewrites them. */
uint64_t group_table_unprotected_live(const struct group_table *t);

/* The page map no longer points at this member. Returns true when the group has no live
 * member left and is sealed: the caller frees its slots and calls group_release. */
bool group_member_dead(struct group_table *t, uint32_t id, unsigned member);

/* True if the page map still points at this member. */
bool group_member_is_live(const struct group_table *t, const struct page_map *map,
                          uint32_t id, unsigned member);

/* The group may be reclaimed (its slots freed for reuse): sealed, nothing live, and
 * nothing reading or writing its slots. A slot must never be reused while an older
 * write to it may still reach the server: after a reconnect, writes are sent again. */
static inline bool group_is_reclaimable(const struct group *g)
{
  return g->state == GROUP_SEALED && g->live == 0 && g->pins == 0;
}

/* Counts sealed_by_live again from the groups: after groups were taken over, or sealed
 * by a restart without the functions above (engine_restore.c). */
void group_table_count_sealed(struct group_table *t);

/* Puts a reclaimed group back on the free list. */
void group_release(struct group_table *t, uint32_t id);

/* Test API (test_parity_group): slots the group holds on servers, data members plus the
 * parities once sealing. */
unsigned group_stored_pages(const struct group *g);

/* Live data pages / data pages held, over sealed groups (1.0 when none). */
double group_table_live_ratio(const struct group_table *t);

uint64_t group_table_memory_bytes(const struct group_table *t);

/* dst ^= src over one 4 KiB page, at any alignment, written so the compiler vectorises it. */
void parity_xor_page(uint8_t *restrict dst, const uint8_t *restrict src);
/* dst = a ^ b, into a page that is neither. */
void parity_xor_pages(uint8_t *restrict dst, const uint8_t *restrict a,
                      const uint8_t *restrict b);

#endif
