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
 * This file owns the segment's creation, attach and removal; its layout is
 * state_segment_layout.h, and what an attach checks before it uses anything inside is
 * state_segment_check.h. The engine decides what goes where inside.
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1).
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
#include "state_segment_layout.h"

struct state_segment_header;

struct state_segment {
  int segment; /* SysV shm id */
  void *base;
  size_t bytes;
  struct state_segment_header *header;
  page_entry *map;                      /* fingerprint.pages entries */
  struct page_seal *seals;              /* fingerprint.pages entries */
  uint64_t *next_version;               /* the nonce counter, in the segment */
  uint32_t *nservers;                   /* entries of servers[] in use */
  struct state_segment_server *servers; /* STATE_SEGMENT_SERVERS */
  struct state_segment_write *writes;   /* STATE_SEGMENT_WRITES */
  struct state_segment_parity *parity;  /* STATE_SEGMENT_PARITY_BUFFERS */
  uint8_t *parity_pages;   /* 2 * STATE_SEGMENT_PARITY_BUFFERS pages of 4 KiB: P */
  uint8_t *parity_q_pages; /* as many again, after them: Q */
  uint8_t *op_pages;       /* STATE_SEGMENT_WRITES pages: each page op's bytes
                                         as sealed, so a write in flight can be sent
                                         again after a crash */
  struct state_segment_rebuild *rebuild;
  /* the open group and the parity slot reserved for it when it opened */
  uint32_t *open_group;
  uint32_t *open_parity_server;
  uint32_t *open_parity_slot;
  bool recovered;      /* attached a state an earlier process left */
  uint64_t generation; /* attaches of this state, this one included */
  uint8_t identity[STATE_SEGMENT_IDENTITY_LEN];
  void **chunks;    /* group chunks mapped, STATE_SEGMENT_MAX_CHUNKS */
  uint32_t nchunks; /* of which this many exist */
  char path[4096];  /* the anchor file */
  int lock_fd;      /* PATH.lock, flocked while this pager lives */
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

/* Writes a new header for a device of fingerprint fp into `h` (zeroed memory of
 * state_segment_bytes(fp->pages) bytes): magic, layout, geometry, regions, an empty
 * table. The identity, the key's wrap and the anchor are state_segment_open's. */
void state_segment_header_init(struct state_segment_header *h,
                               const struct state_segment_fingerprint *fp);

/* Points st's tables into the segment mapped at base, whose header passed
 * state_segment_check_header (state_segment_check.h). */
void state_segment_view(struct state_segment *st, void *base);

/* Bytes of locked memory the segment holds for `pages` pages. */
uint64_t state_segment_bytes(uint64_t pages);

/* The layout of the state this build writes and reads, as "LAYOUT.CHUNK_BYTES": two
 * builds whose strings differ cannot take over each other's state. */
const char *state_segment_layout(void);

#endif
