/* The whole device path: real rampartd processes, real nbdkit running our plugin, and
 * libnbd as the client, as nbd-client or nbdfuse would use it. Every byte read back is
 * checked against a shadow copy, including after a server is killed with SIGKILL in the
 * middle of the write stream, and while several connections write parts of the same
 * pages at once.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <libnbd.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "server_process.h"

#define PAGE 4096u
#define MAX_SERVERS 5

struct setup {
  char dir[512];
  char key_path[600];
  char sock[640];
  char log[640];
  unsigned n;
  struct rp_test_server servers[MAX_SERVERS];
  pid_t nbdkit;
  struct nbd_handle *nbd;
  uint64_t size;
  uint8_t *shadow;
  uint64_t rng;
};

/* Waits up to timeout_ms for pid; SIGKILLs it past that. Returns the wait status, or
 * -1 if it had to be killed. Under the ASan preload, nbdkit can deadlock in a system
 * library's exit-time destructor (libp11-kit's freelocale), so no wait is unbounded. */
static int wait_or_kill(pid_t pid, unsigned timeout_ms)
{
  int status;
  for (unsigned waited = 0; waited < timeout_ms; waited += 20) {
    if (waitpid(pid, &status, WNOHANG) == pid)
      return status;
    usleep(20000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

static bool sanitized(void)
{
  const char *asan = getenv("RAMPART_ASAN_RUNTIME");
  return asan && *asan;
}

static uint64_t rng(struct setup *s)
{
  s->rng ^= s->rng << 13;
  s->rng ^= s->rng >> 7;
  s->rng ^= s->rng << 17;
  return s->rng;
}

static void start_servers(struct setup *s, unsigned n)
{
  assert_int_equal(rp_test_tmpdir(s->dir, sizeof s->dir), 0);
  assert_int_equal(rp_test_write_key(s->dir, "key", s->key_path, sizeof s->key_path, NULL),
                   0);
  s->n = n;
  for (unsigned i = 0; i < n; i++) {
    char psi[700];
    snprintf(psi, sizeof psi, "%s/psi-%u", s->dir, i);
    assert_int_equal(
      rp_test_write_file(psi, "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0);
    const char *args[] = { "--memory",        "160M", "--key", s->key_path,
                           "--pressure-file", psi,    NULL };
    assert_int_equal(rp_test_server_start(&s->servers[i], s->dir, args), 0);
  }
}

/* True once nbdkit's log holds an error (the plugin labels mere warnings). */
static bool log_has_error(const char *path)
{
  FILE *f = fopen(path, "r");
  char line[1024];
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f))
    found = strstr(line, "error:") && !strstr(line, "error: warning:");
  if (f)
    fclose(f);
  return found;
}

/* nbdkit binds its socket before the plugin's after_fork starts the engine, so a socket
 * can exist on a server that is about to refuse to start: never block on it. */
static int connect_with_deadline(struct nbd_handle *nbd, const char *sock,
                                 unsigned timeout_ms)
{
  if (nbd_aio_connect_unix(nbd, sock) < 0)
    return -1;
  for (unsigned waited = 0; waited < timeout_ms; waited += 50) {
    if (nbd_aio_is_ready(nbd) > 0)
      return 0;
    if (nbd_aio_is_dead(nbd) > 0 || nbd_aio_is_closed(nbd) > 0)
      return -1;
    if (nbd_poll(nbd, 50) < 0)
      return -1;
  }
  return -1;
}

/* Runs nbdkit with the plugin and `params` (NULL-terminated key=value strings), waits
 * for its socket, and connects libnbd. Returns 0, or -1 if nbdkit exited (its log is in
 * s->log). */
/* The plugin parameters naming this setup's cluster: servers=, key= and tmpdir=. */
static void cluster_params(const struct setup *s, char servers[512], char keyp[700],
                           char tmp[700])
{
  strcpy(servers, "servers=");
  for (unsigned i = 0; i < s->n; i++) {
    strcat(servers, s->servers[i].addr);
    strcat(servers, i + 1 < s->n ? "," : "");
  }
  snprintf(keyp, 700, "key=%s", s->key_path);
  snprintf(tmp, 700, "tmpdir=%s", s->dir);
}

/* Starts nbdkit with the plugin on dir/SOCK_NAME, its output in dir/LOG_NAME; does not
 * wait for it. */
static pid_t spawn_nbdkit(const struct setup *s, const char *sock, const char *log,
                          const char *const *params)
{
  const char *plugin = getenv("RAMPART_PLUGIN");
  if (!plugin)
    fail_msg("RAMPART_PLUGIN is not set: run the tests through ctest");
  const char *argv[32];
  unsigned a = 0;
  argv[a++] = "nbdkit";
  argv[a++] = "--foreground";
  argv[a++] = "--exit-with-parent";
  argv[a++] = "--unix";
  argv[a++] = sock;
  argv[a++] = plugin;
  for (unsigned i = 0; params[i] && a < 30; i++)
    argv[a++] = params[i];
  argv[a++] = "mlock=false"; /* sanitizer shadow memory cannot be locked */
  argv[a] = NULL;
  /* Emptied here, before the fork: a caller that reads the log as soon as this returns
   * must not find an earlier nbdkit's words in it. */
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    const char *asan = getenv("RAMPART_ASAN_RUNTIME");
    if (asan && *asan) {
      setenv("LD_PRELOAD", asan, 1);
      setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1", 1);
    }
    execvp("nbdkit", (char *const *)argv);
    _exit(127);
  }
  close(fd);
  return pid;
}

static int start_nbdkit(struct setup *s, const char *const *params)
{
  snprintf(s->sock, sizeof s->sock, "%s/nbd.sock", s->dir);
  snprintf(s->log, sizeof s->log, "%s/nbdkit.log", s->dir);
  pid_t pid = spawn_nbdkit(s, s->sock, s->log, params);
  s->nbdkit = pid;
  for (unsigned i = 0; i < 300; i++) {
    struct stat st;
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      s->nbdkit = 0;
      return -1;
    }
    if (log_has_error(s->log)) {
      /* Refused to start; it may be stuck on its way out (see wait_or_kill), but the
       * log has already said why. */
      wait_or_kill(pid, 2000);
      s->nbdkit = 0;
      return -1;
    }
    if (stat(s->sock, &st) == 0) {
      s->nbd = nbd_create();
      assert_non_null(s->nbd);
      if (connect_with_deadline(s->nbd, s->sock, 2000) == 0) {
        int64_t size = nbd_get_size(s->nbd);
        assert_true(size > 0);
        s->size = (uint64_t)size;
        s->shadow = calloc(1, s->size);
        assert_non_null(s->shadow);
        return 0;
      }
      nbd_close(s->nbd);
      s->nbd = NULL;
    }
    usleep(50000);
  }
  fail_msg("nbdkit did not open %s in 15 s", s->sock);
  return -1;
}

static void print_log(const char *path)
{
  rp_test_print_file(path, "nbdkit: ");
}

static void stop_all(struct setup *s)
{
  char how[96];
  const char *nbdkit_bad = NULL;
  if (s->nbd) {
    nbd_shutdown(s->nbd, 0);
    nbd_close(s->nbd);
  }
  if (s->nbdkit) {
    kill(s->nbdkit, SIGTERM);
    int status = wait_or_kill(s->nbdkit, 20000);
    /* Under the ASan preload only a hang at exit is forgiven (the libp11-kit destructor
     * above, after our plugin has unloaded); a crash, an abort or a bad exit status
     * still fails the test. */
    if (status == -1 && sanitized()) {
      print_message("nbdkit hung at exit under the ASan preload and was killed (known: "
                    "libp11-kit's exit-time destructor)\n");
    } else if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      print_log(s->log);
      nbdkit_bad = rp_test_describe_status(status, how, sizeof how);
    }
  }
  unsigned bad = 0;
  for (unsigned i = 0; i < s->n; i++)
    if (rp_test_server_stop_clean(&s->servers[i]) < 0)
      bad++;
  free(s->shadow);
  rp_test_tmpdir_remove(s->dir);
  if (nbdkit_bad)
    fail_msg("nbdkit did not exit cleanly on SIGTERM (%s); its log is above", nbdkit_bad);
  if (bad)
    fail_msg("%u rampartd did not live and exit cleanly (above: how and their stderr)", bad);
}

