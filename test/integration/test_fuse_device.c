/* rampart-fuse, the engine served as a FUSE file: real rampartd processes, the real
 * daemon, and the kernel's FUSE client. Every byte read back through the mounted file
 * is checked against a shadow copy: writes and reads at random offsets and sizes from
 * 512 bytes to 2 MiB (unaligned too) from several threads at once, holes punched and
 * ranges zeroed, a rampartd killed with SIGKILL mid-stream (parity-log rebuilds its
 * pages), and a loop device with direct I/O on top. SIGTERM must unmount and end it
 * cleanly. Mounting needs root and /dev/fuse: without them the cases skip. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "xorshift.h"

#define PAGE 4096u
#define DEVICE_SIZE (48ull << 20)
#define MAX_LEN (2u << 20)
#define THREADS 4u

struct setup {
  struct rp_test_cluster cluster;
  char mount[700], file[760], log[700];
  pid_t daemon;
  int fd;
  uint8_t *shadow;
  bool cluster_up;
};

static const char *daemon_path(void)
{
  const char *p = getenv("RAMPART_FUSE");
  if (!p)
    fail_msg("RAMPART_FUSE is not set: run the tests through ctest");
  return p;
}

/* Mounting needs root and /dev/fuse; a host without them skips, saying why. */
static void require_fuse(void)
{
  if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) != 0) {
    printf("SKIP: mounting rampart-fuse needs root and /dev/fuse\n");
    skip();
  }
}

static bool mounted(const char *dir)
{
  FILE *f = fopen("/proc/mounts", "re");
  char line[2048];
  bool found = false;
  while (f && fgets(line, sizeof line, f)) {
    char *at = strchr(line, ' ');
    size_t n = strlen(dir);
    if (at && strncmp(at + 1, dir, n) == 0 && at[1 + n] == ' ')
      found = true;
  }
  if (f)
    fclose(f);
  return found;
}

