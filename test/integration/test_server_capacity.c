/* rampartd's --memory is a hard cap: a reservation past it is refused with the numbers
 * in the message, and sessions together never exceed it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "client.h"
#include "page_io.h"
#include "server_process.h"

#define CAPACITY 1024u /* --memory 4M */

struct fixture {
  char dir[256];
  struct rp_test_server server;
};

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0)
    return -1;
  const char *args[] = { "--memory", "4M", NULL };
  if (rp_test_server_start(&f.server, f.dir, args) < 0)
    return -1;
  *state = &f;
  return 0;
}

static int teardown(void **state)
{
  struct fixture *f = *state;
  if (!f)
    return 0;
  int status = rp_test_server_stop(&f->server);
  rp_test_tmpdir_remove(f->dir);
  return status == 0 ? 0 : -1;
}

static struct rp_conn *open_conn(struct fixture *f, struct rp_session_info *info)
{
  struct rp_error err;
  struct rp_conn *c = rp_test_connect(&f->server, NULL, NULL, info, &err);
  if (!c)
    fail_msg("connect: %s", err.message);
  return c;
}

static void test_reserve_past_memory_refused(void **state)
{
  struct fixture *f = *state;
  struct rp_session_info info;
  struct rp_conn *c = open_conn(f, &info);
  assert_int_equal(info.capacity_pages, CAPACITY);
  assert_int_equal(info.free_pages, CAPACITY);
  struct rp_error err;
  assert_int_equal(rp_reserve_sync(c, 2000, NULL, NULL, &err), -1);
  assert_int_equal(err.code, RP_ERR_NO_SPACE);
  fprintf(stderr, "reserve 2000 of 1024: %s\n", err.message);
  assert_non_null(strstr(err.message, "2000")); /* what was asked */
  assert_non_null(strstr(err.message, "1024")); /* what there is */
  /* Exactly the capacity is fine, and then everything is usable. */
  uint64_t reserved = 0, free_pages = 99;
  assert_int_equal(rp_reserve_sync(c, CAPACITY, &reserved, &free_pages, &err), 0);
  assert_int_equal(reserved, CAPACITY);
  assert_int_equal(free_pages, 0);
  struct rp_test_io_result res;
  assert_int_equal(rp_test_pages(c, RP_OP_WRITE, 0, CAPACITY, 32, 1, &res), 0);
  assert_int_equal(rp_test_pages(c, RP_OP_READ, 0, CAPACITY, 32, 1, &res), 0);
  assert_int_equal(rp_reserve_sync(c, CAPACITY + 1, NULL, NULL, &err), -1);
  assert_int_equal(err.code, RP_ERR_NO_SPACE);
  /* The refusal kept the old reservation and its pages. */
  assert_int_equal(rp_test_pages(c, RP_OP_READ, 0, CAPACITY, 32, 1, &res), 0);
  assert_int_equal(rp_goodbye_sync(c, &err), 0);
  rp_conn_close(c);
}

static void test_two_sessions_share_the_cap(void **state)
{
  struct fixture *f = *state;
  struct rp_conn *a = open_conn(f, NULL);
  struct rp_conn *b = open_conn(f, NULL);
  struct rp_error err;
  uint64_t free_pages = 0;
  assert_int_equal(rp_reserve_sync(a, 600, NULL, &free_pages, &err), 0);
  assert_int_equal(free_pages, CAPACITY - 600);
  assert_int_equal(rp_reserve_sync(b, 600, NULL, NULL, &err), -1);
  assert_int_equal(err.code, RP_ERR_NO_SPACE);
  assert_non_null(strstr(err.message, "600"));
  assert_int_equal(rp_reserve_sync(b, CAPACITY - 600, NULL, &free_pages, &err), 0);
  assert_int_equal(free_pages, 0);
  assert_int_equal(rp_reserve_sync(a, 601, NULL, NULL, &err), -1);
  assert_int_equal(err.code, RP_ERR_NO_SPACE);

  struct rp_server_stat st;
  assert_int_equal(rp_stat_sync(a, &st, &err), 0);
  assert_int_equal(st.reserved_pages, CAPACITY);
  assert_int_equal(st.capacity_pages, CAPACITY);
  assert_true(st.errors_refused >= 2);

  /* Shrinking gives capacity back to the other session. */
  assert_int_equal(rp_reserve_sync(a, 100, NULL, NULL, &err), 0);
  assert_int_equal(rp_reserve_sync(b, CAPACITY - 100, NULL, &free_pages, &err), 0);
  assert_int_equal(free_pages, 0);
  /* And a goodbye gives all of a session's capacity back at once. */
  assert_int_equal(rp_goodbye_sync(a, &err), 0);
  rp_conn_close(a);
  struct rp_conn *c = open_conn(f, NULL);
  assert_int_equal(rp_reserve_sync(c, 100, NULL, &free_pages, &err), 0);
  assert_int_equal(free_pages, 0);
  assert_int_equal(rp_goodbye_sync(c, &err), 0);
  assert_int_equal(rp_goodbye_sync(b, &err), 0);
  rp_conn_close(c);
  rp_conn_close(b);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_reserve_past_memory_refused),
    cmocka_unit_test(test_two_sessions_share_the_cap),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
