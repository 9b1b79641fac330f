#!/usr/bin/env bash
# A cluster node as operators run it: the rampart .deb installed into a minimal Debian
# bookworm (scripts/fetch-guest-root: mmdebstrap from apt's mirror, cached in
# /var/cache/rampart) and booted under qemu with systemd as PID 1 on the Debian kernel
# the nbd-client guest test uses. The root file system is the initramfs itself (the
# kernel needs no disk driver), so every boot starts from the image as installed.
#
# The guest runs three servers (rampartd@1..3, the packaged template) and
# rampart-swap.service over them, all started by systemd at boot. Boot 1 checks, from a
# unit of its own (rampart-guest-check): the servers were up before the swap device
# started; swapon --show lists /dev/nbd0; the metrics answer; a memory hog 2.7 times
# its memory cgroup's limit completes and verifies while 'systemctl kill -s KILL
# rampartd@2' is followed by systemd's restart and a rebuild that loses no page;
# 'systemctl stop rampart-swap' takes the swap off with every page of a second hog
# brought back intact; then it reboots. Boot 2 (the same image, booted again) checks that
# it all came back. The guest has no network device at all: everything is on its
# loopback.
#
# Why the hog is measured against a cgroup and not the guest's RAM: the servers here
# lend the guest's own RAM (they are its systemd units), so the guest cannot swap out
# more than it has; the nbd-client guest test covers a program twice the guest's RAM
# with the servers outside.
#
# Environment: RAMPART_DEB_PATH (the package; default: built with scripts/build-deb),
# RAMPART_GUEST_KERNEL_DIR, RAMPART_GUEST_ROOT_DIR (default /var/cache/rampart/guest-root),
# RAMPART_GUEST_KEEP (a directory to copy the guest's console logs into).
. "$(dirname "$0")/lib.sh"

[[ $(id -u) == 0 ]] || skip "needs root to unpack the guest root and install the .deb into it"
qemu=$(command -v qemu-system-x86_64 || true)
[[ -n $qemu ]] || skip "qemu-system-x86_64 is missing (package qemu-system-x86)"
command -v cpio >/dev/null || skip "cpio is missing (package cpio)"
command -v depmod >/dev/null || skip "depmod is missing (package kmod)"

kdir=${RAMPART_GUEST_KERNEL_DIR:-/var/cache/rampart/guest-kernel}
if [[ ! -s $kdir/vmlinuz ]]; then
  "$src_root/scripts/fetch-guest-kernel" "$kdir" >"$work/fetch.out" 2>&1 ||
    skip "no guest kernel in $kdir and fetching one failed: $(tail -n 2 "$work/fetch.out")"
fi
kver=$(sed -n 's/^Package: linux-image-\([^ ]*\) .*/\1/p' "$kdir/version")
[[ -n $kver ]] || fail "cannot tell the kernel release from $kdir/version"

rdir=${RAMPART_GUEST_ROOT_DIR:-/var/cache/rampart/guest-root}
"$src_root/scripts/fetch-guest-root" "$rdir" >"$work/root.out" 2>&1 ||
  skip "no guest root in $rdir and making one failed: $(tail -n 2 "$work/root.out")"
tarball=$(ls -t "$rdir"/bookworm-*.tar | head -n1)

deb=${RAMPART_DEB_PATH:-}
if [[ -z $deb ]]; then
  deb=$("$src_root/scripts/build-deb" "$work/build-deb" 2>"$work/build-deb.err" | tail -n1) ||
    fail "scripts/build-deb failed: $(tail -n 5 "$work/build-deb.err")"
fi
[[ -f $deb ]] || fail "no package at '$deb'"
log "guest: $(cat "$kdir/version"); root $(basename "$tarball"); $(basename "$deb")"

# ---- the root: bookworm + the .deb + configuration ---------------------------------------
root=$work/root
mkdir -p "$root"
tar -C "$root" -xf "$tarball"
cp "$deb" "$root/tmp/rampart.deb"
chroot "$root" dpkg -i /tmp/rampart.deb >"$work/dpkg.out" 2>&1 ||
  fail "dpkg -i of the package failed in the guest root: $(tail -n 10 "$work/dpkg.out")"
rm "$root/tmp/rampart.deb"
chroot "$root" getent passwd rampart >/dev/null || fail "the postinst made no user rampart"
mkdir -p "$root/lib/modules/$kver/kernel/drivers/block"
cp "$kdir/modules/nbd.ko" "$root/lib/modules/$kver/kernel/drivers/block/"
touch "$root/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo}
depmod -b "$root" "$kver"
cp "$RAMPART_WORKLOAD" "$root/usr/local/bin/rampart-workload"
# Keep the image small: it is the guest's RAM.
rm -rf "$root"/usr/share/{doc,man,locale,info} "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/*

"$RAMPARTCTL" keygen "$root/etc/rampart/key" >/dev/null
: >"$root/etc/rampart/cluster"
for i in 1 2 3; do
  cat >"$root/etc/rampart/rampartd-$i.conf" <<EOF
listen = 127.0.0.1:707$i
memory = 384M
metrics = 127.0.0.1:947$i
lease = 60
# The hog's thrashing in its cgroup is this guest's memory pressure, and these servers
# share the guest with it: pressure must not make them refuse the very pages it swaps.
psi-threshold = 100
EOF
  echo "127.0.0.1:707$i" >>"$root/etc/rampart/cluster"
  ln -s /lib/systemd/system/rampartd@.service \
    "$root/etc/systemd/system/multi-user.target.wants/rampartd@$i.service"
