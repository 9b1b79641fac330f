/* rampart-ublk: the rampart engine as a ublk block device, /dev/ublkbN.
 *
 *   rampart-ublk size=4G servers=10.0.0.2:7070,10.0.0.3:7070,... key=/etc/rampart/key
 *
 * The same KEY=VALUE settings as `nbdkit rampart` (rampart_config_help), plus the ublk
 * queue's shape as options. Thin glue, as the nbdkit plugin is: the engine decides
 * everything; this file adds the device, runs one queue thread per hardware queue
 * (ublk_queue.c) and, on SIGTERM or SIGINT, stops and deletes the device once every
 * request in flight has been answered. It prints the device's path on stdout once
 * /dev/ublkbN takes I/O, so a script can wait for that line.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "rampart.h"
#include "ublk_control.h"
#include "ublk_queue.h"
#include "ublk_standby.h"

#define MAX_QUEUES 16
/* What a standby holds to give back at takeover: the engine's and the queues' memory
 * (the map and seals live in the state, already resident) with room to spare. */
#define STANDBY_RESERVE (16u << 20)

static const char usage[] =
  "usage: rampart-ublk [--id N] [--queues N] [--depth N] [--max-io BYTES] KEY=VALUE...\n"
  "       rampart-ublk --state-layout\n"
  "  --id N        the device number: /dev/ublkbN (default: the kernel picks one)\n"
  "  --queues N    hardware queues, a thread each (default 1; at most 16)\n"
  "  --depth N     requests in flight per queue (default 64; at most 4096)\n"
  "  --max-io B    the largest request, in bytes, a multiple of 4096 (default 131072);\n"
  "                the daemon locks queues * depth * B of buffers\n"
  "  mlock=BOOL    lock the daemon's memory (default true; a swap device must)\n"
  "  standby=BOOL  with --id and state=: wait beside the daemon serving that device,\n"
  "                locked in memory, and take the device over the moment it dies\n"
  "  With state=PATH the device outlives the daemon: if it dies, the kernel holds the\n"
  "  device's I/O, and the same command (with --id) takes the device back where it was\n"
  "  (docs/recovery.md). In a machine short of memory only a standby started beforehand\n"
  "  can: nothing new can start while swap waits for a daemon.\n"
  "  --state-layout  print the layout of the state this build takes over, and exit\n"
  "                (rampart-swap upgrade refuses a binary whose layout differs)\n"
  "  With NOTIFY_SOCKET set it tells its supervisor READY=1 once the device takes I/O\n"
  "  or it stands by, and RAMPART_TOOK_OVER=1 at a takeover (the sd_notify protocol).\n"
  "  KEY=VALUE     the engine's settings, as nbdkit rampart takes them:\n";

static int parse_number(const char *opt, const char *s, unsigned long min, unsigned long max,
                        unsigned long *out)
{
  char *end;
  errno = 0;
  unsigned long v = strtoul(s ? s : "", &end, 10);
  if (!s || *s == '\0' || *end != '\0' || errno || v < min || v > max) {
    fprintf(stderr, "rampart-ublk: %s '%s': give a number from %lu to %lu\n", opt, s ? s : "",
            min, max);
    return -1;
  }
  *out = v;
  return 0;
}

/* /dev/ublkcN appears when udev or devtmpfs has made it, a moment after ADD_DEV. */
static int open_char_device(unsigned id, char *err, size_t errlen)
{
  char path[64];
  snprintf(path, sizeof path, "/dev/ublkc%u", id);
  for (int i = 0; i < 100; i++) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT)
      return fd >= 0
               ? fd
               : (snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno)), -1);
    usleep(20000);
  }
  snprintf(err, errlen,
           "%s did not appear within 2 s of adding the device: is devtmpfs "
           "mounted on /dev?",
           path);
  return -1;
}

/* 1 when device dev_id exists and waits for a daemon (its last one died: the kernel
 * quiesced it), 0 when there is no such device, -1 (err) when it is served. */
static int device_left_by_a_dead_daemon(struct ublk_control *c, int dev_id, char *err,
                                        size_t errlen)
{
  int r = ublk_control_get_info(c, dev_id);
  if (r == -ENODEV || r == -ENOENT)
    return 0;
  if (r < 0) {
    snprintf(err, errlen, "cannot ask the ublk driver about device %d: %s", dev_id,
             strerror(-r));
    return -1;
  }
  if (c->info.state == UBLK_S_DEV_QUIESCED)
    return 1;
  snprintf(err, errlen,
           "ublk device %d exists and %s (daemon pid %d): stop that daemon, "
           "or pick another id (--id)",
           dev_id,
           c->info.state == UBLK_S_DEV_LIVE ? "is served" : "is not waiting for a daemon",
           (int)c->info.ublksrv_pid);
  return -1;
}

