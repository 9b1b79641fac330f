/* rampart-engine-bench: the rampart engine alone (README.md). Starts its own rampartd
 * cluster, opens the engine in this process, fills the device, then for each test
 * (random 4 KiB writes and reads at each queue depth) measures IOPS, latency, and what
 * every process spent per request and per page on the wire, beside rampart-floor's
 * figures from the same run. Stops every process it started, by PID. */
#include "engine_bench.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wire.h"

#define MAX_SETTINGS 32
#define MAX_QDS 8
#define WIRE_FRAME_BYTES (RP_HEADER_SIZE + RAMPART_PAGE_SIZE) /* as the engine counts */

struct options {
  double seconds;
  unsigned qds[MAX_QDS], nqd;
  bool writes, reads;
  unsigned servers;
  const char *memory, *size, *span;
  const char *settings[MAX_SETTINGS]; /* KEY=VALUE, after the defaults */
  unsigned nsettings;
  unsigned settle;
  unsigned kill; /* servers killed at once after the tests, for the rebuild's time */
  bool floor, mlock;
  const char *tsv;
};

static const char usage[] =
  "usage: rampart-engine-bench [--seconds S] [--qd LIST] [--tests rw,rr] [--servers N]\n"
  "         [--memory SIZE] [--size SIZE] [--span SIZE] [--set KEY=VALUE]... [--settle S]\n"
  "         [--kill N] [--no-floor] [--no-mlock] [--tsv FILE]\n"
  "  --seconds S      seconds per test (default 5)\n"
  "  --qd LIST        queue depths (default 1,32)\n"
  "  --tests LIST     rw (random writes), rr (random reads), or both (default rw,rr)\n"
  "  --servers N      rampartd processes (default 5; parity-log 4+1)\n"
  "  --memory SIZE    each server lends (default 512M)\n"
  "  --size SIZE      device size (default 1G)\n"
  "  --span SIZE      the part of the device filled first and then tested (default 256M)\n"
  "  --set KEY=VALUE  an engine setting (rampart_config_help), after the defaults:\n"
  "                   redundancy=parity-log group=4 (sealing and frame tags are on)\n"
  "  --settle S       before each test, wait up to S s for cleaning to finish (default 15)\n"
  "  --kill N         after the tests, SIGKILL N servers at once and time the rebuild\n"
  "  --no-floor       do not run rampart-floor (no '× floor' figures)\n"
  "  --no-mlock       do not lock memory (rampart-ublk locks it, as deployed)\n"
  "  --tsv FILE       also write one line per test (and the floor's lines) to FILE\n"
  "Programs: $RAMPARTD, $RAMPARTCTL and $RAMPART_FLOOR, else those of this build tree\n"
  "(server/rampartd, tools/rampartctl, bench/floor/rampart-floor), else PATH.\n";

static struct bench_cluster cluster; /* global: the signal handler stops it */

static void on_signal(int sig)
{
  for (unsigned i = 0; i < cluster.n; i++)
    if (cluster.pid[i] > 0)
      kill(cluster.pid[i], SIGTERM);
  _exit(128 + sig);
}

