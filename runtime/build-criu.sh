#!/usr/bin/env bash
# Build a working criu for session hibernation (docs/hibernate.md).
#
# Debian bookworm's criu 3.17 fails on newer kernels ("vdso: Unexpected rt vDSO
# area bounds"), so this builds criu from Debian trixie's source package, pinned
# by version and sha256, with bookworm's build dependencies, and installs only the
# criu binary under PREFIX (default /var/lib/jailcell/criu/bin/criu), where
# jailcell looks for it. The trixie deb-src entry lives in a private apt
# configuration under BUILD_DIR and uses the same mirror as the system's bookworm
# entry; the system's apt sources are not touched.
#
# FETCH_ONLY=1 stops after the lookup and the checksummed download: the cheap
# cold-path check `make test` runs with empty BUILD_DIR and PREFIX.
#
# Idempotent: a stamp next to the binary records version and patch hash; when it
# matches and `criu --version` runs, nothing is done.
set -euo pipefail

CRIU_VERSION=4.1.1
CRIU_DEBIAN_REVISION=1
CRIU_SUITE=trixie
# The upstream tarball of trixie's criu_4.1.1-1 source package, by its
# Checksums-Sha256 entry. Only the .orig tarball is used: the mirror here does not
# serve the .dsc and .debian.tar.xz, and Debian's packaging patches are not needed
# to build the binary.
ORIG=criu_${CRIU_VERSION}.orig.tar.xz
ORIG_SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
BUILD_DEPS=(gcc make pkg-config libbsd-dev libcap-dev libgnutls28-dev libnet1-dev
	libnl-3-dev libprotobuf-c-dev libprotobuf-dev protobuf-c-compiler protobuf-compiler
	python3-protobuf uuid-dev
	iptables) # at run time: criu saves and restores the sandbox netns rules with iptables-save/-restore

PREFIX=${PREFIX:-/var/lib/jailcell/criu}
BUILD_DIR=${BUILD_DIR:-/var/cache/jailcell/criu-build}
HERE=$(cd "$(dirname "$0")" && pwd)
PATCH_DIR=$HERE/criu-patches

patch_hash=$(cat "$PATCH_DIR"/*.patch 2>/dev/null | sha256sum | cut -c1-16 || true)
stamp="$CRIU_VERSION-$CRIU_DEBIAN_REVISION+$patch_hash"
if [[ -x $PREFIX/bin/criu && "$(cat "$PREFIX/STAMP" 2>/dev/null)" == "$stamp" ]] &&
	"$PREFIX/bin/criu" --version >/dev/null 2>&1; then
	echo "criu $stamp already at $PREFIX/bin/criu"
	exit 0
fi

# The mirror: the first URI of the system's bookworm (main archive) entry.
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
	[[ -e $f ]] || continue
	mirror=$(awk '/^URIs:/ {uri=$2} /^Suites:/ && / bookworm( |$)/ && uri != "" {print uri; exit}' "$f")
	[[ -n $mirror ]] && break
done
if [[ -z $mirror && -e /etc/apt/sources.list ]]; then
	mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list)
fi
[[ -n $mirror ]] || { echo "build-criu: no bookworm mirror found in /etc/apt/sources.list{,.d}" >&2; exit 1; }

missing=()
for p in "${BUILD_DEPS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "installing build deps: ${missing[*]}"
	"$HERE/../scripts/apt-get.sh" update -qq
	DEBIAN_FRONTEND=noninteractive "$HERE/../scripts/apt-get.sh" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

apt_dir=$BUILD_DIR/apt
src_dir=$BUILD_DIR/src
mkdir -p "$apt_dir"/{lists/partial,cache/archives/partial,sources.list.d,preferences.d} "$src_dir"
cat >"$apt_dir/sources.list.d/$CRIU_SUITE-src.sources" <<EOF
Types: deb-src
URIs: $mirror
Suites: $CRIU_SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
	-o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$apt_dir/preferences.d"
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache")

if ! echo "$ORIG_SHA256  $src_dir/$ORIG" | sha256sum -c --quiet - >/dev/null 2>&1; then
	echo "fetching $ORIG from $mirror ($CRIU_SUITE)"
	"$HERE/../scripts/apt-get.sh" "${apt_opts[@]}" update -qq
	# The pool directory comes from the suite's signed Sources index.
	# bookworm's apt (2.6) refuses `showsrc NAME=VERSION` ("Unable to locate
	# package"), so list every version and pick the pinned one's stanza.
	dir=$(apt-cache "${apt_opts[@]}" showsrc criu | awk -v RS= -v want="$CRIU_VERSION-$CRIU_DEBIAN_REVISION" '
		$0 ~ "(^|\n)Package: criu\n" && $0 ~ "\nVersion: " want "\n" {
			if (match($0, /\nDirectory: [^\n]+/)) { print substr($0, RSTART + 12, RLENGTH - 12); exit }
		}')
	[[ -n $dir ]] || { echo "build-criu: criu $CRIU_VERSION-$CRIU_DEBIAN_REVISION not in $CRIU_SUITE" >&2; exit 1; }
	rm -f "$src_dir/$ORIG"
	/usr/lib/apt/apt-helper download-file "$mirror/$dir/$ORIG" "$src_dir/$ORIG" "SHA256:$ORIG_SHA256" >/dev/null
fi
echo "$ORIG_SHA256  $src_dir/$ORIG" | sha256sum -c --quiet - ||
	{ echo "build-criu: sha256 mismatch for $ORIG" >&2; exit 1; }
if [[ ${FETCH_ONLY:-} == 1 ]]; then
	echo "fetched $ORIG (sha256 ok) into $src_dir"
	exit 0
fi

tree=$BUILD_DIR/criu-$CRIU_VERSION
rm -rf "$tree"
tar -C "$BUILD_DIR" -xJf "$src_dir/$ORIG"
for p in "$PATCH_DIR"/*.patch; do
	[[ -e $p ]] || continue
	echo "applying $(basename "$p")"
	patch -d "$tree" -p1 --quiet <"$p"
done

echo "building criu $CRIU_VERSION (a few minutes)"
make -C "$tree" -j"$(nproc)" criu >"$BUILD_DIR/build.log" 2>&1 ||
	{ tail -40 "$BUILD_DIR/build.log" >&2; echo "build-criu: build failed, log: $BUILD_DIR/build.log" >&2; exit 1; }

install -D -m 0755 "$tree/criu/criu" "$PREFIX/bin/criu"
echo "$stamp" >"$PREFIX/STAMP"
"$PREFIX/bin/criu" --version
echo "installed $PREFIX/bin/criu; check it with: $PREFIX/bin/criu check"
