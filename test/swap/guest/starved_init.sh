#!/bin/busybox sh
# /init of the starved guest (test_guest_starved.sh builds the initramfs around it): the
# swap daemon (rampart-nbd-server, nbdkit rampart or rampart-ublk) runs in this guest, inside the memory shortage its
# swap relieves. No cgroup: the guest as a whole has RAM_MB and runs programs of twice
# that. Everything the host must see goes to the serial console as "rampart-guest: ..."
# lines; the host parses "result", "fault", "stall" and "end". /etc/starved.conf (written
# by the host) sets SERVERS, KILL_ADDR, PROGRAM_MB, DEVICE_SIZE, RUNS, STALL_SECONDS and
# FRONTEND (nbd: nbdkit rampart + Debian's nbd-client; nbd-server: rampart-nbd-server, the
# NBD daemon rampartctl swap deploys, + Debian's nbd-client; ublk: rampart-ublk). A run
# names its frontend; a run on the other one stops the daemon and starts that one. An nbd
# or nbd-server run that kills the pager runs rampart-nbd-server beside a standby,
# attached with rampart-nbd-attach instead (nbd-persist).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mkdir -p /tmp /run; mount -t tmpfs -o size=16m tmpfs /tmp
. /etc/starved.conf
say() { echo "rampart-guest: $*"; }
# A failure shows the kernel's last words too (a segfault, the OOM killer, an NBD error).
finish() {
  [ "$1" = 0 ] || { echo "---- dmesg (last lines)"; dmesg | tail -n 40; }
  say "end $1"; sync; poweroff -f
}

for m in $(cat /lib/modules/order); do
  insmod /lib/modules/$m || finish "cannot load $m"
done
ip link set lo up; ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
# The kernel must still be able to send swap-out traffic when memory is short (what the
# host-side guest test found: the default stalled the NBD socket in half the runs).
echo 16384 >/proc/sys/vm/min_free_kbytes
# Debian's nbdkit 1.32 has a 192 MiB zero-filled (bss) segment. The default heuristic
# overcommit refuses a single mapping larger than RAM + swap, so in this guest (145 MiB
# of RAM, and no swap before nbdkit serves it) the exec itself fails and nbdkit dies of
# SIGSEGV. The segment is never touched (and the plugin locks only what is touched), so
# overcommit it.
echo 1 >/proc/sys/vm/overcommit_memory
# If the guest hangs past the host's timeout, the host sends SysRq w and t through qemu's
# monitor (blocked tasks, then every task's stack): allow them.
echo 1 >/proc/sys/kernel/sysrq
[ -n "${GUEST_SYSCTL:-}" ] && for kv in $GUEST_SYSCTL; do echo ${kv#*=} >/proc/sys/${kv%%=*}; done
say "memory $(awk '/MemTotal/ {print $2}' /proc/meminfo) KiB, $(nproc) cpu"

# ---- the daemon, in here -------------------------------------------------------------
# stderr goes to the console, so its warnings (mlockall, PR_SET_IO_FLUSHER) are in the
# host's log. lease=10: a killed server is declared lost (and its pages rebuilt) 10 s
# after the kill, while the 3 s outage stays well inside it. The spill store is a disk
# (/dev/vdb), not a file in this RAM-backed root.
settings="servers=$SERVERS key=/etc/rampart/key redundancy=parity-log group=4 lease=10
  spill=/dev/vdb stats-file=/tmp/stats"
frontend=

# wait_for CONDITION-COMMAND PID SECONDS WHAT: polls the command every 0.1 s until it
# succeeds; fails the boot, saying WHAT, when PID exits first or SECONDS pass.
wait_for() {
  local i=0
  until eval "$1"; do
    i=$((i + 1)); [ $i -le $(($3 * 10)) ] || finish "$4 within $3 s"
    kill -0 $2 2>/dev/null || { wait $2; finish "$4: pid $2 exited with status $?"; }
    sleep 0.1
  done
}

# launch_ublk: rampart-ublk, the engine's own ublk target (ublk/), which prints the device
# once it takes I/O; sets daemon_pid. Its queue depth and largest request bound its
# locked buffers (32 x 128 KiB = 4 MiB). With state= the device outlives the daemon, and
# a standby started beside it (standby=true, the same settings) takes the device over the
# moment it dies (kill_pager): in a starved machine nothing can be started after the
# crash, since every task that allocates waits on the device (ublk/ublk_standby.h).
# A run that names its queue count (bench/guest --queues) gets them as rampart-swap sizes
# them: about 64 requests in flight over the queues, at least 16 per queue. The standby
# takes the same ublk_args.
launch_ublk() { # [queues]
  ublk_args="--id 0 --depth 32 --max-io 131072"
  if [ -n "${1:-}" ]; then
    depth=$((64 / $1)); [ $depth -ge 16 ] || depth=16
    ublk_args="--id 0 --queues $1 --depth $depth --max-io 131072"
  fi
  rampart-ublk $ublk_args size=$DEVICE_SIZE $settings state=/run/rampart-ublk.state \
    </dev/null >/tmp/ublk.out &
  daemon_pid=$!
  wait_for "grep -q /dev/ublkb0 /tmp/ublk.out 2>/dev/null" $daemon_pid 30 \
    "rampart-ublk did not bring /dev/ublkb0 up"
  # Only where a run kills the pager: a standby holds memory (its reserve, its own
  # locked pages) that a comparison of the frontends should not be charged.
  case " $RUNS " in
    *pager*)
      rampart-ublk standby=true $ublk_args size=$DEVICE_SIZE $settings \
        state=/run/rampart-ublk.state </dev/null >/tmp/ublk-standby.out &
      standby_pid=$! ;;
  esac
}

