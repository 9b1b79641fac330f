/* A real rampartd on loopback, driven through librampart: thousands of pages written
 * and read back with many requests in flight, overwrites, frees, range checks. */
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

#define PAGES 20000u
#define DEPTH 64u

struct fixture {
  char dir[256];
  struct rp_test_server server;
  struct rp_conn *conn;
};

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0)
    return -1;
  const char *args[] = { "--memory", "256M", NULL };
  if (rp_test_server_start(&f.server, f.dir, args) < 0)
    return -1;
  struct rp_error err;
  struct rp_session_info info;
  f.conn = rp_test_connect(&f.server, NULL, NULL, &info, &err);
  if (!f.conn) {
    fprintf(stderr, "connect: %s\n", err.message);
    return -1;
  }
  if (info.resumed || info.page_size != RP_PAGE_SIZE || info.capacity_pages != 65536) {
    fprintf(stderr, "unexpected welcome: resumed=%d page_size=%u capacity=%llu\n",
            info.resumed, info.page_size, (unsigned long long)info.capacity_pages);
    return -1;
  }
  uint64_t reserved = 0, free_pages = 0;
  if (rp_reserve_sync(f.conn, PAGES, &reserved, &free_pages, &err) < 0) {
    fprintf(stderr, "reserve: %s\n", err.message);
    return -1;
  }
  if (reserved != PAGES || free_pages != 65536 - PAGES) {
    fprintf(stderr, "reserve reply: reserved=%llu free=%llu\n", (unsigned long long)reserved,
            (unsigned long long)free_pages);
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
  struct rp_error err;
  if (f->conn) {
    rp_goodbye_sync(f->conn, &err);
    rp_conn_close(f->conn);
  }
  int status = rp_test_server_stop(&f->server);
  rp_test_tmpdir_remove(f->dir);
  /* A clean exit on SIGTERM (and, under the sanitizers, no leaks). */
  return status == 0 ? 0 : -1;
}

static void test_write_then_read_back_every_byte(void **state)
{
  struct fixture *f = *state;
  struct rp_test_io_result res;
  assert_int_equal(rp_test_pages(f->conn, RP_OP_WRITE, 0, PAGES, DEPTH, 1, &res), 0);
  assert_int_equal(res.ok, PAGES);
  assert_int_equal(rp_conn_in_flight(f->conn), 0);
  assert_int_equal(rp_test_pages(f->conn, RP_OP_READ, 0, PAGES, DEPTH, 1, &res), 0);
  assert_int_equal(res.ok, PAGES);
  assert_int_equal(res.mismatched, 0);

  struct rp_server_stat st;
  struct rp_error err;
  assert_int_equal(rp_stat_sync(f->conn, &st, &err), 0);
  assert_int_equal(st.session_stored_pages, PAGES);
  assert_int_equal(st.session_reserved_pages, PAGES);
  assert_int_equal(st.stored_pages, PAGES);
  assert_int_equal(st.stored_bytes, (uint64_t)PAGES * RP_PAGE_SIZE);
  assert_true(st.resident_bytes >= st.stored_bytes);
  assert_true(st.ops_write >= PAGES);
  assert_true(st.ops_read >= PAGES);
  assert_int_equal(st.page_size, RP_PAGE_SIZE);
}

static void test_overwrite(void **state)
{
  struct fixture *f = *state;
  struct rp_test_io_result res;
  /* Slots 0..999 get new contents; 1000..1999 keep the old ones. */
  assert_int_equal(rp_test_pages(f->conn, RP_OP_WRITE, 0, 2000, DEPTH, 1, &res), 0);
  assert_int_equal(rp_test_pages(f->conn, RP_OP_WRITE, 0, 1000, DEPTH, 2, &res), 0);
  assert_int_equal(rp_test_pages(f->conn, RP_OP_READ, 0, 1000, DEPTH, 2, &res), 0);
  assert_int_equal(rp_test_pages(f->conn, RP_OP_READ, 1000, 1000, DEPTH, 1, &res), 0);
  /* An overwrite stores no second copy. */
  struct rp_server_stat st;
  struct rp_error err;
  assert_int_equal(rp_stat_sync(f->conn, &st, &err), 0);
  assert_true(st.session_stored_pages <= PAGES);

  /* The blocking helpers see the same bytes. */
  uint8_t page[RP_PAGE_SIZE], expect[RP_PAGE_SIZE];
  assert_int_equal(rp_read_sync(f->conn, 999, page, &err), 0);
  rp_test_fill_page(expect, 2, 999);
  assert_memory_equal(page, expect, RP_PAGE_SIZE);
  rp_test_fill_page(expect, 3, 7);
  assert_int_equal(rp_write_sync(f->conn, 7, expect, &err), 0);
  memset(page, 0, sizeof page);
  assert_int_equal(rp_read_sync(f->conn, 7, page, &err), 0);
  assert_memory_equal(page, expect, RP_PAGE_SIZE);
}

