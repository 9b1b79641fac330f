/* Metrics for operators (docs/operations.md, "What to watch"): rampartd --metrics scraped over a real socket, the
 * pager's metrics-file= as node_exporter's textfile collector reads it, both parsed by
 * the Prometheus Python client's own parser (test/support/prom_parse.py, run with
 * Debian's /usr/bin/python3 and python3-prometheus-client), and their values checked
 * against what the test did: pages written, a server killed, its pages rebuilt. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine_cluster.h"
#include "rampart.h"
#include "server_process.h"

#define NSERVERS 3
#define NPAGES 300

static void sleep_ms(unsigned ms)
{
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  nanosleep(&ts, NULL);
}

/* ---- scraping and parsing -------------------------------------------------------------- */

/* HOST and PORT of server s's metrics listener, from its "metrics on" line. */
static void metrics_address(const struct rp_test_server *s, char *host, size_t hostlen,
                            unsigned *port)
{
  FILE *f = fopen(s->stdout_path, "re");
  assert_non_null(f);
  char line[256], addr[128] = "";
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "rampartd: metrics on http://%127[^/]/metrics", addr) == 1)
      break;
  fclose(f);
  char *colon = strrchr(addr, ':');
  if (!colon)
    fail_msg("rampartd %s printed no 'metrics on' line", s->addr);
  *colon = '\0';
  snprintf(host, hostlen, "%s", addr);
  *port = (unsigned)atoi(colon + 1);
}

static int connect_to(const char *host, unsigned port)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
  assert_int_equal(inet_pton(AF_INET, host, &sa.sin_addr), 1);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  struct timeval tv = { .tv_sec = 10 };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

/* Sends request as is and reads the whole response (the server closes after it). */
static size_t http_exchange(const char *host, unsigned port, const char *request,
                            size_t request_len, char *resp, size_t resplen)
{
  int fd = connect_to(host, port);
  assert_int_equal(send(fd, request, request_len, MSG_NOSIGNAL), (ssize_t)request_len);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < resplen && (r = recv(fd, resp + n, resplen - 1 - n, 0)) > 0)
    n += (size_t)r;
  resp[n] = '\0';
  close(fd);
  return n;
}

/* GET /metrics from server s; the body goes to path. */
static void scrape(const struct rp_test_server *s, const char *path)
{
  char host[64];
  unsigned port;
  metrics_address(s, host, sizeof host, &port);
  static char resp[256 * 1024];
  const char req[] = "GET /metrics HTTP/1.1\r\nHost: test\r\nAccept: text/plain\r\n\r\n";
  http_exchange(host, port, req, sizeof req - 1, resp, sizeof resp);
  if (strncmp(resp, "HTTP/1.1 200 OK\r\n", 17) != 0)
    fail_msg("scraping %s:%u: %.200s", host, port, resp);
  assert_non_null(strstr(resp, "Content-Type: text/plain; version=0.0.4"));
  char *body = strstr(resp, "\r\n\r\n");
  assert_non_null(body);
  FILE *f = fopen(path, "we");
  assert_non_null(f);
  fputs(body + 4, f);
  fclose(f);
}

/* The samples of path as prom_parse.py prints them, one per line; fails the test when
 * the real parser refuses the text. */
static char *parse(const char *path)
{
  const char *parser = getenv("RAMPART_PROM_PARSE");
  if (!parser || !*parser)
    fail_msg("RAMPART_PROM_PARSE is not set: run through ctest");
  const char *argv[] = { "/usr/bin/python3", parser, path, NULL };
  static char out[512 * 1024];
  int status = rp_test_run_program(argv, out, sizeof out, 30000);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the Prometheus parser refused %s:\n%.2000s", path, out);
  return out;
}

