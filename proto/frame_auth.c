/* Per-frame AES-256-GMAC with implicit sequence numbers (see frame_auth.h), on OpenSSL
 * libcrypto's EVP AES-GCM: with no plaintext, GCM is GMAC (NIST SP 800-38D). */
#include "frame_auth.h"
#include "hmac_sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>

#define GCM_IV_LEN 12

static const char KEY_C2S_LABEL[] = "rampart-v2 key c->s";
static const char KEY_S2C_LABEL[] = "rampart-v2 key s->c";

static void derive_one(const struct rp_key *key, const char *label,
                       const uint8_t cn[RP_NONCE_LEN], const uint8_t sn[RP_NONCE_LEN],
                       uint8_t out[RP_SESSION_KEY_LEN])
{
  _Static_assert(RP_SESSION_KEY_LEN == RP_HMAC_SHA256_LEN, "a session key is one HMAC");
  const uint8_t *parts[] = {(const uint8_t *)label, cn, sn};
  const size_t lens[] = {strlen(label), RP_NONCE_LEN, RP_NONCE_LEN};
  rp_hmac_sha256(key->bytes, key->len, parts, lens, 3, out);
}

void rp_session_keys_derive(const struct rp_key *key, const uint8_t client_nonce[RP_NONCE_LEN],
                            const uint8_t server_nonce[RP_NONCE_LEN],
                            struct rp_session_keys *out)
{
  _Static_assert(sizeof KEY_C2S_LABEL == sizeof KEY_S2C_LABEL, "labels of one length");
  derive_one(key, KEY_C2S_LABEL, client_nonce, server_nonce, out->client_to_server);
  derive_one(key, KEY_S2C_LABEL, client_nonce, server_nonce, out->server_to_client);
}

void rp_session_keys_wipe(struct rp_session_keys *keys)
{
  OPENSSL_cleanse(keys, sizeof *keys);
}

int rp_frame_auth_init(struct rp_frame_auth *fa, const uint8_t key[RP_SESSION_KEY_LEN])
{
  if (fa->ctx) { /* a context kept from an earlier connection: new key, no allocation */
    fa->keyed = false;
    fa->seq = 0;
    if (EVP_EncryptInit_ex(fa->ctx, NULL, NULL, key, NULL) != 1)
      return -1;
    fa->keyed = true;
    return 0;
  }
  EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
  if (!ctx)
    return -1;
  /* The IV length is GCM's default 12 bytes; only the IV changes per frame. */
  if (EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, NULL) != 1) {
    EVP_CIPHER_CTX_free(ctx);
    return -1;
  }
  fa->ctx = ctx;
  fa->seq = 0;
  fa->keyed = true;
  return 0;
}

int rp_frame_auth_prepare(struct rp_frame_auth *fa)
{
  if (fa->ctx)
    return 0;
  EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
  if (!ctx)
    return -1;
  if (EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1) {
    EVP_CIPHER_CTX_free(ctx);
    return -1;
  }
  fa->ctx = ctx;
  fa->keyed = false;
  fa->seq = 0;
  return 0;
}

void rp_frame_auth_forget(struct rp_frame_auth *fa)
{
  static const uint8_t zero_key[RP_SESSION_KEY_LEN];
  if (fa->ctx && fa->keyed)
    EVP_EncryptInit_ex(fa->ctx, NULL, NULL, zero_key, NULL); /* overwrites the schedule */
  fa->keyed = false;
  fa->seq = 0;
}

void rp_frame_auth_free(struct rp_frame_auth *fa)
{
  if (fa->ctx)
    EVP_CIPHER_CTX_free(fa->ctx);
  fa->ctx = NULL;
  fa->keyed = false;
  fa->seq = 0;
}

static int compute(struct rp_frame_auth *fa, const uint8_t *header, const uint8_t *payload,
                   size_t payload_len, uint8_t tag[RP_TAG_LEN])
{
  EVP_CIPHER_CTX *ctx = fa->keyed ? fa->ctx : NULL;
  uint8_t iv[GCM_IV_LEN] = {0};
  uint64_t seq = fa->seq++;
  for (int i = 0; i < 8; i++)
    iv[GCM_IV_LEN - 1 - i] = (uint8_t)(seq >> (8 * i));
  int outl = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, iv) != 1 ||
      EVP_EncryptUpdate(ctx, NULL, &outl, header, RP_HEADER_SIZE) != 1)
    return -1;
  if (payload_len > 0 && EVP_EncryptUpdate(ctx, NULL, &outl, payload, (int)payload_len) != 1)
    return -1;
  uint8_t none[16];
  if (EVP_EncryptFinal_ex(ctx, none, &outl) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, RP_TAG_LEN, tag) != 1)
    return -1;
  return 0;
}

int rp_frame_tag(struct rp_frame_auth *fa, const uint8_t header[RP_HEADER_SIZE],
                 const uint8_t *payload, size_t payload_len, uint8_t tag[RP_TAG_LEN])
{
  return compute(fa, header, payload, payload_len, tag);
}

bool rp_frame_verify(struct rp_frame_auth *fa, const uint8_t header[RP_HEADER_SIZE],
                     const uint8_t *payload, size_t payload_len,
                     const uint8_t tag[RP_TAG_LEN])
{
  uint8_t expect[RP_TAG_LEN];
  if (compute(fa, header, payload, payload_len, expect) < 0)
    return false;
  return CRYPTO_memcmp(expect, tag, RP_TAG_LEN) == 0;
}
