/* Command line and config file parsing for rampartd (see options.h). One table of
 * options drives both sources, so a setting can never be accepted in one place and
 * unknown in the other. */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster_keys.h"
#include "parse.h"
#include "wire.h"

enum kind {
  K_LISTEN,
  K_METRICS,
  K_SIZE,
  K_PATH,
  K_UINT,
  K_DOUBLE,
  K_FLAG,
  K_NAME,
  K_FAULT,
  K_TEXT
};

struct option_def {
  const char *name;
  enum kind kind;
  uint64_t min, max; /* K_UINT */
};

static const struct option_def defs[] = {
  { "listen", K_LISTEN, 0, 0 },
  { "metrics", K_METRICS, 0, 0 },
  { "memory", K_SIZE, 0, 0 },
  { "key", K_PATH, 0, 0 },
  { "lease", K_UINT, 0, 7 * 24 * 3600 },
  { "foreground", K_FLAG, 0, 0 },
  { "name", K_NAME, 0, 0 },
  { "pressure-file", K_PATH, 0, 0 },
  { "meminfo-file", K_PATH, 0, 0 },
  { "psi-threshold", K_DOUBLE, 0, 0 },
  { "min-available", K_SIZE, 0, 0 },
  { "pressure-interval-ms", K_UINT, 10, 3600 * 1000 },
  { "pid-file", K_PATH, 0, 0 },
  { "verbose", K_FLAG, 0, 0 },
  { "max-connections", K_UINT, 1, 65536 },
  { "max-unauthenticated", K_UINT, 1, 65536 },
  { "max-unauthenticated-per-address", K_UINT, 1, 65536 },
  { "handshake-timeout", K_UINT, 1, 60 },
  { "max-sessions-per-key", K_UINT, 1, 1u << 20 },
  { "mlock", K_FLAG, 0, 0 },
  { "poll-us", K_UINT, 0, 10000 },
  { "test-fault", K_FAULT, 0, 0 },
  { "etcd", K_TEXT, 0, 0 },
  { "cluster", K_TEXT, 0, 0 },
  { "advertise", K_TEXT, 0, 0 },
  { "failure-domain", K_TEXT, 0, 0 },
  { "etcd-cacert", K_PATH, 0, 0 },
  { "etcd-cert", K_PATH, 0, 0 },
  { "etcd-key", K_PATH, 0, 0 },
};

static const char usage[] =
  "usage: rampartd --listen HOST:PORT --memory SIZE [options]\n"
  "Stores other hosts' swapped-out pages in this host's RAM.\n"
  "\n"
  "  --listen HOST:PORT         address to serve, e.g. 127.0.0.1:7070, [::1]:7070,\n"
  "                             0.0.0.0:7070; port 0 picks a free port\n"
  "  --memory SIZE              RAM to lend, e.g. 4G (pages of 4 KiB)\n"
  "  --metrics [HOST:]PORT      serve counters for Prometheus at HOST:PORT/metrics\n"
  "                             (HOST defaults to 127.0.0.1; default: no metrics)\n"
  "  --key FILE                 cluster key (make one with 'rampartctl keygen FILE');\n"
  "                             required unless listening on loopback only\n"
  "  --lease SECONDS            keep a dropped client's pages this long (default 60)\n"
  "  --foreground               do not daemonize; log to stderr\n"
  "  --name NAME                server name in stats and logs (default: hostname)\n"
  "  --pressure-file PATH       PSI file (default /proc/pressure/memory)\n"
  "  --meminfo-file PATH        meminfo file (default /proc/meminfo)\n"
  "  --psi-threshold PERCENT    pressure when PSI 'some avg10' >= this (default 10)\n"
  "  --min-available SIZE       pressure when MemAvailable < SIZE (default: off)\n"
  "  --pressure-interval-ms MS  how often to look (default 1000)\n"
  "  --pid-file PATH            write the daemon's PID here\n"
  "  --max-connections N        authenticated connections served at once; past N a\n"
  "                             client is refused after its handshake (default 1024)\n"
  "  --max-unauthenticated N    connections still in their handshake, in all; past N\n"
  "                             the oldest is dropped (default 256)\n"
  "  --max-unauthenticated-per-address N\n"
  "                             the same from one source address; past N a new one is\n"
  "                             refused at once (default 8)\n"
  "  --handshake-timeout SECONDS  a connection must prove the key this fast (default 2)\n"
  "  --max-sessions-per-key N   sessions (attached or in their lease) the cluster key\n"
  "                             may hold here (default 256)\n"
  "  --mlock                    lock the pages stored here in RAM, so they are never\n"
  "                             swapped to this host's disk; needs RLIMIT_MEMLOCK of at\n"
  "                             least --memory (systemd: LimitMEMLOCK=infinity) or\n"
  "                             CAP_IPC_LOCK (default off; the systemd unit turns it on)\n"
  "  --poll-us US                after serving pages, look for the next request this\n"
  "                             long before sleeping: up to a core while clients are\n"
  "                             busy, for a host with one to spare (default 0: off)\n"
  "  --verbose                  log every connection and refusal\n"
  "  --etcd URL,...             announce this server in etcd (its JSON gateway, v3 API):\n"
  "                             http(s)://HOST:2379,...; devices with\n"
  "                             cluster=etcd://... find it there (default: off)\n"
  "  --cluster NAME             the cluster's name in etcd (keys /rampart/NAME/...)\n"
  "  --advertise HOST:PORT      the address clients reach this server at (default:\n"
  "                             the --listen address, when it is not a wildcard)\n"
  "  --failure-domain NAME      what fails together (host, rack): devices spread each\n"
  "                             group over domains (default: the host name)\n"
  "  --etcd-cacert FILE, --etcd-cert FILE, --etcd-key FILE\n"
  "                             TLS to etcd: its CA, and this server's client\n"
  "                             certificate and key\n"
  "  --config FILE              read 'name = value' lines with the names above;\n"
  "                             the command line wins\n"
  "  --help, --version\n"
  "\n"
  "For tests only, in the rampartd-faults test binary (not in rampartd):\n"
  "  --test-fault MODE          make this server corrupt the pages it returns, to test\n"
  "                             the clients' page verification: flip (one bit), swap\n"
  "                             (the page of slot s^1) or replay (an older write); or\n"
  "                             refuse-writes (one WRITE in 64 refused, as a host out\n"
  "                             of memory would)\n"
  "\n"
  "Signals: SIGTERM stops (clients rebuild what it held); SIGUSR1 drains: clients are\n"
  "asked to move their pages to other servers, and no new pages are taken.\n";

