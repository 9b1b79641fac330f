/* Per-frame AES-256-GMAC with implicit sequence numbers (see frame_auth.h), on OpenSSL
 * libcrypto's GCM: with no plaintext, GCM is GMAC (NIST SP 800-38D). */
#include "frame_auth.h"
#include "hmac_sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/modes.h>
#include <stdlib.h>
#include <string.h>

#define GCM_IV_LEN 12

static const char KEY_C2S_LABEL[] = "rampart-v2 key c->s";
static const char KEY_S2C_LABEL[] = "rampart-v2 key s->c";

static void derive_one(const struct rp_key *key, const char *label,
                       const uint8_t cn[RP_NONCE_LEN], const uint8_t sn[RP_NONCE_LEN],
                       uint8_t out[RP_SESSION_KEY_LEN])
{
  _Static_assert(RP_SESSION_KEY_LEN == RP_HMAC_SHA256_LEN, "a session key is one HMAC");
  const uint8_t *parts[] = { (const uint8_t *)label, cn, sn };
  const size_t lens[] = { strlen(label), RP_NONCE_LEN, RP_NONCE_LEN };
  rp_hmac_sha256(key->bytes, key->len, parts, lens, 3, out);
}

void rp_session_keys_derive(const struct rp_key *key,
                            const uint8_t client_nonce[RP_NONCE_LEN],
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

/* One direction's GMAC state, behind rp_frame_auth.ctx: GCM's block cipher (AES-256 in
 * ECB mode, which GCM needs for H and for each frame's E(J0)) and libcrypto's GCM
 * context. The modes-level API (openssl/modes.h) is used rather than EVP's AES-GCM: the
 * same GHASH code, without EVP's per-call parameter handling, which costs more than the
 * GHASH of a header-only tag itself (docs/performance.md, "Figures from the code"). */
struct frame_gmac {
  EVP_CIPHER_CTX *aes;
  GCM128_CONTEXT *gcm;
  bool block_failed; /* the block cipher failed since the last check: the tag is wrong */
};

static void aes_block(const unsigned char in[16], unsigned char out[16], const void *key)
{
  struct frame_gmac *g = (struct frame_gmac *)(uintptr_t)key;
  int outl = 0;
  if (EVP_EncryptUpdate(g->aes, out, &outl, in, 16) != 1 || outl != 16) {
    memset(out, 0, 16);
    g->block_failed = true;
  }
}

/* Keys g (GCM's H derived again); false if the block cipher failed, which would leave
 * H zero and every tag independent of the frame: never use g then. */
static bool gmac_key(struct frame_gmac *g, const uint8_t key[RP_SESSION_KEY_LEN])
{
  g->block_failed = EVP_EncryptInit_ex(g->aes, NULL, NULL, key, NULL) != 1;
  if (!g->block_failed)
    CRYPTO_gcm128_init(g->gcm, g, aes_block);
  return !g->block_failed;
}

static void gmac_free(struct frame_gmac *g)
{
  if (!g)
    return;
  if (g->gcm)
    CRYPTO_gcm128_release(g->gcm); /* cleansed by libcrypto */
  EVP_CIPHER_CTX_free(g->aes);
  free(g);
}

int rp_frame_auth_prepare(struct rp_frame_auth *fa)
{
  if (fa->ctx)
    return 0;
  static const uint8_t zero_key[RP_SESSION_KEY_LEN];
  struct frame_gmac *g = calloc(1, sizeof *g);
  if (!g)
    return -1;
  g->aes = EVP_CIPHER_CTX_new();
  /* Keyed with zeros from the start, so the block cipher never runs unkeyed. */
  if (!g->aes || EVP_EncryptInit_ex(g->aes, EVP_aes_256_ecb(), NULL, zero_key, NULL) != 1 ||
      EVP_CIPHER_CTX_set_padding(g->aes, 0) != 1 ||
      !(g->gcm = CRYPTO_gcm128_new(g, aes_block)) || g->block_failed) {
    gmac_free(g);
    return -1;
  }
  fa->ctx = g;
  fa->keyed = false;
  fa->seq = 0;
  return 0;
}

int rp_frame_auth_init(struct rp_frame_auth *fa, const uint8_t key[RP_SESSION_KEY_LEN])
{
  fa->keyed = false;
  fa->seq = 0;
  if (rp_frame_auth_prepare(fa) < 0 || !gmac_key(fa->ctx, key))
    return -1;
  fa->keyed = true;
  return 0;
}

void rp_frame_auth_forget(struct rp_frame_auth *fa)
{
  static const uint8_t zero_key[RP_SESSION_KEY_LEN];
  if (fa->ctx && fa->keyed)
    gmac_key(fa->ctx, zero_key); /* overwrites the key schedule and H */
  fa->keyed = false;
  fa->seq = 0;
}

void rp_frame_auth_free(struct rp_frame_auth *fa)
{
  gmac_free(fa->ctx);
  fa->ctx = NULL;
  fa->keyed = false;
  fa->seq = 0;
}

static int compute(struct rp_frame_auth *fa, const uint8_t *header, const uint8_t *payload,
                   size_t payload_len, uint8_t tag[RP_TAG_LEN])
{
  struct frame_gmac *g = fa->keyed ? fa->ctx : NULL;
  if (!g)
    return -1;
  uint8_t iv[GCM_IV_LEN] = { 0 };
  uint64_t seq = fa->seq++;
  for (int i = 0; i < 8; i++)
    iv[GCM_IV_LEN - 1 - i] = (uint8_t)(seq >> (8 * i));
  g->block_failed = false;
  CRYPTO_gcm128_setiv(g->gcm, iv, GCM_IV_LEN);
  if (CRYPTO_gcm128_aad(g->gcm, header, RP_HEADER_SIZE) != 0 ||
      (payload_len > 0 && CRYPTO_gcm128_aad(g->gcm, payload, payload_len) != 0))
    return -1;
  CRYPTO_gcm128_tag(g->gcm, tag, RP_TAG_LEN);
  return g->block_failed ? -1 : 0;
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