static int parse_qds(const char *v, struct options *o)
{
  o->nqd = 0;
  for (const char *p = v; *p && o->nqd < MAX_QDS;) {
    char *end;
    long qd = strtol(p, &end, 10);
    if (qd < 1 || qd > (long)BENCH_MAX_QD || end == p) {
      fprintf(stderr, "engine-bench: --qd %s: depths of 1 to %u\n", v, BENCH_MAX_QD);
      return -1;
    }
    o->qds[o->nqd++] = (unsigned)qd;
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

/* An option that takes the next argument as its value: 0 when set, -1 when the value is
 * refused (said on stderr), 1 when the option is not one of these. */
static int set_valued_option(const char *a, const char *v, struct options *o)
{
  if (!strcmp(a, "--seconds"))
    o->seconds = strtod(v, NULL);
  else if (!strcmp(a, "--qd"))
    return parse_qds(v, o);
  else if (!strcmp(a, "--tests")) {
    o->writes = strstr(v, "rw") != NULL;
    o->reads = strstr(v, "rr") != NULL;
  } else if (!strcmp(a, "--servers"))
    o->servers = (unsigned)strtoul(v, NULL, 10);
  else if (!strcmp(a, "--memory"))
    o->memory = v;
  else if (!strcmp(a, "--size"))
    o->size = v;
  else if (!strcmp(a, "--span"))
    o->span = v;
  else if (!strcmp(a, "--set")) {
    if (o->nsettings == MAX_SETTINGS || !strchr(v, '=')) {
      fprintf(stderr, "engine-bench: --set takes KEY=VALUE (at most %d)\n", MAX_SETTINGS);
      return -1;
    }
    o->settings[o->nsettings++] = v;
  } else if (!strcmp(a, "--settle"))
    o->settle = (unsigned)strtoul(v, NULL, 10);
  else if (!strcmp(a, "--kill"))
    o->kill = (unsigned)strtoul(v, NULL, 10);
  else if (!strcmp(a, "--tsv"))
    o->tsv = v;
  else
    return 1;
  return 0;
}

static int parse_options(int argc, char **argv, struct options *o)
{
  *o = (struct options){ .seconds = 5,
                         .qds = { 1, 32 },
                         .nqd = 2,
                         .writes = true,
                         .reads = true,
                         .servers = 5,
                         .memory = "512M",
                         .size = "1G",
                         .span = "256M",
                         .settle = 15,
                         .floor = true,
                         .mlock = true };
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      exit(0);
    } else if (!strcmp(a, "--no-floor")) {
      o->floor = false;
    } else if (!strcmp(a, "--no-mlock")) {
      o->mlock = false;
    } else if (!v) {
      fprintf(stderr, "engine-bench: unknown option or missing value: %s\n%s", a, usage);
      return -1;
    } else {
      int rc = set_valued_option(a, v, o);
      if (rc > 0)
        fprintf(stderr, "engine-bench: unknown option %s\n%s", a, usage);
      if (rc != 0)
        return -1;
      i++;
    }
  }
  if (!(o->seconds > 0) || o->servers < 1 || o->servers > BENCH_MAX_SERVERS ||
      (!o->writes && !o->reads) || o->kill >= o->servers) {
    fprintf(stderr,
            "engine-bench: --seconds > 0, --servers 1 to %u, --tests rw and/or rr, "
            "--kill fewer than --servers\n",
            BENCH_MAX_SERVERS);
    return -1;
  }
  return 0;
}

/* $ENV, else this build tree's program at `rel` (from this binary's directory), else
 * the name for PATH. */
static const char *find_program(const char *env, const char *rel, const char *name, char *buf,
                                size_t buflen)
{
  const char *v = getenv(env);
  if (v && *v)
    return v;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = 0;
      if ((size_t)snprintf(buf, buflen, "%s/%s", self, rel) < buflen &&
          access(buf, X_OK) == 0)
        return buf;
    }
  }
  return name;
}

/* ---- the floor ---- */
struct floor_row {
  bool have;
  double wall_us, client_us, server_us;
};
static struct floor_row floor_rows[2][2]; /* [write?][qd32?]: QD1 and QD32 only */

static struct floor_row *floor_for(bool write, unsigned qd)
{
  if (qd != 1 && qd != 32)
    return NULL;
  struct floor_row *r = &floor_rows[write][qd == 32];
  return r->have ? r : NULL;
}

static void run_floor(const char *floor, double seconds, FILE *tsv)
{
  char cmd[PATH_MAX + 128];
  snprintf(cmd, sizeof cmd, "'%s' --tsv --qd 32,1 --form both --seconds %.3f", floor,
           seconds);
  fprintf(stderr, "engine-bench: the floor: %s\n", cmd);
  FILE *p = popen(cmd, "r");
  char line[512];
  while (p && fgets(line, sizeof line, p)) {
    if (tsv)
      fputs(line, tsv);
    char form[16];
    unsigned qd;
    unsigned long long pages;
    double secs, wall, cu, su;
    if (sscanf(line, "floor\t%15s\t%u\t%llu\t%lf\t%lf\t%lf\t%lf", form, &qd, &pages, &secs,
               &wall, &cu, &su) != 7 ||
        (qd != 1 && qd != 32))
      continue;
    floor_rows[!strcmp(form, "write")][qd == 32] =
      (struct floor_row){ .have = true, .wall_us = wall, .client_us = cu, .server_us = su };
  }
  if (!p || pclose(p) != 0)
    fprintf(stderr,
            "engine-bench: warning: %s failed: no '× floor' figures (build it: "
            "cmake --build build --target rampart-floor, or set RAMPART_FLOOR)\n",
            floor);
}

