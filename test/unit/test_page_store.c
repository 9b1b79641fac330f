/* The server's page store (server/page_store.c): pages come back byte for byte,
 * reservations are enforced and accounted, sessions are isolated, and memory is both
 * bounded and given back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "page_store.h"

/* A page whose every byte depends on (tag, index), so a page from the wrong slot or
 * session can never compare equal by accident. */
static void fill_page(uint8_t *page, uint32_t tag)
{
  uint32_t x = tag * 2654435761u + 12345u;
  for (size_t i = 0; i < RP_PAGE_SIZE; i++) {
    x = x * 1103515245u + 12345u;
    page[i] = (uint8_t)(x >> 16);
  }
}

static void assert_page(const struct rps_store *s, const struct rps_account *a, uint64_t slot,
                        uint32_t tag)
{
  uint8_t want[RP_PAGE_SIZE];
  fill_page(want, tag);
  const uint8_t *got = NULL;
  char msg[256];
  assert_int_equal(rps_store_read(s, a, slot, &got, msg, sizeof msg), RP_OK);
  assert_non_null(got);
  assert_memory_equal(got, want, RP_PAGE_SIZE);
}

static void write_tag(struct rps_store *s, struct rps_account *a, uint64_t slot, uint32_t tag)
{
  uint8_t page[RP_PAGE_SIZE];
  char msg[256];
  fill_page(page, tag);
  assert_int_equal(rps_store_write(s, a, slot, page, msg, sizeof msg), RP_OK);
}

static enum rp_status read_status(const struct rps_store *s, const struct rps_account *a,
                                  uint64_t slot)
{
  const uint8_t *got;
  char msg[256];
  return rps_store_read(s, a, slot, &got, msg, sizeof msg);
}

