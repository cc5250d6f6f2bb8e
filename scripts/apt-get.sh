#!/usr/bin/env bash
# apt-get that waits for another apt or dpkg run to finish instead of failing at once.
#
#   scripts/apt-get.sh ARGS...      (as root; the same arguments as apt-get)
#
# On a fresh machine something else often holds apt's locks (an unattended upgrade, a second
# install script): apt-get then exits 100 at once ("Could not get lock"). apt's own
# DPkg::Lock::Timeout covers dpkg's lock only, not the lists lock of `apt-get update` nor the
# download directory's, so a refusal on any lock is retried here instead, every 2 s, for at most
# MARUN_APT_LOCK_WAIT seconds (default 600), with one line saying so. Any other failure is
# returned as it is.
set -uo pipefail
wait_for=${MARUN_APT_LOCK_WAIT:-600}
deadline=$((SECONDS + wait_for))
said=0
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
while :; do
    status=0
    apt-get "$@" 2>"$errors" || status=$?
    if ((status == 100)) && grep -qE 'Could not get lock|Unable to (lock|acquire)' "$errors" &&
        ((SECONDS < deadline)); then
        if ((said == 0)); then
            printf 'apt-get.sh: another apt/dpkg run holds a lock; waiting up to %ss\n' "$wait_for" >&2
            said=1
        fi
        sleep 2
        continue
    fi
    cat "$errors" >&2
    exit "$status"
done
