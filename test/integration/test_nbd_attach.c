/* rampart-nbd-attach's half that runs without a kernel NBD driver: the NBD handshake
 * against a real nbdkit (the size and flags it hands the driver, an export refused with
 * the server's own words), against peers that are not NBD servers, and what the program
 * says about bad options and a kernel without the driver (this host's). Its netlink half
 * attaches and moves /dev/nbd0 in a guest that has the driver (test_guest_starved.sh). */
#include <fcntl.h>
#include <arpa/inet.h>
#include <endian.h>
#include <linux/nbd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nbd_handshake.h"
#include "server_process.h"

static char out[16384];

struct nbdkit {
  char dir[512];
  char sock[600];
  pid_t pid;
};

/* nbdkit ARGS... on a unix socket in a fresh directory; waits for the socket. */
static void nbdkit_start(struct nbdkit *k, const char *const *args)
{
  assert_int_equal(rp_test_tmpdir(k->dir, sizeof k->dir), 0);
  snprintf(k->sock, sizeof k->sock, "%s/nbd.sock", k->dir);
  const char *argv[16] = { "nbdkit", "--foreground", "--exit-with-parent", "--unix",
                           k->sock };
  unsigned a = 5;
  for (unsigned i = 0; args[i] && a < 15; i++)
    argv[a++] = args[i];
  k->pid = fork();
  assert_true(k->pid >= 0);
  if (k->pid == 0) {
    execvp("nbdkit", (char *const *)argv);
    _exit(127);
  }
  struct stat st;
  for (unsigned waited = 0; stat(k->sock, &st) != 0; waited += 20) {
    if (waited > 15000)
      fail_msg("nbdkit did not create %s in 15 s", k->sock);
    usleep(20000);
  }
}

static void nbdkit_stop(struct nbdkit *k)
{
  kill(k->pid, SIGTERM);
  waitpid(k->pid, NULL, 0);
  rp_test_tmpdir_remove(k->dir);
}

