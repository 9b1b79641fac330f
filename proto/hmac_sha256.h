/* HMAC-SHA256 (RFC 2104) that never touches the heap.
 *
 * OpenSSL 3's HMAC() and EVP_MAC allocate contexts on every call, and the handshake
 * computes four MACs per connection. A pager reconnecting to a server inside a memory
 * shortage must not allocate (docs/recovery.md), so
 * the construction is written out here on libcrypto's SHA-256 block function, whose
 * context is a plain struct on the stack. Checked against RFC 4231's test vectors and
 * against HMAC() itself in test/unit/test_auth.c.
 *
 * Errors: none: nothing here fails.
 */
#ifndef RAMPART_PROTO_HMAC_SHA256_H
#define RAMPART_PROTO_HMAC_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define RP_HMAC_SHA256_LEN 32u

/* out = HMAC-SHA256(key, the concatenation of the nparts parts). key may be empty. */
void rp_hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *const *parts,
                    const size_t *part_lens, size_t nparts, uint8_t out[RP_HMAC_SHA256_LEN]);

#endif
