/* What a frontend daemon tells whoever supervises it (rampart.h, rampart_notify): the
 * sd_notify protocol, one datagram to the unix socket $NOTIFY_SOCKET names, so that
 * rampart-swap, a systemd unit of Type=notify, or any supervisor in C learns that a
 * daemon serves, stands by or took a device over without reading its log, whose
 * wording is for people. The receiver learns the sender's pid from the kernel
 * (SCM_CREDENTIALS), so a message names no pid of its own. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rampart.h"

/* The socket $NOTIFY_SOCKET names: a path, or '@' and an abstract name. */
static int notify_address(const char *name, struct sockaddr_un *a, socklen_t *len)
{
  size_t n = strlen(name);
  if (n == 0 || n >= sizeof a->sun_path || (name[0] != '/' && name[0] != '@'))
    return -1;
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  memcpy(a->sun_path, name, n);
  if (name[0] == '@')
    a->sun_path[0] = '\0';
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] == '/'));
  return 0;
}

static int notice_text(enum rampart_notice notice, const char *what, char *buf, size_t len)
{
  switch (notice) {
  case RAMPART_NOTICE_SERVING:
    return snprintf(buf, len, "READY=1\nSTATUS=serving %s", what);
  case RAMPART_NOTICE_STANDING_BY:
    return snprintf(buf, len, "READY=1\nRAMPART_STANDBY=1\nSTATUS=standing by for %s", what);
  case RAMPART_NOTICE_TOOK_OVER:
    return snprintf(buf, len, "RAMPART_TOOK_OVER=1\nSTATUS=took over %s", what);
  case RAMPART_NOTICE_STOPPING:
    return snprintf(buf, len, "STOPPING=1\nSTATUS=stopping %s", what);
  }
  return -1;
}

/* `what` on one line: a path with a newline in it must not become a message of its own
 * (a RAMPART_TOOK_OVER=1 that no takeover sent). */
static void one_line(const char *what, char *out, size_t len)
{
  snprintf(out, len, "%s", what ? what : "");
  for (char *p = out; *p; p++)
    if (*p == '\n' || *p == '\r')
      *p = ' ';
}

int rampart_notify(enum rampart_notice notice, const char *what)
{
  const char *name = getenv("NOTIFY_SOCKET");
  if (!name)
    return 0; /* nobody asked */
  struct sockaddr_un a;
  socklen_t alen;
  char line[400], text[512];
  one_line(what, line, sizeof line);
  int n = notice_text(notice, line, text, sizeof text);
  if (n < 0 || notify_address(name, &a, &alen) < 0) {
    fprintf(stderr,
            "rampart: NOTIFY_SOCKET=%s is not a socket path or @name: the "
            "supervisor is not told\n",
            name);
    return -1;
  }
  if ((size_t)n >= sizeof text)
    n = (int)sizeof text - 1; /* only STATUS's end is cut */
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || sendto(fd, text, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&a, alen) < 0) {
    fprintf(stderr,
            "rampart: cannot tell the supervisor at %s (%s): it may wait for this "
            "daemon in vain\n",
            name, strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  close(fd);
  return 0;
}
