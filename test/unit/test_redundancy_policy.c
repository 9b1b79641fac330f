/* The redundancy policy table (src/engine/redundancy_policy.c): every policy a device can
 * run has a row, and the rows agree with what the engine promises of each policy
 * (docs/engine.md's table): a wrong row would change a read's fallback or a write's
 * completion for every page of that policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "redundancy_policy.h"

static void test_every_effective_policy_has_its_own_row(void **state)
{
  (void)state;
  static const enum rampart_redundancy all[] = {
    RAMPART_REDUNDANCY_NONE,
    RAMPART_REDUNDANCY_MIRROR,
    RAMPART_REDUNDANCY_PARITY_LOG,
    RAMPART_REDUNDANCY_WRITE_THROUGH,
  };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    const struct redundancy_policy *p = redundancy_policy_of(all[i]);
    assert_non_null(p);
    assert_int_equal(p->id, all[i]);
    assert_non_null(p->while_server_away);
    assert_non_null(p->no_second_copy);
  }
  /* auto is resolved before the engine looks (rampart_config_effective). */
  assert_null(redundancy_policy_of(RAMPART_REDUNDANCY_AUTO));
}

/* What `auto` resolves to, for any number of servers, has a row. */
static void test_auto_always_resolves_to_a_row(void **state)
{
  (void)state;
  for (unsigned n = 0; n <= 8; n++) {
    struct rampart_config c;
    memset(&c, 0, sizeof c);
    c.nservers = n;
    enum rampart_redundancy r;
    unsigned group;
    rampart_config_effective(&c, &r, &group);
    assert_non_null(redundancy_policy_of(r));
  }
}

static void test_rows_say_what_each_policy_promises(void **state)
{
  (void)state;
  const struct redundancy_policy *none = redundancy_policy_of(RAMPART_REDUNDANCY_NONE);
  const struct redundancy_policy *mirror = redundancy_policy_of(RAMPART_REDUNDANCY_MIRROR);
  const struct redundancy_policy *pl = redundancy_policy_of(RAMPART_REDUNDANCY_PARITY_LOG);
  const struct redundancy_policy *wt = redundancy_policy_of(RAMPART_REDUNDANCY_WRITE_THROUGH);

  /* A lost member is rebuilt from its group's parity under parity-log and mirror. */
  assert_true(pl->parity && mirror->parity);
  assert_int_equal(pl->second_copy, SECOND_COPY_PARITY);
  assert_int_equal(mirror->second_copy, SECOND_COPY_PARITY);
  assert_int_equal(redundancy_policy_servers_needed(pl), 2);
  assert_int_equal(redundancy_policy_servers_needed(mirror), 2);
  /* Parity-log completes a write when its member is stored (the client's open parity
   * covers it); mirror only once the copy is stored too. */
  assert_false(pl->write_waits_for_parity);
  assert_true(mirror->write_waits_for_parity);

  /* none keeps nothing else: a read without its server waits or fails. */
  assert_false(none->parity);
  assert_false(none->disk_copy);
  assert_int_equal(none->second_copy, SECOND_COPY_NONE);
  assert_int_equal(redundancy_policy_servers_needed(none), 1);

  /* write-through: the disk copy is the second copy; it is synced by a flush, is the
   * page when a write's server never answers (so the write does not wait), and a page
   * in the spill store is at its own slot for good. */
  assert_true(wt->disk_copy);
  assert_int_equal(wt->second_copy, SECOND_COPY_DISK);
  assert_true(wt->flush_syncs_disk);
  assert_false(wt->unanswered_write_waits);
  assert_false(wt->spilled_pages_move_back);

  /* Without a disk copy a flush has nothing to sync, a write waits out a blip, and a
   * spilled page goes back to a server with room. */
  const struct redundancy_policy *remote_only[] = { none, mirror, pl };
  for (size_t i = 0; i < 3; i++) {
    assert_false(remote_only[i]->disk_copy);
    assert_false(remote_only[i]->flush_syncs_disk);
    assert_true(remote_only[i]->unanswered_write_waits);
    assert_true(remote_only[i]->spilled_pages_move_back);
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_every_effective_policy_has_its_own_row),
    cmocka_unit_test(test_auto_always_resolves_to_a_row),
    cmocka_unit_test(test_rows_say_what_each_policy_promises),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
