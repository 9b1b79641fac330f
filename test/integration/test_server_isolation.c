/* Two clients of one rampartd use the same slot numbers: each reads only its own
 * bytes, and one's frees and shrinks never touch the other's pages. */
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

#define PAGES 4000u

struct fixture {
  char dir[256];
  struct rp_test_server server;
  struct rp_conn *a, *b;
  struct rp_session_info ia, ib;
};

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0)
    return -1;
  const char *args[] = { "--memory", "64M", NULL };
  if (rp_test_server_start(&f.server, f.dir, args) < 0)
    return -1;
  struct rp_error err;
  f.a = rp_test_connect(&f.server, NULL, NULL, &f.ia, &err);
  f.b = rp_test_connect(&f.server, NULL, NULL, &f.ib, &err);
  if (!f.a || !f.b) {
    fprintf(stderr, "connect: %s\n", err.message);
    return -1;
  }
  if (rp_reserve_sync(f.a, PAGES, NULL, NULL, &err) < 0 ||
      rp_reserve_sync(f.b, PAGES, NULL, NULL, &err) < 0) {
    fprintf(stderr, "reserve: %s\n", err.message);
    return -1;
  }
  *state = &f;
  return 0;
}

static int teardown(void **state)
{
  struct fixture *f = *state;
  if (!f)
    return 0;
  rp_conn_close(f->a);
  rp_conn_close(f->b);
  int status = rp_test_server_stop(&f->server);
  rp_test_tmpdir_remove(f->dir);
  return status == 0 ? 0 : -1;
}

static void test_sessions_differ(void **state)
{
  struct fixture *f = *state;
  assert_memory_not_equal(f->ia.token, f->ib.token, RP_TOKEN_LEN);
}

static void test_same_slots_own_bytes(void **state)
{
  struct fixture *f = *state;
  struct rp_test_io_result res;
  /* Interleave the writers so the server sees both sessions at once. */
  assert_int_equal(rp_test_pages(f->a, RP_OP_WRITE, 0, PAGES / 2, 32, 100, &res), 0);
  assert_int_equal(rp_test_pages(f->b, RP_OP_WRITE, 0, PAGES / 2, 32, 200, &res), 0);
  assert_int_equal(rp_test_pages(f->a, RP_OP_WRITE, PAGES / 2, PAGES / 2, 32, 100, &res), 0);
  assert_int_equal(rp_test_pages(f->a, RP_OP_READ, 0, PAGES, 32, 100, &res), 0);
  assert_int_equal(res.mismatched, 0);
  assert_int_equal(rp_test_pages(f->b, RP_OP_READ, 0, PAGES / 2, 32, 200, &res), 0);
  assert_int_equal(res.mismatched, 0);
  /* b never wrote the upper half: a's pages there are not visible to it. */
  assert_int_equal(rp_test_pages(f->b, RP_OP_READ, PAGES / 2, PAGES / 2, 32, 100, &res), -1);
  assert_int_equal(res.status_count[RP_ERR_NOT_FOUND], PAGES / 2);

  struct rp_server_stat sa, sb;
  struct rp_error err;
  assert_int_equal(rp_stat_sync(f->a, &sa, &err), 0);
  assert_int_equal(rp_stat_sync(f->b, &sb, &err), 0);
  assert_int_equal(sa.session_stored_pages, PAGES);
  assert_int_equal(sb.session_stored_pages, PAGES / 2);
  assert_int_equal(sa.stored_pages, PAGES + PAGES / 2);
}

static void test_free_and_shrink_stay_in_session(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  struct rp_test_io_result res;
  assert_int_equal(rp_free_sync(f->b, 0, PAGES, &err), 0);
  assert_int_equal(rp_reserve_sync(f->b, 10, NULL, NULL, &err), 0);
  assert_int_equal(rp_test_pages(f->a, RP_OP_READ, 0, PAGES, 32, 100, &res), 0);
  uint8_t page[RP_PAGE_SIZE];
  assert_int_equal(rp_read_sync(f->b, 0, page, &err), -1);
  assert_int_equal(err.code, RP_ERR_NOT_FOUND);
  /* b's reservation shrank to 10: its slot 100 is out of range even though a has one. */
  assert_int_equal(rp_read_sync(f->b, 100, page, &err), -1);
  assert_int_equal(err.code, RP_ERR_OUT_OF_RANGE);
}

static void test_goodbye_frees_only_own_session(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  struct rp_test_io_result res;
  assert_int_equal(rp_test_pages(f->b, RP_OP_WRITE, 0, 10, 4, 300, &res), 0);
  assert_int_equal(rp_goodbye_sync(f->b, &err), 0);
  rp_conn_close(f->b);
  f->b = NULL;
  assert_int_equal(rp_test_pages(f->a, RP_OP_READ, 0, PAGES, 32, 100, &res), 0);
  struct rp_server_stat st;
  assert_int_equal(rp_stat_sync(f->a, &st, &err), 0);
  assert_int_equal(st.stored_pages, PAGES);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_sessions_differ),
    cmocka_unit_test(test_same_slots_own_bytes),
    cmocka_unit_test(test_free_and_shrink_stay_in_session),
    cmocka_unit_test(test_goodbye_frees_only_own_session),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
