/* Cleaning out of the foreground (docs/engine.md, "Cleaning is bounded, and kept out of
 * the foreground"): against five real rampartd on loopback, a parity-log 4+1 device
 * with room in its overflow takes a burst of random overwrites without a write waiting
 * for cleaning; once no request arrives, idle cleaning frees the half-dead groups the
 * burst left, below where cleaning under I/O would have stopped; and every page reads
 * back as written (against a shadow copy of the device).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "engine_device.h"
#include "rampart.h"

#define PAGES 2048u
#define GROUP 4u
#define OVERFLOW_PERCENT 50u

/* How far into the overflow the slots held are: 0 when they are what the live pages need
 * (with parity, plus the engine's slack of a few groups), 1 at the bound where writes
 * would wait. */
static double overflow_used(const struct rampart_stats *st)
{
  double need = (double)st->pages_remote * (1.0 + 1.0 / GROUP) + (GROUP + 1) * 8;
  double room = (double)st->pages_remote * (1.0 + 1.0 / GROUP) * OVERFLOW_PERCENT / 100.0;
  return ((double)rp_test_stats_pages_stored(st) - need) / room;
}

static void print_stats(struct rp_test_device *d, const char *when)
{
  struct rampart_stats st;
  char report[8192];
  rp_test_device_stats(d, &st);
  rampart_format_stats(&st, report, sizeof report);
  print_message("%s: %.2f of the overflow used\n%s", when, overflow_used(&st), report);
}

static void test_a_burst_within_the_overflow_never_waits_and_idle_time_cleans(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  assert_int_equal(rp_test_cluster_start(&c, 5, "64M", NULL), 0);
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "overflow", "50", NULL };
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, PAGES, extra), PAGES, 29);
  rp_test_device_fill(&d, 0, PAGES);
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.pages_overwritten, 0); /* each page written once: no overwrite */
  assert_int_equal(st.clean_rewrites, 0);

  /* The burst: random overwrites until about 60% of the overflow is used, past where
   * idle cleaning starts (25%) and short of where cleaning runs under I/O (90%). */
  unsigned batches = 0;
  do {
    rp_test_device_workload(&d, 1, 100, 0);
    rp_test_device_stats(&d, &st);
    batches++;
  } while (overflow_used(&st) < 0.6 && batches < 200);
  print_stats(&d, "after the burst");
  double after_burst = overflow_used(&st);
  assert_true(after_burst >= 0.6 && after_burst < 0.8);
  assert_true(st.pages_overwritten > 0);
  assert_int_equal(st.writes_waited_for_cleaning, 0);

  /* Idle: nothing arrives, and cleaning frees what the burst left half dead. Cleaning
   * under I/O would not have started at all, and stops at 80%. */
  double used = after_burst;
  for (unsigned t = 0; t < 150; t++) {
    usleep(100000);
    rp_test_device_stats(&d, &st);
    used = overflow_used(&st);
    if (!st.cleaning && st.moves_in_flight == 0 && st.clean_rewrites > 0)
      break;
  }
  print_stats(&d, "after idle cleaning");
  assert_true(st.clean_rewrites > 0);
  assert_true(st.groups_cleaned > 0);
  assert_true(used < 0.5 && used < after_burst);
  assert_int_equal(st.writes_waited_for_cleaning, 0);
  assert_int_equal(st.pages_spilled, 0);
  print_message("burst of %u batches: %llu pages overwritten, none waited; idle cleaning "
                "rewrote %llu pages (%.3f per overwrite), overflow used %.2f -> %.2f\n",
                batches, (unsigned long long)st.pages_overwritten,
                (unsigned long long)st.clean_rewrites,
                (double)st.clean_rewrites / (double)st.pages_overwritten, after_burst, used);

  rp_test_device_verify(&d, false);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

int main(void)
{
  if (!rp_test_rampartd_path())
    return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_burst_within_the_overflow_never_waits_and_idle_time_cleans),
  };
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
