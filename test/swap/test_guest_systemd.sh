#!/usr/bin/env bash
# A cluster node as operators run it: the rampart .deb installed into a minimal Debian
# bookworm (scripts/fetch-guest-root: mmdebstrap from apt's mirror, cached in
# /var/cache/rampart) on an ext4 disk image, booted under qemu with systemd as PID 1 on
# the Debian 6.12 kernel the ublk guest test uses (scripts/fetch-guest-kernel --ublk: it
# has ublk_drv, so rampart-swap.service deploys rampart-ublk with a standby, as on a node
# whose kernel has it). A busybox initramfs loads the disk and ext4 modules and hands the
# disk over to systemd.
#
# The node lends memory and swaps, as docs/operations.md's nodes do: two servers of its
# own (rampartd@1 and rampartd@2, the packaged template, under systemd) and ten on other
# machines, which here are rampartd processes on this host's loopback that the guest
# reaches through qemu's restricted user network (one guestfwd per server, each connection
# handed to 'nc -N' on 127.0.0.1: nothing crosses the host's network). rampart-swap.service
# attaches a 1 GiB parity-log device (group=4) over the twelve: /dev/ublkb0, served by
# rampart-ublk, with a standby beside it.
#
# The checks run inside the guest (test/swap/guest/rampart-guest-check, started at boot by
# a unit of its own) and report on the serial console. First boot: the units came up in
# order; swapon --show lists the device; the metrics answer. A hog larger than the guest's
# RAM (105%) runs in a memory cgroup that keeps the rest of the guest out of the shortage
# (this test checks the units; the daemon starved with its guest is test_guest_starved.sh's).
# While it runs the serving pager is killed with SIGKILL, twice: each time the standby
# takes the device over, the service's keeper starts a new standby, and the hog goes on
# with no I/O error; then 'rampart-swap upgrade' hands the device to a replaced
# rampart-ublk binary the same way (checked through /proc/PID/exe). While its pages are out, 'systemctl stop rampart-swap' must refuse (the pages cannot fit: the
# unit fails, saying what to do, and the swap stays on); the hog verifies every page;
# 'systemctl start rampart-swap' takes the device back. Under a second program,
# 'systemctl kill -s KILL rampartd@2' is followed by systemd's restart and a rebuild with
# no page lost; the program is frozen with its pages out and 'systemctl stop
# rampart-swap' must take the swap off with every page brought back (the program then
# verifies every page with no swap at all). Swap on again, then 'systemctl reboot' (a real
# shutdown; qemu exits at the reset and the host starts it again on the same disk, which
# keeps its state). Second boot: everything
# came back (the units, in order, and the swap), the previous boot's shutdown took the
# swap off before stopping the servers, and a program swaps and verifies again; the
# same program then runs on a swap file of the guest's own disk, rampart's swap off, and
# both times are printed with their ratio; then it powers off.
#
# Environment: RAMPART_DEB_PATH (the package; default: built with scripts/build-deb),
# RAMPART_GUEST_UBLK_KERNEL_DIR, RAMPART_GUEST_ROOT_DIR (default /var/cache/rampart/guest-root),
# RAMPART_GUEST_MEM_MB (the guest's RAM, default 512), RAMPART_GUEST_HOG_PERCENT (the hog's
# size as a share of the guest's RAM, default 105), RAMPART_GUEST_KEEP (the directory the
# guest's whole console log, both boots, is copied into as test_guest_systemd.console.log;
# default ${TMPDIR:-/tmp}). A failed run prints the kernel's oops and panic report from it.
. "$(dirname "$0")/lib.sh"

[[ $(id -u) == 0 ]] || skip "needs root to unpack the guest root and install the .deb into it"
qemu=$(command -v qemu-system-x86_64 || true)
[[ -n $qemu ]] || skip "qemu-system-x86_64 is missing (package qemu-system-x86)"
busybox=$(command -v busybox || true)
[[ -n $busybox ]] && ! ldd "$busybox" >/dev/null 2>&1 ||
  skip "no static busybox for the guest's initramfs (package busybox-static)"
