/* rampart-swap: attach a rampart device as swap, and take it away again. The command line
 * and its dispatch; each command is a file of its own (swap_on.c, swap_off.c,
 * swap_status.c, swap_upgrade.c, standby_keeper.c). README.md draws the whole. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "standby_keeper.h"
#include "swap_context.h"
#include "swap_off.h"
#include "swap_on.h"
#include "swap_options.h"
#include "swap_status.h"
#include "swap_upgrade.h"

static const char USAGE[] =
  "rampart-swap: attach a rampart device as swap, and take it away again.\n"
  "\n"
  "  rampart-swap on  [options] [KEY=VALUE ...]\n"
  "  rampart-swap off [--config FILE] [--name NAME] [--force]\n"
  "  rampart-swap status [--config FILE] [--name NAME]\n"
  "  rampart-swap reload [--config FILE] [--name NAME]\n"
  "  rampart-swap upgrade [--config FILE] [--name NAME]\n"
  "\n"
  "'upgrade' moves a running ublk or NBD device onto the pager binary installed now, under\n"
  "live swap: a standby on the installed binary replaces the old one, then the serving\n"
  "pager hands over to it (docs/operations.md, Upgrades). It refuses, before it stops\n"
  "anything, when the installed binary cannot read the running pager's state.\n"
  "\n"
  "'reload' has the running device read its cluster= file again: servers new there are\n"
  "added, servers no longer listed are drained and removed, under live swap (rampartctl\n"
  "device /run/rampart/NAME/control reload; docs/elastic.md). systemctl reload runs it.\n"
  "\n"
  "'on' picks the frontend (--frontend forces one), the best this kernel has:\n"
  "  ublk  where /dev/ublk-control exists or 'modprobe ublk_drv' makes it: rampart-ublk\n"
  "        with state=, so the device outlives its daemon, and 'rampart-ublk standby=true'\n"
  "        beside it, which takes the device over if the serving daemon dies\n"
  "  nbd   where /dev/nbd* exists or 'modprobe nbd' makes it: rampart-nbd-server (or\n"
  "        nbdkit rampart, --daemon) with state=, a standby (standby=true) beside it, and\n"
  "        /dev/nbdN attached by rampart-nbd-attach, which moves the device to the\n"
  "        standby if the serving daemon dies\n"
  "  fuse  only where the kernel has neither driver: rampart-fuse (the engine serving a\n"
  "        FUSE file of the device's size) and a loop device over it, with direct I/O;\n"
  "        the NBD daemon behind nbdfuse where rampart-fuse is not installed or the plugin\n"
  "        is not rampart's. No standby: a crash of the pager is then not survived, and\n"
  "        'on' says so\n"
  "The standby is started before the first page goes out (in a host short of memory\n"
  "nothing can be started once swap waits for a dead daemon: docs/recovery.md), and the\n"
  "keeper (rampart-swap itself, left running by 'on') starts a new standby after each\n"
  "takeover, so a second crash is survived too. The daemons say that they serve, stand by\n"
  "or took over by the sd_notify protocol (NOTIFY_SOCKET), never through their logs, and\n"
  "each process 'on' starts is recorded with its start time and program and signalled\n"
  "through a pidfd, so that a pid another process has since been given is never signalled\n"
  "(it is left alone, and the state and 'status' say so). Then 'on' raises\n"
  "vm.min_free_kbytes to at least 16384 (so the kernel keeps the memory it needs to send\n"
  "swap-out traffic), runs mkswap and swapon --discard=pages with --priority. Every daemon\n"
  "locks its memory, is an I/O flusher and is left alone by the OOM killer.\n"
  "'off' refuses, with the numbers and what to do, while the device holds more pages than\n"
  "memory can take back with headroom to spare (an eighth of MemTotal, at most 64 MiB;\n"
  "swapoff would have to OOM-kill processes): it exits 75 and leaves the device on and\n"
  "served, so no page is lost; --force skips that check. 'on' for a device that is still\n"
  "on and served (what a refused 'off' leaves) takes it back and exits 0.\n"
  "\n"
  "Options of 'on':\n"
  "  --config FILE       KEY=VALUE lines (default /etc/rampart/swap.conf if it exists).\n"
  "                      rampart-swap's own keys: name, priority, frontend, queues, depth,\n"
  "                      attach, connections, threads, daemon; every other key goes to the\n"
  "                      pager (size, servers, cluster, key, redundancy, group, spill, ...\n"
  "                      see 'rampart-nbd-server --help'; parity=2 with\n"
  "                      redundancy=parity-log keeps every page through any two lost\n"
  "                      servers of its group). Arguments on the command line override the\n"
  "                      file.\n"
  "  --name NAME         instance name (default rampart), so several devices can coexist\n"
  "  --priority N        swap priority (default 100, above disk swap's usual -2)\n"
  "  --frontend F        auto (default), ublk, nbd or fuse. A frontend forced that this\n"
  "                      host cannot run is refused, with the reason, before anything "
  "starts\n"
  "  --queues N          ublk hardware queues (default: the CPUs, at most 4)\n"
  "  --depth N           ublk requests in flight per queue (default 64 / queues, at least "
  "16)\n"
  "  --attach MODE       the older name of --frontend: auto, nbd or loop (= fuse)\n"
  "  --connections N     NBD connections per device, each a hardware queue of the\n"
  "                      driver and a thread of the pager (default 1 for rampart, 2 for\n"
  "                      another plugin)\n"
  "  --threads N         nbdkit worker threads (default 16)\n"
  "  --daemon D          what serves NBD (the nbd frontend): auto (default:\n"
  "                      rampart-nbd-server where it is installed, else nbdkit),\n"
  "                      rampart-nbd-server (a thread per connection, none per\n"
  "                      request), or nbdkit (the plugin, a worker thread per request).\n"
  "                      Both take the same settings and both have a standby.\n"
  "                      With the fuse frontend, a daemon given serves behind nbdfuse\n"
  "                      in place of rampart-fuse.\n"
  "\n"
  "Environment: RAMPART_PLUGIN (plugin name or .so path, default rampart), NBDKIT\n"
  "(default nbdkit), RAMPART_UBLK (default rampart-ublk), RAMPART_NBD_ATTACH (default\n"
  "rampart-nbd-attach), RAMPART_NBD_SERVER (default rampart-nbd-server), RAMPART_FUSE\n"
  "(default rampart-fuse), RAMPARTCTL (default rampartctl), RAMPART_NBDKIT_PRELOAD\n"
  "(LD_PRELOAD for nbdkit; sanitizer test builds), RAMPART_RUN_DIR (default /run/rampart).\n"
  "\n"
  "Exit status: 0 done, 1 failed (the message says what to do), 2 the command line was\n"
  "wrong, 3 'status' of a device that is off, 75 'off' refused (the pages cannot come "
  "home).\n";

static const char *const command_words[] = {
  [SWAP_ON] = "on",         [SWAP_OFF] = "off",         [SWAP_STATUS] = "status",
  [SWAP_RELOAD] = "reload", [SWAP_UPGRADE] = "upgrade", [SWAP_KEEP_STANDBY] = "keep-standby",
};

/* The CPUs this process may run on, as nproc counts them. */
static int cpus(void)
{
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return CPU_COUNT(&set);
  return 1;
}

