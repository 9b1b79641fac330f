/* What every rampart-swap command works with: the settings, the device's state directory,
 * the programs it runs (each overridable from the environment, as the tests and the
 * sanitizer builds do), and how it reports: say() to stdout, swap_die() to stderr and the
 * end of the process, after undoing a failing 'on' (swap_context.c).
 *
 * Errors: swap_die and the calls that use it print the sentence and end the process with
 * status 1 (a command-line program's steps: the first failure is the last).
 */
#ifndef RAMPART_SUPERVISOR_SWAP_CONTEXT_H
#define RAMPART_SUPERVISOR_SWAP_CONTEXT_H

#include <stdbool.h>

#include "swap_options.h"

struct swap_programs {
  const char *plugin;         /* RAMPART_PLUGIN: nbdkit's plugin, name or .so path */
  const char *nbdkit;         /* NBDKIT */
  const char *ublk;           /* RAMPART_UBLK */
  const char *nbd_attach;     /* RAMPART_NBD_ATTACH */
  const char *nbd_server;     /* RAMPART_NBD_SERVER */
  const char *fuse;           /* RAMPART_FUSE */
  const char *rampartctl;     /* RAMPARTCTL */
  const char *nbdkit_preload; /* RAMPART_NBDKIT_PRELOAD: LD_PRELOAD for nbdkit, or NULL */
  char self[4096];            /* this program, for the keeper */
};

struct swap_context {
  struct swap_settings set;
  struct swap_programs prog;
  const char *config_file; /* the file read, or "" */
  bool force;
  char run_dir[2048];
  char state[2300];    /* run_dir/name */
  bool rampart_plugin; /* the plugin is rampart's engine (it has state to hand over) */
};

#define SWAP_ME "rampart-swap"

/* The exit status of an 'off' that refuses because the pages cannot come back. */
#define SWAP_EXIT_REFUSED 75
/* The exit status of 'status' for a device that is off. */
#define SWAP_EXIT_OFF 3

void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void swap_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* From here until swap_rollback_disarm, swap_die undoes what 'on' did (every log's end to
 * stderr, then 'off --force') before it ends the process, and so does SIGINT or SIGTERM
 * (systemd's start timeout), at the next swap_sleep_ms, with status 130. */
void swap_rollback_arm(struct swap_context *c);
void swap_rollback_disarm(void);

/* Sleeps ms; ends the process through swap_die when a SIGINT or SIGTERM came while the
 * rollback is armed. */
void swap_sleep_ms(int ms);

/* Reads the environment's program names and the run directory into c. */
void swap_context_init(struct swap_context *c);

/* path of prog when it can be run: as given when it holds a '/', else found on PATH;
 * NULL when not. buf holds the result. */
const char *swap_find_program(const char *prog, char *buf, size_t buflen);

#endif
