/* rampartctl: the operator's tool for rampart memory servers.
 *
 *   rampartctl keygen FILE                      make a cluster key
 *   rampartctl stat HOST:PORT [--key FILE] [--json]
 *   rampartctl bench HOST:PORT [--key FILE] [--pages N] [--depth D]
 *   rampartctl device STATS-FILE
 *   rampartctl device SOCKET [servers|add A|drain A|remove A|reload]  (device_control.c)
 *   rampartctl swap on|off|status ...         (runs rampart-swap)
 *   rampartctl notify-listen SOCKET           (notify_listen.c)
 *
 * Exit status: 0 success, 1 the operation failed (connection, authentication, server
 * refusal, data mismatch), 2 the command line was wrong.
 */
#include <ev.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <errno.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "client.h"
#include "clock.h"
#include "cluster_list.h"
#include "device_control.h"
#include "notify_listen.h"
#include "parse.h"

#define EXIT_USAGE 2
#define DEFAULT_BENCH_PAGES 10000u
#define DEFAULT_BENCH_DEPTH 32u
#define MAX_BENCH_DEPTH 4096u

static const char USAGE[] =
  "usage: rampartctl COMMAND ...\n"
  "\n"
  "commands:\n"
  "  keygen FILE                 write a new random cluster key to FILE (mode 0600);\n"
  "                              give it to every rampartd (--key) and client\n"
  "  stat HOST:PORT [--key FILE] [--json]\n"
  "                              print a server's counters\n"
  "  bench HOST:PORT [--key FILE] [--pages N] [--depth D]\n"
  "                              write N pages (default 10000) with D requests in flight\n"
  "                              (default 32), read them back verifying every byte, free\n"
  "                              them; print pages/s, MiB/s and server memory per page\n"
  "  device STATS-FILE           show a running device's engine stats (pages per server,\n"
  "                              groups, degraded and lost pages, rebuild, spill), as\n"
  "                              written by 'nbdkit rampart ... stats-file=STATS-FILE'\n"
  "  device SOCKET [servers]     a running device's servers, through its control=SOCKET\n"
  "  device SOCKET add HOST:PORT one more server for the running device\n"
  "  device SOCKET drain HOST:PORT [--no-wait]\n"
  "                              move every page off a server (progress and ETA until\n"
  "                              done); refused, saying what is missing, when the others\n"
  "                              cannot hold them\n"
  "  device SOCKET remove HOST:PORT [--no-wait]\n"
  "                              drain, then forget the server\n"
  "  device SOCKET reload        read the device's cluster= file again: add the servers\n"
  "                              new there, remove those no longer listed\n"
  "  cluster ETCD-URL,... NAME [--etcd-cacert F --etcd-cert F --etcd-key F]\n"
  "                              the servers registered in etcd for cluster NAME\n"
  "                              (rampartd --etcd): address, failure domain, capacity,\n"
  "                              free memory, pressure, draining, devices using each\n"
  "  swap on|off|status ...      attach a rampart device as swap, or take it away\n"
  "                              (runs rampart-swap; 'rampartctl swap --help' for more)\n"
  "  notify-listen SOCKET        receive daemons' sd_notify messages (READY=1, ...) on\n"
  "                              SOCKET and print each line as 'PID KEY=VALUE', the\n"
  "                              sender's pid from the kernel (rampart-swap runs the\n"
  "                              same listener in a fork)\n"
  "\n"
  "options:\n"
  "  --key FILE   the cluster key the server was started with (none: keyless server)\n"
  "  --json       machine-readable output (stat)\n"
  "  -h, --help   this text\n"
  "\n"
  "exit status: 0 ok, 1 the operation failed, 2 bad command line\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
  fprintf(stderr, "rampartctl: ");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(run 'rampartctl --help' for usage)\n");
  return EXIT_USAGE;
}

struct common_args {
  char host[256];
  char port[16];
  const char *key_path;
  bool json;
  uint64_t pages;
  uint64_t depth;
};

