/* The engine's stats in the Prometheus text exposition format (version 0.0.4): what
 * metrics-file= publishes for node_exporter's textfile collector. Kept apart from the
 * engine, like stats_report.c, so metric names can be reviewed in one place.
 *
 * Every metric is rampart_pager_*, has one HELP and one TYPE line, and carries its
 * unit in its name (_pages, _bytes, _seconds, _total for counters). Per-server
 * metrics carry server="HOST:PORT" and incarnation="N" labels: a server that comes back
 * after it was declared lost joins as a new incarnation at the same address, and the
 * old one stays listed (its pages are being rebuilt), so the address alone would give
 * two samples of one series, which Prometheus rejects. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "prom_text.h"
#include "rampart.h"

static void device_metrics(struct prom_out *o, const struct rampart_stats *st)
{
  prom_metric(o, "rampart_pager_device_size_pages", "gauge",
              "Size of the device in 4 KiB pages.", (double)st->device_pages);
  const struct prom_sample where[] = {
    { "remote", st->pages_remote },
    { "spilled", st->pages_spilled },
    { "local_ram", st->pages_local_ram },
    { "zero", st->pages_zero },
  };
  prom_labelled(o, "rampart_pager_pages", "gauge",
                "Pages of the device by where they are held now.", "where", where,
                sizeof where / sizeof where[0]);
  prom_metric(o, "rampart_pager_unprotected_pages", "gauge",
              "Live pages one server loss from gone until the mover rewrites them.",
              (double)st->pages_unprotected);
  const struct prom_sample spare[] = {
    { "1", st->groups_one_spare },
    { "0", st->groups_no_spare },
  };
  prom_labelled(o, "rampart_pager_groups_by_spare", "gauge",
                "Groups holding live pages by the server losses they can still take.",
                "spare", spare, sizeof spare / sizeof spare[0]);
  prom_metric(o, "rampart_pager_parity_pages", "gauge",
              "Parity pages per group (parity=; 0 without parity).", (double)st->parity);
  prom_metric(o, "rampart_pager_spill_used_pages", "gauge", "Pages used in the spill store.",
              (double)st->spill_used_pages);
  prom_metric(o, "rampart_pager_spill_capacity_pages", "gauge",
              "Capacity of the spill store.", (double)st->spill_capacity_pages);
  prom_metric(o, "rampart_pager_client_memory_bytes", "gauge",
              "Memory the engine holds (locked) on this host.",
              (double)st->client_memory_bytes);
}

static void prefetch_metrics(struct prom_out *o, const struct rampart_stats *st)
{
  prom_metric(o, "rampart_pager_prefetch_hits_total", "counter",
              "Frontend page reads answered by the prefetcher, with no round trip of their "
              "own.",
              (double)st->prefetch_hits);
  prom_metric(o, "rampart_pager_prefetch_issued_total", "counter",
              "Pages the prefetcher read ahead.", (double)st->prefetch_issued);
  prom_metric(o, "rampart_pager_prefetch_wasted_total", "counter",
              "Pages the prefetcher read that nothing read: evicted, or written first.",
              (double)st->prefetch_wasted);
  prom_metric(o, "rampart_pager_prefetch_locked_bytes", "gauge",
              "Locked memory the prefetcher's cache holds (prefetch=).",
              (double)st->prefetch_bytes_locked);
}

static void spin_metrics(struct prom_out *o, const struct rampart_stats *st)
{
  prom_metric(o, "rampart_pager_reply_spins_total", "counter",
              "Waits for a server's reply that spun before sleeping (poll-us=).",
              (double)st->reap_spins);
  prom_metric(o, "rampart_pager_reply_spins_answered_total", "counter",
              "Of those, the waits a reply ended while the thread still spun.",
              (double)st->reap_spins_answered);
  prom_metric(o, "rampart_pager_reply_spin_paused", "gauge",
              "1 while the machine's CPU pressure is at poll-pressure= or over, and a "
              "waiting thread sleeps at once.",
              st->reap_spin_paused ? 1.0 : 0.0);
}

static void failure_metrics(struct prom_out *o, const struct rampart_stats *st)
{
  prom_metric(o, "rampart_pager_degraded_reads_total", "counter",
              "Pages read by rebuilding them from parity or a mirror because a copy was "
              "unavailable.",
              (double)st->pages_degraded_reads);
  prom_metric(
    o, "rampart_pager_lost_pages_total", "counter",
    "Pages lost: more copies gone than the redundancy covers (reads fail with EIO).",
    (double)st->pages_lost);
  prom_metric(o, "rampart_pager_read_errors_total", "counter", "Reads that failed with EIO.",
              (double)st->read_errors);
  prom_metric(o, "rampart_pager_integrity_failures_total", "counter",
              "Stored pages that failed verification.", (double)st->integrity_failures);
  if (st->prefetch_bytes_locked)
    prefetch_metrics(o, st);
  if (st->reap_spins || st->reap_spin_paused_ticks)
    spin_metrics(o, st);
  if (st->etcd_following) {
    prom_metric(o, "rampart_pager_etcd_watch_live", "gauge",
                "1 while the device's watch of its cluster in etcd (cluster=etcd://) is "
                "established; 0 while etcd cannot be reached (the device serves on, and "
                "follows the cluster again once it can).",
                st->etcd_watch_live ? 1.0 : 0.0);
    prom_metric(o, "rampart_pager_etcd_events_total", "counter",
                "Changes to the cluster's registry in etcd the device has seen.",
                (double)st->etcd_events);
    prom_metric(o, "rampart_pager_etcd_watch_restarts_total", "counter",
                "Times the etcd watch ended with an error and was started again.",
                (double)st->etcd_watch_restarts);
  }
  prom_metric(o, "rampart_pager_servers_reconnecting", "gauge",
              "Servers whose connection dropped and that are not yet declared lost.",
              (double)st->servers_reconnecting);
  prom_metric(o, "rampart_pager_requests_waiting", "gauge",
              "Reads and writes waiting for a reconnecting server.",
              (double)st->requests_waiting);
  prom_metric(o, "rampart_pager_sessions_resumed_total", "counter",
              "Server sessions resumed after a dropped connection.", (double)st->resumes);
  prom_metric(o, "rampart_pager_requests_replayed_total", "counter",
              "Requests sent again on a resumed session.", (double)st->requests_replayed);
}

static void rebuild_metrics(struct prom_out *o, const struct rampart_stats *st)
{
  prom_metric(o, "rampart_pager_rebuilds_total", "counter",
              "Rebuilds finished after losing a server.", (double)st->rebuilds_finished);
  prom_metric(o, "rampart_pager_rebuild_running", "gauge", "1 while a rebuild runs.",
              st->rebuild_running ? 1.0 : 0.0);
  prom_metric(o, "rampart_pager_rebuild_duration_seconds", "gauge",
              "Duration of the running rebuild, or else of the last one.",
              st->rebuild_seconds);
  prom_metric(o, "rampart_pager_rebuild_moved_pages", "gauge",
              "Pages written again by the running rebuild, or else by the last one.",
              (double)st->rebuild_pages_moved);
  prom_metric(o, "rampart_pager_rebuild_pending_pages", "gauge",
              "Live pages still to rewrite before every lost server's groups are whole.",
              (double)st->rebuild_pages_pending);
  struct prom_sample moves[RAMPART_MOVE_REASONS];
  for (unsigned r = 0; r < RAMPART_MOVE_REASONS; r++)
    moves[r] = (struct prom_sample){ rampart_move_reason_name((enum rampart_move_reason)r),
                                     st->moves_by_reason[r] };
  prom_labelled(o, "rampart_pager_moves_total", "counter",
                "Page moves started by the background mover, by reason.", "reason", moves,
                RAMPART_MOVE_REASONS);
  prom_metric(o, "rampart_pager_moves_in_flight", "gauge", "Page moves in flight.",
              (double)st->moves_in_flight);
  prom_metric(o, "rampart_pager_groups_cleaned_total", "counter",
              "Sparse parity groups rewritten by cleaning.", (double)st->groups_cleaned);
  prom_metric(o, "rampart_pager_overwritten_pages_total", "counter",
              "Frontend page writes that replaced a version already held.",
              (double)st->pages_overwritten);
  prom_metric(
    o, "rampart_pager_clean_rewrites_total", "counter",
    "Pages cleaning wrote again to free sparse groups (per overwritten page: its cost).",
    (double)st->clean_rewrites);
  prom_metric(o, "rampart_pager_writes_waited_for_cleaning_total", "counter",
              "Frontend writes that waited for cleaning because the overflow was spent.",
              (double)st->writes_waited_for_cleaning);
  prom_metric(o, "rampart_pager_written_pages_total", "counter",
              "Pages written by the frontend.", (double)st->pages_written);
  prom_metric(o, "rampart_pager_wire_written_bytes_total", "counter",
              "Bytes sent to servers for frontend writes (pages, parity, headers).",
              (double)st->wire_bytes_written);
}

/* One sample of a per-server metric: NAME{server="HOST:PORT",incarnation="N"EXTRA}, where
 * extra is "" or more labels, each after a comma. */
