/* Cluster-key authentication (proto/auth.c): the MACs bind the key, both nonces and the
 * side; key files load and generate as the operator would expect. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth.h"
#include "frame_auth.h"
#include "hmac_sha256.h"

#define KNOWN_CLIENT_MAC "9024e24cdc2c4ce19d45113eee4d1ab1d2175af64ad09c296442380c11998169"
/* HMAC-SHA256("0123456789abcdef", "rampart-v2 key c->s" || 32x01 || 32x00) and the
 * AES-256-GMAC under it of header 00..1f and 100 bytes 0x5a at sequence number 5,
 * computed independently with Python (hmac, and cryptography's AESGCM with the frame as
 * associated data and no plaintext). */
#define KNOWN_C2S_KEY "f838e613a42f9a7d2f46271fc2f2b90c874c8117719f664729143dad03d40b28"
#define KNOWN_TAG "b96d593e4bc94b8d523ce2a581b21f68"

struct fixture {
  char dir[64];
  char path[128];
};

static int setup_dir(void **state)
{
  struct fixture *f = calloc(1, sizeof *f);
  if (!f)
    return -1;
  snprintf(f->dir, sizeof f->dir, "/tmp/rampart-test-auth.XXXXXX");
  if (!mkdtemp(f->dir)) {
    free(f);
    return -1;
  }
  snprintf(f->path, sizeof f->path, "%s/key", f->dir);
  *state = f;
  return 0;
}

static int teardown_dir(void **state)
{
  struct fixture *f = *state;
  unlink(f->path);
  rmdir(f->dir);
  free(f);
  return 0;
}

static void write_file(const char *path, const void *data, size_t len)
{
  unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, len), (ssize_t)len);
  close(fd);
}

static struct rp_key make_key(const char *s)
{
  struct rp_key k;
  memset(&k, 0, sizeof k);
  k.len = strlen(s);
  memcpy(k.bytes, s, k.len);
  return k;
}

static void nonces(uint8_t cn[RP_NONCE_LEN], uint8_t sn[RP_NONCE_LEN])
{
  for (unsigned i = 0; i < RP_NONCE_LEN; i++) {
    cn[i] = (uint8_t)i;
    sn[i] = (uint8_t)(0xa0 + i);
  }
}

static void test_client_and_server_macs_differ(void **state)
{
  (void)state;
  struct rp_key k = make_key("0123456789abcdef0123456789abcdef");
  uint8_t cn[RP_NONCE_LEN], sn[RP_NONCE_LEN], cm[RP_MAC_LEN], sm[RP_MAC_LEN];
  nonces(cn, sn);
  rp_auth_client_mac(&k, sn, cn, cm);
  rp_auth_server_mac(&k, cn, sn, sm);
  assert_memory_not_equal(cm, sm, RP_MAC_LEN);
  assert_false(rp_mac_matches(cm, sm, RP_MAC_LEN));
  /* even with the nonces equal the label separates them: no reflection */
  rp_auth_client_mac(&k, cn, cn, cm);
  rp_auth_server_mac(&k, cn, cn, sm);
  assert_memory_not_equal(cm, sm, RP_MAC_LEN);
}

static void test_mac_is_deterministic(void **state)
{
  (void)state;
  struct rp_key k = make_key("a cluster key of some length");
  uint8_t cn[RP_NONCE_LEN], sn[RP_NONCE_LEN], a[RP_MAC_LEN], b[RP_MAC_LEN];
  nonces(cn, sn);
  rp_auth_client_mac(&k, sn, cn, a);
  rp_auth_client_mac(&k, sn, cn, b);
  assert_memory_equal(a, b, RP_MAC_LEN);
  assert_true(rp_mac_matches(a, b, RP_MAC_LEN));
}

static void test_mac_depends_on_both_nonces(void **state)
{
  (void)state;
  struct rp_key k = make_key("0123456789abcdef0123456789abcdef");
  uint8_t cn[RP_NONCE_LEN], sn[RP_NONCE_LEN], base_c[RP_MAC_LEN], base_s[RP_MAC_LEN];
  uint8_t m[RP_MAC_LEN];
  nonces(cn, sn);
  rp_auth_client_mac(&k, sn, cn, base_c);
  rp_auth_server_mac(&k, cn, sn, base_s);

  for (unsigned byte = 0; byte < RP_NONCE_LEN; byte += 7) {
    cn[byte] ^= 1;
    rp_auth_client_mac(&k, sn, cn, m);
    assert_false(rp_mac_matches(base_c, m, RP_MAC_LEN));
    rp_auth_server_mac(&k, cn, sn, m);
    assert_false(rp_mac_matches(base_s, m, RP_MAC_LEN));
    cn[byte] ^= 1;

    sn[byte] ^= 0x80;
    rp_auth_client_mac(&k, sn, cn, m);
    assert_false(rp_mac_matches(base_c, m, RP_MAC_LEN));
    rp_auth_server_mac(&k, cn, sn, m);
    assert_false(rp_mac_matches(base_s, m, RP_MAC_LEN));
    sn[byte] ^= 0x80;
  }
  /* swapping the nonces changes the MAC: order is bound */
  rp_auth_client_mac(&k, cn, sn, m);
  assert_false(rp_mac_matches(base_c, m, RP_MAC_LEN));
}

