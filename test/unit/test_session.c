/* Server sessions and host-pressure logic (server/session.c, server/pressure.c):
 * PSI and meminfo parsing on real and malformed text, the pressure decision, and the
 * session lifecycle (resume, lease expiry, displaced connections) on a real libev loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "page_store.h"
#include "pressure.h"
#include "session.h"

/* ---- PSI ------------------------------------------------------------------------- */

static void test_psi_parses_real_file(void **state)
{
  double v = -1;
  assert_int_equal(rps_psi_parse_some_avg10("some avg10=23.45 avg60=1.00 avg300=0.10 "
                                            "total=123456\n"
                                            "full avg10=3.00 avg60=0.00 avg300=0.00 "
                                            "total=99\n",
                                            &v),
                   0);
  assert_true(v > 23.449 && v < 23.451);
  assert_int_equal(
    rps_psi_parse_some_avg10("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                             "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                             &v),
    0);
  assert_true(v == 0.0);
  /* "full" first, no trailing newline: still the "some" line's value. */
  assert_int_equal(rps_psi_parse_some_avg10("full avg10=99.00 avg60=0 avg300=0 total=0\n"
                                            "some avg10=100.00 avg60=0 avg300=0 total=0",
                                            &v),
                   0);
  assert_true(v == 100.0);
}

static void test_psi_rejects_malformed(void **state)
{
  static const char *bad[] = {
    "",
    "\n",
    "full avg10=1.00 avg60=0.00 avg300=0.00 total=0\n", /* no some line */
    "some avg60=1.00 avg300=0.00 total=0\n",            /* no avg10 */
    "some avg10= avg60=1.00\n",                         /* empty value */
    "some avg10=abc avg60=1.00\n",
    "some avg10=-1.00 avg60=1.00\n",
    "some avg10=101.00 avg60=1.00\n", /* not a percentage */
    "some avg10=nan avg60=1.00\n",
    "some avg10=1.5x avg60=1.00\n",  /* trailing junk */
    "some xavg10=1.00 avg60=1.00\n", /* not the avg10 field */
    "something avg10=1.00\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    double v = 42.0;
    if (rps_psi_parse_some_avg10(bad[i], &v) != -1)
      fail_msg("accepted malformed PSI text #%zu: '%s'", i, bad[i]);
    assert_true(v == 42.0);
  }
}

/* ---- meminfo ------------------------------------------------------------------------ */

static void test_meminfo_available(void **state)
{
  uint64_t b = 0;
  assert_int_equal(rps_meminfo_parse_available("MemTotal:        8000000 kB\n"
                                               "MemFree:          100000 kB\n"
                                               "MemAvailable:    2500000 kB\n"
                                               "Buffers:           12 kB\n",
                                               &b),
                   0);
  assert_int_equal(b, UINT64_C(2500000) * 1024);
  assert_int_equal(rps_meminfo_parse_available("MemAvailable: 0 kB", &b), 0);
  assert_int_equal(b, 0);

  static const char *bad[] = {
    "MemTotal: 100 kB\nMemFree: 50 kB\n", /* old kernel: no MemAvailable */
    "MemAvailable: kB\n",
    "MemAvailable: -5 kB\n",
    "MemAvailable: 12 MB\n",
    "MemAvailable: 12\n",
    "MemAvailable: 99999999999999999999999 kB\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    b = 7;
    if (rps_meminfo_parse_available(bad[i], &b) != -1)
      fail_msg("accepted malformed meminfo #%zu: '%s'", i, bad[i]);
    assert_int_equal(b, 7);
  }
}

/* ---- the decision -------------------------------------------------------------------- */

static struct rps_pressure_config config(double threshold, uint64_t min_available)
{
  struct rps_pressure_config c = { "/nonexistent", "/nonexistent", threshold, min_available,
                                   1.0 };
  return c;
}

