/* The memory server's page store: every page rampartd holds for its clients.
 *
 * One server-wide pool of capacity = --memory / 4096 pages. Pages live in 2 MiB chunks
 * mapped on demand and unmapped when they empty again, so the host gets its memory back
 * when clients leave, and a stored page costs 4096 bytes plus a few bytes of metadata
 * (no per-page malloc). Each session owns an account: a reservation (how many slots it
 * may use) and a two-level slot table whose leaves are allocated on first write, so a
 * huge or sparse reservation costs nothing until pages arrive.
 *
 * No sockets, no event loop: everything here is plain calls, so it is unit-tested
 * directly. Functions that refuse fill msg with a sentence for the client's Error reply.
 * Symbols are prefixed rps_ (rampart server) so they never clash with the client
 * library, which the tests link into the same binaries.
 *
 * Errors: an rp_status with a sentence in msg for the client's Error reply (the
 * protocol's status, not a local convention); the constructors return NULL only when
 * out of memory.
 */
#ifndef RAMPART_SERVER_PAGE_STORE_H
#define RAMPART_SERVER_PAGE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

struct rps_store;
struct rps_account;

/* A pool for capacity_pages pages (>= 1, <= RP_MAX_SLOT + 1). Maps nothing yet.
 * NULL if out of memory. */
struct rps_store *rps_store_create(uint64_t capacity_pages);
/* Frees every page and the pool; every account must have been destroyed first. */
void rps_store_destroy(struct rps_store *store);

/* The process runs under mlockall (rampartd --mlock): freed pages must be released with
 * MADV_DONTNEED_LOCKED, which plain MADV_DONTNEED is refused for. */
void rps_store_set_locked(struct rps_store *store, bool locked);

/* A new, empty account (reservation 0). NULL if out of memory. */
struct rps_account *rps_account_create(struct rps_store *store);
/* Frees the account's pages and gives its reservation back. NULL is a no-op. */
void rps_account_destroy(struct rps_store *store, struct rps_account *acct);

/* Sets the account's reservation to `pages` slots (absolute). Growing past the pool's
 * unreserved pages is RP_ERR_NO_SPACE; growing while `pressure` is RP_ERR_PRESSURE;
 * shrinking (always allowed) frees every page at a slot >= pages. */
enum rp_status rps_store_reserve(struct rps_store *store, struct rps_account *acct,
                                 uint64_t pages, bool pressure, char *msg, size_t msglen);

/* Stores a copy of the RP_PAGE_SIZE bytes at `page` in `slot`, reusing the slot's page
 * when it already holds one. RP_ERR_OUT_OF_RANGE when slot >= the reservation,
 * RP_ERR_INTERNAL when the system refuses memory. */
enum rp_status rps_store_write(struct rps_store *store, struct rps_account *acct,
                               uint64_t slot, const uint8_t *page, char *msg, size_t msglen);

/* Points *page at the stored page (valid until the next write, free or reserve of this
 * account). RP_ERR_NOT_FOUND for an empty slot, RP_ERR_OUT_OF_RANGE past the
 * reservation. */
enum rp_status rps_store_read(const struct rps_store *store, const struct rps_account *acct,
                              uint64_t slot, const uint8_t **page, char *msg, size_t msglen);

/* Frees the pages in [slot, slot + count); empty slots are fine. RP_ERR_OUT_OF_RANGE
 * (and nothing freed) when the range ends past the reservation. */
enum rp_status rps_store_free(struct rps_store *store, struct rps_account *acct,
                              uint64_t slot, uint64_t count, char *msg, size_t msglen);

struct rps_store_stats {
  uint64_t capacity_pages;
  uint64_t reserved_pages; /* sum of every account's reservation */
  uint64_t free_pages;     /* capacity_pages - reserved_pages */
  uint64_t stored_pages;   /* pages holding data */
  uint64_t chunks_mapped;
  uint64_t warm_pages;     /* freed pages kept mapped for the next writes */
  uint64_t resident_bytes; /* stored and warm pages + chunk and slot-table metadata */
};

void rps_store_get_stats(const struct rps_store *store, struct rps_store_stats *out);
uint64_t rps_account_reserved(const struct rps_account *acct);
uint64_t rps_account_stored(const struct rps_account *acct);

/* Pages per chunk: 2 MiB chunks. Exposed for tests that check resident_bytes. */
#define RPS_CHUNK_PAGES 512u
/* Most freed pages kept mapped for reuse (4 MiB; a sixteenth of a smaller store). */
#define RPS_WARM_PAGES 1024u

/* false: gives every warm page back to the host and keeps none until called with true
 * (memory pressure: the server's own host needs the RAM more than the next writes need
 * to skip a page fault). Pages are kept warm from creation. */
void rps_store_keep_warm(struct rps_store *store, bool keep);

#endif