/* The value of the sample written exactly as `sample` (name{sorted labels}), or fails. */
static double value_of(const char *samples, const char *sample)
{
  size_t n = strlen(sample);
  for (const char *p = samples; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (strncmp(p, sample, n) == 0 && p[n] == ' ')
      return strtod(p + n + 1, NULL);
  fail_msg("no sample %s in the parsed metrics", sample);
  return 0;
}

/* A per-server sample of the pager: labels sorted, as prom_parse.py prints them. */
static double server_value(const char *samples, const char *name, unsigned incarnation,
                           const char *addr)
{
  char sample[256];
  snprintf(sample, sizeof sample, "%s{incarnation=\"%u\",server=\"%s\"}", name, incarnation,
           addr);
  return value_of(samples, sample);
}

/* No two samples of one series: Prometheus rejects a scrape that repeats one. */
static void assert_no_duplicate_series(const char *samples)
{
  static char copy[512 * 1024];
  snprintf(copy, sizeof copy, "%s", samples);
  size_t n = 0;
  static char *lines[8192];
  for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l && n < 8192;
       l = strtok_r(NULL, "\n", &save)) {
    char *space = strrchr(l, ' ');
    if (space)
      *space = '\0';
    for (size_t k = 0; k < n; k++)
      if (strcmp(lines[k], l) == 0)
        fail_msg("the series %s appears twice", l);
    lines[n++] = l;
  }
}

/* ---- the rig ------------------------------------------------------------------------------ */

struct rig {
  struct rp_test_cluster cluster;
  struct rampart_engine *engine;
  char prom[700];    /* the pager's metrics-file */
  char scraped[700]; /* where a scrape of rampartd is saved */
};

static const char *const metrics_args[] = { "--metrics", "127.0.0.1:0", NULL };

static void rig_start(struct rig *r)
{
  memset(r, 0, sizeof *r);
  assert_int_equal(rp_test_cluster_start_args(&r->cluster, NSERVERS, "32M", metrics_args), 0);
  snprintf(r->prom, sizeof r->prom, "%s/rampart.prom", r->cluster.dir);
  snprintf(r->scraped, sizeof r->scraped, "%s/scraped.prom", r->cluster.dir);
  const char *extra[] = { "redundancy", "parity-log", "group",        "2",     "lease", "1",
                          "timeout",    "1000",       "metrics-file", r->prom, NULL };
  r->engine = rp_test_engine_open(&r->cluster, 4096, extra);
}

static void rig_stop(struct rig *r)
{
  rampart_close(r->engine);
  rp_test_cluster_stop(&r->cluster);
}

/* Waits (up to 10 s) for the metrics file to show `sample` at `want`; returns the parsed
 * samples of the last read. The engine rewrites the file once a second. */
static char *await_pager(struct rig *r, const char *sample, double want)
{
  for (unsigned i = 0; i < 100; i++) {
    struct stat sb;
    if (stat(r->prom, &sb) == 0) {
      char *samples = parse(r->prom);
      if (strstr(samples, sample) && value_of(samples, sample) == want)
        return samples;
    }
    sleep_ms(100);
  }
  char *samples = parse(r->prom);
  fail_msg("%s is %g after 10 s, expected %g", sample, value_of(samples, sample), want);
  return NULL;
}

static void write_pages(struct rig *r)
{
  static uint8_t page[RAMPART_PAGE_SIZE];
  for (uint64_t p = 0; p < NPAGES; p++) {
    rp_test_fill_page(page, 17, p);
    assert_int_equal(rampart_pwrite(r->engine, page, sizeof page, p * sizeof page, 0), 0);
  }
}

/* ---- tests ----------------------------------------------------------------------------- */

/* After NPAGES single-page writes: the pager counts NPAGES remote pages, live pages
 * summed over servers, written pages and write requests in its latency histogram; each
 * rampartd's own scraped stored_pages is what the pager says it keeps there. */
