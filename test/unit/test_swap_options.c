/* rampart-swap's command line and --config file (supervisor/swap_options.c): what each
 * option and KEY=VALUE sets, which wins, and that every bad value is refused with the
 * sentence operators and the swap tests know, naming the value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "swap_options.h"

#define ARGS(...) ((char *[]){ __VA_ARGS__ })
#define NARGS(...) (int)(sizeof((char *[]){ __VA_ARGS__ }) / sizeof(char *))

/* Parses argv and resolves it with no file and 2 CPUs; fails the test on a refusal. */
static void resolve_ok(int argc, char **argv, struct swap_settings *s)
{
  struct swap_args a;
  char err[512] = "";
  if (swap_args_parse(argc, argv, &a, err, sizeof err) != 0)
    fail_msg("refused: %s", err);
  if (swap_settings_resolve(&a, NULL, 2, s, err, sizeof err) != 0)
    fail_msg("refused: %s", err);
  swap_kv_free(&a.cmdline_kv);
}

/* Parses and resolves argv, expecting a refusal whose sentence holds want. */
static void resolve_bad(int argc, char **argv, const char *want)
{
  struct swap_args a;
  struct swap_settings s;
  char err[512] = "";
  int rc = swap_args_parse(argc, argv, &a, err, sizeof err);
  if (rc == 0) {
    if (swap_settings_resolve(&a, NULL, 2, &s, err, sizeof err) == 0)
      fail_msg("accepted; wanted a refusal saying \"%s\"", want);
    swap_kv_free(&s.pager);
  }
  swap_kv_free(&a.cmdline_kv);
  if (!strstr(err, want))
    fail_msg("refused with \"%s\", not with \"%s\"", err, want);
}

static void test_defaults(void **state)
{
  (void)state;
  struct swap_settings s;
  resolve_ok(NARGS("on", "size=1G"), ARGS("on", "size=1G"), &s);
  assert_string_equal(s.name, "rampart");
  assert_int_equal(s.priority, 100);
  assert_string_equal(s.frontend, "auto");
  assert_string_equal(s.daemon, "auto");
  assert_int_equal(s.connections, 0); /* unset: 1 for rampart-nbd-attach, 2 for nbd-client */
  assert_int_equal(s.threads, 16);
  assert_int_equal(s.queues, 2); /* the CPUs, at most 4 */
  assert_int_equal(s.depth, 32); /* 64 / queues */
  assert_int_equal(s.pager.n, 1);
  assert_string_equal(swap_kv_get(&s.pager, "size"), "1G");
  swap_kv_free(&s.pager);
  resolve_ok(NARGS("on", "size=1G", "connections=3"), ARGS("on", "size=1G", "connections=3"),
             &s);
  assert_int_equal(s.connections, 3);
  swap_kv_free(&s.pager);
}

static void test_options_win(void **state)
{
  (void)state;
  struct swap_settings s;
  char *argv[] = { "on", "name=fromkv", "--name",  "fromopt",  "priority=5", "--queues",
                   "8",  "size=1G",     "size=2G", "--attach", "loop" };
  resolve_ok(11, argv, &s);
  assert_string_equal(s.name, "fromopt"); /* --name wins over name= */
  assert_int_equal(s.priority, 5);        /* an own key given as KEY=VALUE */
  assert_int_equal(s.queues, 8);
  assert_int_equal(s.depth, 16);           /* 64 / 8, at least 16 */
  assert_string_equal(s.frontend, "fuse"); /* --attach loop is the fuse frontend */
  assert_string_equal(swap_kv_get(&s.pager, "size"), "2G"); /* the later value */
  assert_int_equal(s.pager.n, 1);
  swap_kv_free(&s.pager);
}

