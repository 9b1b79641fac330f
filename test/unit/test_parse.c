/* Operator input parsing (common/parse.c): sizes, counts, HOST:PORT, byte formatting.
 * Every refusal must leave a sentence in err that names the offending input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "parse.h"

static void size_ok(const char *s, uint64_t want)
{
  uint64_t v = 0xdeadbeef;
  char err[256] = "";
  if (rp_parse_size("--memory", s, &v, err, sizeof err) != 0)
    fail_msg("'%s' refused: %s", s, err);
  if (v != want)
    fail_msg("'%s' parsed as %llu, want %llu", s, (unsigned long long)v,
             (unsigned long long)want);
}

static void size_bad(const char *s)
{
  uint64_t v = 0xdeadbeef;
  char err[256] = "";
  if (rp_parse_size("--memory", s, &v, err, sizeof err) != -1)
    fail_msg("'%s' accepted as %llu", s ? s : "(null)", (unsigned long long)v);
  assert_int_equal(v, 0xdeadbeef); /* untouched on failure */
  assert_non_null(strstr(err, "--memory"));
  if (s && *s)
    assert_non_null(strstr(err, s));
}

static void test_sizes(void **state)
{
  (void)state;
  size_ok("0", 0);
  size_ok("4096", 4096);
  size_ok("64K", 64ull << 10);
  size_ok("64k", 64ull << 10);
  size_ok("64M", 64ull << 20);
  size_ok("64m", 64ull << 20);
  size_ok("2G", 2ull << 30);
  size_ok("1T", 1ull << 40);
  size_ok("64MiB", 64ull << 20);
  size_ok("64MB", 64ull << 20);
  size_ok("64mb", 64ull << 20);
  size_ok("2GiB", 2ull << 30);
  size_ok("512B", 512);
  size_ok("18446744073709551615", UINT64_MAX);
  size_ok("17179869183G", 17179869183ull << 30); /* largest G that fits */
}

static void test_bad_sizes(void **state)
{
  (void)state;
  size_bad("abc");
  size_bad("-1");
  size_bad("12Q");
  size_bad("");
  size_bad(NULL);
  size_bad(" 64M");
  size_bad("64 M");
  size_bad("64M ");
  size_bad("+64M");
  size_bad("M");
  size_bad("64Mi");
  size_bad("64MiBx");
  size_bad("64BB");
  size_bad("64KK");
  size_bad("1.5G");
  size_bad("0x10");
  size_bad("18446744073709551616");       /* UINT64_MAX + 1 */
  size_bad("99999999999999999999999999"); /* way past */
  size_bad("17179869184G");               /* shifts past 64 bits */
  size_bad("16777216T");
}

static void test_uint(void **state)
{
  (void)state;
  uint64_t v = 0;
  char err[256] = "";
  assert_int_equal(rp_parse_uint("--lease", "60", 3600, &v, err, sizeof err), 0);
  assert_int_equal(v, 60);
  assert_int_equal(rp_parse_uint("--lease", "3600", 3600, &v, err, sizeof err), 0);
  assert_int_equal(v, 3600);
  assert_int_equal(rp_parse_uint("--lease", "0", 3600, &v, err, sizeof err), 0);
  assert_int_equal(v, 0);

  static const char *bad[] = { "3601", "-1", "",    "abc",
                               "1x",   " 1", "1.0", "99999999999999999999999" };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = 77;
    err[0] = '\0';
    if (rp_parse_uint("--lease", bad[i], 3600, &v, err, sizeof err) != -1)
      fail_msg("'%s' accepted", bad[i]);
    assert_int_equal(v, 77);
    assert_non_null(strstr(err, "--lease"));
  }
  err[0] = '\0';
  assert_int_equal(rp_parse_uint("--lease", NULL, 10, &v, err, sizeof err), -1);
  assert_true(strlen(err) > 0);
}

static void test_bool(void **state)
{
  (void)state;
  char err[256] = "";
  static const char *yes[] = { "true", "on", "yes", "1" },
                    *no[] = { "false", "off", "no", "0" };
  for (size_t i = 0; i < 4; i++) {
    bool v = false;
    assert_int_equal(rp_parse_bool("mlock", yes[i], &v, err, sizeof err), 0);
    assert_true(v);
    assert_int_equal(rp_parse_bool("mlock", no[i], &v, err, sizeof err), 0);
    assert_false(v);
  }
  static const char *bad[] = { "maybe", "", "TRUE ", "2", NULL };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    bool v = true;
    if (rp_parse_bool("mlock", bad[i], &v, err, sizeof err) != -1)
      fail_msg("'%s' accepted", bad[i] ? bad[i] : "(null)");
    assert_true(v);
    assert_non_null(strstr(err, "give true or false"));
  }
  assert_int_equal(rp_parse_bool("standby", "maybe", &(bool){ false }, err, sizeof err), -1);
  assert_string_equal(err, "standby=maybe: give true or false");
}

