#!/usr/bin/env bash
# The genuine kernel path on the Debian 6.1 kernel (no ublk driver), under qemu, in one
# boot (guest/nbd_client_init.sh is the guest's /init and says what runs, in order):
#   1. Debian's nbd-client (-swap -b 4096) attaches the host's rampart export; a program
#      of 1.5 times the guest's RAM checks every page.
#   2. The NBD frontend as deployed: 'rampartctl swap on --frontend nbd' in the guest
#      (rampart-nbd-server with state=, a standby beside it, rampart-nbd-attach, the
#      keeper) on servers on this host. A hog in a memory cgroup, 32 MiB larger than the
#      cgroup, verifies its pages while the serving daemon is killed with SIGKILL twice
#      and then upgraded to a new binary ('rampartctl swap upgrade'): each time the standby
#      takes over, a new standby (a new pid) appears, swap moves again, and no I/O error
#      is logged. Once the hog has ended, 'rampartctl swap off' turns it all off.
#   3. The same hog on a swap disk of the guest (/dev/vda, a sparse file here): the ratio.
#
# The guest reaches this host only through qemu: its user network is restricted
# (restrict=on: no route out of qemu) and has a forward for the host's nbdkit
# (10.0.2.100:10809, a chardev on a unix socket) and one per rampartd (10.0.2.100:7073+I,
# each connection handed to 'nc -N' on 127.0.0.1). Nothing crosses the host's network.
#
# Environment: RAMPART_GUEST_KERNEL_DIR (default /var/cache/rampart/guest-kernel, filled
# by scripts/fetch-guest-kernel, which scripts/setup runs), RAMPART_GUEST_MEM_MB (256: the
# initramfs, rampart's daemons and the rest of the guest keep about 130 MiB of it, and a
# guest left with less starved the standby at its takeover),
# RAMPART_GUEST_KEEP (a directory to copy the guest's console log into),
# RAMPART_GUEST_ONLY_DEPLOYED=1 (for working on stages 2 and 3: no nbd-client run).
. "$(dirname "$0")/lib.sh"

guest_initramfs_tools
for t in nbdkit nbdinfo nc bash; do
  command -v $t >/dev/null || skip "$t is missing (packages nbdkit, libnbd-bin, netcat-openbsd, bash)"
done
for t in mkswap swapon swapoff; do
  [[ -x /usr/sbin/$t || -x /sbin/$t ]] || skip "util-linux's $t is missing (package util-linux)"
done
[[ -x ${RAMPART_NBD_ATTACH:-} ]] || fail "RAMPART_NBD_ATTACH must name the built rampart-nbd-attach (ctest sets it)"
[[ -x ${RAMPART_NBD_SERVER:-} ]] || fail "RAMPART_NBD_SERVER must name the built rampart-nbd-server (ctest sets it)"
# A sanitizer build's plugin needs the ASan runtime preloaded and cannot lock its memory:
# not the daemon this small guest can hold. The release build runs this test.
[[ -z ${RAMPART_ASAN_RUNTIME:-} ]] || skip "a sanitizer build's daemon cannot run in the guest"
guest_kernel

guest_mb=${RAMPART_GUEST_MEM_MB:-256}
program_mb=$((guest_mb * 3 / 2))
# What of the hog goes out through the device: the hog is its cgroup's limit plus this.
hog_over_mb=32

