/* 'on' (swap_on.h). */
#include "swap_on.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon_spawn.h"
#include "frontend_choice.h"
#include "pager_command.h"
#include "proc_identity.h"
#include "program_run.h"
#include "standby_keeper.h"
#include "swap_context.h"
#include "swap_off.h"
#include "swap_state.h"

/* The floor for vm.min_free_kbytes while a rampart device is swap. */
#define MIN_FREE_FLOOR 16384

static bool is(const char *a, const char *b)
{
  return strcmp(a, b) == 0;
}

/* A device that is still on and served is taken back as it is: that is what a refused
 * 'off' leaves (under systemd, the unit is then 'failed' and is started again to manage
 * it). Anything else left behind needs 'off' first. */
static void take_back(const struct swap_context *c)
{
  char dev[4096] = "";
  swap_state_get(c, "device", dev, sizeof dev);
  pid_t pager = (pid_t)swap_state_num(c, "pager_pid");
  long used = *dev ? swap_used_kib(dev) : -1;
  if (used >= 0 && swap_pid_alive(c, pager)) {
    say("'%s' is already on: %s (%ld MiB in use), served by pid %d; taking it back as it is",
        c->set.name, dev, (used + 1023) / 1024, (int)pager);
    exit(0);
  }
  swap_die("'%s' is already on (%s/state exists) but is not serving swap: '" SWAP_ME
           " off --name %s' first, or pick another --name",
           c->set.name, c->state, c->set.name);
}

static void check_tools(const struct swap_context *c)
{
  char buf[4096];
  if (!swap_kv_get(&c->set.pager, "size") && c->rampart_plugin)
    swap_die("no size= given: put size=SIZE in %s or on the command line (e.g. size=8G)",
             c->config_file);
  static const char *const tools[] = { "mkswap", "swapon", "swapoff" };
  for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++)
    if (!swap_find_program(tools[i], buf, sizeof buf))
      swap_die("cannot find %s: install it (sudo ./scripts/setup does)", tools[i]);
}

static void make_state_dir(const struct swap_context *c)
{
  mkdir(c->run_dir, 0755);
  chmod(c->run_dir, 0755);
  if (mkdir(c->state, 0700) != 0)
    swap_die("cannot make %s: %s", c->state, strerror(errno));
  char path[2400];
  FILE *f = fopen(swap_state_path(c, "state", path, sizeof path), "we");
  if (!f)
    swap_die("cannot write %s: %s", path, strerror(errno));
  fclose(f);
}

/* What a waiting rampart-fuse worker spins, µs: about a loopback round trip to a
 * server that must be woken (docs/page-in.md). */
#define SWAP_FUSE_POLL_US 30u
/* NBD connections per device when --connections is not given: rampart's own daemon
 * serves one best (see start_nbd); nbd-client's plugins keep two. */
#define SWAP_NBD_ATTACH_CONNECTIONS 1
#define SWAP_NBD_CLIENT_CONNECTIONS 2

/* The pager's settings: the command line's and the file's, and what the device needs;
 * written to $state/pager.args for the standbys. */
