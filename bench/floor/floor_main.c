/* rampart-floor: the floor of CPU per page (README.md). Forks a server, connects to it
 * over loopback TCP, and measures each form (write, read) at each queue depth: wall
 * time, each process's CPU and context switches (getrusage at marks both sides agree
 * on), and the syscalls each made, per page. */
#include "floor.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum output { OUT_TABLE, OUT_TSV, OUT_JSON };

struct options {
  unsigned qds[16];
  unsigned nqd;
  double seconds;
  bool forms[2];
  uint64_t store_pages;
  enum output output;
};

static const char usage[] =
  "usage: rampart-floor [--qd LIST] [--seconds S] [--form write|read|both]\n"
  "                     [--store-pages N] [--tsv | --json]\n"
  "  --qd LIST         queue depths, comma-separated (default 32,1; at most 1024)\n"
  "  --seconds S       measured seconds per form and depth (default 2)\n"
  "  --form F          write, read or both (default both)\n"
  "  --store-pages N   pages the server holds (default 16384: 64 MiB)\n"
  "  --tsv             one tab-separated line per form and depth (a '#' header first)\n"
  "  --json            one JSON object per form and depth, one a line\n";

static int parse_options(int argc, char **argv, struct options *o)
{
  *o = (struct options){
    .qds = { 32, 1 }, .nqd = 2, .seconds = 2, .forms = { true, true }, .store_pages = 16384
  };
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--tsv")) {
      o->output = OUT_TSV;
    } else if (!strcmp(a, "--json")) {
      o->output = OUT_JSON;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      exit(0);
    } else if (!v) {
      fprintf(stderr, "rampart-floor: unknown option or missing value: %s\n%s", a, usage);
      return -1;
    } else if (!strcmp(a, "--qd")) {
      o->nqd = 0;
      char *copy = strdup(v), *save = NULL;
      for (char *t = strtok_r(copy, ",", &save); t && o->nqd < 16;
           t = strtok_r(NULL, ",", &save)) {
        long qd = strtol(t, NULL, 10);
        if (qd < 1 || qd > (long)FLOOR_MAX_QD) {
          fprintf(stderr, "rampart-floor: --qd %s: each depth is 1 to %u\n", v, FLOOR_MAX_QD);
          free(copy);
          return -1;
        }
        o->qds[o->nqd++] = (unsigned)qd;
      }
      free(copy);
      i++;
    } else if (!strcmp(a, "--seconds")) {
      o->seconds = strtod(v, NULL);
      if (!(o->seconds > 0)) {
        fprintf(stderr, "rampart-floor: --seconds takes a positive number\n");
        return -1;
      }
      i++;
    } else if (!strcmp(a, "--form")) {
      o->forms[FLOOR_WRITE] = !strcmp(v, "write") || !strcmp(v, "both");
      o->forms[FLOOR_READ] = !strcmp(v, "read") || !strcmp(v, "both");
      if (!o->forms[FLOOR_WRITE] && !o->forms[FLOOR_READ]) {
        fprintf(stderr, "rampart-floor: --form takes write, read or both\n");
        return -1;
      }
      i++;
    } else if (!strcmp(a, "--store-pages")) {
      o->store_pages = strtoull(v, NULL, 10);
      if (o->store_pages < FLOOR_MAX_QD) {
        fprintf(stderr, "rampart-floor: --store-pages takes at least %u\n", FLOOR_MAX_QD);
        return -1;
      }
      i++;
    } else {
      fprintf(stderr, "rampart-floor: unknown option %s\n%s", a, usage);
      return -1;
    }
  }
  return 0;
}

static double cpu_us(const struct rusage *a, const struct rusage *b)
{
  double us = 0;
  us += (double)(b->ru_utime.tv_sec - a->ru_utime.tv_sec) * 1e6 +
        (double)(b->ru_utime.tv_usec - a->ru_utime.tv_usec);
  us += (double)(b->ru_stime.tv_sec - a->ru_stime.tv_sec) * 1e6 +
        (double)(b->ru_stime.tv_usec - a->ru_stime.tv_usec);
  return us;
}

static double switches(const struct rusage *a, const struct rusage *b)
{
  return (double)(b->ru_nvcsw - a->ru_nvcsw + b->ru_nivcsw - a->ru_nivcsw);
}

/* One run's figures per page. */
struct per_page {
  double wall_us, client_us, server_us, client_cs, server_cs, client_sys, server_sys, rate;
};

static struct per_page per_page(const struct floor_result *r, const struct floor_shared *sh)
{
  double n = r->pages ? (double)r->pages : 1;
  const struct floor_mark *c = r->client, *s = sh->server;
  return (struct per_page){
    .wall_us = r->seconds * 1e6 / n,
    .client_us = cpu_us(&c[0].usage, &c[1].usage) / n,
    .server_us = cpu_us(&s[0].usage, &s[1].usage) / n,
    .client_cs = switches(&c[0].usage, &c[1].usage) / n,
    .server_cs = switches(&s[0].usage, &s[1].usage) / n,
    .client_sys = (double)(c[1].syscalls - c[0].syscalls) / n,
    .server_sys = (double)(s[1].syscalls - s[0].syscalls) / n,
    .rate = (double)r->pages / r->seconds,
  };
}

