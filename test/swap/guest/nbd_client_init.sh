#!/bin/busybox sh
# /init of test_guest_nbd_client.sh's guest (a busybox initramfs on the Debian 6.1
# kernel). Everything the host must see goes to the serial console as "rampart-guest:
# ..." lines; the host parses "result", "stage", "takeover", "upgrade" and "end".
# /etc/guest.conf (written by the host) sets PROGRAM_MB (the nbd-client run's program)
# and HOG_OVER_MB (how much larger than its memory cgroup the hog is).
#
# In order:
#   nbd-client  Debian's nbd-client -swap on the host's nbdkit (10.0.2.100:10809), a
#               program of twice the guest's RAM that checks every page
#   deployed    'rampartctl swap on --frontend nbd' in here (rampart-nbd-server with
#               state=, a standby rampart-nbd-server, rampart-nbd-attach, the keeper),
#               the servers on the host; the hog swaps through it while the serving
#               daemon is killed with SIGKILL twice, then upgraded ('rampartctl swap
#               upgrade' onto a binary replaced as a package would replace it); once
#               the hog has ended, 'rampartctl swap off'
#   disk        the same hog on a swap disk of this guest (/dev/vda), for the ratio
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
# Programs that open /dev/fd/N (bash's process substitution) find it.
ln -s /proc/self/fd /dev/fd
mkdir -p /run /tmp /sys/fs/cgroup
. /etc/guest.conf
say() { echo "rampart-guest: $*"; }
finish() {
  [ "$1" = 0 ] || { echo "---- dmesg (last lines)"; dmesg | tail -n 30
                    for f in /run/rampart/rampart/*.log; do [ -e "$f" ] && { echo "---- $f"; tail -n 15 "$f"; }; done; }
  say "end $1"; sync; poweroff -f
}
now() { awk '{print $1}' /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }
stage_t0=$(now)
stage() { say "stage $1 $(since $stage_t0) s"; stage_t0=$(now); }

for m in $(cat /lib/modules/order); do insmod /lib/modules/$m || finish "cannot load $m"; done
ip link set lo up; ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
# The kernel must still be able to send swap-out traffic when memory is short.
echo 16384 >/proc/sys/vm/min_free_kbytes
# Debian's nbdkit 1.32 has a 192 MiB zero-filled segment, never touched, that the
# default heuristic overcommit refuses in this guest (test_guest_starved.sh's init says more).
echo 1 >/proc/sys/vm/overcommit_memory
# Swap-in one page a fault: the checks read their pages in scattered order.
echo 0 >/proc/sys/vm/page-cluster
say "memory $(awk '/MemTotal/ {print $2}' /proc/meminfo) KiB"
stage boot

# ---- nbd-client: Debian's client on the host's nbdkit ------------------------------------
if [ -z "$ONLY_DEPLOYED" ]; then
nbd-client 10.0.2.100 10809 /dev/nbd0 -N rampart -nonetlink -swap -block-size 4096 \
  || finish "nbd-client failed"
# nbd-client (ioctl mode) returns before its daemon child enters NBD_DO_IT, and only
# there does the kernel give /dev/nbd0 its size: mkswap run at once can see 0 bytes.
i=0
while [ ! -e /sys/block/nbd0/pid ] || [ "$(cat /sys/block/nbd0/size)" = 0 ]; do
  i=$((i + 1))
  [ $i -le 60 ] || finish "nbd-client did not bring /dev/nbd0 up within 60 s"
  sleep 1
done
mkswap /dev/nbd0 >/dev/null && swapon /dev/nbd0 || finish "swapon failed"
say "swap on: $(grep nbd0 /proc/swaps)"
vm() { awk -v k=$1 '$1 == k {print $2}' /proc/vmstat; }
out0=$(vm pswpout); in0=$(vm pswpin)
rampart-workload pages --size ${PROGRAM_MB}M >/tmp/nbd-client.out 2>&1
rc=$?
cat /tmp/nbd-client.out
say "workload exit $rc"
say "pswpout $(($(vm pswpout) - out0)) pswpin $(($(vm pswpin) - in0))"
swapoff /dev/nbd0 && nbd-client -d /dev/nbd0 >/dev/null 2>&1
[ $rc = 0 ] || finish "the nbd-client run failed"
stage nbd-client
fi
vm() { awk -v k=$1 '$1 == k {print $2}' /proc/vmstat; }

# ---- the hog: in a memory cgroup, so the pager beside it keeps its own memory -----------
mount -t cgroup2 none /sys/fs/cgroup || finish "cannot mount cgroup2"
echo +memory >/sys/fs/cgroup/cgroup.subtree_control
mkdir /sys/fs/cgroup/hog
# start_in_cgroup OUT SIZE: rampart-workload pages in the hog's cgroup, in the background.
start_in_cgroup() {
  sh -c 'echo $$ >/sys/fs/cgroup/hog/cgroup.procs; exec rampart-workload pages --size "$1"' \
    hog "$2" >"$1" 2>&1 &
  wpid=$!
}
swap_used() { awk -v d=$1 '$1 == d {print $4}' /proc/swaps; }
# wait_out DEVICE KIB: until the running program has KIB on DEVICE (1 when it ended first).
wait_out() {
  while kill -0 $wpid 2>/dev/null; do
    [ "$(swap_used $1)" -ge $2 ] 2>/dev/null && return 0
    sleep 0.5
  done
  return 1
}
io_errors() { dmesg | grep -c -E 'nbd[0-9]+.*I/O error|I/O error.*nbd[0-9]|(Read|Write)-error on swap-device'; }

# ---- deployed: rampartctl swap on --frontend nbd -----------------------------------------
export RAMPART_PLUGIN=/lib/nbdkit/rampart.so
rs=/run/rampart/rampart
rampartctl swap on --config /etc/rampart/swap.conf --frontend nbd >/tmp/on.out 2>&1 \
  || { cat /tmp/on.out; finish "rampartctl swap on --frontend nbd failed"; }
sed 's/^/rampart-guest: on| /' /tmp/on.out
grep -q "starting rampart-nbd-server" /tmp/on.out \
  || finish "swap on did not deploy rampart-nbd-server, though it is installed: $(grep starting /tmp/on.out | tr '\n' '|')"
# The daemons' logs (the standby's takeover, rampart-nbd-attach's reconnects, the keeper's
# new standbys) on the console as they are written: a guest that dies takes /run with it.
tail -F $rs/nbd-attach.log $rs/keeper.log $rs/nbdkit-0.log $rs/nbdkit-1.log $rs/nbdkit-2.log \
  $rs/nbdkit-3.log $rs/nbdkit-4.log $rs/nbdkit-5.log 2>/dev/null &
dev=$(sed -n 's/^device=//p' $rs/state | tail -n1)
rampartctl swap status | sed 's/^/rampart-guest: status| /'
status_pid() { rampartctl swap status 2>/dev/null | sed -n "s/^  $1: pid \([0-9]*\).*/\1/p"; }
[ -n "$(status_pid standby)" ] || finish "swap on --frontend nbd left no standby"
# swap.conf asks for two connections (connections=2): two hardware queues on the device,
# two connection threads in the pager; a takeover moves both.
queues() { ls -d /sys/block/${dev#/dev/}/mq/*/ 2>/dev/null | wc -l; }
conn_threads() { cat /proc/$1/task/*/comm 2>/dev/null | grep -c '^rampart-nbd[0-9]'; }
[ "$(queues)" = 2 ] || finish "$dev has $(queues) hardware queues; swap.conf asks for 2 connections"
[ "$(conn_threads $(status_pid serving))" -ge 2 ] \
  || finish "the pager serves $(conn_threads $(status_pid serving)) connections; swap.conf asks for 2"
say "connections: $dev has $(queues) hardware queues, the pager $(conn_threads $(status_pid serving)) connection threads"
stage swap-on

# A standby that dies while its pager lives: the keeper starts another.
standby=$(status_pid standby); t0=$(now)
kill -9 $standby
i=0
until new=$(status_pid standby) && [ -n "$new" ] && [ "$new" != $standby ] && kill -0 $new 2>/dev/null; do
  i=$((i + 1)); [ $i -le 120 ] || finish "the keeper started no standby within 60 s of pid $standby's death: $(tail -n 3 $rs/keeper.log | tr '\n' '|')"
  sleep 0.5
done
say "standby: pid $standby killed, the keeper started pid $new $(since $t0) s after: $(rampartctl swap status | grep '^  standby:')"
stage standby-restart

# The hog's cgroup: at most 48 MiB, and never more than leaves the rest of the guest (the
# pager and its standby, locked, and what the standby needs at its takeover) 40 MiB. The
# hog is HOG_OVER_MB larger than its cgroup: that much of it goes out through the device
# and comes back, enough for the kills and the upgrade to land while pages are out and
# I/O flows, without the hog filling the guest (an emulated guest swaps slowly).
avail=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
limit=$((avail - 40)); [ $limit -le 48 ] || limit=48
[ $limit -ge 24 ] || finish "only $avail MiB available once the pager runs: the hog's cgroup needs 24 MiB beside 40 for the rest"
hog_mb=$((limit + HOG_OVER_MB))
echo ${limit}M >/sys/fs/cgroup/hog/memory.max
say "hog: ${hog_mb} MiB in a ${limit} MiB memory cgroup (the guest has $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) MiB, $avail MiB available)"

# takeover N WHAT: the serving daemon killed with SIGKILL (kill) or handed over to a new
# binary (upgrade) under the hog: its standby must take the device over, the keeper must
# start a new standby (a new pid), and swap must move again, with no I/O error on the device.
takeover() {
  local n=$1 what=$2 serving standby new i errors0 moved0 t0 took attach
  kill -0 $wpid 2>/dev/null || finish "the hog ended before $what $n: $(cat /tmp/hog.out)"
  serving=$(status_pid serving); standby=$(status_pid standby)
  [ -n "$serving" ] && [ -n "$standby" ] || finish "$what $n: no serving ($serving) or standby ($standby) pid"
  errors0=$(io_errors)
  moved0=$(($(vm pswpin) + $(vm pswpout)))
  say "$what $n: the serving daemon (pid $serving), $(swap_used $dev) KiB in swap, standby pid $standby"
  t0=$(now)
  if [ $what = kill ]; then
    kill -9 $serving
  else
    rampartctl swap upgrade >/tmp/upgrade.out 2>&1 || { cat /tmp/upgrade.out; finish "rampartctl swap upgrade failed"; }
    sed 's/^/rampart-guest: upgrade| /' /tmp/upgrade.out
    standby=$(sed -n 's/^rampart-swap: .*standby (pid \([0-9]*\)) on the installed binary.*/\1/p' /tmp/upgrade.out | tail -n1)
    [ -n "$standby" ] || finish "upgrade $n: 'swap upgrade' did not name the standby it started"
  fi
  i=0
  until [ "$(status_pid serving)" = "$standby" ] && new=$(status_pid standby) && [ -n "$new" ] \
        && [ "$new" != "$standby" ] && [ "$new" != "$serving" ] && kill -0 $new 2>/dev/null; do
    i=$((i + 1)); [ $i -le 600 ] || finish "$what $n: no takeover and new standby within 300 s: $(rampartctl swap status 2>&1 | tr '\n' '|') keeper: $(tail -n 3 $rs/keeper.log | tr '\n' '|')"
    sleep 0.5
  done
  kill -0 $serving 2>/dev/null && finish "$what $n: the old pager (pid $serving) still runs"
  # Requests in flight at the kill go out again when rampart-nbd-attach's --timeout (30 s,
  # what 'swap on' deploys) passes: swap must move again well within twice that. A
  # shorter --timeout would cut that wait, but it is not the deployed one, and this
  # emulated pager answers in seconds (its swap.conf has timeout=10000): alive, it would
  # trip it, and the driver send a request again while its first copy is in the engine.
  i=0
  while [ $(($(vm pswpin) + $(vm pswpout))) = $moved0 ]; do
    i=$((i + 1)); [ $i -le 180 ] || finish "$what $n: no swap moved within 90 s of the takeover"
    sleep 0.5
  done
  # What the standby told rampart-swap (sd_notify, kept in notify.log by its pid).
  took=$(sed -n "s/^$standby STATUS=took over .*, \([0-9]*\) ms after.*/\1/p" $rs/notify.log | tail -n1)
  attach=$(grep 'reconnected to' $rs/nbd-attach.log | tail -n1 | sed 's/.* \([0-9]*\) ms after.*/\1/')
  [ $(io_errors) = $errors0 ] || finish "$what $n: I/O errors on $dev: $(dmesg | grep -E 'I/O error|error on swap' | tail -n 3 | tr '\n' '|')"
  # Both connections moved: the new pager serves each (a reconnect of one would leave the
  # other dead, its queue's requests waiting).
  i=0
  until [ "$(conn_threads $standby)" -ge 2 ]; do
    i=$((i + 1)); [ $i -le 60 ] || finish "$what $n: the new pager serves $(conn_threads $standby) connections of 2: $(grep reconnect $rs/nbd-attach.log | tail -n 2 | tr '\n' '|')"
    sleep 0.5
  done
  say "takeover $what $n: pid $serving gone, pid $standby serves (took the state over ${took:-?} ms after, device on it ${attach:-?} ms after the connection died), new standby pid $new, swap moving $(since $t0) s after, 0 I/O errors"
}

t_hog=$(now)
out0=$(vm pswpout); in0=$(vm pswpin)
start_in_cgroup /tmp/hog.out ${hog_mb}M
# The kills at a quarter and at half of what goes out, the upgrade right after the second
# takeover: all three with the hog's pages out and swap moving.
wait_out $dev $((HOG_OVER_MB * 256)) || finish "the hog ended before $((HOG_OVER_MB / 4)) MiB were swapped out: $(cat /tmp/hog.out)"
takeover 1 kill
wait_out $dev $((HOG_OVER_MB * 512)) || finish "the hog ended before $((HOG_OVER_MB / 2)) MiB were swapped out: $(cat /tmp/hog.out)"
takeover 2 kill
# The upgrade: a new daemon binary where the old one was (a new inode, as dpkg installs
# it), one that differs from the running one by a trailing mark.
cp /bin/rampart-nbd-server /bin/.rampart-nbd-server.new
echo "rampart-guest upgrade" >>/bin/.rampart-nbd-server.new
mv /bin/.rampart-nbd-server.new /bin/rampart-nbd-server
# An installed binary whose state layout differs is refused before anything is stopped:
# the running pager's recorded layout is made to differ for one try.
layout=$(sed -n 's/^state_layout=//p' $rs/state | tail -n1)
serving=$(status_pid serving); standby=$(status_pid standby)
echo state_layout=1.0 >>$rs/state
rampartctl swap upgrade >/tmp/refused.out 2>&1 && finish "'swap upgrade' went ahead with another state layout"
echo state_layout=$layout >>$rs/state
grep -q "refusing to upgrade 'rampart': the state layout changed" /tmp/refused.out \
  || finish "'swap upgrade' failed, but not with the layout refusal: $(cat /tmp/refused.out)"
[ "$(status_pid serving)" = $serving ] && [ "$(status_pid standby)" = $standby ] \
  || finish "the refused upgrade changed the pager ($serving) or the standby ($standby)"
sed 's/^/rampart-guest: refusal| /' /tmp/refused.out
takeover 3 upgrade
new_pager=$(status_pid serving)
[ "$(readlink /proc/$new_pager/exe)" = /bin/rampart-nbd-server ] \
  || finish "the pager after the upgrade (pid $new_pager) does not run the installed binary: $(readlink /proc/$new_pager/exe)"
say "upgrade: pid $new_pager runs the installed rampart-nbd-server (inode $(stat -L -c %i /proc/$new_pager/exe), on disk $(stat -c %i /bin/rampart-nbd-server))"
wait $wpid; rc=$?
cat /tmp/hog.out
say "result deployed rc=$rc wall=$(since $t_hog) out=$(($(vm pswpout) - out0)) in=$(($(vm pswpin) - in0)) io_errors=$(io_errors) $(grep '^workload' /tmp/hog.out)"
[ $rc = 0 ] || finish "the hog on the deployed NBD frontend failed"
stage hog-deployed

# The hog has ended: 'swap off' brings home what is left on the device (other processes'
# pages) and stops the daemons. Its refusal when the pages cannot fit is
# test_guest_systemd's to check.
rampartctl swap status | sed -n 's/^\(failures\|wire\|spill\|pages\) /rampart-guest: stats| &/p'
left=$(swap_used $dev)
rampartctl swap off >/tmp/off.out 2>&1 || finish "rampartctl swap off failed with ${left:-?} KiB on $dev and $(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo) MiB available: $(tail -n 4 /tmp/off.out | tr '\n' '|')"
sed 's/^/rampart-guest: off| /' /tmp/off.out
grep -q "$dev" /proc/swaps && finish "$dev is still swap after 'swap off'"
[ -e $rs/state ] && finish "'swap off' left $rs/state behind"
say "off: ${left:-0} KiB brought home from $dev, the daemons stopped"
errors=$(io_errors)
[ $errors = 0 ] || finish "$errors I/O errors on the NBD device"
stage off

# ---- disk: the same hog on a swap disk of this guest -------------------------------------
mkswap /dev/vda >/dev/null && swapon /dev/vda || finish "swapon /dev/vda failed"
t_hog=$(now)
out0=$(vm pswpout); in0=$(vm pswpin)
start_in_cgroup /tmp/disk.out ${hog_mb}M
wait $wpid; rc=$?
cat /tmp/disk.out
say "result disk rc=$rc wall=$(since $t_hog) out=$(($(vm pswpout) - out0)) in=$(($(vm pswpin) - in0)) $(grep '^workload' /tmp/disk.out)"
swapoff /dev/vda
[ $rc = 0 ] || finish "the hog on the swap disk failed"
stage disk
finish 0
