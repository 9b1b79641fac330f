/* rampartd --test-fault: a real server that lies in its READ replies, so that client
 * page verification can be tested against it, or refuses some WRITEs, so that the
 * client's failed-write path can be. Each test starts its own rampartd and checks the
 * exact lie (through the raw connection API, which verifies nothing), and that a server
 * without the option returns exact bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "client.h"
#include "server_process.h"

#define RESERVED 8192u /* past 4096, so flip's byte index slot % 4096 wraps */
#define WARNING "deliberately corrupts pages it returns; for tests only"

struct fixture {
  char dir[256];
  struct rp_test_server server;
  struct rp_conn *conn;
};

/* A rampartd started with `--test-fault mode` (mode NULL: an honest one), connected,
 * with RESERVED slots reserved. */
static void start(struct fixture *f, const char *mode)
{
  memset(f, 0, sizeof *f);
  assert_int_equal(rp_test_tmpdir(f->dir, sizeof f->dir), 0);
  const char *honest[] = { "--memory", "64M", NULL };
  const char *faulty[] = { "--memory", "64M", "--test-fault", mode, NULL };
  assert_int_equal(rp_test_server_start(&f->server, f->dir, mode ? faulty : honest), 0);
  struct rp_error err;
  struct rp_session_info info;
  f->conn = rp_test_connect(&f->server, NULL, NULL, &info, &err);
  if (!f->conn)
    fail_msg("connect: %s", err.message);
  uint64_t reserved = 0;
  assert_int_equal(rp_reserve_sync(f->conn, RESERVED, &reserved, NULL, &err), 0);
  assert_int_equal(reserved, RESERVED);
}

static void stop(struct fixture *f)
{
  struct rp_error err;
  assert_int_equal(rp_goodbye_sync(f->conn, &err), 0);
  rp_conn_close(f->conn);
  /* A clean exit on SIGTERM (and, under the sanitizers, no leaks). */
  assert_int_equal(rp_test_server_stop(&f->server), 0);
  rp_test_tmpdir_remove(f->dir);
}

/* Whether the server's stderr carries the start-up warning. */
static bool warned(const struct fixture *f)
{
  FILE *file = fopen(f->server.stderr_path, "r");
  assert_non_null(file);
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, file))
    found = strstr(line, WARNING) != NULL;
  fclose(file);
  return found;
}

static void write_page(struct fixture *f, uint64_t slot, uint64_t seed)
{
  uint8_t page[RP_PAGE_SIZE];
  struct rp_error err;
  rp_test_fill_page(page, seed, slot);
  assert_int_equal(rp_write_sync(f->conn, slot, page, &err), 0);
}

/* Reads slot and asserts it holds exactly the page written to from_slot with seed. */
static void assert_reads_as(struct fixture *f, uint64_t slot, uint64_t seed,
                            uint64_t from_slot)
{
  uint8_t got[RP_PAGE_SIZE], expect[RP_PAGE_SIZE];
  struct rp_error err;
  assert_int_equal(rp_read_sync(f->conn, slot, got, &err), 0);
  rp_test_fill_page(expect, seed, from_slot);
  assert_memory_equal(got, expect, RP_PAGE_SIZE);
}

static const uint64_t slots[] = { 0, 1, 5, 4097 };

static void test_without_the_option_pages_come_back_exact(void **state)
{
  struct fixture f;
  start(&f, NULL);
  assert_false(warned(&f));
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
    write_page(&f, slots[i], 1);
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
    assert_reads_as(&f, slots[i], 1, slots[i]);
  stop(&f);
}

static void test_flip_changes_one_byte_at_slot_mod_4096(void **state)
{
  struct fixture f;
  start(&f, "flip");
  assert_true(warned(&f));
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
    write_page(&f, slots[i], 2);
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
    uint8_t got[RP_PAGE_SIZE], expect[RP_PAGE_SIZE];
    struct rp_error err;
    assert_int_equal(rp_read_sync(f.conn, slots[i], got, &err), 0);
    rp_test_fill_page(expect, 2, slots[i]);
    size_t flipped = slots[i] % RP_PAGE_SIZE, differing = 0;
    for (size_t b = 0; b < RP_PAGE_SIZE; b++)
      differing += got[b] != expect[b];
    assert_int_equal(differing, 1);
    assert_int_equal(got[flipped], expect[flipped] ^ 0x01);
  }
  stop(&f);
}