static void check_nbd(struct setup *s, int r, const char *what)
{
  if (r < 0) {
    print_log(s->log);
    fail_msg("%s: %s", what, nbd_get_error());
  }
}

/* Random writes (aligned and not), overwrites and trims, with reads checked as it goes. */
static void workload(struct setup *s, uint64_t bytes_to_write, uint8_t *buf, size_t buflen)
{
  uint64_t written = 0;
  while (written < bytes_to_write) {
    unsigned kind = (unsigned)(rng(s) % 100);
    uint64_t len, off;
    if (kind < 10) { /* unaligned: the engine's read-modify-write path */
      len = 1 + rng(s) % 9000;
      off = rng(s) % (s->size - len);
    } else {
      len = PAGE * (1 + rng(s) % (buflen / PAGE));
      off = PAGE * (rng(s) % ((s->size - len) / PAGE + 1));
    }
    if (kind < 70) {
      for (size_t i = 0; i < len; i += 8) {
        uint64_t v = rng(s);
        memcpy(buf + i, &v, len - i < 8 ? len - i : 8);
      }
      check_nbd(s, nbd_pwrite(s->nbd, buf, len, off, 0), "pwrite");
      memcpy(s->shadow + off, buf, len);
      written += len;
    } else if (kind < 80) {
      check_nbd(s, nbd_trim(s->nbd, len, off, 0), "trim");
      /* Trim releases whole pages only; partial pages at the ends keep their bytes. */
      uint64_t first = (off + PAGE - 1) / PAGE * PAGE, last = (off + len) / PAGE * PAGE;
      if (last > first)
        memset(s->shadow + first, 0, last - first);
    } else if (kind < 85) {
      check_nbd(s, nbd_zero(s->nbd, len, off, 0), "zero");
      memset(s->shadow + off, 0, len);
    } else {
      check_nbd(s, nbd_pread(s->nbd, buf, len, off, 0), "pread");
      if (memcmp(buf, s->shadow + off, len) != 0)
        fail_msg("read of %llu bytes at %llu returned wrong bytes", (unsigned long long)len,
                 (unsigned long long)off);
    }
  }
}

