/* The state file (swap_state.h). It is read whole at each question: it is a few hundred
 * bytes, and the keeper and 'upgrade' write it from two processes. */
#include "swap_state.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swap_context.h"

const char *swap_state_path(const struct swap_context *c, const char *file, char *buf,
                            size_t buflen)
{
  snprintf(buf, buflen, "%s/%s", c->state, file);
  return buf;
}

bool swap_state_exists(const struct swap_context *c)
{
  char path[2400];
  FILE *f = fopen(swap_state_path(c, "state", path, sizeof path), "re");
  if (f)
    fclose(f);
  return f != NULL;
}

void swap_state_file_lines(const struct swap_context *c, const char *file,
                           void (*fn)(const char *line, void *arg), void *arg)
{
  char path[2400];
  FILE *f = fopen(swap_state_path(c, file, path, sizeof path), "re");
  if (!f)
    return;
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, f)) >= 0) {
    if (n > 0 && line[n - 1] == '\n')
      line[n - 1] = '\0';
    fn(line, arg);
  }
  free(line);
  fclose(f);
}

struct key_match {
  const char *key;
  void (*fn)(const char *value, void *arg);
  void *arg;
};

static void match_key(const char *line, void *arg)
{
  struct key_match *m = arg;
  size_t klen = strlen(m->key);
  if (strncmp(line, m->key, klen) == 0 && line[klen] == '=')
    m->fn(line + klen + 1, m->arg);
}

void swap_state_each(const struct swap_context *c, const char *key,
                     void (*fn)(const char *value, void *arg), void *arg)
{
  struct key_match m = { key, fn, arg };
  swap_state_file_lines(c, "state", match_key, &m);
}

struct last_value {
  char *buf;
  size_t buflen;
  bool found;
};

static void keep_last(const char *value, void *arg)
{
  struct last_value *l = arg;
  snprintf(l->buf, l->buflen, "%s", value);
  l->found = true;
}

bool swap_state_get(const struct swap_context *c, const char *key, char *buf, size_t buflen)
{
  struct last_value l = { buf, buflen, false };
  if (buflen)
    buf[0] = '\0';
  swap_state_each(c, key, keep_last, &l);
  return l.found;
}

long swap_state_num(const struct swap_context *c, const char *key)
{
  char v[64];
  if (!swap_state_get(c, key, v, sizeof v) || !*v)
    return 0;
  char *end;
  long n = strtol(v, &end, 10);
  return *end ? 0 : n;
}

void swap_state_set(const struct swap_context *c, const char *key, const char *fmt, ...)
{
  char path[2400], value[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(value, sizeof value, fmt, ap);
  va_end(ap);
  FILE *f = fopen(swap_state_path(c, "state", path, sizeof path), "ae");
  if (!f || fprintf(f, "%s=%s\n", key, value) < 0 || fclose(f) != 0)
    swap_die("cannot write %s: %s", path, strerror(errno));
}
