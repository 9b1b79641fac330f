#!/usr/bin/env bash
# The cluster changes under live swap (docs/elastic.md): while a workload pages through
# rampart (parity-log 4+1 on five servers), a sixth server is added through the device's
# control socket and one of the five is removed (drained, then forgotten), both with
# rampartctl as an operator runs them. The removed server is then killed: it holds
# nothing, so that costs no degraded read. The workload must finish and verify with no
# failed request, the new server must hold pages, and swap stays on throughout.
. "$(dirname "$0")/lib.sh"
require_swap_host

swap_on_cluster elastic 192M lease=20
ctl=$RAMPART_RUN_DIR/elastic/control
[[ -S $ctl ]] || fail "rampart-swap did not give the device a control socket at $ctl"
mkdir -p "$work/extra"
cluster_start "$work/extra" 1 192M "$work/key" extra || fail "could not start the sixth server"
added=${CLUSTER_ADDRS[5]}
leaving=${CLUSTER_ADDRS[1]}

# Once, on the first run: a run the OOM killer ended is started again on the changed
# cluster.
change_cluster() {
  (($1 == 1)) || return 0
  log "$((used / 1024)) MiB swapped out; rampartctl device CONTROL add $added"
  "$RAMPARTCTL" device "$ctl" add "$added" >"$work/add.out" 2>&1 ||
    fail "add refused: $(cat "$work/add.out")"
  sed 's/^/    /' "$work/add.out"
  log "rampartctl device CONTROL remove $leaving (waits for the drain)"
  "$RAMPARTCTL" device "$ctl" remove "$leaving" >"$work/remove.out" 2>&1 ||
    fail "remove failed: $(cat "$work/remove.out")"
  sed 's/^/    /' "$work/remove.out"
  grep -q "^removed $leaving" "$work/remove.out" || fail "remove did not end with 'removed'"
  # Checked now, while the workload's pages are out: once it ends, swap discards them
  # and every server holds next to nothing.
  "$RAMPARTCTL" device "$ctl" servers >"$work/servers.out" 2>&1 || fail "servers: $(cat "$work/servers.out")"
  log "the device's servers after the add and the removal:"
  sed 's/^/    /' "$work/servers.out"
  awk -v a="$added" '$1 == a && $2 == "up" && $4 > 0 { ok = 1 } END { exit !ok }' "$work/servers.out" ||
    fail "the added server $added is not up holding pages"
  awk -v a="$leaving" '$1 == a && $2 == "removed" { ok = 1 } END { exit !ok }' "$work/servers.out" ||
    fail "$leaving is not listed as removed"
  log "the removed server killed: it must hold nothing of the device"
  cluster_kill9 1
}
workload_until_verified elastic 96M quicksort 288M change_cluster

sleep 1.5 # the stats file is rewritten every second
grep -q 'degraded reads 0, lost pages 0, read errors 0' "$work/stats" ||
  fail "the changes cost reads or pages: $(grep '^failures' "$work/stats")"
"$RAMPART_SWAP" off --name elastic || fail "rampart-swap off failed after the changes"
log "PASS"