static void write_pager_args(const struct swap_context *c, const struct frontend_choice *f)
{
  const struct swap_kv *kv = &c->set.pager;
  char path[2400], layout[256];
  FILE *out = fopen(swap_state_path(c, "pager.args", path, sizeof path), "we");
  if (!out)
    swap_die("cannot write %s: %s", path, strerror(errno));
  for (size_t i = 0; i < kv->n; i++) {
    if (is(kv->keys[i], "standby"))
      swap_die("standby= is rampart-swap's to set: it starts the standby itself");
    fprintf(out, "%s=%s\n", kv->keys[i], kv->values[i]);
  }
  if (c->rampart_plugin) {
    if (!swap_kv_get(kv, "mlock"))
      fprintf(out, "mlock=true\n");
    if (!swap_kv_get(kv, "stats-file"))
      fprintf(out, "stats-file=%s/stats\n", c->state);
    /* The device's control socket: 'rampartctl device $state/control add|drain|remove|
     * reload|servers' changes its servers while it swaps (docs/elastic.md). */
    if (!swap_kv_get(kv, "control"))
      fprintf(out, "control=%s/control\n", c->state);
    /* rampart-fuse's worker that holds the one request out waits for its reply: a spin
     * while CPUs idle saves it the wake-up, tens of microseconds on a virtual machine,
     * and the pressure gate (poll-pressure=) stops it under swap storms, where it would
     * cost the application its CPU (docs/page-in.md has both measured). */
    if (is(f->daemon, "rampart-fuse") && !swap_kv_get(kv, "poll-us"))
      fprintf(out, "poll-us=%u\n", SWAP_FUSE_POLL_US);
    /* ublk and nbd: the state a standby takes over (docs/recovery.md). Not for fuse: with
     * no standby and no device that waits, the state would only be left behind. */
    if (is(f->frontend, "ublk") || is(f->frontend, "nbd")) {
      if (swap_kv_get(kv, "state"))
        swap_die("state= is rampart-swap's to set (it is %s/pager.state)", c->state);
      fprintf(out, "state=%s/pager.state\n", c->state);
      swap_state_set(c, "pager_state", "%s/pager.state", c->state);
      /* What 'upgrade' checks an installed binary against. */
      pager_state_layout(c, f->frontend, f->daemon, layout, sizeof layout);
      swap_state_set(c, "state_layout", "%s", layout);
    }
  }
  if (fclose(out) != 0)
    swap_die("cannot write %s: %s", path, strerror(errno));
}

/* The pager's settings joined by ' ', for the messages. */
static const char *settings_line(const struct arg_list *a, size_t from, char *buf,
                                 size_t buflen)
{
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = from; i < a->n && used < buflen; i++)
    used += (size_t)snprintf(buf + used, buflen - used, "%s%s", i > from ? " " : "", a->v[i]);
  return buf;
}

static bool log_has_error(const char *log)
{
  FILE *f = fopen(log, "re");
  char line[2048];
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f))
    found = strstr(line, "error:") && !strstr(line, "error: warning:");
  if (f)
    fclose(f);
  return found;
}

/* The socket exists before the engine has reached its servers (nbdkit binds, forks, then
 * the plugin opens the engine): an export is ready once a client can read its size. Each
 * probe has its own timeout: a wedged nbdkit still accepts connections into its listen
 * backlog and never answers, and 'on' must then fail, not hang. */
static long long nbd_ready(const struct swap_context *c, const char *daemon, pid_t pid,
                           const char *sock, const char *log)
{
  char uri[2600], out[256];
  snprintf(uri, sizeof uri, "nbd+unix:///?socket=%s", sock);
  const char *argv[] = { "nbdinfo", "--size", uri, NULL };
  struct run_io io = { .out_mode = RUN_CAPTURE,
                       .err_mode = RUN_DISCARD,
                       .out = out,
                       .outlen = sizeof out,
                       .timeout_ms = 10000 };
  for (time_t deadline = time(NULL) + 60; time(NULL) < deadline; swap_sleep_ms(100)) {
    if (!swap_pid_alive(c, pid))
      swap_die("%s exited while starting (its log follows)", daemon);
    if (run_program(argv, &io) == 0)
      return atoll(out);
    /* The plugin's start-up errors (a wrong key, no server reachable) end nbdkit; if it
     * is still here a moment after saying so, it is not going to serve. */
    if (log_has_error(log)) {
      swap_wait_gone(c, pid, 3000);
      swap_die("%s reported an error while starting (its log follows)", daemon);
    }
  }
  swap_die("%s (pid %d) did not serve %s within 60 s", daemon, (int)pid, sock);
}

/* The serving NBD daemon (the fuse and NBD frontends), its log $state/TAG.log; records
 * pager_pid; returns the export's size. */
