#!/usr/bin/env bash
# rampart with no servers at all, as swap: 'rampart-swap on' with only size=, memory= and
# spill= attaches a standalone device (the pager's own RAM, then a spill file past
# memory=) through the frontend this host has; a workload three times its memory cgroup's
# limit pages through it, more than memory= holds, and verifies its result. The report
# shows pages in the spill file and none lost; 'off' leaves nothing behind.
# (scripts/quickstart --servers 0 is the same device, and bench/apps' 'standalone' floor.)
. "$(dirname "$0")/lib.sh"
require_swap_host

swap_on solo size=256M memory=48M spill="$work/spill" stats-file="$work/stats"
dev=$(swap_device solo)
log "swap on $dev, standalone: 48 MiB of the pager's RAM, then $work/spill"
! grep -q '^servers=\|key=' "$RAMPART_RUN_DIR/solo/pager.args" 2>/dev/null \
  || fail "a standalone device was given servers: $(cat "$RAMPART_RUN_DIR/solo/pager.args")"

# The spill file's use, sampled while the workload runs: once it ends its pages are
# freed (swap discards them), and the report, rewritten every second, says so.
spill_used() { sed -n 's/^spill *\([0-9]*\) of .*/\1/p' "$work/stats" 2>/dev/null || true; }
(most=0; while :; do n=$(spill_used); ((${n:-0} > most)) && most=$n && echo "$most" >"$work/spill-most"; sleep 0.2; done) &
sampler=$!
bg_pids+=("$sampler")
read -r in0 out0 < <(vmstat_swaps)
workload_until_verified solo 64M quicksort 192M
read -r in1 out1 < <(vmstat_swaps)
kill "$sampler" 2>/dev/null || true
spilled=$(cat "$work/spill-most" 2>/dev/null || echo 0)
log "pages swapped out $((out1 - out0)), in $((in1 - in0)); at most $spilled pages in the spill file"
((out1 - out0 >= 32768)) || fail "only $((out1 - out0)) pages were swapped out; expected >= 32768"
((in1 - in0 >= 32768)) || fail "only $((in1 - in0)) pages were swapped in; expected >= 32768"
# More went out than memory= holds (12288 pages): the rest went to the spill file.
((spilled > 0)) || fail "nothing spilled past memory=48M: $(grep '^spill' "$work/stats")"
grep -q 'lost pages 0' "$work/stats" || fail "pages were lost: $(grep '^failures' "$work/stats")"
grep -q 'read errors 0' "$work/stats" || fail "reads failed: $(grep '^failures' "$work/stats")"

"$RAMPART_SWAP" off --name solo || fail "rampart-swap off failed"
[[ ! -e $RAMPART_RUN_DIR/solo ]] || fail "'off' left $RAMPART_RUN_DIR/solo behind"
! grep -q "$RAMPART_RUN_DIR" /proc/mounts || fail "'off' left a mount under $RAMPART_RUN_DIR"
log "PASS"
