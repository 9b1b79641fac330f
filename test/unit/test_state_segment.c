/* The pager's state segment (src/page_ops/state_segment.c): it outlives a process killed with
 * SIGKILL, locked and byte for byte, and a restart that is not the same device, not the
 * same key or not the only pager is refused with what to do, changing nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include "state_segment.h"

#define PAGES 4096u

static const uint8_t key_a[32] = "cluster key A, thirty-two bytes";
static const uint8_t key_b[32] = "cluster key B, thirty-two bytes";

struct rig {
  char dir[64];
  char path[128];
  struct state_segment_fingerprint fp;
};

static int rig_setup(void **state)
{
  struct rig *r = calloc(1, sizeof *r);
  snprintf(r->dir, sizeof r->dir, "/tmp/rampart-state-XXXXXX");
  if (!mkdtemp(r->dir))
    return -1;
  snprintf(r->path, sizeof r->path, "%s/state", r->dir);
  r->fp = (struct state_segment_fingerprint){ .pages = PAGES, .redundancy = 1, .group = 4,
                                            .encrypt = 1 };
  *state = r;
  return 0;
}

/* Whatever a test left (a refusal must leave the state as it was, so there may be
 * one), it goes with the test. */
static int rig_teardown(void **state)
{
  struct rig *r = *state;
  struct state_segment st;
  uint8_t device_key[32];
  char err[512];
  if (state_segment_open(&st, r->path, &r->fp, key_a, 32, device_key, NULL, 0, err,
                       sizeof err) == 0)
    state_segment_remove(&st); /* with its group chunks */
  FILE *f = fopen(r->path, "re");
  int id;
  if (f) {
    if (fscanf(f, "rampart pager state 1\nsegment %d", &id) == 1)
      shmctl(id, IPC_RMID, NULL);
    fclose(f);
  }
  unlink(r->path);
  rmdir(r->dir);
  free(r);
  return 0;
}

static int open_state(struct rig *r, struct state_segment *st, const uint8_t *key,
                      uint8_t device_key[32], char *err, size_t errlen)
{
  return state_segment_open(st, r->path, &r->fp, key, 32, device_key, NULL, 0, err, errlen);
}

/* Opens the state with key A, failing the test with the refusal if there is one. */
static void open_state_ok(struct rig *r, struct state_segment *st, uint8_t device_key[32])
{
  char err[512] = "";
  if (open_state(r, st, key_a, device_key, err, sizeof err) < 0)
    fail_msg("the state was refused: %s", err);
}

static bool segment_is_locked(int id)
{
  struct shmid_ds ds;
  return shmctl(id, IPC_STAT, &ds) == 0 && (ds.shm_perm.mode & SHM_LOCKED) != 0;
}

/* Runs work(r, report) in a child process and kills it with SIGKILL once work has
 * returned, as a crash would leave the pager: segments attached, no detach, no exit
 * handler. work fills report (32 bytes) for the parent, or _exits non-zero. */
static void crash_after(struct rig *r, void (*work)(struct rig *r, uint8_t report[32]),
                        uint8_t report[32])
{
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    uint8_t out[32] = { 0 };
    work(r, out);
    if (write(pipefd[1], out, sizeof out) != sizeof out)
      _exit(1);
    pause();
    _exit(0);
  }
  close(pipefd[1]);
  int status = 0;
  if (read(pipefd[0], report, 32) != 32) {
    waitpid(child, &status, 0);
    fail_msg("the child died before it was killed: status %#x", status);
  }
  close(pipefd[0]);
  assert_int_equal(kill(child, SIGKILL), 0);
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static void write_map_and_seals(struct rig *r, uint8_t report[32])
{
  struct state_segment st;
  char err[512];
  if (open_state(r, &st, key_a, report, err, sizeof err) < 0 || st.recovered)
    _exit(1);
  for (uint64_t p = 0; p < PAGES; p++) {
    st.map[p] = page_entry_remote(p * 7, (unsigned)(p % 5));
    st.seals[p].version = (*st.next_version)++;
    memset(st.seals[p].tag, (int)(p & 0xff), sizeof st.seals[p].tag);
  }
}

