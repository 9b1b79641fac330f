/* A standby pager's wait (rampart.h, "A standby pager"): what it holds before the
 * serving pager dies, and how it learns that it did.
 *
 * Shared by rampart-ublk --standby, nbdkit rampart standby=true and rampart-nbd-server
 * --standby. Everything here is done while memory is plentiful, so that the takeover,
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

#include "state_segment.h"

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
  struct pollfd p[2] = { { .fd = pidfd, .events = POLLIN }, { .fd = sigfd, .events = POLLIN } };
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

int rampart_standby_find_pager(const char *state_path, unsigned wait_ms, pid_t *serving,
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

int rampart_standby_wait_for_state(const char *state_path, size_t reserve_bytes, char *err,
                                   size_t errlen)
{
  void *reserve = reserve_take(reserve_bytes);
  int r = state_segment_wait_for_pager_end(state_path, err, errlen);
  reserve_give_back(reserve, reserve_bytes);
  if (r != 0)
    return r;
  return access(state_path, F_OK) == 0 ? 0 : 2;
}

int rampart_standby_for_state(const char *who, const struct rampart_config *config,
                              size_t reserve_bytes, char *err, size_t errlen)
{
  pid_t serving;
  const char *state_path = rampart_config_state_path(config);
  if (!state_path) { /* the frontends refuse this with their own words first */
    snprintf(err, errlen, "a standby needs state=PATH");
    return -1;
  }
  const char *takeover_files[4];
  unsigned nfiles = rampart_config_takeover_files(config, takeover_files);
  rampart_warm_up();
  if (rampart_standby_find_pager(state_path, 10000, &serving, err, errlen) < 0)
    return -1;
  /* Pinned only now: the pager writes the state's anchor when it opens the state (a new
   * file renamed into place), and an anchor pinned before that is another file, whose
   * pages could be evicted: a standby would then wake and wait in read() of the anchor
   * for a page on the very device it is to take over. */
  for (unsigned i = 0; i < nfiles; i++)
    rampart_standby_pin_file(takeover_files[i]);
  fprintf(stderr, "%s: standing by for the pager serving %s (pid %d), %zu MiB held in "
          "reserve\n", who, state_path, (int)serving, reserve_bytes >> 20);
  switch (rampart_standby_wait_for_state(state_path, reserve_bytes, err, errlen)) {
  case 0:
    return 0;
  case 1:
    snprintf(err, errlen, "stopped while a pager still serves %s", state_path);
    return -1;
  case 2:
    snprintf(err, errlen, "the pager serving %s stopped cleanly and took its state with "
             "it: nothing to take over", state_path);
    return -1;
  default:
    return -1;
  }
}
