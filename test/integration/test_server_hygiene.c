/* rampartd's process hygiene (docs/security.md), on real processes:
 *
 * - it is not dumpable: run as an unprivileged user, its /proc/PID files belong to
 *   root (the kernel's sign of PR_SET_DUMPABLE 0), so no core file, no ptrace and no
 *   /proc/PID/mem read by that user;
 * - the rampartd that is installed has no fault injection: --test-fault is refused
 *   with a sentence, and the code that lies is not in the binary at all;
 * - --mlock locks the pages it stores, and freeing them still gives the memory back
 *   (MADV_DONTNEED_LOCKED, as plain MADV_DONTNEED is refused on locked memory);
 * - --mlock without the means to lock --memory is refused at start, naming
 *   RLIMIT_MEMLOCK and LimitMEMLOCK=.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "page_io.h"
#include "server_process.h"

#define NOBODY 65534

struct fixture {
  char dir[256];
  char psi[600];
};

static int setup(void **state)
{
  static struct fixture f;
  memset(&f, 0, sizeof f);
  if (rp_test_tmpdir(f.dir, sizeof f.dir) < 0)
    return -1;
  /* This host's own memory pressure must not refuse our reservations. */
  snprintf(f.psi, sizeof f.psi, "%s/psi", f.dir);
  if (rp_test_write_file(f.psi, "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n") < 0)
    return -1;
  *state = &f;
  return 0;
}

static int teardown(void **state)
{
  struct fixture *f = *state;
  if (f)
    rp_test_tmpdir_remove(f->dir);
  return 0;
}

/* rampartd with args as user nobody, its output on a pipe (*out_fd). memlock_bytes,
 * when not 0, is its RLIMIT_MEMLOCK. Returns the PID, or -1. */
static pid_t spawn_as_nobody(const char *const *args, rlim_t memlock_bytes, int *out_fd)
{
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return -1;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    dup2(p[1], STDOUT_FILENO);
    dup2(p[1], STDERR_FILENO);
    if (memlock_bytes) {
      struct rlimit rl = { memlock_bytes, memlock_bytes };
      setrlimit(RLIMIT_MEMLOCK, &rl);
    }
    if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
      _exit(126);
    execv(args[0], (char *const *)args);
    _exit(127);
  }
  close(p[1]);
  *out_fd = p[0];
  return pid;
}

/* Reads fd until `needle` shows up, EOF, or timeout_ms. */
static bool read_until(int fd, const char *needle, char *buf, size_t buflen, int timeout_ms)
{
  size_t got = 0;
  buf[0] = '\0';
  for (int waited = 0; waited < timeout_ms && got + 1 < buflen; waited += 50) {
    struct pollfd pf = { .fd = fd, .events = POLLIN };
    if (poll(&pf, 1, 50) <= 0)
      continue;
    ssize_t n = read(fd, buf + got, buflen - 1 - got);
    if (n <= 0)
      break;
    got += (size_t)n;
    buf[got] = '\0';
    if (strstr(buf, needle))
      return true;
  }
  return strstr(buf, needle) != NULL;
}

static long status_field(pid_t pid, const char *name)
{
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
  FILE *fp = fopen(path, "re");
  long v = -1;
  size_t n = strlen(name);
  while (fp && fgets(line, sizeof line, fp))
    if (strncmp(line, name, n) == 0 && line[n] == ':') {
      v = strtol(line + n + 1, NULL, 10);
      break;
    }
  if (fp)
    fclose(fp);
  return v;
}

static void stop(pid_t pid)
{
  kill(pid, SIGTERM);
  int status;
  waitpid(pid, &status, 0);
}

static void test_rampartd_is_not_dumpable(void **state)
{
  if (geteuid() != 0) {
    printf("skipped: needs root to start rampartd as another user\n");
    skip();
  }
  const char *bin = rp_test_rampartd_path();
  assert_non_null(bin);
  const char *args[] = { bin,        "--listen", "127.0.0.1:0", "--foreground",
                         "--memory", "16M",      NULL };
  int out;
  pid_t pid = spawn_as_nobody(args, 0, &out);
  assert_true(pid > 0);
  char buf[4096];
  bool up = read_until(out, "listening on", buf, sizeof buf, 10000);
  struct stat st;
  int rc = -1;
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
  if (up)
    rc = stat(path, &st);
  long uid = status_field(pid, "Uid");
  stop(pid);
  close(out);
  if (!up)
    fail_msg("rampartd as nobody did not start: %s", buf);
  assert_int_equal(rc, 0);
  fprintf(stderr, "rampartd runs as uid %ld; its /proc/PID/status belongs to uid %u\n", uid,
          (unsigned)st.st_uid);
  assert_int_equal(uid, NOBODY);
  /* A dumpable process's /proc files belong to its own user; a non-dumpable one's to
   * root, which is also what keeps that user's ptrace and /proc/PID/mem out. */
  assert_int_equal(st.st_uid, 0);
}

/* True when the file at path contains needle. */
static bool file_contains(const char *path, const char *needle)
{
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  static char buf[1 << 20];
  size_t keep = strlen(needle) - 1, have = 0, n;
  bool found = false;
  while (!found && (n = fread(buf + have, 1, sizeof buf - have, fp)) > 0) {
    have += n;
    found = memmem(buf, have, needle, strlen(needle)) != NULL;
    memmove(buf, buf + have - keep, keep);
    have = keep;
  }
  fclose(fp);
  return found;
}