/* Parses HOST:PORT and the options a command accepts. Returns 0 or an exit status. */
static int parse_common(int argc, char **argv, const char *cmd, bool bench,
                        struct common_args *a)
{
  memset(a, 0, sizeof *a);
  a->pages = DEFAULT_BENCH_PAGES;
  a->depth = DEFAULT_BENCH_DEPTH;
  const char *addr = NULL;
  char err[256];
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(arg, "--key") == 0) {
      if (!val)
        return usage_error("%s needs a FILE", arg);
      a->key_path = val;
      i++;
    } else if (!bench && strcmp(arg, "--json") == 0) {
      a->json = true;
    } else if (bench && (strcmp(arg, "--pages") == 0 || strcmp(arg, "--depth") == 0)) {
      if (!val)
        return usage_error("%s needs a number", arg);
      bool pages = strcmp(arg, "--pages") == 0;
      uint64_t v;
      if (rp_parse_uint(arg, val, pages ? RP_MAX_SLOT : MAX_BENCH_DEPTH, &v, err,
                        sizeof err) < 0)
        return usage_error("%s", err);
      if (v == 0)
        return usage_error("%s must be at least 1", arg);
      if (pages)
        a->pages = v;
      else
        a->depth = v;
      i++;
    } else if (arg[0] == '-' && arg[1] != '\0') {
      return usage_error("%s: unknown option '%s'", cmd, arg);
    } else if (!addr) {
      addr = arg;
    } else {
      return usage_error("unexpected argument '%s'", arg);
    }
  }
  if (!addr)
    return usage_error("%s needs the server's address: rampartctl %s HOST:PORT", cmd, cmd);
  if (rp_parse_hostport(addr, a->host, sizeof a->host, a->port, sizeof a->port, err,
                        sizeof err) < 0)
    return usage_error("%s", err);
  return 0;
}

static struct rp_conn *connect_to(const struct common_args *a, struct rp_key *key,
                                  struct rp_session_info *info)
{
  char err[512];
  if (a->key_path && rp_key_load(a->key_path, key, err, sizeof err) < 0) {
    fprintf(stderr, "rampartctl: %s\n", err);
    return NULL;
  }
  struct rp_conn_options o;
  memset(&o, 0, sizeof o);
  o.host = a->host;
  o.port = a->port;
  o.key = a->key_path ? key : NULL;
  o.client_name = "rampartctl";
  struct rp_error e;
  struct rp_conn *c = rp_conn_open(&o, info, &e);
  if (!c)
    fprintf(stderr, "rampartctl: %s\n", e.message);
  return c;
}

/* stat and bench: their arguments, a connection to the server, then the command, which
 * closes the connection. The exit status. */
static int run_connected(int argc, char **argv, const char *cmd, bool bench,
                         int (*run)(struct rp_conn *c, const struct common_args *a))
{
  static struct rp_key key; /* the connection keeps using it: one per process */
  struct rp_session_info info;
  struct common_args a;
  int status = parse_common(argc, argv, cmd, bench, &a);
  if (status)
    return status;
  struct rp_conn *c = connect_to(&a, &key, &info);
  if (!c)
    return 1;
  return run(c, &a);
}

/* ---- keygen ---- */

static int cmd_keygen(int argc, char **argv)
{
  if (argc != 1 || argv[0][0] == '-')
    return usage_error("keygen takes exactly one argument, the key FILE to create");
  char err[512];
  if (rp_key_generate(argv[0], err, sizeof err) < 0) {
    fprintf(stderr, "rampartctl: %s\n", err);
    return 1;
  }
  printf("wrote a new cluster key to %s (mode 0600): pass it to every rampartd and client "
         "with --key %s\n",
         argv[0], argv[0]);
  return 0;
}

/* ---- device ---- */

/* The engine rewrites the file every second (write to a temporary name, then rename),
 * so a read here always sees one whole report. */
