#!/usr/bin/env bash
# build-rootfs.sh [BASE]: build the read-only Python rootfs that every jailcell
# sandbox uses as the lower layer of its overlay.
# build-rootfs.sh --packages PROFILE: print the profile's package list.
# build-rootfs.sh --profiles: print the profile names.
#
# PROFILE= picks the package set (default: default):
#   default  the data-science stack agents reach for (scipy, scikit-learn,
#            statsmodels, seaborn, sympy, ...), all from Debian 12
#   minimal  numpy, pandas, matplotlib, openpyxl, IPython: for small hosts
# One base holds one profile (the script refuses to mix them), so a host
# picks its profile by the base its `rootfs` config key names; by
# convention /var/lib/jailcell/rootfs (default) and
# /var/lib/jailcell/rootfs-minimal (`make rootfs ROOTFS_PROFILE=minimal`).
#
# Layout (rootfs.Open relies on it):
#   BASE/<version>/root/          the tree
#   BASE/<version>/manifest.json  written last by `jailcell rootfs seal`
#   BASE/current -> <version>     relative symlink, repointed atomically
# <version> is bookworm-<profile>- plus 12 hex of sha256(this script, the
# profile and its package list), so editing this script or a list makes a
# new version; an existing manifest means the version is done and the
# script exits at once.
#
# Needs root and mmdebstrap. Packages come from this machine's own apt sources;
# no mirror is named here. JAILCELL= names the binary that seals the tree
# (default ./bin/jailcell).
set -euo pipefail

# The minimal profile: what every rootfs had before profiles.
minimal_packages=(
	python3
	python3-numpy
	python3-pandas
	python3-matplotlib
	python3-openpyxl
	python3-pip
	python3-ipython
)
# The default profile: minimal plus what hosted interpreters' users import
# first. The host installs the same packages (Makefile APT_PKGS) so the
# conformance suite compares equal versions; rootfs's
# TestProfileVersionsMatchHost checks that they agree.
default_packages=(
	"${minimal_packages[@]}"
	python3-numexpr
	python3-scipy
	python3-seaborn
	python3-sklearn
	python3-statsmodels
	python3-sympy
	python3-networkx
	python3-bs4
	python3-lxml
	python3-html5lib
	python3-yaml
	python3-tabulate
	python3-jinja2
	python3-xlrd
	python3-xlsxwriter
	python3-odf
	python3-docx
	python3-reportlab
	python3-pypdf
	python3-requests
	python3-tqdm
)
# What the build imports to prove the tree works (module names, in order).
minimal_imports="numpy, pandas, matplotlib.pyplot, openpyxl, IPython, pip"
default_imports="$minimal_imports, numexpr, scipy.stats, seaborn, sklearn.linear_model, statsmodels.api, sympy, networkx, bs4, lxml.etree, html5lib, yaml, tabulate, jinja2, xlrd, xlsxwriter, odf.opendocument, docx, reportlab.pdfgen.canvas, pypdf, requests, tqdm"

self=$(readlink -f "${BASH_SOURCE[0]}")

die() {
	echo "build-rootfs: $*" >&2
	exit 1
}

# customize runs as mmdebstrap's --customize-hook, with /proc, /sys and /dev
# mounted in the tree. chroot is fine here: this is our own build, not a cell.
customize() {
	local tree=$1
	# The host's resolver and name must not leak into every sandbox.
	: >"$tree/etc/resolv.conf"
	echo jailcell >"$tree/etc/hostname"

	# Prebuild matplotlib's font cache so no sandbox spends a second on it.
	# The sandbox sets MPLCONFIGDIR=/root/.config/matplotlib; with only
	# HOME=/root matplotlib looks in ~/.cache/matplotlib, hence the link.
	chroot "$tree" env -i PATH=/usr/bin:/bin HOME=/root \
		MPLCONFIGDIR=/root/.config/matplotlib MPLBACKEND=Agg \
		python3 -c 'import matplotlib.pyplot'
	ls "$tree"/root/.config/matplotlib/fontlist-*.json >/dev/null ||
		die "matplotlib font cache was not written"
	mkdir -p "$tree/root/.cache"
	ln -sfn ../.config/matplotlib "$tree/root/.cache/matplotlib"

	# `python` is python3, as in E2B's templates and most images agents
	# know: their commands say `python script.py` or `python -m http.server`,
	# and bookworm installs only python3.
	ln -sfn python3 "$tree/usr/bin/python"

	# The tree is mounted read-only: every .pyc must exist now. Some test
	# data in the stdlib does not compile on purpose, hence || true.
	chroot "$tree" env -i PATH=/usr/bin:/bin HOME=/root \
		python3 -m compileall -qq -j 0 \
		/usr/lib/python3/dist-packages /usr/lib/python3.11 || true

	# Fail the build, not the first cell, if the stack does not import.
	chroot "$tree" env -i PATH=/usr/bin:/bin HOME=/root \
		MPLCONFIGDIR=/root/.config/matplotlib MPLBACKEND=Agg \
		python3 -c "import $imports"
}

