/* Servers joining and leaving a running device (docs/elastic.md): add, drain,
 * remove and reload under a reader and a writer, through the public API and through the
 * control socket with rampartctl. Real rampartd processes on loopback; every byte read
 * back against a shadow copy. The cluster is started with more servers than the device
 * opens with, so a test has real servers to add.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "client.h"
#include "engine_cluster.h"
#include "rampart.h"
#include "server_process.h"
#include "shadow_device.h"

#define PAGES 4096u /* 16 MiB device */


struct rig {
  struct rp_test_cluster cluster;
  struct rp_test_shadow dev;
  char msg[4096];
};

/* Starts `started` servers and opens the device on the first `opened` of them. */
static struct rig *rig_start(unsigned started, unsigned opened, const char *memory,
                             const char *const *extra)
{
  struct rig *r = calloc(1, sizeof *r);
  assert_non_null(r);
  assert_int_equal(rp_test_cluster_start(&r->cluster, started, memory, NULL), 0);
  struct rp_test_cluster *view = malloc(sizeof *view);
  assert_non_null(view);
  *view = r->cluster;
  view->n = opened;
  struct rampart_engine *e = rp_test_engine_open(view, PAGES, extra);
  free(view);
  rp_test_shadow_init(&r->dev, e, PAGES);
  rp_test_shadow_fill(&r->dev, 0xe1a5);
  return r;
}

static void rig_stop(struct rig *r)
{
  rp_test_shadow_destroy(&r->dev);
  rp_test_cluster_stop(&r->cluster);
  free(r);
}

static const struct rampart_server_stats *server_stats(const struct rampart_stats *st,
                                                       const char *address)
{
  const struct rampart_server_stats *found = NULL;
  for (unsigned i = 0; i < st->nservers; i++)
    if (strcmp(st->servers[i].address, address) == 0)
      found = &st->servers[i]; /* the newest incarnation */
  return found;
}

static void print_stats(struct rig *r)
{
  static char report[16384];
  static struct rampart_stats st;
  rampart_get_stats(r->dev.engine, &st);
  rampart_format_stats(&st, report, sizeof report);
  print_message("%s", report);
}

static void verify_clean(struct rig *r, const char *what)
{
  struct rp_test_shadow_result res;
  uint64_t failed = rp_test_shadow_verify(&r->dev, &res);
  char label[256];
  snprintf(label, sizeof label, "%s, every page read back", what);
  rp_test_shadow_expect_clean(label, &res);
  assert_int_equal(failed, 0);
}

/* Waits until address's server is drained (or, want_removed, removed). */
static void wait_drained(struct rig *r, const char *address, bool want_removed,
                         unsigned timeout_s)
{
  static struct rampart_stats st;
  uint64_t until = rp_test_now_ms() + timeout_s * 1000u;
  do {
    rampart_get_stats(r->dev.engine, &st);
    const struct rampart_server_stats *s = server_stats(&st, address);
    assert_non_null(s);
    if (want_removed ? s->state == RAMPART_SERVER_REMOVED : s->drained)
      return;
    rp_test_sleep_ms(100);
  } while (rp_test_now_ms() < until);
  print_stats(r);
  fail_msg("%s not %s within %u s", address, want_removed ? "removed" : "drained", timeout_s);
}

static void expect_msg(const char *msg, const char *part)
{
  if (!strstr(msg, part))
    fail_msg("expected '%s' in: %s", part, msg);
}

/* ---- add ---------------------------------------------------------------------------------- */

static void test_an_added_server_takes_new_groups_under_load(void **state)
{
  (void)state;
  const char *extra[] = { "redundancy", "parity-log", "group", "3", NULL };
  struct rig *r = rig_start(5, 4, "64M", extra);
  struct rampart_engine *e = r->dev.engine;
  const char *added = r->cluster.servers[4].addr;

  rp_test_shadow_start(&r->dev, 1, 2, 16, 11);
  rp_test_sleep_ms(300);
  assert_int_equal(rampart_server_add(e, added, r->msg, sizeof r->msg), 0);
  print_message("add: %s\n", r->msg);
  expect_msg(r->msg, "added");
  rp_test_sleep_ms(2500);
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r->dev);
  rp_test_shadow_expect_clean("writes and reads across the add", &res);

  static struct rampart_stats st;
  rampart_get_stats(e, &st);
  const struct rampart_server_stats *s = server_stats(&st, added);
  assert_non_null(s);
  print_message("the added server: state %s, %llu live, %llu stored, %llu reserved\n",
                rampart_server_health_name(s->state), (unsigned long long)s->pages_live,
                (unsigned long long)s->pages_stored, (unsigned long long)s->pages_reserved);
  assert_int_equal(s->state, RAMPART_SERVER_UP);
  assert_true(s->pages_reserved > 0);
  assert_true(s->pages_stored > 0); /* new groups went there */
  verify_clean(r, "after the add");

  /* Safe to repeat; a bad address and an unreachable server are refused, saying why. */
  assert_int_equal(rampart_server_add(e, added, r->msg, sizeof r->msg), 0);
  expect_msg(r->msg, "already");
  assert_int_equal(rampart_server_add(e, "no-port-here", r->msg, sizeof r->msg), -EINVAL);
  expect_msg(r->msg, "HOST:PORT");
  assert_int_equal(rampart_server_add(e, "127.0.0.1:1", r->msg, sizeof r->msg),
                   -EHOSTUNREACH);
  expect_msg(r->msg, "Check that rampartd runs there");
  print_message("refused: %s\n", r->msg);
  rampart_get_stats(e, &st);
  assert_int_equal(st.nservers, 5);
  rig_stop(r);
}

