#!/usr/bin/env bash
# fetch-versitygw.sh: build versitygw (Apache-2.0, an S3 server over a local
# directory), pinned, once, into a cache, for the store's S3 tests
# (store/TestContract, session's hibernate-into-S3 test). Prints the path of
# the binary.
#
# Env: VERSITYGW_DIR (cache; default /var/cache/jailcell/versitygw), GO. The
# build has its own GOPATH, GOMODCACHE and GOCACHE under the cache: it never
# reads or writes the user's, so an empty VERSITYGW_DIR is a cold build
# (about 3 min on 2 cores; scripts/check-fresh.sh proves it). Every module is
# checked against the Go checksum database (go install's default).
# FETCH_ONLY=1 stops after downloading the pinned module (go mod download,
# checksummed): the cheap check of check-fresh-quick.
set -euo pipefail

version=v1.8.0
module=github.com/versity/versitygw
base=${VERSITYGW_DIR:-/var/cache/jailcell/versitygw}
go=${GO:-go}
die() {
	echo "fetch-versitygw: $*" >&2
	exit 1
}
command -v "$go" >/dev/null || die "go is needed ($go not found)"

dir=$base/$version
bin=$dir/bin/versitygw
if [[ -z ${FETCH_ONLY:-} && -x $bin && -e $dir/STAMP ]]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$base"
# One build at a time per cache (test binaries of several packages may ask
# at once); the loser finds the winner's stamp.
exec 9>"$base/.lock"
flock 9
export GOPATH=$base/gopath GOMODCACHE=$base/gopath/pkg/mod GOCACHE=$base/gocache
export GOFLAGS=-mod=mod GOTOOLCHAIN=local GO111MODULE=on
if [[ -n ${FETCH_ONLY:-} ]]; then
	# Downloaded and verified (go.sum of the module proxy's checksum database).
	out=$("$go" mod download -json "$module@$version") || die "go mod download $module@$version failed: $out"
	grep -q '"Sum": "h1:' <<<"$out" || die "no checksum for $module@$version: $out"
	chmod -R u+w "$GOPATH" # the module cache is read-only: let rm -rf clean it
	echo "fetch-versitygw: $module@$version downloaded and verified"
	exit 0
fi
if [[ ! -e $dir/STAMP ]]; then
	rm -rf "$dir"
	tmp=$(mktemp -d "$base/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	GOBIN=$tmp/bin CGO_ENABLED=0 "$go" install "$module/cmd/versitygw@$version" >&2 ||
		die "go install $module/cmd/versitygw@$version failed"
	"$tmp/bin/versitygw" --version >/dev/null 2>&1 || "$tmp/bin/versitygw" --help >/dev/null 2>&1 ||
		die "the built versitygw does not run"
	echo "$module@$version" >"$tmp/STAMP"
	chmod -R a+rX "$tmp"
	mv "$tmp" "$dir"
	trap - EXIT
	# The build caches are not needed to run it.
	chmod -R u+w "$base/gopath" 2>/dev/null || true
	rm -rf "$base/gopath" "$base/gocache"
fi
echo "$bin"
