/* Watching this host's own memory: is it under pressure, so that rampartd should take
 * no new pages and ask its clients to move theirs elsewhere?
 *
 * Pressure means PSI "some avg10" (the share of the last 10 s in which some task
 * stalled on memory, /proc/pressure/memory) at or above --psi-threshold, or, when
 * --min-available is set, MemAvailable (/proc/meminfo) below it. The files are re-read
 * every --pressure-interval-ms; a change of state is reported through a callback.
 *
 * The parsers and the decision are pure functions of text and numbers, so the tests
 * feed them lines directly; the monitor around them is the only part with I/O.
 *
 * Errors: the parsers return 0 or -1 for text that does not parse, with no sentence;
 * rps_pressure_create returns NULL only when out of memory; nothing else here fails.
 */
#ifndef RAMPART_SERVER_PRESSURE_H
#define RAMPART_SERVER_PRESSURE_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Finds the "some" line of a PSI file and its avg10 value (a percentage, 0..100).
 * 0, or -1 when there is no such line or it is malformed. */
int rps_psi_parse_some_avg10(const char *text, double *avg10);

/* Finds "MemAvailable: N kB" in /proc/meminfo text; *bytes = N * 1024. 0 or -1. */
int rps_meminfo_parse_available(const char *text, uint64_t *bytes);

struct rps_pressure_config {
  const char *psi_path;     /* /proc/pressure/memory */
  const char *meminfo_path; /* /proc/meminfo */
  double psi_threshold;     /* percent, some avg10 */
  uint64_t min_available;   /* bytes; 0 disables the MemAvailable rule */
  double interval;          /* seconds between samples */
};

struct rps_pressure_sample {
  bool psi_ok; /* the PSI file was read and parsed */
  double psi_some_avg10;
  bool mem_ok; /* MemAvailable was read and parsed */
  uint64_t mem_available;
};

/* The decision: true under pressure. reason gets a sentence naming the numbers either
 * way ("PSI memory some avg10=23.5% >= 10%"). */
bool rps_pressure_evaluate(const struct rps_pressure_config *cfg,
                           const struct rps_pressure_sample *sample, char *reason,
                           size_t reasonlen);

typedef void (*rps_pressure_changed_fn)(void *arg, bool pressure, const char *reason);

struct rps_pressure;

/* Takes a first sample at once (so the state is known before the first client), then
 * one every cfg->interval. The config's strings must outlive the monitor. */
struct rps_pressure *rps_pressure_create(struct ev_loop *loop,
                                         const struct rps_pressure_config *cfg,
                                         rps_pressure_changed_fn changed, void *arg);
void rps_pressure_destroy(struct rps_pressure *p);

bool rps_pressure_active(const struct rps_pressure *p);
/* From now on, report pressure whatever the readings say: clients are advised to move
 * their pages elsewhere and growth is refused, until the server restarts. */
void rps_pressure_drain(struct rps_pressure *p);
bool rps_pressure_draining(const struct rps_pressure *p);
const struct rps_pressure_sample *rps_pressure_last(const struct rps_pressure *p);
/* Test API: the sentence that says why the last sample was pressure. */
const char *rps_pressure_reason(const struct rps_pressure *p);

#endif
