/* The spill store's slot quarantine (src/stores/spill_quarantine.c) against a real spill store:
 * a freed slot must not be handed out again while any I/O that touched it may still be
 * in flight. io_uring orders nothing between two requests to the same offset, so a write
 * of a page's old version still in flight when its slot is reused could land after the
 * new page's write and leave another page's bytes in the slot. So a freed slot waits
 * until no read or write that could still touch it is in flight.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server_process.h"
#include "spill_quarantine.h"
#include "spill_store.h"

#define PAGE 4096u
#define SLOTS 16u

struct fixture {
  char dir[512];
  struct spill_store *store;
  struct spill_quarantine q;
};

static void setup(struct fixture *f)
{
  assert_int_equal(rp_test_tmpdir(f->dir, sizeof f->dir), 0);
  struct spill_store_options o = { .temp_dir = f->dir, .pages = SLOTS };
  char err[512] = "";
  f->store = spill_store_open(&o, err, sizeof err);
  if (!f->store)
    fail_msg("spill_store_open: %s", err);
  assert_int_equal(spill_quarantine_init(&f->q, SLOTS), 0);
}

static void teardown(struct fixture *f)
{
  spill_quarantine_destroy(&f->q);
  spill_store_close(f->store);
  rp_test_tmpdir_remove(f->dir);
}

/* An I/O the way the engine submits one: counted by the quarantine from submission to
 * its completion callback. */
struct counted_io {
  struct spill_io sio;
  struct spill_quarantine *q;
  unsigned epoch;
  bool done;
  uint8_t page[PAGE];
};

static void counted_done(struct spill_io *sio)
{
  struct counted_io *io = sio->user;
  spill_quarantine_io_done(io->q, io->epoch);
  io->done = true;
}

static void submit(struct fixture *f, struct counted_io *io, bool write, uint64_t slot)
{
  memset(io->page, 0x5A, sizeof io->page);
  io->q = &f->q;
  io->done = false;
  io->epoch = spill_quarantine_io_started(&f->q);
  io->sio = (struct spill_io){
    .write = write, .slot = slot, .page = io->page, .done = counted_done, .user = io
  };
  spill_store_submit(f->store, &io->sio);
  spill_store_flush_submissions(f->store);
}

/* Completion is signalled on the eventfd; the callback runs only when reaped, as on the
 * engine's loop. */
static void reap_until_done(struct fixture *f, struct counted_io *io)
{
  for (unsigned i = 0; i < 500 && !io->done; i++) {
    struct pollfd p = { .fd = spill_store_event_fd(f->store), .events = POLLIN };
    poll(&p, 1, 10);
    spill_store_reap(f->store);
  }
  assert_true(io->done);
}

/* Ticks and completions advance the epochs; any number of them may pass while an I/O is
 * in flight. */
static void advance(struct fixture *f, unsigned times)
{
  for (unsigned i = 0; i < times; i++)
    spill_quarantine_advance(&f->q, f->store);
}

/* The page's version at `slot` is being written (the write is in flight, not yet reaped)
 * when the page is rewritten elsewhere and the slot retired. */
static void slot_freed_under_io(bool write)
{
  struct fixture f;
  setup(&f);
  int64_t slot = spill_store_alloc_slot(f.store);
  assert_true(slot >= 0);
  static struct counted_io io;
  submit(&f, &io, write, (uint64_t)slot);
  spill_quarantine_free(&f.q, (uint32_t)slot);
  advance(&f, 4);
  /* Still held: not free in the store, and never handed to a new page. */
  assert_int_equal(spill_store_used(f.store), 1);
  for (unsigned i = 0; i < SLOTS - 1; i++) {
    int64_t other = spill_store_alloc_slot(f.store);
    if (other == slot)
      fail_msg("slot %lld was handed out again while a %s of it was in flight",
               (long long)slot, write ? "write" : "read");
    assert_true(other >= 0);
  }
  for (unsigned i = 0; i < SLOTS; i++)
    if ((int64_t)i != slot)
      spill_store_free_slot(f.store, i);
  reap_until_done(&f, &io);
  advance(&f, 2);
  assert_int_equal(spill_store_used(f.store), 0); /* back once the I/O is done */
  teardown(&f);
}

static void test_a_slot_freed_under_a_write_waits_for_it(void **state)
{
  (void)state;
  slot_freed_under_io(true);
}

static void test_a_slot_freed_under_a_read_waits_for_it(void **state)
{
  (void)state;
  slot_freed_under_io(false);
}

/* With nothing in flight a freed slot comes back within two turns, so the quarantine
 * costs no space while the store is idle. */
static void test_an_idle_store_gets_freed_slots_back(void **state)
{
  (void)state;
  struct fixture f;
  setup(&f);
  int64_t slot = spill_store_alloc_slot(f.store);
  assert_true(slot >= 0);
  spill_quarantine_free(&f.q, (uint32_t)slot);
  assert_int_equal(spill_store_used(f.store), 1);
  advance(&f, 2);
  assert_int_equal(spill_store_used(f.store), 0);
  teardown(&f);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_a_slot_freed_under_a_write_waits_for_it),
    cmocka_unit_test(test_a_slot_freed_under_a_read_waits_for_it),
    cmocka_unit_test(test_an_idle_store_gets_freed_slots_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
