#!/usr/bin/env bash
# The pager inside the shortage it relieves (docs/faults.md). With the daemon in the starved
# machine itself, swap-out once deadlocked: the engine's TCP send to a rampartd, then
# the daemon's reply to a read, needed fresh kernel pages below the min watermark, which a
# userspace process cannot have (every run hung within the first 2-20 MiB swapped, while
# the swap-disk baselines passed). Zero-copy sends (client_conn.c) and SCHED_RR
# (process_hygiene.c) are what this test holds in place; docs/faults.md has the story.
#
# The real single-host topology (docs/faults.md): the swap daemon runs inside the shortage it
# relieves. A Debian kernel booted under qemu (as test_guest_nbd_client.sh boots it) runs
# the swap daemon itself, attaches it with nbd-client -swap over a unix socket inside the
# guest, and the guest as a whole is starved: no cgroup, GUEST_MB of RAM, verifying
# workloads of twice that. The five rampartd run on this host, in a network namespace the
# test makes, and the guest's virtio NIC is a tap device in that namespace: guest and
# servers speak TCP to each other directly, as hosts on a LAN do, and nothing leaves the
# namespace. (RAMPART_GUEST_NET=user puts qemu's user network and a socat forward per
# connection between them instead, as this test first did: every frame then crossed
# qemu's own TCP stack and a socat process: the same pages run took 521 s instead of
# 326, and the guest sat in iowait 37% of the time instead of 24%.) Where no namespace or
# tap device can be made, the test says so and uses the user network.
#
# One boot runs, in order (guest/starved_init.sh is the guest's /init); by default:
#   kill-nbd  forks on rampart-nbd-server, one rampartd SIGKILLed once 64 MiB are swapped
#             out and, while its pages are rebuilt, the pager itself SIGKILLed at 96 MiB:
#             the standby takes its state over and rampart-nbd-attach moves /dev/nbd0 to
#             it (docs/recovery.md)
#   outage    pages on nbdkit rampart through Debian's own nbd-client -swap, every
#             rampartd SIGSTOPped for 3 s once 64 MiB are swapped out: every request in
#             flight times out and waits inside the shortage
#   kill-ublk forks on rampart-ublk, the same two kills as kill-nbd
#   baseline  forks on a swap disk in the same guest (/dev/vda, a file on this host):
#             each rampart run's time is reported against it as a ratio
# RAMPART_STARVED_RUNS=three runs each workload once and each condition once: pages with
# no fault, forks with the kill, quicksort with the outage, and the three on the disk;
# RAMPART_STARVED_RUNS=all runs every workload under every condition (9 runs on rampart,
# about 80 minutes: quicksort takes 15-20 of them each, which is why the suite leaves it
# out; docs/faults.md has the last such run). Under emulation a run of pages or forks on
# rampart takes 5-10 minutes: the emulated daemon's CPU per page fault is most of it.
# Each fault is asked for once 64 MiB are swapped out; the guest's shell that watches
# for it is starved too, and notices late (the faults landed at 77-375 MiB), but every
# one still has minutes of the run after it.
# A watchdog in the guest fails the run when pswpin+pswpout stand still for 120 s while a
# workload runs, after printing the daemon's thread stacks, the NBD queue and the daemon's
# report (swap/guest/swap_watchdog.c, a program locked in memory: the shell loop it
# replaced was once swapped out and stuck behind the hang it watched for). The host also
# fails a guest that says nothing for three minutes, and prints the daemon's last
# warnings and the guest's task stacks through qemu's monitor.
#
# The outage stops the servers (SIGSTOP) rather than resetting their connections with
# nftables as test_host_swap_blip.sh does: a stopped server is the harder case for the
# daemon (requests in flight get no answer at all and must time out while it holds
# them), and it needs no firewall change on a shared machine.
#
# Environment: RAMPART_GUEST_KERNEL_DIR (default /var/cache/rampart/guest-kernel; with
# ublk, RAMPART_GUEST_UBLK_KERNEL_DIR, default /var/cache/rampart/guest-kernel-ublk),
# RAMPART_GUEST_MEM_MB (192), RAMPART_STARVED_PROGRAM_MB (each workload's size: twice the
# guest's RAM), RAMPART_GUEST_NET (tap; user: qemu's user network with a
# socat forward per connection), RAMPART_STARVED_RUNS (the runs, as guest/starved_init.sh
# reads them: name:nbd|nbd-server|ublk|disk:workload[:kill|outage|outages|pager|kill+pager[:queues]] ...;
# outages: every live server stopped for 3 s every 20 s of the run, to dig for a rare hang;
# queues: rampart-ublk's, each of depth 64 / queues, at least 16), RAMPART_GUEST_CONSOLE (where the
# guest's console log goes, to keep it; default: the test's temporary directory).
# For digging into a failure: RAMPART_STARVED_TIMEOUT (for the whole guest: 25 min a run on rampart, 3 on the disk),
# RAMPART_STARVED_STALL_SECONDS (120), RAMPART_STARVED_SYSCTL ("vm/NAME=VALUE ..." set in
# the guest before the daemon starts), RAMPART_STARVED_EXTRA_PROGS
# (host programs copied into the guest with their libraries, e.g. strace),
# RAMPART_STARVED_CONF_EXTRA (a line for the guest's /etc/starved.conf, e.g. an export).
. "$(dirname "$0")/lib.sh"