# ---- the initramfs: busybox, the clients, rampart as deployed, with their libraries -------
root=$work/initramfs
mkdir -p "$root"/{bin,dev,proc,sys,tmp,run,usr,etc/rampart,lib/modules,lib/nbdkit}
# Everything lives in /bin.
ln -s ../bin "$root/usr/bin"
ln -s ../bin "$root/usr/sbin"
ln -s bin "$root/sbin"
cp "$busybox" "$root/bin/busybox"
cp "$kdir"/modules/*.ko "$kdir/modules/order" "$root/lib/modules/"
copy_libs() { # file: its shared libraries, where ldd says they live
  local lib
  for lib in $(ldd "$1" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}
# util-linux's mkswap, swapon and flock (rampart-swap uses --discard=pages and --priority,
# which busybox's lack), coreutils' rm (--one-file-system) and date (%N); busybox installs
# no link where a program already is.
for prog in "$nbd_client" "$RAMPART_WORKLOAD" "$RAMPARTCTL" "$RAMPART_NBD_ATTACH" "$RAMPART_NBD_SERVER" \
            "$(command -v nbdkit)" "$(command -v nbdinfo)" "$(command -v bash)" \
            "$(command -v mkswap)" "$(command -v swapon)" "$(command -v swapoff)" \
            /usr/bin/rm /usr/bin/date /usr/bin/flock; do
  cp "$prog" "$root/bin/"
  copy_libs "$prog"
done
# nbdinfo (rampart-swap asks it for the export's size) links libxml2, and that ICU, whose
# 30 MB data library the initramfs cannot hold in this guest's RAM (its unpacking fails).
# nbdinfo never converts text: the guest gets a stub of that library, the one symbol.
for lib in "$root"/lib/x86_64-linux-gnu/libicudata.so.*; do
  [[ -e $lib ]] || continue
  sym=$(nm -D "$root"/lib/x86_64-linux-gnu/libicuuc.so.* | sed -n 's/^ *U \(icudt[0-9]*_dat\)$/\1/p' | head -n1)
  [[ -n $sym ]] || fail "cannot tell the ICU data symbol libicuuc needs"
  echo "const char $sym[64] __attribute__((aligned(16)));" |
    "${CC:-cc}" -shared -x c - -o "$lib" -Wl,-soname,"$(basename "$lib")" || fail "cannot build the ICU data stub"
done
install -m 0755 "$RAMPART_SWAP" "$root/bin/rampart-swap"
copy_libs "$RAMPART_SWAP"
cp "$RAMPART_PLUGIN" "$root/lib/nbdkit/rampart.so"
copy_libs "$RAMPART_PLUGIN"
install -m 0755 "$src_root/test/swap/guest/nbd_client_init.sh" "$root/init"

# ---- the servers: this host's loopback, reached from the guest through qemu -----------------
key=$work/key
"$RAMPARTCTL" keygen "$key" >/dev/null
# An emulated guest on a shared host can stall for seconds: the servers keep its sessions
# for two minutes, as test_guest_systemd.sh's do.
CLUSTER_ARGS=(--lease 120 --handshake-timeout 20)
# Each holds what the host's export reserves (nbd-client's run) and what the guest's does.
cluster_start "$work" 5 1G "$key" guesttest || fail "could not start the servers"
guestfwd=
guest_servers=()
for i in "${!CLUSTER_ADDRS[@]}"; do
  guestfwd+=",guestfwd=tcp:10.0.2.100:$((7073 + i))-cmd:nc -N 127.0.0.1 ${CLUSTER_ADDRS[$i]##*:}"
  guest_servers+=("10.0.2.100:$((7073 + i))")
done
install -m 0600 "$key" "$root/etc/rampart/key"
# The device is twice what the hog swaps: past half full, the kernel frees a swap slot
# when its page is read back (vm_swap_full), so every page checked would be written again.
cat >"$root/etc/rampart/swap.conf" <<CONF
size=512M
servers=$(IFS=,; echo "${guest_servers[*]}")
key=/etc/rampart/key
redundancy=parity-log
group=4
# An emulated CPU shared with the host's other work answers slowly: a server that is
# merely slow must not count as failing.
timeout=10000
lease=120
# The spill store on a disk of the guest: its root is RAM.
spill=/dev/vdb
# Two NBD connections (the default is one): each kill and the upgrade must move both.
connections=2
CONF
cat >"$root/etc/guest.conf" <<CONF
PROGRAM_MB=$program_mb
HOG_OVER_MB=$hog_over_mb
ONLY_DEPLOYED=${RAMPART_GUEST_ONLY_DEPLOYED:-}
CONF
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"
log "initramfs: $(du -h "$work/initrd.gz" | cut -f1)"
truncate -s 512M "$work/swap.img" "$work/spill.img"

# ---- the host's export for nbd-client, served on a unix socket ------------------------------
sock=$work/nbdkit.sock
env ${RAMPART_NBDKIT_PRELOAD:+LD_PRELOAD="$RAMPART_NBDKIT_PRELOAD"} \
  nbdkit --foreground --unix "$sock" "$RAMPART_PLUGIN" size=$((program_mb * 2))M \
  servers="$(cluster_servers)" key="$key" redundancy=parity-log group=4 \
  spill="$work/spill" stats-file="$work/stats" "${plugin_extra[@]}" \
  </dev/null >"$work/guest-nbdkit.log" 2>&1 &
bg_pids+=($!)
for _ in $(seq 300); do
  nbdinfo --size "nbd+unix:///?socket=$sock" >/dev/null 2>&1 && break
  sleep 0.1
done
nbdinfo --size "nbd+unix:///?socket=$sock" >/dev/null 2>&1 || fail "nbdkit did not serve $sock"

# ---- the guest ---------------------------------------------------------------------------
# /dev/kvm here is a hypervisor a stock kernel cannot run on: software emulation. Two
# vCPUs (qemu runs each on a host thread), so the pager in the guest runs beside the hog
# as on a real host; -cpu max for AES-NI, which the pager's page sealing uses.
console=$work/console.log
log "booting the guest: ${guest_mb} MiB of RAM, a ${program_mb} MiB program, a hog ${hog_over_mb} MiB over its cgroup (qemu -accel tcg)"
boot_guest() {
  : >"$console"
  "$qemu" -accel tcg,thread=multi -cpu max -m "$guest_mb" -smp 2 -nographic -no-reboot -monitor none \
    -kernel "$kdir/vmlinuz" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 panic=-1 quiet" \
    -drive file="$work/swap.img",format=raw,if=virtio,cache=writeback \
    -drive file="$work/spill.img",format=raw,if=virtio,cache=writeback \
    -chardev socket,id=nbd,path="$sock" \
    -netdev "user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:10809-chardev:nbd$guestfwd" \
    -device e1000,netdev=n0 \
    -serial file:"$console" </dev/null >"$work/qemu.out" 2>&1 &
  qemu_pid=$!
  bg_pids+=("$qemu_pid")
}
guest_boot boot_guest "$console"
said() { guest_said "$console" | tr -d '\r'; }
t0=$SECONDS
seen=0
while kill -0 "$qemu_pid" 2>/dev/null; do
  ((SECONDS - t0 < 1700)) || fail "the guest did not finish within 1700 s: $(said | tail -n 5)"
  mapfile -t lines < <(said | tail -n +$((seen + 1)))
  for line in "${lines[@]}"; do
    seen=$((seen + 1))
    [[ $line == "rampart-guest: "*"| "* ]] || log "guest: ${line#rampart-guest: }"
  done
  sleep 1
done
wait "$qemu_pid" || true
guest_seconds=$((SECONDS - t0))
[[ -z ${RAMPART_GUEST_KEEP:-} ]] || cp "$console" "$RAMPART_GUEST_KEEP/"

said >"$work/said"
grep -q '^rampart-guest: end 0' "$work/said" \
  || guest_fail "$console" "the guest did not finish cleanly: $(grep -a -E 'rampart-guest|workload|Kernel panic|Out of memory|nbd|I/O error|^----|nbdkit' "$console" | tail -n 40)"

# ---- 1. nbd-client ---------------------------------------------------------------------------
if [[ -z ${RAMPART_GUEST_ONLY_DEPLOYED:-} ]]; then
result=$(grep -a '^workload pages' "$console" | head -n1 || true)
[[ $result == *verified=yes* ]] || fail "the nbd-client run did not verify: ${result:-no result line}"
read -r pswpout pswpin < <(sed -n 's/^rampart-guest: pswpout \([0-9]*\) pswpin \([0-9]*\).*/\1 \2/p' "$work/said")
# At least what exceeds the guest's RAM went out and came back.
need=$(((program_mb - guest_mb) * 256))
((${pswpout:-0} >= need)) || fail "the guest swapped out only ${pswpout:-0} pages; expected >= $need"
((${pswpin:-0} >= need)) || fail "the guest swapped in only ${pswpin:-0} pages; expected >= $need"
written=$(sed -n 's/^wire .*(\([0-9]*\) written).*/\1/p' "$work/stats")
((${written:-0} >= need)) || fail "the engine saw ${written:-0} page writes; the guest's swap did not reach rampart"
log "nbd-client: $result; $pswpout pages out, $pswpin in; the host's engine: $written page writes"
fi