static long long start_nbd_daemon(const struct swap_context *c, const char *daemon,
                                  const char *sock, const char *tag)
{
  struct arg_list a = { 0 };
  char what[4200], line[8192], log[2400], file[128];
  pager_nbd_command(c, sock, NULL, &a);
  bool nbdkit = is(daemon, "nbdkit");
  if (nbdkit)
    snprintf(what, sizeof what, "nbdkit %s", c->prog.plugin);
  else
    snprintf(what, sizeof what, "%s", daemon);
  say("starting %s (%s)", what, settings_line(&a, nbdkit ? 7 : 3, line, sizeof line));
  pid_t pid = swap_spawn(c, tag, (const char *const *)a.v, pager_preload(c));
  arg_free(&a);
  snprintf(file, sizeof file, "%s.log", tag);
  swap_state_path(c, file, log, sizeof log);
  swap_state_set(c, "pager_pid", "%d", (int)pid);
  swap_state_set(c, "nbdkit_pid", "%d", (int)pid);
  swap_state_set(c, "pager_log", "%s", log);
  long long size = nbd_ready(c, daemon, pid, sock, log);
  swap_identity_record(c, pid, true);
  say("%s ready: pid %d, %lld MiB export on %s", daemon, (int)pid, size >> 20, sock);
  return size;
}

static long long block_size(const char *dev)
{
  unsigned long long size = 0;
  int fd = open(dev, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ioctl(fd, BLKGETSIZE64, &size);
    close(fd);
  }
  return (long long)size;
}

static long long start_ublk(const struct swap_context *c, char *dev, size_t devlen)
{
  int id = 0;
  char p[3][128];
  /* The lowest device number free: the standby and the keeper name the device by it. */
  for (; id < 1024; id++) {
    snprintf(p[0], sizeof p[0], "/dev/ublkb%d", id);
    snprintf(p[1], sizeof p[1], "/dev/ublkc%d", id);
    snprintf(p[2], sizeof p[2], "/sys/class/ublk-char/ublkc%d", id);
    if (access(p[0], F_OK) != 0 && access(p[1], F_OK) != 0 && access(p[2], F_OK) != 0)
      break;
  }
  swap_state_set(c, "ublk_id", "%d", id);
  swap_state_set(c, "queues", "%d", c->set.queues);
  swap_state_set(c, "depth", "%d", c->set.depth);
  struct arg_list a = { 0 };
  char line[8192], log[2400], what[128];
  pager_ublk_command(c, NULL, &a);
  say("starting rampart-ublk (%d queue(s) of %d; %s)", c->set.queues, c->set.depth,
      settings_line(&a, 7, line, sizeof line));
  pid_t pid = swap_spawn(c, "ublk-0", (const char *const *)a.v, NULL);
  arg_free(&a);
  swap_state_set(c, "pager_pid", "%d", (int)pid);
  swap_state_set(c, "pager_log", "%s", swap_state_path(c, "ublk-0.log", log, sizeof log));
  snprintf(what, sizeof what, "rampart-ublk did not bring /dev/ublkb%d up", id);
  swap_wait_notified(c, pid, "READY=1", 60, what);
  snprintf(dev, devlen, "/dev/ublkb%d", id);
  swap_state_set(c, "device", "%s", dev);
  return block_size(dev);
}

static long long start_nbd(const struct swap_context *c, const char *daemon, char *dev,
                           size_t devlen)
{
  char a_sock[2400], b_sock[2400];
  swap_state_path(c, "nbd-a.sock", a_sock, sizeof a_sock);
  swap_state_path(c, "nbd-b.sock", b_sock, sizeof b_sock);
  swap_state_set(c, "pager_sock", "%s", a_sock);
  swap_state_set(c, "free_sock", "%s", b_sock);
  /* One log per pager the device has had: nbdkit-0 is the first, each standby the next. */
  long long size = start_nbd_daemon(c, daemon, a_sock, "nbdkit-0");
  /* rampart-nbd-attach picks a free /dev/nbdN and says which once the device is up. */
  /* Each connection is a hardware queue of the driver and a thread of the pager. One by
   * default: on two CPUs a second doubled the pager's CPU per request and halved its
   * QD32 reads (docs/page-in.md, "Parallelism"); --connections N gives more. */
  int n = c->set.connections ? c->set.connections : SWAP_NBD_ATTACH_CONNECTIONS;
  char conns[16];
  snprintf(conns, sizeof conns, "%d", n);
  say("attaching through rampart-nbd-attach (%d connection%s)", n, n == 1 ? "" : "s");
  const char *argv[] = { c->prog.nbd_attach, "--connections", conns, a_sock, b_sock, NULL };
  pid_t pid = swap_spawn(c, "nbd-attach", argv, NULL);
  swap_state_set(c, "attach_pid", "%d", (int)pid);
  swap_wait_notified(c, pid, "READY=1", 30, "rampart-nbd-attach did not attach");
  swap_notified_status(c, pid, "serving ", dev, devlen);
  swap_state_set(c, "device", "%s", dev);
  return size;
}

