/* rampartctl notify-listen (notify_listen.h). The sender's pid comes from the kernel
 * (SO_PASSCRED), never from the message, so a supervisor that records which pid said
 * READY=1 cannot be told so by another process; the socket lives in a directory only
 * root enters. Lines are printed as they come, flushed, so a reader of the output file
 * sees each the moment it arrives. */
#include "notify_listen.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* The largest datagram read; sd_notify messages are a few lines. A longer one is cut. */
#define NOTIFY_MAX 4096

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
  stop_signal = sig;
}

static int bind_notify_socket(const char *path)
{
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  if (strlen(path) >= sizeof a.sun_path) {
    fprintf(stderr,
            "rampartctl: notify-listen %s: the path is longer than a unix "
            "socket's %zu bytes: pick a shorter one\n",
            path, sizeof a.sun_path - 1);
    return -1;
  }
  strcpy(a.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int one = 1;
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
    unlink(path); /* a socket a stopped listener left */
  /* SO_PASSCRED before bind: a datagram that arrives the moment the path exists must
   * already carry its sender's pid, or it is printed under pid 0. */
  int r = fd < 0 ? -1 : setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
  mode_t old = umask(077);
  if (r == 0)
    r = bind(fd, (struct sockaddr *)&a, sizeof a);
  umask(old);
  if (r < 0) {
    fprintf(stderr, "rampartctl: notify-listen: cannot listen on %s: %s\n", path,
            strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  return fd;
}

/* The sender's pid, from the credentials the kernel attached; 0 when there are none. */
static long sender_pid(struct msghdr *m)
{
  for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
      struct ucred cred;
      memcpy(&cred, CMSG_DATA(c), sizeof cred);
      return (long)cred.pid;
    }
  }
  return 0;
}

/* Each KEY=VALUE line of text, with the pid before it; bytes that are not printable
 * become '?', so one message cannot forge a second line. */
static void print_lines(long pid, char *text, size_t len)
{
  text[len] = '\0';
  for (char *line = text, *next; line; line = next) {
    next = strchr(line, '\n');
    if (next)
      *next++ = '\0';
    if (!strchr(line, '='))
      continue;
    for (char *p = line; *p; p++)
      if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
        *p = '?';
    printf("%ld %s\n", pid, line);
  }
  fflush(stdout);
}

int notify_listen_main(int argc, char **argv)
{
  if (argc != 1) {
    fprintf(stderr, "rampartctl: notify-listen takes one SOCKET path (try --help)\n");
    return 2;
  }
  struct sigaction sa = { .sa_handler = on_stop }; /* no SA_RESTART: recvmsg ends */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  int fd = bind_notify_socket(argv[0]);
  if (fd < 0)
    return 1;
  static char text[NOTIFY_MAX + 1];
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(struct ucred))];
  } control;
  while (!stop_signal) {
    struct iovec iov = { .iov_base = text, .iov_len = NOTIFY_MAX };
    struct msghdr m = { .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = control.buf,
                        .msg_controllen = sizeof control.buf };
    ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      fprintf(stderr, "rampartctl: notify-listen: %s\n", strerror(errno));
      break;
    }
    print_lines(sender_pid(&m), text, (size_t)n);
  }
  close(fd);
  unlink(argv[0]);
  return stop_signal ? 0 : 1;
}