static void server_sample(struct prom_out *o, const char *name,
                          const struct rampart_server_stats *s, const char *extra,
                          unsigned long long value)
{
  char address[200];
  prom_escape_label(s->address, address, sizeof address);
  prom_put(o, "%s{server=\"%s\",incarnation=\"%u\"%s} %llu\n", name, address, s->index, extra,
           value);
}

static void server_metrics(struct prom_out *o, const struct rampart_stats *st)
{
  static const struct {
    const char *name, *help;
    size_t offset;
  } per_server[] = {
    { "rampart_pager_server_live_pages",
      "Current versions of device pages stored on "
      "the server.",
      offsetof(struct rampart_server_stats, pages_live) },
    { "rampart_pager_server_stored_pages",
      "Pages this device keeps on the server: live, "
      "old versions and parity.",
      offsetof(struct rampart_server_stats, pages_stored) },
    { "rampart_pager_server_reserved_pages", "Pages reserved on the server.",
      offsetof(struct rampart_server_stats, pages_reserved) },
    { "rampart_pager_server_integrity_failures_total",
      "Copies from the server that "
      "failed verification.",
      offsetof(struct rampart_server_stats, integrity_failures) },
    { "rampart_pager_server_dependent_pages",
      "Live pages that depend on the server (stored "
      "there, or in a group with a copy there): what a drain of it has left to move.",
      offsetof(struct rampart_server_stats, pages_dependent) },
  };
  for (size_t m = 0; m < sizeof per_server / sizeof per_server[0]; m++) {
    const char *type = strstr(per_server[m].name, "_total") ? "counter" : "gauge";
    prom_header(o, per_server[m].name, type, per_server[m].help);
    for (unsigned i = 0; i < st->nservers; i++) {
      uint64_t v;
      memcpy(&v, (const char *)&st->servers[i] + per_server[m].offset, sizeof v);
      server_sample(o, per_server[m].name, &st->servers[i], "", v);
    }
  }
  /* A state set: one sample per state, 1 for the current one, so an alert can say
   * rampart_pager_server_state{state="lost"} == 1. */
  prom_header(o, "rampart_pager_server_state", "gauge",
              "The engine's view of each server: 1 for its current state.");
  static const enum rampart_server_health states[] = {
    RAMPART_SERVER_UP, RAMPART_SERVER_ADVISED, RAMPART_SERVER_RECONNECTING,
    RAMPART_SERVER_LOST, RAMPART_SERVER_REMOVED
  };
  for (unsigned i = 0; i < st->nservers; i++) {
    for (size_t k = 0; k < sizeof states / sizeof states[0]; k++) {
      char state[48];
      snprintf(state, sizeof state, ",state=\"%s\"", rampart_server_health_name(states[k]));
      server_sample(o, "rampart_pager_server_state", &st->servers[i], state,
                    st->servers[i].state == states[k]);
    }
  }
  prom_header(
    o, "rampart_pager_server_draining", "gauge",
    "1 while the server is being drained (or removed): nothing new is placed there.");
  for (unsigned i = 0; i < st->nservers; i++)
    server_sample(o, "rampart_pager_server_draining", &st->servers[i], "",
                  st->servers[i].draining);
}