static void test_mac_depends_on_key(void **state)
{
  (void)state;
  struct rp_key k1 = make_key("0123456789abcdef0123456789abcdef");
  struct rp_key k2 = make_key("0123456789abcdef0123456789abcdeF");
  struct rp_key k3 = make_key("0123456789abcdef0123456789abcdef0"); /* longer */
  struct rp_key none = make_key("");
  uint8_t cn[RP_NONCE_LEN], sn[RP_NONCE_LEN], m1[RP_MAC_LEN], m[RP_MAC_LEN];
  nonces(cn, sn);
  rp_auth_client_mac(&k1, sn, cn, m1);
  rp_auth_client_mac(&k2, sn, cn, m);
  assert_false(rp_mac_matches(m1, m, RP_MAC_LEN));
  rp_auth_client_mac(&k3, sn, cn, m);
  assert_false(rp_mac_matches(m1, m, RP_MAC_LEN));
  rp_auth_client_mac(&none, sn, cn, m);
  assert_false(rp_mac_matches(m1, m, RP_MAC_LEN));
  /* the empty key is still a well-defined, deterministic MAC */
  uint8_t m2[RP_MAC_LEN];
  rp_auth_client_mac(&none, sn, cn, m2);
  assert_true(rp_mac_matches(m, m2, RP_MAC_LEN));
}

static void test_known_answer(void **state)
{
  (void)state;
  /* HMAC-SHA256(key="0123456789abcdef", "rampart-v2 client" || 32x00 || 32x01),
   * computed independently with `openssl dgst -hmac`. Pins the construction so a change to
   * the label or nonce order (a protocol break) cannot slip in unnoticed. */
  struct rp_key k = make_key("0123456789abcdef");
  uint8_t sn[RP_NONCE_LEN], cn[RP_NONCE_LEN], m[RP_MAC_LEN];
  memset(sn, 0, sizeof sn);
  memset(cn, 1, sizeof cn);
  rp_auth_client_mac(&k, sn, cn, m);
  char hex[2 * RP_MAC_LEN + 1];
  for (unsigned i = 0; i < RP_MAC_LEN; i++)
    snprintf(hex + 2 * i, 3, "%02x", m[i]);
  assert_string_equal(hex, KNOWN_CLIENT_MAC);
}

