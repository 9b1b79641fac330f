/* The pager's state segment (src/state/state_segment.c): it outlives a process killed with
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
#include "state_segment_layout.h"

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
  r->fp = (struct state_segment_fingerprint){
    .pages = PAGES, .redundancy = 1, .group = 4, .encrypt = 1
  };
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
  char lock[160];
  snprintf(lock, sizeof lock, "%s.lock", r->path); /* the state's lock file stays */
  unlink(lock);
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
    st.map[p] = page_entry_slot(PAGE_SPILL, p * 7 + p % 5);
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
    assert_true(st.map[p] == page_entry_slot(PAGE_SPILL, p * 7 + p % 5));
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
      page_sealer_init_at(&sealer, PAGES, true, device_key, st.seals, st.next_version, err,
                          sizeof err) < 0)
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
                                       st.next_version, err, sizeof err),
                   0);
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
  /* Servers 1 to 3 hold the groups' slots: the state's server table has them. */
  *st.nservers = 4;
  for (unsigned s = 0; s < 4; s++)
    st.servers[s].reserved_pages = 2 * GROUPS_WRITTEN;
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
  assert_int_equal(
    group_table_adopt(&t, (struct group **)st.chunks, st.nchunks, &source, &map), 0);
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
  st.map[17] = page_entry_slot(PAGE_SPILL, 31);
  state_segment_detach(&st);

  assert_int_equal(open_state(r, &st, key_b, again, err, sizeof err), -1);
  assert_non_null(strstr(err, "was attached with another key"));
  assert_non_null(strstr(err, "same key= and enckey="));

  assert_int_equal(open_state(r, &st, key_a, again, err, sizeof err), 0);
  assert_true(st.recovered);
  assert_memory_equal(device_key, again, sizeof again);
  assert_true(st.map[17] == page_entry_slot(PAGE_SPILL, 31));
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
  st.map[5] = page_entry_slot(PAGE_SPILL, 71);
  state_segment_detach(&st);

  uint8_t *base = shmat(id, NULL, 0);
  assert_true(base != (void *)-1);
  uint32_t layout, old = 2;
  memcpy(&layout, base + 16, sizeof layout);
  assert_int_equal(layout, 4);
  memcpy(base + 16, &old, sizeof old);
  shmdt(base);
  assert_int_equal(open_state(r, &st, key_a, device_key, err, sizeof err), -1);
  assert_non_null(strstr(err, "is not a pager state of this version (layout 2, this build "
                              "reads 4; field layout)"));
  base = shmat(id, NULL, 0);
  assert_true(base != (void *)-1);
  memcpy(&layout, base + 16, sizeof layout);
  assert_int_equal(layout, 2);
  uint32_t now = 4;
  memcpy(base + 16, &now, sizeof now);
  shmdt(base);
  open_state_ok(r, &st, device_key);
  assert_true(st.recovered);
  assert_true(st.map[5] == page_entry_slot(PAGE_SPILL, 71));
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
    snprintf(st.servers[i].address, sizeof st.servers[i].address, "10.0.%u.%u:7070", i / 256,
             i % 256);
  snprintf(st.servers[STATE_SEGMENT_SERVERS - 1].address, STATE_SEGMENT_ADDRESS_LEN,
           "last:1");
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
                                      sizeof note, err, sizeof err),
                   0);
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

/* ---- a corrupt segment is refused, naming the field ------------------------------------- */

#define RECORD_GROUP 3u /* a sealed group of two members and its parity */
#define OPEN_GROUP 4u   /* the open group: one member, its parity slot reserved */
#define RESERVED 64u    /* slots server 0 reserved */

/* A state with one of every record a takeover reads: a server, a chunk of groups with a
 * sealed one and an open one, the map and the seals naming them, a write in flight and
 * a parity buffer. It passes every check: the corruptions below start from it. */
