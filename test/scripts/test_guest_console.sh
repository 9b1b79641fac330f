#!/usr/bin/env bash
# The guest tests' verdicts on how a guest's kernel ended (test/swap/guest_console.sh),
# against consoles in fixtures/: two kept from CI runs where the emulation killed the
# kernel (a double fault a minute into a boot, an int3 in SMP bring-up), and others made
# from them for the cases the verdict must not excuse (a fault in ublk_drv, a hung-task
# panic, a general protection fault, a double fault on a tainted kernel, a console whose
# first boot died of an int3 and whose second of a ublk fault) or must not see (a clean
# end).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../swap/guest_console.sh
. "$here/../swap/guest_console.sh"
fixtures=$here/fixtures
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect() { # WHAT EXPECTED(yes|no) COMMAND...
  local what=$1 want=$2 got=no
  shift 2
  if "$@"; then got=yes; fi
  if [[ $got == "$want" ]]; then
    echo "ok: $what"
  else
    echo "FAIL: $what: expected $want, got $got" >&2
    failed=1
  fi
}

expect "a double fault after init is the emulation's" yes \
  guest_kernel_fault_outside_rampart "$fixtures/guest-double-fault.console"
expect "a double fault after init is not a death before init" no \
  guest_kernel_died_before 'Run /init as init process' <"$fixtures/guest-double-fault.console"
expect "an int3 in bring-up is a death before init" yes \
  guest_kernel_died_before 'Run /init as init process' <"$fixtures/guest-int3-in-bring-up.console"
expect "an int3 in bring-up is the emulation's" yes \
  guest_kernel_fault_outside_rampart "$fixtures/guest-int3-in-bring-up.console"
expect "a fault in ublk_drv is not excused" no \
  guest_kernel_fault_outside_rampart "$fixtures/guest-ublk-fault.console"
expect "a general protection fault is not excused" no \
  guest_kernel_fault_outside_rampart "$fixtures/guest-general-protection.console"
expect "a double fault on a tainted kernel is not excused" no \
  guest_kernel_fault_outside_rampart "$fixtures/guest-double-fault-tainted.console"
expect "a boot booted again after an int3 is judged by its own ublk fault" no \
  guest_kernel_fault_outside_rampart "$fixtures/guest-retried-boot-then-ublk-fault.console"
expect "a hung-task panic is not excused" no \
  guest_kernel_fault_outside_rampart "$fixtures/guest-hung-task.console"
expect "a clean end is no fault" no \
  guest_kernel_fault_outside_rampart "$fixtures/guest-clean-end.console"
expect "a clean end is no death" no \
  guest_kernel_died_before 'Run /init as init process' <"$fixtures/guest-clean-end.console"

# The guest's lines are taken whole: one still being written is left for the next read.
printf 'boot\n\e[0mrampart-guest: run kill-ublk\nkernel line\nrampart-guest: f' >"$tmp/partial"
said=$(guest_said "$tmp/partial"; echo .)
expect "a line still being written is not taken" yes \
  test "${said%.}" = $'rampart-guest: run kill-ublk\n'
printf '%s\n' "ault kill at 98 MiB swapped out" >>"$tmp/partial"
said=$(guest_said "$tmp/partial"; echo .)
expect "once written whole, it is" yes \
  test "${said%.}" = $'rampart-guest: run kill-ublk\nrampart-guest: fault kill at 98 MiB swapped out\n'
printf 'rampart-guest: f' >"$tmp/only-partial"
expect "a console whose one line is partial says nothing" yes test -z "$(guest_said "$tmp/only-partial")"

# The report printed for the double fault runs from its Oops line through the panic.
report=$(guest_oops "$fixtures/guest-double-fault.console")
expect "the report starts at the Oops" yes grep -q '^\[ *115.852168\] Oops: double fault' <<<"${report%%$'\n'*}"
expect "the report holds the panic" yes grep -q 'Kernel panic - not syncing: Fatal exception' <<<"$report"
expect "the report leaves out what came before" no grep -q 'rampart-guest:' <<<"$report"
exit "$failed"