static void test_write_read_back(void **state)
{
  struct rps_store *s = rps_store_create(4096);
  struct rps_account *a = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, 2000, false, msg, sizeof msg), RP_OK);
  /* Slots spread over several leaves and chunks, including both ends. */
  uint64_t slots[] = { 0, 1, 511, 512, 513, 1023, 1024, 1999 };
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
    write_tag(s, a, slots[i], (uint32_t)(100 + i));
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
    assert_page(s, a, slots[i], (uint32_t)(100 + i));
  assert_int_equal(rps_account_stored(a), 8);
  assert_int_equal(read_status(s, a, 2), RP_ERR_NOT_FOUND);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_overwrite_reuses_page(void **state)
{
  struct rps_store *s = rps_store_create(1024);
  struct rps_account *a = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, 10, false, msg, sizeof msg), RP_OK);
  write_tag(s, a, 5, 1);
  write_tag(s, a, 5, 2);
  assert_page(s, a, 5, 2);
  struct rps_store_stats st;
  rps_store_get_stats(s, &st);
  assert_int_equal(st.stored_pages, 1);
  assert_int_equal(rps_account_stored(a), 1);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_free_range(void **state)
{
  struct rps_store *s = rps_store_create(2048);
  struct rps_account *a = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, 1500, false, msg, sizeof msg), RP_OK);
  for (uint32_t i = 0; i < 1500; i += 3)
    write_tag(s, a, i, i);
  assert_int_equal(rps_account_stored(a), 500);
  /* [300, 1200) crosses leaf boundaries and includes empty slots. */
  assert_int_equal(rps_store_free(s, a, 300, 900, msg, sizeof msg), RP_OK);
  for (uint32_t i = 0; i < 1500; i += 3) {
    if (i >= 300 && i < 1200)
      assert_int_equal(read_status(s, a, i), RP_ERR_NOT_FOUND);
    else
      assert_page(s, a, i, i);
  }
  assert_int_equal(rps_account_stored(a), 200);
  /* Freeing already-empty slots is fine; a range past the reservation is not and frees
   * nothing. */
  assert_int_equal(rps_store_free(s, a, 300, 900, msg, sizeof msg), RP_OK);
  assert_int_equal(rps_store_free(s, a, 1400, 101, msg, sizeof msg), RP_ERR_OUT_OF_RANGE);
  assert_non_null(strstr(msg, "1500"));
  assert_page(s, a, 1401, 1401);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_read_of_freed_slot_not_found(void **state)
{
  struct rps_store *s = rps_store_create(64);
  struct rps_account *a = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, 8, false, msg, sizeof msg), RP_OK);
  write_tag(s, a, 7, 7);
  assert_int_equal(rps_store_free(s, a, 7, 1, msg, sizeof msg), RP_OK);
  const uint8_t *got;
  assert_int_equal(rps_store_read(s, a, 7, &got, msg, sizeof msg), RP_ERR_NOT_FOUND);
  assert_non_null(strstr(msg, "slot 7"));
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_slot_past_reservation(void **state)
{
  struct rps_store *s = rps_store_create(64);
  struct rps_account *a = rps_account_create(s);
  uint8_t page[RP_PAGE_SIZE];
  const uint8_t *got;
  char msg[256];
  fill_page(page, 1);
  /* No reservation: nothing is in range. */
  assert_int_equal(rps_store_write(s, a, 0, page, msg, sizeof msg), RP_ERR_OUT_OF_RANGE);
  assert_int_equal(rps_store_reserve(s, a, 16, false, msg, sizeof msg), RP_OK);
  assert_int_equal(rps_store_write(s, a, 16, page, msg, sizeof msg), RP_ERR_OUT_OF_RANGE);
  assert_non_null(strstr(msg, "slot 16"));
  assert_non_null(strstr(msg, "16 pages"));
  assert_int_equal(rps_store_write(s, a, RP_MAX_SLOT, page, msg, sizeof msg),
                   RP_ERR_OUT_OF_RANGE);
  assert_int_equal(rps_store_read(s, a, 16, &got, msg, sizeof msg), RP_ERR_OUT_OF_RANGE);
  assert_int_equal(rps_store_free(s, a, 10, 7, msg, sizeof msg), RP_ERR_OUT_OF_RANGE);
  assert_int_equal(rps_store_free(s, a, UINT64_MAX - 2, 5, msg, sizeof msg),
                   RP_ERR_OUT_OF_RANGE);
  assert_int_equal(rps_store_write(s, a, 15, page, msg, sizeof msg), RP_OK);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_reserve_past_capacity(void **state)
{
  struct rps_store *s = rps_store_create(1000);
  struct rps_account *a = rps_account_create(s), *b = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, 600, false, msg, sizeof msg), RP_OK);
  assert_int_equal(rps_store_reserve(s, b, 401, false, msg, sizeof msg), RP_ERR_NO_SPACE);
  assert_non_null(strstr(msg, "asked for 401 pages"));
  assert_non_null(strstr(msg, "400 free of 1000"));
  assert_non_null(strstr(msg, "--memory"));
  assert_int_equal(rps_account_reserved(b), 0);
  assert_int_equal(rps_store_reserve(s, b, 400, false, msg, sizeof msg), RP_OK);
  struct rps_store_stats st;
  rps_store_get_stats(s, &st);
  assert_int_equal(st.reserved_pages, 1000);
  assert_int_equal(st.free_pages, 0);
  /* Growing one's own reservation counts only the extra. */
  assert_int_equal(rps_store_reserve(s, a, 601, false, msg, sizeof msg), RP_ERR_NO_SPACE);
  assert_non_null(strstr(msg, "1 more"));
  assert_int_equal(rps_store_reserve(s, a, UINT64_MAX, false, msg, sizeof msg),
                   RP_ERR_NO_SPACE);
  assert_int_equal(rps_account_reserved(a), 600);
  rps_account_destroy(s, a);
  rps_account_destroy(s, b);
  rps_store_destroy(s);
}

