/* A standby pager's wait (rampart.h, "A standby pager"): what it holds before the
 * serving pager dies, and how it learns that it did.
 *
 * Shared by rampart-ublk, nbdkit rampart and rampart-nbd-server with standby=true.
 * Everything here is done while memory is plentiful, so that the takeover,
 * which happens while every task that allocates is waiting on the device, finds its
 * memory, its files and its code already resident.
 */
#include "rampart.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "state_segment.h"

/* What a standby over state= holds to give back at takeover, a head start only: the
 * memory the takeover uses is what the dead pager's exit freed before the state's lock
 * woke this one. Held the whole time beside a serving pager, it is memory the machine
 * does not have, so it is kept small: larger reserves got a small guest's workload
 * OOM-killed (docs/performance.md, "Figures from the code"). */
#define STANDBY_RESERVE (2u << 20)

const char *rampart_state_layout(void)
{
  return state_segment_layout();
}

void rampart_standby_pin_file(const char *path)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return; /* the takeover says what is wrong with it, if it matters */
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p != MAP_FAILED)
      mlock(p, (size_t)st.st_size); /* never unmapped: the pin lasts the process */
  }
  close(fd);
}

/* The heap the takeover will use is grown now and kept: a freed block stays in this
 * process (locked, under mlockall) instead of going back to the kernel, so the engine's
 * allocations at takeover come from memory already ours. */
static void keep_a_warm_heap(size_t bytes)
{
  mallopt(M_TRIM_THRESHOLD, (int)(bytes * 2));
  mallopt(M_MMAP_THRESHOLD, (int)(bytes * 2));
  void *p = malloc(bytes);
  if (p) {
    memset(p, 0, bytes);
    free(p);
  }
}

