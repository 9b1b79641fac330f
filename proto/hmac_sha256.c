/* HMAC-SHA256 on the stack (see hmac_sha256.h). SHA256_Init/Update/Final are deprecated
 * in OpenSSL 3 in favour of EVP, whose digest contexts allocate; they remain the
 * library's own, hardware-accelerated SHA-256, which is why they are used here. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "hmac_sha256.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <string.h>

#define BLOCK 64u /* SHA-256's block size, HMAC's B */

void rp_hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *const *parts,
                    const size_t *part_lens, size_t nparts, uint8_t out[RP_HMAC_SHA256_LEN])
{
  uint8_t k[BLOCK] = { 0 };
  SHA256_CTX ctx;
  if (key_len > BLOCK) { /* a key longer than a block is hashed first */
    SHA256_Init(&ctx);
    SHA256_Update(&ctx, key, key_len);
    SHA256_Final(k, &ctx);
  } else if (key_len > 0) {
    memcpy(k, key, key_len);
  }
  uint8_t pad[BLOCK], inner[RP_HMAC_SHA256_LEN];
  for (size_t i = 0; i < BLOCK; i++)
    pad[i] = k[i] ^ 0x36;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, pad, BLOCK);
  for (size_t i = 0; i < nparts; i++)
    SHA256_Update(&ctx, parts[i], part_lens[i]);
  SHA256_Final(inner, &ctx);
  for (size_t i = 0; i < BLOCK; i++)
    pad[i] = k[i] ^ 0x5c;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, pad, BLOCK);
  SHA256_Update(&ctx, inner, sizeof inner);
  SHA256_Final(out, &ctx);
  OPENSSL_cleanse(k, sizeof k);
  OPENSSL_cleanse(pad, sizeof pad);
  OPENSSL_cleanse(inner, sizeof inner);
  OPENSSL_cleanse(&ctx, sizeof ctx);
}
