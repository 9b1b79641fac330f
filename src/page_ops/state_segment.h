/* The pager's state that outlives the pager process (docs/recovery.md).
 *
 * A crash of the pager is a process crash: the host and its block device go on, and a
 * restarted daemon must find the page map, the seals, the device key and the nonce
 * counter exactly as they were. They live in a System V shared-memory segment locked
 * with SHM_LOCK, which persists with no process attached and is never paged out (a
 * tmpfs file or memfd would be swappable once its locker died, possibly onto the very
 * device whose daemon is down). A small anchor file (state=PATH) names the segment and
 * the device's identity; PATH.lock, flocked by the pager for its whole life, says that
 * one is serving it (and wakes a standby when it ends, however it ends).
 *
 * This file owns the segment's layout, creation, checks and removal. It knows nothing
 * of servers or groups; the engine decides what goes where inside.
 *
 * Errors: -1 with a sentence in err (docs/CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_STATE_SEGMENT_H
#define RAMPART_STATE_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "page_map.h"
#include "page_seal.h"
#include "parity_group.h"

#define STATE_SEGMENT_IDENTITY_LEN 16u

/* What must be the same for a saved state to belong to this device. */
struct state_segment_fingerprint {
  uint64_t pages;
  uint32_t redundancy;   /* enum rampart_redundancy, effective */
  uint32_t group;        /* effective group size */
  uint32_t encrypt;      /* 1: AES-256-GCM, 0: checksummed plaintext */
  uint32_t chunk_bytes;  /* bytes of one group chunk: this build's layout (set by open) */
};

/* Group chunks the state can hold: 2048 of 4096 groups, 8M groups. */
#define STATE_SEGMENT_MAX_CHUNKS 2048u
#define STATE_SEGMENT_SERVERS 4096u    /* the engine's server table, incarnations included */
#define STATE_SEGMENT_WRITES 512u      /* page operations in flight at once */
#define STATE_SEGMENT_PARITY_BUFFERS 64u /* open and sealing groups at once */
/* Each buffer's two pages of P, then each buffer's two of Q (parity=2's, kept whatever
 * parity= is, so a device's groups can be taken over under either setting). */
#define STATE_SEGMENT_PARITY_PAGES (4u * STATE_SEGMENT_PARITY_BUFFERS)
#define STATE_SEGMENT_ADDRESS_LEN 80u
#define STATE_SEGMENT_TOKEN_LEN 32u

enum {
  STATE_SEGMENT_SERVER_SUSPECT = 1u << 0,
  STATE_SEGMENT_SERVER_LEAVING = 1u << 1,
  STATE_SEGMENT_SERVER_REMOVE_WHEN_DRAINED = 1u << 2,
  STATE_SEGMENT_SERVER_DRAINED = 1u << 3,
  STATE_SEGMENT_SERVER_REPLACED = 1u << 4,      /* an older incarnation: a newer one took over */
  STATE_SEGMENT_SERVER_REBUILD_NEEDED = 1u << 5,
};

/* One entry of the engine's server table, as a restart needs it: where it is, the
 * session to resume, and what the engine had decided about it. */
struct state_segment_server {
  char address[STATE_SEGMENT_ADDRESS_LEN];
  /* Where its connections went, so a restart resolves no name: in a starved machine
   * the files a resolver reads may be swapped out to the very device being taken over. */
  struct sockaddr_storage addr;
  uint32_t addr_len;
  uint8_t token[STATE_SEGMENT_TOKEN_LEN];
  uint64_t reserved_pages;
  uint8_t state;                   /* enum rampart_server_health */
  uint8_t flags;                   /* STATE_SEGMENT_SERVER_* */
};

/* The rebuild now running, or the last one, as the engine reports it: a restart carries
 * it on (CLOCK_MONOTONIC times, which a restarted process on the same host shares). */
struct state_segment_rebuild {
  uint32_t running;
  uint32_t finished;
  uint64_t started_ns, finished_ns, pages_moved;
};

/* A parity buffer: the XOR of the members of an open (or sealing) group, kept in the
 * state so the parity of a group still open survives the crash. Each buffer has two
 * pages: a member is XORed from the current one into the other, which then becomes
 * current by one store of `published` (bit 0: which page; the rest: how many members
 * it covers). A kill anywhere leaves a published page that is whole; the page before
 * it is whole too until the next member, which a restart needs when the member whose
 * XOR was published never joined its group (engine_restore.c). */
struct state_segment_parity {
  uint32_t group;
  uint32_t published;
};

#define STATE_SEGMENT_PARITY_PAGE(published) ((published) & 1u)
#define STATE_SEGMENT_PARITY_COVERED(published) ((published) >> 1)
#define STATE_SEGMENT_PARITY_PUBLISHED(page, covered) (((uint32_t)(covered) << 1) | (page))