static void hexof(const uint8_t *b, size_t n, char *out)
{
  for (size_t i = 0; i < n; i++)
    snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* RFC 4231 section 4: test cases 1, 2, 6 (a key longer than a block) and 7. */
static void test_hmac_sha256_rfc4231(void **state)
{
  (void)state;
  static const struct {
    const char *key_hex, *data, *mac_hex;
  } cases[] = {
    { "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "Hi There",
      "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" },
    { "4a656665", "what do ya want for nothing?",
      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" },
    { NULL, "Test Using Larger Than Block-Size Key - Hash Key First",
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54" },
    { NULL,
      "This is a test using a larger than block-size key and a larger than block-size "
      "data. The key needs to be hashed before being used by the HMAC algorithm.",
      "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2" },
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    uint8_t key[131];
    size_t key_len = sizeof key; /* cases 6 and 7: 131 bytes of 0xaa */
    memset(key, 0xaa, sizeof key);
    if (cases[c].key_hex) {
      key_len = strlen(cases[c].key_hex) / 2;
      for (size_t i = 0; i < key_len; i++)
        sscanf(cases[c].key_hex + 2 * i, "%2hhx", &key[i]);
    }
    /* the message in two parts, to check that parts are concatenated */
    size_t n = strlen(cases[c].data), half = n / 2;
    const uint8_t *parts[] = { (const uint8_t *)cases[c].data,
                               (const uint8_t *)cases[c].data + half };
    const size_t lens[] = { half, n - half };
    uint8_t mac[RP_HMAC_SHA256_LEN];
    rp_hmac_sha256(key, key_len, parts, lens, 2, mac);
    char hex[2 * RP_HMAC_SHA256_LEN + 1];
    hexof(mac, sizeof mac, hex);
    assert_string_equal(hex, cases[c].mac_hex);
  }
}

/* The same as libcrypto's HMAC() for random keys (empty, short, a block, longer) and
 * messages. */
static void test_hmac_sha256_matches_libcrypto(void **state)
{
  (void)state;
  for (unsigned t = 0; t < 200; t++) {
    uint8_t key[150], msg[300], a[32], b[32];
    size_t key_len = (size_t)(t * 7) % sizeof key, msg_len = (size_t)(t * 13) % sizeof msg;
    assert_int_equal(rp_random_bytes(key, sizeof key), 0);
    assert_int_equal(rp_random_bytes(msg, sizeof msg), 0);
    const uint8_t *parts[] = { msg };
    const size_t lens[] = { msg_len };
    rp_hmac_sha256(key, key_len, parts, lens, 1, a);
    unsigned int len = sizeof b;
    assert_non_null(HMAC(EVP_sha256(), key, (int)key_len, msg, msg_len, b, &len));
    assert_memory_equal(a, b, sizeof a);
  }
}

static void test_mac_length_checked(void **state)
{
  (void)state;
  uint8_t a[RP_MAC_LEN + 1];
  memset(a, 7, sizeof a);
  assert_true(rp_mac_matches(a, a, RP_MAC_LEN));
  assert_false(rp_mac_matches(a, a, RP_MAC_LEN - 1));
  assert_false(rp_mac_matches(a, a, RP_MAC_LEN + 1));
  assert_false(rp_mac_matches(a, a, 0));
  assert_false(rp_mac_matches(a, NULL, RP_MAC_LEN));
  uint8_t b[RP_MAC_LEN];
  memcpy(b, a, RP_MAC_LEN);
  b[RP_MAC_LEN - 1] ^= 1; /* last byte differs */
  assert_false(rp_mac_matches(a, b, RP_MAC_LEN));
}

static void test_load_missing_file(void **state)
{
  struct fixture *f = *state;
  struct rp_key k;
  char err[512] = "";
  assert_int_equal(rp_key_load(f->path, &k, err, sizeof err), -1);
  assert_non_null(strstr(err, "rampartctl keygen"));
  assert_non_null(strstr(err, f->path));
  assert_int_equal(k.len, 0);
}

static void test_load_too_short(void **state)
{
  struct fixture *f = *state;
  struct rp_key k;
  char err[512] = "";
  write_file(f->path, "short\n", 6);
  assert_int_equal(rp_key_load(f->path, &k, err, sizeof err), -1);
  assert_non_null(strstr(err, "at least"));
  /* exactly RP_KEY_MIN_LEN - 1 bytes, padded with whitespace, is still short */
  write_file(f->path, "0123456789abcdef0123456789abcde \n\n", 34);
  err[0] = '\0';
  assert_int_equal(rp_key_load(f->path, &k, err, sizeof err), -1);
  assert_true(strlen(err) > 0);
  /* empty */
  write_file(f->path, "", 0);
  err[0] = '\0';
  assert_int_equal(rp_key_load(f->path, &k, err, sizeof err), -1);
  assert_true(strlen(err) > 0);
}

static void test_load_too_long(void **state)
{
  struct fixture *f = *state;
  struct rp_key k;
  char err[512] = "";
  size_t n = RP_KEY_MAX_LEN + 1;
  char *big = malloc(n);
  assert_non_null(big);
  memset(big, 'k', n);
  write_file(f->path, big, n);
  assert_int_equal(rp_key_load(f->path, &k, err, sizeof err), -1);
  assert_true(strlen(err) > 0);
  /* far too long (a file that is not a key) */
  char *huge = malloc(100000);
  assert_non_null(huge);
  memset(huge, 'k', 100000);
  write_file(f->path, huge, 100000);
  err[0] = '\0';
  assert_int_equal(rp_key_load(f->path, &k, err, sizeof err), -1);
  assert_non_null(strstr(err, "longer"));
  free(huge);
  /* exactly the maximum loads */
  write_file(f->path, big, RP_KEY_MAX_LEN);
  assert_int_equal(rp_key_load(f->path, &k, err, sizeof err), 0);
  assert_int_equal(k.len, RP_KEY_MAX_LEN);
  /* ... and so does the maximum with a trailing newline, as an editor would save it */
  big[RP_KEY_MAX_LEN] = '\n';
  write_file(f->path, big, RP_KEY_MAX_LEN + 1);
  err[0] = '\0';
  if (rp_key_load(f->path, &k, err, sizeof err) != 0)
    fail_msg("a %u-byte key with a newline was refused: %s", RP_KEY_MAX_LEN, err);
  assert_int_equal(k.len, RP_KEY_MAX_LEN);
  free(big);
}

static void test_load_strips_trailing_newline(void **state)
{
  struct fixture *f = *state;
  struct rp_key a, b;
  char err[512] = "";
  write_file(f->path, "0123456789abcdef0123456789abcdef0123\n", 37);
  assert_int_equal(rp_key_load(f->path, &a, err, sizeof err), 0);
  assert_int_equal(a.len, 36);
  assert_memory_equal(a.bytes, "0123456789abcdef0123456789abcdef0123", 36);
  write_file(f->path, "0123456789abcdef0123456789abcdef0123", 36);
  assert_int_equal(rp_key_load(f->path, &b, err, sizeof err), 0);
  assert_int_equal(b.len, 36);
  write_file(f->path, "0123456789abcdef0123456789abcdef0123 \r\n\t\n", 41);
  assert_int_equal(rp_key_load(f->path, &b, err, sizeof err), 0);
  assert_int_equal(b.len, 36);
  assert_memory_equal(a.bytes, b.bytes, 36);
  /* so the same key with or without a newline authenticates the same */
  uint8_t cn[RP_NONCE_LEN], sn[RP_NONCE_LEN], ma[RP_MAC_LEN], mb[RP_MAC_LEN];
  nonces(cn, sn);
  rp_auth_client_mac(&a, sn, cn, ma);
  rp_auth_client_mac(&b, sn, cn, mb);
  assert_true(rp_mac_matches(ma, mb, RP_MAC_LEN));
}

#define GOOD_KEY "0123456789abcdef0123456789abcdef\n"

/* Each refusal names the file and says the fix. */
static void expect_refused(const char *path, const char *why, const char *fix)
{
  struct rp_key k;
  char err[512] = "";
  assert_int_equal(rp_key_load(path, &k, err, sizeof err), -1);
  print_message("refused: %s\n", err);
  assert_non_null(strstr(err, path));
  assert_non_null(strstr(err, why));
  assert_non_null(strstr(err, fix));
  assert_int_equal(k.len, 0);
}

static void test_load_refuses_a_key_others_can_read(void **state)
{
  struct fixture *f = *state;
  write_file(f->path, GOOD_KEY, strlen(GOOD_KEY));
  static const mode_t loose[] = { 0640, 0604, 0644, 0660, 0602, 0620, 0700 | 0004 };
  for (size_t i = 0; i < sizeof loose / sizeof loose[0]; i++) {
    assert_int_equal(chmod(f->path, loose[i]), 0);
    expect_refused(f->path, "group or other users", "chmod 600");
  }
  assert_int_equal(chmod(f->path, 0400), 0); /* read-only for its owner is fine */
  struct rp_key k;
  char err[512] = "";
  assert_int_equal(rp_key_load(f->path, &k, err, sizeof err), 0);
}

static void test_load_refuses_a_key_another_user_owns(void **state)
{
  struct fixture *f = *state;
  if (geteuid() != 0) {
    print_message("skipped: needs root to give the key file to another user\n");
    skip();
  }
  write_file(f->path, GOOD_KEY, strlen(GOOD_KEY));
  assert_int_equal(chown(f->path, 4242, 4242), 0);
  expect_refused(f->path, "owned by uid 4242", "chown");
}

static void test_load_refuses_what_is_not_a_file(void **state)
{
  struct fixture *f = *state;
  unlink(f->path);
  assert_int_equal(mkdir(f->path, 0700), 0);
  expect_refused(f->path, "a directory", "rampartctl keygen");
  rmdir(f->path);
  assert_int_equal(mkfifo(f->path, 0600), 0);
  expect_refused(f->path, "a FIFO", "rampartctl keygen"); /* and does not hang on it */
  unlink(f->path);
}

static void test_keygen(void **state)
{
  struct fixture *f = *state;
  char err[512] = "";
  unlink(f->path);
  assert_int_equal(rp_key_generate(f->path, err, sizeof err), 0);
  struct stat st;
  assert_int_equal(stat(f->path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal(st.st_size, 65); /* 64 hex characters and a newline */

  struct rp_key k;
  assert_int_equal(rp_key_load(f->path, &k, err, sizeof err), 0);
  assert_int_equal(k.len, 64);
  for (size_t i = 0; i < k.len; i++)
    assert_non_null(strchr("0123456789abcdef", k.bytes[i]));

  /* refuses to overwrite, and leaves the existing key alone */
  err[0] = '\0';
  assert_int_equal(rp_key_generate(f->path, err, sizeof err), -1);
  assert_non_null(strstr(err, f->path));
  struct rp_key again;
  assert_int_equal(rp_key_load(f->path, &again, err, sizeof err), 0);
  assert_memory_equal(k.bytes, again.bytes, k.len);

  /* two keys differ */
  unlink(f->path);
  assert_int_equal(rp_key_generate(f->path, err, sizeof err), 0);
  assert_int_equal(rp_key_load(f->path, &again, err, sizeof err), 0);
  assert_memory_not_equal(k.bytes, again.bytes, k.len);
}

static void test_keygen_bad_directory(void **state)
{
  (void)state;
  char err[512] = "";
  assert_int_equal(rp_key_generate("/nonexistent-dir-rampart/key", err, sizeof err), -1);
  assert_true(strlen(err) > 0);
}

static void test_random_bytes(void **state)
{
  (void)state;
  uint8_t a[64], b[64];
  memset(a, 0, sizeof a);
  memset(b, 0, sizeof b);
  assert_int_equal(rp_random_bytes(a, sizeof a), 0);
  assert_int_equal(rp_random_bytes(b, sizeof b), 0);
  assert_memory_not_equal(a, b, sizeof a);
  assert_int_equal(rp_random_bytes(a, 0), 0);
}

/* ---- session keys and per-frame tags (frame_auth.h) ---- */


static void test_session_keys_known_answer(void **state)
{
  (void)state;
  struct rp_key k = make_key("0123456789abcdef");
  uint8_t cn[RP_NONCE_LEN], sn[RP_NONCE_LEN];
  memset(cn, 1, sizeof cn);
  memset(sn, 0, sizeof sn);
  struct rp_session_keys keys;
  rp_session_keys_derive(&k, cn, sn, &keys);
  char hex[2 * RP_SESSION_KEY_LEN + 1];
  hexof(keys.client_to_server, RP_SESSION_KEY_LEN, hex);
  assert_string_equal(hex, KNOWN_C2S_KEY);

  struct rp_frame_auth fa = { 0 };
  assert_int_equal(rp_frame_auth_init(&fa, keys.client_to_server), 0);
  uint8_t hdr[RP_HEADER_SIZE], payload[100], tag[RP_TAG_LEN];
  for (unsigned i = 0; i < RP_HEADER_SIZE; i++)
    hdr[i] = (uint8_t)i;
  memset(payload, 0x5a, sizeof payload);
  fa.seq = 5;
  assert_int_equal(rp_frame_tag(&fa, hdr, payload, sizeof payload, tag), 0);
  assert_int_equal(fa.seq, 6);
  char thex[2 * RP_TAG_LEN + 1];
  hexof(tag, RP_TAG_LEN, thex);
  assert_string_equal(thex, KNOWN_TAG);
  rp_frame_auth_free(&fa);
  rp_session_keys_wipe(&keys);
}

static void test_session_keys_differ_by_direction_and_connection(void **state)
{
  (void)state;
  struct rp_key k = make_key("0123456789abcdef0123456789abcdef");
  uint8_t cn[RP_NONCE_LEN], sn[RP_NONCE_LEN];
  nonces(cn, sn);
  struct rp_session_keys a, b;
  rp_session_keys_derive(&k, cn, sn, &a);
  assert_memory_not_equal(a.client_to_server, a.server_to_client, RP_SESSION_KEY_LEN);
  rp_session_keys_derive(&k, cn, sn, &b);
  assert_memory_equal(&a, &b, sizeof a);
  /* another connection (either nonce fresh) or another key: other keys */
  cn[0] ^= 1;
  rp_session_keys_derive(&k, cn, sn, &b);
  assert_memory_not_equal(a.client_to_server, b.client_to_server, RP_SESSION_KEY_LEN);
  assert_memory_not_equal(a.server_to_client, b.server_to_client, RP_SESSION_KEY_LEN);
  cn[0] ^= 1;
  sn[31] ^= 0x80;
  rp_session_keys_derive(&k, cn, sn, &b);
  assert_memory_not_equal(a.client_to_server, b.client_to_server, RP_SESSION_KEY_LEN);
  sn[31] ^= 0x80;
  struct rp_key k2 = make_key("0123456789abcdef0123456789abcdeF");
  rp_session_keys_derive(&k2, cn, sn, &b);
  assert_memory_not_equal(a.client_to_server, b.client_to_server, RP_SESSION_KEY_LEN);
  /* the session keys are not the handshake MACs */
  uint8_t m[RP_MAC_LEN];
  rp_auth_client_mac(&k, sn, cn, m);
  assert_memory_not_equal(m, a.client_to_server, RP_MAC_LEN);
  rp_auth_server_mac(&k, cn, sn, m);
  assert_memory_not_equal(m, a.server_to_client, RP_MAC_LEN);
}

/* A sender and a receiver of one direction, both at sequence number 0. */
struct tag_pair {
  struct rp_session_keys keys;
  struct rp_frame_auth tx, rx;
};

static void pair_init(struct tag_pair *p)
{
  struct rp_key k = make_key("0123456789abcdef0123456789abcdef");
  uint8_t cn[RP_NONCE_LEN], sn[RP_NONCE_LEN];
  nonces(cn, sn);
  memset(p, 0, sizeof *p);
  rp_session_keys_derive(&k, cn, sn, &p->keys);
  assert_int_equal(rp_frame_auth_init(&p->tx, p->keys.client_to_server), 0);
  assert_int_equal(rp_frame_auth_init(&p->rx, p->keys.client_to_server), 0);
}

static void pair_free(struct tag_pair *p)
{
  rp_frame_auth_free(&p->tx);
  rp_frame_auth_free(&p->rx);
}

static void make_frame(uint8_t hdr[RP_HEADER_SIZE], uint8_t page[RP_PAGE_SIZE], uint64_t slot)
{
  struct rp_header h;
  memset(&h, 0, sizeof h);
  h.magic = RP_FRAME_MAGIC;
  h.op = RP_OP_WRITE;
  h.length = RP_PAGE_SIZE;
  h.id = 7 + slot;
  h.slot = slot;
  rp_header_encode(&h, hdr);
  for (unsigned i = 0; i < RP_PAGE_SIZE; i++)
    page[i] = (uint8_t)(i * 31 + slot);
}

static void test_tag_round_trip_in_sequence(void **state)
{
  (void)state;
  struct tag_pair p;
  pair_init(&p);
  uint8_t hdr[RP_HEADER_SIZE], page[RP_PAGE_SIZE], tag[RP_TAG_LEN];
  for (uint64_t i = 0; i < 100; i++) {
    make_frame(hdr, page, i);
    size_t len = i % 3 == 0 ? 0 : RP_PAGE_SIZE; /* header-only frames too */
    assert_int_equal(rp_frame_tag(&p.tx, hdr, len ? page : NULL, len, tag), 0);
    assert_true(rp_frame_verify(&p.rx, hdr, len ? page : NULL, len, tag));
  }
  assert_int_equal(p.tx.seq, 100);
  assert_int_equal(p.rx.seq, 100);
  pair_free(&p);
}

/* Every single flipped bit of the header, of the tag, and bits all over the page. */
static void test_tag_flipped_bit_fails(void **state)
{
  (void)state;
  uint8_t hdr[RP_HEADER_SIZE], page[RP_PAGE_SIZE], tag[RP_TAG_LEN];
  make_frame(hdr, page, 3);
  struct tag_pair p;
  pair_init(&p);
  assert_int_equal(rp_frame_tag(&p.tx, hdr, page, RP_PAGE_SIZE, tag), 0);
  pair_free(&p);
  unsigned failed = 0, tried = 0;
  for (unsigned part = 0; part < 3; part++) {
    size_t bits = part == 0   ? RP_HEADER_SIZE * 8
                  : part == 1 ? RP_PAGE_SIZE * 8
                              : RP_TAG_LEN * 8;
    size_t step = part == 1 ? 61 : 1; /* a prime stride over the page's 32768 bits */
    for (size_t bit = 0; bit < bits; bit += step) {
      uint8_t *b = part == 0 ? hdr : part == 1 ? page : tag;
      b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
      pair_init(&p);
      tried++;
      failed += !rp_frame_verify(&p.rx, hdr, page, RP_PAGE_SIZE, tag);
      pair_free(&p);
      b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
  }
  assert_int_equal(failed, tried);
  /* and unflipped it passes */
  pair_init(&p);
  assert_true(rp_frame_verify(&p.rx, hdr, page, RP_PAGE_SIZE, tag));
  pair_free(&p);
}

static void test_tag_truncated_or_extended_fails(void **state)
{
  (void)state;
  uint8_t hdr[RP_HEADER_SIZE], page[RP_PAGE_SIZE], tag[RP_TAG_LEN];
  make_frame(hdr, page, 1);
  struct tag_pair p;
  pair_init(&p);
  assert_int_equal(rp_frame_tag(&p.tx, hdr, page, 100, tag), 0);
  assert_false(rp_frame_verify(&p.rx, hdr, page, 99, tag));
  pair_free(&p);
  pair_init(&p);
  assert_false(rp_frame_verify(&p.rx, hdr, page, 101, tag));
  pair_free(&p);
  pair_init(&p);
  assert_false(rp_frame_verify(&p.rx, hdr, NULL, 0, tag));
  pair_free(&p);
}

/* A recorded frame sent again later (or frames swapped) fails: the sequence number is
 * part of the nonce. */
static void test_tag_replayed_or_reordered_fails(void **state)
{
  (void)state;
  struct tag_pair p;
  pair_init(&p);
  uint8_t h0[RP_HEADER_SIZE], p0[RP_PAGE_SIZE], t0[RP_TAG_LEN];
  uint8_t h1[RP_HEADER_SIZE], p1[RP_PAGE_SIZE], t1[RP_TAG_LEN];
  make_frame(h0, p0, 0);
  make_frame(h1, p1, 1);
  assert_int_equal(rp_frame_tag(&p.tx, h0, p0, RP_PAGE_SIZE, t0), 0);
  assert_int_equal(rp_frame_tag(&p.tx, h1, p1, RP_PAGE_SIZE, t1), 0);
  /* reordered: frame 1 arrives first */
  assert_false(rp_frame_verify(&p.rx, h1, p1, RP_PAGE_SIZE, t1));
  pair_free(&p);

  pair_init(&p);
  assert_int_equal(rp_frame_tag(&p.tx, h0, p0, RP_PAGE_SIZE, t0), 0);
  assert_true(rp_frame_verify(&p.rx, h0, p0, RP_PAGE_SIZE, t0));
  /* replayed at sequence number 1, 2, ... 50 */
  for (int i = 0; i < 50; i++)
    assert_false(rp_frame_verify(&p.rx, h0, p0, RP_PAGE_SIZE, t0));
  pair_free(&p);
}

/* A frame one direction sent cannot be reflected back in the other, and a frame of one
 * connection is not valid on another. */
static void test_tag_bound_to_direction_and_connection(void **state)
{
  (void)state;
  struct tag_pair p;
  pair_init(&p);
  uint8_t hdr[RP_HEADER_SIZE], page[RP_PAGE_SIZE], tag[RP_TAG_LEN];
  make_frame(hdr, page, 2);
  assert_int_equal(rp_frame_tag(&p.tx, hdr, page, RP_PAGE_SIZE, tag), 0);
  struct rp_frame_auth other = { 0 };
  assert_int_equal(rp_frame_auth_init(&other, p.keys.server_to_client), 0);
  assert_false(rp_frame_verify(&other, hdr, page, RP_PAGE_SIZE, tag));
  rp_frame_auth_free(&other);

  struct rp_key k = make_key("0123456789abcdef0123456789abcdef");
  uint8_t cn[RP_NONCE_LEN], sn[RP_NONCE_LEN];
  nonces(cn, sn);
  sn[5] ^= 4; /* the server's next connection */
  struct rp_session_keys next;
  rp_session_keys_derive(&k, cn, sn, &next);
  assert_int_equal(rp_frame_auth_init(&other, next.client_to_server), 0);
  assert_false(rp_frame_verify(&other, hdr, page, RP_PAGE_SIZE, tag));
  rp_frame_auth_free(&other);
  pair_free(&p);
}

/* A frame in one buffer (one AAD pass) and the same frame in two: the same tag. */
static void test_tag_same_contiguous_or_split(void **state)
{
  (void)state;
  static uint8_t one[RP_HEADER_SIZE + RP_PAGE_SIZE];
  uint8_t hdr[RP_HEADER_SIZE], page[RP_PAGE_SIZE], t1[RP_TAG_LEN], t2[RP_TAG_LEN];
  make_frame(hdr, page, 9);
  memcpy(one, hdr, RP_HEADER_SIZE);
  memcpy(one + RP_HEADER_SIZE, page, RP_PAGE_SIZE);
  for (size_t len = 0; len <= RP_PAGE_SIZE; len += RP_PAGE_SIZE / 4 + 1) {
    struct tag_pair p;
    pair_init(&p);
    assert_int_equal(rp_frame_tag(&p.tx, one, one + RP_HEADER_SIZE, len, t1), 0);
    assert_true(rp_frame_verify(&p.rx, hdr, page, len, t1));
    pair_free(&p);
    pair_init(&p);
    assert_int_equal(rp_frame_tag(&p.tx, hdr, page, len, t2), 0);
    assert_memory_equal(t1, t2, RP_TAG_LEN);
    assert_true(rp_frame_verify(&p.rx, one, one + RP_HEADER_SIZE, len, t2));
    pair_free(&p);
  }
}

/* A context made ahead (rp_frame_auth_prepare), or kept from an earlier connection and
 * keyed again (rp_frame_auth_forget, then init), tags exactly as a fresh one; a
 * forgotten one tags nothing. */
static void test_tag_reused_context_matches_fresh(void **state)
{
  (void)state;
  uint8_t k1[RP_SESSION_KEY_LEN], k2[RP_SESSION_KEY_LEN], hdr[RP_HEADER_SIZE] = { 1, 2, 3 };
  uint8_t page[4096], fresh_tag[RP_TAG_LEN], reused_tag[RP_TAG_LEN];
  memset(k1, 0x11, sizeof k1);
  memset(k2, 0x22, sizeof k2);
  memset(page, 0x5a, sizeof page);
  struct rp_frame_auth fresh = { 0 }, reused = { 0 };
  assert_int_equal(rp_frame_auth_prepare(&reused), 0);
  assert_false(rp_frame_auth_active(&reused));
  assert_int_equal(rp_frame_auth_init(&reused, k1), 0);
  assert_int_equal(rp_frame_auth_init(&fresh, k1), 0);
  assert_int_equal(rp_frame_tag(&fresh, hdr, page, sizeof page, fresh_tag), 0);
  assert_int_equal(rp_frame_tag(&reused, hdr, page, sizeof page, reused_tag), 0);
  assert_memory_equal(fresh_tag, reused_tag, RP_TAG_LEN);
  rp_frame_auth_forget(&reused);
  assert_false(rp_frame_auth_active(&reused));
  assert_int_equal(rp_frame_tag(&reused, hdr, page, sizeof page, reused_tag), -1);
  rp_frame_auth_free(&fresh);
  assert_int_equal(rp_frame_auth_init(&reused, k2), 0); /* sequence back at 0 */
  assert_int_equal(rp_frame_auth_init(&fresh, k2), 0);
  assert_int_equal(rp_frame_tag(&fresh, hdr, page, sizeof page, fresh_tag), 0);
  assert_int_equal(rp_frame_tag(&reused, hdr, page, sizeof page, reused_tag), 0);
  assert_memory_equal(fresh_tag, reused_tag, RP_TAG_LEN);
  rp_frame_auth_free(&fresh);
  rp_frame_auth_free(&reused);
}

static void test_tag_without_context_fails_closed(void **state)
{
  (void)state;
  struct rp_frame_auth none = { 0 };
  uint8_t hdr[RP_HEADER_SIZE] = { 0 }, tag[RP_TAG_LEN] = { 0 };
  assert_false(rp_frame_auth_active(&none));
  assert_int_equal(rp_frame_tag(&none, hdr, NULL, 0, tag), -1);
  assert_false(rp_frame_verify(&none, hdr, NULL, 0, tag));
  rp_frame_auth_free(&none); /* harmless */
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_client_and_server_macs_differ),
    cmocka_unit_test(test_mac_is_deterministic),
    cmocka_unit_test(test_mac_depends_on_both_nonces),
    cmocka_unit_test(test_mac_depends_on_key),
    cmocka_unit_test(test_known_answer),
    cmocka_unit_test(test_hmac_sha256_rfc4231),
    cmocka_unit_test(test_hmac_sha256_matches_libcrypto),
    cmocka_unit_test(test_mac_length_checked),
    cmocka_unit_test_setup_teardown(test_load_missing_file, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_load_too_short, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_load_too_long, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown(test_load_strips_trailing_newline, setup_dir,
                                    teardown_dir),
    cmocka_unit_test_setup_teardown(test_load_refuses_a_key_others_can_read, setup_dir,
                                    teardown_dir),
    cmocka_unit_test_setup_teardown(test_load_refuses_a_key_another_user_owns, setup_dir,
                                    teardown_dir),
    cmocka_unit_test_setup_teardown(test_load_refuses_what_is_not_a_file, setup_dir,
                                    teardown_dir),
    cmocka_unit_test_setup_teardown(test_keygen, setup_dir, teardown_dir),
    cmocka_unit_test(test_keygen_bad_directory),
    cmocka_unit_test(test_random_bytes),
    cmocka_unit_test(test_session_keys_known_answer),
    cmocka_unit_test(test_session_keys_differ_by_direction_and_connection),
    cmocka_unit_test(test_tag_round_trip_in_sequence),
    cmocka_unit_test(test_tag_flipped_bit_fails),
    cmocka_unit_test(test_tag_truncated_or_extended_fails),
    cmocka_unit_test(test_tag_replayed_or_reordered_fails),
    cmocka_unit_test(test_tag_bound_to_direction_and_connection),
    cmocka_unit_test(test_tag_same_contiguous_or_split),
    cmocka_unit_test(test_tag_without_context_fails_closed),
    cmocka_unit_test(test_tag_reused_context_matches_fresh),
  };
  return cmocka_run_group_tests_name("auth", tests, NULL, NULL);
}
