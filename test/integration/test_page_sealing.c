/* Page sealing against real, hostile rampartd processes (rampartd --test-fault).
 *
 * A server that flips a byte, serves another page or an older version is caught on
 * every read: with a parity group behind the page the read still returns the right
 * bytes (rebuilt from the other members), without one it is EIO, never wrong bytes.
 * encrypt=off still catches all three through its checksum. And what the servers hold
 * in memory contains no plaintext of what was written (a scan of their memory finds a
 * known pattern only when encryption is off).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "rampart.h"
#include "engine_cluster.h"

#define PAGE RAMPART_PAGE_SIZE
#define CANARY "RAMPART-PLAINTEXT-CANARY"

/* faults[i]: the --test-fault mode of server i, or NULL for an honest one. */
static void hostile_cluster_start(struct rp_test_cluster *c, unsigned n,
                                  const char *const *faults)
{
  assert_int_equal(rp_test_cluster_start(c, n, "32M", faults), 0);
}

/* Page `page`, version `version`: distinct for every page and version, with the canary
 * text in it so a memory scan can look for plaintext. */
static void fill_page(uint8_t *buf, uint64_t page, unsigned version)
{
  memset(buf, 0, PAGE);
  for (size_t off = 0; off < PAGE; off += 64)
    snprintf((char *)buf + off, 64, CANARY "-%08llu-v%u-%06zu", (unsigned long long)page,
             version, off);
}

static void write_page(struct rampart_engine *e, uint64_t page, unsigned version)
{
  uint8_t buf[PAGE];
  fill_page(buf, page, version);
  assert_int_equal(rampart_pwrite(e, buf, PAGE, page * PAGE, 0), 0);
}

static uint64_t integrity_failures(struct rampart_engine *e)
{
  struct rampart_stats st;
  rampart_get_stats(e, &st);
  return st.integrity_failures;
}

/* ---- log capture: the failure must name the server -------------------------------------- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];

static void capture_log(int level, const char *line)
{
  (void)level;
  pthread_mutex_lock(&log_lock);
  size_t used = strlen(log_text);
  snprintf(log_text + used, sizeof log_text - used, "%s\n", line);
  pthread_mutex_unlock(&log_lock);
}

static bool log_has_line_with(const char *a, const char *b)
{
  static char copy[sizeof log_text];
  pthread_mutex_lock(&log_lock);
  memcpy(copy, log_text, sizeof copy);
  pthread_mutex_unlock(&log_lock);
  char *save = NULL;
  for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
    if (strstr(line, a) && strstr(line, b))
      return true;
  return false;
}

/* ---- one server, no redundancy: a bad page is EIO ---------------------------------------- */

#define LONE_PAGES 8

/* Pages 1..7 are written once, then page 0 twice in a row: flip alters every page, swap
 * serves a neighbouring slot's page, replay serves the write before (for page 0, its own
 * first version). Every read is right or EIO; a hostile server makes at least one EIO,
 * page 0's under replay, with a log line naming the server. */
static void lone_hostile_server(const char *fault, const char *encrypt)
{
  struct rp_test_cluster c;
  const char *faults[] = { fault };
  hostile_cluster_start(&c, 1, faults);
  log_text[0] = '\0';
  rampart_set_log_sink(capture_log);
  const char *extra[] = { "redundancy", "none", "encrypt", encrypt, NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, 64, extra);
  for (uint64_t p = 1; p < LONE_PAGES; p++)
    write_page(e, p, 1);
  write_page(e, 0, 1);
  write_page(e, 0, 2);
  uint8_t buf[PAGE], want[PAGE];
  unsigned eio = 0;
  bool page0_eio = false;
  for (uint64_t p = 0; p < LONE_PAGES; p++) {
    fill_page(want, p, p == 0 ? 2 : 1);
    int r = rampart_pread(e, buf, PAGE, p * PAGE);
    if (r == -EIO) {
      eio++;
      page0_eio |= p == 0;
      continue;
    }
    assert_int_equal(r, 0);
    if (memcmp(buf, want, PAGE) != 0)
      fail_msg("%s, encrypt=%s: page %llu read back WRONG bytes", fault ? fault : "honest",
               encrypt, (unsigned long long)p);
  }
  if (!fault) {
    assert_int_equal(eio, 0);
    assert_int_equal(integrity_failures(e), 0);
  } else {
    print_message("%s, encrypt=%s: %u of %u reads EIO, the rest right\n", fault, encrypt, eio,
                  LONE_PAGES);
    assert_true(eio > 0);
    /* At least one per EIO: the server is now suspect, and the engine moves its pages off
     * (here to the spill store), verifying each one it reads, so a bad page may be
     * counted by that move as well as by the read. */
    struct rampart_stats st;
    rampart_get_stats(e, &st);
    assert_true(st.integrity_failures >= eio);
    assert_true(st.servers[0].suspect);
    assert_true(st.servers[0].integrity_failures >= eio);
    if (strcmp(fault, "swap") != 0)
      assert_true(page0_eio);
    if (!log_has_line_with("failed verification", c.servers[0].addr))
      fail_msg("no log line names server %s:\n%s", c.servers[0].addr, log_text);
  }
  rampart_close(e);
  rampart_set_log_sink(NULL);
  rp_test_cluster_stop(&c);
}

