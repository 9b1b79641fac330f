/* The standby and its keeper (standby_keeper.h). */
#include "standby_keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_spawn.h"
#include "pager_command.h"
#include "proc_identity.h"
#include "swap_context.h"
#include "swap_state.h"

/* The longest wait between two tries at a standby that does not start. */
#define STANDBY_RETRY_MAX 60

void swap_start_standby(const struct swap_context *c)
{
  char fe[32], sock[2400], tag[64], log[2400], what[128];
  struct arg_list a = { 0 };
  swap_state_set(c, "standby_pid", "%s", "");
  swap_state_get(c, "frontend", fe, sizeof fe);
  long gen = swap_state_num(c, "generation") + 1;
  swap_state_set(c, "generation", "%ld", gen);
  if (strcmp(fe, "ublk") == 0) {
    snprintf(tag, sizeof tag, "ublk-%ld", gen);
    pager_ublk_command(c, "standby=true", &a);
  } else {
    snprintf(tag, sizeof tag, "nbdkit-%ld", gen);
    /* The socket the dead pager had: rampart-nbd-attach tries its sockets in turn from the
     * one in use, so two paths, served alternately, are all it needs. */
    swap_state_get(c, "free_sock", sock, sizeof sock);
    unlink(sock);
    pager_nbd_command(c, sock, "standby=true", &a);
    swap_state_set(c, "standby_sock", "%s", sock);
  }
  pid_t pid = swap_spawn(c, tag, (const char *const *)a.v, pager_preload(c));
  arg_free(&a);
  swap_state_set(c, "standby_pid", "%d", (int)pid);
  snprintf(tag + strlen(tag), sizeof tag - strlen(tag), ".log");
  swap_state_set(c, "standby_log", "%s", swap_state_path(c, tag, log, sizeof log));
  snprintf(what, sizeof what, "the standby (pid %d) did not stand by", (int)pid);
  swap_wait_notified(c, pid, "RAMPART_STANDBY=1", 60, what);
}

bool swap_try_start_standby(const struct swap_context *c)
{
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  if (child < 0)
    return false;
  if (child == 0) {
    swap_start_standby(c);
    fflush(stdout);
    _exit(0);
  }
  int status;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR)
    ;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool swap_with_standby_lock(const struct swap_context *c,
                            bool (*fn)(const struct swap_context *))
{
  char path[2400];
  int fd = open(swap_state_path(c, "standby.lock", path, sizeof path),
                O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || flock(fd, LOCK_EX) < 0) {
    warn("cannot lock %s: %s", path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return false;
  }
  bool ok = fn(c);
  close(fd);
  return ok;
}

/* Under the lock: starts a standby if the one recorded is not alive. */
static bool standby_restart(const struct swap_context *c)
{
  pid_t standby = (pid_t)swap_state_num(c, "standby_pid");
  pid_t pager = (pid_t)swap_state_num(c, "pager_pid");
  if (swap_pid_alive(c, standby))
    return true;
  swap_pid_ours(c, standby, "the standby"); /* says so when its pid is another's now */
  char ended[64] = "";
  if (standby > 0)
    snprintf(ended, sizeof ended, "pid %d has ended; ", (int)standby);
  say("the pager (pid %d) has no standby (%sa crash of it is not survived now): starting one",
      (int)pager, ended);
  if (!swap_try_start_standby(c))
    return false;
  say("a new standby (pid %ld) stands by for pid %d", swap_state_num(c, "standby_pid"),
      (int)pager);
  return true;
}

static long now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec;
}

/* Sleeps a second, or less when the pager or the standby ends meanwhile. */
static void wait_round(const struct swap_context *c, pid_t pager, pid_t standby)
{
  struct pollfd p[2] = { { .fd = swap_pidfd(c, pager), .events = POLLIN },
                         { .fd = swap_pidfd(c, standby), .events = POLLIN } };
  if (poll(p, 2, 1000) > 0) {
    struct timespec settle = { 0, 50 * 1000000L }; /* the takeover's message follows */
    nanosleep(&settle, NULL);
  }
  for (int i = 0; i < 2; i++)
    if (p[i].fd >= 0)
      close(p[i].fd);
}

/* The standby took the device over: it is the pager now. */
static void record_takeover(const struct swap_context *c, pid_t pager, pid_t standby)
{
  char how[512], sock[2400];
  swap_notified_status(c, standby, "took over ", how, sizeof how);
  say("the pager (pid %d) died; its standby (pid %d) took the device over: %s", (int)pager,
      (int)standby, how);
  swap_state_set(c, "pager_pid", "%d", (int)standby);
  swap_state_set(c, "standby_pid", "%s", "");
  char fe[32];
  swap_state_get(c, "frontend", fe, sizeof fe);
  if (strcmp(fe, "nbd") == 0) {
    swap_state_get(c, "pager_sock", sock, sizeof sock);
    swap_state_set(c, "free_sock", "%s", sock);
    swap_state_get(c, "standby_sock", sock, sizeof sock);
    swap_state_set(c, "pager_sock", "%s", sock);
  }
  swap_state_set(c, "takeovers", "%ld", swap_state_num(c, "takeovers") + 1);
}

int swap_keep_standby(const struct swap_context *c)
{
  if (!swap_state_exists(c))
    swap_die("'%s' is off: there is nothing to keep", c->set.name);
  /* Only the keeper and 'upgrade' (under the lock) change the pids once 'on' is done. */
  pid_t pager = (pid_t)swap_state_num(c, "pager_pid");
  pid_t standby = (pid_t)swap_state_num(c, "standby_pid");
  long retry_delay = 5, retry_at = 0;
  for (;;) {
    wait_round(c, pager, standby);
    if (!swap_state_exists(c))
      return 0;
    if (swap_pid_alive(c, pager)) {
      if (swap_pid_alive(c, standby) || now_s() < retry_at)
        continue;
      if (swap_with_standby_lock(c, standby_restart)) {
        retry_delay = 5;
        standby = (pid_t)swap_state_num(c, "standby_pid");
      } else {
        say("could not start a standby (above): trying again in %ld s", retry_delay);
        retry_at = now_s() + retry_delay;
        retry_delay = retry_delay * 2 > STANDBY_RETRY_MAX ? STANDBY_RETRY_MAX
                                                          : retry_delay * 2;
      }
      continue;
    }
    standby = (pid_t)swap_state_num(c, "standby_pid");
    if (swap_pid_alive(c, standby) && swap_notified(c, standby, "RAMPART_TOOK_OVER=1")) {
      record_takeover(c, pager, standby);
      pager = standby;
      standby = 0;
      retry_at = 0; /* the next round starts the new pager's standby */
      retry_delay = 5;
    } else if (!swap_pid_alive(c, standby)) {
      swap_pid_ours(c, pager, "the pager"); /* says so when its pid is another's now */
      swap_pid_ours(c, standby, "the standby");
      say("the pager (pid %d) died and no standby took over: the device waits for a daemon. "
          "Start one with the same state= ('" SWAP_ME " status --name %s' shows it)",
          (int)pager, c->set.name);
      return 1;
    }
  }
}
