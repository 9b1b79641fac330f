#!/usr/bin/env bash
# rampart-swap's supervision of a device's processes, on this host, where the kernel may
# have neither ublk nor NBD: the daemons are real (rampartd, rampart-nbd-server, the
# notify listener) and the state is what 'on --frontend nbd' writes, less the kernel's
# device, which the keeper and 'off' do not touch.
#
# 1. A recorded pid that now belongs to another, unrelated process (a 'sleep'), as the
#    pager's, the standby's, the keeper's, rampart-nbd-attach's and a supervisor's: 'off'
#    signals none of them, says each was left alone, and finishes, also for a state that
#    records no identities; the keeper does not take them for the device's pager and
#    standby, says so, and ends.
# 2. Readiness without log lines: every daemon's log goes to /dev/null (RAMPART_NBD_SERVER
#    is a wrapper that sends both to /dev/null), and still the keeper starts a standby
#    and knows it stands by, learns that it took the device over when the pager is killed
#    with SIGKILL, and starts the next standby; the new pager serves the export.
# 3. A standby pid reused by a 'sleep' while the keeper runs: the keeper starts a new
#    standby and leaves the 'sleep' alone; 'off' then stops every real daemon and leaves
#    the 'sleep' running.
. "$(dirname "$0")/lib.sh"

[[ $(id -u) == 0 ]] || skip "needs root: rampart-swap off and the keeper run as root"
[[ -n ${RAMPART_NBD_SERVER:-} ]] || fail "RAMPART_NBD_SERVER is not set (run this through ctest)"
command -v nbdinfo >/dev/null || skip "nbdinfo is missing (package libnbd-bin)"
export RAMPARTCTL

# Unrelated processes, each a pid the state will name; all must outlive the test's calls.
sleepers=()
new_sleeper() { # sets sleeper
  sleep 600 &
  sleeper=$!
  # Until it has exec'd sleep it is a bash, which a state with no identities takes for an
  # older rampart-swap's supervisor: wait for the exec.
  for _ in $(seq 100); do
    [[ $(readlink "/proc/$sleeper/exe") == */sleep ]] && break
    sleep 0.01
  done
  sleepers+=("$sleeper")
  bg_pids+=("$sleeper")
}
sleepers_alive() { # when
  local p
  for p in "${sleepers[@]}"; do
    kill -0 "$p" 2>/dev/null || fail "$1: pid $p, an unrelated 'sleep', was killed"
  done
}
start_time() { awk '{ sub(/.*\) /, ""); print $20 }' "/proc/$1/stat"; }

# ---- 1. pids reused by unrelated processes ------------------------------------------
reused_state() { # name [legacy]: a device whose every recorded pid is now a 'sleep'
  local st=$RAMPART_RUN_DIR/$1 role legacy=${2:-}
  mkdir -p "$st"
  swap_names+=("$1")
  {
    echo frontend=nbd
    echo generation=1
    echo takeovers=0
    echo daemon=rampart-nbd-server
    for role in pager standby keeper attach notify supervisor; do
      new_sleeper
      echo "${role}_pid=$sleeper"
      # Half are recorded with the start time of the process that had the pid before
      # (an older one), half not at all: both are another process now. A legacy state
      # (from a rampart-swap that recorded no identities) has none: a pid there is the
      # device's only while it runs a program rampart-swap starts, which 'sleep' is not.
      [[ -n $legacy ]] || case $role in pager|keeper|notify) echo "proc_$sleeper=1" ;; esac
    done
  } >"$st/state"
}
reused_state reused-off
"$RAMPART_SWAP" off --name reused-off >"$work/off-reused.out" 2>&1 \
  || { cat "$work/off-reused.out"; fail "off of a device whose pids are reused failed"; }
sleepers_alive "off"
for p in "${sleepers[@]}"; do
  grep -q "(pid $p) has ended, and pid $p is now another process (.*sleep.*): left alone" "$work/off-reused.out" \
    || { cat "$work/off-reused.out"; fail "off did not say it left pid $p alone"; }
done
[[ ! -e $RAMPART_RUN_DIR/reused-off ]] || fail "off left $RAMPART_RUN_DIR/reused-off behind"
log "off: $(grep -c 'left alone' "$work/off-reused.out") reused pids left alone, state removed"
reused_state reused-legacy legacy
"$RAMPART_SWAP" off --name reused-legacy >"$work/off-legacy.out" 2>&1 \
  || { cat "$work/off-legacy.out"; fail "off of a legacy state whose pids are reused failed"; }
