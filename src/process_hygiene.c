/* What a process serving swap must do so the kernel can page through it: never be
 * paged out itself, never be throttled by the reclaim it is serving, and be the last
 * one the OOM killer picks. Shared by every frontend (nbdkit plugin, ublk target).
 * Each step is best effort with a warning, so an unprivileged RAM disk still works.
 *
 * It also holds the cluster and page keys and every page the host swaps out, so it is
 * made non-dumpable first (issue 14): no core file, and no ptrace or /proc/PID/mem
 * from other processes of the same user. That step must not fail silently. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "log.h"
#include "rampart.h"

#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#endif

int rampart_process_harden(bool lock_memory)
{
  int failures = 0;
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
    rp_log(RP_LOG_WARN, "PR_SET_DUMPABLE 0 failed (%s): a core dump of this process could "
           "hold keys and swapped pages; disable core dumps for it (ulimit -c 0)",
           strerror(errno));
    failures++;
  }
  if (lock_memory && mlockall(MCL_CURRENT | MCL_FUTURE) < 0) {
    rp_log(RP_LOG_WARN, "mlockall failed (%s): this process could be swapped out while "
           "serving swap; run as root or raise RLIMIT_MEMLOCK", strerror(errno));
    failures++;
  }
  /* Marks us as part of the I/O path, so our allocations do not recurse into reclaim. */
  if (prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) < 0) {
    rp_log(RP_LOG_WARN, "PR_SET_IO_FLUSHER failed (%s): needs CAP_SYS_RESOURCE",
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
