/* 'off' (swap_off.h). The order matters: swapoff first (the pages come home through the
 * serving pager), then the keeper, so it does not take the pager's planned stop for a
 * crash, then the standby, which would otherwise wake as its pager stops, then the
 * device, the pager, the listener, and the supervisors, which end with their daemons. */
#include "swap_off.h"

#include <errno.h>
#include <dirent.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "program_run.h"
#include "proc_identity.h"
#include "swap_context.h"
#include "swap_state.h"

long swap_used_kib(const char *dev)
{
  FILE *f = fopen("/proc/swaps", "re");
  char name[4096], type[64];
  long size, used = -1, found = -1;
  if (!f)
    return -1;
  fscanf(f, "%*[^\n]\n");
  while (fscanf(f, "%4095s %63s %ld %ld %*[^\n]\n", name, type, &size, &used) == 4)
    if (strcmp(name, dev) == 0)
      found = used;
  fclose(f);
  return found;
}

static long meminfo_kib(const char *key)
{
  FILE *f = fopen("/proc/meminfo", "re");
  char line[256];
  long v = 0;
  size_t klen = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, klen) == 0 && line[klen] == ':')
      v = atol(line + klen + 1);
  if (f)
    fclose(f);
  return v;
}

static long kib_to_mib(long kib)
{
  return (kib + 1023) / 1024;
}

/* The systemd unit running this, if any (rampart-swap.service runs 'off' as its
 * ExecStop), so a refusal can say which unit to start and stop again. */
static bool systemd_unit(char *buf, size_t buflen)
{
  if (!getenv("INVOCATION_ID"))
    return false;
  FILE *f = fopen("/proc/self/cgroup", "re");
  char line[1024];
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *slash = strrchr(line, '/');
    size_t len = slash ? strlen(slash + 1) : 0;
    if (strncmp(line, "0::", 3) == 0 && len > 8 &&
        strcmp(slash + 1 + len - 8, ".service") == 0) {
      snprintf(buf, buflen, "%s", slash + 1);
      found = true;
    }
  }
  if (f)
    fclose(f);
  return found;
}

static _Noreturn void refuse(const struct swap_context *c, const char *dev, long used,
                             long avail)
{
  char unit[256];
  fprintf(stderr,
          SWAP_ME ": refusing to turn '%s' off: %s still holds %ld MiB of pages and only %ld "
                  "MiB of memory is available to take them back (swapoff would have the "
                  "kernel OOM-kill processes). The swap stays on and its pager keeps serving "
                  "it, so no page is lost.\n",
          c->set.name, dev, kib_to_mib(used), kib_to_mib(avail));
  if (systemd_unit(unit, sizeof unit))
    /* systemd cannot keep a unit active once its stop has begun: the unit is now 'failed'
     * while the device stays on. Starting it again takes the device back. */
    fprintf(stderr,
            SWAP_ME
            ": what to do: free memory (stop or shrink what is using it, or add other "
            "swap), then 'systemctl start %s' (it takes the running device back as it "
            "is) and 'systemctl stop %s' again. '" SWAP_ME " off --force' tries "
            "anyway.\n",
            unit, unit);
  else
    fprintf(stderr, SWAP_ME ": what to do: free memory (stop or shrink what is using it, or "
                            "add other swap) and run '" SWAP_ME " off' again; --force tries "
                            "anyway, and swapoff may then have processes OOM-killed.\n");
  exit(SWAP_EXIT_REFUSED);
}