static void test_free_then_read_is_not_found(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  struct rp_test_io_result res;
  assert_int_equal(rp_test_pages(f->conn, RP_OP_WRITE, 3000, 1000, DEPTH, 4, &res), 0);
  struct rp_server_stat before, after;
  assert_int_equal(rp_stat_sync(f->conn, &before, &err), 0);
  assert_int_equal(rp_free_sync(f->conn, 3000, 500, &err), 0);
  assert_int_equal(rp_stat_sync(f->conn, &after, &err), 0);
  assert_int_equal(before.session_stored_pages - after.session_stored_pages, 500);

  uint8_t page[RP_PAGE_SIZE];
  assert_int_equal(rp_read_sync(f->conn, 3000, page, &err), -1);
  assert_int_equal(err.code, RP_ERR_NOT_FOUND);
  assert_int_equal(rp_read_sync(f->conn, 3499, page, &err), -1);
  assert_int_equal(err.code, RP_ERR_NOT_FOUND);
  /* Every freed slot, through the async path: NOT_FOUND, never stale bytes. */
  assert_int_equal(rp_test_pages(f->conn, RP_OP_READ, 3000, 500, DEPTH, 4, &res), -1);
  assert_int_equal(res.status_count[RP_ERR_NOT_FOUND], 500);
  assert_int_equal(res.mismatched, 0);
  /* The neighbours are untouched. */
  assert_int_equal(rp_test_pages(f->conn, RP_OP_READ, 3500, 500, DEPTH, 4, &res), 0);
  /* A freed slot can be written again. */
  assert_int_equal(rp_test_pages(f->conn, RP_OP_WRITE, 3000, 10, 4, 5, &res), 0);
  assert_int_equal(rp_test_pages(f->conn, RP_OP_READ, 3000, 10, 4, 5, &res), 0);
  /* Freeing a never-written range is fine. */
  assert_int_equal(rp_free_sync(f->conn, 19000, 1000, &err), 0);
}

static void test_never_written_and_out_of_range(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  uint8_t page[RP_PAGE_SIZE];
  memset(page, 0x5a, sizeof page);
  assert_int_equal(rp_read_sync(f->conn, PAGES - 1, page, &err), -1);
  assert_int_equal(err.code, RP_ERR_NOT_FOUND);
  assert_int_equal(rp_write_sync(f->conn, PAGES, page, &err), -1);
  assert_int_equal(err.code, RP_ERR_OUT_OF_RANGE);
  assert_non_null(strstr(err.message, "reserv"));
  assert_int_equal(rp_read_sync(f->conn, PAGES + 5, page, &err), -1);
  assert_int_equal(err.code, RP_ERR_OUT_OF_RANGE);
  assert_int_equal(rp_free_sync(f->conn, PAGES - 1, 2, &err), -1);
  assert_int_equal(err.code, RP_ERR_OUT_OF_RANGE);
  /* The library refuses what the protocol cannot carry, without a round trip. */
  assert_int_equal(rp_free_sync(f->conn, 0, 0, &err), -1);
  assert_int_equal(rp_write_sync(f->conn, RP_MAX_SLOT + 1, page, &err), -1);
  /* And the connection is still fine after all those refusals. */
  assert_true(rp_conn_is_connected(f->conn));
  assert_int_equal(rp_ping_sync(f->conn, &err), 0);
}

static void test_shrink_reservation_frees_pages(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  struct rp_test_io_result res;
  assert_int_equal(rp_test_pages(f->conn, RP_OP_WRITE, PAGES - 100, 100, 16, 6, &res), 0);
  uint64_t reserved = 0;
  assert_int_equal(rp_reserve_sync(f->conn, PAGES - 50, &reserved, NULL, &err), 0);
  assert_int_equal(reserved, PAGES - 50);
  assert_int_equal(rp_reserve_sync(f->conn, PAGES, &reserved, NULL, &err), 0);
  /* The 50 slots past the shrunk end lost their pages; the others kept them. */
  assert_int_equal(rp_test_pages(f->conn, RP_OP_READ, PAGES - 50, 50, 16, 6, &res), -1);
  assert_int_equal(res.status_count[RP_ERR_NOT_FOUND], 50);
  assert_int_equal(rp_test_pages(f->conn, RP_OP_READ, PAGES - 100, 50, 16, 6, &res), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_write_then_read_back_every_byte),
    cmocka_unit_test(test_overwrite),
    cmocka_unit_test(test_free_then_read_is_not_found),
    cmocka_unit_test(test_never_written_and_out_of_range),
    cmocka_unit_test(test_shrink_reservation_frees_pages),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
