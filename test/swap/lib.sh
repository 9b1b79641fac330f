# Sourced by the swap tests (test/swap/test_*.sh): the real kernel swap path on this host,
# with a local cluster, a device attached by rampart-swap, and cleanup by PID on any exit.
# ctest passes RAMPARTD, RAMPARTCTL, RAMPART_PLUGIN, RAMPART_WORKLOAD, RAMPART_SWAP,
# RAMPART_FUSE and,
# in sanitizer builds, RAMPART_ASAN_RUNTIME.
set -euo pipefail

SKIP=77
# A guest test's exit status that runs the whole test once more (guest_fail).
GUEST_RERUN=75
script_path=$(readlink -f "$0")
test_name=${RAMPART_TEST_NAME:-$(basename "$0" .sh)}
src_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../../scripts/lib/local-cluster.sh
. "$src_root/scripts/lib/local-cluster.sh"
# shellcheck source=../../scripts/lib/memcg.sh
. "$src_root/scripts/lib/memcg.sh"
# shellcheck source=guest_console.sh
. "$src_root/test/swap/guest_console.sh"

log() { printf '[%s %3ds] %s\n' "$test_name" "$SECONDS" "$*"; }
fail() { echo "[$test_name] FAIL: $*" >&2; exit 1; }
skip() { echo "[$test_name] SKIP: $*"; exit $SKIP; }

for v in RAMPARTD RAMPARTCTL RAMPART_PLUGIN RAMPART_WORKLOAD RAMPART_SWAP; do
  [[ -n ${!v:-} ]] || fail "$v is not set (run this through ctest)"
done
export RAMPARTD

# What this host must have; a missing one skips with the reason, never passes.
require_swap_host() {
  [[ $(id -u) == 0 ]] || skip "needs root for swapon, loop devices and cgroups"
  [[ -e /dev/fuse ]] || modprobe fuse 2>/dev/null || true
  [[ -e /dev/fuse ]] || skip "no /dev/fuse, so rampart-fuse cannot expose the device"
  losetup -f >/dev/null 2>&1 || skip "no free loop device (losetup -f failed)"
  memcg_path x >/dev/null || skip "no memory cgroup controller under /sys/fs/cgroup"
}

work=$(mktemp -d "${TMPDIR:-/tmp}/rampart-$test_name.XXXXXX")
export RAMPART_RUN_DIR=$work/run
swap_names=()
cgroups=()
bg_pids=()

# Sanitizer builds: nbdkit is not instrumented, so it gets the ASan runtime preloaded,
# and must not mlockall (that would fault in ASan's terabytes of shadow mappings).
plugin_extra=()
if [[ -n ${RAMPART_ASAN_RUNTIME:-} ]]; then
  export RAMPART_NBDKIT_PRELOAD=$RAMPART_ASAN_RUNTIME
  export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
  plugin_extra+=(mlock=false)
fi

