# Sourced by scripts/quickstart and the swap tests: a memory cgroup that makes a workload
# page, on cgroup v1 (/sys/fs/cgroup/memory/NAME, as on the machines we test on) or v2
# (/sys/fs/cgroup/NAME, Debian's default).
#
#   memcg_create NAME LIMIT     LIMIT in bytes or with K/M/G; swap use is left unlimited
#   memcg_spawn NAME CMD...     starts CMD inside it in the background; MEMCG_PID is CMD's
#                               own PID (to kill and to wait for: the status is CMD's)
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

# memcg_kernel_log_mark: a mark in the kernel log, for memcg_oom_verdict.
memcg_kernel_log_mark() { dmesg 2>/dev/null | wc -l; }

# memcg_oom_verdict NAME DEVICE MARK: after a workload in cgroup NAME died, tells whether
# the kernel's memory-cgroup OOM killer ended it while swap DEVICE reported no I/O error
# since MARK (memcg_kernel_log_mark). Returns 0 and prints the kernel's numbers then;
# returns 1 when DEVICE had I/O errors (printed), 2 when it was something else.
# Why it matters: memcg v1 reclaim on recent kernels sometimes gives up with clean,
# reclaimable swap-cache pages in hand (seen here: inactive_anon 0, writeback 0, 66 MB
# swapcached). That is the kernel's verdict on its own heuristics, not a page the swap
# device failed to store or return, and a rerun normally completes.
memcg_oom_verdict() { # name device mark
  local klog
  klog=$(dmesg 2>/dev/null | tail -n +"$(($3 + 1))")
  if grep -q "I/O error, dev ${2#/dev/}" <<<"$klog"; then
    grep "I/O error, dev ${2#/dev/}" <<<"$klog" | tail -n 3
    return 1
  fi
  grep -q "oom_memcg=[^,]*/$1," <<<"$klog" || return 2
  grep -E 'memory: usage|swapcached|writeback [0-9]|inactive_anon|active_anon' <<<"$klog" | head -n 6
  return 0
}