guest_initramfs_tools
[[ -x ${RAMPART_NBD_SERVER:-} ]] \
  || fail "RAMPART_NBD_SERVER must name the built rampart-nbd-server (ctest sets it)"
nbdkit=$(command -v nbdkit || true)
[[ -n $nbdkit ]] || skip "nbdkit is missing (package nbdkit)"
# RAMPART_STARVED_FRONTEND: nbd (rampart-nbd-server or nbdkit, + nbd-client) or ublk alone; by
# default both, in one boot of the kernel that has ublk_drv (and nbd).
frontend=${RAMPART_STARVED_FRONTEND:-both}
case $frontend in
  nbd|ublk|both) ;;
  *) fail "RAMPART_STARVED_FRONTEND must be nbd, ublk or both, not '$frontend'" ;;
esac
# An nbd run that kills the pager attaches with rampart-nbd-attach (nbd/).
[[ -x ${RAMPART_NBD_ATTACH:-} ]] \
  || fail "RAMPART_NBD_ATTACH must name the built rampart-nbd-attach (ctest sets it)"
command -v socat >/dev/null || skip "socat is missing (package socat): qemu's forwards run it"
# A sanitizer build's plugin needs the ASan runtime preloaded and must not lock memory
# (plugin_extra in lib.sh): a daemon that is neither small nor locked, in a 192 MiB
# guest, is not the topology under test. The release stage runs this test.
[[ -z ${RAMPART_ASAN_RUNTIME:-} ]] \
  || skip "a sanitizer build's daemon cannot run locked in a 192 MiB guest (the release build runs this test)"

if [[ $frontend == nbd ]]; then guest_kernel; else guest_kernel --ublk; fi

guest_mb=${RAMPART_GUEST_MEM_MB:-192}
program_mb=${RAMPART_STARVED_PROGRAM_MB:-$((guest_mb * 2))}
((program_mb > guest_mb)) \
  || fail "RAMPART_STARVED_PROGRAM_MB ($program_mb) must exceed the guest's RAM ($guest_mb MiB), or nothing swaps"
# With NBD two runs: a server killed and then rampart-nbd-server killed in one run
# (rampart-nbd-attach moves /dev/nbd0 to the standby), then nbdkit rampart under Debian's
# own nbd-client -swap with every server stopped for 3 s. With ublk the same two kills: the device waits in the kernel and the
# standby takes it over (docs/recovery.md). One baseline on the swap disk, forks, for the
# ratio; the pages workload's ratio to the disk is in bench/results (bench/guest).
nbd_runs="kill-nbd:nbd:forks:kill+pager outage:nbd:pages:outage"
ublk_runs="kill-ublk:ublk:forks:kill+pager"
case $frontend in
  nbd) default_runs="$nbd_runs disk-forks:disk:forks" ;;
  ublk) default_runs="$ublk_runs disk-forks:disk:forks" ;;
  both) default_runs="$nbd_runs $ublk_runs disk-forks:disk:forks" ;;
