/* Page sealing: every page is encrypted and authenticated on the client before it
 * leaves for a server, the spill file or the local RAM store, and verified when it
 * comes back (docs/encryption.md).
 *
 * AES-256-GCM through OpenSSL's libcrypto (AES-NI: about a microsecond per page). The
 * device key is derived per attach from a random salt (and enckey=FILE when given), so
 * it is never used across two attaches even with the same key file. Each write takes
 * the next value of a per-device counter as its version: the nonce is that version,
 * so no nonce repeats under one key, and the page's logical number is authenticated
 * data. The version and the 16-byte tag stay on the client beside the page map; a
 * server holds only ciphertext, so it cannot alter a page, serve an old version
 * (wrong version, wrong nonce) or swap two pages (wrong page number) undetected.
 * Parity is XORed over ciphertext, so reconstruction needs no key and rebuilt pages are
 * verified like any other read.
 *
 * encrypt=off (benchmarks) keeps the same bookkeeping with a 64-bit checksum over the
 * page, its number and its version in place of the tag: corruption, stale and swapped
 * pages are still caught, but servers see the plaintext.
 *
 * Owned by the engine's I/O thread; no locking.
 *
 * Errors: set-up: -1 with a sentence in err (CONTRIBUTING.md, convention 1);
 * page_unseal: false when the page fails verification (the caller reads another copy or
 * fails -EIO).
 */
#ifndef RAMPART_PAGE_SEAL_H
#define RAMPART_PAGE_SEAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PAGE_SEAL_TAG_LEN 16u
#define PAGE_SEAL_KEY_LEN 32u

/* What the client keeps per logical page: 24 bytes (6 MiB per device GiB). */
struct page_seal {
  uint64_t version; /* 0: never sealed */
  uint8_t tag[PAGE_SEAL_TAG_LEN];
};

struct page_sealer {
  bool encrypt;
  uint64_t pages;
  uint64_t *next_version; /* the nonce counter: own_next_version, or the
                                       pager's state segment (state_segment.h) */
  uint64_t own_next_version;
  struct page_seal *seals; /* per logical page; anonymous mmap, or the state's */
  bool owns_seals;
  void *encrypt_ctx, *decrypt_ctx; /* EVP_CIPHER_CTX, keyed once */
};

/* master: the enckey file's bytes, or NULL for a random key. 0, or -1 with err. */
int page_sealer_init(struct page_sealer *s, uint64_t pages, bool encrypt,
                     const uint8_t *master, size_t master_len, char *err, size_t errlen);
/* A sealer over a device key, seals and nonce counter kept in the pager's state
 * (state_segment.h), so a restarted pager opens what its predecessor sealed and goes on
 * counting where it stopped: the key is used as given, not derived again. */
int page_sealer_init_at(struct page_sealer *s, uint64_t pages, bool encrypt,
                        const uint8_t key[PAGE_SEAL_KEY_LEN], struct page_seal *seals,
                        uint64_t *next_version, char *err, size_t errlen);
void page_sealer_destroy(struct page_sealer *s);

/* Loads now what sealing will need from files (OpenSSL reads its configuration on first
 * use): for a standby that must not touch a file when it takes over. */
void page_sealer_warm_up(void);

/* Seals the page `plain` for logical page `page` under the next version. With
 * encryption the ciphertext goes to `out` (which may not be `plain`: the frontend's
 * buffer is left alone) and the function returns `out`; without, `plain` itself is what
 * is stored and is returned. *seal receives what verifying will need. */
const uint8_t *page_seal(struct page_sealer *s, uint64_t page, const uint8_t *plain,
                         uint8_t *out, struct page_seal *seal);

/* Verifies the stored bytes in `buf` against `seal` and, with encryption, decrypts
 * them in place. false when they are not what was sealed (buf is then garbage). */
bool page_unseal(struct page_sealer *s, uint64_t page, const struct page_seal *seal,
                 uint8_t *buf);

static inline const struct page_seal *page_seal_get(const struct page_sealer *s,
                                                    uint64_t page)
{
  return &s->seals[page];
}

static inline void page_seal_set(struct page_sealer *s, uint64_t page,
                                 const struct page_seal *seal)
{
  s->seals[page] = *seal;
}

/* Client memory the seal table occupies once touched: all of it under mlockall. */
uint64_t page_sealer_memory_bytes(const struct page_sealer *s);

#endif
