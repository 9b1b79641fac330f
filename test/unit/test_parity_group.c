/* Parity log bookkeeping and XOR: any one member of a sealed or still-open group can be
 * rebuilt from the others and the (partial) parity; groups are reclaimed exactly when
 * their last live member dies after sealing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "page_map.h"
#include "parity_group.h"
#include "rampart.h"

static _Alignas(64) uint8_t pages[GROUP_MAX_DATA][RAMPART_PAGE_SIZE];
static _Alignas(64) uint8_t parity[RAMPART_PAGE_SIZE];
static _Alignas(64) uint8_t rebuilt[RAMPART_PAGE_SIZE];

static void fill_random(uint8_t *p, unsigned seed)
{
  srand(seed);
  for (size_t i = 0; i < RAMPART_PAGE_SIZE; i++)
    p[i] = (uint8_t)rand();
}

/* Rebuilds member `lost` of the first `members` pages from the others and parity. */
static void rebuild_member(unsigned members, unsigned lost)
{
  memcpy(rebuilt, parity, sizeof rebuilt);
  for (unsigned m = 0; m < members; m++)
    if (m != lost)
      parity_xor_page(rebuilt, pages[m]);
}

static void test_xor_rebuilds_any_member_of_sealed_group(void **state)
{
  (void)state;
  for (unsigned s = 1; s <= GROUP_MAX_DATA; s++) {
    memset(parity, 0, sizeof parity);
    for (unsigned m = 0; m < s; m++) {
      fill_random(pages[m], 1000 * s + m);
      parity_xor_page(parity, pages[m]);
    }
    for (unsigned lost = 0; lost < s; lost++) {
      rebuild_member(s, lost);
      assert_memory_equal(rebuilt, pages[lost], RAMPART_PAGE_SIZE);
    }
  }
}

static void test_xor_rebuilds_member_of_open_group_from_partial_parity(void **state)
{
  (void)state;
  /* Group of 4 with only 3 members so far: the client's partial parity covers them. */
  memset(parity, 0, sizeof parity);
  for (unsigned m = 0; m < 3; m++) {
    fill_random(pages[m], 77 + m);
    parity_xor_page(parity, pages[m]);
  }
  for (unsigned lost = 0; lost < 3; lost++) {
    rebuild_member(3, lost);
    assert_memory_equal(rebuilt, pages[lost], RAMPART_PAGE_SIZE);
  }
}

static void test_xor_with_one_member_is_a_mirror(void **state)
{
  (void)state;
  memset(parity, 0, sizeof parity);
  fill_random(pages[0], 5);
  parity_xor_page(parity, pages[0]);
  assert_memory_equal(parity, pages[0], RAMPART_PAGE_SIZE);
}

static void test_wrong_member_does_not_rebuild(void **state)
{
  (void)state;
  /* A rebuild that leaves out the wrong member must not produce the lost page: the XOR
   * really depends on every member. */
  memset(parity, 0, sizeof parity);
  for (unsigned m = 0; m < 4; m++) {
    fill_random(pages[m], 300 + m);
    parity_xor_page(parity, pages[m]);
  }
  rebuild_member(4, 1);
  assert_memory_not_equal(rebuilt, pages[2], RAMPART_PAGE_SIZE);
}

static void test_xor_works_at_any_alignment(void **state)
{
  (void)state;
  /* Unaligned NBD writes hand the engine pages at odd addresses. */
  static uint8_t a[RAMPART_PAGE_SIZE + 16], b[RAMPART_PAGE_SIZE + 16];
  fill_random(pages[0], 41);
  fill_random(pages[1], 42);
  memcpy(a + 3, pages[0], RAMPART_PAGE_SIZE);
  memcpy(b + 7, pages[1], RAMPART_PAGE_SIZE);
  parity_xor_page(a + 3, b + 7);
  memcpy(parity, pages[0], RAMPART_PAGE_SIZE);
  parity_xor_page(parity, pages[1]);
  assert_memory_equal(a + 3, parity, RAMPART_PAGE_SIZE);
}