static void start_daemon(struct setup *s, const char *const *extra)
{
  struct rp_test_cluster *c = &s->cluster;
  snprintf(s->mount, sizeof s->mount, "%s/mnt", c->dir);
  snprintf(s->file, sizeof s->file, "%s/device", s->mount);
  snprintf(s->log, sizeof s->log, "%s/fuse.log", c->dir);
  assert_int_equal(mkdir(s->mount, 0700), 0);
  char servers[1024] = "servers=", key[700], tmp[700];
  for (unsigned i = 0; i < c->n; i++) {
    strcat(servers, c->servers[i].addr);
    strcat(servers, i + 1 < c->n ? "," : "");
  }
  snprintf(key, sizeof key, "key=%s", c->key_path);
  snprintf(tmp, sizeof tmp, "tmpdir=%s", c->dir);
  const char *argv[32] = { daemon_path(), "--mount",  s->mount, "--threads", "4",
                           "mlock=false", "size=48M", servers,  key,         tmp };
  unsigned a = 10;
  for (unsigned i = 0; extra && extra[i] && a < 31; i++)
    argv[a++] = extra[i];
  int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  s->daemon = fork();
  assert_true(s->daemon >= 0);
  if (s->daemon == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(fd);
  for (unsigned waited = 0; !rp_test_file_has(s->log, "rampart-fuse: serving");
       waited += 20) {
    int status;
    if (waitpid(s->daemon, &status, WNOHANG) == s->daemon) {
      s->daemon = 0;
      rp_test_print_file(s->log, "rampart-fuse: ");
      fail_msg("rampart-fuse exited before serving (its log is above)");
    }
    if (waited > 20000) {
      rp_test_print_file(s->log, "rampart-fuse: ");
      fail_msg("rampart-fuse did not serve within 20 s");
    }
    usleep(20000);
  }
  assert_true(rp_test_file_has(s->log, s->file)); /* the path it prints on stdout */
  s->fd = open(s->file, O_RDWR | O_CLOEXEC);
  if (s->fd < 0)
    fail_msg("cannot open %s: %s", s->file, strerror(errno));
  struct stat st;
  assert_int_equal(fstat(s->fd, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal((uint64_t)st.st_size, DEVICE_SIZE);
  s->shadow = calloc(1, DEVICE_SIZE);
  assert_non_null(s->shadow);
}

static void setup_all(struct setup *s, const char *const *extra)
{
  require_fuse();
  assert_int_equal(rp_test_cluster_start(&s->cluster, 5, "96M", NULL), 0);
  s->cluster_up = true;
  start_daemon(s, extra);
}

/* SIGTERM: it must unmount and exit 0 within 20 s; then the cluster stops (and checks
 * its servers lived and exited cleanly). */
static void stop_all(struct setup *s)
{
  if (s->fd >= 0)
    close(s->fd);
  s->fd = -1;
  if (s->daemon > 0) {
    kill(s->daemon, SIGTERM);
    int status = -1;
    for (unsigned waited = 0; waitpid(s->daemon, &status, WNOHANG) != s->daemon;
         waited += 20) {
      if (waited > 20000) {
        kill(s->daemon, SIGKILL);
        waitpid(s->daemon, &status, 0);
        rp_test_print_file(s->log, "rampart-fuse: ");
        fail_msg("rampart-fuse did not stop within 20 s of SIGTERM");
      }
      usleep(20000);
    }
    s->daemon = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      char how[96];
      rp_test_print_file(s->log, "rampart-fuse: ");
      fail_msg("rampart-fuse ended with %s on SIGTERM",
               rp_test_describe_status(status, how, sizeof how));
    }
    if (mounted(s->mount))
      fail_msg("rampart-fuse exited on SIGTERM and left %s mounted", s->mount);
  }
  s->cluster_up = false;
  rp_test_cluster_stop(&s->cluster);
}

static int setup_state(void **state)
{
  struct setup *s = calloc(1, sizeof *s);
  if (!s)
    return -1;
  s->fd = -1;
  *state = s;
  return 0;
}

/* What a failed case left: the daemon killed, its mount detached, the servers
 * stopped, so that nothing outlives the test. */
static int teardown_state(void **state)
{
  struct setup *s = *state;
  if (s->fd >= 0)
    close(s->fd);
  if (s->daemon > 0) {
    kill(s->daemon, SIGKILL);
    waitpid(s->daemon, NULL, 0);
  }
  if (s->mount[0] && mounted(s->mount))
    umount2(s->mount, MNT_DETACH);
  if (s->cluster_up)
    rp_test_cluster_stop(&s->cluster);
  free(s->shadow);
  free(s);
  return 0;
}

/* The whole of a pwrite or pread (is_read), a short one continued. NULL, or what went
 * wrong in why (the workers' threads cannot fail a cmocka test themselves). */
static const char *full_io(int fd, bool is_read, uint8_t *buf, size_t len, uint64_t off,
                           char *why, size_t whylen)
{
  for (size_t done = 0; done < len;) {
    ssize_t n = is_read ? pread(fd, buf + done, len - done, (off_t)(off + done))
                        : pwrite(fd, buf + done, len - done, (off_t)(off + done));
    if (n <= 0) {
      snprintf(why, whylen, "%s of %zu bytes at %llu: %s", is_read ? "pread" : "pwrite",
               len - done, (unsigned long long)(off + done),
               n < 0 ? strerror(errno) : "nothing done");
      return why;
    }
    done += (size_t)n;
  }
  return NULL;
}

static void full_pwrite(int fd, const uint8_t *buf, size_t len, uint64_t off)
{
  char why[256];
  if (full_io(fd, false, (uint8_t *)buf, len, off, why, sizeof why))
    fail_msg("%s", why);
}

static void full_pread(int fd, uint8_t *buf, size_t len, uint64_t off)
{
  char why[256];
  if (full_io(fd, true, buf, len, off, why, sizeof why))
    fail_msg("%s", why);
}

/* Compares [off, off + len) of the device with the shadow, naming the first byte that
 * differs. */
static void verify_range(struct setup *s, uint64_t off, uint64_t len)
{
  static uint8_t buf[MAX_LEN];
  for (uint64_t at = off; at < off + len; at += MAX_LEN) {
    size_t n = (size_t)(off + len - at < MAX_LEN ? off + len - at : MAX_LEN);
    full_pread(s->fd, buf, n, at);
    if (memcmp(buf, s->shadow + at, n) != 0) {
      size_t k = 0;
      while (buf[k] == s->shadow[at + k])
        k++;
      fail_msg("byte %llu reads back 0x%02x, 0x%02x was written",
               (unsigned long long)(at + k), buf[k], s->shadow[at + k]);
    }
  }
}

/* A length from 512 bytes to 2 MiB: mostly small, as swap's, some large; one in three
 * is not a multiple of 512, and one in three offsets is not either. */
static void random_span(uint64_t *rng, uint64_t lo, uint64_t hi, uint64_t *off, uint32_t *len)
{
  uint64_t r = rp_xorshift64s(rng);
  uint32_t l = r % 4 == 0 ? 512u + (uint32_t)(r >> 8) % (MAX_LEN - 511)
                          : 512u << (unsigned)((r >> 4) % 5);
  if (r % 3 == 0)
    l += (uint32_t)(r >> 40) % 511 + 1;
  if (l > MAX_LEN)
    l = MAX_LEN;
  if (l > hi - lo)
    l = (uint32_t)(hi - lo);
  uint64_t o = lo + (r >> 20) % (hi - lo - l + 1);
  if (r % 3 != 1)
    o &= ~(uint64_t)511;
  *off = o;
  *len = l;
}

struct worker {
  struct setup *s;
  uint64_t lo, hi; /* its own region: the shadow holds what was written last */
  uint64_t rng;
  unsigned requests;
  uint8_t *buf;
  char failed[256]; /* empty, or what went wrong */
};

/* Random writes and reads in one region, each read compared with the shadow at once. */
static void *work(void *arg)
{
  struct worker *w = arg;
  for (unsigned k = 0; k < w->requests; k++) {
    uint64_t off;
    uint32_t len;
    random_span(&w->rng, w->lo, w->hi, &off, &len);
    bool is_read = k % 3 == 2;
    for (uint32_t i = 0; !is_read && i < len; i += 8) {
      uint64_t v = rp_xorshift64s(&w->rng);
      memcpy(w->buf + i, &v, len - i < 8 ? len - i : 8);
    }
    if (full_io(w->s->fd, is_read, w->buf, len, off, w->failed, sizeof w->failed))
      return NULL;
    if (!is_read) {
      memcpy(w->s->shadow + off, w->buf, len);
    } else if (memcmp(w->buf, w->s->shadow + off, len) != 0) {
      snprintf(w->failed, sizeof w->failed,
               "a read of %u bytes at %llu differs from "
               "what was written",
               len, (unsigned long long)off);
      return NULL;
    }
  }
  return NULL;
}

/* THREADS threads at once, each in its own quarter of the device. */
static void run_workers(struct setup *s, unsigned requests, uint64_t seed)
{
  struct worker w[THREADS];
  pthread_t t[THREADS];
  uint64_t quarter = DEVICE_SIZE / THREADS;
  for (unsigned i = 0; i < THREADS; i++) {
    w[i] = (struct worker){ .s = s,
                            .lo = i * quarter,
                            .hi = (i + 1) * quarter,
                            .rng = seed * 7919 + i + 1,
                            .requests = requests,
                            .buf = malloc(MAX_LEN) };
    assert_non_null(w[i].buf);
    assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
  }
  for (unsigned i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    free(w[i].buf);
  }
  for (unsigned i = 0; i < THREADS; i++)
    if (w[i].failed[0])
      fail_msg("worker %u: %s", i, w[i].failed);
}

static void test_every_byte_through_a_server_killed_mid_stream(void **state)
{
  struct setup *s = *state;
  const char *extra[] = { "redundancy=parity-log", "group=4", "lease=1", "timeout=1000",
                          NULL };
  setup_all(s, extra);
  run_workers(s, 300, 1);
  verify_range(s, 0, DEVICE_SIZE);
  assert_true(rp_test_server_kill(&s->cluster.servers[2]) >= 0);
  run_workers(s, 300, 2);
  verify_range(s, 0, DEVICE_SIZE);
  assert_int_equal(fsync(s->fd), 0);
  stop_all(s);
}

/* Every byte read back, with rampart-fuse --async slots (parity-log 4+1). */
static void every_byte_with_async(struct setup *s, const char *slots, uint64_t seed)
{
  const char *extra[] = { "--async", slots, "redundancy=parity-log", "group=4", NULL };
  setup_all(s, extra);
  run_workers(s, 300, seed);
  verify_range(s, 0, DEVICE_SIZE);
  stop_all(s);
}

/* Two requests answered as they complete and the rest through the engine's blocking
 * calls, at once: with four threads sending, the slots run out all the time, and
 * requests longer than a slot (up to 2 MiB here) never fit. */
static void test_every_byte_with_the_async_slots_full(void **state)
{
  every_byte_with_async(*state, "2", 3);
}

/* Without the pool: each worker submits its request and reads the servers' replies
 * itself, several workers sharing the sockets. */
static void test_every_byte_with_workers_reading_their_replies(void **state)
{
  every_byte_with_async(*state, "0", 4);
}

/* Waits the engine's stats file says spun (its "spinning" line; 0 without one). */
static unsigned long long waits_spun(const char *stats)
{
  FILE *f = fopen(stats, "re");
  char line[512];
  unsigned long long spun = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "spinning %llu waits spun", &spun) == 1)
      break;
  if (f)
    fclose(f);
  return spun;
}

