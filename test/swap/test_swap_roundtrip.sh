#!/usr/bin/env bash
# 'rampartctl swap on' then 'off', twice in a row, each leaving nothing behind: no swap
# entry, loop device, FUSE mount, daemon (pager, standby, keeper, nbdfuse or the FUSE
# daemon, the notify listener, supervisor), state directory. Once 'on' returns, no shell
# runs among the processes it left (the recorded ones and everything below them). A second 'on' while the device is on and served takes it back as it
# is. Bad input to 'on' fails with a message that names the problem, and also leaves
# nothing behind. On a host without the ublk or NBD driver, '--frontend ublk' or
# '--frontend nbd' is refused, saying why, before anything starts, and the default
# falls back to rampart-fuse + loop saying that a pager crash is then not survived. An
# 'on' stopped by SIGTERM undoes itself.
. "$(dirname "$0")/lib.sh"
require_swap_host

key=$work/key
"$RAMPARTCTL" keygen "$key" >/dev/null
cluster_start "$work" 3 96M "$key" roundtrip || fail "could not start the servers"
export RAMPART_SWAP

nothing_left() { # name what-just-happened
  local name=$1 when=$2
  [[ ! -e $RAMPART_RUN_DIR/$name ]] || fail "$when: $RAMPART_RUN_DIR/$name is still there"
  ! grep -q "$RAMPART_RUN_DIR" /proc/mounts || fail "$when: a mount under $RAMPART_RUN_DIR remains"
  ! losetup -a | grep -q "$RAMPART_RUN_DIR" || fail "$when: a loop device still points into $RAMPART_RUN_DIR"
  ! grep -q "^/dev/loop" /proc/swaps || [[ -z ${dev:-} ]] || [[ -z $(swap_used_kib "$dev") ]] \
    || fail "$when: $dev is still swap"
  local p
  for p in ${pids_seen:-}; do
    ! kill -0 "$p" 2>/dev/null || fail "$when: process $p ($(cat /proc/$p/comm 2>/dev/null)) is still running"
  done
}

# Every daemon 'on' recorded, for nothing_left.
daemon_pids() {
  sed -n 's/^\(nbdkit\|nbdfuse\|fuse\|pager\|standby\|keeper\|attach\|notify\|supervisor\)_pid=//p' \
    "$RAMPART_RUN_DIR/$1/state" | sort -u | tr '\n' ' '
}
kernel_has() { # ublk|nbd: the driver is there or loads
  case "$1" in
    ublk) [[ -e /dev/ublk-control ]] || modprobe ublk_drv 2>/dev/null ;;
    nbd) [[ -e /sys/module/nbd ]] || modprobe nbd 2>/dev/null ;;
  esac
}

for round in 1 2; do
  swap_names+=(rt)
  "$RAMPARTCTL" swap on --name rt --config /dev/null size=128M servers="$(cluster_servers)" \
    key="$key" redundancy=parity-log group=2 spill="$work/spill" "${plugin_extra[@]}" \
    >"$work/on.out" 2>&1 || { cat "$work/on.out"; fail "round $round: rampartctl swap on failed"; }
  dev=$(swap_device rt)
  pids_seen=$(daemon_pids rt)
  [[ -n $(swap_used_kib "$dev") ]] || fail "round $round: $dev is not in /proc/swaps after on"
  # shellcheck disable=SC2086
  no_shell_among "round $round, after on" $pids_seen
  ((looked_at >= 3)) || fail "round $round: only $looked_at of the device's processes run ($pids_seen)"
  # The priority and discard that 'on' promises.
  awk -v d="$dev" '$1 == d && $5 == 100 { found = 1 } END { exit !found }' /proc/swaps \
    || fail "round $round: $dev is not at priority 100: $(grep "$dev" /proc/swaps)"
  "$RAMPARTCTL" swap status --name rt >"$work/status.out" || fail "round $round: status failed"
  grep -q "is on: $dev via " "$work/status.out" || fail "round $round: status does not say it is on: $(cat "$work/status.out")"
  grep -q "^  serving: pid [0-9]" "$work/status.out" || fail "round $round: status names no serving pid"
  grep -q "^  standby: " "$work/status.out" || fail "round $round: status says nothing of a standby"
  grep -q "^  pages out: [0-9]" "$work/status.out" || fail "round $round: status gives no pages out"
  if ! kernel_has ublk && ! kernel_has nbd; then
    # The default with neither driver: the FUSE path, and the warning that says what it
    # costs.
    grep -q "via fuse" "$work/status.out" || fail "round $round: neither driver, yet not the fuse frontend"
    grep -q "warning: this host has neither ublk (.*) nor NBD (.*): attaching through rampart-fuse .*a crash of the pager is then NOT survived" "$work/on.out" ||
      { cat "$work/on.out"; fail "round $round: the fall-back to fuse does not warn what it costs"; }
  fi
  # 'on' for a device that is on and served (what a refused 'off' leaves, under systemd a
  # 'failed' unit started again) takes it back as it is: same device, same nbdkit.
  "$RAMPARTCTL" swap on --name rt --config /dev/null size=128M servers="$(cluster_servers)" \
    key="$key" >"$work/on2.out" 2>&1 || { cat "$work/on2.out"; fail "round $round: a second on failed"; }
  grep -q "is already on: $dev .*taking it back as it is" "$work/on2.out" ||
    { cat "$work/on2.out"; fail "round $round: a second on did not take $dev back"; }
  [[ $(daemon_pids rt) == "$pids_seen" ]] ||
    fail "round $round: a second on changed the device's processes"
  # 'upgrade' of a device with no standby is refused, saying what to do, and changes nothing
  # (test_guest_nbd_client.sh runs an upgrade on NBD, and its layout refusal).
  if grep -q "via fuse" "$work/status.out"; then
    "$RAMPARTCTL" swap upgrade --name rt >"$work/upgrade.out" 2>&1 && fail "round $round: upgrade of a fuse device went ahead"
    grep -q "runs on fuse, which has no standby to hand over to: .*off.* and .*on' start the installed binary" "$work/upgrade.out" ||
      { cat "$work/upgrade.out"; fail "round $round: upgrade of a fuse device was not refused with the reason"; }
    [[ $(daemon_pids rt) == "$pids_seen" ]] || fail "round $round: a refused upgrade changed the device's processes"
  fi
  "$RAMPARTCTL" swap off --name rt >"$work/off.out" 2>&1 \
    || { cat "$work/off.out"; fail "round $round: rampartctl swap off failed"; }
  nothing_left rt "round $round, after off"
  log "round $round: on ($dev, pids $pids_seen) and off, nothing left"