static void test_honest_server_reads_back(void **state)
{
  (void)state;
  lone_hostile_server(NULL, "on");
  lone_hostile_server(NULL, "off");
}

static void test_flipped_byte_is_eio(void **state)
{
  (void)state;
  lone_hostile_server("flip", "on");
  lone_hostile_server("flip", "off");
}

static void test_swapped_page_is_eio(void **state)
{
  (void)state;
  lone_hostile_server("swap", "on");
  lone_hostile_server("swap", "off");
}

static void test_replayed_version_is_eio(void **state)
{
  (void)state;
  lone_hostile_server("replay", "on");
  lone_hostile_server("replay", "off");
}

/* ---- parity-log: a bad page is rebuilt from its group ------------------------------------ */

#define GROUP_PAGES 512

static void write_all(struct rampart_engine *e, uint64_t pages, unsigned version)
{
  for (uint64_t p = 0; p < pages; p++)
    write_page(e, p, version);
}

/* Every page reads back right, or (when allow_eio) fails with EIO: never wrong bytes.
 * Returns the number of EIO reads. */
static uint64_t check_all(struct rampart_engine *e, uint64_t pages, unsigned version,
                          bool allow_eio)
{
  uint8_t buf[PAGE], want[PAGE];
  uint64_t eio = 0;
  for (uint64_t p = 0; p < pages; p++) {
    fill_page(want, p, version);
    int r = rampart_pread(e, buf, PAGE, p * PAGE);
    if (r == -EIO && allow_eio) {
      eio++;
      continue;
    }
    if (r != 0)
      fail_msg("page %llu: read failed (%d)", (unsigned long long)p, r);
    if (memcmp(buf, want, PAGE) != 0)
      fail_msg("page %llu: wrong bytes returned", (unsigned long long)p);
  }
  return eio;
}

static void test_parity_log_rebuilds_what_a_hostile_server_alters(void **state)
{
  (void)state;
  const char *modes[] = { "flip", "swap", "replay" };
  for (unsigned m = 0; m < 3; m++) {
    struct rp_test_cluster c;
    const char *faults[] = { NULL, NULL, modes[m], NULL, NULL };
    hostile_cluster_start(&c, 5, faults);
    const char *extra[] = { "redundancy", "parity-log", "group", "4", NULL };
    struct rampart_engine *e = rp_test_engine_open(&c, GROUP_PAGES, extra);
    write_all(e, GROUP_PAGES, 1);
    write_all(e, GROUP_PAGES, 2); /* old versions stay on the servers until cleaned */
    check_all(e, GROUP_PAGES, 2, false);
    struct rampart_stats st;
    rampart_get_stats(e, &st);
    print_message("%s: every page right; %llu failed verification and were rebuilt\n",
                  modes[m], (unsigned long long)st.integrity_failures);
    assert_true(st.integrity_failures > 0);
    assert_int_equal(st.read_errors, 0);
    rampart_close(e);
    rp_test_cluster_stop(&c);
  }
}

/* A server that corrupts what it returns is drained (its host under memory pressure):
 * every page moved off it is checked on the way and rebuilt from its group, so once it
 * is gone every page reads back right. Moving the bytes unchecked (as rampart did) put
 * the corruption under new parity for good: 102 of 512 pages EIO. */
