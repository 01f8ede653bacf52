#!/usr/bin/env bash
# fetch-tsclient-tools.sh: install the TypeScript client's build and test
# tools (client/typescript's devDependencies: typescript, @types/node, and
# openapi-typescript for its wire-type drift check), pinned by its
# committed package-lock.json (versions and sha512 integrity), into a cache
# directory, once. Prints the directory holding node_modules. The package
# itself has no runtime dependencies.
#
# Env: TSCLIENT_TOOLS_DIR (cache; default /var/cache/jailcell/tsclient-tools).
# Each lock file gets its own subdirectory named by its hash, so a changed
# lock installs afresh and an unchanged one is reused. npm's own cache lives
# there too: the install never reads or writes ~/.npm, so an empty
# TSCLIENT_TOOLS_DIR is a cold install (scripts/check-fresh.sh proves it).
#
# Needs node 18.18+ and npm: Debian 12's own nodejs (18.19) is enough.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
src=$here/client/typescript
base=${TSCLIENT_TOOLS_DIR:-/var/cache/jailcell/tsclient-tools}
die() {
	echo "fetch-tsclient-tools: $*" >&2
	exit 1
}
command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are needed: apt-get install nodejs npm (make deps)"
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a === 18 && b >= 18 || a > 18 ? 0 : 1)' ||
	die "node $(node --version) is too old for the TypeScript client: it needs 18.18+"

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
	for tool in tsc openapi-typescript; do
		"$tmp/node_modules/.bin/$tool" --version >/dev/null || die "the installed $tool does not run"
	done
	[[ -e $tmp/node_modules/@types/node/package.json ]] || die "@types/node is not installed"
	chmod -R a+rX "$tmp"
	touch "$tmp/STAMP"
	mv "$tmp" "$dir"
	trap - EXIT
fi
chmod a+x "$base"
echo "$dir"
