#!/usr/bin/env bash
# The starved guest (test_guest_starved.sh) with rampart-ublk as the swap device instead
# of nbdkit + nbd-client (docs/recovery.md): the engine's own ublk target in a 192 MiB guest, on
# Debian's 6.12 kernel (the first Debian 12 kernel with ublk_drv, from bookworm-security;
# scripts/fetch-guest-kernel --ublk), swapping a verifying fork-heavy workload of twice
# the guest's RAM while one rampartd is killed, and the same workload on a swap disk in
# the same guest for the ratio. Skips, saying why, where that kernel cannot be fetched.
export RAMPART_STARVED_FRONTEND=ublk RAMPART_TEST_NAME=test_guest_ublk
exec bash "$(dirname "$0")/test_guest_starved.sh" "$@"
