/* rampart-swap's command line and configuration file: the command, its options, the
 * KEY=VALUE lines of --config, and the checks that turn them into settings. Pure: nothing
 * here starts a process or touches the state directory, so the unit tests call it as is.
 *
 * Errors: -1 with a sentence in err that names the option or line (CONTRIBUTING.md,
 * convention 1); swap_args_parse says also which exit status the refusal takes.
 */
#ifndef RAMPART_SUPERVISOR_SWAP_OPTIONS_H
#define RAMPART_SUPERVISOR_SWAP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

/* The pager's KEY=VALUE settings in the order their keys first came; a later value for a
 * key replaces the earlier one in place. */
struct swap_kv {
  char **keys;
  char **values;
  size_t n;
};

enum swap_command {
  SWAP_NONE,
  SWAP_ON,
  SWAP_OFF,
  SWAP_STATUS,
  SWAP_RELOAD,
  SWAP_UPGRADE,
  SWAP_KEEP_STANDBY,
  SWAP_HELP,
};

/* What the command line gave, before the file is read: own[] holds rampart-swap's own
 * keys as given by their --options (they win over the file and over KEY=VALUE). */
struct swap_args {
  enum swap_command cmd;
  const char *config_file; /* NULL: /etc/rampart/swap.conf if readable */
  bool force;
  const char *own[9]; /* indexed like swap_own_keys */
  struct swap_kv cmdline_kv;
};

/* rampart-swap's own keys, in the order of struct swap_args.own. */
extern const char *const swap_own_keys[9];

/* The settings 'on' and the others work with, once checked. */
struct swap_settings {
  char name[128];
  int priority;
  char frontend[16]; /* auto, ublk, nbd or fuse */
  int queues;
  int depth;
  int connections; /* 0: unset, the attaching tool's default (swap_on.c) */
  int threads;
  char daemon[32];      /* auto, rampart-nbd-server or nbdkit */
  struct swap_kv pager; /* every other key: the pager's */
};

/* argv without the program name. Returns 0, or the exit status of a refusal (1 or 2) with
 * its sentence in err (a bare "usage" when the usage goes to stderr instead). */
int swap_args_parse(int argc, char **argv, struct swap_args *a, char *err, size_t errlen);

/* Appends the KEY=VALUE lines of the file at path to kv: '#' starts a comment, blank lines
 * are skipped, spaces around a line are dropped. */
int swap_config_read(const char *path, struct swap_kv *kv, char *err, size_t errlen);

/* Merges the file's lines, then the command line's KEY=VALUE, then the --options, and
 * checks every value; cpus gives the default queue count. */
int swap_settings_resolve(const struct swap_args *a, const struct swap_kv *file, int cpus,
                          struct swap_settings *s, char *err, size_t errlen);

/* kv's value for key, or NULL. */
const char *swap_kv_get(const struct swap_kv *kv, const char *key);
/* Sets key to value (replacing an earlier value in place); 0, or -1 out of memory. */
int swap_kv_set(struct swap_kv *kv, const char *key, const char *value);
void swap_kv_free(struct swap_kv *kv);

#endif