static void write_every_record(struct rig *r, uint8_t device_key[32], int *segment,
                               int *chunk)
{
  struct state_segment st;
  open_state_ok(r, &st, device_key);
  *st.nservers = 1;
  snprintf(st.servers[0].address, sizeof st.servers[0].address, "127.0.0.1:7000");
  st.servers[0].reserved_pages = RESERVED;
  struct group *groups = state_segment_chunk_new(&st, 0);
  assert_non_null(groups);
  struct group *g = &groups[RECORD_GROUP];
  *g = (struct group){ .state = GROUP_SEALED,
                       .capacity = 2,
                       .members = 2,
                       .has_parity = 1,
                       .live = 2,
                       .buffer = GROUP_NO_BUFFER };
  for (unsigned m = 0; m <= GROUP_MAX_DATA; m++)
    g->server[m] = SERVER_INDEX_NONE;
  for (unsigned m = 0; m < 3; m++) {
    g->server[m] = 0;
    g->slot[m] = 1 + m;
  }
  g->page[0] = 5;
  g->page[1] = 6;
  struct group *open = &groups[OPEN_GROUP];
  *open = (struct group){
    .state = GROUP_OPEN, .capacity = 2, .members = 1, .has_parity = 1, .live = 1, .buffer = 0
  };
  for (unsigned m = 0; m <= GROUP_MAX_DATA; m++)
    open->server[m] = SERVER_INDEX_NONE;
  open->server[0] = 0;
  open->slot[0] = 4;
  open->page[0] = 8;
  *st.open_parity_server = 0;
  *st.open_parity_slot = 5;
  *st.open_group = OPEN_GROUP;
  st.parity[0] = (struct state_segment_parity){
    .group = OPEN_GROUP, .published = STATE_SEGMENT_PARITY_PUBLISHED(0, 1)
  };
  st.map[5] = page_entry_remote(RECORD_GROUP, 0);
  st.map[6] = page_entry_remote(RECORD_GROUP, 1);
  st.map[8] = page_entry_remote(OPEN_GROUP, 0);
  st.map[9] = page_entry_slot(PAGE_SPILL, 2);
  for (uint64_t p = 5; p <= 9; p++)
    st.seals[p].version = (*st.next_version)++;
  st.writes[1] = (struct state_segment_write){ .page = 7,
                                               .new_entry = page_entry_slot(PAGE_SPILL, 9),
                                               .joining = page_entry_slot(PAGE_SPILL, 9),
                                               .old_entry = 0,
                                               .active = 1 };
  *segment = st.segment;
  *chunk = st.header->group_chunk_segment[0];
  state_segment_detach(&st);
}

enum where { IN_HEADER, IN_CHUNK };

struct corruption {
  const char *what;
  enum where where;
  size_t offset, size;
  uint64_t value;    /* the field's new value; a field of more than 8 bytes is filled
                          with its low byte */
  const char *names; /* what the refusal says; NULL: the value is one the takeover
                          handles (no bound), and it is taken over */
};

#define HEADER(member) \
  IN_HEADER, offsetof(struct state_segment_header, member), \
    sizeof(((struct state_segment_header *)0)->member)
#define GROUP_AT(id, member) \
  IN_CHUNK, (id) * sizeof(struct group) + offsetof(struct group, member), \
    sizeof(((struct group *)0)->member)
#define MAP(p) \
  IN_HEADER, (size_t)(STATE_HEADER_BYTES + (p) * sizeof(page_entry)), sizeof(page_entry)

