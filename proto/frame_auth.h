/* Per-frame authentication after the handshake (protocol version 2).
 *
 * The handshake (auth.h) gives both sides the cluster key and two fresh nonces. From
 * them each side derives two session keys, one per direction:
 *
 *   key(client->server) = HMAC-SHA256(cluster key, "rampart-v2 key c->s" || client_nonce || server_nonce)
 *   key(server->client) = HMAC-SHA256(cluster key, "rampart-v2 key s->c" || client_nonce || server_nonce)
 *
 * From AUTH (client->server) and the reply to AUTH (server->client) onward, every
 * frame is followed by a 16-byte tag: AES-256-GMAC (NIST SP 800-38D: AES-256-GCM with
 * the whole frame, 32-byte header and payload, as additional authenticated data and no
 * plaintext) under that direction's key, with the frame's sequence number in that
 * direction as the 96-bit nonce (4 zero bytes, then the 64-bit counter big-endian). The
 * counter starts at 0 and is never sent: each side counts the frames it sends and
 * receives, as TLS 1.3 and SSH do, so a frame injected, replayed, dropped, reordered,
 * altered or cut short fails its tag. A nonce never repeats under one key: the keys are
 * new for every connection (fresh nonces) and the counter only grows.
 *
 * The header's `length` counts the payload only; after the handshake a frame on the
 * wire is RP_HEADER_SIZE + length + RP_TAG_LEN bytes.
 *
 * One GCM context per direction per connection, keyed once; each frame sets only the
 * IV, so a tag costs one AES block and one GHASH pass over the frame (PCLMULQDQ).
 *
 * Errors: 0, or -1 with no sentence when libcrypto fails; rp_frame_verify returns false
 * for a frame whose tag does not match.
 */
#ifndef RAMPART_PROTO_FRAME_AUTH_H
#define RAMPART_PROTO_FRAME_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "wire.h"

#define RP_TAG_LEN 16u         /* AES-256-GMAC */
#define RP_SESSION_KEY_LEN 32u /* AES-256 */

struct rp_session_keys {
  uint8_t client_to_server[RP_SESSION_KEY_LEN];
  uint8_t server_to_client[RP_SESSION_KEY_LEN];
};

/* Derives both directions' keys from the cluster key and the handshake's nonces. */
void rp_session_keys_derive(const struct rp_key *key,
                            const uint8_t client_nonce[RP_NONCE_LEN],
                            const uint8_t server_nonce[RP_NONCE_LEN],
                            struct rp_session_keys *out);
/* Wipes the keys (OPENSSL_cleanse). */
void rp_session_keys_wipe(struct rp_session_keys *keys);

/* One direction of one connection: its key (inside the cipher context) and the
 * sequence number of the next frame. Zero-initialised means "not keyed". */
struct rp_frame_auth {
  void *ctx; /* frame_auth.c's GMAC state */
  bool keyed;
  uint64_t seq;
};

/* Keys fa with one direction's key; seq starts at 0. A context kept by
 * rp_frame_auth_forget is keyed again without allocating. 0, or -1 when libcrypto
 * fails. */
int rp_frame_auth_init(struct rp_frame_auth *fa, const uint8_t key[RP_SESSION_KEY_LEN]);
/* Makes fa's cipher context now, unkeyed, so that a later rp_frame_auth_init allocates
 * nothing (libcrypto allocates the context and fetches the cipher). 0 or -1. */
int rp_frame_auth_prepare(struct rp_frame_auth *fa);
/* Unkeys fa (the key schedule overwritten) but keeps its context for the next
 * rp_frame_auth_init: a connection's memory reused for the next connection. */
void rp_frame_auth_forget(struct rp_frame_auth *fa);
/* Frees the context (safe on a zeroed or already freed one). */
void rp_frame_auth_free(struct rp_frame_auth *fa);
/* Test API: whether fa holds a key. */
static inline bool rp_frame_auth_active(const struct rp_frame_auth *fa)
{
  return fa->keyed;
}

/* The tag of the next frame sent (header, then payload_len bytes of payload; payload
 * may be NULL when payload_len is 0), and advances the sequence number. 0, or -1 when
 * libcrypto fails (then nothing may be sent: the sequence is lost). */
int rp_frame_tag(struct rp_frame_auth *fa, const uint8_t header[RP_HEADER_SIZE],
                 const uint8_t *payload, size_t payload_len, uint8_t tag[RP_TAG_LEN]);

/* Checks the next received frame's tag (constant-time) and advances the sequence
 * number. false: the frame was not sent by the peer at this position in the stream. */
bool rp_frame_verify(struct rp_frame_auth *fa, const uint8_t header[RP_HEADER_SIZE],
                     const uint8_t *payload, size_t payload_len,
                     const uint8_t tag[RP_TAG_LEN]);

#endif
