/* Host memory pressure monitor (see pressure.h).
 *
 * A file that cannot be opened (a kernel without PSI, a test that removed its fake file)
 * counts as "no pressure from that source" and is logged once. A file that opens but
 * does not parse, or reads empty, keeps the last good value instead: /proc never does
 * that, but a file being rewritten in place does, and flapping the state would send
 * every client migrating for nothing.
 */
#include "pressure.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "parse.h"

struct rps_pressure {
  struct ev_loop *loop;
  struct rps_pressure_config cfg;
  rps_pressure_changed_fn changed;
  void *arg;
  ev_timer timer;
  struct rps_pressure_sample sample;
  bool active;
  bool draining; /* operator's request; sticky until restart, since a drained server is empty */
  char reason[256];
  bool warned_psi_missing, warned_psi_bad, warned_mem_missing, warned_mem_bad;
};

/* ---- pure parsing --------------------------------------------------------------- */

/* The line of text starting at p, copied into buf (without its newline). */
static const char *next_line(const char *p, char *buf, size_t buflen)
{
  size_t n = 0;
  while (*p && *p != '\n') {
    if (n < buflen - 1)
      buf[n++] = *p;
    p++;
  }
  buf[n] = '\0';
  return *p ? p + 1 : p;
}

static int parse_avg10_line(const char *line, double *avg10)
{
  if (strncmp(line, "some ", 5) != 0)
    return -1;
  const char *p = strstr(line + 5, "avg10=");
  if (!p || (p[-1] != ' ' && p[-1] != '\t'))
    return -1;
  p += 6;
  if (!(*p >= '0' && *p <= '9'))
    return -1; /* strtod would accept "-1", " 1", "inf", "nan" */
  char *end;
  errno = 0;
  double v = strtod(p, &end);
  if (errno || end == p || (*end && *end != ' ' && *end != '\t' && *end != '\r'))
    return -1;
  if (!isfinite(v) || v < 0.0 || v > 100.0)
    return -1;
  *avg10 = v;
  return 0;
}

int rps_psi_parse_some_avg10(const char *text, double *avg10)
{
  char line[512];
  const char *p = text;
  while (*p) {
    p = next_line(p, line, sizeof line);
    if (strncmp(line, "some", 4) == 0)
      return parse_avg10_line(line, avg10);
  }
  return -1;
}

int rps_meminfo_parse_available(const char *text, uint64_t *bytes)
{
  char line[512];
  const char *p = text;
  while (*p) {
    p = next_line(p, line, sizeof line);
    if (strncmp(line, "MemAvailable:", 13) != 0)
      continue;
    const char *q = line + 13;
    while (*q == ' ' || *q == '\t')
      q++;
    if (!(*q >= '0' && *q <= '9'))
      return -1;
    char *end;
    errno = 0;
    unsigned long long kb = strtoull(q, &end, 10);
    if (errno || strcmp(end, " kB") != 0 || kb > UINT64_MAX / 1024)
      return -1;
    *bytes = (uint64_t)kb * 1024;
    return 0;
  }
  return -1;
}

bool rps_pressure_evaluate(const struct rps_pressure_config *cfg,
                           const struct rps_pressure_sample *s, char *reason,
                           size_t reasonlen)
{
  bool psi_hit = s->psi_ok && s->psi_some_avg10 >= cfg->psi_threshold;
  bool mem_hit = cfg->min_available > 0 && s->mem_ok && s->mem_available < cfg->min_available;

  char psi_text[96], mem_text[128] = "";
  if (s->psi_ok)
    snprintf(psi_text, sizeof psi_text, "PSI memory some avg10=%.1f%% %s %g%%",
             s->psi_some_avg10, psi_hit ? ">=" : "<", cfg->psi_threshold);
  else
    snprintf(psi_text, sizeof psi_text, "no PSI reading");
  if (cfg->min_available > 0) {
    char have[32], want[32];
    if (s->mem_ok)
      snprintf(mem_text, sizeof mem_text, "MemAvailable %s %s --min-available %s",
               rp_format_bytes(s->mem_available, have, sizeof have),
               mem_hit ? "<" : ">=", rp_format_bytes(cfg->min_available, want, sizeof want));
    else
      snprintf(mem_text, sizeof mem_text, "no MemAvailable reading");
  }

  if (psi_hit && mem_hit)
    snprintf(reason, reasonlen, "%s; %s", psi_text, mem_text);
  else if (psi_hit)
    snprintf(reason, reasonlen, "%s", psi_text);
  else if (mem_hit)
    snprintf(reason, reasonlen, "%s", mem_text);
  else if (mem_text[0])
    snprintf(reason, reasonlen, "%s; %s", psi_text, mem_text);
  else
    snprintf(reason, reasonlen, "%s", psi_text);
  return psi_hit || mem_hit;
}

/* ---- the monitor ---------------------------------------------------------------- */