/* A /dev/nbdN with no server and no size. */
static bool free_nbd(char *dev, size_t devlen)
{
  for (int i = 0; i < 1024; i++) {
    char path[128], size[64] = "";
    snprintf(path, sizeof path, "/sys/block/nbd%d/size", i);
    FILE *f = fopen(path, "re");
    if (!f)
      return false;
    bool got = fgets(size, sizeof size, f) != NULL;
    fclose(f);
    snprintf(path, sizeof path, "/sys/block/nbd%d/pid", i);
    if (access(path, F_OK) == 0 || !got || atoll(size) != 0)
      continue;
    snprintf(dev, devlen, "/dev/nbd%d", i);
    return true;
  }
  return false;
}

static bool nbd_live(const char *dev)
{
  char path[256], size[64] = "";
  snprintf(path, sizeof path, "/sys/block/%s/pid", dev + 5);
  if (access(path, F_OK) != 0)
    return false;
  snprintf(path, sizeof path, "/sys/block/%s/size", dev + 5);
  FILE *f = fopen(path, "re");
  bool got = f && fgets(size, sizeof size, f);
  if (f)
    fclose(f);
  return got && atoll(size) != 0;
}

static long long start_nbd_client(const struct swap_context *c, const char *daemon, char *dev,
                                  size_t devlen)
{
  char sock[2400], log[2400], tail[1024], conns[16];
  swap_state_path(c, "nbdkit.sock", sock, sizeof sock);
  long long size = start_nbd_daemon(c, daemon, sock, "nbdkit");
  if (!free_nbd(dev, devlen))
    swap_die("every /dev/nbd* is in use; 'modprobe -r nbd; modprobe nbd nbds_max=32' when "
             "none is needed, or detach one");
  swap_state_set(c, "device", "%s", dev);
  int n = c->set.connections ? c->set.connections : SWAP_NBD_CLIENT_CONNECTIONS;
  say("attaching %s with nbd-client (%d connections)", dev, n);
  snprintf(conns, sizeof conns, "%d", n);
  swap_state_path(c, "nbd-client.log", log, sizeof log);
  const char *argv[] = { "nbd-client", "-unix",        sock,    dev,        "-name",
                         "rampart",    "-nonetlink",   "-swap", "-persist", "-block-size",
                         "4096",       "-connections", conns,   NULL };
  struct run_io io = { .append_to = log };
  if (run_program(argv, &io) != 0)
    swap_die("nbd-client failed: %s", file_tail(log, 3, tail, sizeof tail));
  /* In ioctl mode nbd-client returns once it has daemonised, before its child enters
   * NBD_DO_IT, and the kernel gives the device its size only there: run now, mkswap would
   * see an empty device. */
  for (int i = 0; i < 300 && !nbd_live(dev); i++)
    swap_sleep_ms(100);
  if (!nbd_live(dev))
    swap_die("nbd-client did not bring %s up within 30 s: %s", dev,
             file_tail(log, 3, tail, sizeof tail));
  return size;
}

/* The fuse frontend over NBD, for a plugin other than rampart's, a host without
 * rampart-fuse, or a --daemon given: the NBD daemon, then nbdfuse in front of it serving
 * mnt/device; returns nbdfuse's pid. */
