/* The order new pages visit the servers in: every server exactly once per sweep (so
 * placement stays even), and a server's neighbours in that order change from sweep to
 * sweep (so a lost server's groups, and the rebuild's reads, reach the whole cluster). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "placement_order.h"

/* Takes every server of one sweep, in order, into sweep[]. */
static void take_sweep(struct placement_order *o, unsigned n, unsigned *sweep)
{
  for (unsigned p = 0; p < n; p++) {
    placement_order_begin(o, n);
    sweep[p] = placement_order_candidate(o, 0);
    placement_order_taken(o, 0);
  }
}

static void test_every_sweep_visits_every_server_once(void **state)
{
  (void)state;
  static const unsigned sizes[] = { 1, 2, 5, 64, 200, PLACEMENT_MAX_SERVERS };
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    unsigned n = sizes[s];
    struct placement_order o;
    memset(&o, 0, sizeof o);
    for (unsigned round = 0; round < 20; round++) {
      unsigned sweep[PLACEMENT_MAX_SERVERS];
      bool seen[PLACEMENT_MAX_SERVERS] = { false };
      take_sweep(&o, n, sweep);
      for (unsigned p = 0; p < n; p++) {
        assert_true(sweep[p] < n);
        assert_false(seen[sweep[p]]);
        seen[sweep[p]] = true;
      }
    }
  }
}

static void test_candidates_from_any_position_name_every_server(void **state)
{
  (void)state;
  struct placement_order o;
  memset(&o, 0, sizeof o);
  const unsigned n = 64;
  for (unsigned step = 0; step < 3 * n; step++) {
    placement_order_begin(&o, n);
    bool seen[64] = { false };
    for (unsigned k = 0; k < n; k++) {
      unsigned c = placement_order_candidate(&o, k);
      assert_false(seen[c]);
      seen[c] = true;
    }
    placement_order_taken(&o, step % 3); /* skip some, as placement skips busy servers */
  }
}

/* Groups of 8 consecutive picks over 64 servers: across the sweeps one server sees
 * nearly every other as a group-mate. In one fixed cyclic order it would see 14. */
static void test_a_servers_group_mates_spread_over_the_cluster(void **state)
{
  (void)state;
  const unsigned n = 64, group = 8, sweeps = 64;
  struct placement_order o;
  memset(&o, 0, sizeof o);
  bool mate[64] = { false };
  for (unsigned r = 0; r < sweeps; r++) {
    unsigned sweep[64];
    take_sweep(&o, n, sweep);
    for (unsigned first = 0; first < n; first += group)
      for (unsigned a = first; a < first + group; a++)
        if (sweep[a] == 0)
          for (unsigned b = first; b < first + group; b++)
            mate[sweep[b]] |= b != a;
  }
  unsigned mates = 0;
  for (unsigned i = 1; i < n; i++)
    mates += mate[i];
  print_message("server 0 shared a group with %u of the other %u servers over %u sweeps\n",
                mates, n - 1, sweeps);
  assert_true(mates >= 55);
}

static void test_a_change_in_the_number_of_servers_starts_a_new_sweep(void **state)
{
  (void)state;
  struct placement_order o;
  memset(&o, 0, sizeof o);
  placement_order_begin(&o, 4);
  placement_order_taken(&o, 0);
  placement_order_begin(&o, 5); /* a server joined mid-sweep */
  bool seen[5] = { false };
  for (unsigned k = 0; k < 5; k++)
    seen[placement_order_candidate(&o, k)] = true;
  for (unsigned i = 0; i < 5; i++)
    assert_true(seen[i]);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_every_sweep_visits_every_server_once),
    cmocka_unit_test(test_candidates_from_any_position_name_every_server),
    cmocka_unit_test(test_a_servers_group_mates_spread_over_the_cluster),
    cmocka_unit_test(test_a_change_in_the_number_of_servers_starts_a_new_sweep),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