static void set_defaults(struct rps_options *o)
{
  memset(o, 0, sizeof *o);
  o->lease_seconds = 60;
  o->psi_threshold = 10.0;
  o->pressure_interval_ms = 1000;
  o->max_connections = 1024;
  o->max_unauthenticated = 256;
  o->max_unauthenticated_per_address = 8;
  o->handshake_timeout = 2;
  o->max_sessions_per_key = 256;
  snprintf(o->pressure_file, sizeof o->pressure_file, "/proc/pressure/memory");
  snprintf(o->meminfo_file, sizeof o->meminfo_file, "/proc/meminfo");
  if (gethostname(o->name, sizeof o->name) < 0 || !o->name[0])
    snprintf(o->name, sizeof o->name, "rampartd");
  o->name[sizeof o->name - 1] = '\0';
}

static const struct option_def *find_def(const char *name)
{
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
    if (strcmp(defs[i].name, name) == 0)
      return &defs[i];
  return NULL;
}

static int copy_string(const char *what, const char *value, char *dst, size_t cap, char *err,
                       size_t errlen)
{
  if (!value[0] || strlen(value) >= cap) {
    snprintf(err, errlen, "%s needs a value of 1 to %zu characters", what, cap - 1);
    return -1;
  }
  memcpy(dst, value, strlen(value) + 1);
  return 0;
}

/* rp_parse_hostport refuses port 0, which is how tests ask for a free port, so port 0
 * is swapped for 1 while parsing and put back after. */
static int parse_hostport0(const char *what, const char *value, char *host, size_t hostlen,
                           char *port, size_t portlen, char *err, size_t errlen)
{
  char copy[300], dummy[256];
  size_t n = strlen(value);
  if (n >= sizeof copy)
    goto bad;
  memcpy(copy, value, n + 1);
  bool port_zero = n >= 2 && strcmp(value + n - 2, ":0") == 0;
  if (port_zero)
    copy[n - 1] = '1';
  if (rp_parse_hostport(copy, host, hostlen, port, portlen, dummy, sizeof dummy) < 0)
    goto bad;
  if (port_zero)
    snprintf(port, portlen, "0");
  return 0;
bad:
  snprintf(err, errlen,
           "%s '%s' is not HOST:PORT: write it as 127.0.0.1:7070, [::1]:7070 "
           "or 0.0.0.0:7070 (port 0 picks a free port)",
           what, value);
  return -1;
}