static void test_pressure_refuses_growth_only(void **state)
{
  struct rps_store *s = rps_store_create(1000);
  struct rps_account *a = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, 100, false, msg, sizeof msg), RP_OK);
  assert_int_equal(rps_store_reserve(s, a, 101, true, msg, sizeof msg), RP_ERR_PRESSURE);
  assert_non_null(strstr(msg, "pressure"));
  assert_int_equal(rps_account_reserved(a), 100);
  assert_int_equal(rps_store_reserve(s, a, 100, true, msg, sizeof msg), RP_OK);
  assert_int_equal(rps_store_reserve(s, a, 50, true, msg, sizeof msg), RP_OK);
  assert_int_equal(rps_account_reserved(a), 50);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_sessions_isolated(void **state)
{
  struct rps_store *s = rps_store_create(1024);
  struct rps_account *a = rps_account_create(s), *b = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, 10, false, msg, sizeof msg), RP_OK);
  assert_int_equal(rps_store_reserve(s, b, 10, false, msg, sizeof msg), RP_OK);
  write_tag(s, a, 3, 0xa);
  assert_int_equal(read_status(s, b, 3), RP_ERR_NOT_FOUND);
  write_tag(s, b, 3, 0xb);
  assert_page(s, a, 3, 0xa);
  assert_page(s, b, 3, 0xb);
  assert_int_equal(rps_store_free(s, a, 0, 10, msg, sizeof msg), RP_OK);
  assert_page(s, b, 3, 0xb);
  rps_account_destroy(s, b);
  assert_int_equal(read_status(s, a, 3), RP_ERR_NOT_FOUND);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_shrink_frees(void **state)
{
  struct rps_store *s = rps_store_create(4096);
  struct rps_account *a = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, 3000, false, msg, sizeof msg), RP_OK);
  for (uint32_t i = 0; i < 3000; i += 7)
    write_tag(s, a, i, i);
  assert_int_equal(rps_store_reserve(s, a, 1000, false, msg, sizeof msg), RP_OK);
  struct rps_store_stats st;
  rps_store_get_stats(s, &st);
  assert_int_equal(st.stored_pages, (1000 + 6) / 7);
  assert_int_equal(st.reserved_pages, 1000);
  for (uint32_t i = 0; i < 1000; i += 7)
    assert_page(s, a, i, i);
  assert_int_equal(read_status(s, a, 1001), RP_ERR_OUT_OF_RANGE);
  /* Growing back does not resurrect what the shrink freed. */
  assert_int_equal(rps_store_reserve(s, a, 3000, false, msg, sizeof msg), RP_OK);
  assert_int_equal(read_status(s, a, 1001), RP_ERR_NOT_FOUND);
  assert_int_equal(read_status(s, a, 2002), RP_ERR_NOT_FOUND);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_capacity_returned_after_session_free(void **state)
{
  struct rps_store *s = rps_store_create(2048);
  struct rps_account *a = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, 2048, false, msg, sizeof msg), RP_OK);
  for (uint32_t i = 0; i < 2048; i++)
    write_tag(s, a, i, i);
  struct rps_store_stats st;
  rps_store_get_stats(s, &st);
  assert_int_equal(st.free_pages, 0);
  assert_int_equal(st.stored_pages, 2048);
  assert_int_equal(st.chunks_mapped, 4);
  rps_account_destroy(s, a);
  rps_store_get_stats(s, &st);
  assert_int_equal(st.free_pages, 2048);
  assert_int_equal(st.reserved_pages, 0);
  assert_int_equal(st.stored_pages, 0);
  /* Memory goes back to the host: at most one empty chunk stays mapped. */
  assert_true(st.chunks_mapped <= 1);
  struct rps_account *b = rps_account_create(s);
  assert_int_equal(rps_store_reserve(s, b, 2048, false, msg, sizeof msg), RP_OK);
  write_tag(s, b, 2047, 9);
  assert_page(s, b, 2047, 9);
  rps_account_destroy(s, b);
  rps_store_destroy(s);
}