/* ---- drain and remove ---------------------------------------------------------------------- */

static void test_a_drained_server_can_be_stopped_without_a_degraded_read(void **state)
{
  (void)state;
  const char *extra[] = { "redundancy", "parity-log", "group", "3", NULL };
  struct rig *r = rig_start(5, 5, "64M", extra);
  struct rampart_engine *e = r->dev.engine;
  const char *leaving = r->cluster.servers[1].addr;
  static struct rampart_stats before, after;
  rampart_get_stats(e, &before);
  const struct rampart_server_stats *s0 = server_stats(&before, leaving);
  assert_true(s0->pages_dependent > 0);
  print_message("before the drain: %llu live pages depend on %s\n",
                (unsigned long long)s0->pages_dependent, leaving);

  rp_test_shadow_start(&r->dev, 1, 1, 16, 21);
  uint64_t t0 = rp_test_now_ms();
  assert_int_equal(rampart_server_drain(e, leaving, false, r->msg, sizeof r->msg), 0);
  print_message("drain: %s\n", r->msg);
  expect_msg(r->msg, "draining");
  /* Repeating it says so and changes nothing. */
  assert_int_equal(rampart_server_drain(e, leaving, false, r->msg, sizeof r->msg), 0);
  expect_msg(r->msg, "already");
  wait_drained(r, leaving, false, 60);
  uint64_t took = rp_test_now_ms() - t0;
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r->dev);
  rp_test_shadow_expect_clean("writes and reads across the drain", &res);
  rampart_get_stats(e, &after);
  const struct rampart_server_stats *s = server_stats(&after, leaving);
  print_message("drained in %llu ms: %llu pages moved for the drain; the server holds %llu "
                "pages, %llu depend on it; degraded reads %llu -> %llu\n",
                (unsigned long long)took,
                (unsigned long long)after.moves_by_reason[RAMPART_MOVE_DRAIN],
                (unsigned long long)s->pages_stored, (unsigned long long)s->pages_dependent,
                (unsigned long long)before.pages_degraded_reads,
                (unsigned long long)after.pages_degraded_reads);
  assert_int_equal(s->pages_stored, 0);
  assert_int_equal(s->pages_dependent, 0);
  assert_true(after.moves_by_reason[RAMPART_MOVE_DRAIN] > 0);
  /* The drain read every page from the server itself: nothing was rebuilt. */
  assert_int_equal(after.pages_degraded_reads, before.pages_degraded_reads);

  /* Now the server can go: killing it loses nothing and costs no degraded read. */
  rp_test_server_kill(&r->cluster.servers[1]);
  assert_false(rp_test_server_alive(&r->cluster.servers[1]));
  verify_clean(r, "the drained server killed");
  rampart_get_stats(e, &after);
  assert_int_equal(after.pages_degraded_reads, before.pages_degraded_reads);
  assert_int_equal(after.pages_lost, 0);
  rig_stop(r);
}