static int parse_listen(const char *what, const char *value, struct rps_options *o, char *err,
                        size_t errlen)
{
  return parse_hostport0(what, value, o->listen_host, sizeof o->listen_host, o->listen_port,
                         sizeof o->listen_port, err, errlen);
}

/* --metrics PORT means loopback: counters say how much this host lends and to how many
 * clients, which the network at large has no need to read. Reaching it from a
 * Prometheus server elsewhere takes an explicit HOST:PORT. */
static int parse_metrics(const char *what, const char *value, struct rps_options *o,
                         char *err, size_t errlen)
{
  char with_host[300];
  size_t digits = strspn(value, "0123456789");
  if (digits > 0 && value[digits] == '\0' && digits < 6) {
    snprintf(with_host, sizeof with_host, "127.0.0.1:%s", value);
    value = with_host;
  }
  if (parse_hostport0(what, value, o->metrics_host, sizeof o->metrics_host, o->metrics_port,
                      sizeof o->metrics_port, err, errlen) < 0) {
    snprintf(err, errlen,
             "%s '%s' is not PORT or HOST:PORT: write it as 9470 (loopback), "
             "127.0.0.1:9470, or 0.0.0.0:9470 to let a Prometheus server elsewhere scrape it",
             what, value);
    return -1;
  }
  return 0;
}

static int parse_flag(const char *what, const char *value, bool *out, char *err,
                      size_t errlen)
{
  static const char *yes[] = { "1", "true", "yes", "on" },
                    *no[] = { "0", "false", "no", "off" };
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(value, yes[i]) == 0) {
      *out = true;
      return 0;
    }
    if (strcasecmp(value, no[i]) == 0) {
      *out = false;
      return 0;
    }
  }
  snprintf(err, errlen, "%s '%s' is not a yes/no value: write true or false", what, value);
  return -1;
}

static int parse_percent(const char *what, const char *value, double *out, char *err,
                         size_t errlen)
{
  char *end;
  errno = 0;
  double v = isdigit((unsigned char)value[0]) ? strtod(value, &end) : NAN;
  if (isnan(v) || errno || *end != '\0' || v < 0.0 || v > 100.0) {
    snprintf(err, errlen,
             "%s '%s' is not a percentage: write a number from 0 to 100, "
             "such as 10 or 12.5",
             what, value);
    return -1;
  }
  *out = v;
  return 0;
}

/* The 32-bit count a K_UINT option other than lease and pressure-interval-ms sets. */
static uint32_t *uint32_field(struct rps_options *o, const char *name)
{
  if (strcmp(name, "max-unauthenticated") == 0)
    return &o->max_unauthenticated;
  if (strcmp(name, "max-unauthenticated-per-address") == 0)
    return &o->max_unauthenticated_per_address;
  if (strcmp(name, "handshake-timeout") == 0)
    return &o->handshake_timeout;
  if (strcmp(name, "max-sessions-per-key") == 0)
    return &o->max_sessions_per_key;
  if (strcmp(name, "poll-us") == 0)
    return &o->poll_us;
  return &o->max_connections;
}

static bool *flag_field(struct rps_options *o, const char *name)
{
  if (strcmp(name, "verbose") == 0)
    return &o->verbose;
  if (strcmp(name, "mlock") == 0)
    return &o->mlock;
  return &o->foreground;
}