static void test_state_outlives_a_killed_pager(void **state)
{
  struct rig *r = *state;
  uint8_t written_key[32];
  crash_after(r, write_map_and_seals, written_key);

  struct state_segment st;
  uint8_t device_key[32];
  open_state_ok(r, &st, device_key);
  assert_true(st.recovered);
  assert_true(st.generation == 2);
  assert_true(segment_is_locked(st.segment));
  assert_memory_equal(device_key, written_key, sizeof device_key);
  assert_true(*st.next_version == PAGES + 1);
  for (uint64_t p = 0; p < PAGES; p++) {
    assert_true(st.map[p] == page_entry_remote(p * 7, (unsigned)(p % 5)));
    assert_true(st.seals[p].version == p + 1);
    assert_true(st.seals[p].tag[15] == (uint8_t)(p & 0xff));
  }
  state_segment_remove(&st);
  assert_int_equal(access(r->path, F_OK), -1);
}

static void fill_page(uint8_t *page, uint64_t p)
{
  for (unsigned i = 0; i < 4096; i++)
    page[i] = (uint8_t)(p * 31 + i * 7);
}

static void stored_path_of(const struct rig *r, char *out, size_t outlen)
{
  snprintf(out, outlen, "%s/stored", r->dir);
}

/* Seals 64 pages and stores their ciphertext in a file, as the servers would hold it. */
static void seal_and_store(struct rig *r, uint8_t report[32])
{
  struct state_segment st;
  struct page_sealer sealer;
  uint8_t device_key[32], plain[4096], out[4096];
  char err[512], stored_path[160];
  (void)report;
  stored_path_of(r, stored_path, sizeof stored_path);
  if (open_state(r, &st, key_a, device_key, err, sizeof err) < 0 ||
      page_sealer_init_at(&sealer, PAGES, true, device_key, st.seals, st.next_version,
                          err, sizeof err) < 0)
    _exit(1);
  FILE *stored = fopen(stored_path, "we");
  struct page_map map;
  page_map_init_at(&map, PAGES, st.map);
  for (uint64_t p = 0; p < 64; p++) {
    fill_page(plain, p);
    struct page_seal seal;
    const uint8_t *bytes = page_seal(&sealer, p, plain, out, &seal);
    if (fwrite(bytes, 1, sizeof out, stored) != sizeof out)
      _exit(1);
    page_seal_set(&sealer, p, &seal);
    page_map_set(&map, p, page_entry_slot(PAGE_SPILL, p));
  }
  fclose(stored);
}

/* What the servers hold is ciphertext: after the crash a new sealer, built from the
 * state alone, must open every page the dead one sealed, and its next version must be
 * one no page has used (a repeated GCM nonce under one key would give the key away). */
static void test_pages_sealed_before_a_crash_open_after_it(void **state)
{
  struct rig *r = *state;
  char stored_path[160];
  uint8_t report[32];
  stored_path_of(r, stored_path, sizeof stored_path);
  crash_after(r, seal_and_store, report);

  struct state_segment st;
  struct page_sealer sealer;
  uint8_t device_key[32], buf[4096], expect[4096];
  char err[512] = "";
  open_state_ok(r, &st, device_key);
  assert_int_equal(page_sealer_init_at(&sealer, PAGES, true, device_key, st.seals,
                                       st.next_version, err, sizeof err), 0);
  struct page_map map;
  page_map_init_at(&map, PAGES, st.map);
  assert_true(map.count[PAGE_SPILL] == 64 && map.count[PAGE_ZERO] == PAGES - 64);
  FILE *stored = fopen(stored_path, "re");
  assert_non_null(stored);
  uint64_t newest = 0;
  for (uint64_t p = 0; p < 64; p++) {
    assert_int_equal(fread(buf, 1, sizeof buf, stored), sizeof buf);
    fill_page(expect, p);
    assert_memory_not_equal(buf, expect, sizeof buf); /* it was stored sealed */
    assert_true(page_unseal(&sealer, p, page_seal_get(&sealer, p), buf));
    assert_memory_equal(buf, expect, sizeof buf);
    if (page_seal_get(&sealer, p)->version > newest)
      newest = page_seal_get(&sealer, p)->version;
  }
  fclose(stored);
  struct page_seal next;
  page_seal(&sealer, 0, expect, buf, &next);
  assert_true(next.version == newest + 1);
  page_sealer_destroy(&sealer);
  page_map_destroy(&map);
  state_segment_remove(&st);
  unlink(stored_path);
}