/* Reads a small file whole. Returns bytes read, or -1 with errno when it cannot be
 * opened or read. */
static ssize_t read_small_file(const char *path, char *buf, size_t cap)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  size_t got = 0;
  while (got < cap - 1) {
    ssize_t n = read(fd, buf + got, cap - 1 - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int saved = errno;
      close(fd);
      errno = saved;
      return -1;
    }
    if (n == 0)
      break;
    got += (size_t)n;
  }
  close(fd);
  buf[got] = '\0';
  return (ssize_t)got;
}

/* Reads one of the kernel's files for a sample. While it cannot be read the warning is
 * logged once, not on every tick; true when buf holds the file. */
static bool read_source(const char *path, char *buf, size_t len, bool *warned,
                        const char *without_it)
{
  if (read_small_file(path, buf, len) >= 0) {
    *warned = false;
    return true;
  }
  if (!*warned)
    rp_log(RP_LOG_WARN, "cannot read %s (%s): %s", path, strerror(errno), without_it);
  *warned = true;
  return false;
}

/* The same for a file read whose line could not be parsed: the last reading stays. */
static bool source_parsed(bool parsed, const char *path, const char *line, bool *warned)
{
  if (parsed) {
    *warned = false;
    return true;
  }
  if (!*warned)
    rp_log(RP_LOG_WARN, "%s has no readable '%s' line; keeping the last reading", path, line);
  *warned = true;
  return false;
}

static void sample_psi(struct rps_pressure *p)
{
  char buf[1024];
  if (!read_source(p->cfg.psi_path, buf, sizeof buf, &p->warned_psi_missing,
                   "this kernel may lack PSI; memory pressure is judged by MemAvailable "
                   "only (set --min-available to enable that)")) {
    p->sample.psi_ok = false;
    return;
  }
  double v;
  if (!source_parsed(rps_psi_parse_some_avg10(buf, &v) >= 0, p->cfg.psi_path,
                     "some avg10=", &p->warned_psi_bad))
    return;
  p->sample.psi_ok = true;
  p->sample.psi_some_avg10 = v;
}

static void sample_meminfo(struct rps_pressure *p)
{
  char buf[8192];
  if (!read_source(p->cfg.meminfo_path, buf, sizeof buf, &p->warned_mem_missing,
                   "MemAvailable is unknown")) {
    p->sample.mem_ok = false;
    return;
  }
  uint64_t avail;
  if (!source_parsed(rps_meminfo_parse_available(buf, &avail) >= 0, p->cfg.meminfo_path,
                     "MemAvailable:", &p->warned_mem_bad))
    return;
  p->sample.mem_ok = true;
  p->sample.mem_available = avail;
}

/* Returns true when the state changed. */
static bool sample_now(struct rps_pressure *p)
{
  sample_psi(p);
  sample_meminfo(p);
  bool now = rps_pressure_evaluate(&p->cfg, &p->sample, p->reason, sizeof p->reason);
  if (p->draining) {
    now = true;
    snprintf(p->reason, sizeof p->reason,
             "draining on the operator's request (SIGUSR1): "
             "clients move their pages to other servers");
  }
  bool changed = now != p->active;
  p->active = now;
  return changed;
}

static void tick(struct ev_loop *loop, ev_timer *w, int revents)
{
  struct rps_pressure *p = w->data;
  if (sample_now(p) && p->changed)
    p->changed(p->arg, p->active, p->reason);
}

struct rps_pressure *rps_pressure_create(struct ev_loop *loop,
                                         const struct rps_pressure_config *cfg,
                                         rps_pressure_changed_fn changed, void *arg)
{
  struct rps_pressure *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->loop = loop;
  p->cfg = *cfg;
  p->changed = changed;
  p->arg = arg;
  sample_now(p);
  if (p->active)
    rp_log(RP_LOG_WARN, "starting under memory pressure: %s", p->reason);
  ev_timer_init(&p->timer, tick, cfg->interval, cfg->interval);
  p->timer.data = p;
  ev_timer_start(loop, &p->timer);
  return p;
}

void rps_pressure_destroy(struct rps_pressure *p)
{
  if (!p)
    return;
  ev_timer_stop(p->loop, &p->timer);
  free(p);
}

void rps_pressure_drain(struct rps_pressure *p)
{
  if (p->draining)
    return;
  p->draining = true;
  if (sample_now(p) && p->changed)
    p->changed(p->arg, p->active, p->reason);
}

bool rps_pressure_draining(const struct rps_pressure *p)
{
  return p->draining;
}
bool rps_pressure_active(const struct rps_pressure *p)
{
  return p->active;
}
const struct rps_pressure_sample *rps_pressure_last(const struct rps_pressure *p)
{
  return &p->sample;
}
const char *rps_pressure_reason(const struct rps_pressure *p)
{
  return p->reason;
}
