/* rampart_process_harden (src/engine/process_hygiene.c), which the nbdkit plugin runs after
 * nbdkit forks: the process that holds the keys and every swapped page must not be
 * dumpable (docs/security.md). Checked in a child, since hardening changes the process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rampart.h"

static void test_harden_makes_the_process_not_dumpable(void **state)
{
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 1)
      _exit(2); /* the test would prove nothing */
    rampart_process_harden(false);
    _exit(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : 1);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* Under AddressSanitizer the process maps terabytes of shadow memory, which mlockall
 * cannot lock (the plugin runs with mlock=false in that build too): what is locked is
 * checked in the release build only, and the sanitizer build does not list the case
 * rather than report a skip that could never become a pass there. */
#if defined(__SANITIZE_ADDRESS__)
#define RP_CAN_LOCK_MEMORY 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RP_CAN_LOCK_MEMORY 0
#endif
#endif
#ifndef RP_CAN_LOCK_MEMORY
#define RP_CAN_LOCK_MEMORY 1
#endif

#if RP_CAN_LOCK_MEMORY
static long status_kib(const char *field)
{
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':')
      sscanf(line + n + 1, "%ld", &v);
  if (f)
    fclose(f);
  return v;
}

/* nbdkit 1.32's binary carries a 192 MiB zero-filled segment it never touches; locking the
 * daemon must not fault that in (it locked 207 MB while idle, and cannot start in a
 * 192 MiB guest), while what the engine maps afterwards must be resident and locked at
 * once. Here 64 MiB of untouched memory stands in for the segment. */
static void test_harden_locks_what_is_used_not_what_is_mapped(void **state)
{
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    enum { UNTOUCHED = 64 << 20, LATER = 8 << 20 };
    char *idle = mmap(NULL, UNTOUCHED, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (idle == MAP_FAILED)
      _exit(3);
    idle[0] = 1; /* one page in use */
    if (rampart_process_harden(true) < 0 && status_kib("VmLck") == 0)
      _exit(4); /* no mlockall here (no CAP_IPC_LOCK, a small RLIMIT_MEMLOCK) */
    /* VmLck counts locked mappings whole, resident or not: what costs memory is VmRSS. */
    long after_harden = status_kib("VmRSS");
    char *later = mmap(NULL, LATER, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                       0);
    if (later == MAP_FAILED)
      _exit(3);
    long after_map = status_kib("VmRSS");
    fprintf(stderr,
            "VmRSS %ld KiB after harden with 64 MiB mapped, %ld KiB after mapping 8 MiB\n",
            after_harden, after_map);
    if (after_harden >= UNTOUCHED / 2 / 1024)
      _exit(1); /* the untouched mapping was faulted in */
    if (after_map - after_harden < LATER / 1024)
      _exit(2); /* a later mapping was not locked when mapped */
    /* Every later thread's stack is populated whole: 1 MiB, not RLIMIT_STACK's 8. */
    pthread_attr_t attr;
    size_t stack = 0;
    if (pthread_getattr_default_np(&attr) != 0 ||
        pthread_attr_getstacksize(&attr, &stack) != 0 || stack > (1 << 20))
      _exit(5);
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) == 4)
    skip();
  assert_int_equal(WEXITSTATUS(status), 0);
}
#endif

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_harden_makes_the_process_not_dumpable),
#if RP_CAN_LOCK_MEMORY
    cmocka_unit_test(test_harden_locks_what_is_used_not_what_is_mapped),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
