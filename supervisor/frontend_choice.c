/* Choosing the frontend (frontend_choice.h). Each check leaves why_not saying what is
 * missing, for a refusal or the fall-back's note. */
#include "frontend_choice.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "program_run.h"
#include "swap_context.h"

#define WHY_LEN 512

static bool found(const char *prog)
{
  char buf[4096];
  return swap_find_program(prog, buf, sizeof buf) != NULL;
}

/* path exists within two seconds. */
static bool appears(const char *path)
{
  for (int i = 0; i <= 20; i++) {
    if (access(path, F_OK) == 0)
      return true;
    swap_sleep_ms(100);
  }
  return false;
}

/* modprobe with its arguments; false with its message in err. */
static bool modprobe(const char *const argv[], char *err, size_t errlen)
{
  struct run_io io = {
    .out_mode = RUN_CAPTURE, .err_mode = RUN_CAPTURE, .out = err, .outlen = errlen
  };
  bool ok = run_program(argv, &io) == 0;
  err[strcspn(err, "\n")] = '\0';
  if (!*err)
    snprintf(err, errlen, "no message");
  return ok;
}

static bool ublk_usable(const struct swap_context *c, char *why)
{
  if (!found(c->prog.ublk)) {
    snprintf(why, WHY_LEN, "rampart-ublk is not installed (%s not found)", c->prog.ublk);
    return false;
  }
  if (!c->rampart_plugin) {
    snprintf(why, WHY_LEN, "RAMPART_PLUGIN=%s is not the rampart engine", c->prog.plugin);
    return false;
  }
  if (access("/dev/ublk-control", F_OK) == 0)
    return true;
  char err[256];
  const char *argv[] = { "modprobe", "ublk_drv", NULL };
  if (!modprobe(argv, err, sizeof err)) {
    snprintf(why, WHY_LEN,
             "this kernel has no ublk driver: there is no /dev/ublk-control and 'modprobe "
             "ublk_drv' failed (%s); ublk needs Linux 6.0 or later with CONFIG_BLK_DEV_UBLK",
             err);
    return false;
  }
  if (!appears("/dev/ublk-control")) {
    snprintf(why, WHY_LEN, "'modprobe ublk_drv' made no /dev/ublk-control");
    return false;
  }
  return true;
}

static bool nbd_usable(const struct swap_context *c, char *why)
{
  if (access("/sys/module/nbd", F_OK) != 0) {
    char err[256];
    const char *argv[] = { "modprobe", "nbd", "nbds_max=16", NULL };
    if (!modprobe(argv, err, sizeof err)) {
      snprintf(why, WHY_LEN,
               "this kernel has no NBD driver: there is no /dev/nbd0 and 'modprobe nbd' "
               "failed (%s)",
               err);
      return false;
    }
  }
  if (!appears("/dev/nbd0")) {
    snprintf(why, WHY_LEN, "'modprobe nbd' made no /dev/nbd0");
    return false;
  }
  if (c->rampart_plugin && !found(c->prog.nbd_attach)) {
    snprintf(why, WHY_LEN, "rampart-nbd-attach is not installed (%s not found)",
             c->prog.nbd_attach);
    return false;
  }
  if (!c->rampart_plugin && !found("nbd-client")) {
    snprintf(why, WHY_LEN, "nbd-client is missing (package nbd-client)");
    return false;
  }
  return true;
}

static bool fuse_usable(const struct swap_context *c, const struct frontend_choice *f,
                        char *why)
{
  if (strcmp(f->fuse_daemon, "nbdfuse") == 0) {
    if (strcmp(f->daemon, "rampart-nbd-server") != 0 && !found(c->prog.nbdkit)) {
      snprintf(why, WHY_LEN, "cannot find %s (package nbdkit)", c->prog.nbdkit);
      return false;
    }
    if (!found("nbdfuse")) {
      snprintf(why, WHY_LEN, "cannot find nbdfuse (package libnbd-bin)");
      return false;
    }
  }
  if (!found("losetup")) {
    snprintf(why, WHY_LEN, "cannot find losetup (package util-linux)");
    return false;
  }
  if (access("/dev/fuse", F_OK) != 0) {
    const char *argv[] = { "modprobe", "fuse", NULL };
    run_quiet(argv);
  }
  if (access("/dev/fuse", F_OK) != 0) {
    snprintf(why, WHY_LEN, "no /dev/fuse: load the fuse module");
    return false;
  }
  return true;
}

/* Who serves NBD for the nbd and fuse frontends: rampart-nbd-server takes a batch of
 * requests per wake where nbdkit runs a thread per request (docs/performance.md). */