esac
runs=${RAMPART_STARVED_RUNS:-$default_runs}
# three and all: on one frontend, nbd unless ublk alone was asked for.
one_frontend=${frontend/both/nbd}
if [[ $runs == three ]]; then
  runs="pages:$one_frontend:pages kill:$one_frontend:forks:kill outage:$one_frontend:quicksort:outage disk-pages:disk:pages disk-forks:disk:forks disk-quicksort:disk:quicksort"
fi
if [[ $runs == all ]]; then
  runs=
  for wl in pages forks quicksort; do
    runs+="$wl:$one_frontend:$wl kill-$wl:$one_frontend:$wl:kill outage-$wl:$one_frontend:$wl:outage disk-$wl:disk:$wl "
  done
fi
# rampart-ublk goes into the guest when a run uses it.
if [[ " $runs" == *:ublk:* ]]; then
  [[ -x ${RAMPART_UBLK:-} ]] || fail "RAMPART_UBLK must name the built rampart-ublk (ctest sets it)"
  ublk_prog=$RAMPART_UBLK
fi
# The device holds one program at a time (each run swaps off before the next).
device_mb=$((program_mb * 3 / 2))

# ---- the cluster, on this host -------------------------------------------------------
key=$work/key
"$RAMPARTCTL" keygen "$key" >/dev/null
# The guest's NIC is a tap device in a network namespace of this test's own, where the
# servers listen: guest and servers talk TCP directly, and nothing but the namespace sees
# the traffic. A host that cannot make one gets qemu's user network, and says so.
guest_net=${RAMPART_GUEST_NET:-tap}
if [[ $guest_net == tap ]]; then
  netns=rampart-starved-$$
  if ! [[ -c /dev/net/tun ]] || ! command -v ip >/dev/null; then
    log "no /dev/net/tun or no ip(8): the guest gets qemu's user network instead of a tap"
    guest_net=user
  elif ! ip netns add "$netns"; then
    log "cannot make a network namespace (ip netns add failed): qemu's user network instead"
    guest_net=user
  else
    netns_made=$netns
    ip -n "$netns" link set lo up
    if ip -n "$netns" tuntap add dev tap0 mode tap; then
      ip -n "$netns" addr add 10.0.2.2/24 dev tap0
      ip -n "$netns" link set tap0 up
      CLUSTER_NETNS=$netns CLUSTER_HOST=10.0.2.2
    else
      log "cannot make a tap device in $netns: qemu's user network instead"
      guest_net=user
    fi
  fi
fi
# Each server holds a quarter of the device plus parity and overflow, and after the kill
# a third of it: 256 MiB each is room for both.
cluster_start "$work" 5 256M "$key" starved || fail "could not start the servers"

guest_addrs=()
if [[ $guest_net == tap ]]; then
  guest_addrs=("${CLUSTER_ADDRS[@]}")
  netdev=(-netdev tap,id=n0,ifname=tap0,script=no,downscript=no)
  in_netns=(ip netns exec "$netns")
else
  # RAMPART_GUEST_NET=user: qemu's user network. The guest sees server I at
  # 10.0.2.10I:7070. Each forward runs socat per connection (the daemon reconnects after
  # a fault; a chardev forward is one connection for qemu's lifetime), which passes the
  # guest's close on, so a dropped session ends at the server. ",," is a comma inside
  # qemu's option.
  fwds=
  for i in "${!CLUSTER_ADDRS[@]}"; do
    guest_addrs+=("10.0.2.10$((i + 1)):7070")
    fwds+=",guestfwd=tcp:10.0.2.10$((i + 1)):7070-cmd:socat STDIO TCP:${CLUSTER_ADDRS[$i]},,nodelay"
  done
  netdev=(-netdev "user,id=n0,restrict=on$fwds")
  in_netns=()
fi
victim=2

# ---- the initramfs: busybox, the daemons, nbd-client, the workload, their libraries -----
root=$work/initramfs
mkdir -p "$root"/{bin,dev,proc,sys,tmp,run,etc/rampart,lib/modules,lib/nbdkit}
cp "$busybox" "$root/bin/busybox"
# The ublk kernel's directory also holds what the systemd guest boots from (e1000, ext4
# and what ext4 needs): this guest's root is in its own starved RAM, so it gets only the
# rest there.
skip_modules=()
[[ $frontend == nbd ]] || skip_modules=(-e e1000.ko -e crc16.ko -e mbcache.ko -e jbd2.ko
                                        -e crc32c_generic.ko -e ext4.ko)
