/* 'status' (swap_status.h). */
#include "swap_status.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "program_run.h"
#include "proc_identity.h"
#include "swap_context.h"
#include "swap_off.h"
#include "swap_state.h"

/* The state segment named by the anchor file is there (so a standby has something to take
 * over): "segment N, M MiB" into buf, or why not. */
static bool segment_of(const char *anchor, char *buf, size_t buflen)
{
  FILE *f = fopen(anchor, "re");
  char line[512];
  long id = -1;
  if (!f) {
    snprintf(buf, buflen, "no state file %s", anchor);
    return false;
  }
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "segment ", 8) == 0)
      id = atol(line + 8);
  fclose(f);
  f = fopen("/proc/sysvipc/shm", "re");
  long key, shmid, perms, size;
  bool found = false;
  if (f && fgets(line, sizeof line, f)) {
    while (!found && fscanf(f, "%ld %ld %lo %ld %*[^\n]\n", &key, &shmid, &perms, &size) == 4)
      found = id >= 0 && shmid == id;
  }
  if (f)
    fclose(f);
  if (found)
    snprintf(buf, buflen, "segment %ld, %ld MiB", id, size / 1048576);
  else if (id >= 0)
    snprintf(buf, buflen, "the segment %ld that %s names is gone", id, anchor);
  else
    snprintf(buf, buflen, "the segment ? that %s names is gone", anchor);
  return found;
}

static void print_serving(const struct swap_context *c, pid_t pager)
{
  char comm[64] = "", path[64], mem[128], start[32];
  if (swap_pid_alive(c, pager)) {
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pager);
    FILE *f = fopen(path, "re");
    if (f && fgets(comm, sizeof comm, f))
      comm[strcspn(comm, "\n")] = '\0';
    if (f)
      fclose(f);
    printf("  serving: pid %d (%s), %s\n", (int)pager, comm,
           proc_memory(pager, mem, sizeof mem));
  } else if (proc_start_time(pager, start, sizeof start)) {
    printf("  serving: none (pid %d has ended, and is now another process, which is left "
           "alone): the device waits for a daemon\n",
           (int)pager);
  } else {
    printf("  serving: none (pid %d has ended): the device waits for a daemon\n", (int)pager);
  }
}

static const char *pid_or_unknown(long pid, char *buf, size_t buflen)
{
  if (pid > 0)
    snprintf(buf, buflen, "%ld", pid);
  else
    snprintf(buf, buflen, "?");
  return buf;
}

static void print_recovery(const struct swap_context *c, const char *fe)
{
  char mem[128], anchor[2400] = "", seg[2600], num[32];
  pid_t standby = (pid_t)swap_state_num(c, "standby_pid");
  if (swap_pid_alive(c, standby))
    printf("  standby: pid %d, %s (its cost: a kill of the serving pager is taken over by "
           "it)\n",
           (int)standby, proc_memory(standby, mem, sizeof mem));
  else
    printf("  standby: none: a crash of the serving pager is not survived now\n");
  swap_state_get(c, "pager_state", anchor, sizeof anchor);
  if (segment_of(anchor, seg, sizeof seg))
    printf("  state: %s (%s): recoverable\n", anchor, seg);
  else
    printf("  state: %s: not recoverable\n", seg);
  printf("  takeovers: %ld\n", swap_state_num(c, "takeovers"));
  pid_t keeper = (pid_t)swap_state_num(c, "keeper_pid");
  if (swap_pid_alive(c, keeper))
    printf("  keeper: pid %d (records a takeover and starts the next standby)\n",
           (int)keeper);
  else
    printf("  keeper: none (pid %s has ended): no standby follows a takeover; '" SWAP_ME
           " off' and '" SWAP_ME " on' start one\n",
           pid_or_unknown(keeper, num, sizeof num));
  pid_t notify = (pid_t)swap_state_num(c, "notify_pid");
  if (!swap_pid_alive(c, notify))
    printf(
      "  notify listener: none (pid %s has ended): a takeover is not recorded now; '" SWAP_ME
      " off' and '" SWAP_ME " on' start one\n",
      pid_or_unknown(notify, num, sizeof num));
  if (strcmp(fe, "ublk") == 0)
    printf("  queues: %ld of depth %ld\n", swap_state_num(c, "queues"),
           swap_state_num(c, "depth"));
  if (strcmp(fe, "nbd") == 0)
    printf("  attached by: rampart-nbd-attach pid %ld\n", swap_state_num(c, "attach_pid"));
}

static void print_left_alone(const char *value, void *arg)
{
  (void)arg;
  printf("  left alone: pid %s\n", value);
}

static void print_swaps(const char *dev)
{
  FILE *f = fopen("/proc/swaps", "re");
  char line[1024], name[1024];
  for (int n = 0; f && fgets(line, sizeof line, f); n++)
    if (n == 0 || (sscanf(line, "%1023s", name) == 1 && strcmp(name, dev) == 0))
      fputs(line, stdout);
  if (f)
    fclose(f);
}

/* The engine's figures and servers, from rampartctl. */
static void print_engine(const struct swap_context *c)
{
  char stats[2400], control[2400], found[4096];
  struct stat st;
  swap_state_path(c, "stats", stats, sizeof stats);
  swap_state_path(c, "control", control, sizeof control);
  if (access(stats, R_OK) != 0 || !swap_find_program(c->prog.rampartctl, found, sizeof found))
    return;
  fflush(stdout);
  const char *device[] = { c->prog.rampartctl, "device", stats, NULL };
  run_program(device, NULL);
  if (stat(control, &st) == 0 && S_ISSOCK(st.st_mode)) {
    const char *servers[] = { c->prog.rampartctl, "device", control, "servers", NULL };
    run_program(servers, NULL);
  }
}

int swap_status(const struct swap_context *c)
{
  if (!swap_state_exists(c)) {
    printf(SWAP_ME ": '%s' is off\n", c->set.name);
    return SWAP_EXIT_OFF;
  }
  char dev[4096] = "", fe[32] = "";
  swap_state_get(c, "device", dev, sizeof dev);
  swap_state_get(c, "frontend", fe, sizeof fe);
  printf(SWAP_ME ": '%s' is on: %s via %s\n", c->set.name, dev, fe);
  print_serving(c, (pid_t)swap_state_num(c, "pager_pid"));
  if (strcmp(fe, "ublk") == 0 || strcmp(fe, "nbd") == 0)
    print_recovery(c, fe);
  else
    printf("  standby: none (%s has no recoverable state: a crash of the pager is not "
           "survived)\n",
           fe);
  swap_state_each(c, "left_alone", print_left_alone, NULL);
  long used = swap_used_kib(dev);
  if (used < 0)
    used = 0;
  printf("  pages out: %ld (%ld MiB)\n", used / 4, (used + 1023) / 1024);
  print_swaps(dev);
  print_engine(c);
  fflush(stdout);
  return 0;
}
