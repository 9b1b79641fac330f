# Sourced by scripts/demo, scripts/quickstart, bench/device and the swap tests: a cluster
# of rampartd processes on 127.0.0.1, on ports the kernel picks, stopped by PID.
#
#   rampartd_listen_addr OUT                       the H:P a rampartd printed to OUT, if yet
#   cluster_start DIR N MEMORY KEY [NAME-PREFIX]   fills CLUSTER_PIDS and CLUSTER_ADDRS
#   cluster_servers                                prints "H:P,H:P,..."
#   cluster_kill9 I                                SIGKILL server I (0-based), as a crash
#   cluster_restart I                              start killed server I again, empty, at
#                                                  its address
#   cluster_stop                                   SIGTERM every live server, SIGKILL after 5 s;
#                                                  CLUSTER_BAD then names each server that
#                                                  died on its own or exited non-zero
# Needs $RAMPARTD (path to rampartd). Logs go to DIR/rampartd-I.log. CLUSTER_ARGS (an
# array, empty by default) adds rampartd options, after the defaults so they win.
# CLUSTER_NETNS (a network namespace the caller made) and CLUSTER_HOST (an address there)
# start the servers in that namespace instead, listening on that address: a guest on a tap
# device in the namespace then reaches them directly.

CLUSTER_PIDS=()
CLUSTER_ADDRS=()
[[ -v CLUSTER_ARGS ]] || CLUSTER_ARGS=()
CLUSTER_KILLED=()
CLUSTER_BAD=()
CLUSTER_STARTS=() # per server: "dir|memory|key|name", what cluster_restart starts again

# rampartd_listen_addr OUT: prints the address from rampartd's "listening on H:P" line in
# file OUT, or nothing yet. OUT is the started process's stdout, which that process (not
# the caller) creates, so a first look can find no file at all; that is "not yet" too.
rampartd_listen_addr() { # out
  [[ -f $1 ]] || return 0
  sed -n 's/^rampartd: listening on \([^ ]*:[0-9][0-9]*\).*$/\1/p' "$1" | head -n1
}

# cluster_start_one I LISTEN: starts server I (0-based) as CLUSTER_STARTS[I] describes it,
# listening on LISTEN (H:P, port 0: the kernel picks), and waits until it says where.
cluster_start_one() { # index listen
  local i=$1 listen=$2 dir memory key name pid addr out
  IFS='|' read -r dir memory key name <<<"${CLUSTER_STARTS[$i]}"
  out=$dir/rampartd-$((i + 1)).out
  # --psi-threshold 100: on one host, the memory pressure PSI reports is the very
  # workload we make page (a cgroup's stalls count host-wide), and a server that
  # answered it would refuse the pages. Servers on other hosts keep the default.
  # 'ip netns exec' enters the namespace and execs rampartd: the PID is the server's.
  ${CLUSTER_NETNS:+ip netns exec "$CLUSTER_NETNS"} \
  "$RAMPARTD" --listen "$listen" --memory "$memory" --key "$key" --name "$name" \
    --lease 10 --psi-threshold 100 --foreground "${CLUSTER_ARGS[@]}" >"$out" 2>>"$dir/rampartd-$((i + 1)).log" </dev/null &
  pid=$!
  CLUSTER_PIDS[$i]=$pid
  unset 'CLUSTER_KILLED[i]'
  for _ in $(seq 100); do # 10 s
    addr=$(rampartd_listen_addr "$out")
    [[ -n $addr ]] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "rampartd $name exited before listening:" >&2
      tail -n 5 "$dir/rampartd-$((i + 1)).log" >&2
      return 1
    fi
    sleep 0.1
  done
  if [[ -z $addr ]]; then
    echo "rampartd $name did not say where it listens within 10 s" >&2
    return 1
  fi
  CLUSTER_ADDRS[$i]=$addr
}

cluster_start() { # dir n memory key [prefix]
  local dir=$1 n=$2 memory=$3 key=$4 prefix=${5:-rampartd} i first=${#CLUSTER_PIDS[@]}
  for ((i = first; i < first + n; i++)); do
    CLUSTER_STARTS[$i]="$dir|$memory|$key|$prefix-$((i - first + 1))"
    cluster_start_one "$i" "${CLUSTER_HOST:-127.0.0.1}:0" || return 1
  done
}

# cluster_restart I: server I, killed, started again at its address: an empty server, a
# new incarnation, as systemd restarting a crashed rampartd gives.
cluster_restart() { # index
  cluster_start_one "$1" "${CLUSTER_ADDRS[$1]}"
}

cluster_servers() {
  local IFS=,
  echo "${CLUSTER_ADDRS[*]}"
}

cluster_kill9() { # index
  CLUSTER_KILLED[$1]=1
  kill -KILL "${CLUSTER_PIDS[$1]}"
  wait "${CLUSTER_PIDS[$1]}" 2>/dev/null || true
}

# Redundancy hides a crashed server from the reads, so how each server ended is checked
# here: one that died before it was asked to stop, or exited non-zero on SIGTERM (a
# sanitizer report, a leak), lands in CLUSTER_BAD for the caller to fail on.
cluster_stop() {
  local i pid st
  local -a alive=()
  CLUSTER_BAD=()
  for i in "${!CLUSTER_PIDS[@]}"; do
    [[ -n ${CLUSTER_KILLED[$i]:-} ]] && continue
    pid=${CLUSTER_PIDS[$i]}
    if kill -0 "$pid" 2>/dev/null; then
      alive[$i]=1
      kill -CONT "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for i in "${!CLUSTER_PIDS[@]}"; do
    [[ -n ${CLUSTER_KILLED[$i]:-} ]] && continue
    pid=${CLUSTER_PIDS[$i]}
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "rampartd pid $pid ignored SIGTERM for 5 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    st=0
    wait "$pid" 2>/dev/null || st=$?
    if [[ -z ${alive[$i]:-} ]]; then
      CLUSTER_BAD+=("rampartd ${CLUSTER_ADDRS[$i]:-#$i} (pid $pid) died during the run (status $st)")
    elif ((st != 0)); then
      CLUSTER_BAD+=("rampartd ${CLUSTER_ADDRS[$i]:-#$i} (pid $pid) exited with status $st when stopped")
    fi
  done
  CLUSTER_PIDS=()
  CLUSTER_KILLED=()
}