static void test_counters_after_writes(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r);
  write_pages(&r);
  char *pager = await_pager(&r, "rampart_pager_written_pages_total{}", NPAGES);
  assert_int_equal(value_of(pager, "rampart_pager_pages{where=\"remote\"}"), NPAGES);
  assert_int_equal(value_of(pager, "rampart_pager_device_size_pages{}"), 4096);
  assert_int_equal(
    value_of(pager, "rampart_pager_request_duration_seconds_count{op=\"write\"}"), NPAGES);
  assert_int_equal(value_of(pager, "rampart_pager_request_duration_seconds_bucket"
                                   "{le=\"+Inf\",op=\"write\"}"),
                   NPAGES);
  double sum = value_of(pager, "rampart_pager_request_duration_seconds_sum{op=\"write\"}");
  assert_true(sum > 0.0 && sum < 60.0);
  assert_int_equal(value_of(pager, "rampart_pager_lost_pages_total{}"), 0);
  assert_int_equal(value_of(pager, "rampart_pager_degraded_reads_total{}"), 0);
  double live = 0;
  for (unsigned i = 0; i < NSERVERS; i++) {
    const char *addr = r.cluster.servers[i].addr;
    live += server_value(pager, "rampart_pager_server_live_pages", i, addr);
    char up[256];
    snprintf(up, sizeof up,
             "rampart_pager_server_state{incarnation=\"%u\",server=\"%s\","
             "state=\"up\"}",
             i, addr);
    assert_int_equal(value_of(pager, up), 1);
  }
  assert_int_equal(live, NPAGES);

  /* Each server, scraped over HTTP, stores what the pager says it keeps there (data
   * and parity); the pager's figure can lag its own file by a second, so retry. */
  double total_stored = 0;
  for (unsigned i = 0; i < NSERVERS; i++) {
    const char *addr = r.cluster.servers[i].addr;
    double scraped = -1, expected = -2;
    for (unsigned t = 0; t < 30 && scraped != expected; t++) {
      if (t)
        sleep_ms(200);
      scrape(&r.cluster.servers[i], r.scraped);
      char *server = parse(r.scraped);
      scraped = value_of(server, "rampart_server_stored_pages{}");
      double writes = value_of(server, "rampart_server_requests_total{op=\"write\"}");
      assert_true(writes >= scraped);
      assert_int_equal(value_of(server, "rampart_server_capacity_pages{}"), 8192);
      assert_int_equal(value_of(server, "rampart_server_sessions{state=\"attached\"}"), 1);
      expected = server_value(parse(r.prom), "rampart_pager_server_stored_pages", i, addr);
    }
    print_message("rampartd %s: %g pages stored, scraped; the pager keeps %g there\n", addr,
                  scraped, expected);
    assert_true(scraped == expected);
    total_stored += scraped;
  }
  /* parity-log, groups of 2: one parity page per two data pages. */
  assert_true(total_stored >= NPAGES * 1.5);
  rig_stop(&r);
}

/* kill -9 of one server: reading every page back rebuilds from parity (degraded reads),
 * then past the lease the server is lost and its groups are rebuilt: the metrics show
 * the degraded reads, one finished rebuild with its duration, moves for reason
 * "rebuild", the server's state "lost", and no lost page. Restarted, the server joins
 * again as a new incarnation with series of its own. */
static void test_degraded_reads_and_rebuild(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r);
  write_pages(&r);
  await_pager(&r, "rampart_pager_written_pages_total{}", NPAGES);
  rp_test_server_kill(&r.cluster.servers[0]);
  static uint8_t page[RAMPART_PAGE_SIZE], want[RAMPART_PAGE_SIZE];
  for (uint64_t p = 0; p < NPAGES; p++) {
    rp_test_fill_page(want, 17, p);
    assert_int_equal(rampart_pread(r.engine, page, sizeof page, p * sizeof page), 0);
    assert_memory_equal(page, want, sizeof page);
  }
  char *pager = await_pager(&r, "rampart_pager_rebuilds_total{}", 1);
  char lost[256];
  snprintf(lost, sizeof lost,
           "rampart_pager_server_state{incarnation=\"0\",server=\"%s\","
           "state=\"lost\"}",
           r.cluster.servers[0].addr);
  assert_int_equal(value_of(pager, lost), 1);
  assert_no_duplicate_series(pager);

  /* The server comes back at the same address: it joins as a new incarnation, listed
   * beside the lost one, and the two must stay two series. (In the systemd guest, where
   * systemd restarted a killed rampartd, they were one series sampled twice.) */
  assert_int_equal(rp_test_cluster_restart(&r.cluster, 0, NULL), 0);
  char rejoined[256];
  snprintf(rejoined, sizeof rejoined,
           "rampart_pager_server_state{incarnation=\"%u\","
           "server=\"%s\",state=\"up\"}",
           NSERVERS, r.cluster.servers[0].addr);
  pager = await_pager(&r, rejoined, 1);
  assert_no_duplicate_series(pager);
  double degraded = value_of(pager, "rampart_pager_degraded_reads_total{}");
  double seconds = value_of(pager, "rampart_pager_rebuild_duration_seconds{}");
  double moved = value_of(pager, "rampart_pager_moves_total{reason=\"rebuild\"}");
  print_message("after kill -9: %g degraded reads, rebuild of %g pages in %.3f s\n", degraded,
                moved, seconds);
  assert_true(degraded > 0);
  assert_true(seconds > 0);
  assert_true(moved > 0);
  assert_int_equal(value_of(pager, "rampart_pager_rebuild_running{}"), 0);
  assert_int_equal(value_of(pager, "rampart_pager_lost_pages_total{}"), 0);
  assert_int_equal(value_of(pager, "rampart_pager_read_errors_total{}"), 0);
  assert_int_equal(value_of(pager, "rampart_pager_request_duration_seconds_count"
                                   "{op=\"read\"}"),
                   NPAGES);
  rig_stop(&r);
}

