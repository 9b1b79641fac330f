/* rampart_process_harden (src/process_hygiene.c), which the nbdkit plugin runs after
 * nbdkit forks: the process that holds the keys and every swapped page must not be
 * dumpable (issue 14). Checked in a child, since hardening changes the process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
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

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_harden_makes_the_process_not_dumpable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
