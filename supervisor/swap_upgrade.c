/* 'upgrade' and 'reload' (swap_upgrade.h). The kernel holds the device's requests during
 * the handover: ublk reissues them to the new pager; NBD sends those in flight again once
 * rampart-nbd-attach's --timeout passes. */
#include "swap_upgrade.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "daemon_spawn.h"
#include "pager_command.h"
#include "proc_identity.h"
#include "standby_keeper.h"
#include "swap_context.h"
#include "swap_state.h"

static long now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

/* Refuses the upgrade, with the reason and what to do, when the installed binary could not
 * take the running pager's state over: its standby would stand by, and then, at the
 * handover, refuse the state and leave the device with no pager, and its pages lost. */
static void check_state_layout(const struct swap_context *c)
{
  char was[256] = "", now[256], fe[32] = "", daemon[64] = "", todo[1024];
  const char *n = c->set.name;
  swap_state_get(c, "state_layout", was, sizeof was);
  swap_state_get(c, "frontend", fe, sizeof fe);
  swap_state_get(c, "daemon", daemon, sizeof daemon);
  pager_state_layout(c, fe, daemon, now, sizeof now);
  snprintf(todo, sizeof todo,
           "Nothing was changed: the pager serves on, on its old binary, with its standby. "
           "To upgrade, take the swap off and on: '" SWAP_ME " off --name %s' (it brings the "
           "pages home, and refuses while memory cannot take them back), then '" SWAP_ME
           " on --name %s', which starts the installed binary with a new state",
           n, n);
  if (!*now)
    swap_die(
      "refusing to upgrade '%s': the installed pager does not say which state layout "
      "it reads (a build older than 'upgrade'), so it may not take the running pager's "
      "state over. %s",
      n, todo);
  if (!*was)
    swap_die("refusing to upgrade '%s': the running pager was started by a rampart-swap that "
             "did not record its state layout, so the installed pager's (%s) cannot be "
             "checked against it. %s",
             n, now, todo);
  if (strcmp(was, now) != 0)
    swap_die("refusing to upgrade '%s': the state layout changed: the running pager's state "
             "is layout %s and the installed pager reads layout %s, so a standby on it could "
             "not take the state over, and the pages it holds would be lost. %s",
             n, was, now, todo);
  say("state layout %s: the installed pager takes the running pager's state over", now);
}

/* Under the keeper's lock, so it does not start a standby of its own in the moment
 * between the two. The old binary's standby goes first: of two standbys either could
 * wake at the handover, and the new one must have the socket rampart-nbd-attach knows.
 * SIGKILL: a standby holds nothing of the device until it takes over (which the pager,
 * alive, keeps it from), and an nbdkit standby asleep on the state's lock heeds no
 * SIGTERM. */
static bool standby_replace(const struct swap_context *c)
{
  pid_t old = (pid_t)swap_state_num(c, "standby_pid");
  pid_t pager = (pid_t)swap_state_num(c, "pager_pid");
  char dev[4096] = "";
  swap_state_get(c, "device", dev, sizeof dev);
  if (swap_pid_alive(c, old)) {
    say("stopping the standby (pid %d) on the old binary", (int)old);
    if (!swap_kill_pid(c, old, "the old standby"))
      swap_die("the old standby (pid %d) survives SIGKILL; nothing else was changed",
               (int)old);
  }
  if (!swap_try_start_standby(c))
    swap_die("no standby on the installed binary stood by (above): the pager (pid %d) serves "
             "%s on, on the binary it started with, with no standby, so a crash of it is not "
             "survived until the keeper's next try (every minute at most) starts one. Fix "
             "what the standby's log says and run '" SWAP_ME " upgrade' again, or take the "
             "swap off and on ('" SWAP_ME " off', '" SWAP_ME " on')",
             (int)pager, dev);
  return true;
}

static bool keeper_took(const struct swap_context *c, pid_t standby)
{
  return swap_state_num(c, "pager_pid") == standby &&
         swap_pid_alive(c, (pid_t)swap_state_num(c, "standby_pid"));
}