/* Applies one setting. `what` names it the way the operator wrote it, for errors. */
static int apply(struct rps_options *o, const struct option_def *d, const char *what,
                 const char *value, char *err, size_t errlen)
{
  uint64_t u;
  switch (d->kind) {
  case K_LISTEN:
    return parse_listen(what, value, o, err, errlen);
  case K_METRICS:
    return parse_metrics(what, value, o, err, errlen);
  case K_SIZE:
    if (rp_parse_size(what, value, &u, err, errlen) < 0)
      return -1;
    if (strcmp(d->name, "memory") == 0)
      o->memory = u;
    else
      o->min_available = u;
    return 0;
  case K_PATH:
  case K_NAME: {
    char *dst = strcmp(d->name, "key") == 0             ? o->key_path
                : strcmp(d->name, "etcd-cacert") == 0   ? o->etcd_cacert
                : strcmp(d->name, "etcd-cert") == 0     ? o->etcd_cert
                : strcmp(d->name, "etcd-key") == 0      ? o->etcd_key
                : strcmp(d->name, "pressure-file") == 0 ? o->pressure_file
                : strcmp(d->name, "meminfo-file") == 0  ? o->meminfo_file
                : strcmp(d->name, "pid-file") == 0      ? o->pid_file
                                                        : o->name;
    size_t cap = d->kind == K_NAME ? sizeof o->name : PATH_MAX;
    return copy_string(what, value, dst, cap, err, errlen);
  }
  case K_TEXT: {
    char *dst = strcmp(d->name, "etcd") == 0        ? o->etcd_endpoints
                : strcmp(d->name, "cluster") == 0   ? o->cluster
                : strcmp(d->name, "advertise") == 0 ? o->advertise
                                                    : o->failure_domain;
    size_t cap = strcmp(d->name, "etcd") == 0        ? sizeof o->etcd_endpoints
                 : strcmp(d->name, "advertise") == 0 ? sizeof o->advertise
                                                     : sizeof o->cluster;
    return copy_string(what, value, dst, cap, err, errlen);
  }
  case K_UINT:
    if (rp_parse_uint(what, value, d->max, &u, err, errlen) < 0)
      return -1;
    if (u < d->min) {
      snprintf(err, errlen, "%s %s is too small: at least %llu", what, value,
               (unsigned long long)d->min);
      return -1;
    }
    if (strcmp(d->name, "lease") == 0)
      o->lease_seconds = u;
    else if (strcmp(d->name, "pressure-interval-ms") == 0)
      o->pressure_interval_ms = u;
    else
      *uint32_field(o, d->name) = (uint32_t)u;
    return 0;
  case K_DOUBLE:
    return parse_percent(what, value, &o->psi_threshold, err, errlen);
  case K_FAULT:
    if (!rps_fault_compiled_in()) {
      snprintf(err, errlen,
               "%s: this rampartd has no fault injection (production build); "
               "the test suite's lying servers are the separate test binary "
               "rampartd-faults, built with -DRAMPART_TEST_FAULTS=ON and never installed",
               what);
      return -1;
    }
    if (rps_fault_parse(value, &o->test_fault) < 0) {
      snprintf(err, errlen,
               "%s '%s': use flip, swap, replay or refuse-writes (test-only: "
               "makes this server corrupt what it returns or refuse writes)",
               what, value);
      return -1;
    }
    return 0;
  case K_FLAG:
    return parse_flag(what, value, flag_field(o, d->name), err, errlen);
  }
  return -1;
}

static char *trim(char *s)
{
  while (isspace((unsigned char)*s))
    s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1]))
    s[--n] = '\0';
  return s;
}

static int load_config(const char *path, struct rps_options *o, char *err, size_t errlen)
{
  FILE *f = fopen(path, "re");
  if (!f) {
    snprintf(err, errlen, "cannot open --config %s: %s", path, strerror(errno));
    return -1;
  }
  char line[PATH_MAX + 64];
  int lineno = 0, rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    lineno++;
    char *s = trim(line);
    if (!*s || *s == '#' || *s == ';')
      continue;
    char *eq = strchr(s, '=');
    if (!eq) {
      snprintf(err, errlen, "%s line %d: expected 'name = value', such as 'memory = 4G'",
               path, lineno);
      rc = -1;
      break;
    }
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    size_t vl = strlen(value);
    if (vl >= 2 && ((value[0] == '"' && value[vl - 1] == '"') ||
                    (value[0] == '\'' && value[vl - 1] == '\''))) {
      value[vl - 1] = '\0';
      value++;
    }
    for (char *k = key; *k; k++)
      if (*k == '_')
        *k = '-';
    const struct option_def *d = find_def(key);
    if (!d) {
      snprintf(err, errlen,
               "%s line %d: unknown setting '%s' (see rampartd --help for "
               "the names)",
               path, lineno, key);
      rc = -1;
      break;
    }
    char what[128], inner[512];
    snprintf(what, sizeof what, "%s", key);
    if (apply(o, d, what, value, inner, sizeof inner) < 0) {
      snprintf(err, errlen, "%s line %d: %s", path, lineno, inner);
      rc = -1;
    }
  }
  fclose(f);
  return rc;
}

/* Splits "--name=value" / "--name value". Returns the def, with *value set (NULL for a
 * bare flag), and advances *i past a separate value. */
