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

# guest_kernel_fault_outside_rampart CONSOLE: true when the guest's kernel died of a fatal
# exception ("Kernel panic - not syncing: Fatal exception", no hung task, no OOM) whose
# report names no function or module of the drivers rampart serves the guest through
# (ublk_drv, nbd) or of the block layer under them. Under TCG such deaths come from the
# emulation: a double fault in kmem_cache_alloc called from tcp_sendmsg, its EFLAGS with
# reserved bits set, a minute into a boot; an int3 in the scheduler's clock. rampart's code
# reaches the kernel only through syscalls and those drivers, so a fault elsewhere is not
# its finding, and the guest test runs once more (guest_fail). A report that names ublk,
# nbd or blk_ fails the test as before.
guest_kernel_fault_outside_rampart() {
  local report
  report=$(guest_oops "$1" | LC_ALL=C tr -d '\0\r' | grep -av 'Modules linked in:')
  grep -aq 'Kernel panic - not syncing: Fatal exception' <<<"$report" || return 1
  ! grep -aq -E 'ublk|nbd|blk_|bio_|swap_|hung_task|[Oo]ut of memory|oom' <<<"$report"
}
