/* The state segment's layout (state_segment.h): its first page, the header, and the
 * regions after it. One function computes where each region lies from the device's
 * geometry; creating a segment writes what it computes and taking one over
 * (state_segment_check.c) compares the header with it, so a new region is one field of
 * struct state_segment_regions, one line of state_segment_regions_of and one line of the
 * check's table. The records the header holds (servers, writes, parity buffers) are
 * laid out here too; what they mean is state_segment.h's and state_record.h's.
 *
 * Errors: none: nothing here fails.
 */
#ifndef RAMPART_STATE_SEGMENT_LAYOUT_H
#define RAMPART_STATE_SEGMENT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include "page_map.h"
#include "page_seal.h"

#define STATE_SEGMENT_IDENTITY_LEN 16u

/* What must be the same for a saved state to belong to this device. */
struct state_segment_fingerprint {
  uint64_t pages;
  uint32_t redundancy;  /* enum rampart_redundancy, effective */
  uint32_t group;       /* effective group size */
  uint32_t encrypt;     /* 1: AES-256-GCM, 0: checksummed plaintext */
  uint32_t chunk_bytes; /* bytes of one group chunk: this build's layout (set by open) */
};

/* Group chunks the state can hold: 2048 of 4096 groups, 8M groups. */
#define STATE_SEGMENT_MAX_CHUNKS 2048u
#define STATE_SEGMENT_SERVERS 4096u /* the engine's server table, incarnations included */
#define STATE_SEGMENT_WRITES 512u   /* page operations in flight at once */
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
  STATE_SEGMENT_SERVER_REPLACED = 1u << 4, /* an older incarnation: a newer one took over */
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
  uint8_t state; /* enum rampart_server_health */
  uint8_t flags; /* STATE_SEGMENT_SERVER_* */
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

#define STATE_SEGMENT_PARITY_PAGE(published) ((published)&1u)
#define STATE_SEGMENT_PARITY_COVERED(published) ((published) >> 1)
#define STATE_SEGMENT_PARITY_PUBLISHED(page, covered) (((uint32_t)(covered) << 1) | (page))

/* A page operation that replaced a page's version and has not finished: the version it
 * replaced is kept (not reclaimed) until it does, so a restart can go back to it when
 * the new one never reached its store. Indexed by the operation's pool index. */
struct state_segment_write {
  uint64_t page;
  page_entry new_entry; /* the op's version the map names (or will, first) */
  page_entry joining;   /* the placement being made now: a retry's differs */
  page_entry old_entry;
  struct page_seal old_seal;
  uint32_t active; /* set last, cleared first */
};

#define STATE_MAGIC "rampart-state\0\0"
/* 4: the header's fixed part (geometry and regions) is authenticated with the device
 * key's wrap. */
#define STATE_LAYOUT 4u
#define STATE_WRAP_NONCE_LEN 12u
#define STATE_WRAP_TAG_LEN 16u
#define STATE_PAGE_BYTES 4096u

/* Byte offsets of the regions after the header, and the segment's whole size. */
struct state_segment_regions {
  uint64_t map;          /* fingerprint.pages page entries */
  uint64_t seals;        /* fingerprint.pages seals */
  uint64_t parity_pages; /* STATE_SEGMENT_PARITY_PAGES pages: P's, then Q's */
  uint64_t op_pages;     /* STATE_SEGMENT_WRITES pages */
  uint64_t total;
};

/* What never changes once the segment is made: the GCM tag of the device key's wrap
 * covers all of it, so a header that passes the tag is the header its pager wrote. */
struct state_segment_fixed {
  char magic[16];
  uint32_t layout;
  uint32_t header_bytes;
  uint8_t identity[STATE_SEGMENT_IDENTITY_LEN];
  struct state_segment_fingerprint fingerprint;
  struct state_segment_regions regions;
};

/* The segment's first pages. Fixed-width fields only: a restarted process of the same
 * build reads it back, and `layout` turns away any other. */
struct state_segment_header {
  struct state_segment_fixed fixed;
  uint64_t generation;
  uint64_t next_version;
  uint8_t wrap_nonce[STATE_WRAP_NONCE_LEN];
  uint8_t wrapped_key[PAGE_SEAL_KEY_LEN];
  uint8_t wrap_tag[STATE_WRAP_TAG_LEN];
  uint32_t group_chunks;
  int32_t group_chunk_segment[STATE_SEGMENT_MAX_CHUNKS];
  uint32_t nservers;
  struct state_segment_server servers[STATE_SEGMENT_SERVERS];
  struct state_segment_write writes[STATE_SEGMENT_WRITES];
  struct state_segment_parity parity[STATE_SEGMENT_PARITY_BUFFERS];
  uint32_t open_group, open_parity_server, open_parity_slot;
  struct state_segment_rebuild rebuild;
};

/* The header, rounded up to whole pages. */
#define STATE_HEADER_BYTES \
  ((sizeof(struct state_segment_header) + STATE_PAGE_BYTES - 1) & \
   ~(size_t)(STATE_PAGE_BYTES - 1))

static inline uint64_t state_segment_round_to_page(uint64_t bytes)
{
  return (bytes + STATE_PAGE_BYTES - 1) & ~(uint64_t)(STATE_PAGE_BYTES - 1);
}

/* Where each region of the state of a device of `pages` pages lies. */
static inline struct state_segment_regions state_segment_regions_of(uint64_t pages)
{
  struct state_segment_regions r;
  r.map = STATE_HEADER_BYTES;
  r.seals = r.map + state_segment_round_to_page(pages * sizeof(page_entry));
  r.parity_pages = r.seals + state_segment_round_to_page(pages * sizeof(struct page_seal));
  r.op_pages = r.parity_pages + (uint64_t)STATE_SEGMENT_PARITY_PAGES * STATE_PAGE_BYTES;
  r.total = r.op_pages + (uint64_t)STATE_SEGMENT_WRITES * STATE_PAGE_BYTES;
  return r;
}

#endif