for m in $(grep -v -x -e '^$' "${skip_modules[@]}" "$kdir/modules/order"); do
  cp "$kdir/modules/$m" "$root/lib/modules/"
  echo "$m" >>"$root/lib/modules/order"
done
copy_libs() { # file: its shared libraries, where ldd says they live
  local lib
  for lib in $(ldd "$1" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}
[[ -x ${RAMPART_SWAP_WATCHDOG:-} ]] \
  || fail "RAMPART_SWAP_WATCHDOG must name the built rampart-swap-watchdog (ctest sets it)"
for prog in "$nbd_client" "$nbdkit" "$RAMPART_NBD_SERVER" "$RAMPART_WORKLOAD" "$RAMPART_SWAP_WATCHDOG" \
            "$RAMPART_NBD_ATTACH" ${ublk_prog:-} ${RAMPART_STARVED_EXTRA_PROGS:-}; do
  cp "$prog" "$root/bin/"
  copy_libs "$prog"
done
# nbdkit loads the plugin by path; its libraries come along the same way.
cp "$RAMPART_PLUGIN" "$root/lib/nbdkit/rampart.so"
copy_libs "$RAMPART_PLUGIN"
install -m 0600 "$key" "$root/etc/rampart/key"
servers=$(IFS=,; echo "${guest_addrs[*]}")
cat >"$root/etc/starved.conf" <<EOF
SERVERS=$servers
KILL_ADDR=${guest_addrs[$victim]}
PROGRAM_MB=$program_mb
DEVICE_SIZE=${device_mb}M
STALL_SECONDS=${RAMPART_STARVED_STALL_SECONDS:-120}
RUNS="$runs"
FRONTEND=$one_frontend
GUEST_SYSCTL="${RAMPART_STARVED_SYSCTL:-}"
${RAMPART_STARVED_CONF_EXTRA:-}
EOF
install -m 0755 "$src_root/test/swap/guest/starved_init.sh" "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"
log "initramfs: $(du -h "$work/initrd.gz" | cut -f1)"

# The baseline swap disk and the daemon's spill disk: sparse files on this host.
truncate -s "$((program_mb * 3 / 2))M" "$work/swap.img"
truncate -s "${device_mb}M" "$work/spill.img"

# ---- the guest ---------------------------------------------------------------------------
# /dev/kvm here is a hypervisor a stock kernel cannot run on: software emulation (as
# test_guest_nbd_client.sh says). RAMPART_STARVED_CPUS vCPUs (default 2: qemu runs each
# on a host thread of its own, and the daemon, which took 63-76% of one vCPU in the
# runs, then shares the guest with the workload as on a real host). -cpu max: the daemon seals every page with
# AES-256-GCM, and qemu's default CPU model has no AES-NI, so OpenSSL would run its
# table-driven AES in emulation.
console=${RAMPART_GUEST_CONSOLE:-$work/console.log}
log "booting the guest: ${guest_mb} MiB of RAM, ${program_mb} MiB programs, runs: $runs"
boot_guest() {
  : >"$console"
  "${in_netns[@]}" "$qemu" -accel tcg -cpu max -m "$guest_mb" -smp "${RAMPART_STARVED_CPUS:-2}" -nographic -no-reboot \
    -monitor unix:"$work/monitor.sock",server=on,wait=off \
    -kernel "$kdir/vmlinuz" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 panic=-1 quiet" \
    -drive file="$work/swap.img",format=raw,if=virtio,cache=writeback \
    -drive file="$work/spill.img",format=raw,if=virtio,cache=writeback \
    "${netdev[@]}" -device virtio-net-pci,netdev=n0 \
    -serial file:"$console" </dev/null >"$work/qemu.out" 2>&1 &
  qemu_pid=$!
  bg_pids+=("$qemu_pid")
}
guest_boot boot_guest "$console"

# outage SECONDS: every live server stopped, then continued.
outage() {
  local i
  for i in "${!CLUSTER_PIDS[@]}"; do
    [[ -n ${CLUSTER_KILLED[$i]:-} ]] || kill -STOP "${CLUSTER_PIDS[$i]}"
  done
  sleep "$1"
  for i in "${!CLUSTER_PIDS[@]}"; do
    [[ -n ${CLUSTER_KILLED[$i]:-} ]] || kill -CONT "${CLUSTER_PIDS[$i]}"
  done
}

# hung_guest: what every guest task is blocked in, onto the console (SysRq 8: every
# message to the console; w: blocked tasks; m: memory; t: every task's stack), before the
# test fails on the host's timeout.
hung_guest() {
  local k
  for k in 8 w m t; do
    echo "sendkey alt-sysrq-$k" | socat - UNIX-CONNECT:"$work/monitor.sock" >/dev/null 2>&1 || true
    sleep 5
  done
  # What the daemon said (its warnings: timeouts, reconnects, waiting requests), then the
  # blocked tasks and memory whole, then of every task's stack only the daemon's threads,
  # the NBD driver's and the workload's: the kernel's own idle threads fill thousands of
  # lines and hid the daemon's workers the first time this fired.
  echo "---- the daemon's last words" >&2
  LC_ALL=C grep -a -E ' rampart: (error|warning|info):|nbdkit:' "$console" | tail -n 40 >&2
  LC_ALL=C sed -n '/sysrq: Changing Loglevel/,/sysrq: Show State/p' "$console" >&2
  LC_ALL=C sed -n '/sysrq: Show State/,$p' "$console" | awk '
    / task:/ { keep = ($0 ~ / task:(nbdkit|rampart|nbd|init|kswapd)/) }
    keep && !/^\[ *[0-9.]*\]  \? / && !/ R[0-9A-Z]+: / { print }' | head -n 1500 >&2
}

# The guest's own complete lines (guest_said, test/swap/guest_console.sh).
said() { guest_said "$console"; }

t0=$SECONDS
# 25 min for each run on rampart, 3 for each on the disk: bounds with room above the
# emulated runs' usual times (test/README.md).
nbd_runs=$(tr ' ' '\n' <<<"$runs" | grep -c -e ':nbd:' -e ':nbd-server:' -e ':ublk:' || true)
disk_runs=$(tr ' ' '\n' <<<"$runs" | grep -c ':disk:' || true)
limit=${RAMPART_STARVED_TIMEOUT:-$((120 + 1500 * nbd_runs + 180 * disk_runs))}
# The guest's watchdog needs the guest's userspace, which a starved guest can lose whole
# (every task blocked in reclaim, the watchdog's own fork included). So the host watches
# too: while a workload runs the watchdog says "progress" every 30 s, and a guest silent
# for the stall limit and a minute more is hung.
silent_limit=$((${RAMPART_STARVED_STALL_SECONDS:-120} + 60))
last_line=$SECONDS
seen=0
while kill -0 "$qemu_pid" 2>/dev/null; do
  ((SECONDS - t0 < limit)) || { hung_guest; fail "the guest did not finish within $limit s (its tasks above)"; }
  ((SECONDS - last_line < silent_limit)) \
    || { hung_guest; fail "the guest said nothing for $silent_limit s (no progress, no watchdog): hung; its tasks above"; }
  mapfile -t lines < <(said | tail -n +$((seen + 1)))
  for line in "${lines[@]}"; do
    seen=$((seen + 1))
    last_line=$SECONDS
    line=${line%$'\r'}
    [[ $line == "rampart-guest: stats "* ]] && continue
    log "${line#rampart-guest: }"
    case $line in
      *": fault kill "*)
        log "kill -9 rampartd ${CLUSTER_ADDRS[$victim]} (pid ${CLUSTER_PIDS[$victim]}), ${guest_addrs[$victim]} in the guest"
        cluster_kill9 "$victim" ;;
      *": fault outage "*)
        log "every live rampartd stopped for 3 s"
        outage 3 ;;
      *": rebuilt after "*)
        cluster_restart "$victim" || fail "could not start rampartd ${CLUSTER_ADDRS[$victim]} again"
        log "rampartd ${CLUSTER_ADDRS[$victim]} started again, empty (pid ${CLUSTER_PIDS[$victim]})" ;;
    esac
  done
  sleep 0.2
