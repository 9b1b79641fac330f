/* Test helper: five real servers, an engine with a shadow copy of every byte, and the
 * fault transport over it (fault_transport.h), shared by test_page_op_faults and
 * test_page_op_edges. */
#ifndef RAMPART_TEST_FAULT_RIG_H
#define RAMPART_TEST_FAULT_RIG_H

#include "engine_cluster.h"
#include "engine_device.h"
#include "fault_transport.h"

struct rig {
  struct rp_test_cluster cluster;
  struct rp_test_device dev;
  struct rp_test_faults *faults;
};

/* Starts five servers and an engine of `pages` pages under `redundancy` (parity-log as
 * 4+1) with a test file's `base` settings and a case's `extra` ones (NULL-terminated
 * pairs; extra may be NULL), writes every page once (seed), and sets the fault transport
 * with no rules. */
void rig_open(struct rig *r, const char *const *base, const char *redundancy,
              const char *const *extra, uint64_t pages, uint64_t seed);
void rig_stop(struct rig *r);
void rig_print_stats(struct rig *r);
/* Every server up (a killed one's new incarnation; its old one LOST), nothing moving or
 * waiting, every live page protected, for half a second running; fails the running
 * test after timeout_s. */
void wait_settled(struct rig *r, unsigned timeout_s);
/* After the faults, settled: every page reads back as written, `lost` pages were lost
 * (those a test knowingly lost and wrote again; usually 0), and none is unprotected. */
void rig_expect_every_page_but(struct rig *r, uint64_t lost);

#endif
