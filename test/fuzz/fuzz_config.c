/* libFuzzer target for what operators write: the engine's key=value settings
 * (src/engine/config.c, as nbdkit passes them, cluster files included), rampartd's command line
 * and --config file (server/options.c), and key files (proto/auth.c).
 *
 * The first input byte picks the parser, the rest is its input. Paths never come from
 * the input: anything that names a file gets this process's own temporary file, holding
 * the input, so a cluster file, a --config file or a key file is fuzzed by content.
 * Properties: a refusal says why (a non-empty message); an accepted key is between the
 * length limits and is the file's bytes without trailing white space; an accepted engine
 * configuration passes or fails its own check with a message.
 * RAMPART_FUZZ_SEED_DIR=DIR writes a seed corpus first.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "config.h"
#include "options.h"
#include "rampart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char temp_path[64];

static void write_temp(const uint8_t *data, size_t size)
{
  int fd = open(temp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
    abort();
  close(fd);
}

static const char *const engine_keys[] = {
  "size",   "servers",    "cluster", "key",    "redundancy",  "group",
  "spill",  "stats-file", "encrypt", "enckey", "tmpdir",      "spill-size",
  "memory", "overflow",   "timeout", "lease",  "no-such-key",
};
#define NKEYS (sizeof engine_keys / sizeof engine_keys[0])

static bool names_a_file(const char *key)
{
  return !strcmp(key, "cluster") || !strcmp(key, "key") || !strcmp(key, "enckey") ||
         !strcmp(key, "spill") || !strcmp(key, "stats-file") || !strcmp(key, "tmpdir");
}

/* Lines of "K value\n", K = '@' + the key's index: each sets one engine key, then the
 * whole is checked. */
static void fuzz_engine_config(const uint8_t *data, size_t size)
{
  struct rampart_config *c = rampart_config_new();
  if (!c)
    abort();
  write_temp(data, size);
  char *copy = strndup((const char *)data, size);
  if (!copy)
    abort();
  char err[512];
  for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    const char *key = engine_keys[(unsigned char)(line[0] - '@') % NKEYS];
    const char *value = names_a_file(key) ? temp_path : line + 1;
    err[0] = '\0';
    if (rampart_config_set(c, key, value, err, sizeof err) < 0 && !err[0])
      abort();
  }
  err[0] = '\0';
  if (rampart_config_check(c, err, sizeof err) < 0 && !err[0])
    abort();
  free(copy);
  rampart_config_free(c);
}

/* NUL-separated arguments; a value that would name a file names the temporary one. */
static void fuzz_server_options(const uint8_t *data, size_t size)
{
  write_temp(data, size);
  char *copy = malloc(size + 1);
  if (!copy)
    abort();
  memcpy(copy, data, size);
  copy[size] = '\0';
  char *argv[64] = { "rampartd" };
  int argc = 1;
  for (size_t at = 0; at <= size && argc < 63;) {
    char *arg = copy + at;
    size_t len = strlen(arg);
    argv[argc++] = arg[0] == '/' || arg[0] == '.' ? temp_path : arg;
    at += len + 1;
  }
  argv[argc] = NULL;
  struct rps_options opt;
  char err[512] = "";
  /* --help and --version print; keep the fuzzer's output readable. */
  FILE *saved = stdout;
  stdout = fopen("/dev/null", "w");
  enum rps_options_result r = rps_options_parse(argc, argv, &opt, err, sizeof err);
  fclose(stdout);
  stdout = saved;
  if (r == RPS_OPTIONS_BAD && !err[0])
    abort();
  free(copy);
}

static void fuzz_key_file(const uint8_t *data, size_t size)
{
  write_temp(data, size);
  struct rp_key k;
  char err[512] = "";
  if (rp_key_load(temp_path, &k, err, sizeof err) < 0) {
    if (!err[0] || k.len != 0)
      abort();
    return;
  }
  size_t n = size;
  while (n && (data[n - 1] == '\n' || data[n - 1] == '\r' || data[n - 1] == ' ' ||
               data[n - 1] == '\t'))
    n--;
  if (k.len < RP_KEY_MIN_LEN || k.len > RP_KEY_MAX_LEN || k.len != n ||
      memcmp(k.bytes, data, n) != 0)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1 || size > 8192)
    return 0;
  switch (data[0] % 3) {
  case 0:
    fuzz_engine_config(data + 1, size - 1);
    break;
  case 1:
    fuzz_server_options(data + 1, size - 1);
    break;
  default:
    fuzz_key_file(data + 1, size - 1);
    break;
  }
  return 0;
}

static void write_seed(const char *dir, const char *name, const char *text, size_t len)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f)
    return;
  fwrite(text, 1, len, f);
  fclose(f);
}

/* libFuzzer ends a timed run with exit(): the file goes with it, not left in /tmp. */
static void remove_temp(void)
{
  unlink(temp_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  snprintf(temp_path, sizeof temp_path, "/tmp/rampart-fuzz-config-%d", (int)getpid());
  atexit(remove_temp);
  const char *dir = getenv("RAMPART_FUZZ_SEED_DIR");
  if (!dir || !*dir)
    return 0;
  static const char engine[] = "\x00"
                               "@64M\nDparity-log\nE4\nN2000\nO10\n"
                               "A127.0.0.1:7070\nJmaybe\n";
  write_seed(dir, "engine", engine, sizeof engine - 1);
  static const char server[] = "\x01"
                               "--listen\0"
                               "127.0.0.1:0\0"
                               "--memory\0"
                               "4G\0"
                               "--lease\0"
                               "60\0"
                               "--config\0"
                               "/x";
  write_seed(dir, "server", server, sizeof server - 1);
  static const char key[] = "\x02"
                            "0123456789abcdef0123456789abcdef0123456789abcdef\n";
  write_seed(dir, "key", key, sizeof key - 1);
  return 0;
}