static int connect_unix(const char *path)
{
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  struct timeval tv = { .tv_sec = 10 };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

static void test_handshake_gives_the_export_size_and_flags(void **state)
{
  (void)state;
  struct nbdkit k;
  const char *args[] = { "memory", "3M", NULL };
  nbdkit_start(&k, args);
  int fd = connect_unix(k.sock);
  struct nbd_export e = { 0 };
  char err[512] = "";
  int r = nbd_handshake(fd, "", &e, err, sizeof err);
  if (r < 0)
    fail_msg("handshake: %s", err);
  assert_int_equal(e.size, 3u << 20);
  assert_true(e.transmission_flags & NBD_FLAG_HAS_FLAGS);
  assert_true(e.transmission_flags & NBD_FLAG_SEND_FLUSH);
  assert_true(e.transmission_flags & NBD_FLAG_SEND_TRIM);
  assert_false(e.transmission_flags & NBD_FLAG_READ_ONLY);
  /* The socket is in the transmission phase: a read request is answered. */
  struct nbd_request req = { .magic = htonl(NBD_REQUEST_MAGIC),
                             .type = htonl(NBD_CMD_READ),
                             .len = htonl(4096) };
  req.from = htobe64(4096);
  assert_int_equal(write(fd, &req, sizeof req), (ssize_t)sizeof req);
  struct nbd_reply reply;
  assert_int_equal(read(fd, &reply, sizeof reply), (ssize_t)sizeof reply);
  assert_int_equal(ntohl(reply.magic), NBD_REPLY_MAGIC);
  assert_int_equal(ntohl(reply.error), 0);
  close(fd);
  nbdkit_stop(&k);
}

static void test_an_unknown_export_is_refused_in_the_servers_words(void **state)
{
  (void)state;
  struct nbdkit k;
  const char *args[] = { "--filter=exportname",    "memory", "1M", "exportname=swap",
                         "exportname-strict=true", NULL };
  nbdkit_start(&k, args);
  int fd = connect_unix(k.sock);
  struct nbd_export e = { 0 };
  char err[512] = "";
  assert_int_equal(nbd_handshake(fd, "other", &e, err, sizeof err), -1);
  print_message("%s\n", err);
  assert_non_null(strstr(err, "the server refused export 'other'"));
  close(fd);
  fd = connect_unix(k.sock);
  assert_int_equal(nbd_handshake(fd, "swap", &e, err, sizeof err), 0);
  assert_int_equal(e.size, 1u << 20);
  close(fd);
  nbdkit_stop(&k);
}

/* A peer that is not an NBD server, and one that hangs up: an error naming it, no hang. */
static void test_a_peer_that_is_not_nbd_is_named(void **state)
{
  (void)state;
  int sv[2];
  struct nbd_export e;
  char err[512] = "";
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const char http[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
  assert_int_equal(write(sv[1], http, sizeof http - 1), (ssize_t)sizeof http - 1);
  assert_int_equal(nbd_handshake(sv[0], "", &e, err, sizeof err), -1);
  assert_non_null(strstr(err, "not an NBD server"));
  close(sv[0]);
  close(sv[1]);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  close(sv[1]);
  assert_int_equal(nbd_handshake(sv[0], "", &e, err, sizeof err), -1);
  assert_non_null(strstr(err, "no NBD greeting"));
  close(sv[0]);
}

static int attach(const char *a1, const char *a2, const char *a3)
{
  const char *argv[] = { getenv("RAMPART_NBD_ATTACH"), a1, a2, a3, NULL };
  if (!argv[0])
    fail_msg("RAMPART_NBD_ATTACH is not set: run the tests through ctest");
  int status = rp_test_run_program(argv, out, sizeof out, 30000);
  print_message("$ rampart-nbd-attach %s %s %s\n%s", a1 ? a1 : "", a2 ? a2 : "", a3 ? a3 : "",
                out);
  assert_true(status != -1 && WIFEXITED(status));
  return WEXITSTATUS(status);
}

static void test_bad_options_say_what_to_give(void **state)
{
  (void)state;
  assert_int_equal(attach(NULL, NULL, NULL), 2);
  assert_non_null(strstr(out, "name the nbdkit's unix socket"));
  assert_int_equal(attach("--timeout", "soon", "/run/nbd.sock"), 2);
  assert_non_null(strstr(out, "--timeout soon is not a number of seconds"));
  assert_int_equal(attach("--device", "/dev/sda", "/run/nbd.sock"), 2);
  assert_non_null(strstr(out, "--device /dev/sda is not /dev/nbdN"));
  const char *connections[] = { "0", "17", "two", "-1", "2x" };
  for (size_t i = 0; i < sizeof connections / sizeof connections[0]; i++) {
    char want[64];
    snprintf(want, sizeof want, "--connections %s is not a number from 1 to 16",
             connections[i]);
    assert_int_equal(attach("--connections", connections[i], "/run/nbd.sock"), 2);
    assert_non_null(strstr(out, want));
  }
  assert_int_equal(attach("--help", NULL, NULL), 0);
  assert_non_null(strstr(out, "STANDBY-SOCKET"));
}

static void test_a_kernel_without_the_nbd_driver_is_named(void **state)
{
  (void)state;
  if (access("/sys/module/nbd", F_OK) == 0) {
    print_message("this kernel has the nbd driver loaded: nothing to check here\n");
    skip();
  }
  assert_int_equal(attach("/run/no-such.sock", NULL, NULL), 1);
  assert_non_null(strstr(out, "NBD driver is not loaded"));
  assert_non_null(strstr(out, "modprobe nbd"));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_handshake_gives_the_export_size_and_flags),
    cmocka_unit_test(test_an_unknown_export_is_refused_in_the_servers_words),
    cmocka_unit_test(test_a_peer_that_is_not_nbd_is_named),
    cmocka_unit_test(test_bad_options_say_what_to_give),
    cmocka_unit_test(test_a_kernel_without_the_nbd_driver_is_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