# ---- 2. deployed, 3. disk ---------------------------------------------------------------------
field() { # stage key: the value of key= on the stage's result line
  sed -n "s/^rampart-guest: result $1 .* $2=\([0-9.a-z]*\).*/\1/p" "$work/said"
}
for r in deployed disk; do
  line=$(grep "^rampart-guest: result $r " "$work/said" || true)
  [[ $line == *" rc=0 "*verified=yes* ]] || fail "the hog on $r did not verify: ${line:-no result line}"
  # The hog is at least its cgroup's 24 MiB plus what goes out; at least half of that
  # went out and a quarter came back in (the rest stayed in the swap cache).
  pages=$(($(field $r size) / 4096))
  ((pages >= (24 + hog_over_mb) * 256)) || fail "the hog on $r verified only $pages pages"
  (($(field $r out) >= hog_over_mb * 128)) || fail "the hog on $r swapped out only $(field $r out) pages"
  (($(field $r in) >= hog_over_mb * 64)) || fail "the hog on $r swapped in only $(field $r in) pages"
done
takeovers=$(grep -c '^rampart-guest: takeover ' "$work/said" || true)
((takeovers == 3)) || fail "expected two kills and an upgrade taken over, saw $takeovers"
mapfile -t took_ms < <(sed -n 's/^rampart-guest: takeover .*took the state over \([0-9]*\) ms after.*/\1/p' "$work/said")
((${#took_ms[@]} == 3)) || fail "the standbys did not log each takeover's time: ${took_ms[*]}"
grep -q '^rampart-guest: off: ' "$work/said" || fail "no 'swap off' after the hog"
! grep -a -E 'I/O error, dev nbd|error on swap-device' "$console" ||
  fail "I/O errors on the swap device (above)"
io_errors=$(field deployed io_errors)
[[ $io_errors == 0 ]] || fail "the guest's kernel logged ${io_errors:-an unknown number of} I/O errors on the NBD device during the hog"
grep -q '^rampart-guest: stats| failures .*lost pages 0, read errors 0' "$work/said" ||
  fail "the guest's pager lost pages or failed reads: $(grep 'stats| failures' "$work/said")"

echo "---- rampartctl swap on --frontend nbd, status, off in the guest ----"
sed -n 's/^rampart-guest: \(on\|status\|off\)| /  /p' "$work/said"
echo "---- the upgrade: refused with another state layout, then done ----"
sed -n 's/^rampart-guest: refusal| /  /p' "$work/said"
sed -n 's/^rampart-guest: upgrade| /  /p' "$work/said"
grep '^rampart-guest: upgrade: ' "$work/said" | sed 's/^rampart-guest: /  /'
echo "---- takeovers under the hog ----"
sed -n 's/^rampart-guest: takeover /  /p' "$work/said"
grep '^rampart-guest: off: ' "$work/said" | sed 's/^rampart-guest: /  /'
echo "---- the guest's pager before 'swap off' ----"
sed -n 's/^rampart-guest: stats| /  /p' "$work/said"
echo "---- the hog ($(sed -n 's/^rampart-guest: hog: \([0-9]* MiB in a [0-9]* MiB memory cgroup\).*/\1/p' "$work/said")) ----"
printf '  deployed NBD (2 kills, 1 upgrade): %s s, %s pages verified (%s out, %s in), 0 lost, %s I/O errors\n' \
  "$(field deployed wall)" "$(($(field deployed size) / 4096))" "$(field deployed out)" "$(field deployed in)" "$io_errors"
printf '  swap disk: %s s (%s out, %s in); ratio NBD/disk %s\n' "$(field disk wall)" \
  "$(field disk out)" "$(field disk in)" "$(awk -v a="$(field deployed wall)" -v b="$(field disk wall)" 'BEGIN {printf "%.2f", a / b}')"
echo "  takeovers (the standby had the state, ms after the pager died): kill ${took_ms[0]}, kill ${took_ms[1]}, upgrade ${took_ms[2]}"
echo "---- stage times in the guest ----"
sed -n 's/^rampart-guest: stage /  /p' "$work/said"
log "PASS: ${guest_seconds} s in the guest"
