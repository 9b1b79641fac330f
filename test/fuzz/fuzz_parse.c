/* libFuzzer target for operator-input parsing (common/parse.c): sizes, counts and
 * HOST:PORT come from command lines and cluster files. The first input byte picks the
 * parser, the rest is the string. Accepted values must be self-consistent (a host and
 * port that fit their buffers, a port in 1..65535, a size that is a multiple of its
 * unit); refusals must say why. RAMPART_FUZZ_SEED_DIR=DIR writes a seed corpus first. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1 || size > 4096)
    return 0;
  char *s = malloc(size);
  if (!s)
    abort();
  memcpy(s, data + 1, size - 1);
  s[size - 1] = '\0';
  char err[256];
  err[0] = '\0';

  switch (data[0] % 3) {
  case 0: {
    uint64_t v;
    if (rp_parse_size("size", s, &v, err, sizeof err) == 0) {
      char buf[32];
      rp_format_bytes(v, buf, sizeof buf);
      if (!strchr(buf, 'B'))
        abort();
    } else if (!err[0]) {
      abort();
    }
    break;
  }
  case 1: {
    uint64_t v, max = (uint64_t)data[0] << 8;
    if (rp_parse_uint("count", s, max, &v, err, sizeof err) == 0) {
      if (v > max)
        abort();
    } else if (!err[0]) {
      abort();
    }
    break;
  }
  default: {
    char host[64], port[8];
    if (rp_parse_hostport(s, host, sizeof host, port, sizeof port, err, sizeof err) == 0) {
      long p = strtol(port, NULL, 10);
      if (!host[0] || strlen(host) >= sizeof host || p < 1 || p > 65535)
        abort();
    } else if (!err[0]) {
      abort();
    }
    break;
  }
  }
  free(s);
  return 0;
}

static void seed(const char *dir, int n, uint8_t which, const char *text)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/seed-%02d", dir, n);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, &which, 1) != 1 ||
      write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
    fprintf(stderr, "fuzz_parse: cannot write %s: %s\n", path, strerror(errno));
    exit(1);
  }
  close(fd);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  const char *dir = getenv("RAMPART_FUZZ_SEED_DIR");
  if (!dir || !*dir)
    return 0;
  static const char *sizes[] = { "64M", "2GiB", "4096", "1TB", "12Q", "-1" };
  static const char *counts[] = { "60", "0", "65535" };
  static const char *hosts[] = { "127.0.0.1:7070", "[::1]:7070", "mem-1:65535", "host:0" };
  int n = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    seed(dir, n++, 0, sizes[i]);
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
    seed(dir, n++, 250, counts[i]); /* 250 % 3 == 1: rp_parse_uint, max 64000 */
  for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++)
    seed(dir, n++, 2, hosts[i]);
  return 0;
}
