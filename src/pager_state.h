/* The pager's state that outlives the pager process (docs/recovery.md).
 *
 * A crash of the pager is a process crash: the host and its block device go on, and a
 * restarted daemon must find the page map, the seals, the device key and the nonce
 * counter exactly as they were. They live in a System V shared-memory segment locked
 * with SHM_LOCK, which persists with no process attached and is never paged out (a
 * tmpfs file or memfd would be swappable once its locker died, possibly onto the very
 * device whose daemon is down). A small anchor file (state=PATH) names the segment and
 * the device's identity.
 *
 * This file owns the segment's layout, creation, checks and removal. It knows nothing
 * of servers or groups; the engine decides what goes where inside.
 */
#ifndef RAMPART_PAGER_STATE_H
#define RAMPART_PAGER_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "page_map.h"
#include "page_seal.h"
#include "parity_group.h"

#define PAGER_STATE_IDENTITY_LEN 16u

/* What must be the same for a saved state to belong to this device. */
struct pager_state_fingerprint {
  uint64_t pages;
  uint32_t redundancy;   /* enum rampart_redundancy, effective */
  uint32_t group;        /* effective group size */
  uint32_t encrypt;      /* 1: AES-256-GCM, 0: checksummed plaintext */
  uint32_t chunk_bytes;  /* bytes of one group chunk: this build's layout (set by open) */
};

/* Group chunks the state can hold: 2048 of 4096 groups, 8M groups. */
#define PAGER_STATE_MAX_CHUNKS 2048u

struct pager_state_header;

struct pager_state {
  int segment;                        /* SysV shm id */
  void *base;
  size_t bytes;
  struct pager_state_header *header;
  page_entry *map;                    /* fingerprint.pages entries */
  struct page_seal *seals;            /* fingerprint.pages entries */
  uint64_t *next_version;             /* the nonce counter, in the segment */
  bool recovered;                     /* attached a state an earlier process left */
  uint64_t generation;                /* attaches of this state, this one included */
  uint8_t identity[PAGER_STATE_IDENTITY_LEN];
  void **chunks;                      /* group chunks mapped, PAGER_STATE_MAX_CHUNKS */
  uint32_t nchunks;                   /* of which this many exist */
  char path[4096];                    /* the anchor file */
};

/* Attaches the state `path` names, or creates it when there is none (or when the
 * segment it names is gone, which only a host restart or an operator does: *note then
 * says so). `master` is the key material the device key is wrapped under (the enckey=
 * or key= file's bytes; NULL: none). device_key receives the key to seal pages with:
 * drawn at random when the state is new, unwrapped when it is recovered.
 * 0, or -1 with err saying what to do; a refusal leaves the segment and the anchor as
 * they were. note (may be NULL) gets a line worth logging, or "". */
int pager_state_open(struct pager_state *st, const char *path,
                     const struct pager_state_fingerprint *fp, const uint8_t *master,
                     size_t master_len, uint8_t device_key[PAGE_SEAL_KEY_LEN], char *note,
                     size_t notelen, char *err, size_t errlen);

/* Zeroed memory for group chunk `index` (the next one: index == st->nchunks), in a
 * locked segment of its own that the state's header lists, so the table can grow and
 * still outlive the process. NULL with errno when the kernel refuses or the state's
 * chunk list is full (ENOSPC). */
void *pager_state_chunk_new(struct pager_state *st, uint32_t index);

/* Group chunks from the state (group_table_init_from), and the ones a recovered state
 * holds (group_table_adopt: st->chunks, st->nchunks). */
struct group_chunk_source pager_state_group_chunks(struct pager_state *st);

/* Detaches. The segment stays, locked, for the next process: this is what a crash does
 * too. */
void pager_state_detach(struct pager_state *st);

/* Destroys the segment and the anchor: a clean detach of the device, after which its
 * pages are gone on purpose. */
void pager_state_remove(struct pager_state *st);

/* Bytes of locked memory the segment holds for `pages` pages. */
uint64_t pager_state_bytes(uint64_t pages);

#endif
