/* What the frontend daemons (rampart-nbd-server, rampart-ublk) share on their command
 * line: --help, --state-layout, the engine's KEY=VALUE settings, the switches every
 * frontend takes (mlock=, standby=), a refusal of anything else, the settings checked,
 * and the exit status each outcome gives (rampart_config_from_arguments, rampart.h).
 * The nbdkit plugin is handed its settings by nbdkit one by one and takes only the
 * switches from here (rampart_frontend_switch). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "parse.h"
#include "rampart.h"

int rampart_frontend_switch(struct rampart_frontend_switches *switches, const char *key,
                            const char *value, char *err, size_t errlen)
{
  bool *flag = strcmp(key, "mlock") == 0     ? &switches->lock_memory
               : strcmp(key, "standby") == 0 ? &switches->standby
                                             : NULL;
  if (!flag)
    return 0;
  return rp_parse_bool(key, value, flag, err, errlen) < 0 ? -1 : 1;
}

int rampart_frontend_count(const char *who, const char *option, const char *value,
                           unsigned most, const char *unit, unsigned *out)
{
  uint64_t v;
  char err[256];
  if (!value || rp_parse_uint(option, value, most, &v, err, sizeof err) < 0 || v == 0) {
    fprintf(stderr, "%s: %s '%s': give %s from 1 to %u\n", who, option, value ? value : "",
            unit, most);
    return -1;
  }
  *out = (unsigned)v;
  return 2;
}

int rampart_frontend_switches_check(const struct rampart_frontend_switches *switches,
                                    const struct rampart_config *config, char *err,
                                    size_t errlen)
{
  if (switches->standby && !rampart_config_state_path(config)) {
    snprintf(err, errlen,
             "standby=true needs state=PATH, the same as the serving "
             "daemon's: a standby takes over the state the serving daemon leaves when it "
             "dies");
    return -1;
  }
  return 0;
}

/* One KEY=VALUE argument, whose '=' the caller found: a switch, or else a setting; -1
 * with a sentence in err, as rampart_config_set, also for an empty or overlong key. */
static int set_argument(struct rampart_config *config,
                        struct rampart_frontend_switches *switches, const char *key_value,
                        const char *eq, char *err, size_t errlen)
{
  char key[64];
  size_t klen = (size_t)(eq - key_value);
  if (klen == 0 || klen >= sizeof key) {
    snprintf(err, errlen, "'%.80s' is not a setting: give KEY=VALUE with a key from --help",
             key_value);
    return -1;
  }
  memcpy(key, key_value, klen);
  key[klen] = '\0';
  int r = switches ? rampart_frontend_switch(switches, key, eq + 1, err, errlen) : 0;
  if (r != 0)
    return r < 0 ? -1 : 0;
  return rampart_config_set(config, key, eq + 1, err, errlen);
}

/* 0 when every argument was taken, 1 after --help or --state-layout was printed, -1
 * after saying what was wrong. */
static int read_arguments(const struct rampart_frontend_args *f, int argc, char **argv,
                          struct rampart_config *config)
{
  char err[512];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *eq;
    int took = f->option(f->ctx, a, i + 1 < argc ? argv[i + 1] : NULL);
    if (took < 0)
      return -1;
    if (took > 0) {
      i += took - 1;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      printf("%s%s", f->usage, rampart_config_help);
      return 1;
    } else if (strcmp(a, "--state-layout") == 0) {
      printf("%s\n", rampart_state_layout());
      return 1;
    } else if (a[0] != '-' && (eq = strchr(a, '='))) {
      if (set_argument(config, f->switches, a, eq, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", f->who, err);
        return -1;
      }
    } else {
      fprintf(stderr, "%s: unexpected argument '%s'\n%s", f->who, a, f->usage);
      return -1;
    }
  }
  if (f->switches &&
      rampart_frontend_switches_check(f->switches, config, err, sizeof err) < 0) {
    fprintf(stderr, "%s: %s\n", f->who, err);
    return -1;
  }
  if (f->check && f->check(f->ctx, config) < 0)
    return -1;
  if (rampart_config_check(config, err, sizeof err) < 0) {
    fprintf(stderr, "%s: %s\n", f->who, err);
    return -1;
  }
  return 0;
}

struct rampart_config *rampart_config_from_arguments(const struct rampart_frontend_args *f,
                                                     int argc, char **argv, int *exit_status)
{
  struct rampart_config *config = rampart_config_new();
  if (!config) {
    fprintf(stderr, "%s: out of memory\n", f->who);
    *exit_status = 1;
    return NULL;
  }
  int r = read_arguments(f, argc, argv, config);
  if (r == 0)
    return config;
  rampart_config_free(config);
  *exit_status = r > 0 ? 0 : 2;
  return NULL;
}