static int cmd_device(int argc, char **argv)
{
  struct stat sock;
  if (argc >= 1 && stat(argv[0], &sock) == 0 && S_ISSOCK(sock.st_mode))
    return device_control_main(argv[0], argc - 1, argv + 1);
  if (argc != 1 || argv[0][0] == '-')
    return usage_error("device takes the device's STATS-FILE, or its control SOCKET and a "
                       "command");
  FILE *f = fopen(argv[0], "re");
  if (!f) {
    fprintf(stderr,
            "rampartctl: cannot read %s: %s (is nbdkit rampart running with "
            "stats-file=%s?)\n",
            argv[0], strerror(errno), argv[0]);
    return 1;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && time(NULL) - st.st_mtime > 5)
    fprintf(stderr,
            "rampartctl: warning: %s was last updated %lld s ago: the device may "
            "have stopped\n",
            argv[0], (long long)(time(NULL) - st.st_mtime));
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    fwrite(buf, 1, n, stdout);
  fclose(f);
  return 0;
}

/* ---- stat ---- */

static void json_string(const char *s)
{
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      printf("\\%c", *p);
    else if (*p < 0x20)
      printf("\\u%04x", *p);
    else
      putchar(*p);
  }
  putchar('"');
}

static void print_stat_json(const struct rp_server_stat *s)
{
  printf("{\"server_name\": ");
  json_string(s->server_name);
#define U(name) printf(", \"" #name "\": %" PRIu64, (uint64_t)s->name)
  U(version);
  U(uptime_seconds);
  U(page_size);
  U(capacity_pages);
  U(reserved_pages);
  U(stored_pages);
  U(stored_bytes);
  U(resident_bytes);
  U(clients_connected);
  U(sessions_attached);
  U(sessions_detached);
  U(sessions_expired);
  U(ops_write);
  U(ops_read);
  U(ops_free);
  U(bytes_in);
  U(bytes_out);
  U(errors_protocol);
  U(errors_auth);
  U(errors_refused);
  printf(", \"pressure\": %s", s->pressure ? "true" : "false");
  printf(", \"draining\": %s", s->draining ? "true" : "false");
  printf(", \"psi_some_avg10\": %.2f", s->psi_some_avg10);
  U(mem_available_bytes);
  U(advises_sent);
  U(session_stored_pages);
  U(session_reserved_pages);
#undef U
  if (s->stored_pages > 0)
    printf(", \"memory_per_stored_page\": %.1f",
           (double)s->resident_bytes / (double)s->stored_pages);
  else
    printf(", \"memory_per_stored_page\": null");
  printf("}\n");
}