static void test_threshold_logic(void **state)
{
  char reason[256];
  struct rps_pressure_config c = config(10.0, 0);
  struct rps_pressure_sample s = { true, 9.99, true, UINT64_C(1) << 30 };
  assert_false(rps_pressure_evaluate(&c, &s, reason, sizeof reason));
  assert_non_null(strstr(reason, "< 10%"));
  s.psi_some_avg10 = 10.0; /* at the threshold counts */
  assert_true(rps_pressure_evaluate(&c, &s, reason, sizeof reason));
  s.psi_some_avg10 = 23.5;
  assert_true(rps_pressure_evaluate(&c, &s, reason, sizeof reason));
  assert_string_equal(reason, "PSI memory some avg10=23.5% >= 10%");
  /* No PSI reading: no pressure from PSI, whatever the stale number says. */
  s.psi_ok = false;
  assert_false(rps_pressure_evaluate(&c, &s, reason, sizeof reason));
  /* MemAvailable is ignored while --min-available is 0. */
  s.mem_available = 0;
  assert_false(rps_pressure_evaluate(&c, &s, reason, sizeof reason));
}

static void test_min_available_logic(void **state)
{
  char reason[256];
  struct rps_pressure_config c = config(10.0, UINT64_C(256) << 20);
  struct rps_pressure_sample s = { true, 0.0, true, UINT64_C(300) << 20 };
  assert_false(rps_pressure_evaluate(&c, &s, reason, sizeof reason));
  s.mem_available = (UINT64_C(256) << 20) - 1;
  assert_true(rps_pressure_evaluate(&c, &s, reason, sizeof reason));
  assert_non_null(strstr(reason, "MemAvailable"));
  assert_non_null(strstr(reason, "--min-available 256.0 MiB"));
  assert_null(strstr(reason, "PSI memory some avg10=0.0% >="));
  /* Both at once: the reason names both. */
  s.psi_some_avg10 = 50.0;
  assert_true(rps_pressure_evaluate(&c, &s, reason, sizeof reason));
  assert_non_null(strstr(reason, "avg10=50.0% >= 10%"));
  assert_non_null(strstr(reason, "MemAvailable"));
  /* Unknown MemAvailable does not count as low. */
  s.psi_some_avg10 = 0.0;
  s.mem_ok = false;
  assert_false(rps_pressure_evaluate(&c, &s, reason, sizeof reason));
}

/* ---- the monitor, on files a test controls ----------------------------------------- */

struct monitor_fixture {
  char dir[64], psi[96], meminfo[96];
  int changes;
  bool last;
};

static void write_text(const char *path, const char *text)
{
  char tmp[128];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(rename(tmp, path), 0);
}

static void on_change(void *arg, bool pressure, const char *reason)
{
  struct monitor_fixture *f = arg;
  f->changes++;
  f->last = pressure;
}

static void stop_loop(struct ev_loop *loop, ev_timer *w, int revents)
{
  ev_break(loop, EVBREAK_ONE);
}

static void run_for(struct ev_loop *loop, double seconds)
{
  ev_timer t;
  ev_timer_init(&t, stop_loop, seconds, 0.);
  ev_timer_start(loop, &t);
  ev_run(loop, 0);
  ev_timer_stop(loop, &t);
}

