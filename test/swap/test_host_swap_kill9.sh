#!/usr/bin/env bash
# One of five memory servers is killed with SIGKILL while a workload is paging through
# rampart (parity-log 4+1): the workload still completes and verifies, no page is lost.
. "$(dirname "$0")/lib.sh"
require_swap_host

swap_on_cluster k9 192M lease=2 timeout=1000

# Each attempt kills one more server once a good part of the workload lives on the servers.
# Another attempt (after a memory-cgroup OOM kill, see finish_workload) runs on a device
# that has already rebuilt from the last loss, and kills another server.
victims=(2 4 0)

# wait_rebuilt I: waits up to 60 s for the engine to declare server I lost and finish
# rebuilding (nothing pending, and a finished rebuild on the stats' 'rebuild last' line);
# fails the test otherwise.
wait_rebuilt() {
  local addr=${CLUSTER_ADDRS[$1]}
  for _ in $(seq 600); do
    grep -q "$addr *lost" "$work/stats" 2>/dev/null && grep -q 'rebuild pending 0,' "$work/stats" \
      && grep -q '^rebuild *last' "$work/stats" && { log "rebuilt: $(grep '^rebuild' "$work/stats")"; return 0; }
    sleep 0.1
  done
  sed 's/^/    /' "$work/stats" >&2
  fail "the engine did not finish rebuilding after $addr was killed (60 s)"
}
for attempt in 1 2 3; do
  start_workload rampart-test-k9-$$-$attempt 96M quicksort 288M "$work/workload.out"
  wait_swapped_out "$dev" 65536 "any server was killed"
  victim=${victims[$((attempt - 1))]}
  log "$((used / 1024)) MiB swapped out; kill -9 rampartd ${CLUSTER_ADDRS[$victim]} (pid ${CLUSTER_PIDS[$victim]})"
  cluster_kill9 "$victim"
  rc=0
  finish_workload "$work/workload.out" "$dev" || rc=$?
  ((rc == 0)) && break
  ((attempt < 3)) || fail "the kernel OOM-killed the workload three times in a row"
  log "running the workload once more, on the rebuilt device"
  # The first loss must be rebuilt before a second one is survivable (parity-log: one
  # loss per group at a time).
  wait_rebuilt "$victim"
done
# Surviving the kill is half of it: the engine must also have re-protected every page
# the dead server held, or the next loss would take them.
wait_rebuilt "$victim"
log "engine after the kill:"
sed 's/^/    /' "$work/stats"
grep -q "${CLUSTER_ADDRS[$victim]} *\(down\|lost\|failing\|reconnecting\)" "$work/stats" \
  || fail "the stats do not show ${CLUSTER_ADDRS[$victim]} as gone"
grep -q 'lost pages 0' "$work/stats" || fail "pages were lost: $(grep '^failures' "$work/stats")"

"$RAMPART_SWAP" off --name k9 || fail "rampart-swap off failed after the kill"
log "PASS"
