/* A dropped connection is not a lost session: within the lease a client resumes with
 * its token and finds its pages; past the lease the session and its pages are gone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "page_io.h"
#include "server_process.h"

struct fixture {
  char dir[256];
};

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0)
    return -1;
  *state = &f;
  return 0;
}

static int teardown(void **state)
{
  struct fixture *f = *state;
  if (f)
    rp_test_tmpdir_remove(f->dir);
  return 0;
}

static struct rp_conn *open_conn(struct rp_test_server *s, const uint8_t *token,
                                 struct rp_session_info *info)
{
  struct rp_error err;
  struct rp_conn *c = rp_test_connect(s, NULL, token, info, &err);
  if (!c)
    fail_msg("connect: %s", err.message);
  return c;
}

static void test_resume_within_lease(void **state)
{
  struct fixture *f = *state;
  struct rp_test_server s;
  const char *args[] = { "--memory", "16M", "--lease", "60", NULL };
  assert_int_equal(rp_test_server_start(&s, f->dir, args), 0);

  struct rp_session_info info;
  struct rp_conn *c = open_conn(&s, NULL, &info);
  assert_false(info.resumed);
  assert_int_equal(info.lease_seconds, 60);
  uint8_t token[RP_TOKEN_LEN];
  memcpy(token, info.token, sizeof token);
  struct rp_error err;
  struct rp_test_io_result res;
  assert_int_equal(rp_reserve_sync(c, 500, NULL, NULL, &err), 0);
  assert_int_equal(rp_test_pages(c, RP_OP_WRITE, 0, 500, 32, 77, &res), 0);
  rp_conn_close(c); /* dropped: no GOODBYE */

  /* The server notices the drop and keeps the session detached. */
  struct rp_conn *watcher = open_conn(&s, NULL, NULL);
  struct rp_server_stat st;
  for (int i = 0; i < 200; i++) {
    assert_int_equal(rp_stat_sync(watcher, &st, &err), 0);
    if (st.sessions_detached == 1)
      break;
    struct timespec ts = { 0, 10 * 1000 * 1000 };
    nanosleep(&ts, NULL);
  }
  assert_int_equal(st.sessions_detached, 1);
  assert_int_equal(st.stored_pages, 500);

  c = open_conn(&s, token, &info);
  assert_true(info.resumed);
  assert_int_equal(info.reserved_pages, 500);
  assert_memory_equal(info.token, token, RP_TOKEN_LEN);
  assert_int_equal(rp_test_pages(c, RP_OP_READ, 0, 500, 32, 77, &res), 0);
  assert_int_equal(res.mismatched, 0);

  /* GOODBYE ends it at once: the token no longer resumes anything. */
  assert_int_equal(rp_goodbye_sync(c, &err), 0);
  rp_conn_close(c);
  c = open_conn(&s, token, &info);
  assert_false(info.resumed);
  rp_conn_close(c);
  rp_conn_close(watcher);
  assert_int_equal(rp_test_server_stop(&s), 0);
}

static void test_lease_expires(void **state)
{
  struct fixture *f = *state;
  struct rp_test_server s;
  const char *args[] = { "--memory", "16M", "--lease", "2", NULL };
  assert_int_equal(rp_test_server_start(&s, f->dir, args), 0);

  struct rp_session_info info;
  struct rp_conn *c = open_conn(&s, NULL, &info);
  assert_int_equal(info.lease_seconds, 2);
  uint8_t token[RP_TOKEN_LEN];
  memcpy(token, info.token, sizeof token);
  struct rp_error err;
  struct rp_test_io_result res;
  assert_int_equal(rp_reserve_sync(c, 100, NULL, NULL, &err), 0);
  assert_int_equal(rp_test_pages(c, RP_OP_WRITE, 0, 100, 16, 5, &res), 0);
  rp_conn_close(c);

  struct timespec ts = { 3, 500 * 1000 * 1000 };
  nanosleep(&ts, NULL);

  c = open_conn(&s, token, &info);
  assert_false(info.resumed);
  assert_int_equal(info.reserved_pages, 0);
  assert_memory_not_equal(info.token, token, RP_TOKEN_LEN);
  assert_int_equal(rp_reserve_sync(c, 100, NULL, NULL, &err), 0);
  uint8_t page[RP_PAGE_SIZE];
  assert_int_equal(rp_read_sync(c, 0, page, &err), -1);
  assert_int_equal(err.code, RP_ERR_NOT_FOUND);

  struct rp_server_stat st;
  assert_int_equal(rp_stat_sync(c, &st, &err), 0);
  assert_true(st.sessions_expired >= 1);
  assert_int_equal(st.sessions_detached, 0);
  assert_int_equal(st.stored_pages, 0);
  assert_int_equal(st.reserved_pages, 100);
  rp_conn_close(c);
  assert_int_equal(rp_test_server_stop(&s), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_resume_within_lease),
    cmocka_unit_test(test_lease_expires),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
