/* Test helper: faults injected in process, on chosen page requests of a live engine.
 *
 * A filter over the engine's transport (src/engine/server_transport.h) between the page ops
 * and real rampartd processes. Rules say which requests to act on (server, op, how
 * many to let by first, how many to hit) and what to do to them: refuse, never answer,
 * lose the reply of one the server carried out, send late, or corrupt a read's reply.
 * Unlike rampartd-faults, which lies about every Nth request of one server, a rule hits
 * exactly the requests a test names, so each failure edge of a page op is reached on
 * purpose. Everything it does runs on the engine's own loop, as a server's reply would.
 */
#ifndef RAMPART_TEST_FAULT_TRANSPORT_H
#define RAMPART_TEST_FAULT_TRANSPORT_H

#include <stdint.h>

#include "rampart.h"

enum rp_test_fault {
  RP_TEST_FAULT_FAIL,       /* not sent; completes with `status`, the server's refusal */
  RP_TEST_FAULT_TIMEOUT,    /* not sent; completes RP_ERR_TIMEOUT after hold_ms: a server
                               that stopped answering */
  RP_TEST_FAULT_LOSE_REPLY, /* sent and carried out; the reply is lost (RP_ERR_TIMEOUT) */
  RP_TEST_FAULT_DELAY,      /* sent hold_ms late (held before the connection, so its
                               request timeout starts only then: never a timeout) */
  RP_TEST_FAULT_CORRUPT,    /* a READ whose reply comes back with one byte flipped */
};

struct rp_test_fault_rule {
  int server;     /* server incarnation (its place in the cluster); -1: any */
  uint8_t op;     /* RP_OP_WRITE, RP_OP_READ or RP_OP_FREE; 0: any */
  unsigned skip;  /* matching requests let by before the first hit */
  unsigned count; /* requests hit, then the rule is spent; 0: every one */
  enum rp_test_fault fault;
  uint16_t status;  /* RP_TEST_FAULT_FAIL */
  unsigned hold_ms; /* RP_TEST_FAULT_TIMEOUT, RP_TEST_FAULT_DELAY */
};

struct rp_test_faults;

/* Sets the filter on e, with no rules yet (every request passes). */
struct rp_test_faults *rp_test_faults_install(struct rampart_engine *e);
/* Adds a rule; returns its number for rp_test_faults_hits. The first rule that matches a
 * request and is not spent acts on it. */
unsigned rp_test_faults_add(struct rp_test_faults *f, struct rp_test_fault_rule rule);
/* Requests rule `n` acted on so far. */
unsigned rp_test_faults_hits(struct rp_test_faults *f, unsigned n);
/* Spends every rule: requests pass from now on (those already held still end as ruled). */
void rp_test_faults_clear(struct rp_test_faults *f);
/* Takes the filter off the engine (held requests end at once, as ruled) and frees it.
 * Call before rampart_close. */
void rp_test_faults_remove(struct rp_test_faults *f);

#endif
