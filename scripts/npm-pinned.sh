#!/usr/bin/env bash
# npm-pinned.sh NAME SRC BASE CHECK: installs the npm packages that SRC's
# committed package.json and package-lock.json pin (versions and sha512
# integrity) into BASE/<hash of both files>, once, and prints that
# directory (it holds node_modules). CHECK, a shell command run in the new
# directory before it is published, proves the install works.
#
# A changed lock installs afresh and an unchanged one is reused. npm's own
# cache lives in the install directory and is dropped: an install never
# reads or writes ~/.npm, so an empty BASE is a cold install
# (scripts/check-fresh.sh proves it for every user of this script).
# Needs node and npm (make deps installs Debian's).
set -euo pipefail
[[ $# == 4 ]] || {
	echo "usage: npm-pinned.sh NAME SRC BASE CHECK" >&2
	exit 2
}
name=$1 src=$2 base=$3 check=$4
die() {
	echo "$name: $*" >&2
	exit 1
}
command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are needed: apt-get install nodejs npm (make deps)"

hash=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-16)
dir=$base/$hash
if [[ -e $dir/STAMP ]]; then
	echo "$dir"
	exit 0
fi
mkdir -p "$base"
# One install at a time per cache (test binaries of several packages may
# ask at once); the loser finds the winner's stamp.
exec 9>"$base/.lock"
flock 9
if [[ ! -e $dir/STAMP ]]; then
	rm -rf "$dir"
	tmp=$(mktemp -d "$base/.install.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	cp "$src/package.json" "$src/package-lock.json" "$tmp/"
	# ci: exactly the lock, integrity checked; no install scripts run.
	(cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error --cache "$tmp/.npm-cache" >&2) ||
		die "npm ci in $tmp failed"
	rm -rf "$tmp/.npm-cache"
	(cd "$tmp" && bash -c "$check") || die "the install in $tmp does not work ($check)"
	# Readable by the unprivileged test users that run node.
	chmod -R a+rX "$tmp"
	touch "$tmp/STAMP"
	mv "$tmp" "$dir"
	trap - EXIT
fi
chmod a+x "$base"
echo "$dir"