static const struct corruption corruptions[] = {
  { "magic", HEADER(fixed.magic), 'X', "field magic" },
  { "layout", HEADER(fixed.layout), 2, "field layout" },
  { "header_bytes", HEADER(fixed.header_bytes), 4096, "field header_bytes" },
  { "identity", HEADER(fixed.identity), 0xaa, "field identity" },
  { "pages", HEADER(fixed.fingerprint.pages), PAGES * 1024, "field fingerprint.pages" },
  { "redundancy", HEADER(fixed.fingerprint.redundancy), 9, "field fingerprint.redundancy" },
  { "group", HEADER(fixed.fingerprint.group), 200, "field fingerprint.group" },
  { "encrypt", HEADER(fixed.fingerprint.encrypt), 0, "field fingerprint.encrypt" },
  { "chunk_bytes", HEADER(fixed.fingerprint.chunk_bytes), 12,
    "field fingerprint.chunk_bytes" },
  { "map_offset", HEADER(fixed.regions.map), UINT64_C(1) << 40, "field map_offset" },
  { "seals_offset", HEADER(fixed.regions.seals), 8, "field seals_offset" },
  { "parity_offset", HEADER(fixed.regions.parity_pages), UINT64_MAX - 4095,
    "field parity_offset" },
  { "op_pages_offset", HEADER(fixed.regions.op_pages), 1u << 30, "field op_pages_offset" },
  { "total_bytes", HEADER(fixed.regions.total), UINT64_C(1) << 50, "field total_bytes" },
  { "generation", HEADER(generation), 0, "field generation" },
  { "next_version", HEADER(next_version), 0, "field next_version" },
  { "wrap_nonce", HEADER(wrap_nonce), 0x55, "field wrap_tag" },
  { "wrapped_key", HEADER(wrapped_key), 0x55, "field wrap_tag" },
  { "wrap_tag", HEADER(wrap_tag), 0x55, "field wrap_tag" },
  { "group_chunks", HEADER(group_chunks), STATE_SEGMENT_MAX_CHUNKS + 1,
    "field group_chunks" },
  { "group_chunk_segment", HEADER(group_chunk_segment[0]), (uint32_t)-7,
    "field group_chunk_segment[0]" },
  { "nservers", HEADER(nservers), STATE_SEGMENT_SERVERS + 1, "field nservers" },
  { "nservers past the table's entries", HEADER(nservers), 0, "field groups[3].server[0]" },
  { "server address", HEADER(servers[0].address), 'a', "field servers[0].address" },
  { "server addr_len", HEADER(servers[0].addr_len), 4096, "field servers[0].addr_len" },
  { "server state", HEADER(servers[0].state), 200, "field servers[0].state" },
  { "server flags", HEADER(servers[0].flags), 0x80, "field servers[0].flags" },
  { "server reserved_pages", HEADER(servers[0].reserved_pages), UINT64_C(1) << 40,
    "field servers[0].reserved_pages" },
  { "server reserved_pages below its slots", HEADER(servers[0].reserved_pages), 2,
    "field groups[3].slot[1]" },
  { "server token", HEADER(servers[0].token), 0x33, NULL },
  { "server addr", HEADER(servers[0].addr), 0x33, NULL },
  { "write active", HEADER(writes[1].active), 2, "field writes[1].active" },
  { "write page", HEADER(writes[1].page), PAGES, "field writes[1].page" },
  { "write new_entry", HEADER(writes[1].new_entry), UINT64_C(1) << 62 | UINT64_C(99999) << 8,
    "field writes[1].new_entry" },
  { "write joining", HEADER(writes[1].joining), UINT64_C(3) << 62,
    "field writes[1].joining" },
  { "write old_entry", HEADER(writes[1].old_entry), UINT64_C(1) << 62 | UINT64_C(4096) << 8,
    "field writes[1].old_entry" },
  { "write old_seal", HEADER(writes[1].old_seal.version), 1000,
    "field writes[1].old_seal.version" },
  { "parity published", HEADER(parity[0].published), STATE_SEGMENT_PARITY_PUBLISHED(0, 40),
    "field parity[0].published" },
  { "parity group", HEADER(parity[0].group), 77, NULL },
  { "open_group", HEADER(open_group), GROUP_CHUNK_SIZE, "field open_group" },
  { "open_parity_server", HEADER(open_parity_server), 9, NULL },
  { "open_parity_slot", HEADER(open_parity_slot), RESERVED, "field open_parity_slot" },
  { "rebuild running", HEADER(rebuild.running), 3, "field rebuild.running" },
  { "rebuild finished", HEADER(rebuild.finished), 3, "field rebuild.finished" },
  { "rebuild pages_moved", HEADER(rebuild.pages_moved), UINT64_MAX, NULL },
  { "group state", GROUP_AT(RECORD_GROUP, state), 9, "field groups[3].state" },
  { "group capacity", GROUP_AT(RECORD_GROUP, capacity), GROUP_MAX_DATA + 1,
    "field groups[3].capacity" },
  { "group members", GROUP_AT(RECORD_GROUP, members), GROUP_MAX_DATA + 1,
    "field groups[3].members" },
  { "group members past capacity", GROUP_AT(OPEN_GROUP, members), 3,
    "field groups[4].members" },
  { "group has_parity", GROUP_AT(RECORD_GROUP, has_parity), 2, "field groups[3].has_parity" },
  { "group parities", GROUP_AT(RECORD_GROUP, parities), GROUP_MAX_PARITY + 1,
    "field groups[3].parities" },
  { "group absent", GROUP_AT(RECORD_GROUP, absent), 0x8000, "field groups[3].absent" },
  { "group buffer", GROUP_AT(OPEN_GROUP, buffer), STATE_SEGMENT_PARITY_BUFFERS,
    "field groups[4].buffer" },
  { "group server", GROUP_AT(RECORD_GROUP, server[1]), 1, "field groups[3].server[1]" },
  { "group parity server", GROUP_AT(RECORD_GROUP, server[2]), 4000,
    "field groups[3].server[2]" },
  { "group slot", GROUP_AT(RECORD_GROUP, slot[0]), RESERVED, "field groups[3].slot[0]" },
  { "group page", GROUP_AT(RECORD_GROUP, page[1]), PAGES, "field groups[3].page[1]" },
  { "map group", MAP(5), UINT64_C(1) << 62 | UINT64_C(5000) << 8, "field map[5]" },
  { "map local", MAP(6), UINT64_C(3) << 62 | 1, "field map[6]" },
  { "map zero kind", MAP(7), 12345, "field map[7]" },
  { "seal version", IN_HEADER,
    (size_t)(STATE_HEADER_BYTES + ((PAGES * sizeof(page_entry) + 4095) & ~(size_t)4095) +
             9 * sizeof(struct page_seal)),
    sizeof(uint64_t), 6, "field seals[9].version" },
};