sleepers_alive "off of a state with no identities"
grep -q "is now another process (.*sleep.*): left alone" "$work/off-legacy.out" \
  || { cat "$work/off-legacy.out"; fail "off of a legacy state did not say it left the 'sleep's alone"; }
log "off of a state with no identities: $(grep -c 'left alone' "$work/off-legacy.out") 'sleep's left alone"

reused_state reused-keeper
rc=0
timeout 30 "$RAMPART_SWAP" keep-standby --config /dev/null --name reused-keeper \
  >"$work/keeper-reused.out" 2>&1 || rc=$?
((rc == 1)) || { cat "$work/keeper-reused.out"; fail "the keeper over reused pids exited $rc, not 1 (124: it took a 'sleep' for the pager and waited on it)"; }
sleepers_alive "the keeper"
grep -q "the pager (pid [0-9]*) has ended, and pid [0-9]* is now another process" "$work/keeper-reused.out" \
  || { cat "$work/keeper-reused.out"; fail "the keeper did not say the pager's pid is another process"; }
grep -q "^left_alone=" "$RAMPART_RUN_DIR/reused-keeper/state" \
  || fail "the state does not say which pids were left alone"
"$RAMPART_SWAP" off --name reused-keeper >/dev/null 2>&1 || fail "off after the keeper failed"
sleepers_alive "off after the keeper"
log "keeper: took no 'sleep' for the pager or standby, said so, and ended"

# ---- 2. a device served by real daemons whose logs are silent ----------------------------
"$RAMPARTCTL" keygen "$work/key" >/dev/null
cluster_start "$work" 2 64M "$work/key" supervise || fail "could not start the servers"
quiet=$work/quiet-nbd-server
printf '#!/bin/sh\nexec %q "$@" >/dev/null 2>&1\n' "$RAMPART_NBD_SERVER" >"$quiet"
chmod +x "$quiet"

name=served
st=$RAMPART_RUN_DIR/$name
mkdir -p "$st"
chmod 0700 "$st"
swap_names+=("$name")
{
  echo "size=64M"
  echo "servers=$(cluster_servers)"
  echo "key=$work/key"
  echo "redundancy=mirror"
  echo "state=$st/pager.state"
  echo "mlock=false"
} >"$st/pager.args"
{
  echo frontend=nbd
  echo generation=0
  echo takeovers=0
  echo threads=16
  echo daemon=rampart-nbd-server
  echo "pager_sock=$st/nbd-a.sock"
  echo "free_sock=$st/nbd-b.sock"
  echo "pager_state=$st/pager.state"
} >"$st/state"
# The listener and the pager as 'on' starts them (its spawn), recorded the same way.
setsid "$RAMPARTCTL" notify-listen "$st/notify" >"$st/notify.log" 2>&1 </dev/null &
notify=$!
bg_pids+=("$notify")
for _ in $(seq 100); do [[ -S $st/notify ]] && break; sleep 0.1; done
[[ -S $st/notify ]] || fail "rampartctl notify-listen made no socket: $(cat "$st/notify.log")"
mapfile -t args <"$st/pager.args"
NOTIFY_SOCKET=$st/notify setsid "$quiet" --unix "$st/nbd-a.sock" "${args[@]}" </dev/null &
pager=$!
bg_pids+=("$pager")
{
  echo "notify_pid=$notify"; echo "proc_$notify=$(start_time "$notify")"
  echo "pager_pid=$pager"; echo "proc_$pager=$(start_time "$pager")"
} >>"$st/state"
for _ in $(seq 200); do grep -qx "$pager READY=1" "$st/notify.log" && break; sleep 0.1; done
grep -qx "$pager READY=1" "$st/notify.log" || fail "rampart-nbd-server sent no READY=1: $(cat "$st/notify.log")"

RAMPART_NBD_SERVER=$quiet setsid "$RAMPART_SWAP" keep-standby --config /dev/null --name "$name" \
  >"$work/keeper.out" 2>&1 </dev/null &
keeper=$!
bg_pids+=("$keeper")
echo "keeper_pid=$keeper" >>"$st/state"
echo "proc_$keeper=$(start_time "$keeper")" >>"$st/state"