done
"$RAMPARTCTL" swap off --name rt | grep -q "already off" || fail "a second off does not say it is already off"
! "$RAMPARTCTL" swap upgrade --name rt >"$work/upgrade.out" 2>&1 &&
  grep -q "'rt' is off: nothing to upgrade" "$work/upgrade.out" ||
  fail "upgrade of a device that is off does not say so: $(cat "$work/upgrade.out")"

# Bad input: the error names the problem, and nothing is left behind.
expect_refusal() { # what grep-pattern args...
  local what=$1 pattern=$2
  shift 2
  dev=
  if "$RAMPARTCTL" swap on --name bad --config /dev/null "$@" "${plugin_extra[@]}" >"$work/bad.out" 2>&1; then
    "$RAMPART_SWAP" off --name bad --force >/dev/null 2>&1 || true
    fail "$what was accepted"
  fi
  grep -qi -- "$pattern" "$work/bad.out" || { cat "$work/bad.out"; fail "$what: the error does not mention '$pattern'"; }
  pids_seen=
  nothing_left bad "$what"
  log "$what refused: $(grep -i -m1 -- "$pattern" "$work/bad.out")"
}
expect_refusal "a size that is not a number" "is not a size" size=lots servers="$(cluster_servers)" key="$key"
expect_refusal "a missing size" "no size= given" servers="$(cluster_servers)" key="$key"
"$RAMPARTCTL" keygen "$work/wrong.key" >/dev/null
expect_refusal "the wrong cluster key" "wrong cluster key" size=64M servers="$(cluster_servers)" key="$work/wrong.key" spill="$work/spill2"
# A forced frontend this kernel lacks: refused with the reason, and nothing started.
if ! kernel_has ublk; then
  expect_refusal "--frontend ublk without the ublk driver" \
    "--frontend ublk cannot work here: this kernel has no ublk driver: there is no /dev/ublk-control and 'modprobe ublk_drv' failed .*Nothing was started" \
    --frontend ublk size=64M servers="$(cluster_servers)" key="$key"
else
  log "this kernel has the ublk driver: '--frontend ublk' refusal not checked here"
fi
if ! kernel_has nbd; then
  expect_refusal "--frontend nbd without the NBD driver" \
    "--frontend nbd cannot work here: this kernel has no NBD driver: .*Nothing was started" \
    --frontend nbd size=64M servers="$(cluster_servers)" key="$key"
else
  log "this kernel has the NBD driver: '--frontend nbd' refusal not checked here"
fi
expect_refusal "an unknown frontend" "--frontend 'disk': use auto, ublk, nbd or fuse" \
  --frontend disk size=64M servers="$(cluster_servers)" key="$key"
# An 'on' stopped by SIGTERM (systemd's start timeout) undoes itself: status 130 and
# nothing left. Its FUSE daemon never says it is ready, so 'on' is waiting when stopped.
printf '#!/bin/sh\nexec sleep 600\n' >"$work/silent-fuse"
chmod +x "$work/silent-fuse"
swap_names+=(term)
RAMPART_FUSE=$work/silent-fuse "$RAMPART_SWAP" on --name term --config /dev/null --frontend fuse \
  size=64M servers="$(cluster_servers)" key="$key" >"$work/term.out" 2>&1 &
on_pid=$!
bg_pids+=("$on_pid")
for _ in $(seq 100); do
  grep -q '^pager_pid=' "$RAMPART_RUN_DIR/term/state" 2>/dev/null && break
  sleep 0.1
done
pids_seen=$(daemon_pids term)
[[ -n $pids_seen ]] || fail "the 'on' to be stopped recorded no process: $(cat "$work/term.out")"
kill -TERM "$on_pid"
rc=0
wait "$on_pid" || rc=$?
((rc == 130)) || { cat "$work/term.out"; fail "'on' stopped by SIGTERM exited $rc, not 130"; }
grep -q "stopped by signal 15" "$work/term.out" && grep -q "'on' failed; undoing what was done" "$work/term.out" ||
  { cat "$work/term.out"; fail "'on' stopped by SIGTERM did not say it undoes itself"; }
dev=
nothing_left term "'on' stopped by SIGTERM"
log "'on' stopped by SIGTERM: exit 130, pids $pids_seen gone, nothing left"
expect_refusal "a bad priority" "--priority .high. is not a number" size=64M servers="$(cluster_servers)" key="$key" --priority high
log "PASS"
