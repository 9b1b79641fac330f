/* Test helper: many pages in flight on one connection through the async API. */
#ifndef RAMPART_TEST_PAGE_IO_H
#define RAMPART_TEST_PAGE_IO_H

#include <stdint.h>

#include "client.h"

struct rp_test_io_result {
  uint64_t ok;                /* completed with RP_OK (and, for READ, bytes equal) */
  uint64_t failed;            /* completed with a status other than RP_OK */
  uint64_t mismatched;        /* READ returned RP_OK with wrong bytes */
  uint64_t status_count[128]; /* completions by status (statuses >= 128 count in [127]) */
  uint16_t first_status;
  char first_error[200];
};

/* Runs op (RP_OP_WRITE or RP_OP_READ) over slots [first, first + n) with up to depth
 * requests in flight, running the connection's loop until all completed. WRITE sends
 * rp_test_fill_page(seed, slot); READ compares against it. Returns 0 when every request
 * succeeded (and matched), -1 otherwise; res (may be NULL) says what happened. */
int rp_test_pages(struct rp_conn *conn, uint8_t op, uint64_t first, uint64_t n,
                  unsigned depth, uint64_t seed, struct rp_test_io_result *res);

#endif