static void test_remove_drains_then_ends_the_session(void **state)
{
  (void)state;
  const char *extra[] = { "redundancy", "parity-log", "group", "3", NULL };
  struct rig *r = rig_start(5, 5, "64M", extra);
  struct rampart_engine *e = r->dev.engine;
  struct rp_test_server *leaving = &r->cluster.servers[3];
  rp_test_shadow_start(&r->dev, 1, 1, 16, 31);
  assert_int_equal(rampart_server_drain(e, leaving->addr, true, r->msg, sizeof r->msg), 0);
  print_message("remove: %s\n", r->msg);
  expect_msg(r->msg, "removed once drained");
  wait_drained(r, leaving->addr, true, 60);
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r->dev);
  rp_test_shadow_expect_clean("writes and reads across the removal", &res);
  verify_clean(r, "after the removal");

  /* Its session was ended with GOODBYE: the server holds no reservation for us. */
  struct rp_server_stat stat = { 0 };
  uint64_t until = rp_test_now_ms() + 10000;
  do {
    assert_true(rp_test_server_stat(leaving, &r->cluster.key, &stat));
    if (stat.reserved_pages == 0)
      break;
    rp_test_sleep_ms(100);
  } while (rp_test_now_ms() < until);
  print_message("the removed server: %llu pages reserved, %llu stored\n",
                (unsigned long long)stat.reserved_pages,
                (unsigned long long)stat.stored_pages);
  assert_int_equal(stat.reserved_pages, 0);
  assert_int_equal(stat.stored_pages, 0);

  /* Repeating the removal, or draining a server the device never had, says so. */
  assert_int_equal(rampart_server_drain(e, leaving->addr, true, r->msg, sizeof r->msg), 0);
  expect_msg(r->msg, "removed already");
  assert_int_equal(rampart_server_drain(e, "10.9.9.9:7070", false, r->msg, sizeof r->msg),
                   -ENOENT);
  expect_msg(r->msg, "is not a server of this device");
  /* Added again, it is a new server and takes pages. */
  assert_int_equal(rampart_server_add(e, leaving->addr, r->msg, sizeof r->msg), 0);
  expect_msg(r->msg, "added");
  rig_stop(r);
}

/* A server table past 255 entries (16-bit server indices): one server added and removed
 * until its entries pass 255, then added for good. Its groups name it by an index that a
 * byte cannot hold; every page written there reads back, from it and, once it is killed,
 * rebuilt from the groups that name it. */
static void test_server_indices_past_255_keep_every_page(void **state)
{
  (void)state;
  const char *extra[] = { "redundancy", "parity-log", "group", "2", NULL };
  struct rig *r = rig_start(4, 3, "64M", extra);
  struct rampart_engine *e = r->dev.engine;
  const char *cycled = r->cluster.servers[3].addr;
  static struct rampart_stats st;
  uint64_t started = rp_test_now_ms();
  unsigned cycles = 0;
  for (;;) {
    assert_int_equal(rampart_server_add(e, cycled, r->msg, sizeof r->msg), 0);
    expect_msg(r->msg, "added");
    rampart_get_stats(e, &st);
    if (st.server_entries > 260)
      break;
    assert_int_equal(rampart_server_drain(e, cycled, true, r->msg, sizeof r->msg), 0);
    wait_drained(r, cycled, true, 30);
    cycles++;
  }
  const struct rampart_server_stats *s = server_stats(&st, cycled);
  assert_non_null(s);
  print_message("%u adds and removes in %.1f s: %u table entries, %u in the stats; the "
                "server's index now %u\n",
                cycles, (double)(rp_test_now_ms() - started) / 1e3, st.server_entries,
                st.nservers, s->index);
  assert_true(s->index > 255);
  assert_int_equal(s->index, st.server_entries - 1);
  assert_true(st.nservers <= RAMPART_MAX_INCARNATIONS);

  rp_test_shadow_fill(&r->dev, 0x1d16);
  rampart_get_stats(e, &st);
  s = server_stats(&st, cycled);
  print_message("after a rewrite: %llu pages live on entry %u\n",
                (unsigned long long)s->pages_live, s->index);
  assert_true(s->pages_live > 0);
  verify_clean(r, "pages on a server of index past 255");

  assert_true(rp_test_server_kill(&r->cluster.servers[3]) >= 0);
  verify_clean(r, "its pages rebuilt from their groups");
  rampart_get_stats(e, &st);
  assert_true(st.pages_degraded_reads > 0);
  assert_int_equal(st.pages_lost, 0);
  rig_stop(r);
}