done
wait "$qemu_pid" || true
guest_seconds=$((SECONDS - t0))

# What the guest said, read once: under pipefail, 'said | grep -q' fails when grep
# stops reading at its match before sed is done writing (SIGPIPE), which a long console
# made happen in CI ("no 'pager restarted' line" under a run that had one).
said >"$work/said"
if grep -q '^rampart-guest: stall' "$work/said"; then
  sed -n '/rampart-guest: stall/,$p' "$console" | head -n 1500 >&2
  fail "the watchdog saw swap stand still for 120 s (stacks above)"
fi
grep -q '^rampart-guest: end 0' "$work/said" \
  || guest_fail "$console" "the guest did not finish cleanly: $(grep -a -E 'rampart-guest|workload|Kernel panic|Out of memory|oom|nbd|I/O error' "$console" | tail -n 20)"

# ---- the verdict and the report ------------------------------------------------------------
declare -A secs=()
# Every run that kills the pager says once that its standby took over.
pager_runs=$(tr ' ' '\n' <<<"$runs" | awk -F: '$4 ~ /pager$/' | grep -c . || true)
pager_restarts=$(grep -c '^rampart-guest: pager restarted: the standby' "$work/said" || true)
((pager_restarts >= pager_runs)) \
  || fail "$pager_runs runs killed the pager but only $pager_restarts standbys took over"
