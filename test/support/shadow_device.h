/* Test helper: an engine device with a shadow copy, driven by reader and writer threads
 * at the same time while a test breaks the network under it.
 *
 * The device is cut into stripes of 8 pages. A thread takes a batch of distinct stripes
 * (locked in ascending order, so readers and writers never deadlock), submits one
 * asynchronous request per stripe, and waits for the batch: many requests are in flight
 * on every server at once, yet a read never races a write of the same page, so every
 * byte it returns can be checked against the shadow. Every request is counted with its
 * latency; a failed one is remembered (the first few are described).
 */
#ifndef RAMPART_TEST_SHADOW_DEVICE_H
#define RAMPART_TEST_SHADOW_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "rampart.h"

#define RP_TEST_STRIPE_PAGES 8u

struct rp_test_shadow_result {
  uint64_t reads, writes; /* requests completed */
  uint64_t read_failures, write_failures;
  uint64_t mismatches;     /* reads that succeeded with wrong bytes */
  uint64_t max_latency_us; /* longest request, submit to completion */
  char first_failure[256];
};

struct rp_test_shadow {
  struct rampart_engine *engine;
  uint64_t pages;
  uint8_t *shadow;  /* what every page must read as */
  uint8_t *unknown; /* per page: a write of it failed, contents undefined */
  unsigned nstripes;
  pthread_mutex_t *stripe_locks;
  atomic_bool stop;
  pthread_mutex_t result_lock;
  struct rp_test_shadow_result result;
  pthread_t threads[16];
  unsigned nthreads;
};

/* Sets up the shadow (all zeros, as a fresh device reads) over an open engine. */
void rp_test_shadow_init(struct rp_test_shadow *d, struct rampart_engine *e, uint64_t pages);
/* Closes the engine and frees the shadow. */
void rp_test_shadow_destroy(struct rp_test_shadow *d);

/* Writes every page once (single thread), so later reads hit remote pages. */
void rp_test_shadow_fill(struct rp_test_shadow *d, uint64_t seed);

/* Starts `readers` and `writers` threads (batches of `depth` requests each) that run until
 * rp_test_shadow_stop. */
void rp_test_shadow_start(struct rp_test_shadow *d, unsigned readers, unsigned writers,
                          unsigned depth, uint64_t seed);
/* Stops the threads, waits for them, and returns what they saw. The counters restart. */
struct rp_test_shadow_result rp_test_shadow_stop(struct rp_test_shadow *d);

/* Reads the whole device and compares it with the shadow; returns pages that failed
 * to read (res gets mismatches and the first failure too). */
uint64_t rp_test_shadow_verify(struct rp_test_shadow *d, struct rp_test_shadow_result *res);

/* One line: "N reads, N writes, N failed, N wrong, longest N ms". */
void rp_test_shadow_describe(const struct rp_test_shadow_result *r, char *out, size_t outlen);

/* Prints "WHAT: " and that line, then fails the test (cmocka) unless no read or write
 * failed and no page read back wrong. */
void rp_test_shadow_expect_clean(const char *what, const struct rp_test_shadow_result *r);

#endif
