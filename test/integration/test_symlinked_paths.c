/* Files the daemons create as root at paths from their settings follow no symbolic link
 * (common/file_create.h, docs/security.md "Files"). A link to a victim file is planted
 * at each such path in turn: the pager (against real rampartd processes) and rampartd
 * itself refuse to start with an error that names the path and says it is a link, and
 * the victim keeps its bytes and its mode. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_cluster.h"
#include "rampart.h"

#define VICTIM_TEXT "the victim's own bytes: nothing rampart writes\n"
#define VICTIM_MODE 0640

struct rig {
  struct rp_test_cluster cluster;
  char victim[700];
};

static int rig_setup(void **state)
{
  struct rig *r = calloc(1, sizeof *r);
  if (!r || rp_test_cluster_start(&r->cluster, 2, "16M", NULL) < 0)
    return -1;
  snprintf(r->victim, sizeof r->victim, "%s/victim", r->cluster.dir);
  if (rp_test_write_file(r->victim, VICTIM_TEXT) < 0 || chmod(r->victim, VICTIM_MODE) < 0)
    return -1;
  *state = r;
  return 0;
}

static int rig_teardown(void **state)
{
  struct rig *r = *state;
  rp_test_cluster_stop(&r->cluster);
  free(r);
  return 0;
}

/* The victim is as the rig made it. */
static void assert_victim_untouched(const struct rig *r, const char *what)
{
  char text[256] = "";
  FILE *f = fopen(r->victim, "re");
  assert_non_null(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  struct stat st;
  assert_int_equal(stat(r->victim, &st), 0);
  if (strcmp(text, VICTIM_TEXT) != 0 || (st.st_mode & 07777) != VICTIM_MODE)
    fail_msg("%s: the link's target changed: mode %o, bytes '%s'", what,
             (unsigned)(st.st_mode & 07777), text);
}

/* Removes the segment a state anchor names, if one was made before a refusal. */
static void remove_state(const char *anchor)
{
  FILE *f = fopen(anchor, "re");
  int id;
  if (f) {
    if (fscanf(f, "rampart pager state 1\nsegment %d", &id) == 1)
      shmctl(id, IPC_RMID, NULL);
    fclose(f);
  }
  unlink(anchor);
}

/* A pager setting that names a file the pager creates, and where the link is planted
 * (the setting's path plus `link_suffix`). */
struct planted {
  const char *key;
  const char *link_suffix;
};

static const struct planted planted[] = {
  { "state", "" },       /* the anchor */
  { "state", ".lock" },  /* its lock */
  { "state", ".spill" }, /* the spill file named after it */
  { "spill", "" },       { "stats-file", "" }, { "metrics-file", "" }, { "control", "" },
};

static void test_the_pager_refuses_a_link_at_each_path(void **state)
{
  struct rig *r = *state;
  for (size_t i = 0; i < sizeof planted / sizeof planted[0]; i++) {
    const struct planted *p = &planted[i];
    char path[700], link[720], servers[256], err[1024] = "";
    snprintf(path, sizeof path, "%s/%zu-%s", r->cluster.dir, i, p->key);
    snprintf(link, sizeof link, "%s%s", path, p->link_suffix);
    assert_int_equal(symlink(r->victim, link), 0);
    snprintf(servers, sizeof servers, "%s,%s", r->cluster.servers[0].addr,
             r->cluster.servers[1].addr);
    struct rampart_config *c = rampart_config_new();
    const char *kv[][2] = { { "size", "16M" },
                            { "servers", servers },
                            { "key", r->cluster.key_path },
                            { p->key, path } };
    for (unsigned k = 0; k < sizeof kv / sizeof kv[0]; k++)
      if (rampart_config_set(c, kv[k][0], kv[k][1], err, sizeof err) < 0)
        fail_msg("%s=%s: %s", kv[k][0], kv[k][1], err);
    struct rampart_engine *e = rampart_open(c, err, sizeof err);
    rampart_config_free(c);
    if (e) {
      rampart_close(e);
      assert_victim_untouched(r, link);
      fail_msg("a link at %s (%s=) was taken: the pager opened", link, p->key);
    }
    print_message("%s=%s, a link at %s: %s\n", p->key, path, link, err);
    if (!strstr(err, link) || !strstr(err, "symbolic link"))
      fail_msg("the refusal does not name %s as a symbolic link: %s", link, err);
    assert_victim_untouched(r, link);
    /* The link stays, or a refused fresh state took away its spill file's name with
     * it: a name, never the target's bytes. */
    struct stat st;
    if (lstat(link, &st) == 0)
      assert_true(S_ISLNK(st.st_mode));
    if (strcmp(p->key, "state") == 0 && p->link_suffix[0])
      remove_state(path);
  }
}

static void test_rampartd_refuses_a_link_at_its_pid_file(void **state)
{
  struct rig *r = *state;
  char link[720], out[4096] = "";
  snprintf(link, sizeof link, "%s/rampartd.pid", r->cluster.dir);
  assert_int_equal(symlink(r->victim, link), 0);
  const char *args[] = { "--listen",     "127.0.0.1:0", "--memory", "16M",
                         "--foreground", "--pid-file",  link,       NULL };
  int status = rp_test_run_rampartd(args, out, sizeof out, 10000);
  print_message("%s", out);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  assert_non_null(strstr(out, link));
  assert_non_null(strstr(out, "symbolic link"));
  assert_victim_untouched(r, link);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_the_pager_refuses_a_link_at_each_path, rig_setup,
                                    rig_teardown),
    cmocka_unit_test_setup_teardown(test_rampartd_refuses_a_link_at_its_pid_file, rig_setup,
                                    rig_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