# launch_nbd_server SOCKET [KEY=VALUE...]: rampart-nbd-server (nbd/) on a unix socket in
# the background; sets last_pid once the socket is there.
launch_nbd_server() {
  local sock=$1; shift
  rampart-nbd-server --unix $sock size=$DEVICE_SIZE "$@" </dev/null &
  last_pid=$!
  wait_for "[ -S $sock ]" $last_pid 30 "rampart-nbd-server did not create $sock"
}

# launch_nbd_persist: rampart-nbd-server with state=, a standby beside it (standby=true,
# the same settings, its own socket), and /dev/nbd0 attached by rampart-nbd-attach
# (nbd/), which moves the device to the standby when the serving daemon dies. Debian
# 12's nbd-client cannot: its -persist fails every request while it reconnects
# (docs/recovery.md). Sets daemon_pid, standby_pid and attach_pid.
persist_settings="$settings state=/run/rampart-nbd.state"
launch_nbd_persist() {
  launch_nbd_server /run/nbd.sock $persist_settings
  daemon_pid=$last_pid
  launch_nbd_server /run/nbd-standby.sock $persist_settings standby=true
  standby_pid=$last_pid
  # stdout: the device, then a line per reconnect (kill_pager waits for it); its
  # messages go to the console.
  rampart-nbd-attach --device /dev/nbd0 /run/nbd.sock /run/nbd-standby.sock \
    </dev/null >/tmp/attach.out &
  attach_pid=$!
  wait_for "grep -q /dev/nbd0 /tmp/attach.out 2>/dev/null" $attach_pid 30 \
    "rampart-nbd-attach did not bring /dev/nbd0 up"
}

# kill_pager: the pager itself killed with SIGKILL in the middle of a run (docs/recovery.md). The
# kernel holds the device's I/O; the standby takes over the state the dead daemon left,
# and every request the dead one had is sent again (docs/recovery.md). ublk: the
# standby says on the console how long the device went without a daemon. nbd: the
# standby says when it took the state over, rampart-nbd-attach when the device
# had its new connection. This says when swap moved.
kill_pager() {
  local old=$daemon_pid s0 took
  case $frontend in
    ublk) took=/tmp/ublk-standby.out; pattern=/dev/ublkb0 ;;
    nbd-persist) took=/tmp/attach.out; pattern=reconnected ;;
    *) finish "the pager fault needs the ublk or the nbd-persist frontend" ;;
  esac
  say "fault pager at $(awk -v d=$swapdev '$1 == d {print int($4 / 1024)}' /proc/swaps) MiB swapped out: kill -9 the $frontend daemon (pid $old), standby pid $standby_pid"
  s0=$(swaps)
  kill -9 $old
  wait $old 2>/dev/null
  wait_for "grep -q $pattern $took 2>/dev/null" $standby_pid 60 \
    "the standby did not take $swapdev over (its log: $(tr '\n' ' ' <$took 2>/dev/null))"
  daemon_pid=$standby_pid
  standby_pid=
  i=0
  while [ "$(swaps)" = "$s0" ] && [ $i -lt 600 ]; do i=$((i + 1)); sleep 0.1; done
  say "pager restarted: the standby (pid $daemon_pid) serves $swapdev; swap moved again ($(( $(swaps) - s0 )) pages since the kill)"
  [ $frontend = nbd-persist ] && say "pager restarted: $(grep reconnected $took)"
  return 0
}