static void print_header(enum output out)
{
  if (out == OUT_TSV)
    printf("# floor\tform\tqd\tpages\tseconds\twall_us\tclient_us\tserver_us\tclient_cs\t"
           "server_cs\tclient_syscalls\tserver_syscalls\tpages_per_s\n");
  else if (out == OUT_TABLE)
    printf(
      "per page        | wall us | client us | server us | total us | client cs | server cs "
      "| client sys | server sys |  pages/s\n");
}

static void print_result(enum output out, const struct floor_result *r,
                         const struct per_page *p)
{
  const char *form = r->form == FLOOR_WRITE ? "write" : "read";
  switch (out) {
  case OUT_TSV:
    printf("floor\t%s\t%u\t%llu\t%.3f\t%.3f\t%.3f\t%.3f\t%.4f\t%.4f\t%.3f\t%.3f\t%.0f\n",
           form, r->qd, (unsigned long long)r->pages, r->seconds, p->wall_us, p->client_us,
           p->server_us, p->client_cs, p->server_cs, p->client_sys, p->server_sys, p->rate);
    break;
  case OUT_JSON:
    printf("{\"form\":\"%s\",\"qd\":%u,\"pages\":%llu,\"seconds\":%.3f,\"wall_us\":%.3f,"
           "\"client_us\":%.3f,\"server_us\":%.3f,\"client_cs\":%.4f,\"server_cs\":%.4f,"
           "\"client_syscalls\":%.3f,\"server_syscalls\":%.3f,\"pages_per_s\":%.0f}\n",
           form, r->qd, (unsigned long long)r->pages, r->seconds, p->wall_us, p->client_us,
           p->server_us, p->client_cs, p->server_cs, p->client_sys, p->server_sys, p->rate);
    break;
  case OUT_TABLE:
    printf("%-5s QD%-4u    | %7.2f | %9.2f | %9.2f | %8.2f | %9.3f | %9.3f | %10.3f | %10.3f "
           "| %8.0f\n",
           form, r->qd, p->wall_us, p->client_us, p->server_us, p->client_us + p->server_us,
           p->client_cs, p->server_cs, p->client_sys, p->server_sys, p->rate);
    break;
  }
  fflush(stdout);
}

static int measure(const struct options *o, int fd, const struct rp_session_keys *keys,
                   struct floor_shared *shared)
{
  char err[256] = "";
  struct floor_client *c = floor_client_new(fd, keys, o->store_pages);
  if (!c) {
    fprintf(stderr, "rampart-floor: cannot set up the client (memory or OpenSSL)\n");
    return -1;
  }
  int r = 0;
  if (o->forms[FLOOR_READ] && floor_client_prefill(c, err, sizeof err) < 0)
    r = -1;
  print_header(o->output);
  for (int form = FLOOR_WRITE; r == 0 && form <= FLOOR_READ; form++) {
    if (!o->forms[form])
      continue;
    for (unsigned k = 0; r == 0 && k < o->nqd; k++) {
      struct floor_result res;
      if (floor_client_run(c, (enum floor_form)form, o->qds[k], o->seconds, &res, err,
                           sizeof err) < 0) {
        r = -1;
        break;
      }
      struct per_page p = per_page(&res, shared);
      print_result(o->output, &res, &p);
    }
  }
  if (r == 0 && floor_client_goodbye(c) < 0) {
    snprintf(err, sizeof err, "GOODBYE was not answered");
    r = -1;
  }
  if (r < 0)
    fprintf(stderr, "rampart-floor: %s%s%s\n", err, shared->error[0] ? "; " : "",
            shared->error);
  floor_client_free(c);
  return r;
}

int main(int argc, char **argv)
{
  struct options o;
  if (parse_options(argc, argv, &o) < 0)
    return 2;
  char err[256];
  struct rp_session_keys keys;
  if (rp_random_bytes((uint8_t *)&keys, sizeof keys) < 0) {
    fprintf(stderr, "rampart-floor: getrandom failed\n");
    return 1;
  }
  struct floor_shared *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  uint16_t port = 0;
  int listen_fd = shared == MAP_FAILED ? -1 : floor_listen(&port, err, sizeof err);
  if (listen_fd < 0) {
    fprintf(stderr, "rampart-floor: %s\n", shared == MAP_FAILED ? "mmap failed" : err);
    return 1;
  }
  memset(shared, 0, sizeof *shared);
  fflush(stdout);
  pid_t server = fork();
  if (server < 0) {
    fprintf(stderr, "rampart-floor: fork: %s\n", strerror(errno));
    return 1;
  }
  if (server == 0) {
    int fd = floor_accept(listen_fd, err, sizeof err);
    close(listen_fd);
    if (fd < 0) {
      snprintf(shared->error, sizeof shared->error, "server: %.200s", err);
      _exit(1);
    }
    _exit(floor_serve(fd, &keys, o.store_pages, shared) < 0 ? 1 : 0);
  }
  close(listen_fd);
  int fd = floor_connect(port, err, sizeof err);
  int r = fd < 0 ? -1 : measure(&o, fd, &keys, shared);
  if (fd < 0)
    fprintf(stderr, "rampart-floor: %s\n", err);
  if (fd >= 0)
    close(fd);
  if (r < 0)
    kill(server, SIGTERM); /* it may wait on a connection that will say nothing more */
  int status = 0;
  waitpid(server, &status, 0);
  if (r == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    fprintf(stderr, "rampart-floor: the server process failed: %s\n", shared->error);
    r = -1;
  }
  return r < 0 ? 1 : 0;
}