done
# The servers lend 3 x 384 MiB, enough for 512 MiB x (1 + 1/2) x 1.1 (docs/operations.md,
# Sizing). A tiny spill store: the root is RAM, and a spill file is preallocated.
cat >"$root/etc/rampart/swap.conf" <<EOF
size=512M
cluster=/etc/rampart/cluster
key=/etc/rampart/key
redundancy=parity-log
group=2
# An emulated CPU shared with the host's other work answers slowly: a server that is
# merely slow must not count as failing.
timeout=10000
spill-size=16M
metrics-file=/run/rampart-swap.prom
EOF
# The package's postinst enabled rampart-swap.service; check that, do not redo it.
[[ -L $root/etc/systemd/system/multi-user.target.wants/rampart-swap.service ]] ||
  fail "the package did not enable rampart-swap.service"
echo rampart-guest >"$root/etc/hostname"
# No udev in the image, so no device units for the consoles: no gettys either (the
# checks write to the serial console themselves).
ln -sf /dev/null "$root/etc/systemd/system/serial-getty@.service"
ln -sf /dev/null "$root/etc/systemd/system/getty@.service"
ln -sf /dev/null "$root/etc/systemd/system/getty-static.service"
ln -sf /lib/systemd/systemd "$root/init"

install -m 0755 "$src_root/test/swap/guest/rampart-guest-check" "$root/usr/local/sbin/"
cp "$src_root/test/swap/guest/rampart-guest-check.service" "$root/etc/systemd/system/"
ln -s /etc/systemd/system/rampart-guest-check.service \
  "$root/etc/systemd/system/multi-user.target.wants/rampart-guest-check.service"
(cd "$root" && find . | cpio -o -H newc --quiet) >"$work/root.cpio"
log "root image: $(du -h "$work/root.cpio" | cut -f1) (initramfs, uncompressed)"

# ---- boot it, twice ------------------------------------------------------------------------
guest_mb=1536
boot() { # phase -> console log in $work/console-PHASE.log; returns when qemu exits
  local phase=$1 console=$work/console-$1.log
  # /dev/kvm here is a hypervisor a stock kernel cannot run on: software emulation.
  "$qemu" -accel tcg,thread=multi -m "$guest_mb" -smp 2 -nographic -no-reboot \
    -monitor none -nic none \
    -kernel "$kdir/vmlinuz" -initrd "$work/root.cpio" \
    -append "console=ttyS0 panic=-1 rampart.phase=$phase systemd.show_status=1 \
systemd.log_color=0 systemd.unified_cgroup_hierarchy=1 vm.min_free_kbytes=16384" \
    -serial file:"$console" </dev/null >"$work/qemu-$phase.out" 2>&1 &
  local pid=$!
  bg_pids+=("$pid")
  local t0=$SECONDS last=
  while kill -0 "$pid" 2>/dev/null; do
    ((SECONDS - t0 < 1500)) || fail "boot $phase did not finish within 1500 s: $(tail -n 20 "$console")"
    local line
    line=$(grep -a '^rampart-guest:' "$console" 2>/dev/null | tail -n1 || true)
    [[ $line != "$last" && -n $line ]] && { log "boot $phase: ${line#rampart-guest: }"; last=$line; }
    sleep 2
  done
  wait "$pid" || true
  log "boot $phase: qemu exited after $((SECONDS - t0)) s"
  [[ -z ${RAMPART_GUEST_KEEP:-} ]] || cp "$console" "$RAMPART_GUEST_KEEP/"
}

boot 1
c1=$work/console-1.log
grep -aq '^rampart-guest: PASS phase 1' "$c1" ||
  fail "boot 1 failed: $(grep -a -E 'rampart-guest|FAIL|Failed|panic|Out of memory' "$c1" | tail -n 30)"
# Shutdown order at the reboot (after the checks' last line): the swap device went away
# before its servers.
pass_line=$(grep -an '^rampart-guest: PASS phase 1' "$c1" | head -n1 | cut -d: -f1)
swap_stop=$(tail -n +"$pass_line" "$c1" | grep -an 'Stopped rampart-swap.service' |
            head -n1 | cut -d: -f1)
srv_stop=$(tail -n +"$pass_line" "$c1" | grep -an 'Stopped rampartd@' |
           head -n1 | cut -d: -f1)
[[ -n $swap_stop && -n $srv_stop ]] && ((swap_stop < srv_stop)) ||
  fail "at reboot, rampart-swap did not stop before the servers (lines ${swap_stop:-none}, ${srv_stop:-none})"
log "reboot: rampart-swap stopped before the servers"

boot 2
c2=$work/console-2.log
grep -aq '^rampart-guest: PASS phase 2' "$c2" ||
  fail "boot 2 failed: $(grep -a -E 'rampart-guest|FAIL|Failed|panic' "$c2" | tail -n 30)"

# The note: what the guest showed.
echo "---- swapon --show in the booted guest ----"
sed -n 's/^rampart-guest: swapon| //p' "$c1"
echo "---- metrics from the booted guest (excerpt) ----"
sed -n 's/^rampart-guest: metrics| //p' "$c1"
log "PASS"