# start_daemon nbd|nbd-server|nbd-persist|ublk [QUEUES]: the rampart device through that frontend, made
# swap (mkswap): sets daemon_pid, daemon_queues and swapdev. A boot may run both, one after the
# other, to compare them in the same guest (bench/guest).
start_daemon() {
  frontend=$1
  daemon_queues=${2:-}
  if [ $frontend = ublk ]; then
    launch_ublk $daemon_queues
    swapdev=/dev/ublkb0
  elif [ $frontend = nbd-persist ]; then
    launch_nbd_persist
    swapdev=/dev/nbd0
  else
    if [ $frontend = nbd-server ]; then
      launch_nbd_server /run/nbd.sock $settings
      daemon_pid=$last_pid
    else
      nbdkit --foreground --unix /run/nbd.sock /lib/nbdkit/rampart.so size=$DEVICE_SIZE \
        $settings </dev/null &
      daemon_pid=$!
      wait_for "[ -S /run/nbd.sock ]" $daemon_pid 30 "nbdkit did not create /run/nbd.sock"
    fi
    nbd-client -u /run/nbd.sock /dev/nbd0 -N rampart -nonetlink -swap -block-size 4096 \
      || finish "nbd-client failed"
    # nbd-client (ioctl mode) returns before its daemon child enters NBD_DO_IT, and only
    # there does the kernel give /dev/nbd0 its size.
    i=0
    while [ ! -e /sys/block/nbd0/pid ] || [ "$(cat /sys/block/nbd0/size)" = 0 ]; do
      i=$((i + 1)); [ $i -le 60 ] || finish "nbd-client did not bring /dev/nbd0 up within 60 s"
      sleep 1
    done
    swapdev=/dev/nbd0
  fi
  mkswap $swapdev >/dev/null || finish "mkswap $swapdev failed"
  say "daemon ($frontend${daemon_queues:+, $daemon_queues queues}) pid $daemon_pid, threads $(ls /proc/$daemon_pid/task | wc -l), $(daemon_memory)"
}

# stop_daemon: its last memory and stats onto the console, then the device detached and
# the daemon stopped.
stop_daemon() {
  [ -n "$frontend" ] || return 0
  say "daemon ($frontend) at the end: $(daemon_memory)"
  say "stats:"; sed 's/^/rampart-guest: stats /' /tmp/stats
  if [ $frontend = nbd ] || [ $frontend = nbd-server ]; then
    nbd-client -d /dev/nbd0 >/dev/null 2>&1
    kill -TERM $daemon_pid 2>/dev/null
  elif [ $frontend = nbd-persist ]; then
    # rampart-nbd-attach detaches the device as it stops; the standby sees its pager
    # stop cleanly (the state goes with it) and ends by itself.
    kill -TERM $attach_pid; wait $attach_pid
    kill -TERM $daemon_pid 2>/dev/null
    [ -z "${standby_pid:-}" ] || wait $standby_pid
  else
    kill -TERM $daemon_pid
    # A standby sees its device stopped and ends by itself.
    [ -z "${standby_pid:-}" ] || wait $standby_pid
  fi
  wait $daemon_pid
  say "$frontend daemon stopped with status $?"
  rm -f /tmp/stats /run/nbd.sock /run/nbd-standby.sock
  frontend=
}
mkswap /dev/vda >/dev/null || finish "mkswap /dev/vda failed"
swaps() { awk '/^pswpin / {i = $2} /^pswpout / {o = $2} END {print i + o}' /proc/vmstat; }
# VmLck counts locked mappings whole, touched or not; VmRSS is what the daemon holds.
daemon_memory() {
  echo "$(awk '/^(VmLck|VmRSS|VmHWM):/ {printf "%s %s kB ", $1, $2}' /proc/$daemon_pid/status)"
}