for t in cpio depmod mkfs.ext4 nc; do
  command -v "$t" >/dev/null || skip "$t is missing (packages cpio, kmod, e2fsprogs, netcat-openbsd)"
done

guest_kernel --ublk
# The release, as uname -r gives it in the guest (Debian's 6.12 package is '-unsigned').
kver=$(sed -n 's/^Package: linux-image-\([^ ]*\) .*/\1/p' "$kdir/version")
kver=${kver%-unsigned}
[[ -n $kver ]] || fail "cannot tell the kernel release from $kdir/version"

rdir=${RAMPART_GUEST_ROOT_DIR:-/var/cache/rampart/guest-root}
"$src_root/scripts/fetch-guest-root" "$rdir" >"$work/root.out" 2>&1 ||
  skip "no guest root in $rdir and making one failed: $(tail -n 2 "$work/root.out")"
tarball=$(sed -n 's/^fetch-guest-root: \(.*\.tar\)\( is already there\| (.*)\)$/\1/p' "$work/root.out" | tail -n1)
[[ -s $tarball ]] || fail "fetch-guest-root named no tarball: $(tail -n 2 "$work/root.out")"

deb=${RAMPART_DEB_PATH:-}
if [[ -z $deb ]]; then
  deb=$("$src_root/scripts/build-deb" "$work/build-deb" 2>"$work/build-deb.err" | tail -n1) ||
    fail "scripts/build-deb failed: $(tail -n 5 "$work/build-deb.err")"
fi
[[ -f $deb ]] || fail "no package at '$deb'"
guest_mb=${RAMPART_GUEST_MEM_MB:-512}
hog_percent=${RAMPART_GUEST_HOG_PERCENT:-105}
((hog_percent > 100)) || fail "RAMPART_GUEST_HOG_PERCENT must be above 100: the hog is larger than the guest's RAM"
log "guest: $(cat "$kdir/version"); root $(basename "$tarball"); $(basename "$deb"); ${guest_mb} MiB of RAM"

# ---- the servers on "other machines": this host's loopback ---------------------------------
key=$work/key
"$RAMPARTCTL" keygen "$key" >/dev/null
# An emulated guest on a shared host can stall for seconds (the host compiling, other
# tests): the servers keep its sessions for a minute, as for a client on a slow network,
# and give its handshake 20 s, rather than count a stalled guest as gone (the 10 s lease
# the other tests use freed all ten servers' pages under a guest stalled by a build).
CLUSTER_ARGS=(--lease 120 --handshake-timeout 20)
cluster_start "$work" 10 192M "$key" guest-remote || fail "could not start the host's servers"
guestfwd=
for i in "${!CLUSTER_ADDRS[@]}"; do
  guestfwd+=",guestfwd=tcp:10.0.2.100:$((7073 + i))-cmd:nc -N 127.0.0.1 ${CLUSTER_ADDRS[$i]##*:}"
done

# ---- the root: bookworm + the .deb + configuration ---------------------------------------
root=$work/root
mkdir -p "$root"
tar -C "$root" -xf "$tarball"
cp "$deb" "$root/tmp/rampart.deb"
chroot "$root" dpkg -i /tmp/rampart.deb >"$work/dpkg.out" 2>&1 ||
  fail "dpkg -i of the package failed in the guest root: $(tail -n 10 "$work/dpkg.out")"
rm "$root/tmp/rampart.deb"
chroot "$root" getent passwd rampart >/dev/null || fail "the postinst made no user rampart"
# The package's postinst enabled rampart-swap.service; check that, do not redo it.
[[ -L $root/etc/systemd/system/multi-user.target.wants/rampart-swap.service ]] ||
  fail "the package did not enable rampart-swap.service"