state_of() { sed -n "s/^$1=//p" "$st/state" | tail -n1; }
state_all() { sed -n "s/^$1=//p" "$st/state"; }
# wait_standby NOT-PID WHAT: waits (60 s) for a standby other than NOT-PID that said it
# stands by; sets standby.
wait_standby() {
  for _ in $(seq 600); do
    standby=$(state_of standby_pid)
    if [[ -n $standby && $standby != "$1" ]] && grep -qx "$standby RAMPART_STANDBY=1" "$st/notify.log"; then
      return 0
    fi
    kill -0 "$keeper" 2>/dev/null || fail "$2: the keeper ended: $(tail -n 5 "$work/keeper.out")"
    sleep 0.1
  done
  fail "$2: no standby stood by within 60 s: $(tail -n 5 "$work/keeper.out")"
}
wait_standby "" "first standby"
[[ ! -s $st/nbdkit-1.log ]] || grep -q "exited with status" "$st/nbdkit-1.log" \
  || fail "the standby's log is not silent: $(head -n 3 "$st/nbdkit-1.log")"
log "the keeper started standby pid $standby with its log at /dev/null; it stands by"
# The keeper is rampart-swap itself, and nothing it started is a shell.
[[ $(readlink "/proc/$keeper/exe") == "$(readlink -f "$RAMPART_SWAP")" ]] ||
  fail "the keeper (pid $keeper) runs $(readlink "/proc/$keeper/exe"), not $RAMPART_SWAP"
# shellcheck disable=SC2046
no_shell_among "the keeper's standby" "$keeper" "$standby" $(state_all supervisor_pid)
((looked_at >= 3)) || fail "the keeper, its standby and the standby's supervisor do not all run ($looked_at processes)"

t0=$(date +%s%N)
kill -KILL "$pager"
wait "$pager" 2>/dev/null || true
took_over() { [[ $(state_of pager_pid) == "$standby" && $(state_of takeovers) == 1 ]]; }
for _ in $(seq 600); do took_over && break; sleep 0.1; done
took_over \
  || fail "the keeper did not record the takeover by pid $standby: $(tail -n 5 "$work/keeper.out")"
took=$standby
wait_standby "$took" "after the takeover"
size=$(timeout 10 nbdinfo --size "nbd+unix:///?socket=$(state_of pager_sock)") \
  || fail "the new pager (pid $took) does not serve $(state_of pager_sock)"
((size == 64 << 20)) || fail "the new pager serves $size bytes, not 64 MiB"
log "pager killed; pid $took took over (keeper: $(grep -m1 'took the device over' "$work/keeper.out" | sed 's/^rampart-swap: //')); next standby pid $standby, $((($(date +%s%N) - t0) / 1000000)) ms"

# ---- 3. the standby's pid reused while the keeper runs -----------------------------------
# The standby dies, and its pid is another process's: here, a 'sleep' recorded in its place.
real_standby=$standby
new_sleeper
{
  echo "standby_pid=$sleeper"
  echo "proc_$sleeper=1"
} >>"$st/state"
kill -KILL "$real_standby"
wait_standby "$sleeper" "after the standby's pid was reused"
sleepers_alive "the keeper's restart"
grep -q "the standby (pid $sleeper) has ended, and pid $sleeper is now another process" "$work/keeper.out" \
  || fail "the keeper did not say the standby's pid is another process: $(tail -n 5 "$work/keeper.out")"
log "standby's pid reused: the keeper started pid $standby and left pid $sleeper alone"

"$RAMPART_SWAP" status --name "$name" >"$work/status.out" 2>&1 || true
grep -q "left alone: pid $sleeper" "$work/status.out" || { cat "$work/status.out"; fail "status does not say pid $sleeper was left alone"; }

daemons=("$took" "$standby" "$keeper" "$notify")
echo "standby_pid=$sleeper" >>"$st/state" # 'off' finds the reused pid as the standby
"$RAMPART_SWAP" off --name "$name" >"$work/off.out" 2>&1 || { cat "$work/off.out"; fail "off failed"; }
sleepers_alive "off of the served device"
# The standby the keeper started last is not the one the state names now: it is stopped
# by its pager's clean end (the state goes with it).
for p in "${daemons[@]}"; do
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  ! kill -0 "$p" 2>/dev/null || fail "off left pid $p ($(cat "/proc/$p/comm" 2>/dev/null)) running"
done
[[ ! -e $st ]] || fail "off left $st behind"
log "off: every daemon stopped, the 'sleep' in the standby's place left alone"
log "PASS"
