#!/usr/bin/env bash
# apt-get with its arguments, waiting for every lock apt takes, at most
# APT_LOCK_WAIT seconds (default 600).
#
# -o DPkg::Lock::Timeout waits for dpkg's lock only: bookworm's apt (2.6)
# fails `apt-get update` at once while another apt holds the package lists'
# lock (/var/lib/apt/lists/lock). On a fresh machine make test's two guests
# install their packages beside each other, and one failed so ("Could not
# get lock /var/lib/apt/lists/lock. It is held by process N (apt-get)").
# So: this project's own apt-get runs queue on one flock, and a lock held
# by anyone else (unattended-upgrades after boot) is waited for by trying
# again until the bound.
set -uo pipefail
wait_s=${APT_LOCK_WAIT:-600}
lock=${JAILCELL_APT_LOCK:-/run/lock/jailcell-apt.lock}
deadline=$((SECONDS + wait_s))

exec 9>>"$lock" || { echo "apt-get.sh: cannot open $lock" >&2; exit 1; }
if ! flock -w "$wait_s" 9; then
	echo "apt-get.sh: another of this project's apt-get runs held $lock for $wait_s s" >&2
	exit 1
fi

err=$(mktemp "${TMPDIR:-/tmp}/apt-get.XXXXXX")
trap 'rm -f "$err"' EXIT
said=0
while :; do
	left=$((deadline - SECONDS))
	((left > 0)) || left=1
	apt-get -o DPkg::Lock::Timeout="$left" "$@" 2>"$err"
	rc=$?
	if ((rc != 0)) && grep -q 'Could not get lock\|Unable to lock' "$err" && ((SECONDS < deadline)); then
		((said)) || echo "apt-get.sh: waiting up to $((deadline - SECONDS)) s for apt's lock: $(grep -m1 'Could not get lock\|Unable to lock' "$err")" >&2
		said=1
		sleep 2
		continue
	fi
	cat "$err" >&2
	exit "$rc"
done