/* swapoff, unless memory cannot take the pages back (and --force is not given). */
static void swap_off_device(const struct swap_context *c, const char *dev)
{
  long used = swap_used_kib(dev);
  if (!*dev || used < 0)
    return;
  long avail = meminfo_kib("MemAvailable"), total = meminfo_kib("MemTotal");
  /* Headroom, so swapoff does not leave the host itself with nothing: an eighth of its
   * memory, at most 64 MiB (a fixed 64 MiB is a third of a small guest's memory). */
  long headroom = total / 8 < 65536 ? total / 8 : 65536;
  if (!c->force && used + headroom > avail)
    refuse(c, dev, used, avail);
  say("swapoff %s (%ld MiB to bring back)", dev, kib_to_mib(used));
  char err[1024];
  const char *argv[] = { "swapoff", dev, NULL };
  struct run_io io = {
    .out_mode = RUN_CAPTURE, .err_mode = RUN_CAPTURE, .out = err, .outlen = sizeof err
  };
  if (run_program(argv, &io) != 0) {
    err[strcspn(err, "\n")] = '\0';
    swap_die("swapoff %s failed: %s. The device stays attached so no page is lost; free "
             "memory and run '" SWAP_ME " off' again.",
             dev, *err ? err : "no message");
  }
}

static void stop_standby(const struct swap_context *c, const char *fe)
{
  pid_t standby = (pid_t)swap_state_num(c, "standby_pid");
  if (!swap_pid_alive(c, standby)) {
    swap_pid_ours(c, standby, "the standby"); /* says so when its pid is another's now */
    return;
  }
  say("stopping the standby (pid %d)", (int)standby);
  if (strcmp(fe, "nbd") != 0) {
    swap_stop_pid(c, standby, "the standby");
    return;
  }
  /* SIGKILL, as 'upgrade' does: an nbdkit standby asleep on the state's lock heeds no
   * SIGTERM, and holds nothing of the device while its pager, still running, serves. */
  if (!swap_kill_pid(c, standby, "the standby"))
    swap_die("the standby (pid %d) survives SIGKILL; stop it by hand, then '" SWAP_ME
             " off' again",
             (int)standby);
}

/* /proc/mounts, not stat: a FUSE mount whose daemon died cannot be stat'ed, and it must
 * still be unmounted. */
static bool mounted(const char *mnt)
{
  FILE *f = fopen("/proc/mounts", "re");
  char dev[4096], dir[4096];
  bool found = false;
  while (f && !found && fscanf(f, "%4095s %4095s %*[^\n]\n", dev, dir) == 2)
    found = strcmp(dir, mnt) == 0;
  if (f)
    fclose(f);
  return found;
}

static void detach_fuse(const struct swap_context *c, const char *dev)
{
  const char *show[] = { "losetup", dev, NULL };
  if (*dev && run_quiet(show)) {
    say("detaching %s (losetup -d)", dev);
    const char *detach[] = { "losetup", "-d", dev, NULL };
    if (run_program(detach, NULL) != 0)
      swap_die("losetup -d %s failed; run it by hand, then '" SWAP_ME " off'", dev);
  }
  /* The FUSE daemon (rampart-fuse, or nbdfuse) ends once its mount is gone. */
  char mnt[2400] = "";
  swap_state_get(c, "fuse_mount", mnt, sizeof mnt);
  pid_t fuse = (pid_t)swap_state_num(c, "fuse_pid");
  if (!fuse)
    fuse = (pid_t)swap_state_num(c, "nbdfuse_pid"); /* a state from before rampart-fuse */
  if (*mnt && mounted(mnt)) {
    char pid[32] = "?";
    if (fuse)
      snprintf(pid, sizeof pid, "%d", (int)fuse);
    say("unmounting %s (FUSE daemon pid %s)", mnt, pid);
    if (umount(mnt) != 0) {
      if (swap_pid_alive(c, fuse))
        swap_die("cannot unmount %s; see 'fuser -m %s', then run '" SWAP_ME " off' again",
                 mnt, mnt);
      if (umount2(mnt, MNT_DETACH) != 0)
        swap_die("cannot unmount the dead FUSE mount %s: 'umount -l %s' by hand", mnt, mnt);
    }
  }
  if (fuse && !swap_wait_gone(c, fuse, 10000))
    swap_stop_pid(c, fuse, "the FUSE daemon");
  if (*mnt)
    rmdir(mnt);
}