swap_test_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local pid name cg
  for pid in "${bg_pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  for name in "${swap_names[@]}"; do
    [[ -e $RAMPART_RUN_DIR/$name/state ]] || continue
    # 'off' removes the instance's directory, logs included: keep them for the report.
    for f in "$RAMPART_RUN_DIR/$name"/*.log; do [[ -e $f ]] && cp "$f" "$work/$name-$(basename "$f")"; done
    "$RAMPART_SWAP" off --name "$name" --force || rc=1
  done
  for cg in "${cgroups[@]}"; do memcg_destroy "$cg" || rc=1; done
  cluster_stop
  # A guest test's namespace (test_guest_starved.sh), once its servers are gone.
  [[ -z ${netns_made:-} ]] || ip netns delete "$netns_made" || rc=1
  if ((${#CLUSTER_BAD[@]})); then
    printf '[%s] FAIL: %s\n' "$test_name" "${CLUSTER_BAD[@]}" >&2
    rc=1
  fi
  if ((rc != 0 && rc != SKIP && rc != GUEST_RERUN)); then
    for f in "$work"/rampartd-*.log "$work"/*-nbdkit*.log "$work"/*-ublk-*.log "$work"/*-nbd-attach.log "$work"/*-keeper.log "$work"/*-nbdfuse.log "$work"/*-fuse.log "$work"/*.out; do
      [[ -s $f ]] || continue
      echo "---- $f (last lines) ----" >&2
      tail -n 20 "$f" >&2
    done
  fi
  rm -rf --one-file-system "$work"
  # Still 75 only when the cleanup above failed nothing; guest_fail alone sets the flag.
  if ((rc == GUEST_RERUN && ${guest_rerun:-0})); then
    RAMPART_GUEST_RERUN=1 exec bash "$script_path"
  fi
  exit "$rc"
}
trap swap_test_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# swap_on NAME ARGS...: rampart-swap on, remembered for cleanup.
swap_on() {
  local name=$1
  shift
  swap_names+=("$name")
  "$RAMPART_SWAP" on --name "$name" --config /dev/null "$@" "${plugin_extra[@]}" \
    || fail "rampart-swap on --name $name failed"
}

# no_shell_among WHEN PID...: fails when any of the PIDs, or any process below them, runs a
# shell: the supervisor is one C program, and after 'on' nothing of it is bash or sh.
# Returns the number of processes looked at in `looked_at`.
no_shell_among() {
  local when=$1 p exe kids
  shift
  looked_at=0
  local -a todo=("$@")
  while ((${#todo[@]})); do
    p=${todo[0]}
    todo=("${todo[@]:1}")
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    looked_at=$((looked_at + 1))
    case "${exe##*/}" in
      bash | sh | dash | busybox | zsh) fail "$when: pid $p runs a shell ($exe): $(tr '\0' ' ' <"/proc/$p/cmdline")" ;;
    esac
    kids=$(cat /proc/"$p"/task/*/children 2>/dev/null || true)
    # shellcheck disable=SC2206
    todo+=($kids)
  done
}

swap_device() { sed -n 's/^device=//p' "$RAMPART_RUN_DIR/$1/state"; }

# swap_on_cluster NAME SERVER-MEMORY PLUGIN-ARGS...: SWAP_SERVERS (5 unless set) rampartd
# on loopback under a fresh key, and a 512 MiB parity-log 4+1 swap device NAME over them
# (PLUGIN-ARGS come last, so they can change that); sets dev.
swap_on_cluster() {
  local name=$1 memory=$2
  shift 2
  "$RAMPARTCTL" keygen "$work/key" >/dev/null
  cluster_start "$work" "${SWAP_SERVERS:-5}" "$memory" "$work/key" swaptest || fail "could not start the servers"
  swap_on "$name" size=512M servers="$(cluster_servers)" key="$work/key" \
    redundancy=parity-log group=4 spill="$work/spill" stats-file="$work/stats" "$@"
  dev=$(swap_device "$name")
}
swap_used_kib() { awk -v d="$1" '$1 == d { print $4 }' /proc/swaps; }
vmstat_swaps() { awk '/^pswpin /{i=$2} /^pswpout /{o=$2} END {print i, o}' /proc/vmstat; }

# start_workload CGROUP LIMIT NAME SIZE OUT: runs rampart-workload in a new memory cgroup
# in the background; sets workload_pid and workload_cg.
start_workload() {
  local cg=$1 limit=$2 wl=$3 size=$4 out=$5
  memcg_create "$cg" "$limit" || fail "cannot create memory cgroup $cg"
  cgroups+=("$cg")
  workload_cg=$cg
  dmesg_mark=$(memcg_kernel_log_mark)
  memcg_spawn "$cg" "$RAMPART_WORKLOAD" "$wl" --size "$size" >"$out" 2>&1
  workload_pid=$MEMCG_PID
  bg_pids+=("$workload_pid")
}

# wait_swapped_out DEVICE KIB WHAT: waits (60 s at most) until the running workload has
# KIB in swap on DEVICE, relieving its cgroup's OOMs meanwhile; sets `used` (KiB). WHAT
# names the fault about to come, for the message when the workload ends first.
wait_swapped_out() {
  local dev=$1 want=$2 what=$3
  for _ in $(seq 600); do
    kill -0 "$workload_pid" 2>/dev/null || fail "the workload ended before $what"
    memcg_relieve_oom "$workload_cg"
    used=$(swap_used_kib "$dev")
    ((${used:-0} >= want)) && return 0
    sleep 0.1
  done
  fail "swap use never reached $((want / 1024)) MiB (${used:-0} KiB)"
}

# workload_until_verified NAME LIMIT WORKLOAD SIZE [FAULT]: runs WORKLOAD (SIZE) in a
# memory cgroup of LIMIT, up to three times, until it verifies: the kernel's OOM killer
# may end a run in its cgroup with the device blameless (finish_workload returns 2), and
# then it runs again. FAULT, a function, is called once the run has 64 MiB in swap, with
# the attempt number (1..3) as its argument. The result is in $work/workload.out.
workload_until_verified() {
  local name=$1 limit=$2 wl=$3 size=$4 fault=${5:-} attempt rc
  for attempt in 1 2 3; do
    start_workload "rampart-test-$name-$$-$attempt" "$limit" "$wl" "$size" "$work/workload.out"
    if [[ -n $fault ]]; then
      wait_swapped_out "$dev" 65536 "$fault"
      "$fault" "$attempt"
    fi
    rc=0
    finish_workload "$work/workload.out" "$dev" || rc=$?
    ((rc == 0)) && return 0
    ((attempt < 3)) || fail "the kernel OOM-killed the workload three times in a row"
    log "running the workload once more"
  done
}

# finish_workload OUT DEVICE: waits for the workload, handling its cgroup's OOMs
# (memcg_wait in scripts/lib/memcg.sh says why they happen and why they are no fault of
# the device). Returns 0 when it verified its result, and 2 when the kernel's OOM killer
# ended it anyway while the swap device reported no I/O error. Anything else (a wrong
# result, an I/O error on the device, another exit) fails the test.
finish_workload() {
  local out=$1 dev=$2 rc=0 verdict=0 why
  memcg_wait "$workload_cg" "$workload_pid" || rc=$?
  if ((rc != 0)); then
    why=$(memcg_oom_verdict "$workload_cg" "$dev" "$dmesg_mark") || verdict=$?
    ((verdict != 1)) || fail "swap I/O to $dev failed; the workload exited with status $rc: $why"
    ((verdict != 3)) || fail "the workload exited with status $rc and $why"
    if ((rc == 137 && verdict == 0)); then
      log "the kernel's memory-cgroup OOM killer ended the workload; no swap I/O failed:"
      sed 's/^/    /' <<<"$why"
      return 2
    fi
    fail "the workload exited with status $rc: $(tail -n 3 "$out")"
  fi
  grep -q 'verified=yes' "$out" || fail "the workload did not verify: $(tail -n 3 "$out")"
  log "$(cat "$out")"
}

# ---- guests under qemu (test_guest_*.sh) ----------------------------------------------

# guest_initramfs_tools: what a busybox initramfs guest needs on this host, or a skip
# that names the package. Sets qemu, busybox and nbd_client.
guest_initramfs_tools() {
  [[ $(id -u) == 0 ]] || skip "needs root to fetch the guest kernel package"
  qemu=$(command -v qemu-system-x86_64 || true)
  [[ -n $qemu ]] || skip "qemu-system-x86_64 is missing (package qemu-system-x86)"
  busybox=$(command -v busybox || true)
  [[ -n $busybox ]] && ! ldd "$busybox" >/dev/null 2>&1 \
    || skip "no static busybox for the guest's initramfs (package busybox-static)"
  nbd_client=$(command -v nbd-client || true)
  [[ -n $nbd_client ]] || skip "nbd-client is missing (package nbd-client)"
  command -v cpio >/dev/null || skip "cpio is missing (package cpio)"
}

# guest_fail CONSOLE WHAT: a guest test's failure. Prints the guest kernel's report when
# it oopsed or panicked; when that report is of a fault outside rampart's reach
# (guest_kernel_fault_outside_rampart) and this is the test's first run, keeps the console
# as TEST.first-run.console.log in RAMPART_GUEST_KEEP (default ${TMPDIR:-/tmp}) and runs
# the whole test once more, from a cleaned-up host (exit status GUEST_RERUN,
# swap_test_cleanup). Otherwise fails with WHAT.
guest_fail() {
  local oops
  oops=$(guest_last_boot <"$1" | guest_oops /dev/stdin)
  [[ -z $oops ]] || printf '%s\n%s\n' "---- the guest kernel's report ----" "$oops" >&2
  if [[ -z ${RAMPART_GUEST_RERUN:-} ]] && guest_kernel_fault_outside_rampart "$1"; then
    # Only when a second run as long as this one still fits in ctest's TIMEOUT
    # (RAMPART_GUEST_TIMEOUT, guest/CMakeLists.txt): a run ctest kills skips its cleanup.
    if ((SECONDS * 2 + 120 > ${RAMPART_GUEST_TIMEOUT:-0})); then
      log "the guest's kernel died of a fault outside rampart's drivers (report above), but a second run would not fit in the test's ${RAMPART_GUEST_TIMEOUT:-unknown} s"
      fail "$2"
    fi
    local kept=${RAMPART_GUEST_KEEP:-${TMPDIR:-/tmp}}/$test_name.first-run.console.log
    cp "$1" "$kept" || true
    log "the guest's kernel died of a fault outside rampart's drivers ($(grep -a -m1 -E 'Oops' <<<"$oops" | tr -d '\r'); report above, console kept as $kept): running the whole test once more"
    guest_rerun=1
    exit "$GUEST_RERUN"
  fi
  fail "$2"
}

# guest_boot_died CONSOLE PID: waits (up to 300 s) until the guest's init says its first
# "rampart-guest:" line or qemu ends; true when qemu ended with its kernel dead before
# that (guest_kernel_died_before), the caller then boots once more.
guest_boot_died() {
  local t=$SECONDS
  while kill -0 "$2" 2>/dev/null && ((SECONDS - t < 300)); do
    grep -aq 'rampart-guest:' "$1" 2>/dev/null && return 1
    sleep 0.5
  done
  kill -0 "$2" 2>/dev/null && return 1
  wait "$2" 2>/dev/null || true
  guest_kernel_died_before 'rampart-guest:' <"$1"
}

# guest_boot BOOT CONSOLE: runs the function BOOT, which starts qemu in the background
# (setting qemu_pid, emptying CONSOLE), and runs it once more when the guest's kernel
# died before its init spoke (guest_boot_died).
guest_boot() {
  "$1"
  if guest_boot_died "$2" "$qemu_pid"; then
    log "the guest's kernel died before its init ran ($(grep -a -m1 -E 'Oops|Kernel panic' "$2" | tr -d '\r')); booting it once more"
    "$1"
  fi
}

# guest_kernel [--ublk]: sets kdir to the Debian kernel the guests boot, fetched (or
# completed, when a module was added to scripts/fetch-guest-kernel's list since) if need
# be; with --ublk, the newer kernel that has the ublk driver.
guest_kernel() {
  if [[ ${1:-} == --ublk ]]; then
    kdir=${RAMPART_GUEST_UBLK_KERNEL_DIR:-/var/cache/rampart/guest-kernel-ublk}
  else
    kdir=${RAMPART_GUEST_KERNEL_DIR:-/var/cache/rampart/guest-kernel}
  fi
  "$src_root/scripts/fetch-guest-kernel" ${1:-} "$kdir" >"$work/fetch.out" 2>&1 \
    || skip "no guest kernel with its modules in $kdir and fetching one failed: $(tail -n 2 "$work/fetch.out")"
  log "guest kernel: $(cat "$kdir/version" 2>/dev/null)"
}
