#!/usr/bin/env bash
# systemd-vm.sh: the README's install path under a real systemd, in a QEMU
# guest. A Debian 12 guest boots with systemd as PID 1 (pure cgroup v2, its
# default), `make install` runs there from a user's checkout, the socket is
# enabled, and a member of the jailcell group who is not root walks the
# README's "From zero to an agent" path: curl health, jailcell run, jailcell
# mcp under the official MCP TypeScript client, the Python client installed
# as the README says, a kernelspec and a notebook through nbclient. Then the
# service is stopped, started, and the guest rebooted, checking the session
# state docs/service.md, docs/store.md and docs/hibernate.md promise across
# each. Every step reports PASS or FAIL on its own (scripts/systemd-vm-guest.sh);
# the run fails if any step fails. docs/systemd-test.md has the details.
#
# Usage: scripts/systemd-vm.sh
# Env: VM_DIR (cache; default /var/cache/jailcell/vm-systemd), JAILCELL_BIN
# (default ./bin/jailcell), JAILCELL_ROOTFS (rootfs base, default
# /var/lib/jailcell/rootfs), CRIU_PREFIX (default /var/lib/jailcell/criu),
# MCPCLIENT_DIR (as fetch-mcpclient.sh), VM_MEM (MiB, default 3072), VM_SMP
# (default 2), VM_TIMEOUT (seconds for the whole guest, both boots; default
# 1500), VM_OUT (logs; default ./build/vm-systemd: console.log, steps.log,
# guest/<step>.log), VM_GUEST (the guest script; default
# scripts/systemd-vm-guest.sh). VM_WORKAROUNDS=1 applies the guest-side
# workarounds for the guest's known bugs (each printed as WORKAROUND in
# the steps), to see what lies beyond them; make test never sets it.
# FETCH_ONLY=1: resolve and download the guest's kernel (apt checks its
# hash) and resolve the guest's package list (mmdebstrap --simulate), then
# stop: the cold-path check `make test` runs with an empty VM_DIR.
#
# The guest image (Debian 12 from this machine's apt sources, the kernel's
# modules, a busybox initramfs that mounts it) is cached in VM_DIR under a
# key hashed from build_image below, the package list and the kernel
# version: it is rebuilt only when one of those changes. No guest
# networking (-nic none): nothing leaves this machine.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
VM_DIR=${VM_DIR:-/var/cache/jailcell/vm-systemd}
JAILCELL_BIN=${JAILCELL_BIN:-$here/bin/jailcell}
ROOTFS_BASE=${JAILCELL_ROOTFS:-/var/lib/jailcell/rootfs}
CRIU_PREFIX=${CRIU_PREFIX:-/var/lib/jailcell/criu}
VM_MEM=${VM_MEM:-3072}
VM_SMP=${VM_SMP:-2}
VM_TIMEOUT=${VM_TIMEOUT:-1500}
VM_OUT=${VM_OUT:-$here/build/vm-systemd}

# The guest's packages: systemd as init, what make install's recipe runs
# (make, install, sed, groupadd), what the README's path runs (curl, python3
# with venv/pip/setuptools for the client, jupyter_client + nbclient for the
# notebook, nodejs for the MCP client), criu 4.x's libraries (criu itself
# comes from the host's make criu) and iptables, which criu calls.
GUEST_PKGS=(
	systemd systemd-sysv udev kmod procps iproute2 make curl jq
	python3 python3-venv python3-pip python3-setuptools python3-wheel
	python3-jupyter-client python3-nbclient python3-nbformat
	nodejs iptables libbsd0 libgnutls30 libprotobuf-c1 libnl-3-200 libnet1 libuuid1
)
# Modules the initramfs loads to mount the root disk.
INITRD_MODULES="virtio_pci virtio_blk crc32c_generic ext4"

log() { echo "systemd-vm: $*" >&2; }
die() {
	log "$*"
	exit 1
}
t0=$(date +%s.%N)
elapsed() { printf '%.1fs' "$(echo "$(date +%s.%N) - $t0" | bc)"; }

