# Sourced by scripts/quickstart and the swap tests: a memory cgroup that makes a workload
# page, on cgroup v1 (/sys/fs/cgroup/memory/NAME, as on the machines we test on) or v2
# (/sys/fs/cgroup/NAME, Debian's default).
#
#   memcg_create NAME LIMIT     LIMIT in bytes or with K/M/G; swap use is left unlimited
#   memcg_spawn NAME CMD...     starts CMD inside it in the background; MEMCG_PID is CMD's
#                               own PID (to kill and to wait for: the status is CMD's)
#   memcg_wait NAME PID         waits for it, acting as the cgroup's OOM handler (below)
#   memcg_relieve_oom NAME      one look of that handler, for callers with their own loop
#   memcg_destroy NAME          moves nothing, just removes it (it must be empty)
#   memcg_path NAME             prints the directory

memcg_path() {
  if [[ -d /sys/fs/cgroup/memory ]]; then
    echo "/sys/fs/cgroup/memory/$1"
  elif [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    echo "/sys/fs/cgroup/$1"
  else
    return 1
  fi
}

memcg_create() { # name limit
  local dir
  dir=$(memcg_path "$1") || { echo "no memory cgroup controller under /sys/fs/cgroup" >&2; return 1; }
  mkdir -p "$dir" || return 1
  if [[ -f $dir/memory.limit_in_bytes ]]; then
    echo "$2" >"$dir/memory.limit_in_bytes" || return 1
    echo 100 >"$dir/memory.swappiness" 2>/dev/null || true
    # The kernel's OOM killer off: memcg_relieve_oom handles the cgroup's OOMs instead.
    echo 1 >"$dir/memory.oom_control" 2>/dev/null || true
    MEMCG_START_LIMIT[$1]=$(cat "$dir/memory.limit_in_bytes")
  else
    grep -qw memory /sys/fs/cgroup/cgroup.subtree_control \
      || echo +memory >/sys/fs/cgroup/cgroup.subtree_control || return 1
    echo "$2" >"$dir/memory.max" || return 1
    echo max >"$dir/memory.swap.max" 2>/dev/null || true
  fi
}

# The subshell joins the cgroup and then becomes CMD (exec), so the PID the caller holds
# is the workload's own: killing it kills the workload, not a shell above it that would
# leave the workload swapping (its pages then pin the swap device and the cgroup).
memcg_spawn() { # name cmd...
  local dir
  dir=$(memcg_path "$1") || return 1
  shift
  (echo "$BASHPID" >"$dir/cgroup.procs" && exec "$@") &
  MEMCG_PID=$!
}

# The userspace OOM handler, cgroup v1 only. memcg v1 reclaim sometimes gives up while
# the cgroup holds clean or writable swap-backed pages (seen here on 6.18: every anon page
# on the active list, none inactive, nothing under writeback, in swap-in readahead's
# charge). With a slow swap device and a tight limit that is frequent: 4 runs in 28 here
# at 64-128 MiB limits on rampart (2 of 10 more with swap discard off), none of 6 on a
# local-disk swap file, none of 18 with vm.page-cluster=2 (but 1.7x the time: fewer pages
# per swap-in read), none of 8 with 0 (3x the time). The OOM killer would end a workload
# that a moment later could go on. With the killer off (memcg_create) the kernel instead
# parks the faulting task and sets under_oom; the handler raises the limit by 1 MiB,
# which wakes the task to retry its fault. At most an
# eighth of the starting limit in all: past that it turns the OOM killer back on, so a
# cgroup that really cannot fit (a swap device that takes nothing) ends with an OOM kill,
# not with a workload that quietly ran in RAM. On v2 there is no such switch, and the
# callers rerun a workload that memcg_oom_verdict shows was OOM-killed without an I/O error.
declare -gA MEMCG_START_LIMIT=()
MEMCG_RELIEF_STEP=$((1 << 20))

# memcg_relieve_oom NAME: if cgroup NAME is under OOM, raises its limit one step (or turns
# the killer back on past the cap) and prints a line saying so; otherwise prints nothing.
# It keeps no count (the limit itself says how far it has gone), so it may run in a pipe.
memcg_relieve_oom() { # name
  local dir control limit start
  dir=$(memcg_path "$1") || return 0
  control=$(cat "$dir/memory.oom_control" 2>/dev/null) || return 0
  [[ $control == *"under_oom 1"* && $control == *"oom_kill_disable 1"* ]] || return 0
  start=${MEMCG_START_LIMIT[$1]:-0}
  limit=$(cat "$dir/memory.limit_in_bytes")
  # Past the cap, or if the limit will not move, the task must not stay parked.
  if ((limit + MEMCG_RELIEF_STEP - start > start / 8)) \
    || ! echo $((limit + MEMCG_RELIEF_STEP)) 2>/dev/null >"$dir/memory.limit_in_bytes"; then
    echo 0 >"$dir/memory.oom_control"
    echo "memory cgroup $1: out of memory at $((limit >> 20)) MiB, the most it may have; OOM killer back on"
    return 0
  fi
  echo "memory cgroup $1: the kernel's reclaim gave up (memcg OOM; the workload waits); limit raised to $(((limit + MEMCG_RELIEF_STEP) >> 20)) MiB"
}

# memcg_limit_raised NAME: how many MiB memcg_relieve_oom has added to NAME's limit.
memcg_limit_raised() { # name
  local dir
  dir=$(memcg_path "$1") || { echo 0; return; }
  [[ -f $dir/memory.limit_in_bytes && -n ${MEMCG_START_LIMIT[$1]:-} ]] || { echo 0; return; }
  echo $((($(cat "$dir/memory.limit_in_bytes") - MEMCG_START_LIMIT[$1]) >> 20))
}

# memcg_wait NAME PID: waits for PID (in cgroup NAME), handling the cgroup's OOMs
# meanwhile; returns PID's exit status.
memcg_wait() { # name pid
  while kill -0 "$2" 2>/dev/null; do
    memcg_relieve_oom "$1"
    sleep 0.1
  done
  wait "$2"
}

memcg_destroy() { # name
  local dir
  dir=$(memcg_path "$1") || return 0
  [[ -d $dir ]] || return 0
  for _ in $(seq 50); do
    rmdir "$dir" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "cannot remove cgroup $dir: $(wc -l <"$dir/cgroup.procs") processes still in it" >&2
  return 1
}

# memcg_oom_kills NAME: how many processes the kernel's OOM killer has killed in cgroup
# NAME (v1 memory.oom_control, v2 memory.events); read it before memcg_destroy.
memcg_oom_kills() { # name
  local dir file
  dir=$(memcg_path "$1") || return 1
  file=$dir/memory.oom_control
  [[ -f $file ]] || file=$dir/memory.events
  awk '$1 == "oom_kill" { n = $2 } END { print n + 0 }' "$file" 2>/dev/null || echo 0
}

# The kernel log as "STAMP<tab>LINE", STAMP being the seconds in the line's [ ... ].
kernel_log_stamped() {
  dmesg 2>/dev/null | awk 'match($0, /^\[ *[0-9]+\.[0-9]+\]/) {
    stamp = substr($0, RSTART + 1, RLENGTH - 2); sub(/^ +/, "", stamp); print stamp "\t" $0 }'
}