static void hp_ok(const char *s, const char *want_host, const char *want_port)
{
  char host[256], port[16], err[256] = "";
  if (rp_parse_hostport(s, host, sizeof host, port, sizeof port, err, sizeof err) != 0)
    fail_msg("'%s' refused: %s", s, err);
  assert_string_equal(host, want_host);
  assert_string_equal(port, want_port);
}

static void hp_bad(const char *s)
{
  char host[256] = "untouched", port[16] = "untouched", err[256] = "";
  if (rp_parse_hostport(s, host, sizeof host, port, sizeof port, err, sizeof err) != -1)
    fail_msg("'%s' accepted as host '%s' port '%s'", s ? s : "(null)", host, port);
  assert_string_equal(host, "untouched");
  assert_non_null(strstr(err, "HOST:PORT"));
  if (s)
    assert_non_null(strstr(err, s));
}

static void test_hostport(void **state)
{
  (void)state;
  hp_ok("127.0.0.1:7070", "127.0.0.1", "7070");
  hp_ok("localhost:1", "localhost", "1");
  hp_ok("mem-1.example.org:65535", "mem-1.example.org", "65535");
  hp_ok("[::1]:7070", "::1", "7070");
  hp_ok("[fe80::1%eth0]:7070", "fe80::1%eth0", "7070");
  hp_ok("[2001:db8::42]:443", "2001:db8::42", "443");
}

static void test_bad_hostport(void **state)
{
  (void)state;
  hp_bad("");
  hp_bad(NULL);
  hp_bad("127.0.0.1");  /* missing port */
  hp_bad("127.0.0.1:"); /* empty port */
  hp_bad(":7070");      /* empty host */
  hp_bad("host:0");
  hp_bad("host:65536");
  hp_bad("host:99999999999999999999");
  hp_bad("host:-1");
  hp_bad("host:+80");
  hp_bad("host:80x");
  hp_bad("host:http");
  hp_bad("host: 80");
  hp_bad("::1:7070"); /* v6 without brackets */
  hp_bad("[::1]");    /* v6 missing port */
  hp_bad("[::1]:");
  hp_bad("[::1]7070");
  hp_bad("[::1:7070");
  hp_bad("[]:7070");
  hp_bad("a:b:c");
}

static void test_hostport_buffers(void **state)
{
  (void)state;
  char host[4], port[3], err[256];
  /* fits exactly */
  assert_int_equal(
    rp_parse_hostport("abc:12", host, sizeof host, port, sizeof port, err, sizeof err), 0);
  assert_string_equal(host, "abc");
  assert_string_equal(port, "12");
  /* one too long, host or port */
  assert_int_equal(
    rp_parse_hostport("abcd:12", host, sizeof host, port, sizeof port, err, sizeof err), -1);
  assert_int_equal(
    rp_parse_hostport("abc:123", host, sizeof host, port, sizeof port, err, sizeof err), -1);
}

static void test_format_bytes(void **state)
{
  (void)state;
  char buf[32];
  assert_string_equal(rp_format_bytes(0, buf, sizeof buf), "0 B");
  assert_string_equal(rp_format_bytes(1023, buf, sizeof buf), "1023 B");
  assert_string_equal(rp_format_bytes(1024, buf, sizeof buf), "1.0 KiB");
  assert_string_equal(rp_format_bytes(1536, buf, sizeof buf), "1.5 KiB");
  assert_string_equal(rp_format_bytes(4096, buf, sizeof buf), "4.0 KiB");
  assert_string_equal(rp_format_bytes(64ull << 20, buf, sizeof buf), "64.0 MiB");
  assert_string_equal(rp_format_bytes(2ull << 30, buf, sizeof buf), "2.0 GiB");
  assert_string_equal(rp_format_bytes(3ull << 40, buf, sizeof buf), "3.0 TiB");
  assert_string_equal(rp_format_bytes(5000ull << 40, buf, sizeof buf), "5000.0 TiB");
  /* the largest value still ends in TiB and fits */
  assert_non_null(strstr(rp_format_bytes(UINT64_MAX, buf, sizeof buf), " TiB"));
  /* returns its buffer and truncates safely */
  char small[5];
  memset(small, 'x', sizeof small);
  assert_ptr_equal(rp_format_bytes(64ull << 20, small, sizeof small), small);
  assert_int_equal(small[4], '\0');
  assert_string_equal(small, "64.0");
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_sizes),
    cmocka_unit_test(test_bad_sizes),
    cmocka_unit_test(test_uint),
    cmocka_unit_test(test_bool),
    cmocka_unit_test(test_hostport),
    cmocka_unit_test(test_bad_hostport),
    cmocka_unit_test(test_hostport_buffers),
    cmocka_unit_test(test_format_bytes),
  };
  return cmocka_run_group_tests_name("parse", tests, NULL, NULL);
}