struct options {
  unsigned long dev_id, queues, depth, max_io;
  struct rampart_frontend_switches switches;
};

/* One of the daemon's own arguments (struct rampart_frontend_args's option). */
static int take_option(void *ctx, const char *a, const char *value)
{
  struct options *o = ctx;
  if (strcmp(a, "--id") == 0)
    return parse_number(a, value, 0, 1u << 20, &o->dev_id) < 0 ? -1 : 2;
  if (strcmp(a, "--queues") == 0)
    return parse_number(a, value, 1, MAX_QUEUES, &o->queues) < 0 ? -1 : 2;
  if (strcmp(a, "--depth") == 0)
    return parse_number(a, value, 1, UBLK_MAX_QUEUE_DEPTH, &o->depth) < 0 ? -1 : 2;
  if (strcmp(a, "--max-io") == 0) {
    if (parse_number(a, value, 4096, 1u << 20, &o->max_io) < 0)
      return -1;
    if (o->max_io % 4096) {
      fprintf(stderr, "rampart-ublk: --max-io %lu: give a multiple of 4096\n", o->max_io);
      return -1;
    }
    return 2;
  }
  return 0;
}

/* The options together, once every argument is read. */
static int check_options(void *ctx, const struct rampart_config *config)
{
  struct options *o = ctx;
  if (o->switches.standby && o->dev_id == (unsigned long)-1) {
    fprintf(stderr, "rampart-ublk: standby=true needs --id N and state=PATH, as the "
                    "serving daemon has them\n");
    return -1;
  }
  return 0;
}

