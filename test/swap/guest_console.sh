# shellcheck shell=bash
# Sourced by test/swap/lib.sh (and test/scripts/test_guest_console.sh): what a guest's
# serial console log says about how its kernel ended. Plain functions of a file, so the
# verdicts are tested against consoles kept from real runs (test/scripts/fixtures/).

# guest_oops CONSOLE: the kernel's report of a panic in a guest's console log, whole: from
# the first oops line (BUG:, Oops:, a general protection fault, a warning's "cut here")
# of the 250 lines before "Kernel panic - not syncing", through the panic's end marker.
# Without a panic, the last oops and what follows it. Nothing when the kernel reported
# neither.
guest_oops() {
  LC_ALL=C awk '
    function show(from,  i) { for (i = from; i <= NR; i++) print ring[i % 250] }
    { ring[NR % 250] = $0 }
    /BUG:|Oops:|general protection fault|Unable to handle|\[ cut here \]/ {
      oops[++n] = NR; last = NR
    }
    !panicked && /Kernel panic - not syncing/ {
      from = NR > 249 ? NR - 249 : 1
      for (k = 1; k <= n; k++) if (oops[k] >= from) { from = oops[k]; break }
      show(from); panicked = 1; next
    }
    panicked { print; if (/end Kernel panic/ || ++after >= 40) exit }
    END { if (!panicked && last && NR - last < 250) show(last) }' "$1"
}

# guest_kernel_died_before MARKER < CONSOLE: true when the console shows the guest's kernel
# dead (a panic or an Oops) and never MARKER, the first thing its init prints. Under TCG
# the kernel sometimes dies in SMP bring-up (an int3 in sched_clock_cpu, a fatal exception
# in interrupt), before any rampart code has run; a guest test boots such a guest once
# more. A kernel that dies after its init spoke is judged by
# guest_kernel_fault_outside_rampart.
guest_kernel_died_before() {
  local text
  text=$(LC_ALL=C tr -d '\0')
  grep -aq -E 'Kernel panic|Oops' <<<"$text" && ! grep -aqF "$1" <<<"$text"
}

# guest_last_boot < CONSOLE: the console from the last boot's first line ("Linux version")
# on: a console that holds several boots (the systemd guest's) is judged by the boot that
# failed, not by an earlier one that was booted again.
guest_last_boot() {
  LC_ALL=C tr -d '\0' | awk '/Linux version [0-9]/ { text = "" } { text = text $0 "\n" }
    END { printf "%s", text }'
}

# guest_kernel_fault_outside_rampart CONSOLE: true when the last boot's kernel died of a
# fault only the emulation has given it here, in code rampart's drivers do not reach:
#  - the oops is a double fault or an int3 (qemu 7.2's TCG: a double fault in
#    kmem_cache_alloc under tcp_sendmsg, its saved EFLAGS with reserved bits set, a
#    minute into a boot; an int3 in the scheduler's clock in SMP bring-up), on a kernel
#    not tainted by an earlier oops or warning,
#  - it panicked with "Fatal exception", with no stack overflow named,
#  - and the report names no ublk, nbd, block-layer, swap, reclaim or io_uring frame, no
#    hung task, no OOM.
# rampart reaches a guest's kernel only through its syscalls and those paths. Anything
# else, a general protection fault or a BUG among them, fails the test (guest_fail).
guest_kernel_fault_outside_rampart() {
  local report
  report=$(guest_last_boot <"$1" | guest_oops /dev/stdin | LC_ALL=C tr -d '\r' |
           grep -av 'Modules linked in:')
  grep -aq -E '^\[ *[0-9.]+\] Oops: (double fault|int3): ' <<<"$report" || return 1
  grep -aq -E '^\[ *[0-9.]+\] CPU: .* Not tainted ' <<<"$report" || return 1
  grep -aq 'Kernel panic - not syncing: Fatal exception' <<<"$report" || return 1
  ! grep -aq -E 'ublk|nbd|blk_|bio_|swap_|swapin|shrink_|io_uring|stack overflow|stack guard|hung_task|[Oo]ut of memory|oom' <<<"$report"
}

# guest_said CONSOLE: the guest's own lines, each from "rampart-guest:" on (the daemon's
# coloured warnings share the console, and the reset that ends one, ESC [0m, can land at
# the start of the next line), complete lines only. The host reads the console while qemu
# writes it: a last line still being written ("rampart-guest: f" of "... fault kill at
# 98 MiB swapped out") is left for the next read, where taking it would have counted it
# as said and acted on nothing (a CI run's starved guest waited for a rebuild after a
# server kill that never happened).
guest_said() {
  local text
  text=$(LC_ALL=C sed -n 's/^.*\(rampart-guest:\)/\1/p' "$1"; echo .)
  text=${text%.}
  if [[ -n $text && $text != *$'\n' ]]; then
    if [[ $text == *$'\n'* ]]; then text=${text%$'\n'*}$'\n'; else text=; fi
  fi
  printf '%s' "$text"
}
