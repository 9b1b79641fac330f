/* Authentication against real rampartd processes: the right key gets in, a wrong key
 * or no key is refused with a sentence that says so, a client holding a key refuses a
 * keyless server, and rampartd will not listen beyond loopback without a key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <sys/wait.h>

#include "client.h"
#include "server_process.h"

struct fixture {
  char dir[256];
  char key_path[512], other_path[512];
  struct rp_key key, other;
  struct rp_test_server keyed, keyless;
};

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0)
    return -1;
  if (rp_test_write_key(f.dir, "cluster.key", f.key_path, sizeof f.key_path, &f.key) < 0 ||
      rp_test_write_key(f.dir, "other.key", f.other_path, sizeof f.other_path, &f.other) < 0)
    return -1;
  const char *keyed_args[] = { "--memory", "16M", "--key", f.key_path, NULL };
  const char *keyless_args[] = { "--memory", "16M", NULL };
  if (rp_test_server_start(&f.keyed, f.dir, keyed_args) < 0 ||
      rp_test_server_start(&f.keyless, f.dir, keyless_args) < 0)
    return -1;
  *state = &f;
  return 0;
}

static int teardown(void **state)
{
  struct fixture *f = *state;
  if (!f)
    return 0;
  int a = rp_test_server_stop(&f->keyed);
  int b = rp_test_server_stop(&f->keyless);
  rp_test_tmpdir_remove(f->dir);
  return a == 0 && b == 0 ? 0 : -1;
}

static void test_right_key_works(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  struct rp_conn *c = rp_test_connect(&f->keyed, &f->key, NULL, NULL, &err);
  if (!c)
    fail_msg("connect with the right key: %s", err.message);
  assert_int_equal(rp_reserve_sync(c, 4, NULL, NULL, &err), 0);
  uint8_t page[RP_PAGE_SIZE], back[RP_PAGE_SIZE];
  rp_test_fill_page(page, 9, 3);
  assert_int_equal(rp_write_sync(c, 3, page, &err), 0);
  assert_int_equal(rp_read_sync(c, 3, back, &err), 0);
  assert_memory_equal(page, back, RP_PAGE_SIZE);
  assert_int_equal(rp_goodbye_sync(c, &err), 0);
  rp_conn_close(c);
}

static void test_wrong_key_refused(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  struct rp_server_stat before, after;
  struct rp_conn *admin = rp_test_connect(&f->keyed, &f->key, NULL, NULL, &err);
  assert_non_null(admin);
  assert_int_equal(rp_stat_sync(admin, &before, &err), 0);

  memset(&err, 0, sizeof err);
  struct rp_conn *c = rp_test_connect(&f->keyed, &f->other, NULL, NULL, &err);
  assert_null(c);
  assert_int_equal(err.code, RP_ERR_AUTH);
  fprintf(stderr, "wrong key: %s\n", err.message);
  assert_non_null(strcasestr(err.message, "key"));
  assert_non_null(strstr(err.message, f->keyed.port));

  /* The server proves the key first, so it is the client that refuses: the server counts
   * the failure when it sees the client hang up after its challenge, which may be just
   * after this STAT arrives. */
  for (int i = 0; i < 100; i++) {
    assert_int_equal(rp_stat_sync(admin, &after, &err), 0);
    if (after.errors_auth > before.errors_auth)
      break;
    usleep(20000);
  }
  assert_true(after.errors_auth > before.errors_auth);
  rp_conn_close(admin);
}

static void test_no_key_refused_by_keyed_server(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  memset(&err, 0, sizeof err);
  struct rp_conn *c = rp_test_connect(&f->keyed, NULL, NULL, NULL, &err);
  assert_null(c);
  assert_int_equal(err.code, RP_ERR_AUTH);
  assert_non_null(strcasestr(err.message, "key"));
}

static void test_keyless_server_refused_by_keyed_client(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  memset(&err, 0, sizeof err);
  struct rp_conn *c = rp_test_connect(&f->keyless, &f->key, NULL, NULL, &err);
  assert_null(c);
  assert_int_equal(err.code, RP_ERR_AUTH);
  fprintf(stderr, "keyless server: %s\n", err.message);
  assert_non_null(strcasestr(err.message, "key"));
  /* Without a key on either side, the loopback server is fine. */
  c = rp_test_connect(&f->keyless, NULL, NULL, NULL, &err);
  if (!c)
    fail_msg("keyless connect: %s", err.message);
  assert_int_equal(rp_ping_sync(c, &err), 0);
  rp_conn_close(c);
}

static void test_public_listen_needs_key(void **state)
{
  char out[8192];
  const char *args[] = { "--listen", "0.0.0.0:0", "--foreground", "--memory", "16M", NULL };
  int status = rp_test_run_rampartd(args, out, sizeof out, 5000);
  fprintf(stderr, "rampartd on 0.0.0.0 without a key said: %s\n", out);
  assert_true(status != -1); /* it exited by itself rather than starting to serve */
  assert_true(WIFEXITED(status));
  assert_int_not_equal(WEXITSTATUS(status), 0);
  assert_non_null(strstr(out, "key"));
  assert_null(strstr(out, "listening on"));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_right_key_works),
    cmocka_unit_test(test_wrong_key_refused),
    cmocka_unit_test(test_no_key_refused_by_keyed_server),
    cmocka_unit_test(test_keyless_server_refused_by_keyed_client),
    cmocka_unit_test(test_public_listen_needs_key),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
