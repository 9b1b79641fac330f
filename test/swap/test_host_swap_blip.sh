#!/usr/bin/env bash
# A network blip under swap: while a workload pages through rampart (parity-log 4+1),
# every connection to every server is reset and refused for 3 s, twice (an nftables
# rule answers each packet to a server's port with a TCP reset, as a firewall reload or
# a rebooting switch does). The servers stay up with every page; the workload must
# finish and verify, and no read or write may fail: a failed swap-in is a killed process.
. "$(dirname "$0")/lib.sh"
require_swap_host
command -v nft >/dev/null || skip "needs nft (Debian package nftables) to cut connections"

swap_on_cluster blip 192M lease=20 timeout=1000

table=rampart_blip_$$
blip_cleanup() { nft delete table inet "$table" 2>/dev/null || true; }
cleanups+=(blip_cleanup)

# blip SECONDS: every connection to the cluster reset, and new ones refused, for SECONDS.
blip() {
  local ports=() a
  for a in "${CLUSTER_ADDRS[@]}"; do ports+=("${a##*:}"); done
  local IFS=,
  nft "table inet $table { chain in { type filter hook input priority 0; ip daddr 127.0.0.1 tcp dport { ${ports[*]} } reject with tcp reset; }; }" \
    || fail "could not add the nftables rule"
  sleep "$1"
  nft delete table inet "$table" || fail "could not remove the nftables rule"
}

blip_twice() {
  log "$((used / 1024)) MiB swapped out; every server unreachable for 3 s"
  blip 3
  sleep 2
  log "and again"
  blip 3
}
workload_until_verified blip 96M quicksort 288M blip_twice
log "engine after the blips:"
sed 's/^/    /' "$work/stats"
grep -q 'lost pages 0, read errors 0' "$work/stats" \
  || fail "requests failed through the blip: $(grep '^failures' "$work/stats")"

"$RAMPART_SWAP" off --name blip || fail "rampart-swap off failed after the blips"
log "PASS"
