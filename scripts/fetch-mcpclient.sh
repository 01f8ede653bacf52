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
exec "$here/scripts/npm-pinned.sh" fetch-mcpclient "$here/test/mcpclient" "${MCPCLIENT_DIR:-/var/cache/jailcell/mcpclient}" \
	'node --input-type=module -e '"'"'
		await import("@modelcontextprotocol/sdk/client/index.js");
		await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
		await import("undici");'"'"
