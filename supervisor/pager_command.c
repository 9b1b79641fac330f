/* The pager's and the standbys' command lines (pager_command.h). */
#include "pager_command.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program_run.h"
#include "swap_context.h"
#include "swap_state.h"

void arg_push(struct arg_list *a, const char *fmt, ...)
{
  char *s;
  va_list ap;
  va_start(ap, fmt);
  int r = vasprintf(&s, fmt, ap);
  va_end(ap);
  char **v = r < 0 ? NULL : realloc(a->v, (a->n + 2) * sizeof *v);
  if (!v)
    swap_die("out of memory");
  a->v = v;
  a->v[a->n++] = s;
  a->v[a->n] = NULL;
}

void arg_free(struct arg_list *a)
{
  for (size_t i = 0; i < a->n; i++)
    free(a->v[i]);
  free(a->v);
  *a = (struct arg_list){ 0 };
}

static void push_setting(const char *line, void *a)
{
  if (*line)
    arg_push(a, "%s", line);
}

void pager_settings_push(const struct swap_context *c, struct arg_list *a)
{
  swap_state_file_lines(c, "pager.args", push_setting, a);
}

static bool daemon_is_nbd_server(const struct swap_context *c)
{
  char daemon[64];
  return swap_state_get(c, "daemon", daemon, sizeof daemon) &&
         strcmp(daemon, "rampart-nbd-server") == 0;
}

void pager_nbd_command(const struct swap_context *c, const char *socket, const char *extra,
                       struct arg_list *a)
{
  if (daemon_is_nbd_server(c)) {
    arg_push(a, "%s", c->prog.nbd_server);
    arg_push(a, "--unix");
    arg_push(a, "%s", socket);
  } else {
    arg_push(a, "%s", c->prog.nbdkit);
    arg_push(a, "--foreground");
    arg_push(a, "--unix");
    arg_push(a, "%s", socket);
    arg_push(a, "--threads");
    arg_push(a, "%ld", swap_state_num(c, "threads"));
    arg_push(a, "%s", c->prog.plugin);
  }
  pager_settings_push(c, a);
  if (extra)
    arg_push(a, "%s", extra);
}

void pager_ublk_command(const struct swap_context *c, const char *extra, struct arg_list *a)
{
  arg_push(a, "%s", c->prog.ublk);
  if (extra)
    arg_push(a, "%s", extra);
  arg_push(a, "--id");
  arg_push(a, "%ld", swap_state_num(c, "ublk_id"));
  arg_push(a, "--queues");
  arg_push(a, "%ld", swap_state_num(c, "queues"));
  arg_push(a, "--depth");
  arg_push(a, "%ld", swap_state_num(c, "depth"));
  pager_settings_push(c, a);
}

const char *pager_preload(const struct swap_context *c)
{
  return daemon_is_nbd_server(c) ? NULL : c->prog.nbdkit_preload;
}

/* The value after "rampart_state_layout=" in nbdkit --dump-plugin's output. */
static bool dumped_layout(const char *dump, char *buf, size_t buflen)
{
  static const char key[] = "rampart_state_layout=";
  for (const char *p = dump; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    if (strncmp(p, key, sizeof key - 1) == 0) {
      p += sizeof key - 1;
      snprintf(buf, buflen, "%.*s", (int)strcspn(p, "\n"), p);
      return *buf != '\0';
    }
  }
  return false;
}

bool pager_state_layout(const struct swap_context *c, const char *frontend,
                        const char *daemon, char *buf, size_t buflen)
{
  static char out[65536];
  struct run_io io = {
    .out_mode = RUN_CAPTURE, .err_mode = RUN_DISCARD, .out = out, .outlen = sizeof out
  };
  buf[0] = '\0';
  if (strcmp(frontend, "ublk") == 0 || strcmp(daemon, "rampart-nbd-server") == 0) {
    const char *prog = strcmp(frontend, "ublk") == 0 ? c->prog.ublk : c->prog.nbd_server;
    const char *argv[] = { prog, "--state-layout", NULL };
    if (run_program(argv, &io) != 0)
      return false;
    snprintf(buf, buflen, "%.*s", (int)strcspn(out, "\n"), out);
    return *buf != '\0';
  }
  const char *argv[] = { c->prog.nbdkit, "--dump-plugin", c->prog.plugin, NULL };
  if (c->prog.nbdkit_preload)
    setenv("LD_PRELOAD", c->prog.nbdkit_preload, 1);
  run_program(argv, &io);
  if (c->prog.nbdkit_preload)
    unsetenv("LD_PRELOAD");
  return dumped_layout(out, buf, buflen);
}