static void test_swap_returns_the_neighbour_slot(void **state)
{
  struct fixture f;
  start(&f, "swap");
  assert_true(warned(&f));
  write_page(&f, 0, 3);
  write_page(&f, 1, 3);
  write_page(&f, 4, 3);
  assert_reads_as(&f, 0, 3, 1);
  assert_reads_as(&f, 1, 3, 0);
  /* Slot 5 holds no page, so slot 4 comes back as itself. */
  assert_reads_as(&f, 4, 3, 4);
  stop(&f);
}

static void test_replay_returns_the_write_before(void **state)
{
  struct fixture f;
  start(&f, "replay");
  assert_true(warned(&f));
  write_page(&f, 0, 4); /* A */
  write_page(&f, 5, 4); /* B */
  assert_reads_as(&f, 5, 4, 0);
  /* Nothing came before the server's first write: slot 0 is its real page. */
  assert_reads_as(&f, 0, 4, 0);
  /* Overwriting slot 5 makes its reads return its own stale version (B). */
  write_page(&f, 5, 5);
  assert_reads_as(&f, 5, 4, 5);
  stop(&f);
}

/* Every 64th WRITE is refused and not stored; the others are, and the connection stays
 * usable throughout. */
static void test_refuse_writes_turns_one_write_in_64_away(void **state)
{
  struct fixture f;
  start(&f, "refuse-writes");
  FILE *file = fopen(f.server.stderr_path, "r");
  assert_non_null(file);
  char line[512];
  bool warned_refusing = false;
  while (!warned_refusing && fgets(line, sizeof line, file))
    warned_refusing = strstr(line, "deliberately refuses one WRITE in 64") != NULL;
  fclose(file);
  assert_true(warned_refusing);
  for (uint64_t slot = 0; slot < 128; slot++) {
    uint8_t page[RP_PAGE_SIZE];
    struct rp_error err;
    rp_test_fill_page(page, 6, slot);
    int r = rp_write_sync(f.conn, slot, page, &err);
    bool refused = slot % 64 == 63; /* the 64th and 128th WRITE */
    assert_int_equal(r, refused ? -1 : 0);
    if (refused) {
      assert_int_equal(err.code, RP_ERR_INTERNAL);
      assert_non_null(strstr(err.message, "refuse-writes"));
    }
  }
  for (uint64_t slot = 0; slot < 128; slot++) {
    if (slot % 64 != 63) {
      assert_reads_as(&f, slot, 6, slot);
      continue;
    }
    uint8_t got[RP_PAGE_SIZE];
    struct rp_error err;
    assert_int_equal(rp_read_sync(f.conn, slot, got, &err), -1);
    assert_int_equal(err.code, RP_ERR_NOT_FOUND);
  }
  stop(&f);
}

static void test_bad_mode_is_refused_with_the_choices(void **state)
{
  const char *args[] = { "--listen",     "127.0.0.1:0", "--memory", "64M",
                         "--test-fault", "x",           NULL };
  char out[8192];
  int status = rp_test_run_rampartd(args, out, sizeof out, 5000);
  assert_true(status != -1);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 2);
  assert_non_null(strstr(out, "--test-fault 'x': use flip, swap, replay or refuse-writes "
                              "(test-only: makes this server corrupt what it returns or "
                              "refuse writes)"));

  const char *help[] = { "--help", NULL };
  status = rp_test_run_rampartd(help, out, sizeof out, 5000);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_non_null(strstr(out, "--test-fault MODE"));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_without_the_option_pages_come_back_exact),
    cmocka_unit_test(test_flip_changes_one_byte_at_slot_mod_4096),
    cmocka_unit_test(test_swap_returns_the_neighbour_slot),
    cmocka_unit_test(test_replay_returns_the_write_before),
    cmocka_unit_test(test_refuse_writes_turns_one_write_in_64_away),
    cmocka_unit_test(test_bad_mode_is_refused_with_the_choices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