#define GROUPS_WRITTEN (GROUP_CHUNK_SIZE + 10)

static void write_groups(struct rig *r, uint8_t report[32])
{
  struct state_segment st;
  uint8_t device_key[32];
  char err[512];
  (void)report;
  if (open_state(r, &st, key_a, device_key, err, sizeof err) < 0)
    _exit(1);
  struct group_chunk_source source = state_segment_group_chunks(&st);
  struct group_table t;
  struct page_map map;
  page_map_init_at(&map, PAGES, st.map);
  if (group_table_init_from(&t, GROUPS_WRITTEN, &source) < 0 || t.nchunks != 2) {
    fprintf(stderr, "group table in the state: %s, %u chunks\n", strerror(errno), t.nchunks);
    _exit(2);
  }
  for (uint32_t i = 0; i < GROUPS_WRITTEN; i++) {
    uint32_t id = group_open(&t, 2, true, 7);
    for (unsigned m = 0; m < 2; m++) {
      uint32_t page = (i * 2 + m) % PAGES;
      unsigned member = group_add_member(&t, id, (uint8_t)(m + 1), i * 2 + m, page);
      page_map_set(&map, page, page_entry_remote(id, member));
    }
    if (i + 1 < GROUPS_WRITTEN) {
      group_begin_seal(&t, id, 3, i);
      group_finish_seal(&t, id);
    }
  }
}

/* A parity log two chunks long, some groups sealed, one open, the map pointing into
 * them: after the kill the table is taken over as it was, and what only the dead
 * process knew (free list, live counts, pins) is worked out again. */
