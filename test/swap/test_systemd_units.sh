#!/usr/bin/env bash
# The systemd units are clean under 'systemd-analyze verify' (with their program paths
# pointed at this build), and the example configurations are ones the programs accept.
. "$(dirname "$0")/lib.sh"
command -v systemd-analyze >/dev/null || skip "systemd-analyze is missing (package systemd)"

units=$work/units
mkdir -p "$units"
bindir=$(dirname "$RAMPARTD")
sbindir=$(dirname "$RAMPART_SWAP")
for u in rampartd.service rampartd@.service rampart-swap.service; do
  sed -e "s|@BINDIR@|$bindir|g" -e "s|@SBINDIR@|$sbindir|g" \
    -e "s|@DOCDIR@|/usr/share/doc/rampart|g" "$src_root/systemd/$u" >"$units/$u"
done
if ! systemd-analyze verify "$units"/*.service >"$work/verify.out" 2>&1 || [[ -s $work/verify.out ]]; then
  cat "$work/verify.out"
  fail "systemd-analyze verify is not clean"
fi
log "systemd-analyze verify: clean"

# rampartd.service runs unprivileged, sandboxed, with its pages locked (docs/security.md):
# systemd's own exposure score stays low (it was 6.3 MEDIUM before the sandboxing).
for setting in DynamicUser=yes CapabilityBoundingSet= NoNewPrivileges=yes \
    ProtectSystem=strict PrivateTmp=yes ProtectHome=yes MemoryDenyWriteExecute=yes \
    SystemCallFilter=@system-service LimitMEMLOCK=infinity; do
  grep -qx "$setting" "$units/rampartd.service" || fail "rampartd.service lacks $setting"
done
grep -q '^ExecStart=.*rampartd .*--mlock' "$units/rampartd.service" ||
  fail "rampartd.service does not run rampartd with --mlock"
if systemd-analyze security --offline=yes "$units/rampartd.service" >"$work/security.out" 2>&1; then
  exposure=$(sed -n 's/.*Overall exposure level for rampartd.service: \([0-9.]*\).*/\1/p' "$work/security.out")
  [[ -n $exposure ]] || fail "no exposure level in: $(cat "$work/security.out")"
  awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }' ||
    fail "rampartd.service exposure $exposure is above 2.0: $(grep '✗' "$work/security.out")"
  log "rampartd.service: systemd-analyze security exposure $exposure"
else
  log "systemd-analyze security --offline is not supported here; exposure not measured"
fi

# rampartd.conf.example parses (rampartd --config ... --help-free dry run: start it on
# loopback with the example's settings and stop it).
conf=$work/rampartd.conf
sed -e "s|^listen = .*|listen = 127.0.0.1:0|" -e "s|^memory = .*|memory = 16M|" \
  -e "s|^key = .*|key = $work/key|" -e "s|^min-available = .*|min-available = 1M|" \
  -e "s|^metrics = .*|metrics = 127.0.0.1:0|" \
  "$src_root/systemd/rampartd.conf.example" >"$conf"
"$RAMPARTCTL" keygen "$work/key" >/dev/null
"$RAMPARTD" --config "$conf" --foreground >"$work/rampartd.out" 2>&1 &
pid=$!
bg_pids+=("$pid")
for _ in $(seq 50); do grep -q 'listening on' "$work/rampartd.out" && break; sleep 0.1; done
grep -q 'listening on' "$work/rampartd.out" || fail "rampartd rejected the example config: $(cat "$work/rampartd.out")"
log "rampartd.conf.example: accepted"

# swap.conf.example: every key is one rampart-swap or the plugin knows.
while IFS= read -r line; do
  line=${line%%#*}
  [[ $line == *=* ]] || continue
  k=${line%%=*}
  case "$k" in name|priority|frontend|queues|depth|attach|connections|threads) continue ;; esac
  # The engine's settings table (src/engine/config_settings.h) is what the plugin accepts.
  grep -q "^ *X(\"$k\"," "$src_root/src/engine/config_settings.h" \
    || fail "swap.conf.example: the plugin does not know '$k'"
done <"$src_root/systemd/swap.conf.example"
log "swap.conf.example: every key is known"
log "PASS"