static void row(const char *label, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

static void row(const char *label, const char *fmt, ...)
{
  printf("  %-26s ", label);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
}

static const char *pages_h(uint64_t pages, uint32_t page_size, char *buf, size_t len)
{
  char b[32];
  snprintf(buf, len, "%" PRIu64 " pages (%s)", pages,
           rp_format_bytes(pages * (page_size ? page_size : RP_PAGE_SIZE), b, sizeof b));
  return buf;
}

static void print_stat_table(const char *addr, const struct rp_server_stat *s)
{
  char a[64], b[64];
  printf("rampartd %s at %s\n", s->server_name[0] ? s->server_name : "(unnamed)", addr);
  row("protocol version", "%u", s->version);
  row("uptime", "%" PRIu64 " s", s->uptime_seconds);
  row("page size", "%u bytes", s->page_size);
  row("capacity", "%s", pages_h(s->capacity_pages, s->page_size, a, sizeof a));
  row("reserved", "%s", pages_h(s->reserved_pages, s->page_size, a, sizeof a));
  row("stored", "%s", pages_h(s->stored_pages, s->page_size, a, sizeof a));
  row("stored bytes", "%s", rp_format_bytes(s->stored_bytes, a, sizeof a));
  row("resident bytes", "%s (%" PRIu64 " bytes)",
      rp_format_bytes(s->resident_bytes, a, sizeof a), s->resident_bytes);
  if (s->stored_pages > 0)
    row("memory per stored page", "%.1f bytes (%.2fx the page)",
        (double)s->resident_bytes / (double)s->stored_pages,
        (double)s->resident_bytes / (double)s->stored_pages /
          (double)(s->page_size ? s->page_size : RP_PAGE_SIZE));
  else
    row("memory per stored page", "- (nothing stored)");
  row("clients connected", "%u", s->clients_connected);
  row("sessions attached", "%u", s->sessions_attached);
  row("sessions detached", "%u (inside their lease)", s->sessions_detached);
  row("sessions expired", "%" PRIu64, s->sessions_expired);
  row("ops write", "%" PRIu64, s->ops_write);
  row("ops read", "%" PRIu64, s->ops_read);
  row("ops free", "%" PRIu64, s->ops_free);
  row("bytes in", "%s", rp_format_bytes(s->bytes_in, a, sizeof a));
  row("bytes out", "%s", rp_format_bytes(s->bytes_out, a, sizeof a));
  row("errors protocol", "%" PRIu64, s->errors_protocol);
  row("errors auth", "%" PRIu64, s->errors_auth);
  row("errors refused", "%" PRIu64, s->errors_refused);
  row("pressure", "%s", s->pressure ? "YES (refusing new capacity)" : "no");
  row("draining", "%s", s->draining ? "YES (clients are moving their pages away)" : "no");
  row("psi some avg10", "%.2f %%", s->psi_some_avg10);
  row("memory available", "%s", rp_format_bytes(s->mem_available_bytes, a, sizeof a));
  row("advises sent", "%" PRIu64, s->advises_sent);
  row("this session stored", "%s",
      pages_h(s->session_stored_pages, s->page_size, b, sizeof b));
  row("this session reserved", "%s",
      pages_h(s->session_reserved_pages, s->page_size, b, sizeof b));
}

static int cmd_stat(struct rp_conn *c, const struct common_args *a)
{
  struct rp_server_stat s;
  struct rp_error e;
  if (rp_stat_sync(c, &s, &e) < 0) {
    fprintf(stderr, "rampartctl: %s\n", e.message);
    rp_conn_close(c);
    return 1;
  }
  rp_goodbye_sync(c, &e); /* our empty session need not wait for its lease */
  char addr[300];
  snprintf(addr, sizeof addr, "%s", rp_conn_peer(c));
  rp_conn_close(c);
  if (a->json)
    print_stat_json(&s);
  else
    print_stat_table(addr, &s);
  return 0;
}

/* ---- bench ---- */

static uint64_t splitmix64(uint64_t *x)
{
  uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* The bytes of page `slot` in this run: distinct for every slot and every run. */
static void fill_page(uint8_t *page, uint64_t slot, uint64_t seed)
{
  uint64_t x = seed ^ (slot * UINT64_C(0xD1B54A32D192ED03));
  for (size_t i = 0; i < RP_PAGE_SIZE; i += 8) {
    uint64_t v = splitmix64(&x);
    memcpy(page + i, &v, 8);
  }
}

struct bench {
  struct rp_conn *conn;
  uint8_t op;
  uint64_t pages, seed;
  uint64_t next_slot, completed;
  uint64_t failures, mismatches;
  struct rp_request *reqs;
  uint8_t *bufs;
  uint8_t expect[RP_PAGE_SIZE];
  char first_error[256];
};

static void bench_issue(struct bench *b, struct rp_request *r);

static void bench_done(struct rp_request *r)
{
  struct bench *b = r->user;
  b->completed++;
  if (r->status != RP_OK) {
    if (b->failures++ == 0)
      snprintf(b->first_error, sizeof b->first_error, "%s of slot %" PRIu64 ": %s (%s)",
               rp_op_name(r->op), r->slot, rp_status_name(r->status), r->error_message);
  } else if (r->op == RP_OP_READ) {
    fill_page(b->expect, r->slot, b->seed);
    if (memcmp(b->expect, r->page, RP_PAGE_SIZE) != 0 && b->mismatches++ < 5) {
      size_t at = 0;
      while (at < RP_PAGE_SIZE && b->expect[at] == r->page[at])
        at++;
      fprintf(stderr,
              "rampartctl: MISMATCH at slot %" PRIu64 ", first wrong byte %zu: "
              "expected 0x%02x, read 0x%02x\n",
              r->slot, at, b->expect[at], r->page[at]);
    }
  }
  if (rp_conn_is_connected(b->conn))
    bench_issue(b, r);
}

static void bench_issue(struct bench *b, struct rp_request *r)
{
  if (b->next_slot >= b->pages)
    return;
  r->op = b->op;
  r->slot = b->next_slot++;
  r->count = 0;
  if (r->op == RP_OP_WRITE)
    fill_page(r->page, r->slot, b->seed);
  rp_conn_submit(b->conn, r);
}


/* Runs one pass (all WRITEs or all READs) with depth requests in flight; seconds. */
static double bench_pass(struct bench *b, struct ev_loop *loop, uint8_t op, uint64_t depth)
{
  b->op = op;
  b->next_slot = 0;
  b->completed = 0;
  double t0 = rp_now_seconds();
  uint64_t started = depth < b->pages ? depth : b->pages;
  for (uint64_t i = 0; i < started; i++) {
    b->reqs[i].page = b->bufs + i * RP_PAGE_SIZE;
    b->reqs[i].done = bench_done;
    b->reqs[i].user = b;
    bench_issue(b, &b->reqs[i]);
  }
  /* Runs until every issued request completed; a lost connection completes them all. */
  while (b->completed < b->next_slot)
    ev_run(loop, EVRUN_ONCE);
  return rp_now_seconds() - t0;
}

/* Runs one pass and says how it went: its speed, or that requests failed (false). */
static bool run_pass(struct bench *b, struct ev_loop *loop, uint8_t op, uint64_t depth)
{
  bool writing = op == RP_OP_WRITE;
  double secs = bench_pass(b, loop, op, depth);
  if (b->failures) {
    fprintf(stderr, "rampartctl: %" PRIu64 " %s failed; first: %s\n", b->failures,
            writing ? "writes" : "reads", b->first_error);
    return false;
  }
  double rate = secs > 0 ? (double)b->pages / secs : 0;
  printf("%-6s %" PRIu64 " pages in %.3f s: %.0f pages/s, %.1f MiB/s (depth %" PRIu64 ")\n",
         writing ? "write:" : "read:", b->pages, secs, rate,
         rate * RP_PAGE_SIZE / (1024.0 * 1024.0), depth);
  return true;
}

static int cmd_bench(struct rp_conn *c, const struct common_args *a)
{
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  if (!loop) {
    fprintf(stderr, "rampartctl: cannot create an event loop\n");
    rp_conn_close(c);
    return 1;
  }
  rp_conn_attach(c, loop);
  int status = 1;
  struct rp_error e;
  struct bench b;
  memset(&b, 0, sizeof b);
  b.conn = c;
  b.pages = a->pages;
  b.reqs = calloc(a->depth, sizeof *b.reqs);
  b.bufs = aligned_alloc(RP_PAGE_SIZE, a->depth * RP_PAGE_SIZE);
  if (!b.reqs || !b.bufs) {
    fprintf(stderr, "rampartctl: out of memory for %" PRIu64 " requests\n", a->depth);
    goto out;
  }
  if (rp_random_bytes((uint8_t *)&b.seed, sizeof b.seed) < 0) {
    fprintf(stderr, "rampartctl: cannot get random bytes\n");
    goto out;
  }
  if (rp_reserve_sync(c, a->pages, NULL, NULL, &e) < 0) {
    fprintf(stderr, "rampartctl: %s\n", e.message);
    goto out;
  }
  printf("bench: %" PRIu64 " pages (%.1f MiB) against %s, depth %" PRIu64 "\n", a->pages,
         (double)a->pages * RP_PAGE_SIZE / (1024.0 * 1024.0), rp_conn_peer(c), a->depth);

  if (!run_pass(&b, loop, RP_OP_WRITE, a->depth))
    goto out;

  struct rp_server_stat s;
  bool have_stat = rp_stat_sync(c, &s, &e) == 0;
  if (!have_stat)
    fprintf(stderr, "rampartctl: %s\n", e.message);

  if (!run_pass(&b, loop, RP_OP_READ, a->depth))
    goto out;
  printf("verify: %" PRIu64 " pages read back, %" PRIu64 " mismatched\n", a->pages,
         b.mismatches);

  if (have_stat && s.stored_pages > 0)
    printf("server memory per stored page: %.1f bytes (%.3fx the page; %" PRIu64
           " pages stored, %" PRIu64 " resident bytes)\n",
           (double)s.resident_bytes / (double)s.stored_pages,
           (double)s.resident_bytes / (double)s.stored_pages / RP_PAGE_SIZE, s.stored_pages,
           s.resident_bytes);

  for (uint64_t slot = 0; slot < a->pages; slot += RP_MAX_FREE_COUNT) {
    uint64_t n = a->pages - slot < RP_MAX_FREE_COUNT ? a->pages - slot : RP_MAX_FREE_COUNT;
    if (rp_free_sync(c, slot, (uint32_t)n, &e) < 0) {
      fprintf(stderr, "rampartctl: %s\n", e.message);
      goto out;
    }
  }
  if (rp_goodbye_sync(c, &e) < 0)
    fprintf(stderr, "rampartctl: %s\n", e.message);
  if (b.mismatches) {
    fprintf(stderr,
            "rampartctl: DATA MISMATCH: %" PRIu64 " of %" PRIu64
            " pages did not read back as written\n",
            b.mismatches, a->pages);
    goto out;
  }
  status = 0;
out:
  rp_conn_close(c);
  ev_loop_destroy(loop);
  free(b.reqs);
  free(b.bufs);
  return status;
}

/* 'swap' hands over to rampart-swap (supervisor/), the device's supervisor, which must
 * outlive this command as the keeper: installed beside us, in sbin/, in a build tree's
 * supervisor/, or found on PATH ($RAMPART_SWAP wins). */
static int cmd_swap(char **argv)
{
  const char *env = getenv("RAMPART_SWAP");
  char self[4096], path[4200];
  if (env && *env) {
    argv[0] = (char *)env;
    execv(env, argv);
    fprintf(stderr, "rampartctl: cannot run RAMPART_SWAP=%s: %s\n", env, strerror(errno));
    return 1;
  }
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = 0;
      static const char *const rel[] = { "/rampart-swap", "/../sbin/rampart-swap",
                                         "/../supervisor/rampart-swap" };
      for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(path, sizeof path, "%s%s", self, rel[i]);
        if (access(path, X_OK) == 0) {
          argv[0] = path;
          execv(path, argv);
        }
      }
    }
  }
  argv[0] = "rampart-swap";
  execvp("rampart-swap", argv);
  fprintf(stderr,
          "rampartctl: cannot find rampart-swap (%s): run 'sudo ./scripts/setup', "
          "which installs it to /usr/local/sbin, or set RAMPART_SWAP\n",
          strerror(errno));
  return 1;
}

int main(int argc, char **argv)
{
  if (argc < 2)
    return usage_error("no command given");
  const char *cmd = argv[1];
  if (strcmp(cmd, "swap") == 0)
    return cmd_swap(argv + 1);
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    fputs(USAGE, stdout);
    return 0;
  }
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(USAGE, stdout);
      return 0;
    }
  }
  if (strcmp(cmd, "keygen") == 0)
    return cmd_keygen(argc - 2, argv + 2);
  if (strcmp(cmd, "stat") == 0)
    return run_connected(argc - 2, argv + 2, "stat", false, cmd_stat);
  if (strcmp(cmd, "device") == 0)
    return cmd_device(argc - 2, argv + 2);
  if (strcmp(cmd, "bench") == 0)
    return run_connected(argc - 2, argv + 2, "bench", true, cmd_bench);
  if (strcmp(cmd, "cluster") == 0)
    return cluster_list_main(argc - 2, argv + 2);
  if (strcmp(cmd, "notify-listen") == 0)
    return notify_listen_main(argc - 2, argv + 2);
  return usage_error("unknown command '%s': use keygen, stat, bench, device, cluster or "
                     "swap",
                     cmd);
}
