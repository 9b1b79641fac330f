/* See log.h. Lines are formatted whole before one write, so lines from different
 * threads never interleave mid-line. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static enum rp_log_level max_level = RP_LOG_INFO;
static const char *program = "rampart";
static void (*log_sink)(enum rp_log_level, const char *);

void rp_log_set_level(enum rp_log_level level)
{
  max_level = level;
}
void rp_log_set_program(const char *name)
{
  program = name;
}
void rp_log_set_sink(void (*sink)(enum rp_log_level, const char *))
{
  log_sink = sink;
}

void rp_log(enum rp_log_level level, const char *fmt, ...)
{
  if (level > max_level)
    return;
  static const char *names[] = { "error", "warning", "info", "debug" };
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (log_sink) {
    log_sink(level, msg);
    return;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char line[1200];
  int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %s: %s: %s\n", tm.tm_hour,
                   tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, program, names[level], msg);
  if (n > (int)sizeof line - 1)
    n = (int)sizeof line - 1;
  ssize_t ignored = write(STDERR_FILENO, line, (size_t)n);
  (void)ignored;
}