static void test_resident_bytes_per_page(void **state)
{
  const uint64_t capacity = 64 * RPS_CHUNK_PAGES;
  struct rps_store *s = rps_store_create(capacity);
  struct rps_store_stats empty, full;
  rps_store_get_stats(s, &empty);
  /* Nothing mapped yet: only the chunk index and the warm pool's list of page ids. */
  assert_int_equal(empty.chunks_mapped, 0);
  assert_true(empty.resident_bytes < 4096 + RPS_WARM_PAGES * sizeof(uint64_t));

  struct rps_account *a = rps_account_create(s);
  char msg[256];
  /* A huge sparse reservation costs a root table (8 bytes per 512 slots), no leaves. */
  assert_int_equal(rps_store_reserve(s, a, capacity, false, msg, sizeof msg), RP_OK);
  struct rps_store_stats reserved;
  rps_store_get_stats(s, &reserved);
  assert_int_equal(reserved.chunks_mapped, 0);
  assert_true(reserved.resident_bytes - empty.resident_bytes <= capacity / 512 * 8 + 64);

  const uint64_t n = 10 * RPS_CHUNK_PAGES;
  for (uint64_t i = 0; i < n; i++)
    write_tag(s, a, i, (uint32_t)i);
  rps_store_get_stats(s, &full);
  assert_int_equal(full.stored_pages, n);
  assert_int_equal(full.chunks_mapped, 10);
  uint64_t per_page = (full.resident_bytes - reserved.resident_bytes) / n;
  /* 4096 bytes of data plus ~8 of slot table and ~2 of chunk free stack. */
  assert_true(per_page >= RP_PAGE_SIZE);
  assert_true(per_page <= RP_PAGE_SIZE + 16);
  assert_true(full.resident_bytes >= n * RP_PAGE_SIZE);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

/* The process's resident set, from /proc/self/statm (pages). */
static uint64_t process_resident_bytes(void)
{
  unsigned long size = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  assert_non_null(f);
  assert_int_equal(fscanf(f, "%lu %lu", &size, &resident), 2);
  fclose(f);
  return (uint64_t)resident * 4096u;
}

/* A store of `capacity` pages, one account reserving all of it, the first `written`
 * slots written with their own index as tag. */
static struct rps_store *store_written(uint64_t capacity, uint64_t written,
                                       struct rps_account **acct)
{
  struct rps_store *s = rps_store_create(capacity);
  assert_non_null(s);
  struct rps_account *a = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, capacity, false, msg, sizeof msg), RP_OK);
  for (uint64_t i = 0; i < written; i++)
    write_tag(s, a, i, (uint32_t)i);
  *acct = a;
  return s;
}

