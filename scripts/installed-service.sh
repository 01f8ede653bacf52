#!/usr/bin/env bash
# make test runs its Go tests beside a jailcell service laid out as
# `make install` leaves one: /etc/jailcell/config.yaml 0640
# root:root from the example, `jailcell serve --config` on the default
# socket with the default state dir, started the documented way without
# systemd (docs/service.md, start-stop-daemon). Every test must stay
# hermetic beside it: at stop the service must have answered no request
# but this script's own health check, or the run fails naming the
# requests it got.
#
#   installed-service.sh start BIN   start it (nothing if jailcell is
#                                    installed here: the run is then beside
#                                    that one, said so)
#   installed-service.sh stop        stop it, check it was not used, and
#                                    remove everything start made
set -euo pipefail

CONF_DIR=/etc/jailcell
SOCK=/run/jailcell/jailcell.sock
STATE=/var/lib/jailcell/state
# The default state, store and review directories: removed at stop if
# start found them absent.
DIRS="/var/lib/jailcell/state /var/lib/jailcell/store /var/lib/jailcell/review"
MARK=/run/jailcell-test-service
PIDFILE=$MARK/pid
LOG=$MARK/serve.log

say() { echo "installed-service: $*"; }

start() {
	local bin=$1
	for p in "$CONF_DIR" "$SOCK" "$STATE" "$MARK"; do
		if [ -e "$p" ]; then
			say "$p exists (jailcell is installed or running here): the tests run beside it as it is, not beside a fresh one"
			return 0
		fi
	done
	command -v start-stop-daemon >/dev/null || { say "start-stop-daemon is missing (Debian's dpkg has it)"; exit 1; }
	mkdir -m 0700 "$MARK"
	# What start made, for stop to remove: only that.
	[ -e /run/jailcell ] || touch "$MARK/made-run-dir"
	for d in $DIRS; do [ -e "$d" ] || echo "$d" >>"$MARK/made-dirs"; done
	# make install's group (the example config names it).
	if ! getent group jailcell >/dev/null; then
		groupadd --system jailcell
		touch "$MARK/made-group"
	fi
	install -d -m 0755 "$CONF_DIR"
	install -m 0640 configs/config.example.yaml "$CONF_DIR/config.yaml"
	# As the unit file starts it, with debug logging (one line a request,
	# counted at stop) and no pool (idle sessions would only take CPU from
	# the tests).
	JAILCELL_LOG_LEVEL=debug JAILCELL_LOG_FORMAT=json JAILCELL_POOL_SIZE=0 \
		start-stop-daemon --start --background --notify-await --notify-timeout 120 \
		--make-pidfile --pidfile "$PIDFILE" --output "$LOG" \
		--exec "$(readlink -f "$bin")" -- serve --config "$CONF_DIR/config.yaml" || {
		say "the service did not start:"; tail -n 40 "$LOG" || true; stop_quiet; exit 1; }
	curl -sf --unix-socket "$SOCK" http://jailcell/healthz >/dev/null || {
		say "the service does not answer /healthz on $SOCK:"; tail -n 40 "$LOG"; stop_quiet; exit 1; }
	say "serving on $SOCK (pid $(cat "$PIDFILE")); the tests must not reach it"
}

stop_quiet() {
	[ -f "$PIDFILE" ] && start-stop-daemon --stop --pidfile "$PIDFILE" --retry TERM/90/KILL/5 --remove-pidfile >/dev/null 2>&1 || true
	rm -rf "$CONF_DIR"
	if [ -f "$MARK/made-dirs" ]; then
		while read -r d; do rm -rf "$d"; done <"$MARK/made-dirs"
	fi
	rm -f "$SOCK"
	if [ -e "$MARK/made-run-dir" ]; then
		rm -f /run/jailcell/claims/claims.lock
		rmdir /run/jailcell/claims /run/jailcell 2>/dev/null || true
	fi
	[ -e "$MARK/made-group" ] && groupdel jailcell
	rm -rf "$MARK"
}

stop() {
	[ -d "$MARK" ] || return 0
	local rc=0
	if [ -f "$PIDFILE" ] && ! start-stop-daemon --stop --pidfile "$PIDFILE" --retry TERM/90/KILL/5 --remove-pidfile; then
		say "the service did not stop within 95 s"
		rc=1
	fi
	# The health check of start is the one request allowed.
	local n
	n=$(grep -c '"msg":"http request"' "$LOG" || true)
	if [ "$n" -ne 1 ]; then
		say "FAIL: the installed service answered $((n - 1)) requests from the tests (hermetic tests never reach it):"
		grep '"msg":"http request"' "$LOG" | tail -n 20
		rc=1
	else
		say "ok: the tests never reached the installed service"
	fi
	stop_quiet
	return $rc
}

case "${1:-}" in
start) start "${2:?usage: installed-service.sh start BIN}" ;;
stop) stop ;;
*) echo "usage: installed-service.sh start BIN | stop" >&2; exit 2 ;;
esac
