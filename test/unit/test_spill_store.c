/* Unit tests for the spill store (src/stores/spill_store.c): asynchronous and blocking I/O
 * against real files, the slot allocator, temporary-file hygiene, error messages, the
 * buffered fallback where O_DIRECT is refused, and a rough throughput figure.
 *
 * Tests that need a facility the machine lacks (root for private mounts, /dev/shm)
 * skip with a message. Mount tests run in a forked child inside its own mount
 * namespace, so nothing they mount is visible outside it or outlives it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"
#include "spill_store.h"

#define PAGE 4096u

/* ---- helpers --------------------------------------------------------------------- */

static int direct_warnings; /* warnings about O_DIRECT being refused */

static void capture_log(enum rp_log_level level, const char *line)
{
  if (level == RP_LOG_WARN && strstr(line, "O_DIRECT"))
    direct_warnings++;
  fprintf(stderr, "log: %s\n", line);
}

/* A pattern that differs in every byte position and between slots and versions, so a
 * page landing in the wrong slot or a torn page shows. */
static void fill(uint8_t *page, uint64_t slot, unsigned version)
{
  uint64_t x = slot * 0x9E3779B97F4A7C15ull + version * 0xC2B2AE3D27D4EB4Full + 1;
  for (unsigned i = 0; i < PAGE; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memcpy(page + i, &x, 8);
  }
}

static char *make_temp_dir(const char *base)
{
  char tmpl[256];
  snprintf(tmpl, sizeof tmpl, "%s/rampart-spill-test-XXXXXX", base);
  char *dir = mkdtemp(tmpl);
  return dir ? strdup(dir) : NULL;
}

static unsigned dir_entries(const char *path)
{
  DIR *d = opendir(path);
  assert_non_null(d);
  unsigned n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      n++;
  closedir(d);
  return n;
}

static struct spill_store *open_temp_store(const char *dir, uint64_t pages, uint32_t qd)
{
  struct spill_store_options o = {
    .path = NULL, .temp_dir = dir, .pages = pages, .queue_depth = qd
  };
  char err[512] = "";
  struct spill_store *s = spill_store_open(&o, err, sizeof err);
  if (!s)
    fail_msg("spill_store_open: %s", err);
  return s;
}

struct req {
  struct spill_io io;
  uint8_t *buf;
  unsigned *pending;
  unsigned *order; /* completion order, for the FIFO check */
  unsigned *next_order;
  unsigned index;
};

static void req_done(struct spill_io *io)
{
  struct req *r = io->user;
  (*r->pending)--;
  if (r->order)
    r->order[(*r->next_order)++] = r->index;
}