mkdir -p "$root/lib/modules/$kver/extra"
cp "$kdir"/modules/*.ko "$root/lib/modules/$kver/extra/"
touch "$root/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo}
depmod -b "$root" "$kver"
cp "$RAMPART_WORKLOAD" "$root/usr/local/bin/rampart-workload"
# 'ip' for the guest's one network interface (the root has no iproute2).
cp "$busybox" "$root/usr/local/bin/busybox"
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/*
mkdir -p "$root/var/log/journal"

install -m 0600 "$key" "$root/etc/rampart/key"
: >"$root/etc/rampart/cluster"
for i in 1 2; do
  cat >"$root/etc/rampart/rampartd-$i.conf" <<EOF
listen = 127.0.0.1:707$i
memory = 48M
lease = 120
handshake-timeout = 20
metrics = 127.0.0.1:947$i
# The hog's thrashing is this guest's memory pressure, and these servers share the guest
# with it: pressure must not make them refuse the very pages it swaps.
psi-threshold = 100
EOF
  echo "127.0.0.1:707$i" >>"$root/etc/rampart/cluster"
  ln -s /lib/systemd/system/rampartd@.service \
    "$root/etc/systemd/system/multi-user.target.wants/rampartd@$i.service"
done
for i in "${!CLUSTER_ADDRS[@]}"; do echo "10.0.2.100:$((7073 + i))" >>"$root/etc/rampart/cluster"; done
# 1 GiB over twelve servers at 4+1: the pager wants about 1/12 x 1.25 x 1.1 of the device
# on each (docs/operations.md, Sizing), some 120 MiB; the host's lend 192 MiB each, the
# guest's own 48 MiB (they grant that much and placement, which prefers the servers with
# the most room, sends them less). What the guest's own servers may hold is what the
# hog's memory cgroup must leave room for. The device is twice what the test swaps: past
# half full, the kernel frees a swap slot when its page is read back in (vm_swap_full),
# so every page the hog checks would be written out again; this guest swaps a page in
# only about 60 times a second, and those writes doubled the test's time.
cat >"$root/etc/rampart/swap.conf" <<EOF
size=1G
cluster=/etc/rampart/cluster
key=/etc/rampart/key
redundancy=parity-log
group=4
# An emulated CPU shared with the host's other work answers slowly: a server that is
# merely slow must not count as failing.
timeout=10000
lease=120
spill=/var/lib/rampart/spill
spill-size=128M
metrics-file=/run/rampart-swap.prom
EOF
echo rampart-guest >"$root/etc/hostname"
# Swap-in one page a fault: the checks read their pages in scattered order, where the
# readahead of neighbouring slots (8 by default) is all waste, 8 round trips through an
# emulated CPU for one page that is needed.
echo vm.page-cluster=0 >"$root/etc/sysctl.d/rampart-guest.conf"
# One machine ID for both boots, so the second finds the first's journal as its own.
tr -d - </proc/sys/kernel/random/uuid >"$root/etc/machine-id"
# The network: qemu's user network, eth0 (no udev renames it), configured before
# network-online.target, which rampart-swap.service waits for.
echo e1000 >"$root/etc/modules-load.d/rampart-guest.conf"
cat >"$root/etc/systemd/system/rampart-guest-net.service" <<'EOF'
[Unit]
Description=rampart guest test: eth0 on qemu's user network
After=systemd-modules-load.service
Before=network-online.target
Wants=network-online.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for i in $(seq 50); do [ -e /sys/class/net/eth0 ] && break; sleep 0.2; done; /usr/local/bin/busybox ip link set eth0 up && /usr/local/bin/busybox ip addr add 10.0.2.15/24 dev eth0'
[Install]
WantedBy=network-online.target
EOF
mkdir -p "$root/etc/systemd/system/network-online.target.wants"
ln -s /etc/systemd/system/rampart-guest-net.service \
  "$root/etc/systemd/system/network-online.target.wants/rampart-guest-net.service"
# No udev in the image, so no device units for the consoles: no gettys either (the
# checks write to the serial console themselves).
ln -sf /dev/null "$root/etc/systemd/system/serial-getty@.service"
ln -sf /dev/null "$root/etc/systemd/system/getty@.service"
ln -sf /dev/null "$root/etc/systemd/system/getty-static.service"
install -m 0755 "$src_root/test/swap/guest/rampart-guest-check" "$root/usr/local/sbin/"
cp "$src_root/test/swap/guest/rampart-guest-check.service" "$root/etc/systemd/system/"
ln -s /etc/systemd/system/rampart-guest-check.service \
  "$root/etc/systemd/system/multi-user.target.wants/rampart-guest-check.service"
printf 'hog_percent=%s\nguest_mb=%s\n' "$hog_percent" "$guest_mb" >"$root/etc/rampart-guest-check.conf"

img=$work/root.img
mkfs.ext4 -q -F -L rampart-root -d "$root" "$img" 2G >/dev/null || fail "mkfs.ext4 -d of the guest root failed"
rm -rf --one-file-system "$root"
log "root disk: $(du -h "$img" | cut -f1) used of 2G (ext4)"

# ---- the initramfs: load the disk's modules, mount it, hand it to systemd ----------------
initrd=$work/initramfs
mkdir -p "$initrd"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$busybox" "$initrd/bin/busybox"
cp "$kdir"/modules/*.ko "$kdir/modules/order" "$initrd/lib/modules/"
cat >"$initrd/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m || echo "initramfs: cannot load $m"; done
i=0
while [ ! -b /dev/vda ]; do
  i=$((i + 1)); [ $i -le 100 ] || { echo "initramfs: no /dev/vda"; poweroff -f; }
  sleep 0.1
done
mount -t ext4 -o rw /dev/vda /newroot || { echo "initramfs: cannot mount /dev/vda"; poweroff -f; }
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /lib/systemd/systemd
EOF
chmod +x "$initrd/init"
(cd "$initrd" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"

# ---- boot it: once, a reboot inside, and the second boot powers off ----------------------
# The guest's 'systemctl reboot' ends boot 1 (the shutdown that must take the swap off
# first), and qemu, run with -no-reboot, exits at its reset; boot 2 is a new qemu on the
# same disk. A reset inside one qemu ran boot 2 at a fraction of boot 1's speed (its
# kernel alone took 50-150 s where boot 1's took 2), so the machine is cold-started, as
# a power cycle would.
console=$work/console.log
: >"$console"
kept=${RAMPART_GUEST_KEEP:-${TMPDIR:-/tmp}}/test_guest_systemd.console.log
# guest_failed WHAT: keeps the console log and fails with WHAT (guest_fail: the kernel's
# report, and a second run when the emulation killed the kernel).
guest_failed() {
  cp "$console" "$kept" || true
  guest_fail "$console" "$1 (the guest's whole console log: $kept)"
}
# /dev/kvm here is a hypervisor a stock kernel cannot run on: software emulation.
log "booting: ${guest_mb} MiB, 2 vCPUs (qemu -accel tcg); the guest reboots once by itself"
t0=$SECONDS
last=
# A kernel that dies before it runs init, under TCG, died of the emulation (an int3 oops
# in the scheduler's clock during SMP bring-up has been seen): rampart's code has not
# run, and the disk is as the last boot left it, so that boot is cold-started once more.
# A kernel that dies after init started fails the test, or runs it once more when the
# emulation killed it (guest_fail).
retried=0
boot=1
while ((boot <= 2)); do
  "$qemu" -accel tcg,thread=multi -cpu max -m "$guest_mb" -smp 2 -nographic -monitor none \
    -no-reboot -kernel "$kdir/vmlinuz" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 panic=-1 systemd.show_status=1 systemd.log_color=0 \
systemd.unified_cgroup_hierarchy=1" \
    -drive file="$img",if=virtio,format=raw,cache=unsafe \
    -netdev "user,id=n0,restrict=on$guestfwd" -device e1000,netdev=n0 \
    -chardev file,id=console,path="$console",append=on -serial chardev:console \
    </dev/null >>"$work/qemu.out" 2>&1 &
  qemu_pid=$!
  bg_pids+=("$qemu_pid")
  while kill -0 "$qemu_pid" 2>/dev/null; do
    ((SECONDS - t0 < 2880)) || guest_failed "the guest did not finish within 2880 s: $(tail -n 20 "$console")"
    boots=$(grep -ac 'Linux version [0-9]' "$console" 2>/dev/null || true)
    ((${boots:-0} <= boot + retried)) || guest_failed "boot $boot started the kernel again (a panic?): $(grep -a -E 'rampart-guest|panic|Oops|BUG' "$console" | tail -n 20)"
    while IFS= read -r line; do
      log "guest: ${line#rampart-guest: }"
    done < <(grep -a '^rampart-guest:' "$console" 2>/dev/null | grep -av '^rampart-guest: [a-z]*| ' |
             tail -n +$((${last:-0} + 1)))
    last=$(grep -a '^rampart-guest:' "$console" 2>/dev/null | grep -avc '^rampart-guest: [a-z]*| ' || true)
    sleep 2
  done
  wait "$qemu_pid" || true
  if ! grep -aq "^rampart-guest: PASS boot $boot" "$console"; then
    this_boot=$(awk '/Linux version [0-9]/ { text = "" } { text = text $0 "\n" } END { printf "%s", text }' "$console")
    if ((retried == 0)) && guest_kernel_died_before 'Run /init as init process' <<<"$this_boot"; then
      log "boot $boot: the guest's kernel died before it ran init ($(grep -a -m1 -E 'Oops|Kernel panic' <<<"$this_boot" | tr -d '\r')); starting that boot once more"
      retried=1
      continue
    fi
    # Boot 1 ends in a reboot only when it passed; otherwise it powered off: stop here.
    break
  fi
  boot=$((boot + 1))
done
guest_seconds=$((SECONDS - t0))
cp "$console" "$kept" || log "cannot keep the console log as $kept"

grep -aq '^rampart-guest: PASS boot 1' "$console" ||
  guest_failed "boot 1 failed: $(grep -a -E 'rampart-guest: (FAIL|journal)|panic|Out of memory' "$console" | tail -n 40)"
grep -aq '^rampart-guest: PASS boot 2' "$console" ||
  guest_failed "boot 2 failed: $(grep -a -E 'rampart-guest: (FAIL|journal)|panic|Out of memory' "$console" | tail -n 40)"

# The host's servers held the guest's pages and ended cleanly (cluster_stop, at exit).
for addr in "${CLUSTER_ADDRS[@]}"; do
  "$RAMPARTCTL" stat "$addr" --key "$key" >"$work/stat.out" 2>&1 ||
    fail "rampartd $addr does not answer after the guest: $(tail -n 3 "$work/stat.out")"
done

# The note: what the guest showed.
echo "---- swapon --show in the booted guest (boot 1, then after the reboot) ----"
sed -n 's/^rampart-guest: swapon| //p' "$console"
echo "---- rampart-swap status in the booted guest ----"
sed -n 's/^rampart-guest: status| //p' "$console"
echo "---- metrics from the booted guest (excerpt) ----"
sed -n 's/^rampart-guest: metrics| //p' "$console"
echo "---- the refused stop, from the guest's journal ----"
sed -n 's/^rampart-guest: refusal| //p' "$console"
echo "---- the pager killed (twice) and upgraded under the hog: the standby's takeovers ----"
sed -n 's/^rampart-guest: takeover| //p' "$console"
echo "---- rampart-swap upgrade under the hog ----"
sed -n 's/^rampart-guest: upgrade| //p' "$console"
log "PASS: ${guest_seconds} s in the guest, two boots"
