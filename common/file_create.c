/* Files a daemon writes at a path from its settings, following no link (file_create.h). */
#include "file_create.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* -1 with errno unless path is absent or a regular file. */
static int regular_or_absent(const char *path)
{
  struct stat st;
  if (lstat(path, &st) < 0)
    return errno == ENOENT ? 0 : -1;
  if (S_ISREG(st.st_mode))
    return 0;
  errno = S_ISLNK(st.st_mode) ? ELOOP : EEXIST;
  return -1;
}

int rp_file_create(const char *path, mode_t mode)
{
  if (regular_or_absent(path) < 0)
    return -1;
  if (unlink(path) < 0 && errno != ENOENT)
    return -1;
  return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
}

int rp_file_open_kept(const char *path, mode_t mode)
{
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
  if (fd < 0)
    return -1;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    errno = EEXIST;
    return -1;
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0)
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

int rp_file_open_read(const char *path)
{
  return open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
}

int rp_file_replaceable(const char *path)
{
  return regular_or_absent(path);
}

const char *rp_file_why(int errnum)
{
  if (errnum == ELOOP)
    return "it is a symbolic link, which rampart does not follow where it writes as root: "
           "remove the link or give a path of a file of its own";
  if (errnum == EEXIST)
    return "something that is not a regular file is there: remove it or give another path";
  return strerror(errnum);
}
