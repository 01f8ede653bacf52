#!/usr/bin/env bash
# Runs `go test` with its arguments, streaming its output as usual, and on
# failure ends with a short summary: each failing test and the lines its
# assertions printed (file.go:N: ...), the failing packages and any panic.
# A failing test may dump a server's whole log (versitygw, a daemon, HAProxy)
# into the output; CI shows only the output's tail, and without the summary
# that tail is the log and never the failure (it happened at stop 23). The
# whole output stays in TEST_LOG (default: a file under TMPDIR, named at the
# end of a failed run).
set -uo pipefail
GO=${GO:-go}
log=${TEST_LOG:-$(mktemp "${TMPDIR:-/tmp}/jailcell-test.XXXXXX.log")}
"$GO" test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ]; then
	[ -n "${TEST_LOG:-}" ] || rm -f "$log"
	exit 0
fi
echo
echo "=== go test failed (exit $rc); summary (whole output: $log)"
# Assertion lines are the indented "name.go:N: " lines of a non-verbose
# run (only failing tests print theirs); continuation lines of a dumped
# log are not. Each line is cut to 300 bytes, the list to 40 lines; the
# last lines name the failing packages and repeat the first failure, as
# the first failure is the cause more often than the rest.
summary=$(grep -E -e '^[[:space:]]*--- FAIL: ' -e '^[[:space:]]+[A-Za-z0-9_.-]+\.go:[0-9]+: ' \
	-e '^(panic|fatal error): ' "$log" | grep -v -e ': FIGURES ' | cut -c1-300)
printf '%s\n' "$summary" | head -n 40
echo "=== failed packages: $(grep -E '^FAIL[[:space:]]+[^[:space:]]+' "$log" | awk '{print $2}' | sort -u | tr '\n' ' ')"
echo "=== first failure: $(printf '%s\n' "$summary" | grep -v -e '--- FAIL' | head -n 1 | sed 's/^[[:space:]]*//')"
exit "$rc"