static void verify_device(struct setup *s, uint8_t *buf, size_t buflen)
{
  for (uint64_t off = 0; off < s->size; off += buflen) {
    size_t len = s->size - off < buflen ? s->size - off : buflen;
    check_nbd(s, nbd_pread(s->nbd, buf, len, off, 0), "pread (verify)");
    if (memcmp(buf, s->shadow + off, len) != 0) {
      size_t at = 0;
      while (buf[at] == s->shadow[off + at])
        at++;
      fail_msg("byte %llu of the device is wrong", (unsigned long long)(off + at));
    }
  }
}

static void test_parity_log_through_nbdkit_survives_a_kill(void **state)
{
  (void)state;
  struct setup s = { .rng = 0x1234567 };
  start_servers(&s, 5);
  char servers[512], keyp[700], tmp[700];
  cluster_params(&s, servers, keyp, tmp);
  const char *params[] = { "size=256M", servers,        keyp, tmp, "redundancy=parity-log",
                           "lease=1",   "timeout=1000", NULL };
  if (start_nbdkit(&s, params) < 0) {
    print_log(s.log);
    fail_msg("nbdkit exited at start-up");
  }
  assert_int_equal(s.size, 256u << 20);
  size_t buflen = 256 * 1024;
  uint8_t *buf = malloc(buflen);
  workload(&s, 150u << 20, buf, buflen);
  rp_test_server_kill(&s.servers[2]); /* mid-stream: the next writes hit its failure */
  workload(&s, 150u << 20, buf, buflen);
  verify_device(&s, buf, buflen);
  free(buf);
  stop_all(&s);
}