# The watchdog (rampart-swap-watchdog, swap/guest/swap_watchdog.c): while a workload
# runs, pswpin + pswpout must move. If they stand still for STALL_SECONDS it prints what
# the daemon's threads are blocked in, the NBD device's queue, memory and /tmp/stats,
# and powers the guest off (the host fails the test on "stall"). A program that locks
# itself in memory, not a shell loop: the shell watchdog was once itself swapped out and
# stuck behind the very hang it was there to report.

# fault_when_swapped KIB WHAT: says "fault WHAT" (the host then kills a server or stops
# them all) once KIB of the running workload are on the rampart device, so the fault hits while
# the guest is starved and the daemon holds pages.
fault_when_swapped() { # kib what workload-pid
  while kill -0 $3 2>/dev/null; do
    used=$(awk -v d=$swapdev '$1 == d {print $4}' /proc/swaps)
    if [ "${used:-0}" -ge $1 ]; then say "fault $2 at $((used / 1024)) MiB swapped out"; return; fi
    sleep 1
  done
}

# fault_every SECONDS WHAT PID: says "fault WHAT" every SECONDS while the workload runs
# (the fault "outages": many outages in one run, to dig for a rare hang).
fault_every() {
  while sleep $1 && kill -0 $3 2>/dev/null; do
    say "fault $2 at $(awk -v d=$swapdev '$1 == d {print int($4 / 1024)}' /proc/swaps) MiB swapped out"
  done
}

# watch_all_lost WORKLOAD-PID: once every server is lost (the lease ran out and none came
# back), what each of the daemon's threads is blocked in, from its kernel stack, onto the
# console: whether its reconnects wait on the servers or on this starved kernel.
watch_all_lost() {
  local n lost a t
  n=$(echo $SERVERS | tr ',' '\n' | grep -c .)
  while kill -0 $1 2>/dev/null; do
    lost=0
    for a in $(echo $SERVERS | tr ',' ' '); do
      grep -q "$a *lost" /tmp/stats 2>/dev/null && lost=$((lost + 1))
    done
    if [ $lost -ge $n ]; then
      say "every server lost: the daemon's threads (pid $daemon_pid), their kernel stacks:"
      for t in /proc/$daemon_pid/task/*; do
        echo "---- ${t##*/} $(cat $t/comm 2>/dev/null) $(awk '{print $3}' $t/stat 2>/dev/null) $(cat $t/wchan 2>/dev/null)"
        cat $t/stack 2>/dev/null
      done
      return
    fi
    sleep 1
  done
}

# Where the guest's one CPU went during a run, to tell a slow path (the CPU busy) from a
# waiting one (idle while requests travel): the CPU's jiffies as "busy idle iowait", and
# the daemon's own user+system jiffies.
cpu_jiffies() {
  awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $5, $6}' /proc/stat
}
daemon_jiffies() { awk '{print $14 + $15}' /proc/$daemon_pid/stat; }
# cpu_report "BUSY IDLE IOWAIT" DAEMON-JIFFIES: the shares since then.
cpu_report() {
  set -- $1 $2 $(cpu_jiffies) $(daemon_jiffies)
  awk -v b=$(($5 - $1)) -v i=$(($6 - $2)) -v w=$(($7 - $3)) -v d=$(($8 - $4)) \
    'BEGIN { t = b + i + w; if (t == 0) t = 1;
             printf "cpu busy %d%% idle %d%% iowait %d%%, daemon %d%%", 100 * b / t, 100 * i / t, 100 * w / t, 100 * d / t }'
}