static void test_group_lifecycle_and_reclaim(void **state)
{
  (void)state;
  struct group_table t;
  struct page_map map;
  assert_int_equal(group_table_init(&t, 2), 0);
  assert_int_equal(page_map_init(&map, 64), 0);

  uint32_t id = group_open(&t, 4, true, 7);
  assert_int_not_equal(id, GROUP_NONE);
  for (unsigned i = 0; i < 4; i++) {
    unsigned m = group_add_member(&t, id, (server_index)i, 100 + i, 10 + i);
    assert_int_equal(m, i);
    page_map_set(&map, 10 + i, page_entry_remote(id, m));
  }
  struct group *g = group_get(&t, id);
  assert_true(group_is_full(g));
  assert_int_equal(group_stored_pages(g), 4);
  group_begin_seal(&t, id, 4, 200);
  assert_int_equal(group_stored_pages(g), 5);
  assert_int_equal(group_finish_seal(&t, id), 7);
  assert_int_equal(g->state, GROUP_SEALED);

  /* Rewriting three pages elsewhere leaves the group alive; the fourth reclaims it. */
  for (unsigned i = 0; i < 3; i++) {
    page_map_set(&map, 10 + i, page_entry_slot(PAGE_SPILL, i));
    assert_false(group_member_is_live(&t, &map, id, i));
    assert_false(group_member_dead(&t, id, i));
  }
  assert_true(group_member_is_live(&t, &map, id, 3));
  assert_true(group_member_dead(&t, id, 3));
  group_release(&t, id);
  assert_int_equal(t.in_use, 0);
  assert_int_equal(t.reclaimed, 1);

  /* The released record is reused first. */
  uint32_t first = group_open(&t, 2, false, GROUP_NO_BUFFER);
  assert_int_equal(first, id);
  /* The table grows past its first chunk, and a group pointer taken before the growth
   * still points at the same group (callers up the stack rely on it). */
  struct group *held = group_get(&t, first);
  group_add_member(&t, first, 3, 33, 333);
  for (unsigned i = 1; i < GROUP_CHUNK_SIZE + 10; i++)
    assert_int_not_equal(group_open(&t, 2, false, GROUP_NO_BUFFER), GROUP_NONE);
  assert_true(t.count > GROUP_CHUNK_SIZE);
  assert_ptr_equal(held, group_get(&t, first));
  assert_int_equal(held->slot[0], 33);
  assert_int_equal(t.in_use, GROUP_CHUNK_SIZE + 10);
  group_table_destroy(&t);
  page_map_destroy(&map);
}

/* Server indices past a byte (16-bit server_index): each member and the parity keep the
 * index they were placed with, the ones not yet placed say SERVER_INDEX_NONE, and a
 * member rebuilt from the others is byte for byte the page that was lost. */
static void test_server_indices_past_255_are_kept(void **state)
{
  (void)state;
  static const server_index where[GROUP_MAX_DATA] = {
    256, 300, 1000, 4095, 0, 255, 511, 4094
  };
  struct group_table t;
  struct page_map map;
  assert_int_equal(group_table_init(&t, 1), 0);
  assert_int_equal(page_map_init(&map, 64), 0);
  uint32_t id = group_open(&t, GROUP_MAX_DATA, true, 3);
  struct group *g = group_get(&t, id);
  for (unsigned i = 0; i <= GROUP_MAX_DATA; i++)
    assert_int_equal(g->server[i], SERVER_INDEX_NONE);
  memset(parity, 0, sizeof parity);
  for (unsigned i = 0; i < GROUP_MAX_DATA; i++) {
    for (unsigned b = 0; b < RAMPART_PAGE_SIZE; b++)
      pages[i][b] = (uint8_t)(b * 7 + i * 31 + where[i]);
    parity_xor_page(parity, pages[i]);
    unsigned m = group_add_member(&t, id, where[i], 40 + i, 20 + i);
    page_map_set(&map, 20 + i, page_entry_remote(id, m));
    assert_int_equal(g->server[GROUP_MAX_DATA], SERVER_INDEX_NONE);
  }
  group_begin_seal(&t, id, 3000, 77);
  assert_int_equal(group_finish_seal(&t, id), 3);
  for (unsigned i = 0; i < GROUP_MAX_DATA; i++) {
    assert_int_equal(g->server[i], where[i]);
    assert_int_equal(g->slot[i], 40 + i);
    assert_true(group_member_is_live(&t, &map, id, i));
  }
  assert_int_equal(g->server[g->capacity], 3000);
  assert_int_equal(g->slot[g->capacity], 77);

  /* The member on server 4095 lost: the parity and the other seven give it back. */
  unsigned lost = GROUP_MAX_DATA;
  for (unsigned i = 0; i < GROUP_MAX_DATA; i++)
    if (g->server[i] == 4095)
      lost = i;
  assert_int_equal(lost, 3);
  rebuild_member(GROUP_MAX_DATA, lost);
  assert_memory_equal(rebuilt, pages[3], RAMPART_PAGE_SIZE);
  group_table_destroy(&t);
  page_map_destroy(&map);
}