static void test_write_through_through_nbdkit_survives_losing_all_servers(void **state)
{
  (void)state;
  struct setup s = { .rng = 0x777 };
  start_servers(&s, 3);
  char servers[512], keyp[700], tmp[700];
  cluster_params(&s, servers, keyp, tmp);
  const char *params[] = { "size=32M", servers,        keyp, tmp, "redundancy=write-through",
                           "lease=1",  "timeout=1000", NULL };
  assert_int_equal(start_nbdkit(&s, params), 0);
  size_t buflen = 128 * 1024;
  uint8_t *buf = malloc(buflen);
  workload(&s, 40u << 20, buf, buflen);
  for (unsigned i = 0; i < s.n; i++)
    rp_test_server_kill(&s.servers[i]);
  verify_device(&s, buf, buflen);
  workload(&s, 8u << 20, buf, buflen);
  verify_device(&s, buf, buflen);
  free(buf);
  stop_all(&s);
}

static void test_standalone_ram_disk_through_nbdkit(void **state)
{
  (void)state;
  struct setup s = { .rng = 0x99 };
  assert_int_equal(rp_test_tmpdir(s.dir, sizeof s.dir), 0);
  char tmp[700];
  snprintf(tmp, sizeof tmp, "tmpdir=%s", s.dir);
  const char *params[] = { "size=64M", "memory=8M", tmp, NULL };
  assert_int_equal(start_nbdkit(&s, params), 0);
  size_t buflen = 128 * 1024;
  uint8_t *buf = malloc(buflen);
  workload(&s, 96u << 20, buf, buflen);
  verify_device(&s, buf, buflen);
  free(buf);
  stop_all(&s);
}

/* NBD clients may write less than a page, nbdkit runs requests on parallel threads and
 * the plugin allows multi-conn: sub-page writes into the same page from several
 * connections at once must each survive, whatever order the engine's read-modify-write
 * cycles run in. Each connection owns its own 512-byte chunk of every page. */
#define SUBPAGE_CONNECTIONS 8
#define SUBPAGE_PAGES 32
#define SUBPAGE_ROUNDS 10
#define SUBPAGE_CHUNK (PAGE / SUBPAGE_CONNECTIONS)

struct subpage_writer {
  pthread_t thread;
  const char *sock;
  unsigned index;
  char error[256];
};

static uint8_t subpage_byte(unsigned conn, unsigned round, uint64_t page)
{
  return (uint8_t)(1 + conn * 29 + round * 11 + page * 17);
}

static void *subpage_writer_main(void *arg)
{
  struct subpage_writer *w = arg;
  struct nbd_handle *nbd = nbd_create();
  if (!nbd || connect_with_deadline(nbd, w->sock, 5000) < 0) {
    snprintf(w->error, sizeof w->error, "connect: %s", nbd_get_error());
    if (nbd)
      nbd_close(nbd);
    return NULL;
  }
  uint8_t chunk[SUBPAGE_CHUNK];
  for (unsigned r = 0; r < SUBPAGE_ROUNDS && !w->error[0]; r++)
    for (uint64_t p = 0; p < SUBPAGE_PAGES && !w->error[0]; p++) {
      memset(chunk, subpage_byte(w->index, r, p), sizeof chunk);
      if (nbd_pwrite(nbd, chunk, sizeof chunk, p * PAGE + w->index * SUBPAGE_CHUNK, 0) < 0)
        snprintf(w->error, sizeof w->error, "pwrite: %s", nbd_get_error());
    }
  nbd_shutdown(nbd, 0);
  nbd_close(nbd);
  return NULL;
}