static void test_a_lost_server_removed_is_rebuilt_and_never_rejoins(void **state)
{
  (void)state;
  const char *extra[] = { "redundancy", "parity-log", "group", "3", "lease", "1", NULL };
  struct rig *r = rig_start(5, 5, "64M", extra);
  struct rampart_engine *e = r->dev.engine;
  struct rp_test_server *gone = &r->cluster.servers[2];
  rp_test_server_kill(gone);
  static struct rampart_stats st;
  uint64_t until = rp_test_now_ms() + 20000;
  do {
    rampart_get_stats(e, &st);
    if (server_stats(&st, gone->addr)->state == RAMPART_SERVER_LOST)
      break;
    rp_test_sleep_ms(50);
  } while (rp_test_now_ms() < until);
  assert_int_equal(server_stats(&st, gone->addr)->state, RAMPART_SERVER_LOST);
  assert_int_equal(rampart_server_drain(e, gone->addr, true, r->msg, sizeof r->msg), 0);
  print_message("remove of a lost server: %s\n", r->msg);
  expect_msg(r->msg, "will not join again");
  /* It comes back empty while its pages are rebuilt: it must not be taken back. */
  assert_int_equal(rp_test_cluster_restart(&r->cluster, 2, NULL), 0);
  wait_drained(r, gone->addr, true, 60);
  rp_test_sleep_ms(1500); /* time for a rejoin, were one still attempted */
  rampart_get_stats(e, &st);
  assert_int_equal(st.nservers, 5); /* no new incarnation */
  assert_int_equal(server_stats(&st, gone->addr)->state, RAMPART_SERVER_REMOVED);
  assert_int_equal(st.pages_lost, 0);
  verify_clean(r, "the lost server rebuilt and removed");
  rig_stop(r);
}

static void test_drain_is_refused_when_the_others_cannot_hold_the_pages(void **state)
{
  (void)state;
  /* 4 servers, the device written whole: each holds about a quarter of it plus parity,
   * and the others' free reservation is far less than one server's share. */
  const char *extra[] = { "redundancy", "parity-log", "group", "3", NULL };
  struct rig *r = rig_start(4, 4, "64M", extra);
  struct rampart_engine *e = r->dev.engine;
  const char *target = r->cluster.servers[0].addr;
  int rc = rampart_server_drain(e, target, false, r->msg, sizeof r->msg);
  print_message("refused: %s\n", r->msg);
  assert_int_equal(rc, -ENOSPC);
  expect_msg(r->msg, "short by");
  expect_msg(r->msg, "Add a server");
  static struct rampart_stats st;
  rampart_get_stats(e, &st);
  const struct rampart_server_stats *s = server_stats(&st, target);
  assert_false(s->draining);
  verify_clean(r, "after the refused drain");
  rig_stop(r);
}

static void test_drain_is_refused_when_too_few_servers_would_be_left(void **state)
{
  (void)state;
  const char *extra[] = { "redundancy", "mirror", NULL };
  struct rig *r = rig_start(2, 2, "64M", extra);
  int rc = rampart_server_drain(r->dev.engine, r->cluster.servers[1].addr, true, r->msg,
                                sizeof r->msg);
  print_message("refused: %s\n", r->msg);
  assert_int_equal(rc, -ENOSPC);
  expect_msg(r->msg, "needs 2 to keep every page recoverable");
  rig_stop(r);
}

/* ---- reload, and the control socket ------------------------------------------------------ */

static void write_cluster_file(const char *path, struct rp_test_cluster *c,
                               const unsigned *which, unsigned n)
{
  char text[1024] = "# the device's servers\n";
  for (unsigned i = 0; i < n; i++) {
    strcat(text, c->servers[which[i]].addr);
    strcat(text, "\n");
  }
  assert_int_equal(rp_test_write_file(path, text), 0);
}

