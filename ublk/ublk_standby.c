/* The standby's wait (ublk_standby.h). */
#include "ublk_standby.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <malloc.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define QUIESCE_WAIT_MS 10000u

static uint64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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

void ublk_standby_pin_file(const char *path)
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

int ublk_standby_wait(struct ublk_control *c, int dev_id, size_t reserve_bytes, char *err,
                      size_t errlen)
{
  int r = ublk_control_get_info(c, dev_id);
  if (r < 0) {
    snprintf(err, errlen, "--standby: there is no ublk device %d to stand by for (%s): "
             "start the serving daemon first", dev_id, strerror(-r));
    return -1;
  }
  if (!(c->info.flags & UBLK_F_USER_RECOVERY)) {
    snprintf(err, errlen, "--standby: /dev/ublkb%d was added without recovery: its daemon "
             "must have state= for a standby to take it over", dev_id);
    return -1;
  }
  pid_t serving = c->info.ublksrv_pid;
  int pidfd = (int)syscall(SYS_pidfd_open, serving, 0);
  if (pidfd < 0) {
    snprintf(err, errlen, "--standby: cannot watch the serving daemon (pid %d): %s", serving,
             strerror(errno));
    return -1;
  }
  keep_a_warm_heap(reserve_bytes / 2);
  void *reserve = mmap(NULL, reserve_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE | MAP_LOCKED, -1, 0);
  fprintf(stderr, "rampart-ublk: standing by for /dev/ublkb%d (serving daemon pid %d), "
          "%zu MiB held in reserve\n", dev_id, serving, reserve_bytes >> 20);
  struct pollfd p = { .fd = pidfd, .events = POLLIN };
  while (poll(&p, 1, -1) < 0 && errno == EINTR)
    ;
  close(pidfd);
  /* Given back first: the engine and the queues are about to need memory, and every
   * other task that wants some is waiting on the device this process will serve. */
  if (reserve != MAP_FAILED)
    munmap(reserve, reserve_bytes);
  uint64_t start = now_ms();
  for (;;) {
    r = ublk_control_get_info(c, dev_id);
    if (r == -ENODEV || r == -ENOENT)
      return 0; /* stopped and deleted: nothing to take over */
    if (r == 0 && c->info.state == UBLK_S_DEV_QUIESCED)
      return 1;
    if (now_ms() - start > QUIESCE_WAIT_MS) {
      snprintf(err, errlen, "--standby: /dev/ublkb%d did not wait for a daemon within %u s "
               "of pid %d's end (state %d)", dev_id, QUIESCE_WAIT_MS / 1000, serving,
               r == 0 ? c->info.state : r);
      return -1;
    }
    usleep(10000);
  }
}
