#!/usr/bin/env bash
# fetch-mcpclient.sh: install the official MCP TypeScript client
# (@modelcontextprotocol/sdk, and undici for HTTP over a Unix socket) that
# test/mcpclient drives jailcell with, pinned by test/mcpclient's committed
# package-lock.json (versions and sha512 integrity), into a cache directory,
# once. Prints the directory holding node_modules.
#
# Env: MCPCLIENT_DIR (cache; default /var/cache/jailcell/mcpclient). Each lock
# file gets its own subdirectory named by its hash, so a changed lock installs
# afresh and an unchanged one is reused. npm's own cache lives there too: the
# install never reads or writes ~/.npm, so an empty MCPCLIENT_DIR is a cold
# install (scripts/check-fresh.sh proves it).
#
# Needs Debian's nodejs and npm (make deps installs them).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
src=$here/test/mcpclient
base=${MCPCLIENT_DIR:-/var/cache/jailcell/mcpclient}
die() {
	echo "fetch-mcpclient: $*" >&2
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
	(cd "$tmp" && node --input-type=module -e '
		await import("@modelcontextprotocol/sdk/client/index.js");
		await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
		await import("undici");') || die "the installed client does not load"
	# Readable by the unprivileged test users that run node.
	chmod -R a+rX "$tmp"
	touch "$tmp/STAMP"
	mv "$tmp" "$dir"
	trap - EXIT
fi
chmod a+x "$base"
echo "$dir"
