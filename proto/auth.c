/* Cluster key handling and the HMAC challenge-response (see auth.h). OpenSSL's
 * libcrypto provides SHA-256 and the constant-time compare; the HMAC construction on
 * top of it is hmac_sha256.c's, because libcrypto's allocates (and a reconnect inside a
 * memory shortage must not). */
#include "auth.h"
#include "hmac_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static const char CLIENT_LABEL[] = "rampart-v2 client";
static const char SERVER_LABEL[] = "rampart-v2 server";

static const char *file_kind(mode_t mode)
{
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode))
    return "a device";
  return "not a regular file";
}

/* A key is a secret only while nobody else can read or replace it: the same rule ssh
 * applies to private keys. Checked on the open descriptor, so a rename between the
 * check and the read cannot swap the file. */
static int check_key_file(int fd, const char *path, char *err, size_t errlen)
{
  struct stat st;
  if (fstat(fd, &st) < 0) {
    snprintf(err, errlen, "cannot stat key file %s: %s", path, strerror(errno));
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen,
             "key file %s is %s; a key is a plain file (make one with "
             "'rampartctl keygen FILE')",
             path, file_kind(st.st_mode));
    return -1;
  }
  uid_t me = geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    snprintf(err, errlen,
             "key file %s is owned by uid %u, neither this user (uid %u) nor "
             "root, so its owner could replace the key: 'chown %u %s' or make a new one "
             "with 'rampartctl keygen FILE'",
             path, (unsigned)st.st_uid, (unsigned)me, (unsigned)me, path);
    return -1;
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    snprintf(err, errlen,
             "key file %s has mode %04o: its group or other users can read "
             "or change the cluster key; run 'chmod 600 %s'",
             path, (unsigned)(st.st_mode & 07777), path);
    return -1;
  }
  return 0;
}

int rp_key_load(const char *path, struct rp_key *key, char *err, size_t errlen)
{
  memset(key, 0, sizeof *key);
  /* O_NONBLOCK: a FIFO put where the key should be must be refused, not waited on. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    snprintf(err, errlen,
             "cannot open key file %s: %s (create one with "
             "'rampartctl keygen %s')",
             path, strerror(errno), path);
    return -1;
  }
  if (check_key_file(fd, path, err, errlen) < 0) {
    close(fd);
    return -1;
  }
  /* Room for the longest key, a CR LF after it, and one byte more to tell a longer
   * file: the length limit applies after trailing whitespace is stripped. */
  uint8_t buf[RP_KEY_MAX_LEN + 3];
  size_t got = 0;
  for (;;) {
    ssize_t n = read(fd, buf + got, sizeof buf - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      snprintf(err, errlen, "cannot read key file %s: %s", path, strerror(errno));
      close(fd);
      OPENSSL_cleanse(buf, sizeof buf);
      return -1;
    }
    if (n == 0 || (got += (size_t)n) == sizeof buf)
      break;
  }
  close(fd);
  bool filled = got == sizeof buf;
  while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r' || buf[got - 1] == ' ' ||
                     buf[got - 1] == '\t'))
    got--;
  if (filled || got > RP_KEY_MAX_LEN) {
    snprintf(err, errlen, "key file %s is longer than %u bytes: is it really a key?", path,
             RP_KEY_MAX_LEN);
    OPENSSL_cleanse(buf, sizeof buf);
    return -1;
  }
  if (got < RP_KEY_MIN_LEN) {
    snprintf(err, errlen,
             "key file %s holds %zu bytes; a cluster key needs at least %u "
             "(make one with 'rampartctl keygen FILE')",
             path, got, RP_KEY_MIN_LEN);
    OPENSSL_cleanse(buf, sizeof buf);
    return -1;
  }
  memcpy(key->bytes, buf, got);
  key->len = got;
  OPENSSL_cleanse(buf, sizeof buf);
  return 0;
}

int rp_random_bytes(uint8_t *buf, size_t n)
{
  while (n > 0) {
    ssize_t r = getrandom(buf, n, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    buf += r;
    n -= (size_t)r;
  }
  return 0;
}

int rp_key_generate(const char *path, char *err, size_t errlen)
{
  uint8_t raw[32];
  if (rp_random_bytes(raw, sizeof raw) < 0) {
    snprintf(err, errlen, "getrandom failed: %s", strerror(errno));
    return -1;
  }
  char hex[sizeof raw * 2 + 2];
  for (size_t i = 0; i < sizeof raw; i++)
    snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  hex[sizeof raw * 2] = '\n';
  hex[sizeof raw * 2 + 1] = '\0';
  OPENSSL_cleanse(raw, sizeof raw);

  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create key file %s: %s%s", path, strerror(errno),
             errno == EEXIST ? " (remove it first if you mean to replace the key)" : "");
    return -1;
  }
  size_t len = strlen(hex);
  ssize_t w = write(fd, hex, len);
  int saved = errno;
  if (close(fd) < 0 && w == (ssize_t)len) {
    w = -1;
    saved = errno;
  }
  OPENSSL_cleanse(hex, sizeof hex);
  if (w != (ssize_t)len) {
    snprintf(err, errlen, "cannot write key file %s: %s", path, strerror(saved));
    unlink(path);
    return -1;
  }
  return 0;
}

static void labelled_mac(const struct rp_key *key, const char *label, const uint8_t *first,
                         const uint8_t *second, uint8_t mac[RP_MAC_LEN])
{
  _Static_assert(RP_MAC_LEN == RP_HMAC_SHA256_LEN, "the MAC is HMAC-SHA256");
  const uint8_t *parts[] = { (const uint8_t *)label, first, second };
  const size_t lens[] = { strlen(label), RP_NONCE_LEN, RP_NONCE_LEN };
  rp_hmac_sha256(key->bytes, key->len, parts, lens, 3, mac);
}

void rp_auth_client_mac(const struct rp_key *key, const uint8_t server_nonce[RP_NONCE_LEN],
                        const uint8_t client_nonce[RP_NONCE_LEN], uint8_t mac[RP_MAC_LEN])
{
  labelled_mac(key, CLIENT_LABEL, server_nonce, client_nonce, mac);
}

void rp_auth_server_mac(const struct rp_key *key, const uint8_t client_nonce[RP_NONCE_LEN],
                        const uint8_t server_nonce[RP_NONCE_LEN], uint8_t mac[RP_MAC_LEN])
{
  labelled_mac(key, SERVER_LABEL, client_nonce, server_nonce, mac);
}

bool rp_mac_matches(const uint8_t expected[RP_MAC_LEN], const uint8_t *got, size_t len)
{
  if (len != RP_MAC_LEN || got == NULL)
    return false;
  return CRYPTO_memcmp(expected, got, RP_MAC_LEN) == 0;
}