/* The listener answers GET /metrics only: other paths 404, other methods 405, a request
 * past 2 KiB 431; a connection that sends nothing is closed within a few seconds; the
 * pages keep being served meanwhile. */
static void test_http_refusals(void **state)
{
  (void)state;
  struct rig r;
  rig_start(&r);
  char host[64], resp[4096];
  unsigned port;
  metrics_address(&r.cluster.servers[1], host, sizeof host, &port);
  const char other[] = "GET /secrets HTTP/1.1\r\n\r\n";
  http_exchange(host, port, other, sizeof other - 1, resp, sizeof resp);
  assert_non_null(strstr(resp, "HTTP/1.1 404 "));
  const char post[] = "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
  http_exchange(host, port, post, sizeof post - 1, resp, sizeof resp);
  assert_non_null(strstr(resp, "HTTP/1.1 405 "));
  static char big[4096];
  memset(big, 'x', sizeof big);
  memcpy(big, "GET /metrics HTTP/1.1\r\nX-Filler: ", 33);
  http_exchange(host, port, big, sizeof big, resp, sizeof resp);
  assert_non_null(strstr(resp, "HTTP/1.1 431 "));
  const char junk[] = "\x16\x03\x01 not http\r\n\r\n";
  http_exchange(host, port, junk, sizeof junk - 1, resp, sizeof resp);
  assert_non_null(strstr(resp, "HTTP/1.1 400 "));

  /* Idle: nothing sent; the server closes within its 5 s idle limit. */
  int fd = connect_to(host, port);
  time_t start = time(NULL);
  char c;
  ssize_t n = recv(fd, &c, 1, 0);
  close(fd);
  print_message("an idle metrics connection was closed after about %lld s\n",
                (long long)(time(NULL) - start));
  assert_int_equal(n, 0);
  assert_true(time(NULL) - start <= 8);

  write_pages(&r);
  scrape(&r.cluster.servers[1], r.scraped);
  parse(r.scraped);
  rig_stop(&r);
}

/* --metrics is off by default (no listener, no line), and a bad value is refused with
 * a sentence saying what to write. */
static void test_metrics_option(void **state)
{
  (void)state;
  char dir[256];
  assert_int_equal(rp_test_tmpdir(dir, sizeof dir), 0);
  struct rp_test_server s;
  const char *args[] = { "--memory", "16M", NULL };
  assert_int_equal(rp_test_server_start(&s, dir, args), 0);
  FILE *f = fopen(s.stdout_path, "re");
  assert_non_null(f);
  char line[256];
  while (fgets(line, sizeof line, f))
    assert_null(strstr(line, "metrics"));
  fclose(f);
  assert_int_equal(rp_test_server_stop_clean(&s), 0);
  rp_test_tmpdir_remove(dir);

  const char *bad[] = { "--listen",  "127.0.0.1:0", "--memory", "16M",
                        "--metrics", "somewhere",   NULL };
  char out[2048];
  int status = rp_test_run_rampartd(bad, out, sizeof out, 10000);
  print_message("%s", out);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 2);
  assert_non_null(strstr(out, "--metrics 'somewhere' is not PORT or HOST:PORT"));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_metrics_option),
    cmocka_unit_test(test_counters_after_writes),
    cmocka_unit_test(test_degraded_reads_and_rebuild),
    cmocka_unit_test(test_http_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