static void test_groups_outlive_a_killed_pager(void **state)
{
  struct rig *r = *state;
  const uint32_t groups = GROUPS_WRITTEN;
  uint8_t report[32];
  crash_after(r, write_groups, report);

  struct state_segment st;
  uint8_t device_key[32];
  open_state_ok(r, &st, device_key);
  assert_int_equal(st.nchunks, 2);
  struct page_map map;
  page_map_init_at(&map, PAGES, st.map);
  struct group_chunk_source source = state_segment_group_chunks(&st);
  struct group_table t;
  assert_int_equal(group_table_adopt(&t, (struct group **)st.chunks, st.nchunks, &source,
                                     &map), 0);
  assert_int_equal(t.count, 2 * GROUP_CHUNK_SIZE);
  assert_int_equal(t.in_use, groups);
  /* Pages are reused past PAGES: only the newest group of each page is live. */
  assert_true(t.live_pages == PAGES);
  for (uint64_t p = 0; p < PAGES; p++) {
    page_entry e = page_map_get(&map, p);
    assert_int_equal(page_entry_kind(e), PAGE_REMOTE);
    struct group *g = group_get(&t, (uint32_t)page_entry_group(e));
    assert_int_equal(g->page[page_entry_member(e)], p);
    assert_int_equal(g->pins, 0);
  }
  uint32_t sealed = 0, open = 0, open_id = GROUP_NONE;
  for (uint32_t id = 0; id < t.count; id++) {
    struct group *g = group_get(&t, id);
    sealed += g->state == GROUP_SEALED;
    if (g->state == GROUP_OPEN) {
      open++;
      open_id = id;
    }
  }
  assert_int_equal(sealed, groups - 1);
  assert_int_equal(open, 1);
  struct group *g = group_get(&t, open_id);
  assert_int_equal(g->buffer, 7); /* kept, for the engine to trust or not */
  assert_int_equal(g->page[0], ((groups - 1) * 2) % PAGES);
  /* Page 10 was written by groups 5, 2053 and 4101 (pages wrap at PAGES): the newest
   * holds it, at the slot the dead process gave it, and the oldest lives no more. */
  page_entry e = page_map_get(&map, 10);
  g = group_get(&t, (uint32_t)page_entry_group(e));
  assert_int_equal(g->state, GROUP_SEALED);
  assert_int_equal(g->slot[page_entry_member(e)], 4101 * 2);
  assert_int_equal(g->server[2], 3);
  assert_int_equal(g->live, 2);
  uint32_t older = GROUP_NONE;
  for (uint32_t id = 0; id < t.count && older == GROUP_NONE; id++)
    if (group_get(&t, id)->state == GROUP_SEALED && group_get(&t, id)->slot[0] == 10)
      older = id;
  assert_true(older != GROUP_NONE);
  assert_int_equal(group_get(&t, older)->live, 0);
  /* The free list is the rest, and growing goes on from the state. */
  uint32_t id = group_open(&t, 2, true, 0);
  assert_true(id != GROUP_NONE && id != open_id);
  assert_int_equal(t.in_use, groups + 1);
  group_table_destroy(&t);
  state_segment_remove(&st);
}

static void test_wrong_key_is_refused_and_changes_nothing(void **state)
{
  struct rig *r = *state;
  struct state_segment st;
  uint8_t device_key[32], again[32];
  char err[512] = "";
  open_state_ok(r, &st, device_key);
  st.map[17] = page_entry_remote(3, 1);
  state_segment_detach(&st);

  assert_int_equal(open_state(r, &st, key_b, again, err, sizeof err), -1);
  assert_non_null(strstr(err, "was attached with another key"));
  assert_non_null(strstr(err, "same key= and enckey="));

  assert_int_equal(open_state(r, &st, key_a, again, err, sizeof err), 0);
  assert_true(st.recovered);
  assert_memory_equal(device_key, again, sizeof again);
  assert_true(st.map[17] == page_entry_remote(3, 1));
  state_segment_remove(&st);
}

static void test_another_device_is_refused(void **state)
{
  struct rig *r = *state;
  struct state_segment st;
  uint8_t device_key[32];
  char err[512] = "";
  open_state_ok(r, &st, device_key);
  state_segment_detach(&st);

  r->fp.pages = PAGES * 2;
  assert_int_equal(open_state(r, &st, key_a, device_key, err, sizeof err), -1);
  assert_non_null(strstr(err, "belongs to another device: its size is 16 MiB, this "
                              "device's 32 MiB"));
  r->fp.pages = PAGES;
  r->fp.encrypt = 0;
  assert_int_equal(open_state(r, &st, key_a, device_key, err, sizeof err), -1);
  assert_non_null(strstr(err, "encrypt=on, this device has encrypt=off"));
  r->fp.encrypt = 1;
  open_state_ok(r, &st, device_key);
  state_segment_remove(&st);
}

/* The layout's version is the header's second field, after the 16-byte magic: a build
 * with 8-bit server indices wrote layout 2. Its state is refused, not misread (a group
 * of that build is 92 bytes, not 100), and the refusal leaves it as it was. */
