#!/usr/bin/env bash
# fetch-openapi-tools.sh: install the tools that check api/openapi.json
# (test/openapi: @redocly/cli's linter, openapi-typescript and typescript),
# pinned by test/openapi's committed package-lock.json (versions and sha512
# integrity), into a cache directory, once. Prints the directory holding
# node_modules.
#
# Env: OPENAPI_TOOLS_DIR (cache; default /var/cache/jailcell/openapi-tools).
# Each lock file gets its own subdirectory named by its hash, so a changed
# lock installs afresh and an unchanged one is reused. npm's own cache lives
# there too: the install never reads or writes ~/.npm, so an empty
# OPENAPI_TOOLS_DIR is a cold install (scripts/check-fresh.sh proves it).
#
# Needs node and npm: Redocly's CLI 1.34 needs node 18.17+, which Debian
# 12's own nodejs (18.19) is. Its 2.x needs 20.19+, more than a fresh
# Debian 12 has; api/openapi.json lints clean under 2.77.0 too (checked
# by hand when the pin moved, 2026-12-03).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
src=$here/test/openapi
base=${OPENAPI_TOOLS_DIR:-/var/cache/jailcell/openapi-tools}
die() {
	echo "fetch-openapi-tools: $*" >&2
	exit 1
}
command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are needed: apt-get install nodejs npm (make deps)"
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a === 18 && b >= 17 || a > 18 ? 0 : 1)' ||
	die "node $(node --version) is too old for @redocly/cli 1.34: it needs 18.17+"
# Redocly's CLI would otherwise report usage to its vendor and ask the
# registry for a newer version: nothing here may leave the machine.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true REDOCLY_SUPPRESS_NOTIFICATIONS=true

exec "$here/scripts/npm-pinned.sh" fetch-openapi-tools "$src" "$base" \
	'for tool in redocly openapi-typescript tsc; do node_modules/.bin/$tool --version >/dev/null || exit 1; done'
