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
    cmocka_unit_test(test_group_seals_with_its_parity_while_the_parity_server_advises),
  };
  /* RAMPART_TEST_FILTER=test_name runs one test (cmocka's own glob syntax). */
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