static void latency_metrics(struct prom_out *o, const struct rampart_stats *st)
{
  static const char *const ops[RAMPART_LATENCY_OPS] = { "read", "write", "trim", "zero",
                                                        "flush" };
  const char *name = "rampart_pager_request_duration_seconds";
  prom_header(o, name, "histogram",
              "Frontend requests from submission to completion, by operation.");
  for (unsigned op = 0; op < RAMPART_LATENCY_OPS; op++) {
    uint64_t cumulative = 0;
    for (unsigned k = 0; k < RAMPART_LATENCY_BUCKETS; k++) {
      cumulative += st->latency_count[op][k];
      if (k + 1 < RAMPART_LATENCY_BUCKETS)
        prom_put(o, "%s_bucket{op=\"%s\",le=\"%.6f\"} %llu\n", name, ops[op],
                 (double)(1ull << k) / 1e6, (unsigned long long)cumulative);
      else
        prom_put(o, "%s_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", name, ops[op],
                 (unsigned long long)cumulative);
    }
    prom_put(o, "%s_sum{op=\"%s\"} %.9f\n", name, ops[op],
             (double)st->latency_sum_ns[op] / 1e9);
    prom_put(o, "%s_count{op=\"%s\"} %llu\n", name, ops[op], (unsigned long long)cumulative);
  }
}

size_t rampart_format_metrics(const struct rampart_stats *st, char *buf, size_t buflen)
{
  struct prom_out o;
  prom_begin(&o, buf, buflen);
  device_metrics(&o, st);
  server_metrics(&o, st);
  failure_metrics(&o, st);
  rebuild_metrics(&o, st);
  latency_metrics(&o, st);
  return o.len;
}
