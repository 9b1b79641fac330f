#!/usr/bin/env bash
# Two of ten memory servers are killed with SIGKILL at the same instant while a workload
# is paging through rampart (parity-log 4+2, parity=2): the workload still completes and
# verifies, and no page is lost.
. "$(dirname "$0")/lib.sh"
require_swap_host

# Ten servers: after two losses the eight left still give a 4+2 group six distinct
# servers to rebuild onto, and after a second pair (a rerun's) six.
SWAP_SERVERS=10 swap_on_cluster k9 192M lease=2 timeout=1000 parity=2

# Each attempt kills one more pair once a good part of the workload lives on the servers.
# Another attempt (after a memory-cgroup OOM kill, see finish_workload) runs on a device
# that has already rebuilt from the last losses, and kills another pair.
victims=("2 7" "4 9" "0 5")

# wait_rebuilt I...: waits up to 60 s for the engine to declare servers I... lost and
# finish rebuilding (nothing pending, and a finished rebuild on the stats' 'rebuild last'
# line); fails the test otherwise.
wait_rebuilt() {
  local i all
  for _ in $(seq 600); do
    all=1
    for i in "$@"; do grep -q "${CLUSTER_ADDRS[$i]} *lost" "$work/stats" 2>/dev/null || all=0; done
    ((all)) && grep -q 'rebuild pending 0,' "$work/stats" && grep -q '^rebuild *last' "$work/stats" \
      && { log "rebuilt: $(grep '^rebuild' "$work/stats")"; return 0; }
    sleep 0.1
  done
  sed 's/^/    /' "$work/stats" >&2
  fail "the engine did not finish rebuilding after servers $* were killed (60 s)"
}
for attempt in 1 2 3; do
  start_workload rampart-test-k9-$$-$attempt 96M quicksort 288M "$work/workload.out"
  wait_swapped_out "$dev" 65536 "any server was killed"
  read -r a b <<<"${victims[$((attempt - 1))]}"
  log "$((used / 1024)) MiB swapped out; kill -9 rampartd ${CLUSTER_ADDRS[$a]} and ${CLUSTER_ADDRS[$b]} at once"
  # One kill(2) each, back to back: cluster_kill9 would wait for the first to die.
  kill -KILL "${CLUSTER_PIDS[$a]}" "${CLUSTER_PIDS[$b]}"
  for i in "$a" "$b"; do
    CLUSTER_KILLED[$i]=1
    wait "${CLUSTER_PIDS[$i]}" 2>/dev/null || true
  done
  rc=0
  finish_workload "$work/workload.out" "$dev" || rc=$?
  ((rc == 0)) && break
  ((attempt < 3)) || fail "the kernel OOM-killed the workload three times in a row"
  log "running the workload once more, on the rebuilt device"
  # Two losses in a group at a time are what parity=2 survives: rebuild before the next pair.
  wait_rebuilt "$a" "$b"
done
# Surviving the kill is half of it: the engine must also have re-protected every page
# the dead servers held, or the next losses would take them.
wait_rebuilt "$a" "$b"
log "engine after the kill:"
sed 's/^/    /' "$work/stats"
for i in "$a" "$b"; do
  grep -q "${CLUSTER_ADDRS[$i]} *\(down\|lost\|failing\|reconnecting\)" "$work/stats" \
    || fail "the stats do not show ${CLUSTER_ADDRS[$i]} as gone"
done
grep -q 'lost pages 0' "$work/stats" || fail "pages were lost: $(grep '^failures' "$work/stats")"

"$RAMPART_SWAP" off --name k9 || fail "rampart-swap off failed after the kill"
log "PASS"