static pid_t start_fuse_over_nbd(const struct swap_context *c, const char *daemon,
                                 const char *mnt)
{
  char sock[2400], device[2600], pidfile[2400], pid[32] = "", log[2400], tail[1024];
  swap_state_path(c, "nbdkit.sock", sock, sizeof sock);
  start_nbd_daemon(c, daemon, sock, "nbdkit");
  snprintf(device, sizeof device, "%s/device", mnt);
  swap_state_path(c, "nbdfuse.pid", pidfile, sizeof pidfile);
  /* -s (one FUSE thread): libnbd 1.14's nbdfuse counts a command as in flight only after
   * sending it, so with several FUSE threads a fast reply can drive its counter to zero
   * while another reply is pending, and it dies on an assertion mid-swap-out. With one
   * thread one command is in flight at a time; the engine still spreads each request over
   * all servers in parallel. */
  const char *argv[] = { "nbdfuse", "-s", "-P", pidfile, device, "--unix", sock, NULL };
  swap_spawn(c, "nbdfuse", argv, NULL);
  for (int i = 0; i < 300; i++) {
    FILE *f = fopen(pidfile, "re");
    bool got = f && fgets(pid, sizeof pid, f);
    if (f)
      fclose(f);
    if (got && atoi(pid) > 0)
      break;
    swap_sleep_ms(100);
  }
  if (atoi(pid) <= 0)
    swap_die(
      "nbdfuse did not start: %s",
      file_tail(swap_state_path(c, "nbdfuse.log", log, sizeof log), 3, tail, sizeof tail));
  swap_state_set(c, "fuse_pid", "%d", atoi(pid));
  swap_identity_record(c, atoi(pid), true);
  return atoi(pid);
}

/* A loop device over the FUSE file. Direct I/O keeps swap pages out of the FUSE file's
 * page cache (no double caching under the very pressure swap relieves); not every kernel
 * allows it on FUSE. */
static void attach_loop(const char *file, char *dev, size_t devlen)
{
  const char *direct[] = { "losetup", "--find", "--show", "--direct-io=on", file, NULL };
  const char *buffered[] = { "losetup", "--find", "--show", file, NULL };
  struct run_io io = {
    .out_mode = RUN_CAPTURE, .err_mode = RUN_DISCARD, .out = dev, .outlen = devlen
  };
  if (run_program(direct, &io) != 0) {
    io.err_mode = RUN_INHERIT;
    if (run_program(buffered, &io) != 0)
      swap_die("losetup found no free loop device: detach one ('losetup -a') and retry");
    say("loop direct I/O is not available on FUSE here; using buffered loop I/O");
  }
  dev[strcspn(dev, "\n")] = '\0';
}

static long long start_fuse(const struct swap_context *c, const struct frontend_choice *f,
                            char *dev, size_t devlen)
{
  char mnt[2400], device[2600], line[8192], log[2400], what[2600];
  pid_t fuse;
  swap_state_path(c, "fuse", mnt, sizeof mnt);
  if (mkdir(mnt, 0700) != 0)
    swap_die("cannot make %s: %s", mnt, strerror(errno));
  swap_state_set(c, "fuse_mount", "%s", mnt);
  snprintf(device, sizeof device, "%s/device", mnt);
  if (is(f->daemon, "rampart-fuse")) {
    struct arg_list a = { 0 };
    arg_push(&a, "%s", c->prog.fuse);
    arg_push(&a, "--mount");
    arg_push(&a, "%s", mnt);
    pager_settings_push(c, &a);
    say("starting rampart-fuse (%s)", settings_line(&a, 3, line, sizeof line));
    fuse = swap_spawn(c, "fuse", (const char *const *)a.v, NULL);
    arg_free(&a);
    swap_state_set(c, "pager_pid", "%d", (int)fuse);
    swap_state_set(c, "fuse_pid", "%d", (int)fuse);
    swap_state_set(c, "pager_log", "%s", swap_state_path(c, "fuse.log", log, sizeof log));
    snprintf(what, sizeof what, "rampart-fuse did not mount %s", mnt);
    swap_wait_notified(c, fuse, "READY=1", 60, what);
  } else {
    fuse = start_fuse_over_nbd(c, f->daemon, mnt);
  }
  struct stat st;
  long long size = stat(device, &st) == 0 ? (long long)st.st_size : 0;
  attach_loop(device, dev, devlen);
  swap_state_set(c, "device", "%s", dev);
  say("attached %s (loop over %s pid %d)", dev, f->fuse_daemon, (int)fuse);
  return size;
}

