/* CPU pressure between samples (common/cpu_pressure.c): the share of the interval some
 * task waited, read from the kernel's "some" line; a file that does not say it, a
 * counter that went back and a first sample are "unknown" (-1), never a figure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_pressure.h"

#define MS 1000000ull /* ns */

static void test_percent_of_the_interval(void **state)
{
  (void)state;
  assert_int_equal(cpu_pressure_percent(1000, 1000, 0, 100 * MS), 0);
  assert_int_equal(cpu_pressure_percent(1000, 41000, 0, 100 * MS), 40); /* 40 ms of 100 */
  assert_int_equal(cpu_pressure_percent(0, 100000, 5 * MS, 105 * MS), 100);
  assert_int_equal(cpu_pressure_percent(0, 300000, 0, 100 * MS), 100);   /* capped */
  assert_int_equal(cpu_pressure_percent(500, 400, 0, 100 * MS), -1);     /* went back */
  assert_int_equal(cpu_pressure_percent(0, 10, 100 * MS, 100 * MS), -1); /* no time */
}

/* A file standing in for /proc/pressure/cpu, rewritten between samples. */
static int pressure_file(const char *text)
{
  char path[] = "/tmp/rampart-test-pressure.XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  assert_int_equal(pwrite(fd, text, strlen(text), 0), (ssize_t)strlen(text));
  return fd;
}

static void rewrite(int fd, const char *text)
{
  assert_int_equal(ftruncate(fd, 0), 0);
  assert_int_equal(pwrite(fd, text, strlen(text), 0), (ssize_t)strlen(text));
}

static void test_samples_read_the_some_line(void **state)
{
  (void)state;
  struct cpu_pressure p = { .fd = pressure_file(
                              "some avg10=1.00 avg60=2.00 avg300=3.00 total=1000000\n"
                              "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n") };
  assert_int_equal(cpu_pressure_sample(&p, 1000 * MS), -1); /* nothing to compare yet */
  rewrite(p.fd, "some avg10=9.00 avg60=2.00 avg300=3.00 total=1025000\n"
                "full avg10=0.00 avg60=0.00 avg300=0.00 total=999999\n");
  assert_int_equal(cpu_pressure_sample(&p, 1100 * MS), 25); /* 25 ms of 100 */
  rewrite(p.fd, "some avg10=9.00 avg60=2.00 avg300=3.00 total=1025000\n");
  assert_int_equal(cpu_pressure_sample(&p, 1200 * MS), 0);
  cpu_pressure_close(&p);
  assert_int_equal(p.fd, -1);
  assert_int_equal(cpu_pressure_sample(&p, 1300 * MS), -1); /* closed: unknown */
}

static void test_a_file_that_does_not_say_is_unknown(void **state)
{
  (void)state;
  static const char *const bad[] = {
    "",
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n", /* no some line first */
    "some avg10=0.00 avg60=0.00 avg300=0.00\n",         /* no total */
    "some avg10=0.00 avg60=0.00 avg300=0.00 total=x\n", /* not a number */
    "some avg10=0.00 avg60=0.00 avg300=0.00\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n", /* full's total is not some's */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct cpu_pressure p = { .fd = pressure_file(bad[i]) };
    assert_int_equal(cpu_pressure_sample(&p, 1 * MS), -1);
    assert_int_equal(cpu_pressure_sample(&p, 101 * MS), -1);
    cpu_pressure_close(&p);
  }
}

/* The real file, where the kernel has one: two samples make a figure in range. */
static void test_the_kernels_file(void **state)
{
  (void)state;
  struct cpu_pressure p;
  cpu_pressure_open(&p);
  if (p.fd < 0) {
    printf("skipped: this kernel has no /proc/pressure/cpu (PSI)\n");
    skip();
  }
  assert_int_equal(cpu_pressure_sample(&p, 1), -1);
  usleep(20000);
  int pct = cpu_pressure_sample(&p, 1 + 20 * MS);
  assert_true(pct >= 0 && pct <= 100);
  cpu_pressure_close(&p);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_percent_of_the_interval),
    cmocka_unit_test(test_samples_read_the_some_line),
    cmocka_unit_test(test_a_file_that_does_not_say_is_unknown),
    cmocka_unit_test(test_the_kernels_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