static void test_draining_a_corrupting_server_moves_only_verified_pages(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  const char *faults[] = { NULL, NULL, "flip", NULL, NULL };
  hostile_cluster_start(&c, 5, faults);
  const char *extra[] = { "redundancy", "parity-log", "group", "3", NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, 512, extra);
  write_all(e, 512, 1);
  assert_int_equal(rp_test_write_file(c.psi[2], RP_TEST_PSI_HIGH), 0);
  struct rampart_stats st;
  for (unsigned i = 0; i < 600; i++) {
    rampart_get_stats(e, &st);
    if (st.servers[2].pages_live == 0 && st.moves_in_flight == 0)
      break;
    usleep(50000);
  }
  assert_int_equal(st.servers[2].pages_live, 0);
  rp_test_server_kill(&c.servers[2]); /* nothing may depend on it now */
  uint64_t eio = check_all(e, 512, 1, true);
  rampart_get_stats(e, &st);
  print_message("drained a corrupting server: %llu copies failed verification and were "
                "rebuilt; %llu of 512 pages EIO\n",
                (unsigned long long)st.integrity_failures, (unsigned long long)eio);
  assert_int_equal(eio, 0);
  assert_true(st.integrity_failures > 0);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

/* Under write-through a page a server corrupts is read from its disk copy. It was EIO
 * (the groups have no parity, and the disk copy was not tried): the soak found it. */
static void test_write_through_reads_the_disk_copy_of_a_corrupted_page(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  const char *faults[] = { NULL, "flip", NULL };
  hostile_cluster_start(&c, 3, faults);
  const char *extra[] = { "redundancy", "write-through", NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, 256, extra);
  write_all(e, 256, 1);
  uint64_t eio = check_all(e, 256, 1, true);
  print_message("write-through with a corrupting server: %llu of 256 pages EIO, %llu copies "
                "failed verification\n",
                (unsigned long long)eio, (unsigned long long)integrity_failures(e));
  assert_int_equal(eio, 0);
  assert_true(integrity_failures(e) > 0);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

/* Two hostile members in one group: nothing to rebuild from. EIO, never garbage. */
static void test_two_hostile_servers_in_a_group_give_eio(void **state)
{
  (void)state;
  struct rp_test_cluster c;
  const char *faults[] = { "flip", "flip", NULL };
  hostile_cluster_start(&c, 3, faults);
  const char *extra[] = { "redundancy", "parity-log", "group", "2", NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, 256, extra);
  write_all(e, 256, 1);
  uint64_t eio = check_all(e, 256, 1, true);
  print_message("%llu of 256 pages EIO, the rest right\n", (unsigned long long)eio);
  assert_true(eio > 0);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

/* ---- no plaintext on the servers ------------------------------------------------------------ */

/* Scans the readable mappings of process pid for needle. Skips mappings over 1 GiB
 * (sanitizer shadow reservations), which a page store of this test never is. */
static bool process_memory_contains(pid_t pid, const char *needle)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *maps = fopen(path, "r");
  assert_non_null(maps);
  snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
  int mem = open(path, O_RDONLY);
  assert_true(mem >= 0);
  size_t chunk = 1 << 20, nlen = strlen(needle);
  uint8_t *buf = malloc(chunk + nlen);
  assert_non_null(buf);
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, maps)) {
    unsigned long long lo, hi;
    char perms[8];
    if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' ||
        hi - lo > (1ull << 30) || strstr(line, "[vvar]") || strstr(line, "[vsyscall]"))
      continue;
    for (unsigned long long at = lo; at < hi && !found; at += chunk) {
      size_t want = (size_t)(hi - at < chunk + nlen ? hi - at : chunk + nlen);
      ssize_t got = pread(mem, buf, want, (off_t)at);
      if (got > 0 && memmem(buf, (size_t)got, needle, nlen))
        found = true;
    }
  }
  free(buf);
  close(mem);
  fclose(maps);
  return found;
}

static void servers_hold_plaintext(const char *encrypt, bool *any_found)
{
  struct rp_test_cluster c;
  hostile_cluster_start(&c, 3, NULL);
  const char *extra[] = { "redundancy", "parity-log", "group", "2", "encrypt", encrypt, NULL };
  struct rampart_engine *e = rp_test_engine_open(&c, 256, extra);
  write_all(e, 256, 1);
  check_all(e, 256, 1, false);
  *any_found = false;
  for (unsigned i = 0; i < c.n; i++)
    *any_found |= process_memory_contains(c.servers[i].pid, CANARY);
  rampart_close(e);
  rp_test_cluster_stop(&c);
}

static void test_servers_hold_no_plaintext(void **state)
{
  (void)state;
  bool found;
  /* The control first: with encryption off the scan must find the pattern, or it
   * proves nothing when it finds none below. */
  servers_hold_plaintext("off", &found);
  assert_true(found);
  servers_hold_plaintext("on", &found);
  if (found)
    fail_msg("a server's memory holds the plaintext pattern '%s' with encrypt=on", CANARY);
  print_message(
    "memory of 3 servers: pattern found with encrypt=off, absent with encrypt=on\n");
}

int main(void)
{
  if (!rp_test_rampartd_path())
    return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_honest_server_reads_back),
    cmocka_unit_test(test_flipped_byte_is_eio),
    cmocka_unit_test(test_swapped_page_is_eio),
    cmocka_unit_test(test_replayed_version_is_eio),
    cmocka_unit_test(test_parity_log_rebuilds_what_a_hostile_server_alters),
    cmocka_unit_test(test_draining_a_corrupting_server_moves_only_verified_pages),
    cmocka_unit_test(test_write_through_reads_the_disk_copy_of_a_corrupted_page),
    cmocka_unit_test(test_two_hostile_servers_in_a_group_give_eio),
    cmocka_unit_test(test_servers_hold_no_plaintext),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