static int split_arg(int argc, char **argv, int *i, char *name, size_t namelen,
                     const char **value, char *err, size_t errlen)
{
  const char *arg = argv[*i];
  if (strncmp(arg, "--", 2) != 0 || !arg[2]) {
    snprintf(err, errlen,
             "unexpected argument '%s': options start with --, see "
             "rampartd --help",
             arg);
    return -1;
  }
  const char *eq = strchr(arg + 2, '=');
  size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
  if (n >= namelen) {
    snprintf(err, errlen, "unknown option '%s': see rampartd --help", arg);
    return -1;
  }
  memcpy(name, arg + 2, n);
  name[n] = '\0';
  *value = eq ? eq + 1 : NULL;
  bool is_flag = strcmp(name, "foreground") == 0 || strcmp(name, "verbose") == 0 ||
                 strcmp(name, "mlock") == 0 || strcmp(name, "help") == 0 ||
                 strcmp(name, "version") == 0;
  if (!eq && !is_flag) {
    if (*i + 1 >= argc) {
      snprintf(err, errlen, "--%s needs a value: see rampartd --help", name);
      return -1;
    }
    *value = argv[++*i];
  }
  return 0;
}

/* --etcd needs --cluster; the other etcd options mean nothing without --etcd. */
static int check_etcd(struct rps_options *o, char *err, size_t errlen)
{
  if (!o->etcd_endpoints[0]) {
    if (o->cluster[0] || o->advertise[0] || o->etcd_cert[0] || o->etcd_cacert[0]) {
      snprintf(err, errlen,
               "--cluster, --advertise and --etcd-* announce this server in "
               "etcd: give --etcd http://HOST:2379 too, or leave them out");
      return -1;
    }
    return 0;
  }
  if (!rp_cluster_name_ok(o->cluster)) {
    snprintf(err, errlen,
             "--etcd needs --cluster NAME (letters, digits, '-', '_', '.'; at "
             "most 63): the devices that use this server name the same cluster");
    return -1;
  }
  if (o->advertise[0]) {
    char host[256], port[16];
    if (rp_parse_hostport(o->advertise, host, sizeof host, port, sizeof port, err, errlen) <
        0)
      return -1;
  }
  if ((o->etcd_cert[0] != 0) != (o->etcd_key[0] != 0)) {
    snprintf(err, errlen, "--etcd-cert and --etcd-key go together: give both");
    return -1;
  }
  if (!o->failure_domain[0])
    snprintf(o->failure_domain, sizeof o->failure_domain, "%s", o->name);
  return 0;
}

static int check_final(struct rps_options *o, char *err, size_t errlen)
{
  if (!o->listen_host[0]) {
    snprintf(err, errlen,
             "rampartd needs --listen HOST:PORT, such as --listen "
             "127.0.0.1:7070");
    return -1;
  }
  if (o->memory < RP_PAGE_SIZE) {
    snprintf(err, errlen,
             "rampartd needs --memory SIZE of at least 4K (one page), such "
             "as --memory 4G");
    return -1;
  }
  if (o->memory / RP_PAGE_SIZE > RP_MAX_SLOT + 1) {
    snprintf(err, errlen,
             "--memory is larger than the protocol can address (2^48 "
             "pages): write a smaller size");
    return -1;
  }
  o->memory -= o->memory % RP_PAGE_SIZE;
  return check_etcd(o, err, errlen);
}

enum rps_options_result rps_options_parse(int argc, char **argv, struct rps_options *o,
                                          char *err, size_t errlen)
{
  set_defaults(o);
  char name[64];
  const char *value;

  /* First pass: --help, --version and --config, so the file is applied first. */
  for (int i = 1; i < argc; i++) {
    if (split_arg(argc, argv, &i, name, sizeof name, &value, err, errlen) < 0)
      return RPS_OPTIONS_BAD;
    if (strcmp(name, "help") == 0) {
      fputs(usage, stdout);
      return RPS_OPTIONS_EXIT_OK;
    }
    if (strcmp(name, "version") == 0) {
      printf("rampartd %s (protocol %u)\n", RAMPARTD_VERSION, RP_PROTOCOL_VERSION);
      return RPS_OPTIONS_EXIT_OK;
    }
    if (strcmp(name, "config") == 0 && load_config(value, o, err, errlen) < 0)
      return RPS_OPTIONS_BAD;
  }

  for (int i = 1; i < argc; i++) {
    split_arg(argc, argv, &i, name, sizeof name, &value, err, errlen);
    if (strcmp(name, "config") == 0)
      continue;
    const struct option_def *d = find_def(name);
    if (!d) {
      snprintf(err, errlen, "unknown option '--%s': see rampartd --help", name);
      return RPS_OPTIONS_BAD;
    }
    if (!value && d->kind == K_FLAG)
      value = "true";
    char what[80];
    snprintf(what, sizeof what, "--%s", name);
    if (apply(o, d, what, value, err, errlen) < 0)
      return RPS_OPTIONS_BAD;
  }
  return check_final(o, err, errlen) < 0 ? RPS_OPTIONS_BAD : RPS_OPTIONS_OK;
}