/* With the pool on, a read that finds nothing out is its own worker's: the worker waits
 * for the reply itself rather than leaving it to the engine's I/O thread, and so
 * (poll-us=, with the pressure gate off) spins for it, which only a thread reading its
 * own reply does. Swap writes in bursts the pool takes, and a read within 1 ms of one
 * goes to the pool too; reads that follow one at a time, however fast, are their
 * workers' again once the 1 ms has passed. Here the reads start right after a burst of
 * 16 KiB writes, one read at a time from one thread, as page-ins are. */
static void test_a_lone_request_is_waited_for_by_its_worker(void **state)
{
  struct setup *s = *state;
  char stats[128], stats_arg[160];
  snprintf(stats, sizeof stats, "/tmp/rampart-test-fuse-stats.%d", (int)getpid());
  snprintf(stats_arg, sizeof stats_arg, "stats-file=%s", stats);
  const char *extra[] = { "poll-us=2000", "poll-pressure=100", stats_arg, NULL };
  setup_all(s, extra);
  enum { READS = 64, BURST = 4 * PAGE };
  uint64_t rng = 11;
  for (unsigned i = 0; i < READS * PAGE; i++)
    s->shadow[i] = (uint8_t)rp_xorshift64s(&rng);
  for (unsigned off = 0; off < READS * PAGE; off += BURST)
    full_pwrite(s->fd, s->shadow + off, BURST, off);
  uint8_t page[PAGE];
  for (unsigned i = 0; i < READS; i++) {
    uint64_t at = (uint64_t)(READS - 1 - i) * PAGE;
    full_pread(s->fd, page, PAGE, at);
    assert_memory_equal(page, s->shadow + at, PAGE);
  }
  /* The engine rewrites its stats file every second. A reaper that finds the I/O thread
   * awake waits without spinning: most waits, not all, spin. */
  unsigned long long spun = 0;
  for (unsigned waited = 0; waited < 5000 && spun < READS / 2; waited += 100) {
    usleep(100000);
    spun = waits_spun(stats);
  }
  unlink(stats);
  print_message("%d reads one at a time after a burst of writes: %llu waits spun\n", READS,
                spun);
  assert_true(spun >= READS / 2);
  stop_all(s);
}

