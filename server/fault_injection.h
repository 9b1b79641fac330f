/* The test-only "hostile server" switch: --test-fault MODE.
 *
 * rampart treats memory servers as untrusted: a client must notice when a server hands
 * back a page that is not the one it stored. Testing that needs a server that lies, and
 * a real rampartd process is the most honest liar there is. This switch makes one
 * behave like a malicious or broken server: the corrupting modes change only what READ
 * replies carry (the store itself keeps the true pages), refuse-writes turns some WRITEs
 * away as a host out of memory would; it is off unless the option is given, and
 * rampartd logs a loud warning at start when it is on. It exists only in the test
 * binary rampartd-faults (CMake option RAMPART_TEST_FAULTS, on with RAMPART_TESTS);
 * the rampartd that is installed refuses the option.
 *
 * The replay mode keeps its state server-wide, one table indexed by slot, not per
 * account: accounts are opaque outside page_store.c and their lifetime is managed in
 * session.c, so this file cannot learn when one goes away. Tests of replay should use
 * one session per server. Like every rampartd module it runs on the one loop thread.
 *
 * Errors: rps_fault_parse returns -1 for a name it does not know, with no sentence (the
 * option parser writes it); nothing else here fails.
 */
#ifndef RAMPART_SERVER_FAULT_INJECTION_H
#define RAMPART_SERVER_FAULT_INJECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rps_store;
struct rps_account;

enum rps_fault_mode {
  RPS_FAULT_NONE,   /* an honest server (the default) */
  RPS_FAULT_FLIP,   /* byte slot % 4096 of every READ reply is XORed with 0x01 */
  RPS_FAULT_SWAP,   /* a READ of slot s returns slot s^1's page when that slot has one */
  RPS_FAULT_REPLAY, /* a READ of slot s returns the write received just before s's
                        last write, when there was one */
  RPS_FAULT_REFUSE_WRITES, /* every RPS_FAULT_REFUSE_EVERY-th WRITE is refused (not stored)
                              with RP_ERR_INTERNAL, as when the host cannot map a page */
};

#define RPS_FAULT_REFUSE_EVERY 64u
#define RPS_FAULT_LAST RPS_FAULT_REFUSE_WRITES

/* True in the rampartd-faults test binary (built with RAMPART_TEST_FAULTS), false in
 * rampartd itself, where every function below does nothing and parsing always fails. */
bool rps_fault_compiled_in(void);

/* "flip", "swap", "replay" or "refuse-writes": 0 with *mode set; -1 for anything else. */
int rps_fault_parse(const char *name, enum rps_fault_mode *mode);
const char *rps_fault_name(enum rps_fault_mode mode);

/* Logs the start-up warning when mode is not RPS_FAULT_NONE. */
void rps_fault_announce(enum rps_fault_mode mode);

/* Before a WRITE is stored: true when refuse-writes turns this one away (msg then says
 * why, for the error reply); the store is left as it was. */
bool rps_fault_refuses_write(enum rps_fault_mode mode, char *msg, size_t msglen);

/* A WRITE of `page` to `slot` was stored (call only on success: then slot is inside
 * the reservation, hence below the capacity). Only replay mode records anything. */
void rps_fault_on_write(enum rps_fault_mode mode, struct rps_store *store, uint64_t slot,
                        const uint8_t *page);

/* `payload` is the READ reply being built, already holding slot's real page: rewrites
 * it as the server's --test-fault says. Does nothing for RPS_FAULT_NONE. */
void rps_fault_read_reply(enum rps_fault_mode mode, struct rps_store *store,
                          const struct rps_account *acct, uint64_t slot, uint8_t *payload);

/* Unmaps replay state (server shutdown, so sanitizer runs end clean). */
void rps_fault_release(void);

#endif
