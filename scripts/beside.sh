#!/usr/bin/env bash
# beside.sh LOG BG -- FG...: runs the command line BG (one shell word list,
# given as a single string) in the background, its output in LOG, while the
# commands FG (each a single string) run one after another in the
# foreground; then waits for BG and prints its output. Exits non-zero if any
# of them failed. A failing FG step ends BG (its whole process group) at
# once, so no guest outlives a failed `make test`.
#
# make test runs the systemd guest (7-8 min of emulation) beside
# the cgroup v2 guest and the fuzzers instead of after them: a few minutes
# less in all, and the Go tests, which are sensitive to load, run alone.
set -uo pipefail
[[ $# -ge 3 && $2 != -- && $3 == -- ]] || {
	echo "usage: beside.sh LOG 'BG COMMAND' -- 'FG COMMAND'..." >&2
	exit 2
}
log=$1 bg=$2
shift 3
mkdir -p "$(dirname "$log")" # build/ is not in a fresh clone
# setsid: BG leads its own process group, which the trap can end whole.
setsid bash -c "$bg" >"$log" 2>&1 </dev/null &
pid=$!
ended=0
stop_bg() {
	[[ $ended == 1 ]] && return
	kill -TERM -- -"$pid" 2>/dev/null
	for _ in $(seq 30); do
		kill -0 -- -"$pid" 2>/dev/null || break
		sleep 1
	done
	kill -KILL -- -"$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	ended=1
}
trap 'stop_bg' EXIT
trap 'exit 130' INT TERM
echo "beside: '$bg' runs in the background (pid $pid, output in $log)"
rc=0
for fg in "$@"; do
	bash -c "$fg" || {
		rc=$?
		echo "beside: '$fg' failed (exit $rc); ending '$bg'" >&2
		stop_bg
		echo "=== the end of '$bg''s output ($log):"
		tail -n 40 "$log"
		exit "$rc"
	}
done
echo "beside: waiting for '$bg'"
wait "$pid"
bgrc=$?
ended=1
echo "=== '$bg' (exit $bgrc):"
cat "$log"
exit "$bgrc"