/* Taken before the wait: the memory the takeover will use. */
static void *reserve_take(size_t bytes)
{
  keep_a_warm_heap(bytes / 2);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE | MAP_LOCKED, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* Given back first thing at takeover: the engine is about to need memory, and every
 * other task that wants some is waiting on the device this process will serve. */
static void reserve_give_back(void *p, size_t bytes)
{
  if (p)
    munmap(p, bytes);
}

/* A signalfd for the stop signals this thread has blocked (rampart-ublk takes them with
 * sigwait), so that a standby asked to stop hears it while it waits; -1 when none are
 * blocked (nbdkit handles them: the wait's poll or flock then ends with EINTR). */
static int stop_signals_fd(void)
{
  sigset_t blocked, stop;
  sigemptyset(&stop);
  pthread_sigmask(SIG_BLOCK, NULL, &blocked);
  int signals[] = { SIGTERM, SIGINT, SIGHUP };
  bool any = false;
  for (unsigned i = 0; i < sizeof signals / sizeof signals[0]; i++)
    if (sigismember(&blocked, signals[i])) {
      sigaddset(&stop, signals[i]);
      any = true;
    }
  return any ? signalfd(-1, &stop, SFD_CLOEXEC) : -1;
}

int rampart_standby_wait(pid_t serving, size_t reserve_bytes, char *err, size_t errlen)
{
  int pidfd = (int)syscall(SYS_pidfd_open, serving, 0);
  if (pidfd < 0 && errno == ESRCH)
    return 0; /* it died between being found and being watched */
  if (pidfd < 0) {
    snprintf(err, errlen, "cannot watch the serving pager (pid %d): %s", (int)serving,
             strerror(errno));
    return -1;
  }
  void *reserve = reserve_take(reserve_bytes);
  int sigfd = stop_signals_fd();
  /* A pidfd wakes its poller when the process ends, with nothing allocated on the way. */
  struct pollfd p[2] = { { .fd = pidfd, .events = POLLIN },
                         { .fd = sigfd, .events = POLLIN } };
  int r = poll(p, sigfd >= 0 ? 2 : 1, -1);
  bool signalled = sigfd >= 0 && (p[1].revents & POLLIN);
  bool stopped = r < 0 || signalled;
  if (signalled) {
    /* Taken here: left pending, it would stop the device right after a later takeover. */
    struct signalfd_siginfo info;
    ssize_t taken = read(sigfd, &info, sizeof info);
    (void)taken;
  }
  close(pidfd);
  if (sigfd >= 0)
    close(sigfd);
  reserve_give_back(reserve, reserve_bytes);
  return stopped ? 1 : 0;
}

static int standby_find_pager(const char *state_path, unsigned wait_ms, pid_t *serving,
                              char *err, size_t errlen)
{
  /* A standby started together with its pager may look before the pager has opened the
   * state (nbdkit binds its socket first, then opens the engine). */
  for (unsigned waited = 0;; waited += 100) {
    if (state_segment_serving_pid(state_path, serving, err, errlen) == 0)
      return 0;
    if (waited >= wait_ms)
      return -1;
    usleep(100000);
  }
}

/* Holds reserve_bytes locked (and half as much heap warm) and sleeps until the pager
 * serving state_path ends, on the state's lock (PATH.lock), so that of several standbys
 * one wakes. 0: it died. 1: a signal came first. 2: it stopped cleanly and took the
 * state with it. -1 with err. */
static int standby_wait_for_state(const char *state_path, size_t reserve_bytes, char *err,
                                  size_t errlen)
{
  void *reserve = reserve_take(reserve_bytes);
  int r = state_segment_wait_for_pager_end(state_path, err, errlen);
  reserve_give_back(reserve, reserve_bytes);
  if (r != 0)
    return r;
  return access(state_path, F_OK) == 0 ? 0 : 2;
}

/* The wait itself: 0 once the pager serving config's state= died; -1 with err. */
static int standby_for_state(const char *who, const struct rampart_config *config, char *err,
                             size_t errlen)
{
  pid_t serving;
  const char *state_path = rampart_config_state_path(config);
  if (!state_path) { /* rampart_frontend_switches_check refuses this first */
    snprintf(err, errlen, "a standby needs state=PATH");
    return -1;
  }
  const char *takeover_files[4];
  unsigned nfiles = rampart_config_takeover_files(config, takeover_files);
  rampart_warm_up();
  if (standby_find_pager(state_path, 10000, &serving, err, errlen) < 0)
    return -1;
  /* Pinned only now: the pager writes the state's anchor when it opens the state (a new
   * file renamed into place), and an anchor pinned before that is another file, whose
   * pages could be evicted: a standby would then wake and wait in read() of the anchor
   * for a page on the very device it is to take over. */
  for (unsigned i = 0; i < nfiles; i++)
    rampart_standby_pin_file(takeover_files[i]);
  fprintf(stderr,
          "%s: standing by for the pager serving %s (pid %d), %u MiB held in "
          "reserve\n",
          who, state_path, (int)serving, STANDBY_RESERVE >> 20);
  char what[300];
  snprintf(what, sizeof what, "%s (pid %d)", state_path, (int)serving);
  rampart_notify(RAMPART_NOTICE_STANDING_BY, what);
  switch (standby_wait_for_state(state_path, STANDBY_RESERVE, err, errlen)) {
  case 0:
    return 0;
  case 1:
    snprintf(err, errlen, "stopped while a pager still serves %s", state_path);
    return -1;
  case 2:
    snprintf(err, errlen,
             "the pager serving %s stopped cleanly and took its state with "
             "it: nothing to take over",
             state_path);
    return -1;
  default:
    return -1;
  }
}

struct rampart_engine *rampart_open_standby(const char *who,
                                            const struct rampart_config *config, char *err,
                                            size_t errlen)
{
  if (standby_for_state(who, config, err, errlen) < 0)
    return NULL;
  uint64_t died_ms = rp_now_ms();
  struct rampart_engine *engine = rampart_open(config, err, errlen);
  if (!engine)
    return NULL;
  const char *state_path = rampart_config_state_path(config);
  if (!rampart_took_over(engine)) {
    /* Its segment was gone (removed by hand): an empty device in place of the one that
     * died would hand the kernel zeros for every page it swapped out. */
    snprintf(err, errlen,
             "there was no state left at %s to take over: refusing to serve "
             "an empty device in place of the one that died",
             state_path);
    rampart_close(engine);
    return NULL;
  }
  unsigned long long ms = (unsigned long long)(rp_now_ms() - died_ms);
  fprintf(stderr, "%s: took %s over %llu ms after its pager died\n", who, state_path, ms);
  char what[300];
  snprintf(what, sizeof what, "%s, %llu ms after its pager died", state_path, ms);
  rampart_notify(RAMPART_NOTICE_TOOK_OVER, what);
  return engine;
}
