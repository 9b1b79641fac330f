/* Admission of connections that have not proven the key yet.
 *
 * Anyone who can reach the port can open connections, and a connection costs the server
 * a file descriptor and buffers until it authenticates or its handshake deadline
 * passes. So unauthenticated connections are budgeted apart from authenticated ones:
 * at most --max-unauthenticated-per-address from one source address (a flood from one
 * host is refused at once), at most --max-unauthenticated in all (past that the oldest
 * is dropped, so a client whose handshake takes milliseconds still gets through a
 * flood from many hosts). Authenticated connections count only against
 * --max-connections, so no flood of idle or garbage connections can push them out.
 *
 * This file only counts connections per address; connection.c and server.c apply
 * the budgets. No sockets, no loop: tested directly (test/unit/test_admission.c).
 *
 * Errors: rps_addr_counts_create returns NULL and rps_addr_count_add -1 only when out
 * of memory, with no sentence (CONTRIBUTING.md, convention 1's out-of-memory
 * case); nothing else here fails.
 */
#ifndef RAMPART_SERVER_ADMISSION_H
#define RAMPART_SERVER_ADMISSION_H

#include <stdint.h>
#include <sys/socket.h>

/* A source address without its port: IPv4 addresses are stored as IPv4-mapped IPv6,
 * so one host counts once whichever way it reached a dual-stack socket. */
struct rps_addr_key {
  uint8_t bytes[16];
};

struct rps_addr_counts;

struct rps_addr_counts *rps_addr_counts_create(void);
void rps_addr_counts_destroy(struct rps_addr_counts *t);

/* The key of a peer address (AF_INET or AF_INET6; anything else maps to all zeros). */
struct rps_addr_key rps_addr_key_of(const struct sockaddr_storage *ss);

/* Connections counted for key now. */
uint32_t rps_addr_count(const struct rps_addr_counts *t, const struct rps_addr_key *key);

/* Counts one more connection for key. 0, or -1 when out of memory (nothing counted). */
int rps_addr_count_add(struct rps_addr_counts *t, const struct rps_addr_key *key);

/* Counts one fewer (the entry goes when it reaches zero). */
void rps_addr_count_remove(struct rps_addr_counts *t, const struct rps_addr_key *key);

/* Test API (test_admission): addresses with at least one connection counted. */
uint32_t rps_addr_counts_addresses(const struct rps_addr_counts *t);

#endif
