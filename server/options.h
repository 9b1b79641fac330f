/* rampartd's settings: the command line and the --config file.
 *
 * The config file holds "key = value" lines with the command line's option names
 * (without the dashes), so one vocabulary serves the systemd unit and the shell; the
 * command line wins over the file. Every refusal is a sentence naming the option and
 * what to write instead.
 *
 * Errors: RPS_OPTIONS_BAD with a sentence in err (CONTRIBUTING.md, convention 1,
 * as an enum: the caller also needs to tell --help from a run).
 */
#ifndef RAMPART_SERVER_OPTIONS_H
#define RAMPART_SERVER_OPTIONS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fault_injection.h"

#define RAMPARTD_VERSION "0.1.0"

struct rps_options {
  char listen_host[256];
  char listen_port[16];   /* "0": pick an ephemeral port */
  char metrics_host[256]; /* --metrics: "" when off (the default) */
  char metrics_port[16];
  uint64_t memory;         /* bytes; a multiple of the page size */
  char key_path[PATH_MAX]; /* "" when none */
  uint64_t lease_seconds;
  bool foreground;
  char name[64];
  char pressure_file[PATH_MAX];
  char meminfo_file[PATH_MAX];
  double psi_threshold;   /* percent */
  uint64_t min_available; /* bytes, 0 = off */
  uint64_t pressure_interval_ms;
  char pid_file[PATH_MAX]; /* "" when none */
  bool verbose;
  uint32_t max_connections;     /* authenticated connections */
  uint32_t max_unauthenticated; /* connections in their handshake, in all */
  uint32_t max_unauthenticated_per_address;
  uint32_t handshake_timeout; /* seconds from accept to a proven key */
  uint32_t max_sessions_per_key;
  uint32_t poll_us;               /* spin this long for the next request; 0: never */
  bool mlock;                     /* lock the page store (and the process) in RAM */
  enum rps_fault_mode test_fault; /* RPS_FAULT_NONE unless a test asks for a liar */
  /* --etcd: announce this server in etcd (server/etcd_announce.c); "" when off */
  char etcd_endpoints[1024];
  char cluster[64];        /* --cluster NAME: keys under /rampart/NAME/ */
  char advertise[128];     /* --advertise HOST:PORT; "": the bound address */
  char failure_domain[64]; /* --failure-domain; default: the host name */
  char etcd_cacert[PATH_MAX], etcd_cert[PATH_MAX], etcd_key[PATH_MAX];
};

enum rps_options_result {
  RPS_OPTIONS_OK,
  RPS_OPTIONS_EXIT_OK, /* --help or --version was printed */
  RPS_OPTIONS_BAD,     /* err says why; exit 2 */
};

enum rps_options_result rps_options_parse(int argc, char **argv, struct rps_options *opt,
                                          char *err, size_t errlen);

#endif
