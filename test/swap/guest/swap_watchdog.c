/* rampart-swap-watchdog: the starved guest's watchdog (test_guest_starved.sh), a program
 * rather than a shell loop because it must outlive the hang it watches for: a watchdog
 * that can be swapped out waits on the very swap-in that never comes back, and prints
 * nothing. This one locks itself in memory
 * before it starts, reads everything into buffers it owns, and needs no page it has not
 * touched already.
 *
 *   rampart-swap-watchdog WORKLOAD-PID DAEMON-PID STALL-SECONDS [--poweroff]
 *
 * While WORKLOAD-PID lives it reads pswpin + pswpout every 5 s and prints a progress line
 * every 30 s. If they stand still for STALL-SECONDS it prints "rampart-guest: stall: ...",
 * what the daemon's threads are blocked in, the NBD device's queue, memory and the
 * daemon's own report (/tmp/stats), and exits 3; with --poweroff (the guest's /init
 * only: never on a host) it powers the machine off instead, so the host sees the failure
 * at once. Exits 0 when the workload ends; 2 on bad usage. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/reboot.h>
#include <unistd.h>

static char file_buffer[64 * 1024];

/* Reads path whole into file_buffer (NUL-terminated); returns its length or -1. */
static ssize_t read_file(const char *path)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  size_t len = 0;
  while (len < sizeof file_buffer - 1) {
    ssize_t n = read(fd, file_buffer + len, sizeof file_buffer - 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    len += (size_t)n;
  }
  close(fd);
  file_buffer[len] = '\0';
  return (ssize_t)len;
}

/* Value of "key N" lines in the text in file_buffer (/proc/vmstat's form), or 0. */
static unsigned long long keyed_value(const char *key)
{
  size_t klen = strlen(key);
  for (const char *line = file_buffer; *line;) {
    if (strncmp(line, key, klen) == 0 && line[klen] == ' ')
      return strtoull(line + klen + 1, NULL, 10);
    const char *next = strchr(line, '\n');
    if (!next)
      break;
    line = next + 1;
  }
  return 0;
}

static unsigned long long swaps_now(void)
{
  if (read_file("/proc/vmstat") < 0)
    return 0;
  return keyed_value("pswpin") + keyed_value("pswpout");
}

static unsigned long long meminfo_kib(const char *key)
{
  if (read_file("/proc/meminfo") < 0)
    return 0;
  char *at = strstr(file_buffer, key);
  return at ? strtoull(at + strlen(key), NULL, 10) : 0;
}

static void print_progress(unsigned long long swaps)
{
  unsigned long long free_kib = meminfo_kib("MemFree:");
  printf("rampart-guest: progress: %llu pages swapped, ", swaps);
  if (read_file("/proc/swaps") > 0) {
    /* Filename Type Size Used Priority: one line per swap device after the header. */
    char *line = strchr(file_buffer, '\n');
    while (line && line[1]) {
      line++;
      char name[128];
      unsigned long long size, used;
      if (sscanf(line, "%127s %*s %llu %llu", name, &size, &used) == 3)
        printf("%s %llu MiB ", name, used / 1024);
      line = strchr(line, '\n');
    }
  }
  printf("free %llu MiB\n", free_kib / 1024);
  fflush(stdout);
}

static void dump(const char *title, const char *path)
{
  printf("---- %s\n", title);
  if (read_file(path) < 0)
    printf("(cannot read %s: %s)\n", path, strerror(errno));
  else
    fputs(file_buffer, stdout);
  fflush(stdout);
}