static void detach_device(const struct swap_context *c, const char *fe, const char *dev)
{
  pid_t pager = (pid_t)swap_state_num(c, "pager_pid");
  if (strcmp(fe, "ublk") == 0) {
    /* rampart-ublk stops and deletes its device on SIGTERM. */
    if (swap_pid_alive(c, pager)) {
      say("stopping rampart-ublk (pid %d), which removes %s", (int)pager, dev);
      swap_stop_pid(c, pager, "rampart-ublk");
    }
  } else if (strcmp(fe, "nbd") == 0) {
    pid_t attach = (pid_t)swap_state_num(c, "attach_pid");
    if (swap_pid_alive(c, attach)) {
      say("detaching %s (rampart-nbd-attach pid %d)", dev, (int)attach);
      swap_stop_pid(c, attach, "rampart-nbd-attach");
    } else {
      swap_pid_ours(c, attach, "rampart-nbd-attach"); /* says so when reused */
    }
  } else if (strcmp(fe, "nbd-client") == 0) {
    say("detaching %s (nbd-client -d)", dev);
    const char *argv[] = { "nbd-client", "-d", dev, NULL };
    run_quiet(argv);
  } else if (strcmp(fe, "fuse") == 0) {
    detach_fuse(c, dev);
  }
}

static void stop_supervisor(const char *value, void *arg)
{
  const struct swap_context *c = arg;
  pid_t sup = (pid_t)atoi(value);
  if (!swap_pid_alive(c, sup)) {
    swap_pid_ours(c, sup, "a daemon's supervisor");
    return;
  }
  if (!swap_wait_gone(c, sup, 5000))
    swap_stop_pid(c, sup, "a daemon's supervisor");
}

/* Other devices' state files in the run directory. */
static int other_states(const struct swap_context *c)
{
  DIR *d = opendir(c->run_dir);
  struct dirent *e;
  int n = 0;
  while (d && (e = readdir(d))) {
    char path[4400];
    if (e->d_name[0] == '.' || strcmp(e->d_name, c->set.name) == 0)
      continue;
    snprintf(path, sizeof path, "%s/%s/state", c->run_dir, e->d_name);
    n += access(path, F_OK) == 0;
  }
  if (d)
    closedir(d);
  return n;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

/* Only the last rampart device restores the host's setting. */
static void restore_min_free(const struct swap_context *c)
{
  char old[32];
  if (!swap_state_get(c, "min_free_kbytes_before", old, sizeof old) || !*old ||
      other_states(c) > 0)
    return;
  FILE *f = fopen("/proc/sys/vm/min_free_kbytes", "we");
  if (f && fprintf(f, "%s\n", old) > 0 && fclose(f) == 0)
    say("vm.min_free_kbytes back to %s", old);
  else if (f)
    fclose(f);
}

void swap_turn_off(struct swap_context *c)
{
  if (!swap_state_exists(c)) {
    say("'%s' is already off (no %s/state)", c->set.name, c->state);
    return;
  }
  char dev[4096] = "", fe[32] = "";
  swap_state_get(c, "device", dev, sizeof dev);
  swap_state_get(c, "frontend", fe, sizeof fe);
  swap_off_device(c, dev);
  pid_t keeper = (pid_t)swap_state_num(c, "keeper_pid");
  if (keeper)
    swap_stop_pid(c, keeper, "the standby keeper");
  stop_standby(c, fe);
  detach_device(c, fe, dev);
  /* The pager (nbdkit, or a rampart-ublk that never brought its device up): a clean stop
   * ends its state, so nothing is left for a standby either. */
  pid_t pager = (pid_t)swap_state_num(c, "pager_pid");
  if (swap_pid_alive(c, pager)) {
    say("stopping the pager (pid %d)", (int)pager);
    swap_stop_pid(c, pager, "the pager");
  } else {
    swap_pid_ours(c, pager, "the pager"); /* says so when its pid is another's now */
  }
  /* The listener last: the daemons have nothing more to say. */
  pid_t notify = (pid_t)swap_state_num(c, "notify_pid");
  if (notify)
    swap_stop_pid(c, notify, "the notify listener");
  swap_state_each(c, "supervisor_pid", stop_supervisor, c);
  restore_min_free(c);
  nftw(c->state, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  rmdir(c->run_dir);
  say("'%s' is off", c->set.name);
}