/* A page operation that replaced a page's version and has not finished: the version it
 * replaced is kept (not reclaimed) until it does, so a restart can go back to it when
 * the new one never reached its store. Indexed by the operation's pool index. */
struct state_segment_write {
  uint64_t page;
  page_entry new_entry;            /* the op's version the map names (or will, first) */
  page_entry joining;              /* the placement being made now: a retry's differs */
  page_entry old_entry;
  struct page_seal old_seal;
  uint32_t active;                 /* set last, cleared first */
};

struct state_segment_header;

struct state_segment {
  int segment;                        /* SysV shm id */
  void *base;
  size_t bytes;
  struct state_segment_header *header;
  page_entry *map;                    /* fingerprint.pages entries */
  struct page_seal *seals;            /* fingerprint.pages entries */
  uint64_t *next_version;             /* the nonce counter, in the segment */
  uint32_t *nservers;                 /* entries of servers[] in use */
  struct state_segment_server *servers; /* STATE_SEGMENT_SERVERS */
  struct state_segment_write *writes;   /* STATE_SEGMENT_WRITES */
  struct state_segment_parity *parity;  /* STATE_SEGMENT_PARITY_BUFFERS */
  uint8_t *parity_pages;              /* 2 * STATE_SEGMENT_PARITY_BUFFERS pages of 4 KiB: P */
  uint8_t *parity_q_pages;            /* as many again, after them: Q */
  uint8_t *op_pages;                  /* STATE_SEGMENT_WRITES pages: each page op's bytes
                                         as sealed, so a write in flight can be sent
                                         again after a crash */
  struct state_segment_rebuild *rebuild;
  /* the open group and the parity slot reserved for it when it opened */
  uint32_t *open_group;
  uint32_t *open_parity_server;
  uint32_t *open_parity_slot;
  bool recovered;                     /* attached a state an earlier process left */
  uint64_t generation;                /* attaches of this state, this one included */
  uint8_t identity[STATE_SEGMENT_IDENTITY_LEN];
  void **chunks;                      /* group chunks mapped, STATE_SEGMENT_MAX_CHUNKS */
  uint32_t nchunks;                   /* of which this many exist */
  char path[4096];                    /* the anchor file */
  int lock_fd;                        /* PATH.lock, flocked while this pager lives */
};

/* Attaches the state `path` names, or creates it when there is none (or when the
 * segment it names is gone, which only a host restart or an operator does: *note then
 * says so). `master` is the key material the device key is wrapped under (the enckey=
 * or key= file's bytes; NULL: none). device_key receives the key to seal pages with:
 * drawn at random when the state is new, unwrapped when it is recovered.
 * 0, or -1 with err saying what to do; a refusal leaves the segment and the anchor as
 * they were. note (may be NULL) gets a line worth logging, or "". */
int state_segment_open(struct state_segment *st, const char *path,
                     const struct state_segment_fingerprint *fp, const uint8_t *master,
                     size_t master_len, uint8_t device_key[PAGE_SEAL_KEY_LEN], char *note,
                     size_t notelen, char *err, size_t errlen);

/* Zeroed memory for group chunk `index` (the next one: index == st->nchunks), in a
 * locked segment of its own that the state's header lists, so the table can grow and
 * still outlive the process. NULL with errno when the kernel refuses or the state's
 * chunk list is full (ENOSPC). */
void *state_segment_chunk_new(struct state_segment *st, uint32_t index);

/* Group chunks from the state (group_table_init_from), and the ones a recovered state
 * holds (group_table_adopt: st->chunks, st->nchunks). */
struct group_chunk_source state_segment_group_chunks(struct state_segment *st);

/* Detaches. The segment stays, locked, for the next process: this is what a crash does
 * too. */
void state_segment_detach(struct state_segment *st);

/* Destroys the segment and the anchor: a clean detach of the device, after which its
 * pages are gone on purpose. */
void state_segment_remove(struct state_segment *st);
/* The pid of the pager that has the state at path attached now (for a standby to wait
 * on). -1 with err: there is no state there, or no pager has it. */
int state_segment_serving_pid(const char *path, pid_t *pid, char *err, size_t errlen);
/* Sleeps until the pager serving the state at path ends (its lock, PATH.lock, comes
 * free), then keeps that lock for this process's state_segment_open of the same path and
 * waits for the segment to be detached. 0 then; 1 when a signal interrupted the wait;
 * -1 with err. */
int state_segment_wait_for_pager_end(const char *path, char *err, size_t errlen);

/* Bytes of locked memory the segment holds for `pages` pages. */
uint64_t state_segment_bytes(uint64_t pages);

/* The layout of the state this build writes and reads, as "LAYOUT.CHUNK_BYTES": two
 * builds whose strings differ cannot take over each other's state. */
const char *state_segment_layout(void);

#endif