static void test_monitor_reports_transitions(void **state)
{
  struct monitor_fixture f;
  memset(&f, 0, sizeof f);
  snprintf(f.dir, sizeof f.dir, "/tmp/rampart-test-session.XXXXXX");
  assert_non_null(mkdtemp(f.dir));
  snprintf(f.psi, sizeof f.psi, "%s/psi", f.dir);
  snprintf(f.meminfo, sizeof f.meminfo, "%s/meminfo", f.dir);
  write_text(f.psi, "some avg10=1.00 avg60=0 avg300=0 total=0\n");
  write_text(f.meminfo, "MemAvailable: 1000000 kB\n");

  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  struct rps_pressure_config c = { f.psi, f.meminfo, 10.0, 0, 0.02 };
  struct rps_pressure *p = rps_pressure_create(loop, &c, on_change, &f);
  assert_non_null(p);
  assert_false(rps_pressure_active(p));
  assert_true(rps_pressure_last(p)->psi_ok);
  assert_int_equal(rps_pressure_last(p)->mem_available, UINT64_C(1000000) * 1024);

  write_text(f.psi, "some avg10=42.00 avg60=0 avg300=0 total=0\n");
  run_for(loop, 0.1);
  assert_int_equal(f.changes, 1);
  assert_true(f.last);
  assert_true(rps_pressure_active(p));
  assert_non_null(strstr(rps_pressure_reason(p), "avg10=42.0%"));

  /* A half-written file keeps the last reading rather than flapping. */
  write_text(f.psi, "");
  run_for(loop, 0.1);
  assert_int_equal(f.changes, 1);
  assert_true(rps_pressure_active(p));

  /* A missing PSI file means no pressure from PSI. */
  unlink(f.psi);
  run_for(loop, 0.1);
  assert_int_equal(f.changes, 2);
  assert_false(f.last);

  rps_pressure_destroy(p);
  ev_loop_destroy(loop);
  unlink(f.meminfo);
  rmdir(f.dir);
}

/* ---- sessions ------------------------------------------------------------------------ */

struct session_fixture {
  struct ev_loop *loop;
  struct rps_store *store;
  struct rps_sessions *t;
};

static int setup_sessions(void **state)
{
  struct session_fixture *f = calloc(1, sizeof *f);
  f->loop = ev_loop_new(EVFLAG_AUTO);
  f->store = rps_store_create(1024);
  f->t = rps_sessions_create(f->loop, f->store, 0.05);
  *state = f;
  return f->loop && f->store && f->t ? 0 : -1;
}

static int teardown_sessions(void **state)
{
  struct session_fixture *f = *state;
  rps_sessions_destroy(f->t);
  rps_store_destroy(f->store);
  ev_loop_destroy(f->loop);
  free(f);
  return 0;
}

static void test_session_tokens_and_find(void **state)
{
  struct session_fixture *f = *state;
  int conn_a, conn_b;
  struct rps_session *a = rps_session_create(f->t, &conn_a, "alpha");
  struct rps_session *b = rps_session_create(f->t, &conn_b, "beta\nfake log line");
  assert_non_null(a);
  assert_non_null(b);
  assert_memory_not_equal(a->token, b->token, RP_TOKEN_LEN);
  assert_ptr_equal(rps_session_find(f->t, a->token, RP_TOKEN_LEN), a);
  assert_ptr_equal(rps_session_find(f->t, b->token, RP_TOKEN_LEN), b);
  assert_null(rps_session_find(f->t, a->token, RP_TOKEN_LEN - 1));
  uint8_t other[RP_TOKEN_LEN];
  memcpy(other, a->token, RP_TOKEN_LEN);
  other[RP_TOKEN_LEN - 1] ^= 1;
  assert_null(rps_session_find(f->t, other, RP_TOKEN_LEN));
  assert_null(strchr(b->client_name, '\n'));
  assert_int_equal(f->t->attached, 2);
}

static void test_session_resume_keeps_pages(void **state)
{
  struct session_fixture *f = *state;
  int conn1, conn2;
  char msg[256];
  uint8_t page[RP_PAGE_SIZE];
  memset(page, 0x5a, sizeof page);
  struct rps_session *s = rps_session_create(f->t, &conn1, "c");
  assert_int_equal(rps_store_reserve(f->store, s->acct, 4, false, msg, sizeof msg), RP_OK);
  assert_int_equal(rps_store_write(f->store, s->acct, 2, page, msg, sizeof msg), RP_OK);
  rps_session_detach(f->t, s);
  assert_int_equal(f->t->attached, 0);
  assert_int_equal(f->t->detached, 1);
  /* Back within the lease: the same session and its page. */
  run_for(f->loop, 0.01);
  assert_ptr_equal(rps_session_find(f->t, s->token, RP_TOKEN_LEN), s);
  assert_null(rps_session_attach(f->t, s, &conn2, "c"));
  assert_int_equal(f->t->attached, 1);
  assert_int_equal(f->t->detached, 0);
  run_for(f->loop, 0.1); /* the lease timer was stopped: nothing expires */
  assert_int_equal(f->t->expired, 0);
  const uint8_t *got;
  assert_int_equal(rps_store_read(f->store, s->acct, 2, &got, msg, sizeof msg), RP_OK);
  assert_memory_equal(got, page, RP_PAGE_SIZE);
}

