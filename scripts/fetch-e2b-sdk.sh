#!/usr/bin/env bash
# fetch-e2b-sdk.sh: install E2B's stock JS SDKs (npm e2b and
# @e2b/code-interpreter, pinned with sha512 integrity by
# test/e2bsdk/js/package-lock.json) into a cache directory, once, with
# scripts/npm-pinned.sh; later runs are offline. Prints the directory
# holding node_modules.
#
# Env: E2B_SDK_DIR (cache; default /var/cache/jailcell/e2b-sdk). An empty
# one is a cold install (scripts/check-fresh.sh proves it).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
exec "$here/scripts/npm-pinned.sh" fetch-e2b-sdk "$here/test/e2bsdk/js" "${E2B_SDK_DIR:-/var/cache/jailcell/e2b-sdk}" \
	'node -e "require(\"e2b\"); require(\"@e2b/code-interpreter\")"'