static void test_config_file(void **state)
{
  (void)state;
  char path[] = "/tmp/test_swap_options.XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs("# a comment\n\n  size=8G  \nservers=a:1,b:2 # trailing\npriority=7\nname=conf\n", f);
  fclose(f);
  struct swap_kv file = { 0 };
  char err[512] = "";
  assert_int_equal(swap_config_read(path, &file, err, sizeof err), 0);
  struct swap_args a;
  char *argv[] = { "on", "priority=9" };
  assert_int_equal(swap_args_parse(2, argv, &a, err, sizeof err), 0);
  struct swap_settings s;
  assert_int_equal(swap_settings_resolve(&a, &file, 1, &s, err, sizeof err), 0);
  assert_string_equal(s.name, "conf");
  assert_int_equal(s.priority, 9); /* the command line overrides the file */
  assert_int_equal(s.queues, 1);
  assert_int_equal(s.depth, 64);
  assert_string_equal(swap_kv_get(&s.pager, "size"), "8G");
  assert_string_equal(swap_kv_get(&s.pager, "servers"), "a:1,b:2");
  swap_kv_free(&s.pager);
  swap_kv_free(&file);
  swap_kv_free(&a.cmdline_kv);

  f = fopen(path, "w");
  fputs("size=1G\nnot a setting\n", f);
  fclose(f);
  assert_int_equal(swap_config_read(path, &file, err, sizeof err), -1);
  assert_non_null(strstr(err, "line 2: expected KEY=VALUE, got 'not a setting'"));
  swap_kv_free(&file);
  unlink(path);
  assert_int_equal(swap_config_read(path, &file, err, sizeof err), -1);
  assert_non_null(strstr(err, "cannot read --config"));
}

static void test_refusals(void **state)
{
  (void)state;
  resolve_bad(NARGS("on", "--priority", "high"), ARGS("on", "--priority", "high"),
              "--priority 'high' is not a number from -1 to 32767");
  resolve_bad(NARGS("on", "--priority", "40000"), ARGS("on", "--priority", "40000"),
              "--priority '40000' is not a number");
  resolve_bad(NARGS("on", "--frontend", "disk"), ARGS("on", "--frontend", "disk"),
              "--frontend 'disk': use auto, ublk, nbd or fuse");
  resolve_bad(NARGS("on", "--attach", "usb"), ARGS("on", "--attach", "usb"),
              "--attach 'usb': use auto, nbd or loop");
  resolve_bad(NARGS("on", "--daemon", "qemu"), ARGS("on", "--daemon", "qemu"),
              "--daemon 'qemu': use auto, rampart-nbd-server or nbdkit");
  resolve_bad(NARGS("on", "--name", "a/b"), ARGS("on", "--name", "a/b"),
              "--name 'a/b': use letters, digits");
  resolve_bad(NARGS("on", "--queues", "0"), ARGS("on", "--queues", "0"),
              "--queues '0' is not a number from 1 to 16");
  resolve_bad(NARGS("on", "--depth", "5000"), ARGS("on", "--depth", "5000"),
              "--depth '5000' is not a number from 1 to 4096");
  resolve_bad(NARGS("on", "connections=17"), ARGS("on", "connections=17"),
              "--connections '17' is not a number from 1 to 16");
  resolve_bad(NARGS("on", "--threads", "x"), ARGS("on", "--threads", "x"),
              "--threads 'x' is not a number from 1 to 1024");
  resolve_bad(NARGS("on", "--name"), ARGS("on", "--name"), "--name needs a value");
  resolve_bad(NARGS("on", "--bogus"), ARGS("on", "--bogus"), "unknown argument '--bogus'");
  resolve_bad(NARGS("off", "size=1G"), ARGS("off", "size=1G"),
              "off takes no KEY=VALUE arguments ('size=1G')");
}

static void test_commands(void **state)
{
  (void)state;
  struct swap_args a;
  char err[512] = "";
  assert_int_equal(swap_args_parse(1, ARGS("start"), &a, err, sizeof err), 2);
  assert_string_equal(err, "unknown command 'start': use on, off, status, reload or upgrade "
                           "(try --help)");
  assert_int_equal(swap_args_parse(0, NULL, &a, err, sizeof err), 2);
  assert_int_equal(swap_args_parse(2, ARGS("off", "--force"), &a, err, sizeof err), 0);
  assert_int_equal(a.cmd, SWAP_OFF);
  assert_true(a.force);
  assert_int_equal(swap_args_parse(2, ARGS("on", "--help"), &a, err, sizeof err), 0);
  assert_int_equal(a.cmd, SWAP_HELP);
  assert_int_equal(
    swap_args_parse(5, ARGS("keep-standby", "--config", "/dev/null", "--name", "x"), &a, err,
                    sizeof err),
    0);
  assert_int_equal(a.cmd, SWAP_KEEP_STANDBY);
  assert_string_equal(a.config_file, "/dev/null");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_defaults),    cmocka_unit_test(test_options_win),
    cmocka_unit_test(test_config_file), cmocka_unit_test(test_refusals),
    cmocka_unit_test(test_commands),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