static void test_concurrent_sub_page_writes_over_several_connections(void **state)
{
  (void)state;
  struct setup s = { .rng = 0x5151 };
  start_servers(&s, 3);
  char servers[512], keyp[700], tmp[700];
  cluster_params(&s, servers, keyp, tmp);
  const char *params[] = { "size=4M", servers, keyp, tmp, "redundancy=parity-log", NULL };
  assert_int_equal(start_nbdkit(&s, params), 0);
  struct subpage_writer writers[SUBPAGE_CONNECTIONS];
  for (unsigned i = 0; i < SUBPAGE_CONNECTIONS; i++) {
    writers[i] = (struct subpage_writer){ .sock = s.sock, .index = i };
    assert_int_equal(
      pthread_create(&writers[i].thread, NULL, subpage_writer_main, &writers[i]), 0);
  }
  for (unsigned i = 0; i < SUBPAGE_CONNECTIONS; i++) {
    pthread_join(writers[i].thread, NULL);
    if (writers[i].error[0]) {
      print_log(s.log);
      fail_msg("connection %u: %s", i, writers[i].error);
    }
  }
  uint64_t lost = 0;
  for (uint64_t p = 0; p < SUBPAGE_PAGES; p++) {
    uint8_t page[PAGE];
    check_nbd(&s, nbd_pread(s.nbd, page, PAGE, p * PAGE, 0), "pread");
    for (unsigned i = 0; i < SUBPAGE_CONNECTIONS; i++) {
      uint8_t want = subpage_byte(i, SUBPAGE_ROUNDS - 1, p);
      for (unsigned b = 0; b < SUBPAGE_CHUNK; b++)
        if (page[i * SUBPAGE_CHUNK + b] != want) {
          lost++;
          break;
        }
    }
  }
  print_message("%u connections writing %u-byte chunks of the same %u pages: %llu of %u "
                "chunks lost their last update\n",
                SUBPAGE_CONNECTIONS, SUBPAGE_CHUNK, SUBPAGE_PAGES, (unsigned long long)lost,
                SUBPAGE_CONNECTIONS * SUBPAGE_PAGES);
  stop_all(&s);
  assert_int_equal(lost, 0);
}


static void wait_for_line(const char *log, const char *text, unsigned timeout_ms)
{
  for (unsigned waited = 0; !rp_test_file_has(log, text); waited += 50) {
    if (waited >= timeout_ms) {
      print_log(log);
      fail_msg("no '%s' in %s within %u ms", text, log, timeout_ms);
    }
    usleep(50000);
  }
}

/* Connects the setup's libnbd handle to the nbdkit on sock (logging to log, pid pid). */
static void serve_from(struct setup *s, pid_t pid, const char *sock, const char *log)
{
  s->nbdkit = pid;
  if (s->nbd)
    nbd_close(s->nbd);
  snprintf(s->sock, sizeof s->sock, "%s", sock);
  snprintf(s->log, sizeof s->log, "%s", log);
  s->nbd = nbd_create();
  assert_non_null(s->nbd);
  if (connect_with_deadline(s->nbd, s->sock, 20000) < 0) {
    print_log(log);
    fail_msg("%s did not serve within 20 s: %s", sock, nbd_get_error());
  }
}

/* The pager's crash over NBD (docs/recovery.md), without a kernel device: nbdkit rampart with state= is killed with
 * SIGKILL, and one of two standby nbdkits (standby=true, the same settings, sockets of
 * their own), which had waited beside it, takes the state over: every byte the dead one
 * acknowledged reads back, and it serves on. The other stands by on, for the new one,
 * and takes over in turn when that one is killed. (In a guest, rampart-nbd-attach moves
 * /dev/nbd0 across: test_guest_starved.sh.) */
static void test_standby_nbdkits_take_over_killed_ones_in_turn(void **state)
{
  (void)state;
  struct setup s = { .rng = 0x5eed };
  start_servers(&s, 5);
  char servers[512], keyp[700], tmp[700], statep[700];
  cluster_params(&s, servers, keyp, tmp);
  snprintf(statep, sizeof statep, "state=%s/state", s.dir);
  const char *params[] = { "size=64M", servers, keyp, tmp, "redundancy=parity-log",
                           statep,     NULL,    NULL };
  if (start_nbdkit(&s, params) < 0) {
    print_log(s.log);
    fail_msg("nbdkit exited at start-up");
  }
  char sock[2][640], log[2][640];
  pid_t standby[2];
  params[6] = "standby=true";
  for (unsigned i = 0; i < 2; i++) {
    snprintf(sock[i], sizeof sock[i], "%s/standby-%u.sock", s.dir, i);
    snprintf(log[i], sizeof log[i], "%s/standby-%u.log", s.dir, i);
    standby[i] = spawn_nbdkit(&s, sock[i], log[i], params);
    wait_for_line(log[i], "standing by for the pager serving", 15000);
  }
  size_t buflen = 128 * 1024;
  uint8_t *buf = malloc(buflen);
  workload(&s, 32u << 20, buf, buflen);

  for (unsigned round = 0; round < 2; round++) {
    kill(s.nbdkit, SIGKILL);
    waitpid(s.nbdkit, NULL, 0);
    /* Exactly one standby wakes (the state's lock): the one whose log says so. */
    int taker = -1;
    for (unsigned waited = 0; taker < 0 && waited < 20000; waited += 50) {
      for (unsigned i = 0; i < 2; i++)
        if (standby[i] && rp_test_file_has(log[i], "after its pager died"))
          taker = (int)i;
      usleep(50000);
    }
    if (taker < 0) {
      print_log(log[0]);
      print_log(log[1]);
      fail_msg("no standby took over within 20 s of the kill");
    }
    unsigned other = 1u - (unsigned)taker;
    if (round == 0) {
      usleep(500000); /* the other must still be standing by, not serving too */
      assert_false(rp_test_file_has(log[other], "after its pager died"));
      assert_int_equal(waitpid(standby[other], NULL, WNOHANG), 0);
    }
    serve_from(&s, standby[taker], sock[taker], log[taker]);
    standby[taker] = 0;
    verify_device(&s, buf, buflen);
    print_log(log[taker]);                /* how long the takeover took */
    workload(&s, 16u << 20, buf, buflen); /* and it serves on */
    verify_device(&s, buf, buflen);
  }
  free(buf);
  char anchor[600];
  snprintf(anchor, sizeof anchor, "%s/state", s.dir);
  assert_int_equal(access(anchor, F_OK), 0);
  stop_all(&s); /* a clean stop: the state goes with it */
  assert_int_equal(access(anchor, F_OK), -1);
}