/* Runs completions the way the engine's loop will: wait for the eventfd, then reap. */
static void drive(struct spill_store *s, const unsigned *pending)
{
  while (*pending > 0) {
    spill_store_flush_submissions(s);
    struct pollfd p = { .fd = spill_store_event_fd(s), .events = POLLIN };
    int rc = poll(&p, 1, 10000);
    assert_true(rc == 1); /* a timeout means a completion went unsignalled */
    spill_store_reap(s);
  }
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Writes then reads back `pages` slots with `qd` buffers, checking every byte.
 * Requests outnumber buffers, so most wait in the store's queue. */
static void write_read_all(struct spill_store *s, uint64_t pages, double *write_s,
                           double *read_s)
{
  struct req *reqs = calloc(pages, sizeof *reqs);
  uint8_t *data = malloc(pages * PAGE);
  assert_non_null(reqs);
  assert_non_null(data);
  unsigned pending = 0;

  double t0 = now_s();
  for (uint64_t i = 0; i < pages; i++) {
    struct req *r = &reqs[i];
    r->buf = data + i * PAGE;
    r->pending = &pending;
    fill(r->buf, i, 1);
    r->io = (struct spill_io){
      .write = true, .slot = i, .page = r->buf, .done = req_done, .user = r
    };
    pending++;
    spill_store_submit(s, &r->io);
  }
  drive(s, &pending);
  double t1 = now_s();
  for (uint64_t i = 0; i < pages; i++)
    assert_int_equal(reqs[i].io.result, 0);

  memset(data, 0xAA, pages * PAGE);
  double t2 = now_s();
  for (uint64_t i = 0; i < pages; i++) {
    struct req *r = &reqs[i];
    r->io = (struct spill_io){
      .write = false, .slot = i, .page = r->buf, .done = req_done, .user = r
    };
    pending++;
    spill_store_submit(s, &r->io);
  }
  drive(s, &pending);
  double t3 = now_s();

  uint8_t expect[PAGE];
  for (uint64_t i = 0; i < pages; i++) {
    assert_int_equal(reqs[i].io.result, 0);
    fill(expect, i, 1);
    if (memcmp(expect, data + i * PAGE, PAGE) != 0)
      fail_msg("slot %llu read back wrong", (unsigned long long)i);
  }
  if (write_s)
    *write_s = t1 - t0;
  if (read_s)
    *read_s = t3 - t2;
  free(reqs);
  free(data);
}

/* ---- tests ----------------------------------------------------------------------- */

static void test_async_round_trip(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  assert_non_null(dir);
  struct spill_store *s = open_temp_store(dir, 2000, 8);
  assert_int_equal(spill_store_capacity(s), 2000);
  write_read_all(s, 2000, NULL, NULL);
  spill_store_close(s);
  assert_int_equal(rmdir(dir), 0);
  free(dir);
}

/* A request that waits for a buffer must not be overtaken by a later one. */
static void test_queue_is_fifo(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  struct spill_store *s = open_temp_store(dir, 64, 1);
  enum { N = 32 };
  struct req reqs[N];
  static uint8_t bufs[N][PAGE];
  unsigned order[N], next = 0, pending = 0;
  for (unsigned i = 0; i < N; i++) {
    fill(bufs[i], i, 2);
    reqs[i] = (struct req){
      .buf = bufs[i], .pending = &pending, .order = order, .next_order = &next, .index = i
    };
    reqs[i].io = (struct spill_io){
      .write = true, .slot = i, .page = bufs[i], .done = req_done, .user = &reqs[i]
    };
    pending++;
    spill_store_submit(s, &reqs[i].io);
  }
  drive(s, &pending);
  for (unsigned i = 0; i < N; i++)
    assert_int_equal(order[i], i);
  spill_store_close(s);
  rmdir(dir);
  free(dir);
}

static void test_sync_helpers(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  struct spill_store *s = open_temp_store(dir, 16, 0);
  uint8_t in[PAGE], out[PAGE];

  /* Never written: whatever the disk holds, zeros for a fresh preallocated file. */
  memset(out, 0x55, PAGE);
  assert_int_equal(spill_store_read_sync(s, 3, out), 0);
  uint8_t zero[PAGE] = { 0 };
  assert_memory_equal(out, zero, PAGE);

  for (unsigned v = 0; v < 3; v++) {
    fill(in, 7, v);
    assert_int_equal(spill_store_write_sync(s, 7, in), 0);
    assert_int_equal(spill_store_read_sync(s, 7, out), 0);
    assert_memory_equal(in, out, PAGE);
  }
  assert_int_equal(spill_store_sync(s), 0);
  /* Last slot works, one past it is refused without touching the disk. */
  fill(in, 15, 0);
  assert_int_equal(spill_store_write_sync(s, 15, in), 0);
  assert_int_equal(spill_store_write_sync(s, 16, in), -EINVAL);
  assert_int_equal(spill_store_read_sync(s, 1u << 30, out), -EINVAL);
  spill_store_close(s);
  rmdir(dir);
  free(dir);
}

static void test_alloc_until_full(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  /* Not a multiple of 64, so the bits past the end must stay unallocatable. */
  enum { N = 1000 };
  struct spill_store *s = open_temp_store(dir, N, 4);
  static bool seen[N];
  memset(seen, 0, sizeof seen);
  for (unsigned i = 0; i < N; i++) {
    int64_t slot = spill_store_alloc_slot(s);
    assert_true(slot >= 0 && slot < N);
    assert_false(seen[slot]);
    seen[slot] = true;
  }
  assert_int_equal(spill_store_used(s), N);
  assert_int_equal(spill_store_alloc_slot(s), -1);

  spill_store_free_slot(s, 517);
  spill_store_free_slot(s, 3);
  assert_int_equal(spill_store_used(s), N - 2);
  int64_t a = spill_store_alloc_slot(s), b = spill_store_alloc_slot(s);
  assert_true((a == 3 && b == 517) || (a == 517 && b == 3));
  assert_int_equal(spill_store_alloc_slot(s), -1);

  /* A double free is an engine bug: logged, and it must not corrupt the count. */
  spill_store_free_slot(s, 999);
  spill_store_free_slot(s, 999);
  spill_store_free_slot(s, N + 5);
  assert_int_equal(spill_store_used(s), N - 1);
  assert_int_equal(spill_store_alloc_slot(s), 999);

  /* Free everything and fill again: the allocator wraps past its hint. */
  for (unsigned i = 0; i < N; i++)
    spill_store_free_slot(s, i);
  assert_int_equal(spill_store_used(s), 0);
  for (unsigned i = 0; i < N; i++)
    assert_true(spill_store_alloc_slot(s) >= 0);
  assert_int_equal(spill_store_alloc_slot(s), -1);
  spill_store_close(s);
  rmdir(dir);
  free(dir);
}

static void test_claim_slot(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  struct spill_store *s = open_temp_store(dir, 130, 4);
  spill_store_claim_slot(s, 0);
  spill_store_claim_slot(s, 64);
  spill_store_claim_slot(s, 129);
  spill_store_claim_slot(s, 64);  /* idempotent */
  spill_store_claim_slot(s, 130); /* past the end: logged, ignored */
  assert_int_equal(spill_store_used(s), 3);
  for (unsigned i = 0; i < 127; i++) {
    int64_t slot = spill_store_alloc_slot(s);
    assert_true(slot >= 0);
    assert_true(slot != 0 && slot != 64 && slot != 129);
  }
  assert_int_equal(spill_store_alloc_slot(s), -1);
  spill_store_free_slot(s, 64);
  assert_int_equal(spill_store_alloc_slot(s), 64);
  spill_store_close(s);
  rmdir(dir);
  free(dir);
}

static void test_temp_file_leaves_nothing(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  struct spill_store *s = open_temp_store(dir, 256, 4);
  uint8_t page[PAGE];
  fill(page, 1, 1);
  assert_int_equal(spill_store_write_sync(s, 1, page), 0);
  assert_int_equal(dir_entries(dir), 0); /* never had a name */
  spill_store_close(s);
  assert_int_equal(dir_entries(dir), 0);
  assert_int_equal(rmdir(dir), 0);
  free(dir);
}

static void test_named_file_persists(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  char path[512];
  snprintf(path, sizeof path, "%s/spill.img", dir);
  struct spill_store_options o = { .path = path, .pages = 100, .queue_depth = 4 };
  char err[512] = "";
  struct spill_store *s = spill_store_open(&o, err, sizeof err);
  assert_non_null(s);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal(st.st_size, 100 * PAGE);
  assert_true((uint64_t)st.st_blocks * 512 >= 100 * PAGE); /* preallocated, not sparse */
  uint8_t in[PAGE], out[PAGE];
  fill(in, 42, 9);
  assert_int_equal(spill_store_write_sync(s, 42, in), 0);
  assert_int_equal(spill_store_sync(s), 0);
  spill_store_close(s);

  /* Reopening an existing file keeps its contents. */
  s = spill_store_open(&o, err, sizeof err);
  assert_non_null(s);
  assert_int_equal(spill_store_read_sync(s, 42, out), 0);
  assert_memory_equal(in, out, PAGE);
  spill_store_close(s);
  unlink(path);
  rmdir(dir);
  free(dir);
}

static void test_missing_directory_fails(void **state)
{
  (void)state;
  const char *path = "/nonexistent-rampart-dir/sub/spill.img";
  struct spill_store_options o = { .path = path, .pages = 10 };
  char err[512] = "";
  assert_null(spill_store_open(&o, err, sizeof err));
  assert_non_null(strstr(err, path));
  assert_non_null(strstr(err, "No such file or directory"));

  struct spill_store_options t = { .temp_dir = "/nonexistent-rampart-dir", .pages = 10 };
  assert_null(spill_store_open(&t, err, sizeof err));
  assert_non_null(strstr(err, "/nonexistent-rampart-dir"));

  struct spill_store_options z = { .temp_dir = "/var/tmp", .pages = 0 };
  assert_null(spill_store_open(&z, err, sizeof err));
  assert_non_null(strstr(err, "zero"));
}

/* Closing with requests queued: those in flight finish for real, the rest cancel, and
 * every callback runs before close returns. */
/* An fdatasync through the ring while writes are queued and in flight: it holds no
 * bounce buffer, completes from reap like any request, and closing the store with one
 * in flight waits for it (its callback runs). */
static void test_async_sync(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  struct spill_store *s = open_temp_store(dir, 64, 2);
  enum { N = 16 };
  struct req reqs[N], syncs[3];
  static uint8_t bufs[N][PAGE];
  unsigned pending = 0;
  for (unsigned i = 0; i < N; i++) {
    fill(bufs[i], i, 3);
    reqs[i] = (struct req){ .buf = bufs[i], .pending = &pending };
    reqs[i].io = (struct spill_io){
      .write = true, .slot = i, .page = bufs[i], .done = req_done, .user = &reqs[i]
    };
    pending++;
    spill_store_submit(s, &reqs[i].io);
    if (i % 8 == 0) { /* two syncs among the writes: neither takes a buffer */
      syncs[i / 8] = (struct req){ .pending = &pending };
      syncs[i / 8].io =
        (struct spill_io){ .done = req_done, .user = &syncs[i / 8], .result = 1 };
      pending++;
      spill_store_submit_sync(s, &syncs[i / 8].io);
    }
  }
  spill_store_flush_submissions(s);
  drive(s, &pending);
  for (unsigned i = 0; i < N; i++)
    assert_int_equal(reqs[i].io.result, 0);
  assert_int_equal(syncs[0].io.result, 0);
  assert_int_equal(syncs[1].io.result, 0);
  uint8_t out[PAGE];
  for (unsigned i = 0; i < N; i++) {
    assert_int_equal(spill_store_read_sync(s, i, out), 0);
    assert_memory_equal(out, bufs[i], PAGE);
  }
  /* One left in flight at close. */
  syncs[2] = (struct req){ .pending = &pending };
  syncs[2].io = (struct spill_io){ .done = req_done, .user = &syncs[2], .result = 1 };
  pending++;
  spill_store_submit_sync(s, &syncs[2].io);
  spill_store_close(s);
  assert_int_equal(pending, 0);
  assert_true(syncs[2].io.result == 0 || syncs[2].io.result == -ECANCELED);
  rmdir(dir);
  free(dir);
}

static void test_close_with_queued(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  struct spill_store *s = open_temp_store(dir, 64, 2);
  enum { N = 16 };
  struct req reqs[N];
  static uint8_t bufs[N][PAGE];
  unsigned pending = 0;
  for (unsigned i = 0; i < N; i++) {
    reqs[i] = (struct req){ .buf = bufs[i], .pending = &pending };
    reqs[i].io = (struct spill_io){
      .write = true, .slot = i, .page = bufs[i], .done = req_done, .user = &reqs[i]
    };
    pending++;
    spill_store_submit(s, &reqs[i].io);
  }
  spill_store_close(s);
  assert_int_equal(pending, 0);
  unsigned ok = 0, cancelled = 0;
  for (unsigned i = 0; i < N; i++) {
    if (reqs[i].io.result == 0)
      ok++;
    else if (reqs[i].io.result == -ECANCELED)
      cancelled++;
  }
  assert_int_equal(ok, 2);
  assert_int_equal(cancelled, N - 2);
  rmdir(dir);
  free(dir);
}

static void test_dev_shm(void **state)
{
  (void)state;
  struct stat st;
  if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode) || access("/dev/shm", W_OK) != 0) {
    print_message("skipped: no writable /dev/shm directory on this host\n");
    skip();
  }
  char *dir = make_temp_dir("/dev/shm");
  assert_non_null(dir);
  struct spill_store *s = open_temp_store(dir, 300, 8);
  /* tmpfs takes O_DIRECT since Linux 6.6; before that this is the buffered fallback. */
  print_message("/dev/shm: %s I/O\n", spill_store_is_direct(s) ? "direct" : "buffered");
  write_read_all(s, 300, NULL, NULL);
  spill_store_close(s);
  assert_int_equal(dir_entries(dir), 0);
  assert_int_equal(rmdir(dir), 0);
  free(dir);
}

