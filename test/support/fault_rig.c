/* Test helper: the fault-injection rig (fault_rig.h). */
#include "fault_rig.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

void rig_open(struct rig *r, const char *const *base, const char *redundancy,
              const char *const *extra, uint64_t pages, uint64_t seed)
{
  const char *settings[32] = { "redundancy", redundancy };
  unsigned n = 2;
  for (unsigned i = 0; base[i]; i++)
    settings[n++] = base[i];
  if (strcmp(redundancy, "parity-log") == 0) {
    settings[n++] = "group";
    settings[n++] = "4";
  }
  for (unsigned i = 0; extra && extra[i]; i++)
    settings[n++] = extra[i];
  assert_true(n < sizeof settings / sizeof settings[0]);
  settings[n] = NULL;
  assert_int_equal(rp_test_cluster_start(&r->cluster, 5, "64M", NULL), 0);
  rp_test_device_init(&r->dev, rp_test_engine_open(&r->cluster, pages, settings), pages,
                      seed);
  r->faults = rp_test_faults_install(r->dev.engine);
  rp_test_device_fill(&r->dev, 0, pages);
}

void rig_expect_every_page_but(struct rig *r, uint64_t lost)
{
  wait_settled(r, 30);
  assert_int_equal(rp_test_device_verify(&r->dev, false), 0);
  struct rampart_stats st;
  rp_test_device_stats(&r->dev, &st);
  assert_int_equal(st.pages_lost, lost);
  assert_int_equal(st.pages_unprotected, 0);
}

void rig_stop(struct rig *r)
{
  rp_test_faults_remove(r->faults);
  rp_test_device_free(&r->dev);
  rp_test_cluster_stop(&r->cluster);
}

void rig_print_stats(struct rig *r)
{
  static char report[16384];
  struct rampart_stats st;
  rp_test_device_stats(&r->dev, &st);
  rampart_format_stats(&st, report, sizeof report);
  print_message("%s", report);
}

void wait_settled(struct rig *r, unsigned timeout_s)
{
  struct rampart_stats st;
  unsigned quiet = 0;
  for (unsigned i = 0; i < timeout_s * 10 && quiet < 5; i++) {
    rp_test_device_stats(&r->dev, &st);
    bool calm = st.moves_in_flight == 0 && st.ops_waiting == 0 && st.requests_waiting == 0 &&
                st.pages_unprotected == 0 && st.servers_reconnecting == 0;
    unsigned up = 0;
    for (unsigned s = 0; s < st.nservers; s++) {
      up += st.servers[s].state == RAMPART_SERVER_UP;
      calm &= st.servers[s].state == RAMPART_SERVER_UP ||
              st.servers[s].state == RAMPART_SERVER_LOST;
    }
    calm &= up == r->cluster.n;
    quiet = calm ? quiet + 1 : 0;
    usleep(100000);
  }
  if (quiet < 5) {
    rig_print_stats(r);
    fail_msg("the engine did not settle in %u s", timeout_s);
  }
}