/* ---- the engine ---- */
static void log_sink(int level, const char *line)
{
  if (level <= 1) /* errors and warnings */
    fprintf(stderr, "engine: %s\n", line);
}

static int set(struct rampart_config *c, const char *key, const char *value)
{
  char err[256];
  if (rampart_config_set(c, key, value, err, sizeof err) < 0) {
    fprintf(stderr, "engine-bench: %s=%s: %s\n", key, value, err);
    return -1;
  }
  return 0;
}

static struct rampart_engine *open_engine(const struct options *o)
{
  struct rampart_config *c = rampart_config_new();
  char servers[BENCH_MAX_SERVERS * 64], err[512];
  bench_cluster_servers(&cluster, servers, sizeof servers);
  int r = set(c, "size", o->size) | set(c, "servers", servers) | set(c, "key", cluster.key) |
          set(c, "redundancy", "parity-log") | set(c, "group", "4");
  for (unsigned i = 0; r == 0 && i < o->nsettings; i++) {
    char key[64];
    const char *eq = strchr(o->settings[i], '=');
    snprintf(key, sizeof key, "%.*s", (int)(eq - o->settings[i]), o->settings[i]);
    r = set(c, key, eq + 1);
  }
  struct rampart_engine *e = NULL;
  if (r == 0 && rampart_config_check(c, err, sizeof err) < 0)
    fprintf(stderr, "engine-bench: %s\n", err);
  else if (r == 0 && !(e = rampart_open(c, err, sizeof err)))
    fprintf(stderr, "engine-bench: cannot open the engine: %s\n", err);
  rampart_config_free(c);
  return e;
}

static uint64_t moves_started(const struct rampart_stats *st)
{
  uint64_t n = 0;
  for (unsigned r = 0; r < RAMPART_MOVE_REASONS; r++)
    n += st->moves_by_reason[r];
  return n;
}

