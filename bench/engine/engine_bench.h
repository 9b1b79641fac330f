/* bench/engine: the rampart engine alone, driven the way rampart-ublk's queue thread
 * drives it, against real rampartd processes it starts and stops itself (README.md).
 *
 * Errors: bench_cluster_start: -1 with a sentence in err (CONTRIBUTING.md,
 * convention 1); bench_load_prefill and bench_load_run: 0 or the engine's negative
 * errno (convention 2); bench_load_new: NULL only when out of memory.
 */
#ifndef RAMPART_BENCH_ENGINE_H
#define RAMPART_BENCH_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rampart.h"

#define BENCH_MAX_SERVERS 64u
#define BENCH_MAX_QD 256u

/* ---- bench_cluster.c: the rampartd processes ---- */
struct bench_cluster {
  unsigned n;
  pid_t pid[BENCH_MAX_SERVERS];
  char addr[BENCH_MAX_SERVERS][64];
  char dir[256];          /* temporary directory: key, logs */
  char key[300];          /* key file */
  const char *rampartctl; /* for each server's own op counts; NULL: not counted */
};
/* Starts n servers lending `memory` each, with a fresh key. 0, or -1 with err (every
 * server started so far stopped again). */
int bench_cluster_start(struct bench_cluster *c, unsigned n, const char *rampartd,
                        const char *memory, char *err, size_t errlen);
/* SIGTERM each server by PID, SIGKILL after 5 s; removes the directory. */
void bench_cluster_stop(struct bench_cluster *c);
/* "H:P,H:P,..." */
void bench_cluster_servers(const struct bench_cluster *c, char *out, size_t outlen);

/* What the servers spent (with_ops false): CPU (utime + stime of every server,
 * /proc/PID/stat) and context switches (voluntary + nonvoluntary over
 * /proc/PID/task/N/status). Or (with_ops true) the pages they took and gave: each
 * server's STAT ops_write + ops_read through rampartctl, which costs the servers a
 * connection: sampled outside the window the CPU is. */
struct bench_servers_sample {
  double cpu_us;
  uint64_t switches;
  uint64_t ops_pages;
  bool ops_known;
};
void bench_cluster_sample(const struct bench_cluster *c, bool with_ops,
                          struct bench_servers_sample *out);

/* ---- bench_load.c: one thread submitting and reaping, as ublk's queue thread ---- */
struct bench_load_result {
  uint64_t requests;
  double seconds;
  double p50_us, p99_us, mean_us;
};
struct bench_load;
struct bench_load *bench_load_new(struct rampart_engine *engine, uint64_t span_pages);
void bench_load_free(struct bench_load *l);
/* Writes the first span_pages of the device in full (unmeasured). 0 or -errno. */
int bench_load_prefill(struct bench_load *l);
/* `seconds` of random 4 KiB reads or writes at qd over the span. 0 or -errno. */
int bench_load_run(struct bench_load *l, bool write, unsigned qd, double seconds,
                   struct bench_load_result *out);

#endif
