#!/usr/bin/env bash
# The genuine kernel path: a Debian kernel booted under qemu attaches the host's rampart
# export with nbd-client (-L -swap -b 4096), mkswap + swapon it, and runs a program that
# allocates twice the guest's RAM and checks every page.
#
# The guest reaches nbdkit only through qemu: its user network is restricted (restrict=on:
# no route out of qemu) and has one forward, 10.0.2.100:10809, into a chardev that is a
# unix socket on this host. Nothing crosses the host's network.
#
# Environment: RAMPART_GUEST_KERNEL_DIR (default /var/cache/rampart/guest-kernel, filled
# by scripts/fetch-guest-kernel, which scripts/setup runs), RAMPART_GUEST_MEM_MB (192).
. "$(dirname "$0")/lib.sh"

guest_initramfs_tools
guest_kernel

guest_mb=${RAMPART_GUEST_MEM_MB:-192}
program_mb=$((guest_mb * 2))

# ---- the initramfs: busybox, nbd-client and the workload with their libraries ----------
root=$work/initramfs
mkdir -p "$root"/{bin,dev,proc,sys,tmp,lib/modules}
cp "$busybox" "$root/bin/busybox"
cp "$kdir"/modules/*.ko "$root/lib/modules/"
copy_with_libs() { # program -> /bin/NAME, its shared libraries where ldd says they live
  cp "$1" "$root/bin/"
  local lib
  for lib in $(ldd "$1" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}
copy_with_libs "$nbd_client"
copy_with_libs "$RAMPART_WORKLOAD"
cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
say() { echo "rampart-guest: \$*"; }
finish() { say "end \$1"; sync; poweroff -f; }
insmod /lib/modules/e1000.ko && insmod /lib/modules/nbd.ko || finish "cannot load modules"
ip link set lo up; ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
# The kernel must still be able to send swap-out traffic when memory is short.
echo 16384 >/proc/sys/vm/min_free_kbytes
say "memory \$(awk '/MemTotal/ {print \$2}' /proc/meminfo) KiB"
nbd-client 10.0.2.100 10809 /dev/nbd0 -N rampart -nonetlink -swap -block-size 4096 \
  || finish "nbd-client failed"
# nbd-client (ioctl mode) returns before its daemon child enters NBD_DO_IT, and only
# there does the kernel give /dev/nbd0 its size: mkswap run at once can see 0 bytes.
i=0
while [ ! -e /sys/block/nbd0/pid ] || [ "\$(cat /sys/block/nbd0/size)" = 0 ]; do
  i=\$((i + 1))
  [ \$i -le 60 ] || finish "nbd-client did not bring /dev/nbd0 up within 60 s"
  sleep 1
done
mkswap /dev/nbd0 >/dev/null && swapon /dev/nbd0 || finish "swapon failed"
say "swap on: \$(grep nbd0 /proc/swaps)"
rampart-workload pages --size ${program_mb}M
rc=\$?
say "workload exit \$rc"
say "pswpout \$(awk '/^pswpout/ {print \$2}' /proc/vmstat) pswpin \$(awk '/^pswpin/ {print \$2}' /proc/vmstat)"
swapoff /dev/nbd0 && nbd-client -d /dev/nbd0 >/dev/null 2>&1
finish "\$rc"
EOF
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"
log "initramfs: $(du -h "$work/initrd.gz" | cut -f1)"

# ---- the cluster and the export, served on a unix socket ---------------------------------
key=$work/key
"$RAMPARTCTL" keygen "$key" >/dev/null
cluster_start "$work" 5 192M "$key" guesttest || fail "could not start the servers"
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
# /dev/kvm here is a hypervisor a stock kernel cannot run on: software emulation, one vCPU.
console=$work/console.log
log "booting the guest: ${guest_mb} MiB of RAM, a ${program_mb} MiB program (qemu -accel tcg)"
"$qemu" -accel tcg -m "$guest_mb" -smp 1 -nographic -no-reboot -monitor none \
  -kernel "$kdir/vmlinuz" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 panic=-1 quiet" \
  -chardev socket,id=nbd,path="$sock" \
  -netdev user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:10809-chardev:nbd \
  -device e1000,netdev=n0 \
  -serial file:"$console" </dev/null >"$work/qemu.out" 2>&1 &
qemu_pid=$!
bg_pids+=("$qemu_pid")
t0=$SECONDS
last=
while kill -0 "$qemu_pid" 2>/dev/null; do
  ((SECONDS - t0 < 600)) || fail "the guest did not finish within 600 s: $(tail -n 5 "$console")"
  line=$(grep -a '^rampart-guest:' "$console" 2>/dev/null | tail -n1 || true)
  [[ $line != "$last" && -n $line ]] && { log "${line#rampart-guest: }"; last=$line; }
  sleep 1
done
wait "$qemu_pid" || true
guest_seconds=$((SECONDS - t0))

grep -a '^rampart-guest: end 0' "$console" >/dev/null \
  || fail "the guest did not finish cleanly: $(grep -a -E 'rampart-guest|workload|Kernel panic|Out of memory|nbd|mkswap|swapon|I/O error' "$console" | tail -n 12)"
result=$(grep -a '^workload pages' "$console" || true)
[[ $result == *verified=yes* ]] || fail "the guest's workload did not verify: ${result:-no result line}"
read -r pswpout pswpin < <(sed -n 's/^rampart-guest: pswpout \([0-9]*\) pswpin \([0-9]*\).*/\1 \2/p' "$console")
# The program is twice the guest's RAM: at least what exceeds RAM went out and came back.
need=$((guest_mb * 256))
((${pswpout:-0} >= need)) || fail "the guest swapped out only ${pswpout:-0} pages; expected >= $need"
((${pswpin:-0} >= need)) || fail "the guest swapped in only ${pswpin:-0} pages; expected >= $need"
written=$(sed -n 's/^wire .*(\([0-9]*\) written).*/\1/p' "$work/stats")
((${written:-0} >= need)) || fail "the engine saw ${written:-0} page writes; the guest's swap did not reach rampart"
log "$result"
log "guest: $pswpout pages swapped out, $pswpin in; engine: $written page writes; ${guest_seconds} s in the guest"
log "PASS"