# run NAME DEVICE WORKLOAD [FAULT]: one workload of PROGRAM_MB on swap DEVICE alone.
# swapon -d as rampart-swap deploys it (--discard=pages), and once at swapon, so the
# device starts each run empty: a rebuild after a kill has only this run's pages to
# rebuild, not every earlier run's pages that swapoff left written.
run() {
  local name=$1 dev=$2 wl=$3 fault=${4:-} out=/tmp/$1.out rc before after t0 cpu0 d0
  swapon -d $dev || finish "swapon $dev failed"
  say "run $name: $wl ${PROGRAM_MB}M on $dev"
  before=$(swaps)
  cpu0=$(cpu_jiffies); d0=$(daemon_jiffies)
  rampart-workload $wl --size ${PROGRAM_MB}M >$out 2>&1 &
  wpid=$!
  rampart-swap-watchdog $wpid $daemon_pid $STALL_SECONDS --poweroff &
  dog=$!
  lost_watch=
  [ $dev != /dev/vda ] && { watch_all_lost $wpid & lost_watch=$!; }
  case "$fault" in
    outages) fault_every 20 outage $wpid & ;;
    pager) fault_when_swapped 65536 pager $wpid; kill -0 $wpid 2>/dev/null && kill_pager ;;
    # kill+pager: a rampartd killed, and while its pages are rebuilt, the pager itself
    kill+pager) fault_when_swapped 65536 kill $wpid
                fault_when_swapped 98304 pager $wpid; kill -0 $wpid 2>/dev/null && kill_pager ;;
    ?*) fault_when_swapped 65536 $fault $wpid ;;
  esac
  wait $wpid
  rc=$?
  kill $dog 2>/dev/null; wait $dog 2>/dev/null
  [ -z "$lost_watch" ] || { kill $lost_watch 2>/dev/null; wait $lost_watch 2>/dev/null; }
  after=$(swaps)
  swapoff $dev || finish "swapoff $dev failed after run $name"
  say "result $name rc=$rc swaps=$((after - before)) $(grep '^workload' $out || tail -n 3 $out | tr '\n' ' ')"
  say "cpu $name: $(cpu_report "$cpu0" "$d0")"
  [ $dev != /dev/vda ] && say "daemon $name: $(daemon_memory)"
  [ $rc = 0 ] || { cat $out; finish "run $name failed"; }
}

# wait_rebuilt: after a server was killed, the engine must declare it lost and rebuild
# every page it held (kill9's check: nothing pending, a finished rebuild).
wait_rebuilt() {
  i=0
  until grep -q "$KILL_ADDR *lost" /tmp/stats && grep -q 'rebuild pending 0,' /tmp/stats \
        && grep -q '^rebuild *last' /tmp/stats; do
    i=$((i + 1)); [ $i -le 60 ] || { cat /tmp/stats; finish "no finished rebuild 60 s after the run"; }
    sleep 1
  done
}

# The first rampart run's frontend starts first (FRONTEND when every run is on the disk,
# which needs a daemon too: its watchdog and CPU report watch it).
# An nbd run that kills the pager needs the recoverable NBD frontend.
run_frontend() { # device fault
  case "$1:$2" in nbd:*pager* | nbd-server:*pager*) echo nbd-persist ;; *) echo $1 ;; esac
}
first=${FRONTEND:-nbd}
first_queues=
for r in $RUNS; do
  IFS=: read name dev wl fault queues <<EOF2
$r
EOF2
  case $dev in nbd|nbd-server|ublk) first=$(run_frontend $dev "$fault"); first_queues=$queues; break ;; esac
done
start_daemon $first $first_queues
for r in $RUNS; do
  # name:device:workload[:fault[:queues]] (queues: rampart-ublk's, for a ublk run)
  IFS=: read name dev wl fault queues <<EOF2
$r
EOF2
  case $dev in
    nbd|nbd-server|ublk)
      want=$(run_frontend $dev "$fault")
      [ "$frontend" = $want ] && [ "$daemon_queues" = "$queues" ] \
        || { stop_daemon; start_daemon $want $queues; }
      dev=$swapdev ;;
    disk) dev=/dev/vda ;;
  esac
  run $name $dev $wl $fault
  # The host then starts the killed server again (empty, as systemd would), so a later
  # run has the whole cluster and a later kill takes a server away again.
  case "$fault" in kill|kill+pager) wait_rebuilt; say "rebuilt after $name" ;; esac
done
stop_daemon
finish 0
