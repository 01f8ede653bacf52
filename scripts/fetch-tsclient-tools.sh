#!/usr/bin/env bash
# fetch-tsclient-tools.sh: install the TypeScript client's build and test
# tools (client/typescript's devDependencies: typescript, @types/node, and
# openapi-typescript for its wire-type drift check), pinned by its
# committed package-lock.json (versions and sha512 integrity), into a cache
# directory, once, with scripts/npm-pinned.sh. Prints the directory holding
# node_modules. The package itself has no runtime dependencies.
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
die() {
	echo "fetch-tsclient-tools: $*" >&2
	exit 1
}
command -v node >/dev/null || die "node and npm are needed: apt-get install nodejs npm (make deps)"
# Symbol.asyncDispose, which the client's Sandbox implements, came in 18.18.
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a === 18 && b >= 18 || a > 18 ? 0 : 1)' ||
	die "node $(node --version) is too old for the TypeScript client: it needs 18.18+"

exec "$here/scripts/npm-pinned.sh" fetch-tsclient-tools "$here/client/typescript" "${TSCLIENT_TOOLS_DIR:-/var/cache/jailcell/tsclient-tools}" \
	'for tool in tsc openapi-typescript; do node_modules/.bin/$tool --version >/dev/null || exit 1; done
	[[ -e node_modules/@types/node/package.json ]] || { echo "@types/node is not installed" >&2; exit 1; }'