static void test_holes_and_zeroed_ranges_read_back_zeros(void **state)
{
  struct setup *s = *state;
  setup_all(s, NULL);
  uint64_t rng = 99;
  for (uint64_t i = 0; i < DEVICE_SIZE / 8; i += 8192) /* the device's first eighth, full */
    for (unsigned k = 0; k < 8192; k++)
      s->shadow[i + k] = (uint8_t)rp_xorshift64s(&rng);
  full_pwrite(s->fd, s->shadow, DEVICE_SIZE / 8, 0);
  /* whole pages, a span with partial pages at both ends, and one inside a page */
  const struct {
    uint64_t off, len;
    int mode;
  } cuts[] = {
    { 64 * PAGE, 32 * PAGE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE },
    { 200 * PAGE + 100, 9 * PAGE + 1000, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE },
    { 300 * PAGE + 512, 1024, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE },
    { 400 * PAGE + 7, 5 * PAGE, FALLOC_FL_ZERO_RANGE },
  };
  for (unsigned i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    if (fallocate(s->fd, cuts[i].mode, (off_t)cuts[i].off, (off_t)cuts[i].len) != 0)
      fail_msg("fallocate %d over [%llu, +%llu): %s", cuts[i].mode,
               (unsigned long long)cuts[i].off, (unsigned long long)cuts[i].len,
               strerror(errno));
    memset(s->shadow + cuts[i].off, 0, cuts[i].len);
  }
  verify_range(s, 0, DEVICE_SIZE / 8);
  /* a device does not change size */
  assert_int_equal(ftruncate(s->fd, DEVICE_SIZE / 2), -1);
  assert_int_equal(errno, EPERM);
  uint8_t one = 1;
  assert_int_equal(pwrite(s->fd, &one, 1, (off_t)DEVICE_SIZE), -1);
  assert_int_equal(errno, ENOSPC);
  assert_int_equal(pread(s->fd, &one, 1, (off_t)DEVICE_SIZE), 0);
  stop_all(s);
}

/* losetup --direct-io=on over the file, as rampart-swap attaches it: what the block
 * device writes with O_DIRECT, the file reads back, and the other way round. */