int main(int argc, char **argv)
{
  struct options o = { .dev_id = (unsigned long)-1,
                       .queues = 1,
                       .depth = 64,
                       .max_io = 131072,
                       .switches = RAMPART_FRONTEND_SWITCHES_DEFAULT };
  char err[512];
  const struct rampart_frontend_args args = { "rampart-ublk", usage, take_option,
                                              check_options,  &o,    &o.switches };
  int exit_status;
  struct rampart_config *config = rampart_config_from_arguments(&args, argc, argv,
                                                                &exit_status);
  if (!config)
    return exit_status;
  unsigned long queues = o.queues, depth = o.depth, max_io = o.max_io;

  /* Signals are taken by sigwait in this thread only: block them before any thread
   * (the engine's, the queues') exists, so every one inherits the mask. */
  sigset_t stop_signals;
  rampart_block_stop_signals(&stop_signals);

  /* The driver first: without it there is nothing to serve, and no reason to connect. */
  struct ublk_control control;
  if (ublk_control_open(&control, err, sizeof err) < 0) {
    fprintf(stderr, "rampart-ublk: %s\n", err);
    rampart_config_free(config);
    return 1;
  }
  rampart_process_harden(o.switches.lock_memory);
  uint64_t died_ms = 0;
  err[0] = '\0';
  if (o.switches.standby) {
    rampart_warm_up();
    const char *files[4];
    unsigned nfiles = rampart_config_takeover_files(config, files);
    int w = ublk_standby_wait(&control, (int)o.dev_id, files, nfiles, STANDBY_RESERVE, err,
                              sizeof err);
    if (w <= 0) {
      if (w < 0 || err[0])
        fprintf(stderr, "rampart-ublk: %s\n", err);
      else
        fprintf(stderr,
                "rampart-ublk: /dev/ublkb%lu was stopped by its daemon: nothing to "
                "take over\n",
                o.dev_id);
      ublk_control_close(&control);
      rampart_config_free(config);
      return w < 0 ? 1 : 0;
    }
    died_ms = rp_now_ms();
  }
  struct rampart_engine *engine = rampart_open(config, err, sizeof err);
  if (!engine) {
    fprintf(stderr, "rampart-ublk: %s\n", err);
    ublk_control_close(&control);
    rampart_config_free(config);
    return 1;
  }
  int status = 1;
  struct ublk_queue queue[MAX_QUEUES];
  unsigned started = 0;
  int char_fd = -1;
  /* state= given: the device outlives this daemon */
  bool recoverable = rampart_config_state_path(config) != NULL;
  int recovering = recoverable && o.dev_id != (unsigned long)-1
                     ? device_left_by_a_dead_daemon(&control, (int)o.dev_id, err, sizeof err)
                     : 0;
  if (recovering < 0)
    goto out_control;
  if (recovering) {
    /* The kernel kept the device and its I/O for us: take it back as it is (its
     * parameters stand), and the requests the dead daemon had come again. */
    queues = control.info.nr_hw_queues;
    depth = control.info.queue_depth;
    max_io = control.info.max_io_buf_bytes;
    if (ublk_control_start_recovery(&control, 10000, err, sizeof err) < 0)
      goto out_control;
  } else {
    if (ublk_control_add(&control, (int)o.dev_id, (uint16_t)queues, (uint16_t)depth,
                         (uint32_t)max_io, recoverable, err, sizeof err) < 0)
      goto out_control;
    /* The driver gives a device no more queues than the machine has CPUs, and only the
     * queues it made can be mapped: serve those. */
    if (control.info.nr_hw_queues < queues) {
      fprintf(stderr,
              "rampart-ublk: the driver made %u queue(s), not %lu: one per CPU at "
              "most\n",
              control.info.nr_hw_queues, queues);
      queues = control.info.nr_hw_queues;
    }
    if (ublk_control_set_params(&control, rampart_size(engine), err, sizeof err) < 0)
      goto out_delete;
  }
  char_fd = open_char_device(control.info.dev_id, err, sizeof err);
  if (char_fd < 0)
    goto out_delete;
  for (; started < queues; started++)
    if (ublk_queue_start(&queue[started], char_fd, (uint16_t)started, (uint16_t)depth,
                         (uint32_t)max_io, engine, err, sizeof err) < 0)
      goto out_stop;
  if (recovering ? ublk_control_end_recovery(&control, getpid(), err, sizeof err) < 0
                 : ublk_control_start(&control, getpid(), err, sizeof err) < 0)
    goto out_stop;
  printf("/dev/ublkb%u\n", control.info.dev_id);
  fflush(stdout);
  char device[32];
  snprintf(device, sizeof device, "/dev/ublkb%u", control.info.dev_id);
  fprintf(stderr,
          "rampart-ublk: /dev/ublkb%u is %s: %llu bytes, %lu queue(s) of %lu, "
          "requests up to %lu bytes\n",
          control.info.dev_id, recovering ? "recovered" : "up",
          (unsigned long long)rampart_size(engine), queues, depth, max_io);
  if (o.switches.standby) {
    unsigned long long ms = (unsigned long long)(rp_now_ms() - died_ms);
    fprintf(stderr, "rampart-ublk: took %s over %llu ms after its daemon died\n", device, ms);
    char what[96];
    snprintf(what, sizeof what, "%s, %llu ms after its daemon died", device, ms);
    rampart_notify(RAMPART_NOTICE_TOOK_OVER, what);
  } else {
    rampart_notify(RAMPART_NOTICE_SERVING, device);
  }
  recovering = 0; /* served now: a stop from here on ends the device as usual */
  int sig = 0;
  sigwait(&stop_signals, &sig);
  fprintf(stderr, "rampart-ublk: %s: stopping /dev/ublkb%u\n", strsignal(sig),
          control.info.dev_id);
  rampart_notify(RAMPART_NOTICE_STOPPING, device);
  status = 0;
  err[0] = '\0';

out_stop:
  if (recovering) {
    /* A recovery that failed leaves the device as it found it, waiting with its I/O held
     * for a daemon that can take it back (stopping it would fail every swap-in), and the
     * engine's state and sessions as they are: closing the engine would tell the
     * servers GOODBYE and free every page. The process just ends. */
    fprintf(stderr,
            "rampart-ublk: %s; /dev/ublkb%u still waits for a daemon: fix that and "
            "run the same command again\n",
            err, control.info.dev_id);
    _exit(1);
  }
  /* Stopping gives every fetched tag back (UBLK_IO_RES_ABORT); a request the engine
   * still holds is answered first and its tag comes back with its next fetch. */
  ublk_control_stop(&control);
  for (unsigned q = 0; q < started; q++)
    ublk_queue_join(&queue[q]);
  if (char_fd >= 0)
    close(char_fd); /* the driver deletes a device only once nothing holds it open */
out_delete:
  if (recovering)
    goto out_stop;
  ublk_control_delete(&control);
out_control:
  ublk_control_close(&control);
  if (err[0])
    fprintf(stderr, "rampart-ublk: %s\n", err);
  if (status != 0 && rampart_took_over(engine)) {
    /* The engine holds a crashed pager's pages: closing it would end their sessions. */
    fprintf(stderr, "rampart-ublk: the device's state and its servers' sessions are kept "
                    "for the next attempt\n");
    _exit(1);
  }
  rampart_close(engine);
  rampart_config_free(config);
  return status;
}