# memcg_kernel_log_mark: the stamp of the kernel log's last line, for memcg_oom_verdict.
# A stamp, not a line count: once the ring buffer is full (hours of uptime, a few OOM
# reports) old lines drop off as new ones arrive, and a count stops moving.
memcg_kernel_log_mark() { kernel_log_stamped | awk -F '\t' '{ t = $1 } END { print (t == "" ? 0 : t) }'; }

# memcg_kernel_log_since MARK: the kernel log's lines stamped after MARK.
memcg_kernel_log_since() { # mark
  kernel_log_stamped | awk -F '\t' -v mark="$1" '$1 + 0 > mark + 0 { print substr($0, length($1) + 2) }'
}

# memcg_oom_verdict NAME DEVICE MARK: after a workload in cgroup NAME died, tells whether
# the kernel's memory-cgroup OOM killer ended it while swap DEVICE reported no I/O error
# since MARK (memcg_kernel_log_mark). Returns 0 and prints the kernel's numbers then;
# returns 1 when DEVICE had I/O errors (printed), 2 when it was something else, 3 (with
# the reason) when the kernel log cannot be read: then an I/O error cannot be ruled out,
# and an OOM kill is no reason to try again.
# The cgroup's own oom_kill counter decides, so a full or unreadable kernel log cannot
# hide an OOM kill; the log only supplies I/O errors and the numbers.
# Callers rerun such a workload: why such OOMs happen is at memcg_relieve_oom, which
# heads most of them off on cgroup v1.
memcg_oom_verdict() { # name device mark
  local klog
  if ! dmesg >/dev/null 2>&1; then
    echo "the kernel log is unreadable (dmesg: $(dmesg 2>&1 >/dev/null | head -n 1)), so a swap I/O error cannot be ruled out; run as root or set kernel.dmesg_restrict=0"
    return 3
  fi
  klog=$(memcg_kernel_log_since "$3")
  if grep -q "I/O error, dev ${2#/dev/}" <<<"$klog"; then
    grep "I/O error, dev ${2#/dev/}" <<<"$klog" | tail -n 3
    return 1
  fi
  (($(memcg_oom_kills "$1") > 0)) || return 2
  grep -E 'memory: usage|swapcached|writeback [0-9]|inactive_anon|active_anon' <<<"$klog" | head -n 6
  return 0
}
