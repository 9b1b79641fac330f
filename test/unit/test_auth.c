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

#include "auth.h"

#define KNOWN_CLIENT_MAC "582afd9c32c8b989a070e8846535dcccb2cffb574461fb278de19de9dd195588"

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
  /* HMAC-SHA256(key="0123456789abcdef", "rampart-v1 client" || 32x00 || 32x01),
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

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_client_and_server_macs_differ),
    cmocka_unit_test(test_mac_is_deterministic),
    cmocka_unit_test(test_mac_depends_on_both_nonces),
    cmocka_unit_test(test_mac_depends_on_key),
    cmocka_unit_test(test_known_answer),
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
  };
  return cmocka_run_group_tests_name("auth", tests, NULL, NULL);
}
