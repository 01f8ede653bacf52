#!/bin/busybox sh
# /init of the throwaway cgroup v2 guest (scripts/cgroupv2-vm.sh builds it).
# Stage 1 copies the initramfs into a tmpfs and switch_roots there, because
# pivot_root (which every container runtime uses) refuses to work while / is
# the initramfs. Stage 2 mounts a pure cgroup v2 tree, loads the modules,
# mounts the host's rootfs share read-only, runs the test plan
# (/vmtest/plan: "<binary> <test regex> <timeout>" per line) and reports:
# test output on ttyS1, "rc=<n>" on ttyS2, kernel console on ttyS0.
# It must never power off silently: any path that reaches poweroff has
# written an exit code first.

/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

report() {
	echo "rc=$1" >/dev/ttyS2
	sync
	poweroff -f
}

if [ ! -e /.stage2 ]; then
	mkdir -p /stage2
	mount -t devtmpfs devtmpfs /dev
	mount -t tmpfs -o mode=0755 stage2 /stage2 || report 1
	for e in /*; do
		case "$e" in /proc | /stage2 | /sys | /dev) continue ;; esac
		cp -a "$e" /stage2/ || report 1
	done
	mkdir -p /stage2/proc /stage2/sys /stage2/dev
	touch /stage2/.stage2
	umount /dev
	exec switch_root /stage2 /init
fi

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /tmp
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
exec >/dev/ttyS1 2>&1

fail() {
	echo "vm-init: $*"
	report 1
}

mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup || fail "mount cgroup2"
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
	echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control || fail "enable controller $c"
done
# No v1 hierarchy may exist: that is the point of this guest.
grep -q '^cgroup ' /proc/mounts && fail "a cgroup v1 hierarchy is mounted"

for m in $(cat /vmtest/modules); do
	modprobe "$m" || fail "modprobe $m"
done
ip link set lo up

. /vmtest/env
mkdir -p "$VM_ROOTFS_MOUNT"
case "$VM_ROOTFS_DEV" in
9p) mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=524288,cache=loose rootfs "$VM_ROOTFS_MOUNT" ||
	fail "mount 9p rootfs share" ;;
*)
	for _ in $(seq 100); do [ -b "$VM_ROOTFS_DEV" ] && break; sleep 0.1; done
	mount -t ext4 -o ro,noload "$VM_ROOTFS_DEV" "$VM_ROOTFS_MOUNT" || fail "mount $VM_ROOTFS_DEV" ;;
esac
# Like a real host: allocations are not refused up front, so a sandbox
# hits its memory.max (and the OOM verdict) rather than ENOMEM at malloc.
echo 1 >/proc/sys/vm/overcommit_memory

echo "vm-init: kernel $(uname -r), cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
echo "vm-init: rootfs $JAILCELL_ROOTFS via $VM_ROOTFS_DEV, $(grep MemTotal /proc/meminfo)"

rc=0
while read -r bin run timeout; do
	[ -n "$bin" ] || continue
	log=/tmp/$bin.log
	echo "=== $bin -test.run '$run'"
	start=$(date +%s)
	(cd "/vmtest/$bin.dir" && "/vmtest/$bin" -test.v -test.count=1 -test.timeout "$timeout" -test.run "$run") >"$log" 2>&1
	brc=$?
	# Short output only: the serial line is slow. Full log lines for
	# failures and the per-test verdicts.
	grep -E '^(=== RUN|\s*--- (PASS|FAIL|SKIP)|PASS|FAIL|ok|panic)|_test.go:[0-9]+:' "$log" | grep -v '^=== RUN'
	echo "=== $bin exit $brc in $(($(date +%s) - start))s"
	[ "$brc" = 0 ] || { rc=1; tail -n 40 "$log"; }
	# A test that skips here is a failure: this guest exists to run them.
	if grep -E -q -- '--- SKIP' "$log"; then
		echo "vm-init: $bin: tests skipped in the guest (not allowed):"
		grep -E -B2 -- '--- SKIP' "$log"
		rc=1
	fi
	# Every top-level test the plan names must have passed (a regex that
	# matches nothing would otherwise pass silently).
	for want in $(echo "$run" | tr -d '^$()' | tr '|' ' '); do
		grep -q -- "^--- PASS: $want " "$log" || { echo "vm-init: $bin: $want did not pass"; rc=1; }
	done
done </vmtest/plan
report $rc
