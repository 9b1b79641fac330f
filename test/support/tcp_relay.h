/* Test helper: a TCP relay on loopback between a client and several servers, to make the
 * network misbehave while every rampartd stays alive and keeps its sessions.
 *
 * Each relayed server gets its own listening port on 127.0.0.1; a client connecting
 * there is connected through to the server and bytes are copied both ways. One thread
 * (started by rp_test_relay_start) serves every port, so a test needs no extra
 * processes. The test thread changes the relay's behaviour with the calls below; each
 * returns once the relay thread has carried it out, so "reset" means reset by the time
 * the call returns.
 *
 *   reset    every connection through that port is closed with a TCP RST on both sides,
 *            as a router that loses its state does
 *   refuse   new connections are accepted and at once reset (the client sees the
 *            connection drop during its handshake), until refuse is turned off
 *   hold     new connections are accepted but nothing is forwarded (a handshake that
 *            hangs, as behind a black hole) until hold is turned off; then they are
 *            connected through and what the client sent meanwhile is delivered
 */
#ifndef RAMPART_TEST_TCP_RELAY_H
#define RAMPART_TEST_TCP_RELAY_H

#include <stdbool.h>
#include <stdint.h>

#include "server_process.h"

#define RP_TEST_RELAY_MAX 8
#define RP_TEST_RELAY_ALL UINT32_MAX /* every relayed server */

struct rp_test_relay;

/* Starts relaying to n servers (n <= RP_TEST_RELAY_MAX). NULL with a message on stderr. */
struct rp_test_relay *rp_test_relay_start(unsigned n, const struct rp_test_server *servers);
/* Stops the thread and closes every socket. */
void rp_test_relay_stop(struct rp_test_relay *r);

/* "127.0.0.1:PORT", the address a client should use instead of server i's. */
const char *rp_test_relay_addr(const struct rp_test_relay *r, unsigned i);

/* i is a server index or RP_TEST_RELAY_ALL. */
void rp_test_relay_reset(struct rp_test_relay *r, unsigned i);
void rp_test_relay_refuse(struct rp_test_relay *r, unsigned i, bool on);
void rp_test_relay_hold(struct rp_test_relay *r, unsigned i, bool on);

/* Connections accepted through port i since the start (refused and held ones included). */
uint64_t rp_test_relay_accepted(struct rp_test_relay *r, unsigned i);

#endif