/* A standby with nothing to stand by for says so, and what to start instead. */
static void test_a_standby_without_a_serving_pager_is_refused(void **state)
{
  (void)state;
  struct setup s = { 0 };
  assert_int_equal(rp_test_tmpdir(s.dir, sizeof s.dir), 0);
  char statep[700];
  snprintf(statep, sizeof statep, "state=%s/state", s.dir);
  const char *no_state[] = { "size=1M", "standby=true", NULL };
  assert_int_equal(start_nbdkit(&s, no_state), -1);
  assert_true(rp_test_file_has(s.log, "standby=true needs state=PATH"));
  const char *no_pager[] = { "size=1M", "servers=127.0.0.1:1", statep, "standby=true", NULL };
  assert_int_equal(start_nbdkit(&s, no_pager), -1);
  assert_true(rp_test_file_has(s.log, "there is no pager state at"));
  assert_true(rp_test_file_has(s.log, "start the serving pager with state="));
  rp_test_tmpdir_remove(s.dir);
}

static void test_bad_parameters_are_refused_with_a_reason(void **state)
{
  (void)state;
  struct setup s = { 0 };
  assert_int_equal(rp_test_tmpdir(s.dir, sizeof s.dir), 0);
  const char *bad_size[] = { "size=lots", NULL };
  assert_int_equal(start_nbdkit(&s, bad_size), -1);
  char out[4096] = "";
  FILE *f = fopen(s.log, "r");
  size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
  out[n] = '\0';
  if (f)
    fclose(f);
  assert_non_null(strstr(out, "not a size"));
  const char *dead_server[] = { "size=1M", "servers=127.0.0.1:1", "redundancy=none", NULL };
  assert_int_equal(start_nbdkit(&s, dead_server), -1);
  f = fopen(s.log, "r");
  n = f ? fread(out, 1, sizeof out - 1, f) : 0;
  out[n] = '\0';
  if (f)
    fclose(f);
  assert_non_null(strstr(out, "127.0.0.1:1"));
  rp_test_tmpdir_remove(s.dir);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_bad_parameters_are_refused_with_a_reason),
    cmocka_unit_test(test_standalone_ram_disk_through_nbdkit),
    cmocka_unit_test(test_write_through_through_nbdkit_survives_losing_all_servers),
    cmocka_unit_test(test_parity_log_through_nbdkit_survives_a_kill),
    cmocka_unit_test(test_concurrent_sub_page_writes_over_several_connections),
    cmocka_unit_test(test_a_standby_without_a_serving_pager_is_refused),
    cmocka_unit_test(test_standby_nbdkits_take_over_killed_ones_in_turn),
  };
  if (getenv("RAMPART_TEST_FILTER"))
    cmocka_set_test_filter(getenv("RAMPART_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