/* ---- tests in a private mount namespace (root only) -------------------------------- */

/* Runs fn in a child with its own mount namespace and `fstype` (with `opts`) mounted on
 * a fresh directory. The child's exit status: 0 pass, 77 skip, else the failing check. */
static int in_private_mount(const char *fstype, const char *opts, int (*fn)(const char *dir))
{
  char *dir = make_temp_dir("/var/tmp");
  assert_non_null(dir);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
      _exit(77);
    if (mount(fstype, dir, fstype, 0, opts) != 0)
      _exit(77);
    int rc = fn(dir);
    umount2(dir, MNT_DETACH);
    _exit(rc);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  rmdir(dir);
  free(dir);
  assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

/* ramfs has no direct I/O (nor fallocate) on any kernel: both fallbacks must kick in. */
static int ramfs_child(const char *dir)
{
  direct_warnings = 0;
  struct spill_store_options o = { .temp_dir = dir, .pages = 64, .queue_depth = 4 };
  char err[512] = "";
  struct spill_store *s = spill_store_open(&o, err, sizeof err);
  if (!s) {
    fprintf(stderr, "ramfs open: %s\n", err);
    return 1;
  }
  if (spill_store_is_direct(s))
    return 2;
  if (direct_warnings != 1)
    return 3;
  uint8_t in[PAGE], out[PAGE];
  for (unsigned i = 0; i < 64; i++) {
    fill(in, i, 4);
    if (spill_store_write_sync(s, i, in) != 0)
      return 4;
  }
  for (unsigned i = 0; i < 64; i++) {
    fill(in, i, 4);
    if (spill_store_read_sync(s, i, out) != 0 || memcmp(in, out, PAGE) != 0)
      return 5;
  }
  spill_store_close(s);
  /* A second store does not warn again. */
  s = spill_store_open(&o, err, sizeof err);
  if (!s || direct_warnings != 1)
    return 6;
  spill_store_close(s);
  DIR *d = opendir(dir);
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      return 7; /* the temporary file outlived the store */
  closedir(d);
  return 0;
}

static void test_ramfs_fallback(void **state)
{
  (void)state;
  int rc = in_private_mount("ramfs", NULL, ramfs_child);
  if (rc == 77) {
    print_message("skipped: needs root to mount ramfs in a private namespace\n");
    skip();
  }
  assert_int_equal(rc, 0);
}

static int enospc_child(const char *dir)
{
  char path[512];
  snprintf(path, sizeof path, "%s/big.img", dir);
  struct spill_store_options o = { .path = path, .pages = 4096 }; /* 16 MiB into 1 MiB */
  char err[512] = "";
  struct spill_store *s = spill_store_open(&o, err, sizeof err);
  if (s)
    return 1;
  fprintf(stderr, "expected failure: %s\n", err);
  if (!strstr(err, path))
    return 2;
  if (!strstr(err, "no space left") || !strstr(err, "16 MiB"))
    return 3;
  if (access(path, F_OK) == 0)
    return 4; /* a file we created must not be left behind */
  return 0;
}

static void test_enospc_message(void **state)
{
  (void)state;
  int rc = in_private_mount("tmpfs", "size=1m", enospc_child);
  if (rc == 77) {
    print_message("skipped: needs root to mount a small tmpfs in a private namespace\n");
    skip();
  }
  assert_int_equal(rc, 0);
}

/* Attaches `backing` to a free loop device; returns its fd (path in dev) or -1. */
static int attach_loop(int backing, char dev[64])
{
  int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0)
    return -1;
  int fd = -1;
  /* Another process may take the free device between the two calls: retry. */
  for (int attempt = 0; attempt < 10 && fd < 0; attempt++) {
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0)
      break;
    snprintf(dev, 64, "/dev/loop%d", n);
    fd = open(dev, O_RDWR | O_CLOEXEC);
    if (fd >= 0 && ioctl(fd, LOOP_SET_FD, backing) != 0) {
      close(fd);
      fd = -1;
    }
  }
  close(ctl);
  return fd;
}