for r in $runs; do
  name=${r%%:*}
  line=$(grep "^rampart-guest: result $name " "$work/said" || true)
  [[ $line == *" rc=0 "*verified=yes* ]] || fail "run $name did not verify: ${line:-no result line}"
  IFS=: read -r _ _ _ fault _ <<<"$r"
  if [[ $fault == *pager ]]; then
    grep -q "^rampart-guest: pager restarted" "$work/said" \
      || fail "run $name: the pager was not killed and restarted (no 'pager restarted' line)"
  fi
  secs[$name]=$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' <<<"$line")
  swaps=$(sed -n 's/.* swaps=\([0-9]*\).*/\1/p' <<<"$line")
  # At least what exceeds RAM went out and came back.
  ((swaps >= (program_mb - guest_mb) * 256 * 2)) || fail "run $name moved only $swaps pages through swap"
done
grep '^rampart-guest: stats ' "$work/said" | sed 's/^rampart-guest: stats /    /' >"$work/stats"
grep -q 'lost pages 0, read errors 0' "$work/stats" \
  && ! grep -q -E 'lost pages [1-9]|read errors [1-9]' "$work/stats" \
  || fail "the daemon lost pages or failed reads: $(grep '^ *failures' "$work/stats")"
log "engine at the end:"
cat "$work/stats"
log "time against the same workload on the swap disk:"
for r in $runs; do
  IFS=: read -r name dev wl _ <<<"$r"
  [[ $dev != disk && -n ${secs[disk-$wl]:-} ]] || continue
  log "  $(printf '%-10s %-9s %8.1f s vs %8.1f s  ratio %.2f' "$name" "$wl" "${secs[$name]}" \
    "${secs[disk-$wl]}" "$(awk -v a="${secs[$name]}" -v b="${secs[disk-$wl]}" 'BEGIN {print a / b}')")"
done
# bench/guest names its runs nbd-W and ublk-W: the two frontends on the same workload in
# the same guest, the same boot.
for wl in pages forks quicksort; do
  [[ -n ${secs[nbd-$wl]:-} && -n ${secs[ublk-$wl]:-} ]] || continue
  log "  $(printf 'ublk against nbd-client, %-9s %8.1f s vs %8.1f s  ratio %.2f' "$wl" \
    "${secs[ublk-$wl]}" "${secs[nbd-$wl]}" \
    "$(awk -v a="${secs[ublk-$wl]}" -v b="${secs[nbd-$wl]}" 'BEGIN {print a / b}')")"
done
grep '^rampart-guest: pager restarted' "$work/said" | sed 's/^rampart-guest: /  /' || true
log "daemon memory (VmRSS: what it holds, all of it locked; VmLck counts its locked mappings whole, touched or not):"
grep '^rampart-guest: daemon ' "$work/said" | sed 's/^rampart-guest: daemon /    /'
grep -a 'warning:\|PR_SET_IO_FLUSHER\|mlockall' "$console" | sed 's/^/    daemon: /' || true
log "PASS (${guest_seconds} s in the guest)"
