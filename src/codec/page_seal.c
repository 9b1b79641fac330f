/* Page sealing with AES-256-GCM, or a checksum when encryption is off (page_seal.h). */
#include "page_seal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "auth.h"
#include "wire.h"

#define NONCE_LEN 12

/* The nonce is the version (never repeated under one key) and a fixed label; the
 * logical page number is the authenticated data, binding the ciphertext to its page. */
static void make_nonce(uint64_t version, uint8_t nonce[NONCE_LEN])
{
  memcpy(nonce, &version, 8);
  memcpy(nonce + 8, "rpv1", 4);
}

static void make_aad(uint64_t page, uint8_t aad[8])
{
  memcpy(aad, &page, 8);
}

/* ---- checksum (encrypt=off) ----------------------------------------------------------- */

static inline uint64_t rotl64(uint64_t x, unsigned r)
{
  return (x << r) | (x >> (64 - r));
}

/* Four independent lanes of multiply-rotate rounds over the page's 64-bit words, mixed
 * with the page number and version. Not a MAC: it catches corruption and misplaced or
 * stale pages, which is all encrypt=off promises. */
static uint64_t page_checksum(const uint8_t *buf, uint64_t page, uint64_t version)
{
  const uint64_t p1 = UINT64_C(0x9E3779B185EBCA87), p2 = UINT64_C(0xC2B2AE3D27D4EB4F);
  uint64_t lane[4] = { page ^ p1, version ^ p2, page * p2, version * p1 };
  for (size_t i = 0; i < RP_PAGE_SIZE; i += 32)
    for (unsigned l = 0; l < 4; l++) {
      uint64_t w;
      memcpy(&w, buf + i + 8 * l, 8);
      lane[l] = rotl64(lane[l] + w * p2, 31) * p1;
    }
  uint64_t h = rotl64(lane[0], 1) + rotl64(lane[1], 7) + rotl64(lane[2], 12) +
               rotl64(lane[3], 18);
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  return h;
}

/* ---- set-up ------------------------------------------------------------------------------ */

static int derive_key(const uint8_t *master, size_t master_len,
                      uint8_t key[PAGE_SEAL_KEY_LEN], char *err, size_t errlen)
{
  uint8_t random_bytes[PAGE_SEAL_KEY_LEN];
  if (rp_random_bytes(random_bytes, sizeof random_bytes) < 0) {
    snprintf(err, errlen, "cannot get random bytes for the page key (getrandom failed)");
    return -1;
  }
  if (!master) {
    memcpy(key, random_bytes, PAGE_SEAL_KEY_LEN);
    OPENSSL_cleanse(random_bytes, sizeof random_bytes);
    return 0;
  }
  /* With enckey=FILE the random bytes act as a salt: the counter starts again at every
   * attach, so the key must differ between attaches for nonces never to repeat. */
  uint8_t msg[sizeof "rampart page key v1" - 1 + PAGE_SEAL_KEY_LEN];
  memcpy(msg, "rampart page key v1", sizeof "rampart page key v1" - 1);
  memcpy(msg + sizeof "rampart page key v1" - 1, random_bytes, PAGE_SEAL_KEY_LEN);
  unsigned len = PAGE_SEAL_KEY_LEN;
  bool ok = HMAC(EVP_sha256(), master, (int)master_len, msg, sizeof msg, key, &len) != NULL;
  OPENSSL_cleanse(random_bytes, sizeof random_bytes);
  if (!ok) {
    snprintf(err, errlen, "cannot derive the page key (OpenSSL HMAC failed)");
    return -1;
  }
  return 0;
}

static EVP_CIPHER_CTX *keyed_context(const uint8_t key[PAGE_SEAL_KEY_LEN], bool encrypt)
{
  EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
  if (!ctx)
    return NULL;
  int ok = encrypt ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, NULL)
                   : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, NULL);
  if (ok != 1) {
    EVP_CIPHER_CTX_free(ctx);
    return NULL;
  }
  return ctx;
}

static int sealer_set_key(struct page_sealer *s, const uint8_t key[PAGE_SEAL_KEY_LEN],
                          char *err, size_t errlen)
{
  s->encrypt_ctx = keyed_context(key, true);
  s->decrypt_ctx = keyed_context(key, false);
  if (!s->encrypt_ctx || !s->decrypt_ctx) {
    snprintf(err, errlen,
             "cannot set up AES-256-GCM (OpenSSL refused); use encrypt=off "
             "only if pages may be seen by the servers");
    return -1;
  }
  return 0;
}

