/* rampart-fuse: the rampart engine as a FUSE file system of one file, for kernels that
 * have neither the NBD nor the ublk driver.
 *
 *   rampart-fuse --mount /run/rampart/fuse size=4G servers=... key=...
 *   losetup --find --show --direct-io=on /run/rampart/fuse/device
 *
 * The same KEY=VALUE settings as `nbdkit rampart` and rampart-nbd-server. The engine
 * runs in this process: a page-in crosses the kernel, a libfuse worker and the engine,
 * where nbdfuse adds its own process and an NBD socket between the kernel and the
 * engine. It prints the file's path on stdout once the file system is mounted; SIGTERM
 * or SIGINT stops it and unmounts. When it dies, its mount dies with it: FUSE has no
 * way to hand a mount's open requests to another process, so there is no standby.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuse_device_file.h"
#include "parse.h"
#include "rampart.h"

#define MAX_THREADS 64
/* Slots of requests answered as they complete: 128 MiB of locked buffers at most. A loop
 * device has no more out than --background (64 by default). */
#define MAX_ASYNC 1024u

static const char usage[] =
  "usage: rampart-fuse --mount DIR [--file NAME] [--threads N] [--background N] "
  "[--async N] KEY=VALUE...\n"
  "       rampart-fuse --state-layout\n"
  "  --mount DIR      mount the file system on DIR, an empty directory\n"
  "  --file NAME      the device file's name in it (default: device)\n"
  "  --threads N      libfuse workers (default 8; at most 64), each with about 2 MiB\n"
  "                   of locked buffers; a request not answered as it completes\n"
  "                   (--async) holds its worker until it is\n"
  "  --background N   asynchronous requests the kernel keeps in flight (default 64)\n"
  "  --async N        up to N requests of up to 128 KiB answered as they complete, the\n"
  "                   worker free for the next (default 64, 128 KiB of locked buffer\n"
  "                   each; at most 1024). 0: each worker reads its own request's\n"
  "                   replies, faster at queue depth 1, slower under swap (fuse/README.md)\n"
  "  --state-layout   print the layout of the state this build takes over, and exit\n"
  "  KEY=VALUE        nbdkit rampart's keys, so one command line serves either:\n"
  "  mlock=BOOL       lock the daemon's memory (default true; a swap device must)\n"
  "  and the engine's settings:\n";

struct options {
  const char *mount;
  const char *file;
  unsigned threads;
  unsigned background;
  unsigned async; /* slots of requests answered as they complete; 0: none */
  struct rampart_frontend_switches switches;
};

/* One of the daemon's own arguments (struct rampart_frontend_args's option). */
static int take_option(void *ctx, const char *a, const char *value)
{
  struct options *o = ctx;
  if (strcmp(a, "--mount") == 0 || strcmp(a, "--file") == 0) {
    if (!value || !*value) {
      fprintf(stderr, "rampart-fuse: %s needs a value\n%s", a, usage);
      return -1;
    }
    *(a[2] == 'm' ? &o->mount : &o->file) = value;
    return 2;
  }
  if (strcmp(a, "--threads") == 0)
    return rampart_frontend_count("rampart-fuse", a, value, MAX_THREADS, "a number",
                                  &o->threads);
  if (strcmp(a, "--background") == 0)
    return rampart_frontend_count("rampart-fuse", a, value, 65535, "a number",
                                  &o->background);
  if (strcmp(a, "--async") == 0) {
    uint64_t v;
    char err[256];
    if (!value || rp_parse_uint(a, value, MAX_ASYNC, &v, err, sizeof err) < 0) {
      fprintf(stderr, "rampart-fuse: --async '%s': give a number from 0 (off) to %u\n",
              value ? value : "", MAX_ASYNC);
      return -1;
    }
    o->async = (unsigned)v;
    return 2;
  }
  if (strncmp(a, "standby=", 8) == 0) {
    fprintf(stderr,
            "rampart-fuse: %s: a FUSE mount cannot be handed to a standby (its "
            "requests in flight die with the process that read them); use rampart-ublk or "
            "rampart-nbd-server where the kernel has ublk or NBD\n",
            a);
    return -1;
  }
  return 0;
}

/* The options together, once every argument is read. */
static int check_options(void *ctx, const struct rampart_config *config)
{
  const struct options *o = ctx;
  if (!o->mount) {
    fprintf(stderr, "rampart-fuse: give --mount DIR, the directory to mount the device "
                    "file on\n");
    return -1;
  }
  if (strchr(o->file, '/') || strcmp(o->file, ".") == 0 || strcmp(o->file, "..") == 0) {
    fprintf(stderr, "rampart-fuse: --file '%s': give a plain file name, without '/'\n",
            o->file);
    return -1;
  }
  struct stat st;
  const char *wrong = stat(o->mount, &st) < 0 ? strerror(errno)
                      : !S_ISDIR(st.st_mode)  ? "not a directory"
                                              : NULL;
  if (wrong) {
    fprintf(stderr, "rampart-fuse: --mount %s: %s: give an empty directory\n", o->mount,
            wrong);
    return -1;
  }
  return 0;
}

