/* rampart-swap's command line, --config file and the checks of their values
 * (swap_options.h). The sentences are the ones operators and the tests know. */
#include "swap_options.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const swap_own_keys[9] = { "name",        "priority", "attach",
                                       "frontend",    "queues",   "depth",
                                       "connections", "threads",  "daemon" };

enum own_key {
  OWN_NAME,
  OWN_PRIORITY,
  OWN_ATTACH,
  OWN_FRONTEND,
  OWN_QUEUES,
  OWN_DEPTH,
  OWN_CONNECTIONS,
  OWN_THREADS,
  OWN_DAEMON,
  OWN_COUNT
};

static int own_index(const char *key, size_t len)
{
  for (int i = 0; i < OWN_COUNT; i++)
    if (strlen(swap_own_keys[i]) == len && strncmp(swap_own_keys[i], key, len) == 0)
      return i;
  return -1;
}

const char *swap_kv_get(const struct swap_kv *kv, const char *key)
{
  for (size_t i = 0; i < kv->n; i++)
    if (strcmp(kv->keys[i], key) == 0)
      return kv->values[i];
  return NULL;
}

int swap_kv_set(struct swap_kv *kv, const char *key, const char *value)
{
  char *v = strdup(value);
  if (!v)
    return -1;
  for (size_t i = 0; i < kv->n; i++) {
    if (strcmp(kv->keys[i], key) == 0) {
      free(kv->values[i]);
      kv->values[i] = v;
      return 0;
    }
  }
  char *k = strdup(key);
  char **keys = realloc(kv->keys, (kv->n + 1) * sizeof *keys);
  if (keys)
    kv->keys = keys;
  char **values = keys ? realloc(kv->values, (kv->n + 1) * sizeof *values) : NULL;
  if (values)
    kv->values = values;
  if (!k || !keys || !values) {
    free(k);
    free(v);
    return -1;
  }
  kv->keys[kv->n] = k;
  kv->values[kv->n] = v;
  kv->n++;
  return 0;
}

void swap_kv_free(struct swap_kv *kv)
{
  for (size_t i = 0; i < kv->n; i++) {
    free(kv->keys[i]);
    free(kv->values[i]);
  }
  free(kv->keys);
  free(kv->values);
  *kv = (struct swap_kv){ 0 };
}

/* Adds one "KEY=VALUE" (the key is what comes before the first '='). */
static int kv_add_line(struct swap_kv *kv, const char *line)
{
  const char *eq = strchr(line, '=');
  char key[256];
  size_t len = (size_t)(eq - line);
  if (len >= sizeof key)
    len = sizeof key - 1;
  memcpy(key, line, len);
  key[len] = '\0';
  return swap_kv_set(kv, key, eq + 1);
}

static const struct {
  const char *word;
  enum swap_command cmd;
} commands[] = {
  { "on", SWAP_ON },           { "off", SWAP_OFF },
  { "status", SWAP_STATUS },   { "reload", SWAP_RELOAD },
  { "upgrade", SWAP_UPGRADE }, { "keep-standby", SWAP_KEEP_STANDBY },
  { "-h", SWAP_HELP },         { "--help", SWAP_HELP },
  { "help", SWAP_HELP },
};

static enum swap_command command_of(const char *word)
{
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(commands[i].word, word) == 0)
      return commands[i].cmd;
  return SWAP_NONE;
}

static const char *command_word(enum swap_command cmd)
{
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (commands[i].cmd == cmd)
      return commands[i].word;
  return "?";
}

/* The --option that sets one of rampart-swap's own keys, or -1. */
static int option_index(const char *arg)
{
  if (strncmp(arg, "--", 2) != 0)
    return -1;
  return own_index(arg + 2, strlen(arg + 2));
}