apt_sources() {
	local f
	for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
		if [[ -s $f ]] && grep -qv '^[[:space:]]*\(#\|$\)' "$f"; then
			echo "$f"
			return
		fi
	done
	return 1
}

# extract_vmlinux VMLINUZ OUT: the uncompressed ELF, booted through QEMU's
# PVH entry (no BIOS, no in-kernel decompressor: half the boot time).
extract_vmlinux() {
	local vmlinuz=$1 out=$2 off
	off=$(LC_ALL=C grep -m1 -obUaP '\xfd7zXZ\x00' "$vmlinuz" | cut -d: -f1 || true)
	if [[ -n $off ]]; then
		xz -dc --single-stream < <(tail -c +$((off + 1)) "$vmlinuz") >"$out"
	else
		off=$(LC_ALL=C grep -m1 -obUaP '\x28\xb5\x2f\xfd' "$vmlinuz" | cut -d: -f1 || true)
		[[ -n $off ]] || die "neither xz nor zstd data in $vmlinuz"
		tail -c +$((off + 1)) "$vmlinuz" | zstd -dc 2>/dev/null >"$out" || true
	fi
	head -c 4 "$out" | grep -q ELF || die "no ELF vmlinux in $vmlinuz"
}

# build_image DIR KPKG: the cached guest, built from empty into DIR:
# vmlinux, initrd (busybox that mounts /dev/vda and execs systemd) and
# root.raw (ext4: Debian 12 minbase + GUEST_PKGS + the kernel's modules).
# Its text is part of the cache key: editing it rebuilds the image.
build_image() {
	local dir=$1 kpkg=$2 kver=${2#linux-image-} sources tree k
	sources=$(apt_sources) || die "no apt sources"
	k=$dir/kernel
	rm -rf "$k" && mkdir -p "$k/pkg"
	(cd "$k" && apt-get download "$kpkg" 2>/dev/null) || die "apt-get download $kpkg"
	dpkg -x "$k"/*.deb "$k/pkg"
	extract_vmlinux "$k/pkg/boot/vmlinuz-$kver" "$dir/vmlinux"

	tree=$dir/tree
	# A build that failed after this point reuses the tree (same key).
	if [[ ! -e $dir/tree.done ]]; then
		rm -rf "$tree"
		log "mmdebstrap: Debian 12 with ${#GUEST_PKGS[@]} packages into $tree"
		mmdebstrap --mode=root --variant=minbase --aptopt='APT::Install-Recommends "false"' \
			--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
			--dpkgopt='path-exclude=/usr/share/locale/*' \
			--include="$(IFS=,; echo "${GUEST_PKGS[*]}")" bookworm "$tree" "$sources" >&2 ||
			die "mmdebstrap of the guest"
		touch "$dir/tree.done"
	fi

	# The kernel's modules (overlay, 9p, netfilter, ...) without the
	# hardware the guest does not have.
	mkdir -p "$tree/lib/modules"
	rm -rf "$tree/lib/modules/$kver"
	cp -a "$k/pkg/lib/modules/$kver" "$tree/lib/modules/"
	(cd "$tree/lib/modules/$kver/kernel" && rm -rf sound drivers/gpu drivers/media drivers/net/wireless \
		drivers/net/ethernet drivers/infiniband drivers/staging drivers/usb drivers/iio drivers/bluetooth \
		drivers/isdn drivers/scsi net/bluetooth net/wireless net/mac80211)
	chroot "$tree" depmod "$kver"

	echo jcvm >"$tree/etc/hostname"
	printf '127.0.0.1 localhost\n127.0.1.1 jcvm\n' >"$tree/etc/hosts"
	# The rootfs disk carries the base layout make rootfs leaves
	# (<version>/, current); the run's files come over 9p. The 9p shares
	# are noauto: mounted at boot they raced the virtio-9p probe under load
	# ("9pnet_virtio: no channels available", emergency mode); the test
	# service mounts them, retrying, once the system is up.
	cat >"$tree/etc/fstab" <<-'EOF'
		LABEL=jailcell-rootfs /var/lib/jailcell/rootfs ext4 ro,noload 0 0
		jcrun /mnt/jcrun 9p noauto,trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose 0 0
		jcout /mnt/jcout 9p noauto,trans=virtio,version=9p2000.L,rw,msize=524288 0 0
	EOF
	mkdir -p "$tree/mnt/jcrun" "$tree/mnt/jcout" "$tree/var/lib/jailcell/rootfs"
	printf '9p\n9pnet_virtio\noverlay\n' >"$tree/etc/modules-load.d/jcvm.conf"
	# The test: the run's guest script, started once the system is up.
	cat >"$tree/etc/systemd/system/jcvm-test.service" <<-'EOF'
		[Unit]
		Description=jailcell systemd guest test (scripts/systemd-vm-guest.sh)
		After=multi-user.target
		RequiresMountsFor=/var/lib/jailcell/rootfs
		[Service]
		Type=simple
		ExecStartPre=/bin/sh -c 'for i in $$(seq 120); do for m in /mnt/jcrun /mnt/jcout; do mountpoint -q $$m || mount $$m; done; mountpoint -q /mnt/jcrun && mountpoint -q /mnt/jcout && exit 0; sleep 1; done; exit 1'
		ExecStart=/bin/bash /mnt/jcrun/guest.sh
		[Install]
		WantedBy=multi-user.target
	EOF
	ln -sf /etc/systemd/system/jcvm-test.service "$tree/etc/systemd/system/multi-user.target.wants/jcvm-test.service"
	# Nothing the test does not need competes for the emulated CPUs.
	local u
	for u in serial-getty@ttyS0.service getty@tty1.service apt-daily.timer apt-daily-upgrade.timer \
		e2scrub_all.timer e2scrub_reap.service fstrim.timer dpkg-db-backup.timer systemd-timesyncd.service \
		systemd-tmpfiles-clean.timer; do
		ln -sf /dev/null "$tree/etc/systemd/system/$u"
	done
	ln -sf /lib/systemd/system/multi-user.target "$tree/etc/systemd/system/default.target"

	# initrd: static busybox and the root disk's module closure.
	local ird=$dir/initrd.d mods=$k/pkg/lib/modules/$kver m rel want=""
	mkdir -p "$ird/bin" "$ird/dev" "$ird/proc" "$ird/sys" "$ird/newroot" "$ird/lib/modules/$kver"
	cp /bin/busybox "$ird/bin/busybox"
	mknod -m 600 "$ird/dev/console" c 5 1
	cp "$mods/modules.builtin" "$mods/modules.order" "$ird/lib/modules/$kver/"
	for m in $INITRD_MODULES; do
		rel=$(awk -F: -v m="/$m.ko" 'substr($1, length($1) - length(m) + 1) == m {print $1 ": " $2; exit}' "$tree/lib/modules/$kver/modules.dep")
		if [[ -z $rel ]]; then
			grep -q "/$m.ko\$" "$mods/modules.builtin" && continue
			die "module $m not in $kpkg"
		fi
		want="$want ${rel//:/}"
	done
	for m in $want; do
		mkdir -p "$ird/lib/modules/$kver/$(dirname "$m")"
		cp "$mods/$m" "$ird/lib/modules/$kver/$m"
	done
	busybox depmod -b "$ird" "$kver"
	echo "$INITRD_MODULES" >"$ird/modules"
	cat >"$ird/init" <<-'EOF'
		#!/bin/busybox sh
		/bin/busybox --install -s /bin
		export PATH=/bin
		mount -t proc proc /proc
		mount -t sysfs sysfs /sys
		mount -t devtmpfs devtmpfs /dev
		for m in $(cat /modules); do modprobe "$m" || echo "initrd: modprobe $m failed"; done
		for _ in $(seq 200); do [ -b /dev/vda ] && break; sleep 0.1; done
		if ! mount -t ext4 -o rw /dev/vda /newroot; then
			echo "initrd: cannot mount /dev/vda"
			poweroff -f
		fi
		umount /proc /sys /dev
		exec switch_root /newroot /lib/systemd/systemd
	EOF
	chmod 0755 "$ird/init"
	(cd "$ird" && find . | cpio -o -H newc --quiet) >"$dir/initrd"

	# Room for the state the test leaves (sessions, hibernation images).
	local kb
	kb=$(du -sk "$tree" | cut -f1)
	mkfs.ext4 -q -F -L jcvm-root -E root_owner=0:0 -d "$tree" "$dir/root.raw" "$((kb + 2 * 1024 * 1024))K" >/dev/null
	rm -rf "$tree" "$ird" "$k" "$dir/tree.done" "$dir/key"
}

# --- host tools (Debian packages), installed only when missing ----------
need=""
for p in qemu-system-x86 qemu-utils cpio busybox-static e2fsprogs xz-utils zstd bc mmdebstrap; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
if [[ -n $need ]]; then
	log "installing:$need"
	"$here/scripts/apt-get.sh" update -qq
	# shellcheck disable=SC2086 # one word per package
	DEBIAN_FRONTEND=noninteractive "$here/scripts/apt-get.sh" install -y -qq --no-install-recommends $need >/dev/null
fi

kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
[[ -n $kpkg ]] || die "cannot resolve linux-image-amd64 (apt-get update?)"

if [[ ${FETCH_ONLY:-} == 1 ]]; then
	mkdir -p "$VM_DIR/fetch"
	(cd "$VM_DIR/fetch" && apt-get download "$kpkg" 2>/dev/null) || die "apt-get download $kpkg"
	sources=$(apt_sources) || die "no apt sources"
	mmdebstrap --simulate --mode=root --variant=minbase --aptopt='APT::Install-Recommends "false"' \
		--include="$(IFS=,; echo "${GUEST_PKGS[*]}")" bookworm "$VM_DIR/sim" "$sources" >"$VM_DIR/fetch/simulate.log" 2>&1 ||
		{ cat "$VM_DIR/fetch/simulate.log" >&2; die "the guest's package list does not resolve"; }
	log "kernel $kpkg downloaded, ${#GUEST_PKGS[@]} guest packages resolve ($(elapsed)); FETCH_ONLY: not building"
	exit 0
fi

# --- what the guest uses from the host -----------------------------------
[[ -x $JAILCELL_BIN ]] || die "no jailcell binary at $JAILCELL_BIN: make build"
rootfs_dir=$ROOTFS_BASE/current
[[ -e $rootfs_dir/manifest.json && -d $rootfs_dir/root ]] || die "no rootfs at $rootfs_dir: make rootfs"
rootfs_dir=$(readlink -f "$rootfs_dir")
version=$(basename "$rootfs_dir")
[[ -x $CRIU_PREFIX/bin/criu ]] || die "no criu at $CRIU_PREFIX/bin/criu: make criu (the hibernation steps need it)"
mcp=$("$here/scripts/fetch-mcpclient.sh" | tail -1) || die "fetch-mcpclient.sh"

# --- the guest image, cached by what builds it ----------------------------
mkdir -p "$VM_DIR"
exec 9>"$VM_DIR/.lock"
flock 9
key=$({
	declare -f build_image extract_vmlinux
	echo "${GUEST_PKGS[*]} $INITRD_MODULES $kpkg"
} | sha256sum | cut -c1-16)
img=$VM_DIR/guest-$key
if [[ ! -e $img/STAMP ]]; then
	log "building the guest image $img (from empty; a few minutes)"
	rm -rf "$VM_DIR"/guest-*
	[[ $(cat "$VM_DIR/.build/key" 2>/dev/null) == "$key" ]] || rm -rf "$VM_DIR/.build"
	mkdir -p "$VM_DIR/.build"
	echo "$key" >"$VM_DIR/.build/key"
	build_image "$VM_DIR/.build" "$kpkg"
	touch "$VM_DIR/.build/STAMP"
	mv "$VM_DIR/.build" "$img"
	log "guest image built ($(elapsed))"
fi
# The rootfs as make rootfs lays it out (<version>/, current), on an ext4
# disk attached read-only: 9p cannot be idmapped (docs/cgroupv2.md).
rimg=$VM_DIR/rootfs-$version.ext4
if [[ ! -s $rimg ]]; then
	log "building $rimg from $rootfs_dir"
	rm -rf "$VM_DIR"/rootfs-*.ext4 "$VM_DIR"/rootfs-stamp-*
	stage=$VM_DIR/.rootfs-stage
	rm -rf "$stage" && mkdir -p "$stage"
	# Hard links: no copy of the 1.5 GB tree (same filesystem), else a copy.
	cp -al "$rootfs_dir" "$stage/$version" 2>/dev/null || cp -a "$rootfs_dir" "$stage/$version"
	ln -s "$version" "$stage/current"
	kb=$(du -sk "$stage" | cut -f1)
	mkfs.ext4 -q -F -O ^has_journal -L jailcell-rootfs -E root_owner=0:0 -d "$stage" \
		"$rimg.tmp" "$((kb * 12 / 10 + 65536))K" >/dev/null
	rm -rf "$stage"
	mv "$rimg.tmp" "$rimg"
	log "rootfs image built ($(elapsed))"
fi
flock -u 9

# --- this run's files: a read-only 9p share -------------------------------
run=$(mktemp -d /tmp/jailcell-sysvm.XXXXXX)
tailpid=
trap 'rm -rf "$run"; [[ -z $tailpid ]] || kill "$tailpid" 2>/dev/null || true' EXIT
share=$run/share
mkdir -p "$share/repo/bin" "$share/repo/docs" "$share/repo/client"
# What make install's recipe reads, and the Python client the README
# installs from the checkout.
cp "$here/Makefile" "$share/repo/"
cp -a "$here/configs" "$share/repo/"
cp "$here/docs/service.md" "$share/repo/docs/"
cp "$JAILCELL_BIN" "$share/repo/bin/jailcell"
(cd "$here/client" && tar --exclude=__pycache__ --exclude='*.egg-info' --exclude=build -cf - python) | tar -xf - -C "$share/repo/client"
cp -a "$CRIU_PREFIX" "$share/criu"
# The MCP client (4,000-odd small files) as one tar: copied file by file
# over 9p under emulation it took most of the guest's minute of setup.
tar -C "$mcp" -cf "$share/mcpclient.tar" node_modules package.json
tar -C "$here/test/mcpclient" -rf "$share/mcpclient.tar" client.mjs
cp "${VM_GUEST:-$here/scripts/systemd-vm-guest.sh}" "$share/guest.sh"
# jcapi METHOD PATH [BODY]: one request to the service, as the caller.
cat >"$share/jcapi" <<'EOF'
#!/bin/sh
exec curl -s --max-time 280 --unix-socket /run/jailcell/jailcell.sock -X "$1" "http://jailcell$2" ${3+-d "$3"}
EOF
chmod 0755 "$share/jcapi"
echo "VM_WORKAROUNDS=${VM_WORKAROUNDS:-0}" >"$share/env"
# The service hashes the rootfs's content at its first start: 2-4 s on a
# host, 4-5 minutes emulated here, most of this test's time. A real host
# pays it once and keeps a stamp that lets later starts skip it while the
# tree's metadata (device, inodes, times) is unchanged and the stamp is
# younger than rootfs_rehash_after (24 h). The guest's rootfs is this
# cached, read-only image, so the stamp the last passing run's service
# wrote vouches for it as it would on that host; the service checks it all
# again and hashes anyway if anything differs. The first run on a machine,
# and the first after the image is rebuilt, hashes in full.
stamp_cache=$VM_DIR/rootfs-stamp-$version
if [[ -d $stamp_cache ]]; then
	mkdir -p "$share/rootfs-stamp"
	cp "$stamp_cache"/rootfs-verified-*.json "$share/rootfs-stamp/" 2>/dev/null || true
fi
chmod -R a+rX "$share"
# The README lines the guest runs are copies (systemd-vm-guest.sh): each
# must still be in README.md word for word, or this test would pass on a
# path the README no longer shows.
while IFS= read -r line; do
	grep -qF -- "$line" "$here/README.md" || die "README.md no longer has this line the guest runs (update scripts/systemd-vm-guest.sh): $line"
done < <(sed -n 's/^[[:space:]]*#README: //p' "$here/scripts/systemd-vm-guest.sh")

# Larger than the image (the guest grows its ext4 into it): the state
# quota defaults to a share of the state filesystem.
qemu-img create -q -f qcow2 -F raw -b "$img/root.raw" "$run/root.qcow2" 16G
log "booting the guest (systemd, ${VM_MEM} MiB, $VM_SMP vCPUs, TCG); setup $(elapsed)"

# --- boot: the guest reboots itself once; QEMU ends at its power-off -------
rm -rf "$VM_OUT/guest"
mkdir -p "$VM_OUT/guest"
: >"$VM_OUT/console.log"
: >"$VM_OUT/steps.log"
: >"$VM_OUT/rc.log"
tail -n +1 -f "$VM_OUT/steps.log" &
tailpid=$!
boot=$(date +%s.%N)
set +e
# --foreground: QEMU stays in this script's process group, so ending the
# group (scripts/beside.sh, when make test fails elsewhere) ends QEMU too.
timeout --foreground --kill-after=10 "$VM_TIMEOUT" qemu-system-x86_64 \
	-accel tcg,thread=multi -cpu max -smp "$VM_SMP" -m "$VM_MEM" \
	-nodefaults -display none -nic none \
	-kernel "$img/vmlinux" -initrd "$img/initrd" \
	-append "console=ttyS0 quiet panic=-1 rdinit=/init systemd.show_status=false" \
	-drive "file=$run/root.qcow2,format=qcow2,if=virtio,cache=unsafe" \
	-drive "file=$rimg,format=raw,if=virtio,readonly=on,cache=unsafe" \
	-virtfs "local,path=$share,mount_tag=jcrun,security_model=none,readonly=on" \
	-virtfs "local,path=$VM_OUT/guest,mount_tag=jcout,security_model=none" \
	-serial "file:$VM_OUT/console.log" -serial "file:$VM_OUT/steps.log" -serial "file:$VM_OUT/rc.log"
qrc=$?
set -e
sleep 0.2
kill "$tailpid" 2>/dev/null || true
wait "$tailpid" 2>/dev/null || true
tailpid=
secs=$(echo "$(date +%s.%N) - $boot" | bc)
rc=$(tr -d '\r' <"$VM_OUT/rc.log" | sed -n 's/^rc=\([0-9]*\)$/\1/p' | tail -1)
if [[ -z $rc ]]; then
	[[ $qrc == 124 ]] && log "guest timed out after ${VM_TIMEOUT}s"
	log "guest gave no exit code (qemu exit $qrc); kernel console:"
	tail -n 40 "$VM_OUT/console.log" >&2
	rc=1
fi
# Kept only from a passing run, and only small (the service reads at most
# 4 KiB of it).
gstamps=("$VM_OUT"/guest/rootfs-stamp/rootfs-verified-*.json)
if [[ $rc == 0 && ${#gstamps[@]} == 1 && -f ${gstamps[0]} && ! -L ${gstamps[0]} && $(stat -c %s "${gstamps[0]}") -le 4096 ]]; then
	rm -rf "$stamp_cache.tmp" && mkdir -p "$stamp_cache.tmp" &&
		install -m 0600 "${gstamps[0]}" "$stamp_cache.tmp/" &&
		rm -rf "$stamp_cache" && mv "$stamp_cache.tmp" "$stamp_cache"
fi
log "summary:"
tr -d '\r' <"$VM_OUT/steps.log" | grep -E '^STEP ' >&2 || log "no step reported"
log "guest exit $rc, guest run $(printf '%.1f' "$secs")s, total $(elapsed); logs in $VM_OUT"
exit "$rc"