int page_sealer_init(struct page_sealer *s, uint64_t pages, bool encrypt,
                     const uint8_t *master, size_t master_len, char *err, size_t errlen)
{
  memset(s, 0, sizeof *s);
  s->encrypt = encrypt;
  s->pages = pages;
  s->own_next_version = 1;
  s->next_version = &s->own_next_version;
  void *seals = mmap(NULL, pages * sizeof(struct page_seal), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (seals == MAP_FAILED) {
    snprintf(err, errlen, "cannot map %llu MiB for page seals: lower size=",
             (unsigned long long)(pages * sizeof(struct page_seal) >> 20));
    return -1;
  }
  s->seals = seals;
  s->owns_seals = true;
  if (!encrypt)
    return 0;
  uint8_t key[PAGE_SEAL_KEY_LEN];
  if (derive_key(master, master_len, key, err, errlen) < 0) {
    page_sealer_destroy(s);
    return -1;
  }
  int r = sealer_set_key(s, key, err, errlen);
  OPENSSL_cleanse(key, sizeof key);
  if (r < 0)
    page_sealer_destroy(s);
  return r;
}

int page_sealer_init_at(struct page_sealer *s, uint64_t pages, bool encrypt,
                        const uint8_t key[PAGE_SEAL_KEY_LEN], struct page_seal *seals,
                        uint64_t *next_version, char *err, size_t errlen)
{
  memset(s, 0, sizeof *s);
  s->encrypt = encrypt;
  s->pages = pages;
  s->next_version = next_version;
  s->seals = seals;
  if (encrypt && sealer_set_key(s, key, err, errlen) < 0) {
    page_sealer_destroy(s);
    return -1;
  }
  return 0;
}

void page_sealer_warm_up(void)
{
  uint8_t key[PAGE_SEAL_KEY_LEN] = { 0 }, mac[32];
  unsigned len = sizeof mac;
  EVP_CIPHER_CTX_free(keyed_context(key, true));
  EVP_CIPHER_CTX_free(keyed_context(key, false));
  HMAC(EVP_sha256(), key, sizeof key, key, sizeof key, mac, &len);
}

void page_sealer_destroy(struct page_sealer *s)
{
  EVP_CIPHER_CTX_free(s->encrypt_ctx);
  EVP_CIPHER_CTX_free(s->decrypt_ctx);
  if (s->seals && s->owns_seals)
    munmap(s->seals, s->pages * sizeof(struct page_seal));
  memset(s, 0, sizeof *s);
}

uint64_t page_sealer_memory_bytes(const struct page_sealer *s)
{
  return s->pages * sizeof(struct page_seal);
}

/* ---- hot path ------------------------------------------------------------------------------ */

const uint8_t *page_seal(struct page_sealer *s, uint64_t page, const uint8_t *plain,
                         uint8_t *out, struct page_seal *seal)
{
  memset(seal, 0, sizeof *seal);
  seal->version = (*s->next_version)++;
  if (!s->encrypt) {
    uint64_t sum = page_checksum(plain, page, seal->version);
    memcpy(seal->tag, &sum, sizeof sum);
    return plain;
  }
  EVP_CIPHER_CTX *ctx = s->encrypt_ctx;
  uint8_t nonce[NONCE_LEN], aad[8];
  int len = 0;
  make_nonce(seal->version, nonce);
  make_aad(page, aad);
  /* With a key already set, only the nonce changes; the cipher and key are kept. A
   * failure here is OpenSSL misbehaving on fixed-size input: stopping is safer than
   * storing a page that could not be sealed. */
  if (EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 ||
      EVP_EncryptUpdate(ctx, NULL, &len, aad, sizeof aad) != 1 ||
      EVP_EncryptUpdate(ctx, out, &len, plain, RP_PAGE_SIZE) != 1 ||
      EVP_EncryptFinal_ex(ctx, out + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, PAGE_SEAL_TAG_LEN, seal->tag) != 1) {
    fprintf(stderr, "rampart: AES-256-GCM encryption failed; stopping\n");
    abort();
  }
  return out;
}

bool page_unseal(struct page_sealer *s, uint64_t page, const struct page_seal *seal,
                 uint8_t *buf)
{
  if (seal->version == 0)
    return false;
  if (!s->encrypt) {
    uint64_t sum = page_checksum(buf, page, seal->version);
    return memcmp(seal->tag, &sum, sizeof sum) == 0;
  }
  EVP_CIPHER_CTX *ctx = s->decrypt_ctx;
  uint8_t nonce[NONCE_LEN], aad[8], tag[PAGE_SEAL_TAG_LEN];
  int len = 0;
  make_nonce(seal->version, nonce);
  make_aad(page, aad);
  memcpy(tag, seal->tag, sizeof tag);
  bool ok = EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) == 1 &&
            EVP_DecryptUpdate(ctx, NULL, &len, aad, sizeof aad) == 1 &&
            EVP_DecryptUpdate(ctx, buf, &len, buf, RP_PAGE_SIZE) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, PAGE_SEAL_TAG_LEN, tag) == 1 &&
            EVP_DecryptFinal_ex(ctx, buf + len, &len) == 1;
  if (!ok) /* what was decrypted is unauthenticated: let no caller see it */
    memset(buf, 0, RP_PAGE_SIZE);
  return ok;
}