static void loop_device_with_direct_io(struct setup *s, const char *const *extra)
{
  setup_all(s, extra);
  char cmd[1024], loop[64] = "";
  snprintf(cmd, sizeof cmd, "losetup --find --show --direct-io=on %s 2>&1", s->file);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  if (!fgets(loop, sizeof loop, p))
    loop[0] = '\0';
  int status = pclose(p);
  loop[strcspn(loop, "\n")] = '\0';
  if (status != 0 || strncmp(loop, "/dev/loop", 9) != 0)
    fail_msg("losetup --direct-io=on over the FUSE file failed: %s", loop);
  char dio_path[128], dio = '0';
  snprintf(dio_path, sizeof dio_path, "/sys/block/%s/loop/dio", loop + 5);
  int dfd = open(dio_path, O_RDONLY | O_CLOEXEC);
  if (dfd >= 0) {
    assert_int_equal(read(dfd, &dio, 1), 1);
    close(dfd);
  }
  int bfd = open(loop, O_RDWR | O_DIRECT | O_CLOEXEC);
  uint8_t *buf = NULL;
  bool ok = bfd >= 0 && posix_memalign((void **)&buf, PAGE, 1u << 20) == 0;
  uint64_t rng = 7;
  for (unsigned i = 0; ok && i < (1u << 20); i++)
    buf[i] = (uint8_t)rp_xorshift64s(&rng);
  ok = ok && pwrite(bfd, buf, 1u << 20, 3 * PAGE) == (ssize_t)(1u << 20) && fsync(bfd) == 0;
  if (ok)
    memcpy(s->shadow + 3 * PAGE, buf, 1u << 20);
  if (bfd >= 0)
    close(bfd);
  free(buf);
  snprintf(cmd, sizeof cmd, "losetup -d %s", loop);
  assert_int_equal(system(cmd), 0);
  if (!ok)
    fail_msg("O_DIRECT I/O through %s failed: %s", loop, strerror(errno));
  if (dio != '1')
    fail_msg("%s does not use direct I/O over the FUSE file (%s says %c)", loop, dio_path,
             dio);
  verify_range(s, 0, 4u << 20);
  stop_all(s);
}

static void test_a_loop_device_with_direct_io(void **state)
{
  loop_device_with_direct_io(*state, NULL);
}

/* The same with workers that read their own requests' replies (--async 0). */
static void test_a_loop_device_served_by_reading_workers(void **state)
{
  const char *extra[] = { "--async", "0", NULL };
  loop_device_with_direct_io(*state, extra);
}

static void test_arguments_refused_with_a_reason(void **state)
{
  (void)state;
  static const struct rp_test_refusal cases[] = {
    { { "size=1M", NULL }, "give --mount DIR" },
    { { "--mount", "/nonexistent-dir", "size=1M", NULL }, "--mount /nonexistent-dir:" },
    { { "--mount", "/tmp", "--threads", "lots", "size=1M", NULL },
      "--threads 'lots': give a number from 1 to 64" },
    { { "--mount", "/tmp", "--async", "-1", "size=1M", NULL },
      "--async '-1': give a number from 0 (off) to 1024" },
    { { "--mount", "/tmp", "--file", "a/b", "size=1M", NULL },
      "--file 'a/b': give a plain file name" },
    { { "--mount", "/tmp", "colour=red", "size=1M", NULL }, "colour" },
    { { "--mount", "/tmp", "mlock=maybe", "size=1M", NULL },
      "mlock=maybe: give true or false" },
    { { "--mount", "/tmp", "standby=true", "size=1M", NULL },
      "cannot be handed to a standby" },
  };
  rp_test_expect_refusals(daemon_path(), cases, sizeof cases / sizeof cases[0]);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_every_byte_through_a_server_killed_mid_stream,
                                    setup_state, teardown_state),
    cmocka_unit_test_setup_teardown(test_every_byte_with_the_async_slots_full, setup_state,
                                    teardown_state),
    cmocka_unit_test_setup_teardown(test_every_byte_with_workers_reading_their_replies,
                                    setup_state, teardown_state),
    cmocka_unit_test_setup_teardown(test_holes_and_zeroed_ranges_read_back_zeros, setup_state,
                                    teardown_state),
    cmocka_unit_test_setup_teardown(test_a_loop_device_with_direct_io, setup_state,
                                    teardown_state),
    cmocka_unit_test_setup_teardown(test_a_loop_device_served_by_reading_workers, setup_state,
                                    teardown_state),
    cmocka_unit_test_setup_teardown(test_a_lone_request_is_waited_for_by_its_worker,
                                    setup_state, teardown_state),
    cmocka_unit_test(test_arguments_refused_with_a_reason),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