/* A block device is used as is, after checking it is big enough, and slot N sits at
 * byte N * 4096. */
static void test_block_device(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  char backing_path[512];
  snprintf(backing_path, sizeof backing_path, "%s/backing.img", dir);
  int backing = open(backing_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  assert_true(backing >= 0);
  assert_int_equal(ftruncate(backing, 1 << 20), 0);
  char dev[64];
  int loop = attach_loop(backing, dev);
  if (loop < 0) {
    close(backing);
    unlink(backing_path);
    rmdir(dir);
    free(dir);
    print_message("skipped: no loop device (needs root and /dev/loop-control)\n");
    skip();
  }

  struct spill_store_options o = { .path = dev, .pages = 512, .queue_depth = 8 };
  char err[512] = "";
  assert_null(spill_store_open(&o, err, sizeof err)); /* 2 MiB asked of a 1 MiB device */
  assert_non_null(strstr(err, dev));
  assert_non_null(strstr(err, "1 MiB"));
  assert_non_null(strstr(err, "use a bigger device"));

  o.pages = 256;
  struct spill_store *s = spill_store_open(&o, err, sizeof err);
  if (!s)
    fail_msg("%s", err);
  write_read_all(s, 256, NULL, NULL);
  assert_int_equal(spill_store_sync(s), 0);
  /* The store holds the device exclusively: a second user is refused, not let in. */
  assert_null(spill_store_open(&o, err, sizeof err));
  assert_non_null(strstr(err, "in use"));
  spill_store_close(s);

  ioctl(loop, LOOP_CLR_FD, 0);
  close(loop);
  uint8_t expect[PAGE], got[PAGE];
  fill(expect, 77, 1);
  assert_int_equal(pread(backing, got, PAGE, 77 * PAGE), PAGE);
  assert_memory_equal(expect, got, PAGE);
  close(backing);
  unlink(backing_path);
  rmdir(dir);
  free(dir);
}

/* Printed, not asserted: these machines are shared and noisy. */
static void test_throughput(void **state)
{
  (void)state;
  char *dir = make_temp_dir("/var/tmp");
  enum { N = 32768 }; /* 128 MiB */
  struct spill_store *s = open_temp_store(dir, N, 32);
  double w = 0, r = 0, w2 = 0, r2 = 0;
  write_read_all(s, N, &w, &r);
  /* The first write of each block also converts its preallocated (unwritten) extent;
   * the second pass shows steady state. */
  write_read_all(s, N, &w2, &r2);
  print_message("spill store throughput, QD 32, %s I/O on /var/tmp, %u pages: first write "
                "%.0f pages/s, rewrite %.0f pages/s (%.0f MiB/s), read %.0f pages/s "
                "(%.0f MiB/s)\n",
                spill_store_is_direct(s) ? "direct" : "buffered", (unsigned)N, N / w, N / w2,
                N / w2 * PAGE / 1048576, N / r2, N / r2 * PAGE / 1048576);
  spill_store_close(s);
  rmdir(dir);
  free(dir);
}

int main(void)
{
  rp_log_set_sink(capture_log);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_async_round_trip),
    cmocka_unit_test(test_queue_is_fifo),
    cmocka_unit_test(test_sync_helpers),
    cmocka_unit_test(test_alloc_until_full),
    cmocka_unit_test(test_claim_slot),
    cmocka_unit_test(test_temp_file_leaves_nothing),
    cmocka_unit_test(test_named_file_persists),
    cmocka_unit_test(test_missing_directory_fails),
    cmocka_unit_test(test_close_with_queued),
    cmocka_unit_test(test_async_sync),
    /* Before /dev/shm: the fallback warns once per process, and the ramfs child must
     * be the first to see it (on kernels where tmpfs refuses O_DIRECT too). */
    cmocka_unit_test(test_ramfs_fallback),
    cmocka_unit_test(test_dev_shm),
    cmocka_unit_test(test_enospc_message),
    cmocka_unit_test(test_block_device),
    cmocka_unit_test(test_throughput),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
