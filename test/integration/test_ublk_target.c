/* rampart-ublk, run as a program: what it says about bad input, and where the kernel has
 * no ublk driver (this host's), what it says about that. Its I/O path runs in a guest
 * that has the driver (test/swap/test_guest_starved.sh, its kill-ublk run). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "server_process.h"

static char out[16384];

/* Runs rampart-ublk with the arguments; returns its exit code (asserts it exited). */
static int ublk(const char *a1, const char *a2, const char *a3, const char *a4)
{
  const char *argv[] = { getenv("RAMPART_UBLK"), a1, a2, a3, a4, NULL };
  int status = rp_test_run_program(argv, out, sizeof out, 60000);
  print_message("$ rampart-ublk %s %s %s %s\n%s", a1 ? a1 : "", a2 ? a2 : "", a3 ? a3 : "",
                a4 ? a4 : "", out);
  assert_true(status != -1);
  assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

static void test_bad_options_say_what_to_give(void **state)
{
  (void)state;
  assert_int_equal(ublk("--depth", "lots", "size=64M", NULL), 2);
  assert_non_null(strstr(out, "--depth 'lots': give a number from 1 to 4096"));
  assert_int_equal(ublk("--max-io", "5000", "size=64M", NULL), 2);
  assert_non_null(strstr(out, "--max-io 5000: give a multiple of 4096"));
  assert_int_equal(ublk("--queues", NULL, NULL, NULL), 2);
  assert_non_null(strstr(out, "--queues '': give a number from 1 to 16"));
  assert_int_equal(ublk("size=64M", "frobnicate", NULL, NULL), 2);
  assert_non_null(strstr(out, "unexpected argument 'frobnicate'"));
  assert_int_equal(ublk("--help", NULL, NULL, NULL), 0);
  assert_non_null(strstr(out, "--depth N"));
}

/* The engine's settings are checked as nbdkit rampart checks them, before any device. */
static void test_bad_engine_settings_are_refused_before_any_device(void **state)
{
  (void)state;
  assert_int_equal(ublk("size=lots", NULL, NULL, NULL), 2);
  assert_non_null(strstr(out, "size"));
  assert_int_equal(ublk("no-such-setting=1", "size=64M", NULL, NULL), 2);
  assert_non_null(strstr(out, "no-such-setting"));
}

/* mlock= and standby= are spelt as every frontend spells them; the old flags are gone. */
static void test_switches_take_the_key_value_spelling(void **state)
{
  (void)state;
  assert_int_equal(ublk("standby=maybe", "size=64M", NULL, NULL), 2);
  assert_non_null(strstr(out, "standby=maybe: give true or false"));
  assert_int_equal(ublk("standby=true", "size=64M", NULL, NULL), 2);
  assert_non_null(strstr(out, "standby=true needs state=PATH"));
  assert_int_equal(ublk("standby=true", "state=/nonexistent/s", "size=64M", NULL), 2);
  assert_non_null(strstr(out, "standby=true needs --id N"));
  assert_int_equal(ublk("--standby", "size=64M", NULL, NULL), 2);
  assert_non_null(strstr(out, "unexpected argument '--standby'"));
  assert_int_equal(ublk("--help", NULL, NULL, NULL), 0);
  assert_non_null(strstr(out, "mlock=BOOL"));
  assert_non_null(strstr(out, "standby=BOOL"));
}

static void test_a_kernel_without_ublk_is_named(void **state)
{
  (void)state;
  if (access("/dev/ublk-control", F_OK) == 0)
    skip(); /* this kernel has the driver: the guest test covers it */
  assert_int_equal(ublk("mlock=false", "size=64M", NULL, NULL), 1);
  assert_non_null(strstr(out, "cannot open /dev/ublk-control"));
  assert_non_null(strstr(out, "modprobe ublk_drv"));
}

int main(void)
{
  if (!getenv("RAMPART_UBLK")) {
    fprintf(stderr, "RAMPART_UBLK is not set: run through ctest\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_bad_options_say_what_to_give),
    cmocka_unit_test(test_bad_engine_settings_are_refused_before_any_device),
    cmocka_unit_test(test_switches_take_the_key_value_spelling),
    cmocka_unit_test(test_a_kernel_without_ublk_is_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
