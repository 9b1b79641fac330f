/* A person's view of the engine's stats: what rampartctl and the plugin's debug output
 * print. Kept apart from the engine so the wording can change without touching it. */
#include <stdio.h>

#include "config.h"
#include "parse.h"
#include "rampart.h"

const char *rampart_server_health_name(enum rampart_server_health s)
{
  switch (s) {
  case RAMPART_SERVER_UP:
    return "up";
  case RAMPART_SERVER_ADVISED:
    return "advised";
  case RAMPART_SERVER_RECONNECTING:
    return "reconnecting";
  case RAMPART_SERVER_LOST:
    return "lost";
  case RAMPART_SERVER_REMOVED:
    return "removed";
  }
  return "?";
}

void rampart_format_stats(const struct rampart_stats *st, char *buf, size_t buflen)
{
  size_t n = 0;
#define OUT(...) \
  do { \
    if (n < buflen) \
      n += (size_t)snprintf(buf + n, buflen - n, __VA_ARGS__); \
  } while (0)
  char a[32], b[32];
  OUT("device          %s (%llu pages), redundancy %s, group %u, parity %u\n",
      rp_format_bytes(st->device_pages * RAMPART_PAGE_SIZE, a, sizeof a),
      (unsigned long long)st->device_pages, rampart_redundancy_name(st->redundancy),
      st->group_size, st->parity);
  OUT("pages           remote %llu, spilled %llu, local RAM %llu, zero %llu\n",
      (unsigned long long)st->pages_remote, (unsigned long long)st->pages_spilled,
      (unsigned long long)st->pages_local_ram, (unsigned long long)st->pages_zero);
  OUT("groups          in use %llu, sealed %llu, reclaimed %llu, cleaned %llu, live ratio "
      "%.2f\n",
      (unsigned long long)st->groups_open, (unsigned long long)st->groups_sealed,
      (unsigned long long)st->groups_reclaimed, (unsigned long long)st->groups_cleaned,
      st->live_ratio);
  OUT("failures        degraded reads %llu, lost pages %llu, read errors %llu, "
      "failed verification %llu\n",
      (unsigned long long)st->pages_degraded_reads, (unsigned long long)st->pages_lost,
      (unsigned long long)st->read_errors, (unsigned long long)st->integrity_failures);
  if (st->prefetch_bytes_locked)
    OUT("prefetch        hits %llu (joined in flight %llu), issued %llu, wasted %llu, "
        "cached %u, in flight %u, %s locked\n",
        (unsigned long long)st->prefetch_hits, (unsigned long long)st->prefetch_joins,
        (unsigned long long)st->prefetch_issued, (unsigned long long)st->prefetch_wasted,
        st->prefetch_cached_pages, st->prefetch_in_flight,
        rp_format_bytes(st->prefetch_bytes_locked, a, sizeof a));
  OUT("protection      %llu live pages unprotected (one loss from gone until moved); "
      "groups with one loss to spare %u, with none %u\n",
      (unsigned long long)st->pages_unprotected, st->groups_one_spare, st->groups_no_spare);
  OUT("pages sealed    %s\n", st->encrypted
                                ? "AES-256-GCM (encrypted and authenticated)"
                                : "checksum only (encrypt=off: servers see plaintext)");
  OUT("moves           done %llu, in flight %u, rebuild pending %llu, ops waiting %u%s\n",
      (unsigned long long)st->rebuild_pages_done, st->moves_in_flight,
      (unsigned long long)st->rebuild_pages_pending, st->ops_waiting,
      st->cleaning ? ", cleaning" : "");
  OUT("health          reconnecting %u, requests waiting %u (oldest %llu ms), resumed %llu, "
      "requests sent again %llu\n",
      st->servers_reconnecting, st->requests_waiting, (unsigned long long)st->oldest_wait_ms,
      (unsigned long long)st->resumes, (unsigned long long)st->requests_replayed);
  OUT("frontend        %u requests in the engine now; %u sent to servers, replies due\n",
      st->frontend_requests, st->server_requests_in_flight);
  if (st->reap_spins || st->reap_spin_paused_ticks)
    OUT("spinning        %llu waits spun, %llu answered while spinning; paused by CPU "
        "pressure %llu ticks%s\n",
        (unsigned long long)st->reap_spins, (unsigned long long)st->reap_spins_answered,
        (unsigned long long)st->reap_spin_paused_ticks,
        st->reap_spin_paused ? " (paused now)" : "");
  if (st->rebuild_running || st->rebuilds_finished > 0) {
    double mib = (double)st->rebuild_pages_moved * RAMPART_PAGE_SIZE / 1048576.0;
    OUT("rebuild         %s: %llu pages (%.1f MiB) in %.3f s, %.1f MiB/s\n",
        st->rebuild_running ? "running" : "last", (unsigned long long)st->rebuild_pages_moved,
        mib, st->rebuild_seconds, st->rebuild_seconds > 0 ? mib / st->rebuild_seconds : 0.0);
  }
  OUT("wire            %.3f pages sent per page written (%llu written)\n",
      st->pages_written ? (double)st->wire_bytes_written / (double)st->pages_written /
                            (RAMPART_PAGE_SIZE + 32.0)
                        : 0.0,
      (unsigned long long)st->pages_written);
  OUT("cleaning        %.3f rewrites per overwrite (%llu pages rewritten, %llu overwritten), "
      "%llu writes waited for it%s\n",
      st->pages_overwritten ? (double)st->clean_rewrites / (double)st->pages_overwritten
                            : 0.0,
      (unsigned long long)st->clean_rewrites, (unsigned long long)st->pages_overwritten,
      (unsigned long long)st->writes_waited_for_cleaning,
      !st->cleaning       ? ""
      : st->cleaning_idle ? ", running while idle"
                          : ", running under I/O");
  OUT("spill           %llu of %llu pages used\n", (unsigned long long)st->spill_used_pages,
      (unsigned long long)st->spill_capacity_pages);
  char c[32];
  uint64_t scaling = st->client_memory_bytes - st->client_memory_fixed_bytes;
  OUT("client memory   %s: %s fixed, plus %s per device GiB\n",
      rp_format_bytes(st->client_memory_bytes, a, sizeof a),
      rp_format_bytes(st->client_memory_fixed_bytes, b, sizeof b),
      rp_format_bytes(st->device_pages
                        ? (uint64_t)((double)scaling / ((double)st->device_pages / 262144.0))
                        : 0,
                      c, sizeof c));
  for (unsigned i = 0; i < st->nservers; i++) {
    const struct rampart_server_stats *s = &st->servers[i];
    OUT("server %-22s %-12s live %llu, stored %llu, reserved %llu", s->address,
        rampart_server_health_name(s->state), (unsigned long long)s->pages_live,
        (unsigned long long)s->pages_stored, (unsigned long long)s->pages_reserved);
    if (s->integrity_failures > 0)
      OUT(", %s%llu failed verification", s->suspect ? "SUSPECT: " : "",
          (unsigned long long)s->integrity_failures);
    OUT("\n");
  }
#undef OUT
}