static void choose_daemon(const struct swap_context *c, struct frontend_choice *f)
{
  const char *asked = c->set.daemon;
  snprintf(f->daemon, sizeof f->daemon, "%s", asked);
  if (strcmp(asked, "auto") == 0) {
    snprintf(f->daemon, sizeof f->daemon, "%s",
             c->rampart_plugin && found(c->prog.nbd_server) ? "rampart-nbd-server"
                                                            : "nbdkit");
  } else if (strcmp(asked, "rampart-nbd-server") == 0) {
    if (!c->rampart_plugin)
      swap_die("--daemon rampart-nbd-server serves the rampart engine, not "
               "RAMPART_PLUGIN=%s: leave --daemon out",
               c->prog.plugin);
    if (!found(c->prog.nbd_server))
      swap_die("--daemon rampart-nbd-server: cannot find %s (it comes with rampart's "
               "package; or leave --daemon out to use nbdkit)",
               c->prog.nbd_server);
  }
  /* The fuse frontend's daemon: rampart-fuse, the engine in the FUSE daemon itself, where
   * it is installed, serves the rampart engine and no --daemon was asked for; nbdfuse in
   * front of the NBD daemon otherwise (the benchmarks' 'nbdkit memory'). */
  bool rampart_fuse = c->rampart_plugin && strcmp(asked, "auto") == 0 && found(c->prog.fuse);
  snprintf(f->fuse_daemon, sizeof f->fuse_daemon, "%s",
           rampart_fuse ? "rampart-fuse" : "nbdfuse");
}

static void warn_fuse_unsurvived(const struct frontend_choice *f, const char *no_ublk,
                                 const char *no_nbd)
{
  if (no_ublk)
    say("warning: this host has neither ublk (%s) nor NBD (%s): attaching through %s and a "
        "loop device, which has no standby: a crash of the pager is then NOT survived (the "
        "processes whose pages it held die with it)",
        no_ublk, no_nbd, f->fuse_daemon);
  else
    say("warning: --frontend fuse attaches through %s and a loop device, which has no "
        "standby: a crash of the pager is then NOT survived (the processes whose pages it "
        "held die with it). Leave --frontend out to take ublk or NBD where this host has "
        "them",
        f->fuse_daemon);
}

static void choose_auto(const struct swap_context *c, struct frontend_choice *f)
{
  char no_ublk[WHY_LEN], why[WHY_LEN];
  if (ublk_usable(c, no_ublk)) {
    snprintf(f->frontend, sizeof f->frontend, "ublk");
  } else if (nbd_usable(c, why)) {
    snprintf(f->frontend, sizeof f->frontend, "nbd");
    say("not ublk (%s): using NBD", no_ublk);
  } else {
    char no_fuse[WHY_LEN];
    if (!fuse_usable(c, f, no_fuse))
      swap_die("no frontend works here: no ublk (%s), no NBD (%s)", no_ublk, why);
    warn_fuse_unsurvived(f, no_ublk, why);
    snprintf(f->frontend, sizeof f->frontend, "fuse");
  }
}

void swap_choose_frontend(const struct swap_context *c, struct frontend_choice *f)
{
  char why[WHY_LEN];
  *f = (struct frontend_choice){ 0 };
  choose_daemon(c, f);
  const char *asked = c->set.frontend;
  snprintf(f->frontend, sizeof f->frontend, "%s", asked);
  if (strcmp(asked, "ublk") == 0) {
    if (!ublk_usable(c, why))
      swap_die("--frontend ublk cannot work here: %s. Nothing was started; use --frontend "
               "nbd, or leave --frontend out to take the best this host has",
               why);
  } else if (strcmp(asked, "nbd") == 0) {
    if (!nbd_usable(c, why))
      swap_die("--frontend nbd cannot work here: %s. Nothing was started; leave --frontend "
               "out to take the best this host has",
               why);
  } else if (strcmp(asked, "fuse") == 0) {
    if (!fuse_usable(c, f, why))
      swap_die("--frontend fuse cannot work here: %s. Nothing was started", why);
    warn_fuse_unsurvived(f, NULL, NULL);
  } else {
    choose_auto(c, f);
  }
  if (strcmp(f->frontend, "nbd") == 0 && !c->rampart_plugin)
    snprintf(f->frontend, sizeof f->frontend, "nbd-client");
  if (strcmp(f->frontend, "fuse") == 0 && strcmp(f->fuse_daemon, "rampart-fuse") == 0)
    snprintf(f->daemon, sizeof f->daemon, "rampart-fuse");
  bool ublk = strcmp(f->frontend, "ublk") == 0;
  if (!ublk && strcmp(f->daemon, "rampart-nbd-server") != 0 &&
      strcmp(f->daemon, "rampart-fuse") != 0 && !found(c->prog.nbdkit))
    swap_die("cannot find %s: install it (package nbdkit)", c->prog.nbdkit);
}
