#!/usr/bin/env bash
# check-fresh.sh [--full]: prove every fetch-or-build-once step works from
# nothing, the way it runs on a new machine, without touching the real
# caches (/var/cache/jailcell, /var/lib/jailcell) or the system's apt lists:
# each step gets empty temporary directories, and apt gets private, empty
# package lists (APT_CONFIG), filled by its own `apt-get update`.
#
# Quick (the default; `make test` runs it, so CI on a warm machine still
# exercises the cold path), about half a minute here:
#   apt       the system's sources update into empty lists; every package
#             `make deps` (APT_PKGS) and `make bench` (BENCH_PKGS) installs
#             has a candidate; every rootfs profile's packages are among
#             APT_PKGS (the host's ipykernel must see the same libraries)
#   criu      the pinned source looked up in trixie's Sources and its
#             tarball downloaded and checked by sha256 (FETCH_ONLY=1)
#   rootfs    mmdebstrap --simulate of build-rootfs.sh's package list, for
#             each profile (default, minimal)
#   vm        the cgroup v2 guest's kernel looked up, downloaded (apt checks
#             its hash), unpacked, and its base initramfs built (FETCH_ONLY=1)
#   vm-systemd the systemd guest's kernel downloaded and its package list
#             resolved (mmdebstrap --simulate) (systemd-vm.sh FETCH_ONLY=1,
#             beside the rest)
#   mcpclient the MCP TypeScript client test/mcpclient drives jailcell with,
#             installed by fetch-mcpclient.sh from its committed lock into an
#             empty cache, npm's own cache included, and loaded (about 15 s,
#             beside the rest)
#   openapi-tools the linter and TypeScript tools test/openapi checks
#             api/openapi.json with, installed by fetch-openapi-tools.sh from
#             its committed lock into an empty cache and run (beside the rest)
#   tsclient-tools the TypeScript client's build and test tools
#             (client/typescript's devDependencies), installed by
#             fetch-tsclient-tools.sh from its committed lock into an empty
#             cache and run (beside the rest)
#   e2b-sdk   E2B's stock JS SDKs (npm e2b, @e2b/code-interpreter) that
#             test/e2bsdk runs, installed by fetch-e2b-sdk.sh from its
#             committed lock into an empty cache and loaded (beside the rest)
#   versitygw the S3 test server's pinned module downloaded into an empty
#             module cache and checked against the Go checksum database
#             (fetch-versitygw.sh FETCH_ONLY=1, a few seconds)
# Full (`make check-fresh`, several minutes and about 4 GB in TMPDIR):
#   criu      built from empty and run (--version)
#   rootfs    built from empty into a temporary base and sealed
#   vm        the guest booted from empty (kernel, initramfs, the rootfs
#             image of that new rootfs) running one cgroup v2 test
#   vm-systemd the systemd guest's image built from empty and the README's
#             path run in it (scripts/systemd-vm.sh)
#   bench     the peers' packages downloaded (apt checks their hashes)
#   versitygw built from empty (its own GOPATH and caches) and run
#
# Env: APT_PKGS, BENCH_PKGS (from the Makefile), JAILCELL (binary that seals
# a rootfs, default ./bin/jailcell), GO, KEEP=1 keeps the temporary dirs.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
full=0
[[ ${1:-} == --full ]] && full=1
[[ $(id -u) == 0 ]] || { echo "check-fresh: must run as root (the scripts it checks do)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/jailcell-fresh.XXXXXX")
cleanup() {
	# A failure elsewhere: let the background check end before its dir goes.
	wait
	if [[ ${KEEP:-} == 1 ]]; then
		echo "check-fresh: kept $tmp"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

t0=$(date +%s)
step() { echo "check-fresh: $* ($(($(date +%s) - t0))s)"; }
fail() {
	echo "check-fresh: FAIL: $*" >&2
	exit 1
}

# The quick rootfs check has lists of its own and installs nothing: it runs
# beside the others (mostly waiting on the mirror and decompressing). The
# rest run one after another, since each may apt-get install what it needs.
bg_pids=() bg_names=()
background() {
	local name=$1
	shift
	"$@" >"$tmp/$name.log" 2>&1 &
	bg_pids+=($!) bg_names+=("$name")
}
# The rootfs's package resolution, one profile per call: build-rootfs.sh's
# own package lists (asked of the script, not copied: editing that script
# makes a new rootfs version, a full rebuild on every machine) and variant,
# through mmdebstrap --simulate, which fetches its own lists and installs
# nothing.
rootfs_simulate() {
	local profile=$1 script=$here/runtime/build-rootfs.sh variant sources f
	local -a packages
	variant=$(grep -o -m1 -- '--variant=[a-z]*' "$script")
	[[ -n $variant ]] || { echo "no variant in $script"; return 1; }
	mapfile -t packages < <("$script" --packages "$profile")
	((${#packages[@]})) || { echo "no package list for profile $profile in $script"; return 1; }
	for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
		if [[ -s $f ]] && grep -qv '^[[:space:]]*\(#\|$\)' "$f"; then
			sources=$f
			break
		fi
	done
	[[ -n ${sources:-} ]] || { echo "no apt sources"; return 1; }
	echo "profile $profile: ${#packages[@]} packages"
	mmdebstrap --simulate --mode=root "$variant" --include="$(IFS=,; echo "${packages[*]}")" \
		bookworm "$tmp/rootfs-sim-$profile" "$sources"
}
declare -A what=([mcpclient]="mcpclient: the pinned MCP TypeScript client installed from empty and loaded")
if ((!full)); then
	# Each profile beside the others: each waits on the mirror for its own lists.
	for profile in $("$here/runtime/build-rootfs.sh" --profiles); do
		background "rootfs-$profile" rootfs_simulate "$profile"
		what[rootfs-$profile]="rootfs: profile $profile's package list resolves (mmdebstrap --simulate)"
	done
fi
# The same in quick and full: the install is small (about 10 MB).
background mcpclient env MCPCLIENT_DIR="$tmp/mcpclient" "$here/scripts/fetch-mcpclient.sh"
what[openapi-tools]="openapi-tools: the pinned Redocly CLI, openapi-typescript and typescript installed from empty and run"
background openapi-tools env OPENAPI_TOOLS_DIR="$tmp/openapi-tools" "$here/scripts/fetch-openapi-tools.sh"
what[tsclient-tools]="tsclient-tools: the TypeScript client's pinned typescript, @types/node and openapi-typescript installed from empty and run"
background tsclient-tools env TSCLIENT_TOOLS_DIR="$tmp/tsclient-tools" "$here/scripts/fetch-tsclient-tools.sh"
what[e2b-sdk]="e2b-sdk: E2B's pinned stock JS SDKs installed from empty and loaded"
background e2b-sdk env E2B_SDK_DIR="$tmp/e2b-sdk" "$here/scripts/fetch-e2b-sdk.sh"

# --- apt: private, empty lists from the system's own sources ----------------
apt=$tmp/apt
mkdir -p "$apt"/{lists/partial,cache/archives/partial}
# _apt cannot write into a root-only mktemp dir; root downloads (apt warns).
chmod 0755 "$tmp" "$apt"
cat >"$apt/apt.conf" <<EOF
Dir::State::Lists "$apt/lists";
Dir::Cache "$apt/cache";
EOF
export APT_CONFIG=$apt/apt.conf
"$here/scripts/apt-get.sh" update -qq || fail "apt's update into empty lists ($apt/lists)"
# One apt-cache run for all (each run loads the whole cache): a package
# with no stanza or a "(none)" candidate is missing.
# shellcheck disable=SC2086 # word lists from the Makefile
pkgs=$(printf '%s\n' ${APT_PKGS:-} ${BENCH_PKGS:-} | sort -u)
if [[ -n $pkgs ]]; then
	# shellcheck disable=SC2086
	have=$(apt-cache policy $pkgs 2>/dev/null | awk '/^[^ ]+:$/ {p = substr($1, 1, length($1) - 1)} /Candidate:/ && $2 != "(none)" {print p}' | sort -u)
	missing=$(comm -23 <(echo "$pkgs") <(echo "$have") | tr '\n' ' ')
	[[ -z $missing ]] || fail "no installable candidate for: $missing"
fi
step "apt: $(echo ${APT_PKGS:-} ${BENCH_PKGS:-} | wc -w) packages of make deps and make bench resolve from empty lists"
if ((!full)); then
	# The kernel looked up in the private lists just filled, downloaded into
	# an empty dir; mmdebstrap --simulate fetches lists of its own.
	background vm-systemd env FETCH_ONLY=1 VM_DIR="$tmp/vm-systemd" "$here/scripts/systemd-vm.sh"
	what[vm-systemd]="vm-systemd: the systemd guest's kernel downloaded and its packages resolve (mmdebstrap --simulate)"
fi
# The host runs the conformance suite's ipykernel with the rootfs's
# libraries: every package of every profile must be one make deps installs.
if [[ -n ${APT_PKGS:-} ]]; then
	for profile in $("$here/runtime/build-rootfs.sh" --profiles); do
		# shellcheck disable=SC2086
		missing=$(comm -23 <("$here/runtime/build-rootfs.sh" --packages "$profile" | sort -u) <(printf '%s\n' $APT_PKGS | sort -u) | tr '\n' ' ')
		[[ -z $missing ]] || fail "rootfs profile $profile has packages the host does not get from make deps (add them to the Makefile's ROOTFS_PY_PKGS): $missing"
	done
	step "apt: every rootfs profile's packages are among make deps' packages"
fi

# --- criu ---------------------------------------------------------------------
if ((full)); then
	PREFIX=$tmp/criu BUILD_DIR=$tmp/criu-build "$here/runtime/build-criu.sh" || fail "criu from empty"
	"$tmp/criu/bin/criu" --version >/dev/null || fail "the criu built from empty does not run"
	step "criu: built from empty"
else
	FETCH_ONLY=1 PREFIX=$tmp/criu BUILD_DIR=$tmp/criu-build "$here/runtime/build-criu.sh" || fail "criu lookup and download from empty"
	[[ ! -e $tmp/criu/bin/criu ]] || fail "FETCH_ONLY built criu"
	step "criu: source looked up and downloaded with its sha256"
fi

# --- versitygw (the store tests' S3 server) -----------------------------------
if ((full)); then
	bin=$(VERSITYGW_DIR=$tmp/versitygw "$here/scripts/fetch-versitygw.sh") || fail "versitygw from empty"
	"$bin" --version >/dev/null 2>&1 || "$bin" --help >/dev/null 2>&1 || fail "the versitygw built from empty does not run"
	step "versitygw: built from empty"
else
	FETCH_ONLY=1 VERSITYGW_DIR=$tmp/versitygw "$here/scripts/fetch-versitygw.sh" >/dev/null || fail "versitygw module download from empty"
	[[ ! -e $tmp/versitygw/v1.8.0 ]] || fail "FETCH_ONLY built versitygw"
	step "versitygw: pinned module downloaded and verified from empty"
fi

# --- rootfs -------------------------------------------------------------------
if ((full)); then
	jc=${JAILCELL:-$here/bin/jailcell}
	JAILCELL=$jc "$here/runtime/build-rootfs.sh" "$tmp/rootfs" || fail "rootfs from empty"
	[[ -e $tmp/rootfs/current/manifest.json ]] || fail "the rootfs built from empty has no manifest"
	step "rootfs: built from empty and sealed"
fi

# --- the cgroup v2 guest ------------------------------------------------------
if ((full)); then
	plan=$tmp/vm-plan
	echo 'test/cgroupv2 ^TestMemoryMaxOOMKillCountedInMemoryEvents$ 10m' >"$plan"
	VM_DIR=$tmp/vm JAILCELL_ROOTFS=$tmp/rootfs VM_OUT=$tmp/vm-out GO=${GO:-go} \
		"$here/scripts/cgroupv2-vm.sh" "$plan" || fail "the cgroup v2 guest from empty"
	step "vm: kernel, initramfs and rootfs image from empty; the guest ran a test"
else
	FETCH_ONLY=1 VM_DIR=$tmp/vm "$here/scripts/cgroupv2-vm.sh" || fail "the guest's kernel and initramfs from empty"
	step "vm: kernel fetched, unpacked, base initramfs built"
fi

# --- the systemd guest ---------------------------------------------------------
if ((full)); then
	VM_DIR=$tmp/vm-systemd JAILCELL_ROOTFS=$tmp/rootfs CRIU_PREFIX=$tmp/criu VM_OUT=$tmp/vm-systemd-out \
		JAILCELL_BIN=${JAILCELL:-$here/bin/jailcell} MCPCLIENT_DIR=$tmp/mcpclient \
		"$here/scripts/systemd-vm.sh" || fail "the systemd guest from empty"
	step "vm-systemd: guest image from empty; the README's path ran under systemd"
fi

# --- bench peers ----------------------------------------------------------------
if ((full)) && [[ -n ${BENCH_PKGS:-} ]]; then
	mkdir -p "$tmp/bench-debs"
	# shellcheck disable=SC2086
	(cd "$tmp/bench-debs" && apt-get download -qq $BENCH_PKGS) || fail "download the bench peers"
	step "bench: $(ls "$tmp/bench-debs" | wc -l) peer packages downloaded and checked"
fi

# --- the quick checks that ran beside -----------------------------------------
for i in "${!bg_pids[@]}"; do
	name=${bg_names[$i]}
	if ! wait "${bg_pids[$i]}"; then
		sed 's/^/  /' "$tmp/$name.log" >&2
		fail "$name from empty (log above)"
	fi
	step "${what[$name]}"
done

step "every fetch-or-build-once step works from empty ($( ((full)) && echo full || echo quick))"
