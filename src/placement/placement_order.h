/* The order in which new pages visit the servers: every server once per sweep, and
 * each sweep in a fresh random order.
 *
 * A parity group's members are consecutive picks. Visited always in the same cyclic
 * order, a group would always take neighbouring servers, so the groups of one server
 * would all lie on its few neighbours: when it is lost, the rebuild reads from those
 * 2S servers while the rest of the cluster idles, and a second loss among them hurts
 * most. Shuffled per sweep, a server's groups spread over the whole cluster (declustered
 * parity), and each sweep still places exactly one page on every server, as the plain
 * rotation did. No allocation: the order lives in the struct, and a zeroed struct is
 * ready (it starts from a fixed seed, so a device's placement repeats from run to run).
 *
 * Errors: none: nothing here can fail.
 */
#ifndef RAMPART_PLACEMENT_ORDER_H
#define RAMPART_PLACEMENT_ORDER_H

#include <stdint.h>

#include "server_index.h"

#define PLACEMENT_MAX_SERVERS 4096u

struct placement_order {
  server_index order[PLACEMENT_MAX_SERVERS]; /* this sweep's servers, in visiting order */
  unsigned count;                            /* servers in this sweep */
  unsigned next;                             /* the sweep's next position */
  uint64_t rng;                              /* xorshift state (0: not seeded yet) */
};

/* Starts a new sweep if this one is used up or the number of servers changed; call
 * before looking at the candidates. nservers <= PLACEMENT_MAX_SERVERS. */
void placement_order_begin(struct placement_order *o, unsigned nservers);
/* The k-th candidate from the sweep's position (k < nservers; wraps within the sweep,
 * so k = 0..nservers-1 names every server once). */
unsigned placement_order_candidate(const struct placement_order *o, unsigned k);
/* Candidate k was taken: the sweep goes on after it. */
void placement_order_taken(struct placement_order *o, unsigned k);

#endif
