/* rampartd watches its host's memory pressure (here a fake PSI file): under pressure it
 * advises its clients and refuses new capacity; when pressure ends it says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "client.h"
#include "server_process.h"

#define CALM \
  "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n" \
  "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
#define STRESSED \
  "some avg10=50.00 avg60=10.00 avg300=2.00 total=123456\n" \
  "full avg10=20.00 avg60=5.00 avg300=1.00 total=65432\n"

struct advice {
  int count;
  bool pressure;
  char reason[256];
  uint64_t free_pages;
  int disconnects;
};

struct fixture {
  char dir[256];
  char psi_path[512];
  struct rp_test_server server;
  struct rp_conn *conn;
  struct advice adv;
};

static void on_advise(struct rp_conn *c, bool pressure, const char *reason,
                      uint64_t free_pages, void *user)
{
  struct advice *a = user;
  a->count++;
  a->pressure = pressure;
  snprintf(a->reason, sizeof a->reason, "%s", reason);
  a->free_pages = free_pages;
}

static void on_disconnect(struct rp_conn *c, const struct rp_error *why, void *user)
{
  struct advice *a = user;
  a->disconnects++;
}

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0)
    return -1;
  snprintf(f.psi_path, sizeof f.psi_path, "%s/memory.pressure", f.dir);
  if (rp_test_write_file(f.psi_path, CALM) < 0)
    return -1;
  const char *args[] = { "--memory",
                         "16M",
                         "--pressure-file",
                         f.psi_path,
                         "--psi-threshold",
                         "10",
                         "--pressure-interval-ms",
                         "100",
                         NULL };
  if (rp_test_server_start(&f.server, f.dir, args) < 0)
    return -1;
  struct rp_error err;
  struct rp_session_info info;
  f.conn = rp_test_connect(&f.server, NULL, NULL, &info, &err);
  if (!f.conn) {
    fprintf(stderr, "connect: %s\n", err.message);
    return -1;
  }
  if (info.pressure) {
    fprintf(stderr, "server reports pressure with a calm PSI file\n");
    return -1;
  }
  rp_conn_set_callbacks(f.conn, on_advise, on_disconnect, &f.adv);
  *state = &f;
  return 0;
}

static int teardown(void **state)
{
  struct fixture *f = *state;
  if (!f)
    return 0;
  rp_conn_close(f->conn);
  int status = rp_test_server_stop(&f->server);
  rp_test_tmpdir_remove(f->dir);
  return status == 0 ? 0 : -1;
}

static bool under_pressure(void *arg)
{
  struct advice *a = arg;
  return a->count > 0 && a->pressure;
}

static bool pressure_over(void *arg)
{
  struct advice *a = arg;
  return a->count > 0 && !a->pressure;
}

static void test_pressure_advises_and_refuses(void **state)
{
  struct fixture *f = *state;
  struct rp_error err;
  assert_int_equal(rp_reserve_sync(f->conn, 100, NULL, NULL, &err), 0);
  uint8_t page[RP_PAGE_SIZE];
  rp_test_fill_page(page, 1, 1);
  assert_int_equal(rp_write_sync(f->conn, 1, page, &err), 0);

  /* Calm: nothing pushed for a few intervals. */
  assert_false(rp_conn_wait(f->conn, under_pressure, &f->adv, 400));
  assert_int_equal(f->adv.count, 0);

  assert_int_equal(rp_test_write_file(f->psi_path, STRESSED), 0);
  assert_true(rp_conn_wait(f->conn, under_pressure, &f->adv, 5000));
  fprintf(stderr, "advise: pressure=%d reason='%s' free=%llu\n", f->adv.pressure,
          f->adv.reason, (unsigned long long)f->adv.free_pages);
  assert_true(f->adv.reason[0] != '\0');

  /* Growing is refused under pressure; what is stored stays readable. */
  assert_int_equal(rp_reserve_sync(f->conn, 200, NULL, NULL, &err), -1);
  assert_int_equal(err.code, RP_ERR_PRESSURE);
  fprintf(stderr, "reserve under pressure: %s\n", err.message);
  uint8_t back[RP_PAGE_SIZE];
  assert_int_equal(rp_read_sync(f->conn, 1, back, &err), 0);
  assert_memory_equal(page, back, RP_PAGE_SIZE);

  struct rp_server_stat st;
  assert_int_equal(rp_stat_sync(f->conn, &st, &err), 0);
  assert_true(st.pressure);
  assert_true(st.psi_some_avg10 > 49.0 && st.psi_some_avg10 < 51.0);
  assert_true(st.advises_sent >= 1);

  /* New clients learn it in their Welcome. */
  struct rp_session_info info;
  struct rp_conn *other = rp_test_connect(&f->server, NULL, NULL, &info, &err);
  assert_non_null(other);
  assert_true(info.pressure);
  rp_conn_close(other);

  /* Pressure over: the server says so, and growth works again. */
  int before = f->adv.count;
  assert_int_equal(rp_test_write_file(f->psi_path, CALM), 0);
  assert_true(rp_conn_wait(f->conn, pressure_over, &f->adv, 5000));
  assert_true(f->adv.count > before);
  assert_int_equal(rp_reserve_sync(f->conn, 200, NULL, NULL, &err), 0);
  assert_int_equal(rp_stat_sync(f->conn, &st, &err), 0);
  assert_false(st.pressure);
  assert_int_equal(f->adv.disconnects, 0);
  assert_true(rp_conn_is_connected(f->conn));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_pressure_advises_and_refuses),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