static void test_freed_pages_go_back_to_the_host(void **state)
{
  /* Parity-log cleaning frees pages all over the pool, so chunks rarely empty: freeing
   * every other page of 16 chunks must still hand half their memory back. */
  const uint64_t n = 16 * RPS_CHUNK_PAGES;
  struct rps_account *a;
  struct rps_store *s = store_written(n, n, &a);
  char msg[256];
  uint64_t rss_full = process_resident_bytes();
  for (uint64_t i = 0; i < n; i += 2)
    assert_int_equal(rps_store_free(s, a, i, 1, msg, sizeof msg), RP_OK);
  uint64_t rss_half = process_resident_bytes();
  struct rps_store_stats st;
  rps_store_get_stats(s, &st);
  assert_int_equal(st.chunks_mapped, 16); /* no chunk emptied */
  assert_int_equal(st.stored_pages, n / 2);
  /* The warm pool keeps a sixteenth of this small store mapped for reuse; no more. */
  assert_int_equal(st.warm_pages, n / 16);
  uint64_t released = n / 2 - st.warm_pages;
  assert_true(st.resident_bytes >= (n / 2 + st.warm_pages) * RP_PAGE_SIZE);
  assert_true(st.resident_bytes <= (n / 2 + st.warm_pages) * RP_PAGE_SIZE + n * 16);
  /* The kernel agrees: the rest (14 MiB) was released (allow a little for the test). */
  assert_true(rss_half + released * RP_PAGE_SIZE * 9 / 10 <= rss_full);
  /* Reused slots come back zeroed by the kernel and then hold what was written. */
  for (uint64_t i = 0; i < n; i += 2)
    write_tag(s, a, i, (uint32_t)(i + 7));
  for (uint64_t i = 0; i < n; i++)
    assert_page(s, a, i, (uint32_t)(i % 2 ? i : i + 7));
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_a_freed_run_goes_back_and_spares_its_neighbours(void **state)
{
  /* A FREE of many slots gives their pages back in runs of adjacent pages: the run
   * must cover exactly the freed pages, never a neighbour still stored. */
  const uint64_t n = 4 * RPS_CHUNK_PAGES, from = 100, count = 3 * RPS_CHUNK_PAGES;
  struct rps_account *a;
  struct rps_store *s = store_written(n, n, &a);
  char msg[256];
  uint64_t rss_full = process_resident_bytes();
  assert_int_equal(rps_store_free(s, a, from, count, msg, sizeof msg), RP_OK);
  uint64_t rss_freed = process_resident_bytes();
  struct rps_store_stats st;
  rps_store_get_stats(s, &st);
  assert_int_equal(st.stored_pages, n - count);
  assert_int_equal(st.warm_pages, n / 16);
  uint64_t released = count - st.warm_pages;
  assert_true(rss_freed + released * RP_PAGE_SIZE * 9 / 10 <= rss_full);
  for (uint64_t i = 0; i < n; i++) {
    if (i >= from && i < from + count)
      assert_int_equal(read_status(s, a, i), RP_ERR_NOT_FOUND);
    else
      assert_page(s, a, i, (uint32_t)i);
  }
  for (uint64_t i = from; i < from + count; i++)
    write_tag(s, a, i, (uint32_t)(i + 11));
  for (uint64_t i = 0; i < n; i++)
    assert_page(s, a, i, (uint32_t)(i >= from && i < from + count ? i + 11 : i));
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_warm_pages_are_reused_without_faults(void **state)
{
  /* Under parity-log churn a client frees about a page for every page it writes: the
   * next writes take the freed pages, still mapped, instead of faulting in new ones. */
  const uint64_t n = 4 * RPS_CHUNK_PAGES, churn = n / 16; /* the warm pool's bound */
  struct rps_account *a;
  struct rps_store *s = store_written(n, n / 2, &a);
  char msg[256];
  assert_int_equal(rps_store_free(s, a, 0, churn, msg, sizeof msg), RP_OK);
  struct rps_store_stats st;
  rps_store_get_stats(s, &st);
  assert_int_equal(st.warm_pages, churn);
  assert_int_equal(st.stored_pages, n / 2 - churn);
  uint64_t rss_before = process_resident_bytes();
  /* New slots, never written: without the pool each would fault in a fresh page. */
  for (uint64_t i = n / 2; i < n / 2 + churn; i++)
    write_tag(s, a, i, (uint32_t)(i * 3));
  uint64_t rss_after = process_resident_bytes();
  rps_store_get_stats(s, &st);
  assert_int_equal(st.warm_pages, 0);
  assert_int_equal(st.stored_pages, n / 2);
  assert_true(rss_after < rss_before + churn * RP_PAGE_SIZE / 4);
  /* A reused page holds the new write in full, nothing of the freed one. */
  for (uint64_t i = n / 2; i < n / 2 + churn; i++)
    assert_page(s, a, i, (uint32_t)(i * 3));
  for (uint64_t i = 0; i < churn; i++)
    assert_int_equal(read_status(s, a, i), RP_ERR_NOT_FOUND);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_pressure_empties_the_warm_pool(void **state)
{
  const uint64_t n = 4 * RPS_CHUNK_PAGES;
  struct rps_account *a;
  struct rps_store *s = store_written(n, n, &a);
  char msg[256];
  /* Free more than the pool holds: the pool stops at its bound, the rest goes back. */
  assert_int_equal(rps_store_free(s, a, 0, n / 2, msg, sizeof msg), RP_OK);
  struct rps_store_stats st;
  rps_store_get_stats(s, &st);
  assert_int_equal(st.warm_pages, n / 16);
  uint64_t rss_warm = process_resident_bytes();
  rps_store_keep_warm(s, false);
  rps_store_get_stats(s, &st);
  assert_int_equal(st.warm_pages, 0);
  assert_true(process_resident_bytes() + n / 16 * RP_PAGE_SIZE * 9 / 10 <= rss_warm);
  /* While the pressure lasts, frees keep nothing. */
  assert_int_equal(rps_store_free(s, a, n / 2, 8, msg, sizeof msg), RP_OK);
  rps_store_get_stats(s, &st);
  assert_int_equal(st.warm_pages, 0);
  rps_store_keep_warm(s, true);
  assert_int_equal(rps_store_free(s, a, n / 2 + 8, 8, msg, sizeof msg), RP_OK);
  rps_store_get_stats(s, &st);
  assert_int_equal(st.warm_pages, 8);
  assert_int_equal(st.stored_pages, n / 2 - 16);
  for (uint64_t i = n / 2 + 16; i < n; i++)
    assert_page(s, a, i, (uint32_t)i);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_last_chunk_is_short(void **state)
{
  /* Capacity not a multiple of a chunk: the last chunk must not map past it. */
  struct rps_store *s = rps_store_create(RPS_CHUNK_PAGES + 3);
  struct rps_account *a = rps_account_create(s);
  char msg[256];
  assert_int_equal(rps_store_reserve(s, a, RPS_CHUNK_PAGES + 3, false, msg, sizeof msg),
                   RP_OK);
  for (uint32_t i = 0; i < RPS_CHUNK_PAGES + 3; i++)
    write_tag(s, a, i, i);
  struct rps_store_stats st;
  rps_store_get_stats(s, &st);
  assert_int_equal(st.chunks_mapped, 2);
  assert_true(st.resident_bytes < (uint64_t)(RPS_CHUNK_PAGES + 3) * RP_PAGE_SIZE + 16384);
  for (uint32_t i = 0; i < RPS_CHUNK_PAGES + 3; i++)
    assert_page(s, a, i, i);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

static void test_churn_keeps_counts(void **state)
{
  /* Random writes and frees against a shadow copy: counts and contents always agree. */
  enum { CAP = 1500, SLOTS = 1200 };
  struct rps_store *s = rps_store_create(CAP);
  struct rps_account *a = rps_account_create(s);
  char msg[256];
  uint32_t *shadow = calloc(SLOTS, sizeof *shadow); /* 0 = empty, else tag */
  assert_non_null(shadow);
  assert_int_equal(rps_store_reserve(s, a, SLOTS, false, msg, sizeof msg), RP_OK);
  uint32_t x = 42;
  uint64_t live = 0;
  for (int step = 0; step < 20000; step++) {
    x = x * 1664525u + 1013904223u;
    uint32_t slot = (x >> 8) % SLOTS;
    if ((x & 3) != 0) {
      if (!shadow[slot])
        live++;
      shadow[slot] = (uint32_t)step + 1;
      write_tag(s, a, slot, shadow[slot]);
    } else {
      uint32_t count = 1 + (x >> 24) % 40;
      if (slot + count > SLOTS)
        count = SLOTS - slot;
      assert_int_equal(rps_store_free(s, a, slot, count, msg, sizeof msg), RP_OK);
      for (uint32_t i = slot; i < slot + count; i++)
        if (shadow[i]) {
          shadow[i] = 0;
          live--;
        }
    }
  }
  assert_int_equal(rps_account_stored(a), live);
  for (uint32_t i = 0; i < SLOTS; i++) {
    if (shadow[i])
      assert_page(s, a, i, shadow[i]);
    else
      assert_int_equal(read_status(s, a, i), RP_ERR_NOT_FOUND);
  }
  free(shadow);
  rps_account_destroy(s, a);
  rps_store_destroy(s);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_write_read_back),
    cmocka_unit_test(test_overwrite_reuses_page),
    cmocka_unit_test(test_free_range),
    cmocka_unit_test(test_read_of_freed_slot_not_found),
    cmocka_unit_test(test_slot_past_reservation),
    cmocka_unit_test(test_reserve_past_capacity),
    cmocka_unit_test(test_pressure_refuses_growth_only),
    cmocka_unit_test(test_sessions_isolated),
    cmocka_unit_test(test_shrink_frees),
    cmocka_unit_test(test_capacity_returned_after_session_free),
    cmocka_unit_test(test_resident_bytes_per_page),
    cmocka_unit_test(test_freed_pages_go_back_to_the_host),
    cmocka_unit_test(test_a_freed_run_goes_back_and_spares_its_neighbours),
    cmocka_unit_test(test_warm_pages_are_reused_without_faults),
    cmocka_unit_test(test_pressure_empties_the_warm_pool),
    cmocka_unit_test(test_last_chunk_is_short),
    cmocka_unit_test(test_churn_keeps_counts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