/* Runs rampartctl with args; returns its exit status, output in out. */
static int rampartctl(char *out, size_t outlen, const char *const *args)
{
  const char *ctl = getenv("RAMPARTCTL");
  assert_non_null(ctl);
  const char *argv[16] = { ctl };
  unsigned n = 1;
  for (unsigned i = 0; args[i] && n < 15; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  int status = rp_test_run_program(argv, out, outlen, 120000);
  assert_true(status >= 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_reload_adds_one_and_removes_one_through_the_control_socket(void **state)
{
  (void)state;
  struct rp_test_cluster *c = calloc(1, sizeof *c);
  assert_non_null(c);
  assert_int_equal(rp_test_cluster_start(c, 5, "64M", NULL), 0);
  char cluster[700], control[700];
  snprintf(cluster, sizeof cluster, "%s/cluster", c->dir);
  snprintf(control, sizeof control, "%s/control", c->dir);
  write_cluster_file(cluster, c, (const unsigned[]){ 0, 1, 2, 3 }, 4);
  struct rampart_config *cfg = rampart_config_new();
  char err[512], size[32];
  snprintf(size, sizeof size, "%u", PAGES * RAMPART_PAGE_SIZE);
  const char *kv[][2] = {
    { "size", size },      { "cluster", cluster },         { "key", c->key_path },
    { "tmpdir", c->dir },  { "redundancy", "parity-log" }, { "group", "3" },
    { "control", control }
  };
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    assert_int_equal(rampart_config_set(cfg, kv[i][0], kv[i][1], err, sizeof err), 0);
  struct rampart_engine *e = rampart_open(cfg, err, sizeof err);
  if (!e)
    fail_msg("rampart_open: %s", err);
  struct rig *r = calloc(1, sizeof *r);
  r->cluster = *c;
  free(c);
  rp_test_shadow_init(&r->dev, e, PAGES);
  rp_test_shadow_fill(&r->dev, 0xc0de);

  /* Only its owner may use the socket; a second device cannot take it over. */
  struct stat sb;
  assert_int_equal(stat(control, &sb), 0);
  assert_true(S_ISSOCK(sb.st_mode));
  assert_int_equal(sb.st_mode & 0777, 0600);
  const char *dup_kv[][2] = { { "size", "1M" }, { "control", control } };
  struct rampart_config *dup = rampart_config_new();
  for (size_t i = 0; i < 2; i++)
    assert_int_equal(rampart_config_set(dup, dup_kv[i][0], dup_kv[i][1], err, sizeof err), 0);
  assert_null(rampart_open(dup, err, sizeof err));
  print_message("second device refused: %s\n", err);
  expect_msg(err, "another device listens there");
  rampart_config_free(dup);
  rampart_config_free(cfg);

  static char out[65536];
  assert_int_equal(
    rampartctl(out, sizeof out, (const char *[]){ "device", control, "servers", NULL }), 0);
  print_message("%s", out);
  expect_msg(out, r->cluster.servers[3].addr);

  /* The file loses server 3 and gains server 4; reload under a reader and a writer. */
  rp_test_shadow_start(&r->dev, 1, 1, 16, 41);
  write_cluster_file(cluster, &r->cluster, (const unsigned[]){ 0, 1, 2, 4 }, 4);
  int rc = rampartctl(out, sizeof out, (const char *[]){ "device", control, "reload", NULL });
  print_message("reload (exit %d):\n%s", rc, out);
  assert_int_equal(rc, 0);
  expect_msg(out, "1 added, 1 being removed, 0 refused");
  /* rampartctl's remove waits for the end, printing progress: here the removal is
   * already under way, so it watches it to its end. */
  rc = rampartctl(
    out, sizeof out,
    (const char *[]){ "device", control, "remove", r->cluster.servers[3].addr, NULL });
  print_message("remove (exit %d):\n%s", rc, out);
  assert_int_equal(rc, 0);
  expect_msg(out, "removed ");
  struct rp_test_shadow_result res = rp_test_shadow_stop(&r->dev);
  rp_test_shadow_expect_clean("writes and reads across the reload", &res);
  verify_clean(r, "after the reload");

  static struct rampart_stats st;
  rampart_get_stats(e, &st);
  assert_int_equal(server_stats(&st, r->cluster.servers[3].addr)->state,
                   RAMPART_SERVER_REMOVED);
  assert_int_equal(server_stats(&st, r->cluster.servers[4].addr)->state, RAMPART_SERVER_UP);
  assert_true(server_stats(&st, r->cluster.servers[4].addr)->pages_stored > 0);

  /* Reloading the same file again changes nothing; bad commands say what to write. */
  rc = rampartctl(out, sizeof out, (const char *[]){ "device", control, "reload", NULL });
  assert_int_equal(rc, 0);
  expect_msg(out, "the file matches");
  rc = rampartctl(out, sizeof out,
                  (const char *[]){ "device", control, "drain", "nowhere:1", NULL });
  print_message("drain of an unknown server (exit %d): %s", rc, out);
  assert_int_equal(rc, 1);
  expect_msg(out, "is not a server of this device");
  rc = rampartctl(out, sizeof out, (const char *[]){ "device", control, "explode", NULL });
  assert_int_equal(rc, 2);
  rig_stop(r);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_an_added_server_takes_new_groups_under_load),
    cmocka_unit_test(test_a_drained_server_can_be_stopped_without_a_degraded_read),
    cmocka_unit_test(test_remove_drains_then_ends_the_session),
    cmocka_unit_test(test_a_lost_server_removed_is_rebuilt_and_never_rejoins),
    cmocka_unit_test(test_server_indices_past_255_keep_every_page),
    cmocka_unit_test(test_drain_is_refused_when_the_others_cannot_hold_the_pages),
    cmocka_unit_test(test_drain_is_refused_when_too_few_servers_would_be_left),
    cmocka_unit_test(test_reload_adds_one_and_removes_one_through_the_control_socket),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
