/* Test helper: an engine device with a shadow copy of every byte, driven in batches of
 * asynchronous requests and read back in full against the shadow.
 *
 * Every batch is BATCH non-overlapping requests (each takes its own stripe of the
 * device), so many pages are in flight on every server at once and the shadow stays
 * exact. Reads in a batch, and rp_test_device_verify, fail the running cmocka test on
 * any wrong byte: a page may be unreadable (EIO) where a test allows it, never wrong.
 */
#ifndef RAMPART_TEST_ENGINE_DEVICE_H
#define RAMPART_TEST_ENGINE_DEVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "rampart.h"

#define RP_TEST_BATCH 32
#define RP_TEST_MAX_RUN 8 /* pages per request */

struct rp_test_device {
  struct rampart_engine *engine;
  uint64_t pages;
  uint8_t *shadow;
  uint8_t *scratch;
  uint64_t seed;
  bool reap; /* wait for a batch in rampart_reap, not on a condition variable */
};

/* Takes ownership of e (closed by rp_test_device_free). */
void rp_test_device_init(struct rp_test_device *d, struct rampart_engine *e, uint64_t pages,
                         uint64_t seed);
void rp_test_device_free(struct rp_test_device *d);

/* `batches` batches; each request is a write (write_pct %), a trim (trim_pct %) or a
 * read checked against the shadow. Any failed request fails the test. */
void rp_test_device_workload(struct rp_test_device *d, unsigned batches, unsigned write_pct,
                             unsigned trim_pct);

/* Writes fresh contents to every page in [first, first + n), in order, a batch of
 * requests at a time: each page once, so no group is left sparse (nothing to clean). */
void rp_test_device_fill(struct rp_test_device *d, uint64_t first, uint64_t n);

/* Reads the whole device against the shadow. With allow_eio, pages that fail with EIO
 * are counted (and returned) instead of failing the test; any other error or any wrong
 * byte fails it. */
uint64_t rp_test_device_verify(struct rp_test_device *d, bool allow_eio);

void rp_test_device_stats(struct rp_test_device *d, struct rampart_stats *st);
/* Pages the engine counts stored on its servers (live, inactive and parity), all of them. */
uint64_t rp_test_stats_pages_stored(const struct rampart_stats *st);
/* The engine's stats as rampartctl device prints them, into the test's output. */
void rp_test_device_print_stats(struct rp_test_device *d);

/* Waits until the engine's stats show server `server` (its index in the stats, which is
 * its place in the cluster until one is replaced) no longer up: a kill is seen when the
 * engine reads the connection's end, not when the process dies, and the stats answer
 * from the engine's state at that instant. Fails the test after timeout_s. */
void rp_test_device_wait_noticed(struct rp_test_device *d, unsigned server,
                                 unsigned timeout_s);

/* Waits until no server is reconnecting, every lost server holds no live page and no
 * rebuild is pending; fails the test after timeout_s, printing the stats. After a kill,
 * wait for the engine to notice it first (rp_test_device_wait_noticed). */
void rp_test_device_wait_rebuilt(struct rp_test_device *d, unsigned timeout_s);

#endif