static void raise_min_free(const struct swap_context *c)
{
  long current = 0;
  FILE *f = fopen("/proc/sys/vm/min_free_kbytes", "re");
  if (!f || fscanf(f, "%ld", &current) != 1)
    swap_die("cannot read /proc/sys/vm/min_free_kbytes");
  fclose(f);
  if (current >= MIN_FREE_FLOOR)
    return;
  swap_state_set(c, "min_free_kbytes_before", "%ld", current);
  f = fopen("/proc/sys/vm/min_free_kbytes", "we");
  if (!f || fprintf(f, "%d\n", MIN_FREE_FLOOR) < 0 || fclose(f) != 0)
    swap_die("cannot raise vm.min_free_kbytes to %d: %s", MIN_FREE_FLOOR, strerror(errno));
  say("vm.min_free_kbytes raised from %ld to %d", current, MIN_FREE_FLOOR);
}

/* The standby, before the first page goes out, and the keeper that replaces it. */
static void start_standby_and_keeper(const struct swap_context *c)
{
  char mem[128];
  swap_start_standby(c);
  pid_t standby = (pid_t)swap_state_num(c, "standby_pid");
  say("standby pid %d stands by for pid %ld: %s", (int)standby,
      swap_state_num(c, "pager_pid"), proc_memory(standby, mem, sizeof mem));
  const char *argv[] = { c->prog.self, "keep-standby", "--config", "/dev/null",
                         "--name",     c->set.name,    NULL };
  pid_t keeper = swap_spawn(c, "keeper", argv, NULL);
  swap_state_set(c, "keeper_pid", "%d", (int)keeper);
}

static void make_swap(const struct swap_context *c, const char *dev)
{
  char label[256], prio[16];
  snprintf(label, sizeof label, "rampart-%s", c->set.name);
  snprintf(prio, sizeof prio, "%d", c->set.priority);
  const char *mkswap[] = { "mkswap", "-L", label, dev, NULL };
  struct run_io quiet = { .out_mode = RUN_DISCARD };
  if (run_program(mkswap, &quiet) != 0)
    swap_die("mkswap %s failed", dev);
  const char *swapon[] = { "swapon", "--discard=pages", "--priority", prio, dev, NULL };
  if (run_program(swapon, NULL) != 0)
    swap_die("swapon %s failed (the kernel's message is above)", dev);
}

void swap_turn_on(struct swap_context *c)
{
  if (swap_state_exists(c))
    take_back(c);
  check_tools(c);
  struct frontend_choice f;
  swap_choose_frontend(c, &f);
  make_state_dir(c);
  swap_state_set(c, "frontend", "%s", f.frontend);
  swap_state_set(c, "generation", "0");
  swap_state_set(c, "takeovers", "0");
  swap_state_set(c, "threads", "%d", c->set.threads);
  swap_state_set(c, "daemon", "%s", f.daemon);
  /* Anything that fails from here on is undone, so a failed 'on' leaves nothing behind. */
  swap_rollback_arm(c);
  write_pager_args(c, &f);
  bool standby = is(f.frontend, "ublk") || is(f.frontend, "nbd");
  /* ublk and nbd: whoever serves or stands by says so there (fuse's nbdfuse is waited for
   * by its export's size, and nothing takes it over). */
  if (standby || is(f.daemon, "rampart-fuse"))
    swap_start_notify_listener(c);
  char dev[4096] = "";
  long long size;
  if (is(f.frontend, "ublk"))
    size = start_ublk(c, dev, sizeof dev);
  else if (is(f.frontend, "nbd"))
    size = start_nbd(c, f.daemon, dev, sizeof dev);
  else if (is(f.frontend, "nbd-client"))
    size = start_nbd_client(c, f.daemon, dev, sizeof dev);
  else
    size = start_fuse(c, &f, dev, sizeof dev);
  if (standby)
    start_standby_and_keeper(c);
  raise_min_free(c);
  make_swap(c, dev);
  swap_rollback_disarm();
  say("'%s' is on: %s, %lld MiB of swap at priority %d (%s%s); '" SWAP_ME
      " off --name %s' removes it",
      c->set.name, dev, size >> 20, c->set.priority, f.frontend,
      standby ? ", with a standby" : "", c->set.name);
}
