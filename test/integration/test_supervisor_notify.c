/* What a daemon tells its supervisor (rampart_notify, src/engine/supervisor_notify.c),
 * received by the real `rampartctl notify-listen`: each message's lines, under the pid
 * the kernel gives for the sender, never one the message claims; a STATUS cannot add a
 * line of its own; control bytes are printed as '?'; SIGTERM ends the listener and
 * removes its socket. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rampart.h"
#include "server_process.h"

static char dir[256], sock[512], out_path[512];
static pid_t listener;

static int setup(void **state)
{
  (void)state;
  const char *ctl = getenv("RAMPARTCTL");
  if (!ctl || !*ctl) {
    fprintf(stderr, "RAMPARTCTL is not set: run through ctest\n");
    return -1;
  }
  if (rp_test_tmpdir(dir, sizeof dir) < 0)
    return -1;
  snprintf(sock, sizeof sock, "%s/notify", dir);
  snprintf(out_path, sizeof out_path, "%s/notify.out", dir);
  listener = fork();
  if (listener == 0) {
    if (!freopen(out_path, "w", stdout))
      _exit(127);
    execl(ctl, ctl, "notify-listen", sock, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 100 && access(sock, F_OK) != 0; i++)
    usleep(50000);
  return access(sock, F_OK) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
  (void)state;
  if (listener > 0) {
    kill(listener, SIGKILL);
    waitpid(listener, NULL, 0);
  }
  rp_test_tmpdir_remove(dir);
  return 0;
}

/* The listener's output once it has printed `lines` lines (5 s at most). */
static const char *output(unsigned lines)
{
  static char text[8192];
  for (int i = 0; i < 100; i++) {
    FILE *f = fopen(out_path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
      fclose(f);
    text[n] = '\0';
    unsigned seen = 0;
    for (char *p = text; (p = strchr(p, '\n')); p++)
      seen++;
    if (seen >= lines)
      break;
    usleep(50000);
  }
  return text;
}

/* How many lines of text are exactly "PID LINE". */
static unsigned count_lines(const char *text, long pid, const char *line)
{
  char want[512];
  snprintf(want, sizeof want, "%ld %s\n", pid, line);
  unsigned n = 0;
  for (const char *p = text; (p = strstr(p, want)); p++)
    if (p == text || p[-1] == '\n')
      n++;
  return n;
}

static bool has_line(const char *text, long pid, const char *line)
{
  return count_lines(text, pid, line) > 0;
}

static void test_messages_arrive_under_the_kernels_pid(void **state)
{
  (void)state;
  pid_t daemon = fork();
  if (daemon == 0) {
    setenv("NOTIFY_SOCKET", sock, 1);
    int a = rampart_notify(RAMPART_NOTICE_STANDING_BY,
                           "/run/x/pager.state\nRAMPART_TOOK_OVER=1");
    int b = rampart_notify(RAMPART_NOTICE_TOOK_OVER, "/run/x/pager.state, 3 ms after");
    _exit(a == 0 && b == 0 ? 0 : 1);
  }
  int status;
  assert_int_equal(waitpid(daemon, &status, 0), daemon);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* Another process claims to be ready: it is named by its own pid. */
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  assert_true(strlen(sock) < sizeof a.sun_path);
  memcpy(a.sun_path, sock, strlen(sock) + 1);
  static const char claim[] = "READY=1\nMAINPID=1\nX=a\x01"
                              "b\nnot a setting";
  assert_true(sendto(fd, claim, sizeof claim - 1, 0, (struct sockaddr *)&a, sizeof a) > 0);
  close(fd);

  const char *text = output(8);
  print_message("%s", text);
  long d = (long)daemon, me = (long)getpid();
  assert_true(has_line(text, d, "READY=1"));
  assert_true(has_line(text, d, "RAMPART_STANDBY=1"));
  assert_true(
    has_line(text, d, "STATUS=standing by for /run/x/pager.state RAMPART_TOOK_OVER=1"));
  assert_true(has_line(text, d, "RAMPART_TOOK_OVER=1"));
  assert_true(has_line(text, d, "STATUS=took over /run/x/pager.state, 3 ms after"));
  assert_true(has_line(text, me, "READY=1"));
  assert_true(has_line(text, me, "X=a?b"));
  assert_false(has_line(text, d, "MAINPID=1"));
  assert_null(strstr(text, "not a setting"));
  /* One takeover was sent: the newline in the standby's STATUS made no second one. */
  assert_int_equal(count_lines(text, d, "RAMPART_TOOK_OVER=1"), 1);
}

static void test_no_socket_is_not_an_error_and_a_bad_one_is(void **state)
{
  (void)state;
  unsetenv("NOTIFY_SOCKET");
  assert_int_equal(rampart_notify(RAMPART_NOTICE_SERVING, "/dev/x"), 0);
  setenv("NOTIFY_SOCKET", "relative/path", 1);
  assert_int_equal(rampart_notify(RAMPART_NOTICE_SERVING, "/dev/x"), -1);
  char gone[600];
  snprintf(gone, sizeof gone, "%s/nobody", dir);
  setenv("NOTIFY_SOCKET", gone, 1);
  assert_int_equal(rampart_notify(RAMPART_NOTICE_SERVING, "/dev/x"), -1);
  unsetenv("NOTIFY_SOCKET");
}

static void test_sigterm_ends_the_listener_and_removes_its_socket(void **state)
{
  (void)state;
  assert_int_equal(kill(listener, SIGTERM), 0);
  int status;
  assert_int_equal(waitpid(listener, &status, 0), listener);
  listener = 0;
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_int_not_equal(access(sock, F_OK), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_messages_arrive_under_the_kernels_pid),
    cmocka_unit_test(test_no_socket_is_not_an_error_and_a_bad_one_is),
    cmocka_unit_test(test_sigterm_ends_the_listener_and_removes_its_socket),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