static void test_open_group_emptied_is_not_reclaimed_before_seal(void **state)
{
  (void)state;
  struct group_table t;
  assert_int_equal(group_table_init(&t, 4), 0);
  uint32_t id = group_open(&t, 2, true, 0);
  group_add_member(&t, id, 0, 1, 1);
  /* Its only member dies while the group is still open: the parity buffer still
   * protects it, so it must not be reclaimed yet. */
  assert_false(group_member_dead(&t, id, 0));
  group_add_member(&t, id, 1, 1, 2);
  assert_false(group_member_dead(&t, id, 1));
  group_begin_seal(&t, id, 2, 1);
  group_finish_seal(&t, id);
  assert_int_equal(group_get(&t, id)->live, 0);
  group_table_destroy(&t);
}

static void test_live_ratio(void **state)
{
  (void)state;
  struct group_table t;
  assert_int_equal(group_table_init(&t, 4), 0);
  assert_true(group_table_live_ratio(&t) == 1.0);
  uint32_t id = group_open(&t, 4, false, GROUP_NO_BUFFER);
  for (unsigned i = 0; i < 4; i++)
    group_add_member(&t, id, (server_index)i, i, i);
  group_seal_without_parity(&t, id);
  group_member_dead(&t, id, 0);
  assert_true(group_table_live_ratio(&t) == 0.75);
  group_table_destroy(&t);
}

/* Cleaning picks its victims from the count of sealed groups by live count: it follows
 * every seal, member death and release, and a recount from the groups agrees with it. */
static void test_sealed_groups_counted_by_live(void **state)
{
  (void)state;
  struct group_table t;
  assert_int_equal(group_table_init(&t, 4), 0);
  uint32_t a = group_open(&t, 4, true, 0), b = group_open(&t, 4, false, GROUP_NO_BUFFER);
  for (unsigned i = 0; i < 4; i++) {
    group_add_member(&t, a, (server_index)i, i, i);
    group_add_member(&t, b, (server_index)i, 10 + i, 10 + i);
  }
  group_member_dead(&t, a, 0); /* while open: not a sealed group's yet */
  assert_int_equal(t.sealed_by_live[3], 0);
  group_begin_seal(&t, a, 4, 9);
  group_finish_seal(&t, a);
  group_seal_without_parity(&t, b);
  assert_int_equal(t.sealed_by_live[3], 1);
  assert_int_equal(t.sealed_by_live[4], 1);
  group_member_dead(&t, b, 1);
  group_member_dead(&t, b, 2);
  group_member_dead(&t, a, 3);
  assert_int_equal(t.sealed_by_live[2], 2);
  assert_int_equal(t.sealed_by_live[3], 0);
  assert_int_equal(t.sealed_by_live[4], 0);
  group_member_dead(&t, a, 1);
  assert_false(group_member_dead(&t, b, 0));
  assert_true(group_member_dead(&t, a, 2));
  assert_int_equal(t.sealed_by_live[0], 1);
  group_release(&t, a);
  uint32_t counted[GROUP_MAX_DATA + 1];
  memcpy(counted, t.sealed_by_live, sizeof counted);
  assert_int_equal(counted[0], 0);
  assert_int_equal(counted[1], 1);
  group_table_count_sealed(&t);
  assert_memory_equal(counted, t.sealed_by_live, sizeof counted);
  group_table_destroy(&t);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_xor_rebuilds_any_member_of_sealed_group),
    cmocka_unit_test(test_xor_rebuilds_member_of_open_group_from_partial_parity),
    cmocka_unit_test(test_xor_with_one_member_is_a_mirror),
    cmocka_unit_test(test_wrong_member_does_not_rebuild),
    cmocka_unit_test(test_xor_works_at_any_alignment),
    cmocka_unit_test(test_group_lifecycle_and_reclaim),
    cmocka_unit_test(test_server_indices_past_255_are_kept),
    cmocka_unit_test(test_open_group_emptied_is_not_reclaimed_before_seal),
    cmocka_unit_test(test_live_ratio),
    cmocka_unit_test(test_sealed_groups_counted_by_live),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
