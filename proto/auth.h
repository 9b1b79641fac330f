/* Cluster-key challenge-response, shared by rampartd and the client library.
 *
 * Both sides send a fresh random nonce; each proves it holds the key by an HMAC-SHA256
 * over both nonces with a side-specific label ("rampart-v2 server" / "rampart-v2
 * client"), so the key never crosses the wire, a recorded exchange cannot be replayed,
 * and a client can tell a server that lacks the key. The server proves itself first
 * (in its Challenge), so a client sends its resume token only to a server that holds
 * the key. Every frame after the handshake is then authenticated (frame_auth.h). A server started without a key (loopback only) uses the empty key: the same
 * code path, no secret.
 *
 * Errors: rp_key_load and rp_key_generate are convention 1 (-1 with a sentence in err,
 * CONTRIBUTING.md); rp_random_bytes returns 0 or -1; rp_mac_matches returns false
 * for a MAC that does not match.
 */
#ifndef RAMPART_PROTO_AUTH_H
#define RAMPART_PROTO_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define RP_KEY_MIN_LEN 32u
#define RP_KEY_MAX_LEN 1024u

struct rp_key {
  size_t len; /* 0: no key */
  uint8_t bytes[RP_KEY_MAX_LEN];
};

/* Reads a key file: its bytes, less trailing whitespace. Refuses a missing, empty,
 * too-short or too-long file with a sentence in err saying what to do. 0 or -1. */
int rp_key_load(const char *path, struct rp_key *key, char *err, size_t errlen);

/* Writes a new random key (64 hex characters) to path, mode 0600, refusing to overwrite
 * an existing file. 0 or -1 with err. */
int rp_key_generate(const char *path, char *err, size_t errlen);

/* Cryptographically random bytes (getrandom). 0 or -1. */
int rp_random_bytes(uint8_t *buf, size_t n);

void rp_auth_client_mac(const struct rp_key *key, const uint8_t server_nonce[RP_NONCE_LEN],
                        const uint8_t client_nonce[RP_NONCE_LEN], uint8_t mac[RP_MAC_LEN]);
void rp_auth_server_mac(const struct rp_key *key, const uint8_t client_nonce[RP_NONCE_LEN],
                        const uint8_t server_nonce[RP_NONCE_LEN], uint8_t mac[RP_MAC_LEN]);

/* Constant-time comparison of two MACs; false if len is not RP_MAC_LEN. */
bool rp_mac_matches(const uint8_t expected[RP_MAC_LEN], const uint8_t *got, size_t len);

#endif