/* The settings from the command line and the file; ends the process on a refusal. */
static void load_settings(struct swap_context *c, const struct swap_args *a)
{
  char err[1024];
  struct swap_kv file = { 0 };
  const char *path = a->config_file;
  if (!path && access("/etc/rampart/swap.conf", R_OK) == 0)
    path = "/etc/rampart/swap.conf";
  c->config_file = path ? path : "";
  if (path) {
    if (access(path, R_OK) != 0)
      swap_die("cannot read --config %s", path);
    if (swap_config_read(path, &file, err, sizeof err) != 0)
      swap_die("%s", err);
  }
  if (swap_settings_resolve(a, &file, cpus(), &c->set, err, sizeof err) != 0)
    swap_die("%s", err);
  swap_kv_free(&file);
  snprintf(c->state, sizeof c->state, "%s/%s", c->run_dir, c->set.name);
}

int main(int argc, char **argv)
{
  static struct swap_context c;
  struct swap_args a;
  char err[1024];
  int rc = swap_args_parse(argc - 1, argv + 1, &a, err, sizeof err);
  if (rc == 2 && strcmp(err, "usage") == 0) {
    fputs(USAGE, stderr);
    return 2;
  }
  if (rc == 2) {
    fprintf(stderr, SWAP_ME ": %s\n", err);
    return 2;
  }
  if (rc != 0)
    swap_die("%s", err);
  if (a.cmd == SWAP_HELP) {
    fputs(USAGE, stdout);
    return 0;
  }
  swap_context_init(&c);
  c.force = a.force;
  load_settings(&c, &a);
  swap_kv_free(&a.cmdline_kv);
  if (a.cmd == SWAP_KEEP_STANDBY)
    return swap_keep_standby(&c);
  if (a.cmd == SWAP_STATUS)
    return swap_status(&c);
  if (a.cmd == SWAP_RELOAD)
    return swap_reload(&c);
  if (geteuid() != 0)
    swap_die("%s needs root (swapon, block devices and sysctl do): run it with sudo",
             command_words[a.cmd]);
  if (a.cmd == SWAP_UPGRADE)
    swap_upgrade(&c);
  else if (a.cmd == SWAP_OFF)
    swap_turn_off(&c);
  else
    swap_turn_on(&c);
  swap_kv_free(&c.set.pager);
  return 0;
}
