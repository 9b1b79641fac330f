/* How rampart-swap reports and fails (swap_context.h): every sentence starts with the
 * program's name, as the tests and the journal read it; a failing 'on' undoes itself. */
#include "swap_context.h"

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "swap_off.h"

static struct swap_context *rollback;
static volatile sig_atomic_t stop_signal;
static int die_status = 1;

static void vreport(FILE *f, const char *fmt, va_list ap)
{
  fputs(SWAP_ME ": ", f);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  fflush(f);
}

void say(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vreport(stdout, fmt, ap);
  va_end(ap);
}

void warn(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vreport(stderr, fmt, ap);
  va_end(ap);
}

/* The last 20 lines of a log, to stderr. */
static void tail_log(const char *path)
{
  FILE *f = fopen(path, "re");
  if (!f)
    return;
  static char lines[20][1024];
  size_t n = 0;
  while (fgets(lines[n % 20], sizeof lines[0], f))
    n++;
  fclose(f);
  if (n == 0)
    return;
  fprintf(stderr, "---- %s ----\n", path);
  for (size_t i = n > 20 ? n - 20 : 0; i < n; i++) {
    fputs(lines[i % 20], stderr);
    if (!strchr(lines[i % 20], '\n'))
      fputc('\n', stderr);
  }
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
  return strcmp((*a)->d_name, (*b)->d_name);
}

/* What a failed 'on' did, undone: each log's end first, for the reason. */
static void undo_on(struct swap_context *c)
{
  fputs(SWAP_ME ": 'on' failed; undoing what was done\n", stderr);
  struct dirent **names;
  int n = scandir(c->state, &names, NULL, by_name);
  for (int i = 0; i < n; i++) {
    size_t len = strlen(names[i]->d_name);
    if (len > 4 && strcmp(names[i]->d_name + len - 4, ".log") == 0) {
      char path[2600];
      snprintf(path, sizeof path, "%s/%s", c->state, names[i]->d_name);
      tail_log(path);
    }
    free(names[i]);
  }
  if (n >= 0)
    free(names);
  fflush(stdout);
  dup2(STDERR_FILENO, STDOUT_FILENO);
  c->force = true;
  swap_turn_off(c);
}

_Noreturn void swap_die(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vreport(stderr, fmt, ap);
  va_end(ap);
  struct swap_context *c = rollback;
  rollback = NULL; /* a failure while undoing ends there */
  if (c)
    undo_on(c);
  exit(die_status);
}

static void on_stop(int sig)
{
  stop_signal = sig;
}

static void set_stop_handler(void (*handler)(int))
{
  struct sigaction sa = { .sa_handler = handler }; /* no SA_RESTART: sleeps end early */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

void swap_rollback_arm(struct swap_context *c)
{
  rollback = c;
  set_stop_handler(on_stop);
}

void swap_rollback_disarm(void)
{
  rollback = NULL;
  set_stop_handler(SIG_DFL);
}

void swap_sleep_ms(int ms)
{
  struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
  nanosleep(&t, NULL);
  if (stop_signal && rollback) {
    die_status = 130;
    swap_die("stopped by signal %d", (int)stop_signal);
  }
}

static const char *env_or(const char *name, const char *fallback)
{
  const char *v = getenv(name);
  return v && *v ? v : fallback;
}

void swap_context_init(struct swap_context *c)
{
  struct swap_programs *p = &c->prog;
  p->plugin = env_or("RAMPART_PLUGIN", "rampart");
  p->nbdkit = env_or("NBDKIT", "nbdkit");
  p->ublk = env_or("RAMPART_UBLK", "rampart-ublk");
  p->nbd_attach = env_or("RAMPART_NBD_ATTACH", "rampart-nbd-attach");
  p->nbd_server = env_or("RAMPART_NBD_SERVER", "rampart-nbd-server");
  p->fuse = env_or("RAMPART_FUSE", "rampart-fuse");
  p->rampartctl = env_or("RAMPARTCTL", "rampartctl");
  p->nbdkit_preload = env_or("RAMPART_NBDKIT_PRELOAD", NULL);
  ssize_t n = readlink("/proc/self/exe", p->self, sizeof p->self - 1);
  p->self[n > 0 ? n : 0] = '\0';
  snprintf(c->run_dir, sizeof c->run_dir, "%s", env_or("RAMPART_RUN_DIR", "/run/rampart"));
  const char *base = strrchr(p->plugin, '/');
  c->rampart_plugin = strstr(base ? base + 1 : p->plugin, "rampart") != NULL;
}

const char *swap_find_program(const char *prog, char *buf, size_t buflen)
{
  if (strchr(prog, '/')) {
    snprintf(buf, buflen, "%s", prog);
    return access(buf, X_OK) == 0 ? buf : NULL;
  }
  const char *path = env_or("PATH",
                            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  for (const char *p = path; *p;) {
    const char *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    if (len) {
      snprintf(buf, buflen, "%.*s/%s", (int)len, p, prog);
      if (access(buf, X_OK) == 0)
        return buf;
    }
    p += len + (colon ? 1 : 0);
  }
  return NULL;
}