static void test_a_state_of_an_older_layout_is_refused(void **state)
{
  struct rig *r = *state;
  struct state_segment st;
  uint8_t device_key[32];
  char err[512] = "";
  open_state_ok(r, &st, device_key);
  int id = st.segment;
  st.map[5] = page_entry_remote(7, 1);
  state_segment_detach(&st);

  uint8_t *base = shmat(id, NULL, 0);
  assert_true(base != (void *)-1);
  uint32_t layout, old = 2;
  memcpy(&layout, base + 16, sizeof layout);
  assert_int_equal(layout, 3);
  memcpy(base + 16, &old, sizeof old);
  shmdt(base);
  assert_int_equal(open_state(r, &st, key_a, device_key, err, sizeof err), -1);
  assert_non_null(strstr(err, "is not a pager state of this version (layout 2, this build "
                              "reads 3)"));
  base = shmat(id, NULL, 0);
  assert_true(base != (void *)-1);
  memcpy(&layout, base + 16, sizeof layout);
  assert_int_equal(layout, 2);
  uint32_t now = 3;
  memcpy(base + 16, &now, sizeof now);
  shmdt(base);
  open_state_ok(r, &st, device_key);
  assert_true(st.recovered);
  assert_true(st.map[5] == page_entry_remote(7, 1));
  state_segment_remove(&st);
}

/* Server table entries past 255 (16-bit server indices) outlive the pager like the rest. */
static void test_server_entries_past_255_outlive_the_pager(void **state)
{
  struct rig *r = *state;
  struct state_segment st;
  uint8_t device_key[32];
  open_state_ok(r, &st, device_key);
  *st.nservers = STATE_SEGMENT_SERVERS;
  for (uint32_t i = 250; i < STATE_SEGMENT_SERVERS; i += 97)
    snprintf(st.servers[i].address, sizeof st.servers[i].address, "10.0.%u.%u:7070",
             i / 256, i % 256);
  snprintf(st.servers[STATE_SEGMENT_SERVERS - 1].address, STATE_SEGMENT_ADDRESS_LEN, "last:1");
  *st.open_parity_server = STATE_SEGMENT_SERVERS - 1;
  state_segment_detach(&st);

  open_state_ok(r, &st, device_key);
  assert_true(st.recovered);
  assert_int_equal(*st.nservers, STATE_SEGMENT_SERVERS);
  for (uint32_t i = 250; i < STATE_SEGMENT_SERVERS; i += 97) {
    char want[STATE_SEGMENT_ADDRESS_LEN];
    snprintf(want, sizeof want, "10.0.%u.%u:7070", i / 256, i % 256);
    assert_string_equal(st.servers[i].address, want);
  }
  assert_string_equal(st.servers[STATE_SEGMENT_SERVERS - 1].address, "last:1");
  assert_int_equal(*st.open_parity_server, STATE_SEGMENT_SERVERS - 1);
  state_segment_remove(&st);
}

static void test_a_second_pager_on_one_state_is_refused(void **state)
{
  struct rig *r = *state;
  struct state_segment first, second;
  uint8_t device_key[32];
  char err[512] = "";
  assert_int_equal(open_state(r, &first, key_a, device_key, err, sizeof err), 0);
  assert_int_equal(open_state(r, &second, key_a, device_key, err, sizeof err), -1);
  assert_non_null(strstr(err, "in use by a running pager"));
  state_segment_remove(&first);
}

static void test_a_segment_gone_starts_empty_and_says_so(void **state)
{
  struct rig *r = *state;
  struct state_segment st;
  uint8_t device_key[32];
  char err[512] = "", note[512] = "";
  open_state_ok(r, &st, device_key);
  int old = st.segment;
  st.map[1] = page_entry_remote(1, 1);
  state_segment_detach(&st);
  assert_int_equal(shmctl(old, IPC_RMID, NULL), 0); /* what a host restart does */

  assert_int_equal(state_segment_open(&st, r->path, &r->fp, key_a, 32, device_key, note,
                                    sizeof note, err, sizeof err), 0);
  assert_false(st.recovered);
  assert_non_null(strstr(note, "is gone"));
  assert_non_null(strstr(note, "starting empty"));
  assert_true(st.map[1] == 0);
  assert_true(segment_is_locked(st.segment));
  state_segment_remove(&st);
}