/* Writes c's value into the segment `id` at c's place, keeping what was there in saved. */
static void corrupt(int id, const struct corruption *c, uint8_t *saved, bool restore)
{
  uint8_t *base = shmat(id, NULL, 0);
  assert_true(base != (void *)-1);
  uint8_t *field = base + c->offset;
  if (restore) {
    memcpy(field, saved, c->size);
  } else {
    memcpy(saved, field, c->size);
    if (c->size > sizeof c->value)
      memset(field, (int)(c->value & 0xff), c->size);
    else
      memcpy(field, &c->value, c->size);
  }
  shmdt(base);
}

/* Every field of the header and of the records a takeover reads, corrupted in turn: the
 * takeover refuses naming the field (or, for a field with no bound, takes the state
 * over), touches nothing out of bounds (the sanitizer build runs this too), and leaves
 * the state as it was for the next attach. */
static void test_each_field_corrupted_is_refused_by_name(void **state)
{
  struct rig *r = *state;
  uint8_t device_key[32];
  int segment, chunk;
  write_every_record(r, device_key, &segment, &chunk);
  for (size_t i = 0; i < sizeof corruptions / sizeof corruptions[0]; i++) {
    const struct corruption *c = &corruptions[i];
    int id = c->where == IN_CHUNK ? chunk : segment;
    uint8_t saved[4096];
    assert_true(c->size <= sizeof saved);
    corrupt(id, c, saved, false);
    struct state_segment st;
    char err[1024] = "";
    int r_open = open_state(r, &st, key_a, device_key, err, sizeof err);
    if (c->names) {
      if (r_open == 0)
        fail_msg("%s corrupted: taken over", c->what);
      if (!strstr(err, c->names))
        fail_msg("%s corrupted: the refusal does not say '%s': %s", c->what, c->names, err);
      assert_non_null(strstr(err, "to start this device empty"));
    } else {
      if (r_open < 0)
        fail_msg("%s changed (a value with no bound): refused: %s", c->what, err);
      state_segment_detach(&st);
    }
    corrupt(id, c, saved, true);
  }
  struct state_segment st;
  open_state_ok(r, &st, device_key);
  assert_true(st.recovered);
  assert_true(st.map[5] == page_entry_remote(RECORD_GROUP, 0));
  assert_int_equal(st.nchunks, 1);
  state_segment_remove(&st);
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
    cmocka_unit_test_setup_teardown(test_each_field_corrupted_is_refused_by_name, rig_setup,
                                    rig_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