static void sleep_ms(unsigned ms)
{
  struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

/* Waits (at most `limit` s) for the engine's mover to go quiet: nothing cleaning, no
 * move in flight, and the same count of moves started half a second apart. */
static double settle(struct rampart_engine *e, unsigned limit, bool *quiet)
{
  static struct rampart_stats st;
  uint64_t last = UINT64_MAX;
  *quiet = false;
  unsigned t;
  for (t = 0; t < limit * 4; t++) {
    rampart_get_stats(e, &st);
    uint64_t moves = moves_started(&st);
    if (!st.cleaning && st.moves_in_flight == 0 && moves == last) {
      *quiet = true;
      break;
    }
    last = moves;
    sleep_ms(250);
  }
  return t * 0.25;
}

static double rusage_cpu_us(const struct rusage *u)
{
  return (double)u->ru_utime.tv_sec * 1e6 + (double)u->ru_utime.tv_usec +
         (double)u->ru_stime.tv_sec * 1e6 + (double)u->ru_stime.tv_usec;
}

/* ---- one test and its report line ---- */
struct test_figures {
  bool write;
  unsigned qd;
  struct bench_load_result load;
  double wire_pages;   /* as the engine counts them */
  double server_pages; /* as the servers count them (STAT), or -1 */
  double engine_us, engine_cs, servers_us, servers_cs; /* totals over the test */
  uint64_t cleaned, moves;
  double settle_s;
  bool settled;
};

static int run_test(struct rampart_engine *e, struct bench_load *l, const struct options *o,
                    bool write, unsigned qd, struct test_figures *f)
{
  static struct rampart_stats s0, s1;
  struct bench_servers_sample ops0, ops1, srv0, srv1;
  struct rusage u0, u1;
  memset(f, 0, sizeof *f);
  f->write = write;
  f->qd = qd;
  f->settle_s = settle(e, o->settle, &f->settled);
  bench_cluster_sample(&cluster, true, &ops0);
  rampart_get_stats(e, &s0);
  bench_cluster_sample(&cluster, false, &srv0);
  getrusage(RUSAGE_SELF, &u0);
  int r = bench_load_run(l, write, qd, o->seconds, &f->load);
  getrusage(RUSAGE_SELF, &u1);
  bench_cluster_sample(&cluster, false, &srv1);
  rampart_get_stats(e, &s1);
  bench_cluster_sample(&cluster, true, &ops1);
  if (r < 0) {
    fprintf(stderr, "engine-bench: a %s failed: %s\n", write ? "write" : "read",
            strerror(-r));
    return -1;
  }
  f->engine_us = rusage_cpu_us(&u1) - rusage_cpu_us(&u0);
  f->engine_cs = (double)(u1.ru_nvcsw - u0.ru_nvcsw + u1.ru_nivcsw - u0.ru_nivcsw);
  f->servers_us = srv1.cpu_us - srv0.cpu_us;
  f->servers_cs = (double)(srv1.switches - srv0.switches);
  f->moves = moves_started(&s1) - moves_started(&s0);
  f->cleaned = s1.groups_cleaned - s0.groups_cleaned;
  /* Pages on the wire as the engine counts them: every page it wrote (the frontend's,
   * parity, moves'), every page a read asked for, and one read per page it moved. */
  f->wire_pages = (double)(s1.wire_bytes_written - s0.wire_bytes_written) / WIRE_FRAME_BYTES +
                  (write ? 0 : (double)f->load.requests) + (double)f->moves;
  f->server_pages = ops0.ops_known && ops1.ops_known
                      ? (double)(ops1.ops_pages - ops0.ops_pages)
                      : -1;
  return 0;
}

/* What the servers hold per live page, once the tests are done: live data, parity and
 * the old versions cleaning has not yet reclaimed, over the pages the map points at. */
static void print_server_memory(struct rampart_engine *e)
{
  static struct rampart_stats st; /* static: the server table is large */
  rampart_get_stats(e, &st);
  uint64_t stored = 0, live = 0;
  for (uint32_t i = 0; i < st.nservers; i++) {
    stored += st.servers[i].pages_stored;
    live += st.servers[i].pages_live;
  }
  printf("Server memory: %.3f pages stored per live page (%llu stored, %llu live; group %u, "
         "parity %u).\n",
         live ? (double)stored / (double)live : 0.0, (unsigned long long)stored,
         (unsigned long long)live, st.group_size, st.parity);
}

/* N servers, spread over the cluster, killed with one SIGKILL each back to back; then
 * waits until the engine has declared them lost and rebuilt what they held, and prints
 * its own rebuild figures (from the first server declared lost, a lease after its
 * kill, to the end). */
static void time_rebuild(struct rampart_engine *e, unsigned n)
{
  static struct rampart_stats st;
  rampart_get_stats(e, &st);
  uint32_t finished = st.rebuilds_finished;
  for (unsigned k = 0; k < n; k++) {
    unsigned i = k * cluster.n / n;
    kill(cluster.pid[i], SIGKILL);
    waitpid(cluster.pid[i], NULL, 0);
    cluster.pid[i] = 0;
  }
  for (unsigned t = 0; t < 1200; t++) { /* 5 minutes */
    sleep_ms(250);
    rampart_get_stats(e, &st);
    if (st.rebuilds_finished > finished && !st.rebuild_running &&
        st.rebuild_pages_pending == 0)
      break;
  }
  printf("Rebuild after %u of %u servers killed at once: %llu pages in %.2f s from the "
         "first declared lost to the end; %llu pages lost, %llu read errors.\n",
         n, cluster.n, (unsigned long long)st.rebuild_pages_moved, st.rebuild_seconds,
         (unsigned long long)st.pages_lost, (unsigned long long)st.read_errors);
}

static void print_ratio(char *out, size_t len, double v, double floor)
{
  if (floor > 0)
    snprintf(out, len, "%.2f (%.1f×)", v, v / floor);
  else
    snprintf(out, len, "%.2f", v);
}

static void report_test(const struct test_figures *f, FILE *tsv)
{
  double req = f->load.requests ? (double)f->load.requests : 1;
  double pages = f->wire_pages > 0 ? f->wire_pages : 1;
  const struct floor_row *fl = floor_for(f->write, f->qd);
  double e_page = f->engine_us / pages, s_page = f->servers_us / pages;
  char e_cell[64], s_cell[64], t_cell[64];
  print_ratio(e_cell, sizeof e_cell, e_page, fl ? fl->client_us : 0);
  print_ratio(s_cell, sizeof s_cell, s_page, fl ? fl->server_us : 0);
  print_ratio(t_cell, sizeof t_cell, e_page + s_page, fl ? fl->client_us + fl->server_us : 0);
  char srv_pages[32] = "-";
  if (f->server_pages >= 0)
    snprintf(srv_pages, sizeof srv_pages, "%.2f", f->server_pages / req);
  printf("| %s QD%u | %.0f | %.1f | %.1f | %.2f (%s) | %.1f | %.1f | %s | %s | **%s** | %.2f "
         "| %.2f | %llu |\n",
         f->write ? "randwrite" : "randread", f->qd,
         (double)f->load.requests / f->load.seconds, f->load.p50_us, f->load.p99_us,
         f->wire_pages / req, srv_pages, f->engine_us / req, f->servers_us / req, e_cell,
         s_cell, t_cell, f->engine_cs / req, f->servers_cs / pages,
         (unsigned long long)f->moves);
  fflush(stdout);
  if (tsv)
    fprintf(tsv,
            "engine\t%s\t%u\t%llu\t%.3f\t%.0f\t%.1f\t%.1f\t%.1f\t%.3f\t%.3f\t%.2f\t%.2f\t%."
            "3f\t%.3f\t%.3f"
            "\t%.4f\t%.4f\t%.3f\t%.3f\t%.3f\t%llu\t%llu\n",
            f->write ? "randwrite" : "randread", f->qd, (unsigned long long)f->load.requests,
            f->load.seconds, (double)f->load.requests / f->load.seconds, f->load.mean_us,
            f->load.p50_us, f->load.p99_us, f->wire_pages / req,
            f->server_pages >= 0 ? f->server_pages / req : -1.0, f->engine_us / req,
            f->servers_us / req, e_page, s_page, e_page + s_page, f->engine_cs / req,
            f->servers_cs / pages, fl ? e_page / fl->client_us : -1.0,
            fl ? s_page / fl->server_us : -1.0,
            fl ? (e_page + s_page) / (fl->client_us + fl->server_us) : -1.0,
            (unsigned long long)f->moves, (unsigned long long)f->cleaned);
}

static void print_floor_table(void)
{
  printf(
    "The floor (rampart-floor, same run), per page: client and server CPU µs, wall µs.\n\n");
  printf("| floor | client µs | server µs | total µs | wall µs |\n| --- | ---: | ---: | ---: "
         "| ---: |\n");
  for (int w = 1; w >= 0; w--)
    for (int q = 1; q >= 0; q--) {
      const struct floor_row *r = &floor_rows[w][q];
      if (r->have)
        printf("| %s QD%d | %.2f | %.2f | %.2f | %.2f |\n", w ? "write" : "read", q ? 32 : 1,
               r->client_us, r->server_us, r->client_us + r->server_us, r->wall_us);
    }
  printf("\n");
}

static int parse_size(const char *text, uint64_t *bytes)
{
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  uint64_t mult = *end == 'G'   ? 1u << 30
                  : *end == 'M' ? 1u << 20
                  : *end == 'K' ? 1u << 10
                                : 1;
  *bytes = v * mult;
  return v > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
  struct options o;
  if (parse_options(argc, argv, &o) < 0)
    return 2;
  uint64_t span_bytes = 0, size_bytes = 0;
  if (parse_size(o.span, &span_bytes) < 0 || parse_size(o.size, &size_bytes) < 0 ||
      span_bytes > size_bytes || span_bytes < RAMPART_PAGE_SIZE) {
    fprintf(stderr, "engine-bench: --span must be at most --size (sizes like 256M, 1G)\n");
    return 2;
  }
  char b1[PATH_MAX], b2[PATH_MAX], b3[PATH_MAX];
  const char *rampartd = find_program("RAMPARTD", "../../server/rampartd", "rampartd", b1,
                                      sizeof b1);
  cluster.rampartctl = find_program("RAMPARTCTL", "../../tools/rampartctl", "rampartctl", b2,
                                    sizeof b2);
  const char *floor = find_program("RAMPART_FLOOR", "../floor/rampart-floor", "rampart-floor",
                                   b3, sizeof b3);
  FILE *tsv = NULL;
  if (o.tsv && !(tsv = fopen(o.tsv, "w"))) {
    fprintf(stderr, "engine-bench: cannot write %s: %s\n", o.tsv, strerror(errno));
    return 1;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  rampart_set_log_sink(log_sink);
  if (o.floor)
    run_floor(floor, o.seconds, tsv);

  char err[512];
  fprintf(stderr, "engine-bench: %u x %s --memory %s\n", o.servers, rampartd, o.memory);
  if (bench_cluster_start(&cluster, o.servers, rampartd, o.memory, err, sizeof err) < 0) {
    fprintf(stderr, "engine-bench: %s\n", err);
    return 1;
  }
  if (o.mlock)
    rampart_process_harden(true);
  struct rampart_engine *e = open_engine(&o);
  struct bench_load *l = e ? bench_load_new(e, span_bytes / RAMPART_PAGE_SIZE) : NULL;
  int status = 1;
  if (!l)
    goto out;
  fprintf(stderr, "engine-bench: filling %s of the %s device\n", o.span, o.size);
  int r = bench_load_prefill(l);
  if (r < 0) {
    fprintf(stderr, "engine-bench: the fill failed: %s\n", strerror(-r));
    goto out;
  }
  printf("# rampart engine alone (bench/engine)\n\n");
  printf("One thread submits as rampart-ublk's queue thread does and waits %s, in the\n"
         "process that runs the engine; %u rampartd on loopback; parity-log 4+1, pages "
         "sealed, frames tagged;\n"
         "device %s, %s of it filled and then tested; %.1f s per test.%s\n\n",
         getenv("RAMPART_BENCH_EVENTFD") ? "on an eventfd (RAMPART_BENCH_EVENTFD)"
                                         : "in rampart_reap (reading its replies itself)",
         o.servers, o.size, o.span, o.seconds, o.mlock ? " Memory locked, as deployed." : "");
  if (o.nsettings) {
    printf("Settings added:");
    for (unsigned i = 0; i < o.nsettings; i++)
      printf(" %s", o.settings[i]);
    printf("\n\n");
  }
  if (o.floor)
    print_floor_table();
  printf(
    "Per request (req) and per page on the wire (page: as the engine counts them, every "
    "page\n"
    "written, parity and moves included, every page read, one read per page moved; the\n"
    "servers' own count of pages taken and given in brackets). CPU: the engine process\n"
    "(getrusage, all threads) and the rampartd processes (summed, /proc/PID/stat); × the\n"
    "floor's client, server and total per page at the same form and depth. cs: context\n"
    "switches (engine: per request; servers: per page).\n\n");
  printf("| test | IOPS | p50 µs | p99 µs | wire pages/req (servers) | engine µs/req | "
         "servers µs/req "
         "| engine µs/page (× floor) | servers µs/page (× floor) | total µs/page (× floor) "
         "| engine cs/req | servers cs/page | pages moved |\n");
  printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
         "| ---: |\n");
  if (tsv)
    fprintf(
      tsv, "# engine\ttest\tqd\trequests\tseconds\tiops\tmean_us\tp50_us\tp99_us\t"
           "wire_pages_per_req\tserver_pages_per_req\tengine_us_per_req\tservers_us_per_req\t"
           "engine_us_per_page\tservers_us_per_page\ttotal_us_per_page\tengine_cs_per_req\t"
           "servers_cs_per_page\tengine_x_floor\tservers_x_floor\ttotal_x_"
           "floor\tmoves\tcleaned\n");
  char notes[2048] = "";
  size_t nl = 0;
  for (int pass = 0; pass < 2; pass++) {
    bool write = pass == 0;
    if ((write && !o.writes) || (!write && !o.reads))
      continue;
    for (unsigned k = 0; k < o.nqd; k++) {
      struct test_figures f;
      fprintf(stderr, "engine-bench: %s QD%u\n", write ? "randwrite" : "randread", o.qds[k]);
      if (run_test(e, l, &o, write, o.qds[k], &f) < 0)
        goto out;
      report_test(&f, tsv);
      if (!f.settled && nl < sizeof notes)
        nl += (size_t)snprintf(
          notes + nl, sizeof notes - nl,
          "- before %s QD%u the engine was still moving pages after %u s\n",
          write ? "randwrite" : "randread", o.qds[k], o.settle);
    }
  }
  printf("\n%s", notes);
  print_server_memory(e);
  if (o.kill)
    time_rebuild(e, o.kill);
  status = 0;
out:
  bench_load_free(l);
  if (e)
    rampart_close(e);
  bench_cluster_stop(&cluster);
  if (tsv)
    fclose(tsv);
  return status;
}