static void test_session_resume_displaces_old_connection(void **state)
{
  struct session_fixture *f = *state;
  int old_conn, new_conn;
  struct rps_session *s = rps_session_create(f->t, &old_conn, "c");
  /* The client reconnected before the server noticed the old connection died. */
  assert_ptr_equal(rps_session_attach(f->t, s, &new_conn, "c"), &old_conn);
  assert_ptr_equal(s->conn, &new_conn);
  assert_int_equal(f->t->attached, 1);
  assert_int_equal(f->t->detached, 0);
}

static void test_session_lease_expiry_frees_pages(void **state)
{
  struct session_fixture *f = *state;
  int conn;
  char msg[256];
  uint8_t page[RP_PAGE_SIZE] = { 1 };
  struct rps_session *s = rps_session_create(f->t, &conn, "c");
  assert_int_equal(rps_store_reserve(f->store, s->acct, 100, false, msg, sizeof msg), RP_OK);
  for (uint64_t i = 0; i < 100; i++)
    assert_int_equal(rps_store_write(f->store, s->acct, i, page, msg, sizeof msg), RP_OK);
  uint8_t token[RP_TOKEN_LEN];
  memcpy(token, s->token, RP_TOKEN_LEN);
  rps_session_detach(f->t, s);
  run_for(f->loop, 0.2);
  assert_int_equal(f->t->expired, 1);
  assert_int_equal(f->t->detached, 0);
  assert_null(rps_session_find(f->t, token, RP_TOKEN_LEN));
  struct rps_store_stats st;
  rps_store_get_stats(f->store, &st);
  assert_int_equal(st.stored_pages, 0);
  assert_int_equal(st.reserved_pages, 0);
}

static void test_session_destroy_now(void **state)
{
  struct session_fixture *f = *state;
  int conn;
  char msg[256];
  struct rps_session *s = rps_session_create(f->t, &conn, "c");
  assert_int_equal(rps_store_reserve(f->store, s->acct, 10, false, msg, sizeof msg), RP_OK);
  rps_session_destroy(f->t, s); /* GOODBYE */
  assert_int_equal(f->t->attached, 0);
  assert_null(f->t->head);
  struct rps_store_stats st;
  rps_store_get_stats(f->store, &st);
  assert_int_equal(st.reserved_pages, 0);
  /* A detached one too: its lease timer must be stopped, or it would fire on freed
   * memory (ASan would see it). */
  s = rps_session_create(f->t, &conn, "d");
  rps_session_detach(f->t, s);
  rps_session_destroy(f->t, s);
  run_for(f->loop, 0.1);
  assert_int_equal(f->t->expired, 0);
  assert_int_equal(f->t->detached, 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_psi_parses_real_file),
    cmocka_unit_test(test_psi_rejects_malformed),
    cmocka_unit_test(test_meminfo_available),
    cmocka_unit_test(test_threshold_logic),
    cmocka_unit_test(test_min_available_logic),
    cmocka_unit_test(test_monitor_reports_transitions),
    cmocka_unit_test_setup_teardown(test_session_tokens_and_find, setup_sessions,
                                    teardown_sessions),
    cmocka_unit_test_setup_teardown(test_session_resume_keeps_pages, setup_sessions,
                                    teardown_sessions),
    cmocka_unit_test_setup_teardown(test_session_resume_displaces_old_connection,
                                    setup_sessions, teardown_sessions),
    cmocka_unit_test_setup_teardown(test_session_lease_expiry_frees_pages, setup_sessions,
                                    teardown_sessions),
    cmocka_unit_test_setup_teardown(test_session_destroy_now, setup_sessions,
                                    teardown_sessions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