/* A mounted session whose workers are not started yet, or NULL after saying why. */
static struct fuse_session *mount_device(const struct options *o, struct fuse_device_file *f)
{
  /* fsname shows in /proc/mounts, which is how rampart-swap and an operator tell the
   * mount; default_permissions lets the kernel check the file's mode itself. */
  char *argv[] = { "rampart-fuse", "-o", "fsname=rampart,subtype=rampart,default_permissions",
                   NULL };
  struct fuse_args args = FUSE_ARGS_INIT(3, argv);
  struct fuse_session *se = fuse_session_new(&args, fuse_device_file_ops(),
                                             sizeof *fuse_device_file_ops(), f);
  fuse_opt_free_args(&args); /* what the session's parsing added; it keeps no pointer */
  if (!se) {
    fprintf(stderr, "rampart-fuse: libfuse cannot make a session (its message is above)\n");
    return NULL;
  }
  if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, o->mount) != 0) {
    fprintf(stderr,
            "rampart-fuse: cannot mount on %s (libfuse's message is above): it "
            "needs root or fusermount3, /dev/fuse (modprobe fuse) and an empty "
            "directory\n",
            o->mount);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return NULL;
  }
  return se;
}

/* Serves until a stop signal or the unmount; 0 or -1 (libfuse's loop failed). */
static int serve(struct fuse_session *se, const struct options *o)
{
  struct fuse_loop_config *loop = fuse_loop_cfg_create();
  if (!loop) {
    fprintf(stderr, "rampart-fuse: out of memory\n");
    return -1;
  }
  fuse_loop_cfg_set_max_threads(loop, o->threads);
  /* Every worker made stays: a thread made during a swap storm needs memory. */
  fuse_loop_cfg_set_idle_threads(loop, o->threads);
  int r = fuse_session_loop_mt(se, loop);
  fuse_loop_cfg_destroy(loop);
  if (r < 0) {
    fprintf(stderr, "rampart-fuse: the FUSE loop failed: %s\n", strerror(-r));
    return -1;
  }
  if (r > 0)
    fprintf(stderr, "rampart-fuse: %s: unmounting\n", strsignal(r));
  return 0;
}

int main(int argc, char **argv)
{
  struct options o = { .file = "device",
                       .threads = 8,
                       .background = 64,
                       .async = 64,
                       .switches = RAMPART_FRONTEND_SWITCHES_DEFAULT };
  const struct rampart_frontend_args args = { "rampart-fuse", usage, take_option,
                                              check_options,  &o,    &o.switches };
  int status;
  struct rampart_config *config = rampart_config_from_arguments(&args, argc, argv, &status);
  if (!config)
    return status;
  /* The engine's threads must never take a stop signal: blocked before they start, and
   * let through again to this thread only, where libfuse's handlers end its loop. */
  sigset_t stop_signals;
  rampart_block_stop_signals(&stop_signals);
  rampart_process_harden(o.switches.lock_memory);
  char err[512];
  struct rampart_engine *engine = rampart_open(config, err, sizeof err);
  if (!engine) {
    fprintf(stderr, "rampart-fuse: %s\n", err);
    rampart_config_free(config);
    return 1;
  }
  unsigned async = o.async;
  struct fuse_device_file file = { .engine = engine,
                                   .size = rampart_size(engine),
                                   .name = o.file,
                                   .max_background = o.background,
                                   .async = async ? fuse_async_io_pool_new(async) : NULL };
  if (async && !file.async) {
    fprintf(stderr,
            "rampart-fuse: --async %u: no memory for %u buffers of 128 KiB; give a "
            "smaller --async\n",
            async, async);
    rampart_close(engine);
    rampart_config_free(config);
    return 1;
  }
  struct fuse_session *se = mount_device(&o, &file);
  int result = 1;
  if (se) {
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, NULL);
    printf("%s/%s\n", o.mount, o.file);
    fflush(stdout);
    fprintf(stderr, "rampart-fuse: serving %llu bytes as %s/%s, %u workers",
            (unsigned long long)file.size, o.mount, o.file, o.threads);
    if (async)
      fprintf(stderr, ", %u requests answered as they complete", async);
    fputc('\n', stderr);
    rampart_notify(RAMPART_NOTICE_SERVING, o.mount);
    result = serve(se, &o) < 0 ? 1 : 0;
    rampart_notify(RAMPART_NOTICE_STOPPING, o.mount);
    /* Requests still out are answered as the engine completes them, on /dev/fuse, which
     * the unmount closes: the kernel would fail them (writes the engine completed among
     * them) and an answer could land on whatever took the descriptor's number. */
    fuse_async_io_pool_free(file.async);
    file.async = NULL;
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
  }
  fuse_async_io_pool_free(file.async);
  rampart_close(engine);
  rampart_config_free(config);
  return result;
}
