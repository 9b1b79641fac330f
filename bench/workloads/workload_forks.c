/* forks: many processes, each paging its own memory. The parent forks FORKS children at
 * once; each takes 1/FORKS of --size and runs the pages check on it (every word of every
 * page written from a seed of its own, then read back in a scattered order), so that the
 * kernel swaps many address spaces at a time while it also has to find memory for new
 * processes (page tables, stacks, copy-on-write of the parent). The run verifies when
 * every child exits verified; a child killed (the OOM killer) or wrong fails it. */
#include "workload.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

enum { FORKS = 16, PAGE = 4096 };

int workload_forks(uint64_t size, uint64_t seed, struct workload_result *result)
{
  uint64_t slice = size / FORKS / PAGE * PAGE;
  if (slice < 2 * PAGE) {
    snprintf(result->detail, sizeof result->detail, "--size must be at least %d bytes",
             2 * PAGE * FORKS);
    return -1;
  }
  pid_t pids[FORKS];
  int started = 0;
  for (; started < FORKS; started++) {
    pid_t pid = fork();
    if (pid < 0) {
      snprintf(result->detail, sizeof result->detail, "fork of child %d failed: %s", started,
               strerror(errno));
      break;
    }
    if (pid == 0) {
      struct workload_result mine = { 0 };
      /* Each child's own seed, so that a page of one child showing up in another's
       * address space fails the check too. */
      int r = workload_pages(slice, workload_hash(seed, 0xf0f5, (uint64_t)started), &mine);
      if (r == 0 && !mine.verified)
        fprintf(stderr, "rampart-workload: forks: child %d: %s\n", started, mine.detail);
      _exit(r < 0 ? 2 : mine.verified ? 0 : 1);
    }
    pids[started] = pid;
  }
  int bad = started < FORKS, first_bad = -1, first_status = 0;
  for (int i = 0; i < started; i++) {
    int status;
    while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR)
      ;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && bad++ == 0) {
      first_bad = i;
      first_status = status;
    }
  }
  result->used_bytes = slice * (uint64_t)started;
  result->verified = bad == 0;
  if (started < FORKS)
    return 0; /* detail says which fork failed */
  if (first_bad >= 0) {
    if (WIFSIGNALED(first_status))
      snprintf(result->detail, sizeof result->detail,
               "%d of %d children failed (first: child %d, killed by signal %d)", bad, FORKS,
               first_bad, WTERMSIG(first_status));
    else
      snprintf(result->detail, sizeof result->detail,
               "%d of %d children failed (first: child %d, exit status %d: 1 is a page read "
               "back wrong, 2 no memory)",
               bad, FORKS, first_bad, WEXITSTATUS(first_status));
  }
  return 0;
}