static void test_a_file_that_is_not_a_state_is_refused(void **state)
{
  struct rig *r = *state;
  FILE *f = fopen(r->path, "we");
  assert_non_null(f);
  fputs("swap=/dev/nbd0\n", f);
  fclose(f);
  struct state_segment st;
  uint8_t device_key[32];
  char err[512] = "";
  assert_int_equal(open_state(r, &st, key_a, device_key, err, sizeof err), -1);
  assert_non_null(strstr(err, "is not a rampart state file"));
  f = fopen(r->path, "re");
  char line[64] = "";
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  assert_string_equal(line, "swap=/dev/nbd0\n");
}

/* With shm_rmid_forced the kernel would destroy the state at the crash it is kept for:
 * refused at attach, so the operator hears of it before a crash. */
static void test_segments_destroyed_at_exit_are_refused(void **state)
{
  struct rig *r = *state;
  const char *knob = "/proc/sys/kernel/shm_rmid_forced";
  FILE *f = fopen(knob, "r+e");
  if (!f) {
    print_message("skipped: cannot write %s (%s): needs root\n", knob, strerror(errno));
    skip();
  }
  int was = 0;
  if (fscanf(f, "%d", &was) != 1)
    was = 0;
  fclose(f);
  f = fopen(knob, "we");
  fputs("1\n", f);
  fclose(f);
  struct state_segment st;
  uint8_t device_key[32];
  char err[512] = "";
  int rc = open_state(r, &st, key_a, device_key, err, sizeof err);
  f = fopen(knob, "we");
  fprintf(f, "%d\n", was);
  fclose(f);
  assert_int_equal(rc, -1);
  assert_non_null(strstr(err, "shm_rmid_forced=1"));
  assert_int_equal(access(r->path, F_OK), -1);
}

/* What rampart-swap upgrade compares: the layout names this build's group chunk size,
 * which a state records and a takeover checks, so two builds whose chunks differ say
 * different layouts. */
static void test_the_layout_names_the_chunk_size(void **state)
{
  (void)state;
  unsigned layout = 0;
  size_t chunk = 0;
  char tail = 0;
  assert_int_equal(sscanf(state_segment_layout(), "%u.%zu%c", &layout, &chunk, &tail), 2);
  assert_true(layout >= 1);
  assert_int_equal(chunk, (size_t)GROUP_CHUNK_SIZE * sizeof(struct group));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_the_layout_names_the_chunk_size),
    cmocka_unit_test_setup_teardown(test_state_outlives_a_killed_pager, rig_setup,
                                    rig_teardown),
    cmocka_unit_test_setup_teardown(test_pages_sealed_before_a_crash_open_after_it, rig_setup,
                                    rig_teardown),
    cmocka_unit_test_setup_teardown(test_groups_outlive_a_killed_pager, rig_setup,
                                    rig_teardown),
    cmocka_unit_test_setup_teardown(test_wrong_key_is_refused_and_changes_nothing, rig_setup,
                                    rig_teardown),
    cmocka_unit_test_setup_teardown(test_another_device_is_refused, rig_setup, rig_teardown),
    cmocka_unit_test_setup_teardown(test_a_state_of_an_older_layout_is_refused, rig_setup,
                                    rig_teardown),
    cmocka_unit_test_setup_teardown(test_server_entries_past_255_outlive_the_pager, rig_setup,
                                    rig_teardown),
    cmocka_unit_test_setup_teardown(test_a_second_pager_on_one_state_is_refused, rig_setup,
                                    rig_teardown),
    cmocka_unit_test_setup_teardown(test_a_segment_gone_starts_empty_and_says_so, rig_setup,
                                    rig_teardown),
    cmocka_unit_test_setup_teardown(test_a_file_that_is_not_a_state_is_refused, rig_setup,
                                    rig_teardown),
    cmocka_unit_test_setup_teardown(test_segments_destroyed_at_exit_are_refused, rig_setup,
                                    rig_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