/* SIGKILL to the serving pager, through its pidfd. */
static void hand_over(const struct swap_context *c, pid_t pager)
{
  if (!swap_pid_ours(c, pager, "the serving pager"))
    swap_die("the serving pager (pid %d) is not the process 'on' started: nothing was handed "
             "over",
             (int)pager);
  int fd = swap_pidfd(c, pager);
  if (fd >= 0) {
    syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
    close(fd);
  }
}

void swap_upgrade(const struct swap_context *c)
{
  const char *n = c->set.name;
  char fe[32] = "", dev[4096] = "", num[32], log[2400] = "", tail[1024], how[512];
  if (!swap_state_exists(c))
    swap_die("'%s' is off: nothing to upgrade ('" SWAP_ME " on' starts the binary installed "
             "now)",
             n);
  swap_state_get(c, "frontend", fe, sizeof fe);
  if (strcmp(fe, "ublk") != 0 && strcmp(fe, "nbd") != 0)
    swap_die("'%s' runs on %s, which has no standby to hand over to: '" SWAP_ME
             " off' (which brings the pages home) and '" SWAP_ME
             " on' start the installed binary",
             n, fe);
  pid_t pager = (pid_t)swap_state_num(c, "pager_pid");
  pid_t keeper = (pid_t)swap_state_num(c, "keeper_pid");
  swap_state_get(c, "device", dev, sizeof dev);
  snprintf(num, sizeof num, "%s", "?");
  if (!swap_pid_alive(c, pager)) {
    if (pager > 0)
      snprintf(num, sizeof num, "%d", (int)pager);
    swap_die("no pager serves %s (pid %s has ended): '" SWAP_ME
             " status --name %s' says what the device waits for",
             dev, num, n);
  }
  if (!swap_pid_alive(c, keeper)) {
    if (keeper > 0)
      snprintf(num, sizeof num, "%d", (int)keeper);
    swap_die(
      "the keeper (pid %s) is not running, and the handover needs it to record the new "
      "pager and start its standby: nothing was changed",
      num);
  }
  check_state_layout(c);
  swap_with_standby_lock(c, standby_replace);
  pid_t standby = (pid_t)swap_state_num(c, "standby_pid");
  swap_state_get(c, "standby_log", log, sizeof log);
  say("a standby (pid %d) on the installed binary stands by; handing %s over to it: SIGKILL "
      "to the serving pager (pid %d)",
      (int)standby, dev, (int)pager);
  long t0 = now_ms();
  hand_over(c, pager);
  for (int i = 0; i < 3000 && !keeper_took(c, standby); i++) {
    swap_sleep_ms(100);
  }
  if (!keeper_took(c, standby))
    swap_die("the standby (pid %d) did not take %s over within 300 s: its log (%s) ends: %s",
             (int)standby, dev, log, file_tail(log, 3, tail, sizeof tail));
  swap_notified_status(c, standby, "took over ", how, sizeof how);
  say("pid %d serves %s on the installed binary (it took over %s); its standby is pid %ld, "
      "%ld ms after the handover",
      (int)standby, dev, how, swap_state_num(c, "standby_pid"), now_ms() - t0);
}

int swap_reload(const struct swap_context *c)
{
  char control[2400], found[4096];
  struct stat st;
  if (!swap_state_exists(c))
    swap_die("'%s' is off: nothing to reload", c->set.name);
  swap_state_path(c, "control", control, sizeof control);
  if (stat(control, &st) != 0 || !S_ISSOCK(st.st_mode))
    swap_die("'%s' has no control socket (%s): it was started by a rampart-swap without one, "
             "or with control= pointing elsewhere",
             c->set.name, control);
  if (!swap_find_program(c->prog.rampartctl, found, sizeof found))
    swap_die("rampartctl is not on PATH");
  char *argv[] = { found, "device", control, "reload", NULL };
  execv(found, argv);
  swap_die("cannot run %s: %s", found, strerror(errno));
}
