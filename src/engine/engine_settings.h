/* struct rampart_config: the engine's settings as config.c parses them from key=value
 * strings (rampart.h lists the keys; frontends see the struct as an opaque type). A
 * header of its own because the engine's state (engine_core.h) holds the settings by
 * value, and every page op reads them.
 *
 * Errors: none: a struct and a constant.
 */
#ifndef RAMPART_ENGINE_SETTINGS_H
#define RAMPART_ENGINE_SETTINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "rampart_types.h"

#define RAMPART_ADDRESS_LEN 80

struct rampart_config {
  uint64_t size;
  unsigned nservers;
  char servers[RAMPART_MAX_SERVERS][RAMPART_ADDRESS_LEN]; /* "host:port" */
  char key_path[4096];
  enum rampart_redundancy redundancy;
  unsigned group;           /* 0: default */
  unsigned parity;          /* parity=: parity pages per parity-log group, 1 or 2 */
  char spill_path[4096];    /* "": temporary file */
  char temp_dir[4096];      /* "": $TMPDIR or /var/tmp */
  char stats_path[4096];    /* "": no stats file */
  char metrics_path[4096];  /* "": no Prometheus metrics file */
  char control_path[4096];  /* "": no control socket */
  char state_path[4096];    /* state=: the anchor of the pager's state; "": none */
  char cluster_path[4096];  /* cluster=, for reload; "": servers= or none */
  unsigned rebalance_pages; /* rebalance=: pages a second; 0: off */
  char enckey_path[4096];   /* "": a random page key per attach */
  bool encrypt_off;         /* encrypt=off: checksummed plaintext (benchmarks) */
  bool submit_inline;       /* submit=inline (default): frontends start requests when the
                                 loop idles; false: submit=handover */
  uint64_t spill_size;      /* 0: device size */
  uint64_t memory;          /* standalone RAM before spilling; UINT64_MAX: not given */
  unsigned overflow_percent;
  unsigned timeout_ms;
  unsigned lease_seconds;
  unsigned io_timeout_ms; /* io-timeout=; only if io_timeout_given, else the lease */
  bool io_timeout_given;
  unsigned poll_us;        /* poll-us=: a reaper spins this long before it sleeps */
  unsigned poll_pressure;  /* poll-pressure=: ... while CPU pressure is under this % */
  unsigned prefetch_pages; /* prefetch=: the prefetcher's cache, pages; 0: off */
  unsigned prefetch_depth; /* prefetch-depth=: pages read ahead along a trend */
  bool size_given;
  /* cluster=etcd://ENDPOINTS/NAME (src/engine/cluster_follow.c): the servers come from etcd */
  char etcd_endpoints[1024]; /* "http://a:2379,http://b:2379"; "": no etcd */
  char etcd_cluster[64];     /* NAME */
  unsigned etcd_count;       /* count=: the placement set's size (default 32) */
  char etcd_cacert[4096], etcd_cert[4096], etcd_key[4096]; /* TLS to etcd */
  char cluster_cache[4096]; /* cluster-cache=: the last set, for attaches without etcd */
  bool etcd_picked;         /* servers[] were chosen from etcd (or its cache) at open */
};

#endif
