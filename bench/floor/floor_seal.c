/* rampart's page seal (src/codec/page_seal.c): AES-256-GCM under the device key, the nonce the
 * page's version and a fixed label, the logical page number as authenticated data, one
 * EVP context per direction keyed once and given only a new nonce per page. The same
 * EVP calls; only the output goes to another buffer on the way in as on the way out, so
 * that neither side copies a page it can write where it is needed. */
#include "floor.h"

#include <openssl/evp.h>
#include <string.h>

#define NONCE_LEN 12

static void make_nonce(uint64_t version, uint8_t nonce[NONCE_LEN])
{
  memcpy(nonce, &version, 8);
  memcpy(nonce + 8, "rpv1", 4);
}

int floor_sealer_init(struct floor_sealer *s, const uint8_t key[FLOOR_SEAL_KEY])
{
  memset(s, 0, sizeof *s);
  EVP_CIPHER_CTX *enc = EVP_CIPHER_CTX_new(), *dec = EVP_CIPHER_CTX_new();
  s->encrypt_ctx = enc;
  s->decrypt_ctx = dec;
  s->next_version = 1;
  if (!enc || !dec || EVP_EncryptInit_ex(enc, EVP_aes_256_gcm(), NULL, key, NULL) != 1 ||
      EVP_DecryptInit_ex(dec, EVP_aes_256_gcm(), NULL, key, NULL) != 1) {
    floor_sealer_free(s);
    return -1;
  }
  return 0;
}

void floor_sealer_free(struct floor_sealer *s)
{
  EVP_CIPHER_CTX_free(s->encrypt_ctx);
  EVP_CIPHER_CTX_free(s->decrypt_ctx);
  memset(s, 0, sizeof *s);
}

uint64_t floor_seal(struct floor_sealer *s, uint64_t page, const uint8_t *plain, uint8_t *out,
                    uint8_t tag[FLOOR_SEAL_TAG])
{
  EVP_CIPHER_CTX *ctx = s->encrypt_ctx;
  uint64_t version = s->next_version++;
  uint8_t nonce[NONCE_LEN], aad[8];
  int len = 0;
  make_nonce(version, nonce);
  memcpy(aad, &page, 8);
  if (EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 ||
      EVP_EncryptUpdate(ctx, NULL, &len, aad, sizeof aad) != 1 ||
      EVP_EncryptUpdate(ctx, out, &len, plain, FLOOR_PAGE) != 1 ||
      EVP_EncryptFinal_ex(ctx, out + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, FLOOR_SEAL_TAG, tag) != 1)
    return 0;
  return version;
}

bool floor_open(struct floor_sealer *s, uint64_t page, uint64_t version,
                const uint8_t tag[FLOOR_SEAL_TAG], const uint8_t *in, uint8_t *out)
{
  EVP_CIPHER_CTX *ctx = s->decrypt_ctx;
  uint8_t nonce[NONCE_LEN], aad[8], t[FLOOR_SEAL_TAG];
  int len = 0;
  make_nonce(version, nonce);
  memcpy(aad, &page, 8);
  memcpy(t, tag, sizeof t);
  return EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) == 1 &&
         EVP_DecryptUpdate(ctx, NULL, &len, aad, sizeof aad) == 1 &&
         EVP_DecryptUpdate(ctx, out, &len, in, FLOOR_PAGE) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, FLOOR_SEAL_TAG, t) == 1 &&
         EVP_DecryptFinal_ex(ctx, out + len, &len) == 1;
}
