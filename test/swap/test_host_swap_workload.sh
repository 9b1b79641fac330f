#!/usr/bin/env bash
# A workload three times its memory cgroup's limit pages through a rampart swap device
# (rampart-fuse + loop + swapon on this host, 5 servers, parity-log 4+1) and verifies its result.
. "$(dirname "$0")/lib.sh"
require_swap_host

swap_on_cluster wl 160M lease=3
log "swap on $dev"

# finish_workload handles the kernel's memcg OOMs; a rerun is for one it could not head
# off (past its cap, or on cgroup v2).
for attempt in 1 2 3; do
  read -r in0 out0 < <(vmstat_swaps)
  start_workload rampart-test-wl-$$-$attempt 96M quicksort 288M "$work/workload.out"
  rc=0
  finish_workload "$work/workload.out" "$dev" || rc=$?
  ((rc == 0)) && break
  ((attempt < 3)) || fail "the kernel OOM-killed the workload three times in a row"
  log "running the workload once more"
done
read -r in1 out1 < <(vmstat_swaps)
log "pages swapped out $((out1 - out0)), in $((in1 - in0))"
# 288 MiB in 96 MiB: at least the 192 MiB that cannot fit must have gone out and come back.
((out1 - out0 >= 49152)) || fail "only $((out1 - out0)) pages were swapped out; expected >= 49152"
((in1 - in0 >= 49152)) || fail "only $((in1 - in0)) pages were swapped in; expected >= 49152"
# ...and through rampart: the engine saw those writes.
written=$(sed -n 's/^wire .*(\([0-9]*\) written).*/\1/p' "$work/stats")
log "engine: $(grep '^wire' "$work/stats")"
((${written:-0} >= 49152)) || fail "the engine saw ${written:-0} page writes; the swap did not go through rampart"
grep -q 'lost pages 0' "$work/stats" || fail "pages were lost: $(grep '^failures' "$work/stats")"
# rampart-fuse as swap on deploys it waits for its replies spinning (poll-us=30), or says
# the CPU pressure paused the spin: with poll-us=0 the report has no such line.
if grep -qx frontend=fuse "$RAMPART_RUN_DIR/wl/state"; then
  spin=$(grep '^spinning' "$work/stats") \
    || fail "the fuse pager did not spin for its replies (swap on sets poll-us=30 for it): no spinning line in $(cat "$work/stats")"
  log "engine: $spin"
fi

# What backs the device (a loop device: our FUSE file), so that the check after 'off'
# is about this device, not a /dev/loop0 another job on the machine set up since.
back=$(losetup -n -O BACK-FILE "$dev" 2>/dev/null || true)
"$RAMPART_SWAP" off --name wl || fail "rampart-swap off failed"
if [[ -n $(swap_used_kib "$dev") ]]; then
  [[ -n $back && $(losetup -n -O BACK-FILE "$dev" 2>/dev/null || true) != "$back" ]] \
    || fail "$dev is still in /proc/swaps after off"
  log "note: $dev is swap again, but over $(losetup -n -O BACK-FILE "$dev"), not ours"
fi
log "PASS"
