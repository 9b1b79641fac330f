/* nbdkit-rampart-plugin: exposes the rampart engine as an NBD export.
 *
 *   nbdkit rampart size=4G servers=10.0.0.2:7070,10.0.0.3:7070,... key=/etc/rampart/key
 *
 * Thin glue on purpose: every decision lives in librampart (src/), shared with the ublk
 * target and the tests. One engine serves every connection, so can_multi_conn is true
 * (a flush on any connection covers writes from all of them). The engine is started in
 * after_fork, because nbdkit forks to daemonize and threads do not survive a fork.
 *
 * standby=true makes this nbdkit the standby of another serving the same state=
 * (docs/recovery.md): it binds its own socket, then waits in after_fork, before it
 * accepts anyone, until the serving pager dies, and takes its state over.
 * rampart-nbd-attach (nbd/) moves the kernel's device to it.
 */
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_settings.h"
#include "rampart.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

static struct rampart_config *config;
static struct rampart_engine *engine;
static struct rampart_frontend_switches switches = RAMPART_FRONTEND_SWITCHES_DEFAULT;

static void plugin_load(void)
{
  config = rampart_config_new();
}

static void plugin_unload(void)
{
  if (engine) {
    struct rampart_stats st;
    static char report[64 * 1024]; /* a line per server: the stats hold 255 */
    rampart_get_stats(engine, &st);
    rampart_format_stats(&st, report, sizeof report);
    nbdkit_debug("final stats:\n%s", report);
  }
  rampart_close(engine);
  rampart_config_free(config);
}

/* nbdkit has errors and debug messages only; warnings must stay visible without -v,
 * so they go out as errors that say they are warnings. */
static void log_line(int level, const char *line)
{
  if (level == 0)
    nbdkit_error("%s", line);
  else if (level == 1)
    nbdkit_error("warning: %s", line);
  else
    nbdkit_debug("%s", line);
}

static int plugin_config(const char *key, const char *value)
{
  char err[512];
  if (!config) {
    nbdkit_error("out of memory");
    return -1;
  }
  /* The switches every frontend takes; every other key is the engine's. */
  int r = rampart_frontend_switch(&switches, key, value, err, sizeof err);
  if (r == 0)
    r = rampart_config_set(config, key, value, err, sizeof err);
  if (r < 0) {
    nbdkit_error("%s", err);
    return -1;
  }
  return 0;
}

static int plugin_config_complete(void)
{
  char err[512];
  if (rampart_config_check(config, err, sizeof err) < 0 ||
      rampart_frontend_switches_check(&switches, config, err, sizeof err) < 0) {
    nbdkit_error("%s", err);
    return -1;
  }
  return 0;
}

static int plugin_after_fork(void)
{
  char err[512];
  rampart_set_log_sink(log_line);
  rampart_process_harden(switches.lock_memory);
  engine = switches.standby ? rampart_open_standby("nbdkit: rampart", config, err, sizeof err)
                            : rampart_open(config, err, sizeof err);
  if (!engine) {
    nbdkit_error("%s%s", switches.standby ? "standby: " : "", err);
    return -1;
  }
  /* nbdkit listens before after_fork and accepts once it returns: a client that
   * connects now is served. */
  if (!switches.standby)
    rampart_notify(RAMPART_NOTICE_SERVING, "nbdkit rampart's export");
  return 0;
}

static void *plugin_open(int readonly)
{
  return engine; /* every connection shares the one engine */
}

static int64_t plugin_get_size(void *handle)
{
  return (int64_t)rampart_size(engine);
}

static int plugin_block_size(void *handle, uint32_t *minimum, uint32_t *preferred,
                             uint32_t *maximum)
{
  *minimum = 1; /* the engine read-modify-writes partial pages */
  *preferred = RAMPART_PAGE_SIZE;
  *maximum = 0xffffffff;
  return 0;
}

static int plugin_can_multi_conn(void *handle)
{
  return 1;
}
static int plugin_can_trim(void *handle)
{
  return 1;
}
static int plugin_can_zero(void *handle)
{
  return 1;
}
static int plugin_can_flush(void *handle)
{
  return 1;
}
static int plugin_can_fua(void *handle)
{
  return NBDKIT_FUA_EMULATE;
}

/* nbdkit maps unknown errno values to EINVAL; the engine returns only EIO, EINVAL and
 * ENOSPC, which NBD carries as they are. */
static int fail(int r)
{
  nbdkit_set_error(-r);
  return -1;
}

static int plugin_pread(void *handle, void *buf, uint32_t count, uint64_t offset,
                        uint32_t flags)
{
  int r = rampart_pread(engine, buf, count, offset);
  return r < 0 ? fail(r) : 0;
}

static int plugin_pwrite(void *handle, const void *buf, uint32_t count, uint64_t offset,
                         uint32_t flags)
{
  int r = rampart_pwrite(engine, buf, count, offset, 0);
  return r < 0 ? fail(r) : 0;
}

static int plugin_trim(void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  int r = rampart_trim(engine, count, offset);
  return r < 0 ? fail(r) : 0;
}

static int plugin_zero(void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  int r = rampart_zero(engine, count, offset);
  return r < 0 ? fail(r) : 0;
}

static int plugin_flush(void *handle, uint32_t flags)
{
  int r = rampart_flush(engine);
  return r < 0 ? fail(r) : 0;
}

/* nbdkit --dump-plugin: the state layout this build takes over (rampart-swap upgrade). */
static void plugin_dump_plugin(void)
{
  printf("rampart_state_layout=%s\n", rampart_state_layout());
}

static struct nbdkit_plugin plugin = {
  .name = "rampart",
  .longname = "rampart remote-memory pager",
  .version = "0.1.0",
  .description = "A swap device whose pages live in other machines' RAM, protected by "
                 "parity logging, falling back to local disk.",
  .load = plugin_load,
  .unload = plugin_unload,
  .config = plugin_config,
  .config_complete = plugin_config_complete,
  .dump_plugin = plugin_dump_plugin,
  .config_help = RAMPART_SETTINGS_HELP
  "mlock=BOOL                lock the daemon's memory (default true)\n"
  "standby=BOOL              wait beside the nbdkit serving the same state=,\n"
  "                          take it over when that one dies",
  .magic_config_key = "size",
  .after_fork = plugin_after_fork,
  .open = plugin_open,
  .get_size = plugin_get_size,
  .block_size = plugin_block_size,
  .can_multi_conn = plugin_can_multi_conn,
  .can_trim = plugin_can_trim,
  .can_zero = plugin_can_zero,
  .can_flush = plugin_can_flush,
  .can_fua = plugin_can_fua,
  .pread = plugin_pread,
  .pwrite = plugin_pwrite,
  .trim = plugin_trim,
  .zero = plugin_zero,
  .flush = plugin_flush,
  .errno_is_preserved = 0,
};

NBDKIT_REGISTER_PLUGIN(plugin)
