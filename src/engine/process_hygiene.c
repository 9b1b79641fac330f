/* What a process serving swap must do so the kernel can page through it: never be
 * paged out itself, never be throttled by the reclaim it is serving, and be the last
 * one the OOM killer picks. Shared by every frontend (nbdkit plugin, ublk target).
 * Each step is best effort with a warning, so an unprivileged RAM disk still works.
 *
 * It also holds the cluster and page keys and every page the host swaps out, so it is
 * made non-dumpable first (docs/security.md): no core file, and no ptrace or /proc/PID/mem
 * from other processes of the same user. That step must not fail silently. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "log.h"
#include "rampart.h"

/* The stack of a thread created after the process is locked (see lock_memory_now). */
#define RAMPART_THREAD_STACK ((size_t)1 << 20)

#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#endif

/* Locks the process's memory without faulting in what it never uses. MCL_CURRENT alone
 * makes every page of every mapping resident, zero-filled (bss) segments the host program
 * never touches included (nbdkit's own binary has a large one): a daemon must lock no
 * more than it uses, or a small machine cannot lock it at all (docs/performance.md,
 * "Figures from the code"). So:
 *  - what is mapped now is locked as it is touched (MCL_ONFAULT): what is resident now
 *    at once, untouched bss and heap never;
 *  - the code and read-only data of the program and its libraries (file mappings) are
 *    faulted in and locked now, as MCL_CURRENT did: an instruction of the swap path must
 *    never wait for a disk read during a swap-out;
 *  - what is mapped from now on (the engine's page pools, the page map, thread stacks)
 *    is populated and locked when it is mapped (MCL_FUTURE without MCL_ONFAULT), so the
 *    engine allocates nothing while it serves a swap-out;
 *  - so threads created from now on get a 1 MiB stack, not RLIMIT_STACK's 8 MiB: each
 *    stack is populated whole, and nbdkit starts 16 workers per connection (128 MiB
 *    locked, enough to get nbdkit OOM-killed on a small machine before its swap is
 *    on), and every reconnect attempt is a thread that would map
 *    8 MiB during an outage, under the very shortage being relieved. Nothing on the swap
 *    path keeps more than a few pages on its stack.
 * Returns 0, or -1 with errno from the first mlockall that failed. */
static int lock_memory_now(void)
{
  if (mlockall(MCL_CURRENT | MCL_ONFAULT) < 0)
    return -1;
  FILE *maps = fopen("/proc/self/maps", "re");
  if (maps) {
    char line[4352];
    while (fgets(line, sizeof line, maps)) {
      uintptr_t start, end;
      char perms[8];
      unsigned long long inode;
      int path_at = 0;
      if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %*s %*s %llu %n", &start, &end, perms,
                 &inode, &path_at) < 4)
        continue;
      /* A file's mapping, readable or executable; [vdso] and friends have no inode. */
      if (inode == 0 || line[path_at] != '/' || (perms[0] != 'r' && perms[2] != 'x'))
        continue;
      /* Best effort: a mapping that cannot be populated stays locked on fault. */
      (void)mlock((void *)start, end - start);
    }
    fclose(maps);
  }
  /* Without MCL_CURRENT this changes only what later mappings get. */
  if (mlockall(MCL_FUTURE) < 0)
    return -1;
  pthread_attr_t attr;
  size_t stack = 0;
  if (pthread_getattr_default_np(&attr) == 0) {
    if (pthread_attr_getstacksize(&attr, &stack) == 0 && stack > RAMPART_THREAD_STACK &&
        pthread_attr_setstacksize(&attr, RAMPART_THREAD_STACK) == 0)
      pthread_setattr_default_np(&attr);
    pthread_attr_destroy(&attr);
  }
  return 0;
}

int rampart_process_harden(bool lock_memory)
{
  int failures = 0;
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
    rp_log(RP_LOG_WARN,
           "PR_SET_DUMPABLE 0 failed (%s): a core dump of this process could "
           "hold keys and swapped pages; disable core dumps for it (ulimit -c 0)",
           strerror(errno));
    failures++;
  }
  if (lock_memory && lock_memory_now() < 0) {
    rp_log(RP_LOG_WARN,
           "mlockall failed (%s): this process could be swapped out while "
           "serving swap; run as root or raise RLIMIT_MEMLOCK",
           strerror(errno));
    failures++;
  }
  /* Marks us as part of the I/O path, so our allocations do not recurse into reclaim. */
  if (prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) < 0) {
    rp_log(RP_LOG_WARN, "PR_SET_IO_FLUSHER failed (%s): needs CAP_SYS_RESOURCE",
           strerror(errno));
    failures++;
  }
  /* A realtime task may allocate a quarter of the way below the min watermark, where
   * everything else waits in reclaim (the page allocator's ALLOC_HARDER, in 6.3 and
   * later ALLOC_MIN_RESERVE, half of it). The daemon's few kernel allocations on the swap
   * path (the reply to a read on nbd's unix socket is a fresh page; skb heads for its
   * sends) then come from a band the swapping workload cannot empty, where they are
   * given back as soon as the kernel has consumed them. The lowest priority:
   * only its class matters here. Threads created from now on inherit it. */
  struct sched_param rt = { .sched_priority = 1 };
  if (sched_setscheduler(0, SCHED_RR, &rt) < 0) {
    rp_log(RP_LOG_WARN,
           "SCHED_RR failed (%s): without a realtime class the daemon's own "
           "kernel allocations wait with everyone else's below the min watermark, where a "
           "host swapping through it can deadlock; needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1",
           strerror(errno));
    failures++;
  }
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "-900", 4) != 4) {
    rp_log(RP_LOG_WARN, "cannot lower the OOM score: the OOM killer may pick the swap "
                        "daemon first");
    failures++;
  }
  if (fd >= 0)
    close(fd);
  return failures ? -1 : 0;
}

void rampart_block_stop_signals(sigset_t *stop_signals)
{
  sigemptyset(stop_signals);
  sigaddset(stop_signals, SIGTERM);
  sigaddset(stop_signals, SIGINT);
  sigaddset(stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, stop_signals, NULL);
}
