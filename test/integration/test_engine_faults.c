/* The engine under the faults of issue 13: servers that corrupt what they return while
 * pages are moved, servers that refuse writes, a parity server advising at the moment a
 * group seals, a mirror copy that has not landed, and many threads writing parts of the
 * same pages. Real rampartd processes on loopback (hostile ones through --test-fault),
 * the public engine API, and every byte read back against a shadow copy: a page may be
 * unreadable (EIO) only where a test says so, never wrong.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "engine_device.h"
#include "rampart.h"

#define PAGE RAMPART_PAGE_SIZE

static void cluster_start(struct rp_test_cluster *c, unsigned n, const char *const *faults)
{
  assert_int_equal(rp_test_cluster_start(c, n, "64M", faults), 0);
}

static void print_stats(struct rp_test_device *d)
{
  static char report[16384];
  struct rampart_stats st;
  rp_test_device_stats(d, &st);
  rampart_format_stats(&st, report, sizeof report);
  print_message("%s", report);
}

/* Waits until every server is up, nothing moves, nothing waits and no live page is
 * unprotected, for half a second running; fails the test after timeout_s. */
static void wait_quiet(struct rp_test_device *d, unsigned timeout_s)
{
  struct rampart_stats st;
  unsigned quiet = 0;
  for (unsigned i = 0; i < timeout_s * 10 && quiet < 5; i++) {
    rp_test_device_stats(d, &st);
    bool calm = st.moves_in_flight == 0 && st.ops_waiting == 0 && !st.rebuild_running &&
                st.pages_unprotected == 0;
    for (unsigned s = 0; s < st.nservers; s++)
      calm &= st.servers[s].state == RAMPART_SERVER_UP;
    quiet = calm ? quiet + 1 : 0;
    usleep(100000);
  }
  if (quiet < 5) {
    print_stats(d);
    fail_msg("the engine did not settle in %u s", timeout_s);
  }
}

/* ---- defect 3: a member write that fails ----------------------------------------------- */

/* A server that refuses one write in 64: each refused member write is placed again, and
 * the group it was refused in can no longer rebuild its other members (its parity covers
 * a page that server never stored). Those pages must be moved to whole groups, so a
 * later loss of any one other server costs nothing. */
static void test_refused_member_write_does_not_leave_its_group_believed_protected(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  const char *faults[] = { NULL, NULL, NULL, NULL, "refuse-writes" };
  cluster_start(&c, 5, faults);
  const char *extra[] = { "redundancy", "parity-log", "group", "4", "lease", "30",
                          "timeout", "1000", NULL };
  struct rp_test_device d;
  rp_test_device_init(&d, rp_test_engine_open(&c, 2048, extra), 2048, 73);
  rp_test_device_fill(&d, 0, 2048); /* each page once: no cleaning moves pages meanwhile */
  struct rampart_stats st;
  rp_test_device_stats(&d, &st);
  print_message("after the fill: %llu live pages unprotected\n",
                (unsigned long long)st.pages_unprotected);
  wait_quiet(&d, 30);
  rp_test_server_kill(&c.servers[0]);
  uint64_t eio = rp_test_device_verify(&d, true);
  rp_test_device_stats(&d, &st);
  print_message("refused member writes, then one server lost: %llu of 2048 pages EIO, %llu "
                "degraded reads\n", (unsigned long long)eio,
                (unsigned long long)st.pages_degraded_reads);
  assert_int_equal(eio, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

/* ---- defect 4: a group sealing while its parity server is advising --------------------- */

static unsigned server_gained_a_page(const struct rampart_stats *before,
                                     const struct rampart_stats *after)
{
  for (unsigned i = 0; i < after->nservers; i++)
    if (after->servers[i].pages_live > before->servers[i].pages_live)
      return i;
  fail_msg("no server gained a live page");
  return 0;
}

static void write_one(struct rampart_engine *e, uint8_t *shadow, uint64_t page, uint8_t fill)
{
  uint8_t buf[PAGE];
  memset(buf, fill, PAGE);
  assert_int_equal(rampart_pwrite(e, buf, PAGE, page * PAGE, 0), 0);
  memcpy(shadow + page * PAGE, buf, PAGE);
}

/* Three servers, groups of two, one page written: its group is open with that page on
 * server m. Then both other servers (one of them the group's planned parity server)
 * come under memory pressure, and the next write closes the group. Its parity must
 * still be stored, so losing server m loses nothing; sealing the group without parity
 * left the page one loss from gone. (Nothing else is written first: the mover would
 * move those pages off the advised servers through this same open group.) */
static void test_group_seals_with_its_parity_while_the_parity_server_advises(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  cluster_start(&c, 3, NULL);
  const char *extra[] = { "redundancy", "parity-log", "group", "2", "lease", "30", NULL };
  struct rp_test_device d;
  const uint64_t pages = 64;
  rp_test_device_init(&d, rp_test_engine_open(&c, pages, extra), pages, 79);
  struct rampart_stats before, st;
  rp_test_device_stats(&d, &before);
  write_one(d.engine, d.shadow, 0, 0xA5); /* opens a group: one member, parity pending */
  rp_test_device_stats(&d, &st);
  unsigned m = server_gained_a_page(&before, &st);
  for (unsigned i = 0; i < c.n; i++)
    if (i != m)
      assert_int_equal(rp_test_write_file(c.psi[i], RP_TEST_PSI_HIGH), 0);
  bool advised = false;
  for (unsigned t = 0; t < 100 && !advised; t++) {
    usleep(50000);
    rp_test_device_stats(&d, &st);
    advised = true;
    for (unsigned i = 0; i < c.n; i++)
      advised &= i == m || st.servers[i].state == RAMPART_SERVER_ADVISED;
  }
  assert_true(advised);
  write_one(d.engine, d.shadow, 1, 0x5A); /* closes the group: it seals now */
  rp_test_device_stats(&d, &st);
  assert_int_equal(st.pages_unprotected, 0); /* and no counter said otherwise */
  rp_test_server_kill(&c.servers[m]);
  uint64_t eio = rp_test_device_verify(&d, true);
  print_message("group sealed while its parity server advised, then its member's server "
                "lost: %llu of 2 pages EIO\n", (unsigned long long)eio);
  assert_int_equal(eio, 0);
  rp_test_device_free(&d);
  rp_test_cluster_stop(&c);
}

int main(void)
{
  if (!rp_test_rampartd_path())
    return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_refused_member_write_does_not_leave_its_group_believed_protected),
    cmocka_unit_test(test_group_seals_with_its_parity_while_the_parity_server_advises),
  };
  /* RAMPART_TEST_FILTER=test_name runs one test (cmocka's own glob syntax). */
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