int swap_args_parse(int argc, char **argv, struct swap_args *a, char *err, size_t errlen)
{
  *a = (struct swap_args){ 0 };
  if (argc < 1) {
    snprintf(err, errlen, "usage");
    return 2;
  }
  a->cmd = command_of(argv[0]);
  if (a->cmd == SWAP_NONE) {
    snprintf(err, errlen,
             "unknown command '%s': use on, off, status, reload or upgrade (try --help)",
             argv[0]);
    return 2;
  }
  if (a->cmd == SWAP_HELP)
    return 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    int own = option_index(arg);
    bool takes_value = own >= 0 || strcmp(arg, "--config") == 0;
    if (takes_value) {
      if (i + 1 >= argc || !argv[i + 1][0]) {
        snprintf(err, errlen, "%s needs a value (try --help)", arg);
        return 1;
      }
      if (own >= 0)
        a->own[own] = argv[++i];
      else
        a->config_file = argv[++i];
    } else if (strcmp(arg, "--force") == 0) {
      a->force = true;
    } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      a->cmd = SWAP_HELP;
      return 0;
    } else if (strchr(arg, '=')) {
      if (a->cmd != SWAP_ON) {
        snprintf(err, errlen, "%s takes no KEY=VALUE arguments ('%s')", command_word(a->cmd),
                 arg);
        return 1;
      }
      if (kv_add_line(&a->cmdline_kv, arg) != 0) {
        snprintf(err, errlen, "out of memory");
        return 1;
      }
    } else {
      snprintf(err, errlen, "unknown argument '%s' (try --help)", arg);
      return 1;
    }
  }
  return 0;
}

/* line without its comment and the spaces around it, in place. */
static char *trimmed(char *line)
{
  char *hash = strchr(line, '#');
  if (hash)
    *hash = '\0';
  while (isspace((unsigned char)*line))
    line++;
  size_t n = strlen(line);
  while (n > 0 && isspace((unsigned char)line[n - 1]))
    line[--n] = '\0';
  return line;
}

int swap_config_read(const char *path, struct swap_kv *kv, char *err, size_t errlen)
{
  FILE *f = fopen(path, "re");
  if (!f) {
    snprintf(err, errlen, "cannot read --config %s", path);
    return -1;
  }
  char *buf = NULL;
  size_t cap = 0;
  int lineno = 0, rc = 0;
  while (getline(&buf, &cap, f) >= 0) {
    lineno++;
    char *line = trimmed(buf);
    if (!*line)
      continue;
    if (!strchr(line, '=')) {
      snprintf(err, errlen, "%s line %d: expected KEY=VALUE, got '%s'", path, lineno, line);
      rc = -1;
      break;
    }
    if (kv_add_line(kv, line) != 0) {
      snprintf(err, errlen, "out of memory");
      rc = -1;
      break;
    }
  }
  free(buf);
  fclose(f);
  return rc;
}

/* s is a decimal integer (a leading '-' when negative_ok) within [min, max]. */
static bool int_in(const char *s, bool negative_ok, long min, long max, int *out)
{
  const char *p = s;
  if (negative_ok && *p == '-')
    p++;
  if (!*p || strlen(p) > 9)
    return false;
  for (const char *q = p; *q; q++)
    if (!isdigit((unsigned char)*q))
      return false;
  long v = strtol(s, NULL, 10);
  if (v < min || v > max)
    return false;
  *out = (int)v;
  return true;
}

static bool name_ok(const char *s)
{
  if (!*s)
    return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("_.-", *s))
      return false;
  return true;
}

static bool one_of(const char *s, const char *const *words)
{
  for (; *words; words++)
    if (strcmp(s, *words) == 0)
      return true;
  return false;
}

/* The value of each own key: the defaults, then the file and KEY=VALUE, then --options. */
static int merge(const struct swap_args *a, const struct swap_kv *file,
                 const char *own[OWN_COUNT], struct swap_kv *pager)
{
  const struct swap_kv *sources[] = { file, &a->cmdline_kv };
  for (size_t s = 0; s < 2; s++) {
    for (size_t i = 0; sources[s] && i < sources[s]->n; i++) {
      const char *k = sources[s]->keys[i];
      int idx = own_index(k, strlen(k));
      if (idx >= 0)
        own[idx] = sources[s]->values[i];
      else if (swap_kv_set(pager, k, sources[s]->values[i]) != 0)
        return -1;
    }
  }
  for (int i = 0; i < OWN_COUNT; i++)
    if (a->own[i])
      own[i] = a->own[i];
  return 0;
}