/* What every thread of pid is blocked in: its name, state and kernel stack. */
static void dump_threads(const char *what, int pid)
{
  char path[96];
  snprintf(path, sizeof path, "/proc/%d/task", pid);
  DIR *dir = opendir(path);
  if (!dir) {
    printf("---- %s %d: gone\n", what, pid);
    return;
  }
  struct dirent *d;
  while ((d = readdir(dir))) {
    if (d->d_name[0] == '.')
      continue;
    char comm[64] = "?", title[160];
    snprintf(path, sizeof path, "/proc/%d/task/%.32s/comm", pid, d->d_name);
    if (read_file(path) > 0)
      snprintf(comm, sizeof comm, "%.*s", (int)strcspn(file_buffer, "\n"), file_buffer);
    snprintf(path, sizeof path, "/proc/%d/task/%.32s/stat", pid, d->d_name);
    char state = '?';
    if (read_file(path) > 0) {
      char *close_paren = strrchr(file_buffer, ')');
      if (close_paren && close_paren[1] == ' ')
        state = close_paren[2];
    }
    snprintf(title, sizeof title, "%s thread %.32s %s %c", what, d->d_name, comm, state);
    snprintf(path, sizeof path, "/proc/%d/task/%.32s/stack", pid, d->d_name);
    dump(title, path);
  }
  closedir(dir);
}

/* Every process whose command name is name (nbd-client's daemon, the workload's forks). */
static void dump_named(const char *name)
{
  DIR *dir = opendir("/proc");
  if (!dir)
    return;
  struct dirent *d;
  while ((d = readdir(dir))) {
    int pid = atoi(d->d_name);
    if (pid <= 0)
      continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", pid);
    if (read_file(path) > 0 && strncmp(file_buffer, name, strlen(name)) == 0)
      dump_threads(name, pid);
  }
  closedir(dir);
}

static void report_stall(int daemon_pid, unsigned long long swaps, unsigned still,
                         int poweroff)
{
  printf("rampart-guest: stall: pswpin+pswpout stuck at %llu for %u s\n", swaps, still);
  dump_threads("the swap daemon", daemon_pid);
  /* Every daemon by name too: after a kill -9 the one serving, or failing to take over,
   * is the standby, whose pid the watchdog was not given. */
  dump_named("rampart-ublk");
  dump_named("rampart-nbd-se");
  dump_named("nbdkit");
  dump_named("nbd-client");
  dump_named("rampart-workloa");
  dump("/sys/block/ublkb0/inflight", "/sys/block/ublkb0/inflight");
  dump("/sys/block/nbd0/inflight", "/sys/block/nbd0/inflight");
  dump("/sys/block/nbd0/stat", "/sys/block/nbd0/stat");
  dump("/sys/kernel/debug/nbd/nbd0/tasks", "/sys/kernel/debug/nbd/nbd0/tasks");
  dump("/proc/meminfo", "/proc/meminfo");
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", daemon_pid);
  dump("daemon status", path);
  dump("/tmp/stats (the daemon's report)", "/tmp/stats");
  fflush(stdout);
  if (!poweroff)
    exit(3);
  printf("rampart-guest: end stall\n");
  fflush(stdout);
  sync();
  reboot(RB_POWER_OFF);
  exit(3);
}

int main(int argc, char **argv)
{
  int poweroff = argc == 5 && strcmp(argv[4], "--poweroff") == 0;
  if ((argc != 4 && !poweroff) || atoi(argv[1]) <= 0 || atoi(argv[2]) <= 0 ||
      atoi(argv[3]) <= 0) {
    fprintf(stderr, "usage: rampart-swap-watchdog WORKLOAD-PID DAEMON-PID STALL-SECONDS "
                    "[--poweroff]\n");
    return 2;
  }
  int workload = atoi(argv[1]), daemon_pid = atoi(argv[2]);
  unsigned stall = (unsigned)atoi(argv[3]);
  /* stdout's buffer is allocated on first use: make that happen before the lock. */
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  printf("rampart-guest: watchdog on workload %d, daemon %d, stall after %u s\n", workload,
         daemon_pid, stall);
  fflush(stdout);
  if (mlockall(MCL_CURRENT | MCL_FUTURE) < 0)
    printf("rampart-guest: watchdog: mlockall failed (%s): it may hang with the guest\n",
           strerror(errno));
  unsigned long long last = swaps_now();
  unsigned still = 0, ticks = 0;
  while (kill(workload, 0) == 0) {
    sleep(5);
    unsigned long long now = swaps_now();
    if (++ticks % 6 == 0)
      print_progress(now);
    still = now == last ? still + 5 : 0;
    last = now;
    if (still >= stall)
      report_stall(daemon_pid, now, still, poweroff);
  }
  return 0;
}