profile=${PROFILE:-default}
case ${1-} in
--profiles)
	echo default minimal
	exit 0
	;;
--packages)
	profile=${2:?--packages PROFILE}
	;;
esac
case $profile in
default)
	packages=("${default_packages[@]}")
	imports=$default_imports
	;;
minimal)
	packages=("${minimal_packages[@]}")
	imports=$minimal_imports
	;;
*) die "PROFILE=$profile: want default (the data-science stack) or minimal (numpy, pandas, matplotlib, openpyxl, IPython)" ;;
esac

case ${1-} in
--packages)
	printf '%s\n' "${packages[@]}"
	exit 0
	;;
--customize)
	customize "$2"
	exit 0
	;;
esac

base=${1:-/var/lib/jailcell/rootfs}
jailcell=${JAILCELL:-./bin/jailcell}

version="bookworm-$profile-$( { cat "$self"; echo "$profile"; printf '%s\n' "${packages[@]}"; } | sha256sum | cut -c1-12)"
vdir="$base/$version"

if [[ -e $vdir/manifest.json ]]; then
	echo "rootfs $version up to date"
	exit 0
fi

[[ $(id -u) == 0 ]] || die "must run as root (mmdebstrap --mode=root, chroot)"
command -v mmdebstrap >/dev/null || die "mmdebstrap not found: apt-get install mmdebstrap"
[[ -x $jailcell ]] || die "jailcell binary $jailcell not found: build it first or set JAILCELL="
jailcell=$(readlink -f "$jailcell")

# The machine's own Debian sources, deb822 or one-line style.
sources=
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
	if [[ -s $f ]] && grep -qv '^[[:space:]]*\(#\|$\)' "$f"; then
		sources=$f
		break
	fi
done
[[ -n $sources ]] || die "no apt sources found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"

# One base, one profile: building minimal over a host's default base would
# quietly take packages away from every new session. A manifest without a
# profile predates profiles and may be replaced by either.
if [[ -e $base/current/manifest.json ]]; then
	have=$(sed -n 's/^  "profile": "\([a-z0-9-]*\)",$/\1/p' "$base/current/manifest.json")
	if [[ -n $have && $have != "$profile" ]]; then
		die "$base holds the $have profile; build PROFILE=$profile into a base of its own (e.g. make rootfs ROOTFS_PROFILE=$profile ROOTFS_BASE=${base%/}-$profile)"
	fi
fi

mkdir -p "$base"
chmod 0755 "$base"
exec 9>"$base/.build.lock"
flock -n 9 || die "another build holds $base/.build.lock"

build="$base/.build-$version"
rm -rf "$build"
# A version dir without a manifest is a build that died before sealing.
rm -rf "$vdir"

start=$(date +%s)
echo "building rootfs $version (profile $profile, ${#packages[@]} packages asked for) from $sources into $build"

include=$(IFS=,; echo "${packages[*]}")
mkdir "$build"
mmdebstrap --mode=root --variant=minbase --include="$include" \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-include=/usr/share/locale/locale.alias' \
	--dpkgopt='path-exclude=/usr/share/lintian/*' \
	--dpkgopt='path-exclude=/usr/share/linda/*' \
	--customize-hook="PROFILE=$profile bash \"$self\" --customize \"\$1\"" \
	bookworm "$build/root" "$sources"

tree="$build/root"
# mmdebstrap empties /run after the hooks, so the mount points are made here.
install -d -m 0755 "$tree/work" "$tree/run/jailcell" "$tree/opt/jailcell/wheelhouse"
cat >"$tree/etc/pip.conf" <<'PIP'
[global]
no-index = true
find-links = /opt/jailcell/wheelhouse
break-system-packages = true
root-user-action = ignore
disable-pip-version-check = true
PIP
chmod 0644 "$tree/etc/pip.conf"

# Setuid/setgid binaries (su, mount, passwd, ...) are only a way up for
# code in a cell, and Python needs none of them: strip the bits from the
# shared tree rather than rely on no_new_privs alone.
find "$tree" -xdev -type f -perm /6000 -exec chmod ug-s {} +

# Each sandbox gets its own /dev; device nodes have no place in a shared
# read-only tree (and `jailcell rootfs import` refuses them).
find "$tree/dev" -mindepth 1 \( -type b -o -type c -o -type p -o -type s \) -delete
rm -rf "$tree"/var/lib/apt/lists/* "$tree"/var/cache/apt/* \
	"$tree"/var/cache/debconf/*-old "$tree"/var/lib/dpkg/*-old
find "$tree/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$tree/usr/share/doc" -mindepth 1 -depth -type d -empty -delete

mv -T "$build" "$vdir"
"$jailcell" rootfs seal --profile "$profile" --profile-packages "$include" "$vdir"

ln -sfn "$version" "$base/.current.tmp"
mv -T "$base/.current.tmp" "$base/current"

echo "rootfs $version (profile $profile) built in $(($(date +%s) - start))s: $(du -s --block-size=1000000 "$vdir" | cut -f1) MB on disk"