static void test_release_rampartd_has_no_fault_injection(void **state)
{
  const char *bin = rp_test_rampartd_path();
  assert_non_null(bin);
  const char *argv[] = { bin,   "--listen",     "127.0.0.1:0", "--memory",
                         "16M", "--test-fault", "flip",        NULL };
  char out[2048];
  int status = rp_test_run_program(argv, out, sizeof out, 10000);
  fprintf(stderr, "rampartd --test-fault flip: %s", out);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 2);
  assert_non_null(strstr(out, "no fault injection"));
  assert_non_null(strstr(out, "rampartd-faults"));
  /* The same refusal from a --config file. */
  struct fixture *f = *state;
  char conf[600];
  snprintf(conf, sizeof conf, "%s/faulty.conf", f->dir);
  assert_int_equal(rp_test_write_file(conf, "listen = 127.0.0.1:0\nmemory = 16M\n"
                                            "test-fault = swap\n"),
                   0);
  const char *argv2[] = { bin, "--config", conf, NULL };
  status = rp_test_run_program(argv2, out, sizeof out, 10000);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 2);
  assert_non_null(strstr(out, "no fault injection"));
  /* Not switched off: absent. The warning every lying mode logs is not in the binary,
   * while the test binary has it. */
  assert_false(file_contains(bin, "deliberately corrupts"));
  const char *faults = rp_test_rampartd_faults_path();
  assert_non_null(faults);
  assert_true(file_contains(faults, "deliberately corrupts"));
}

static void test_mlock_locks_pages_and_still_frees_them(void **state)
{
  struct fixture *f = *state;
  if (geteuid() != 0) {
    printf("skipped: needs root (or RLIMIT_MEMLOCK unlimited) for --mlock\n");
    skip();
  }
  struct rp_test_server s;
  const char *args[] = { "--memory", "64M", "--mlock", "--pressure-file", f->psi, NULL };
  assert_int_equal(rp_test_server_start(&s, f->dir, args), 0);
  struct rp_error err;
  struct rp_conn *c = rp_test_connect(&s, NULL, NULL, NULL, &err);
  if (!c)
    fail_msg("connect: %s", err.message);
  enum { PAGES = 8192 }; /* 32 MiB */
  assert_int_equal(rp_reserve_sync(c, PAGES, NULL, NULL, &err), 0);
  long rss0 = status_field(s.pid, "VmRSS"), lck0 = status_field(s.pid, "VmLck");
  struct rp_test_io_result res;
  assert_int_equal(rp_test_pages(c, RP_OP_WRITE, 0, PAGES, 64, 9, &res), 0);
  assert_int_equal(rp_test_pages(c, RP_OP_READ, 0, PAGES, 64, 9, &res), 0);
  long rss1 = status_field(s.pid, "VmRSS"), lck1 = status_field(s.pid, "VmLck");
  /* Free all but the first page of each 2 MiB chunk, so no chunk empties and is
   * unmapped: what comes back must come back page by page. */
  for (uint64_t slot = 0; slot < PAGES; slot += 512)
    assert_int_equal(rp_free_sync(c, (uint32_t)slot + 1, 511, &err), 0);
  long rss2 = status_field(s.pid, "VmRSS");
  fprintf(stderr,
          "--mlock: VmLck %ld -> %ld KiB; VmRSS %ld KiB before, %ld KiB with 32 MiB "
          "stored, %ld KiB after freeing 31.9 MiB of it\n",
          lck0, lck1, rss0, rss1, rss2);
  rp_conn_close(c);
  assert_int_equal(rp_test_server_stop_clean(&s), 0);
  /* AddressSanitizer makes mlock and mlockall do nothing (it says so on stderr), so
   * only a build without it can show the pages locked. */
  const char *asan = getenv("RAMPART_ASAN_RUNTIME");
  if (!asan || !asan[0])
    assert_true(lck1 >= 32 * 1024); /* the stored pages are locked */
  assert_true(rss1 - rss0 >= 30 * 1024);
  /* and freeing them still gives them back, all but the warm pool's 4 MiB (page_store.c) */
  assert_true(rss1 - rss2 >= 24 * 1024);
}

static void test_mlock_refused_without_memlock_limit(void **state)
{
  if (geteuid() != 0) {
    printf("skipped: needs root to start rampartd as another user\n");
    skip();
  }
  const char *bin = rp_test_rampartd_path();
  const char *args[] = { bin,        "--listen", "127.0.0.1:0", "--foreground",
                         "--memory", "64M",      "--mlock",     NULL };
  int out;
  pid_t pid = spawn_as_nobody(args, 64 * 1024, &out);
  assert_true(pid > 0);
  char buf[4096];
  read_until(out, "\n", buf, sizeof buf, 10000);
  int status;
  bool exited = false;
  for (int i = 0; i < 100 && !exited; i++) {
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) {
      struct timespec ts = { 0, 50 * 1000 * 1000 };
      nanosleep(&ts, NULL);
    }
  }
  if (!exited)
    stop(pid);
  close(out);
  fprintf(stderr, "rampartd --mlock as nobody with RLIMIT_MEMLOCK 64 KiB: %s", buf);
  assert_true(exited);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 1);
  assert_non_null(strstr(buf, "RLIMIT_MEMLOCK"));
  assert_non_null(strstr(buf, "LimitMEMLOCK=infinity"));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_rampartd_is_not_dumpable),
    cmocka_unit_test(test_release_rampartd_has_no_fault_injection),
    cmocka_unit_test(test_mlock_locks_pages_and_still_frees_them),
    cmocka_unit_test(test_mlock_refused_without_memlock_limit),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