static int check_counts(const char *own[OWN_COUNT], int cpus, struct swap_settings *s,
                        char *err, size_t errlen)
{
  /* Unset, each way of attaching has its own default (swap_on.c): more connections than
   * one cost rampart-nbd-server CPU on every request (docs/page-in.md). */
  s->connections = 0;
  if (own[OWN_CONNECTIONS] && *own[OWN_CONNECTIONS] &&
      !int_in(own[OWN_CONNECTIONS], false, 1, 16, &s->connections)) {
    snprintf(err, errlen, "--connections '%s' is not a number from 1 to 16",
             own[OWN_CONNECTIONS]);
    return -1;
  }
  if (!int_in(own[OWN_THREADS], false, 1, 1024, &s->threads)) {
    snprintf(err, errlen, "--threads '%s' is not a number from 1 to 1024", own[OWN_THREADS]);
    return -1;
  }
  if (own[OWN_QUEUES] && *own[OWN_QUEUES]) {
    if (!int_in(own[OWN_QUEUES], false, 1, 16, &s->queues)) {
      snprintf(err, errlen, "--queues '%s' is not a number from 1 to 16", own[OWN_QUEUES]);
      return -1;
    }
  } else {
    s->queues = cpus < 1 ? 1 : cpus > 4 ? 4 : cpus;
  }
  /* Requests in flight across the queues stay about 64 (each is up to 128 KiB of locked
   * buffer in the daemon): more queues spread them over more CPUs, not more memory. */
  if (own[OWN_DEPTH] && *own[OWN_DEPTH]) {
    if (!int_in(own[OWN_DEPTH], false, 1, 4096, &s->depth)) {
      snprintf(err, errlen, "--depth '%s' is not a number from 1 to 4096", own[OWN_DEPTH]);
      return -1;
    }
  } else {
    s->depth = 64 / s->queues < 16 ? 16 : 64 / s->queues;
  }
  return 0;
}

static int check_frontend(const char *own[OWN_COUNT], struct swap_settings *s, char *err,
                          size_t errlen)
{
  static const char *const daemons[] = { "auto", "rampart-nbd-server", "nbdkit", NULL };
  static const char *const frontends[] = { "auto", "ublk", "nbd", "fuse", NULL };
  if (!one_of(own[OWN_DAEMON], daemons)) {
    snprintf(err, errlen, "--daemon '%s': use auto, rampart-nbd-server or nbdkit",
             own[OWN_DAEMON]);
    return -1;
  }
  snprintf(s->daemon, sizeof s->daemon, "%s", own[OWN_DAEMON]);
  const char *frontend = own[OWN_FRONTEND] && *own[OWN_FRONTEND] ? own[OWN_FRONTEND] : NULL;
  const char *attach = own[OWN_ATTACH] ? own[OWN_ATTACH] : "";
  if (*attach) {
    if (strcmp(attach, "auto") != 0 && strcmp(attach, "nbd") != 0 &&
        strcmp(attach, "loop") != 0) {
      snprintf(err, errlen,
               "--attach '%s': use auto, nbd or loop (or --frontend auto|ublk|nbd|fuse)",
               attach);
      return -1;
    }
    if (!frontend)
      frontend = strcmp(attach, "loop") == 0 ? "fuse" : attach;
  }
  if (!frontend)
    frontend = "auto";
  if (!one_of(frontend, frontends)) {
    snprintf(err, errlen, "--frontend '%s': use auto, ublk, nbd or fuse", frontend);
    return -1;
  }
  snprintf(s->frontend, sizeof s->frontend, "%s", frontend);
  return 0;
}

int swap_settings_resolve(const struct swap_args *a, const struct swap_kv *file, int cpus,
                          struct swap_settings *s, char *err, size_t errlen)
{
  *s = (struct swap_settings){ 0 };
  const char *own[OWN_COUNT] = { [OWN_NAME] = "rampart",
                                 [OWN_PRIORITY] = "100",
                                 [OWN_CONNECTIONS] = "",
                                 [OWN_THREADS] = "16",
                                 [OWN_DAEMON] = "auto" };
  if (merge(a, file, own, &s->pager) != 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (!name_ok(own[OWN_NAME]) || strlen(own[OWN_NAME]) >= sizeof s->name) {
    snprintf(err, errlen, "--name '%s': use letters, digits, '.', '_' or '-'", own[OWN_NAME]);
    return -1;
  }
  snprintf(s->name, sizeof s->name, "%s", own[OWN_NAME]);
  if (!int_in(own[OWN_PRIORITY], true, -1, 32767, &s->priority)) {
    snprintf(err, errlen, "--priority '%s' is not a number from -1 to 32767",
             own[OWN_PRIORITY]);
    return -1;
  }
  if (check_counts(own, cpus, s, err, errlen) != 0)
    return -1;
  return check_frontend(own, s, err, errlen);
}
