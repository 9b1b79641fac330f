/* rampartctl, run as a program against a real rampartd: keygen, stat (table and JSON),
 * bench, and its exit statuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "server_process.h"

struct fixture {
  char dir[256];
  char key_path[512];
  const char *ctl;
  struct rp_test_server plain, keyed;
};

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  f.ctl = getenv("RAMPARTCTL");
  if (!f.ctl || !*f.ctl) {
    fprintf(stderr, "RAMPARTCTL is not set: run through ctest\n");
    return -1;
  }
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0)
    return -1;
  if (rp_test_write_key(f.dir, "cluster.key", f.key_path, sizeof f.key_path, NULL) < 0)
    return -1;
  const char *plain_args[] = { "--memory", "64M", NULL };
  const char *keyed_args[] = { "--memory", "16M", "--key", f.key_path, NULL };
  if (rp_test_server_start(&f.plain, f.dir, plain_args) < 0 ||
      rp_test_server_start(&f.keyed, f.dir, keyed_args) < 0)
    return -1;
  *state = &f;
  return 0;
}

static int teardown(void **state)
{
  struct fixture *f = *state;
  if (!f)
    return 0;
  int a = rp_test_server_stop(&f->plain);
  int b = rp_test_server_stop(&f->keyed);
  rp_test_tmpdir_remove(f->dir);
  return a == 0 && b == 0 ? 0 : -1;
}

static char out[65536];

/* Runs rampartctl with up to 8 arguments; returns its exit code (asserts it exited). */
static int ctl(struct fixture *f, const char *a1, const char *a2, const char *a3,
               const char *a4, const char *a5, const char *a6, const char *a7)
{
  const char *argv[] = { f->ctl, a1, a2, a3, a4, a5, a6, a7, NULL };
  int status = rp_test_run_program(argv, out, sizeof out, 120000);
  fprintf(stderr, "$ rampartctl %s %s %s ...\n%s", a1 ? a1 : "", a2 ? a2 : "", a3 ? a3 : "",
          out);
  assert_true(status != -1);
  assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

static void test_help_and_usage_errors(void **state)
{
  struct fixture *f = *state;
  assert_int_equal(ctl(f, "--help", NULL, NULL, NULL, NULL, NULL, NULL), 0);
  assert_non_null(strstr(out, "bench HOST:PORT"));
  assert_int_equal(ctl(f, NULL, NULL, NULL, NULL, NULL, NULL, NULL), 2);
  assert_int_equal(ctl(f, "frobnicate", NULL, NULL, NULL, NULL, NULL, NULL), 2);
  assert_non_null(strstr(out, "unknown command"));
  assert_int_equal(ctl(f, "stat", NULL, NULL, NULL, NULL, NULL, NULL), 2);
  assert_int_equal(ctl(f, "stat", "no-port-here", NULL, NULL, NULL, NULL, NULL), 2);
  assert_int_equal(ctl(f, "bench", f->plain.addr, "--depth", "zero", NULL, NULL, NULL), 2);
  assert_int_equal(ctl(f, "bench", f->plain.addr, "--frob", NULL, NULL, NULL, NULL), 2);
  assert_int_equal(ctl(f, "keygen", NULL, NULL, NULL, NULL, NULL, NULL), 2);
}

static void test_keygen(void **state)
{
  struct fixture *f = *state;
  char path[600];
  snprintf(path, sizeof path, "%s/new.key", f->dir);
  assert_int_equal(ctl(f, "keygen", path, NULL, NULL, NULL, NULL, NULL), 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  struct rp_key key;
  char err[256];
  assert_int_equal(rp_key_load(path, &key, err, sizeof err), 0);
  assert_true(key.len >= RP_KEY_MIN_LEN);
  /* Never overwrites a key. */
  assert_int_equal(ctl(f, "keygen", path, NULL, NULL, NULL, NULL, NULL), 1);
}

/* The key file (docs/security.md): the key is 32 random bytes (written as 64 hex characters and a newline),
 * mode 0600 whatever the umask, never written through a symlink planted at the path,
 * and two keys differ. */
static void test_keygen_is_32_random_bytes_mode_0600(void **state)
{
  struct fixture *f = *state;
  char a[600], b[600], link[600];
  snprintf(a, sizeof a, "%s/a.key", f->dir);
  snprintf(b, sizeof b, "%s/b.key", f->dir);
  mode_t old = umask(0); /* the child inherits it: the mode must not depend on it */
  int ra = ctl(f, "keygen", a, NULL, NULL, NULL, NULL, NULL);
  int rb = ctl(f, "keygen", b, NULL, NULL, NULL, NULL, NULL);
  umask(old);
  assert_int_equal(ra, 0);
  assert_int_equal(rb, 0);
  uint8_t raw[2][32];
  const char *paths[] = { a, b };
  for (int k = 0; k < 2; k++) {
    struct stat st;
    assert_int_equal(stat(paths[k], &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_size, 65);
    FILE *fp = fopen(paths[k], "re");
    assert_non_null(fp);
    char text[80] = "";
    assert_non_null(fgets(text, sizeof text, fp));
    fclose(fp);
    assert_int_equal(strlen(text), 65);
    assert_int_equal(text[64], '\n');
    for (int i = 0; i < 32; i++) {
      unsigned v;
      assert_non_null(strchr("0123456789abcdef", text[2 * i]));
      assert_non_null(strchr("0123456789abcdef", text[2 * i + 1]));
      assert_int_equal(sscanf(text + 2 * i, "%2x", &v), 1);
      raw[k][i] = (uint8_t)v;
    }
  }
  assert_memory_not_equal(raw[0], raw[1], 32);
  /* A symlink at the path (say, to a file the attacker wants overwritten) is refused. */
  snprintf(link, sizeof link, "%s/planted.key", f->dir);
  char target[600];
  snprintf(target, sizeof target, "%s/victim", f->dir);
  assert_int_equal(symlink(target, link), 0);
  assert_int_equal(ctl(f, "keygen", link, NULL, NULL, NULL, NULL, NULL), 1);
  struct stat st;
  assert_int_equal(stat(target, &st), -1); /* nothing was created through the link */
}

static void test_stat_table_and_json(void **state)
{
  struct fixture *f = *state;
  assert_int_equal(ctl(f, "stat", f->plain.addr, NULL, NULL, NULL, NULL, NULL), 0);
  const char *rows[] = { "capacity",
                         "16384 pages (64.0 MiB)",
                         "reserved",
                         "stored",
                         "resident bytes",
                         "memory per stored page",
                         "clients connected",
                         "sessions detached",
                         "sessions expired",
                         "ops write",
                         "ops read",
                         "ops free",
                         "bytes in",
                         "bytes out",
                         "errors protocol",
                         "errors auth",
                         "errors refused",
                         "pressure",
                         "psi some avg10",
                         "memory available",
                         "advises sent",
                         "uptime",
                         NULL };
  for (int i = 0; rows[i]; i++)
    if (!strstr(out, rows[i]))
      fail_msg("stat output lacks '%s'", rows[i]);

  assert_int_equal(ctl(f, "stat", f->plain.addr, "--json", NULL, NULL, NULL, NULL), 0);
  assert_true(out[0] == '{');
  assert_non_null(strstr(out, "\"capacity_pages\": 16384"));
  assert_non_null(strstr(out, "\"errors_protocol\": "));
  assert_non_null(strstr(out, "\"pressure\": false"));

  /* The keyed server wants the key. */
  assert_int_equal(ctl(f, "stat", f->keyed.addr, "--key", f->key_path, NULL, NULL, NULL), 0);
  assert_non_null(strstr(out, "4096 pages (16.0 MiB)"));
  assert_int_equal(ctl(f, "stat", f->keyed.addr, NULL, NULL, NULL, NULL, NULL), 1);
  assert_non_null(strstr(out, "key"));
  /* Nobody there: a connection error, exit 1, and the sentence says so. */
  assert_int_equal(ctl(f, "stat", "127.0.0.1:1", NULL, NULL, NULL, NULL, NULL), 1);
  assert_non_null(strstr(out, "cannot connect"));
}

static void test_bench(void **state)
{
  struct fixture *f = *state;
  assert_int_equal(ctl(f, "bench", f->plain.addr, "--pages", "3000", "--depth", "16", NULL),
                   0);
  assert_non_null(strstr(out, "write:"));
  assert_non_null(strstr(out, "read:"));
  assert_non_null(strstr(out, "pages/s"));
  assert_non_null(strstr(out, "MiB/s"));
  assert_non_null(strstr(out, "3000 pages read back, 0 mismatched"));
  assert_non_null(strstr(out, "server memory per stored page"));
  /* bench cleans up after itself: nothing stays stored or reserved. */
  assert_int_equal(ctl(f, "stat", f->plain.addr, "--json", NULL, NULL, NULL, NULL), 0);
  assert_non_null(strstr(out, "\"stored_pages\": 0"));
  assert_non_null(strstr(out, "\"reserved_pages\": 0"));
  /* More than the server has: refused with the server's sentence, exit 1. */
  assert_int_equal(
    ctl(f, "bench", f->keyed.addr, "--key", f->key_path, "--pages", "100000", NULL), 1);
  assert_non_null(strstr(out, "100000"));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_help_and_usage_errors),
    cmocka_unit_test(test_keygen),
    cmocka_unit_test(test_keygen_is_32_random_bytes_mode_0600),
    cmocka_unit_test(test_stat_table_and_json),
    cmocka_unit_test(test_bench),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
