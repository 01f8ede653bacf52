#!/usr/bin/env bash
# check-leaks.sh: fail, listing each, when this host holds a jailcell mount,
# cgroup or process. `make test` runs it last: the tests must leave the host
# as they found it, and after any restart the host must hold exactly the
# live sessions' mounts and cgroups (docs), so with no daemon running that
# is none at all. A jailcell service running on this host is reported too.
#
# It only reads: it never kills, unmounts or removes anything (what it finds
# may be someone else's, and a report is what a leak needs).
#
# What counts:
#   mounts     in this mount namespace: a sandbox's disk tmpfs and root
#              overlay (source "jailcell"), its idmapped lower layer
#              (.../sandboxes/<id>/lower), anything under a test state dir
#              ($TMPDIR/jc*), and the tests' named network namespaces
#              (/run/netns/jc*)
#   cgroups    a directory named jailcell* in any hierarchy, up to three
#              levels down (cgroup roots are absolute: /jailcell,
#              /jailcell-test-<pkg>), systemd units (jailcell.service) aside
#   processes  anything in such a cgroup, the Python kernel (an argument
#              importing jailcell_kernel.start, or one named kernel.py as
#              kernels before the package were started), a jailcell
#              binary, a test binary re-run as a sandbox init (argument
#              "init"), and anything run from /var/lib/jailcell (the criu
#              of `make criu`). Zombies handed to PID 1 hold nothing and
#              are listed as a note only.
set -uo pipefail

tmp=${TMPDIR:-/tmp}
tmp=${tmp%/}
found=0
report() {
	found=1
	printf '  %s\n' "$*"
}

# --- mounts ---------------------------------------------------------------
# mountinfo: id parent maj:min root MOUNTPOINT opts [optional...] - FSTYPE SOURCE superopts
mounts=$(awk -v tmp="$tmp" '{
	mp = $5
	for (i = 7; i <= NF && $i != "-"; i++) {}
	fstype = $(i + 1); src = $(i + 2)
	if (src == "jailcell" || mp ~ "/sandboxes/[^/]+/(disk|root|lower)$" ||
	    index(mp, tmp "/jc") == 1 || index(mp, "/run/netns/jc") == 1)
		printf "%s (%s, source %s)\n", mp, fstype, src
}' /proc/self/mountinfo)
if [[ -n $mounts ]]; then
	echo "check-leaks: jailcell mounts left:"
	while IFS= read -r m; do report "$m"; done <<<"$mounts"
fi

# --- cgroups --------------------------------------------------------------
cgs=$(find /sys/fs/cgroup -mindepth 1 -maxdepth 3 -type d -name 'jailcell*' \
	! -name '*.service' ! -name '*.socket' ! -name '*.scope' ! -name '*.slice' 2>/dev/null | sort)
if [[ -n $cgs ]]; then
	echo "check-leaks: jailcell cgroups left:"
	# One line per cgroup path, with the hierarchies that hold it.
	while IFS= read -r line; do report "$line"; done < <(
		while IFS= read -r c; do
			rel=${c#/sys/fs/cgroup/}
			if [[ -e /sys/fs/cgroup/cgroup.controllers ]]; then
				h=v2 path=/$rel
			else
				h=${rel%%/*} path=/${rel#*/}
			fi
			printf '%s %s %s\n' "$path" "$h" "$(find "$c" -mindepth 1 -type d 2>/dev/null | wc -l)"
		done <<<"$cgs" | awk '{hs[$1] = hs[$1] (hs[$1] == "" ? "" : ",") $2; if ($3 > n[$1]) n[$1] = $3}
			END {for (p in hs) printf "%s in %s (%d cgroups below)\n", p, hs[p], n[p]}' | sort)
fi

# --- processes ------------------------------------------------------------
procs=()
notes=()
for d in /proc/[0-9]*; do
	pid=${d#/proc/}
	[[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
	# One read each: a process may be gone by the next.
	mapfile -d '' -t argv 2>/dev/null <"$d/cmdline" || continue
	((${#argv[@]})) || continue # kernel threads
	cg=
	IFS= read -r -d '' cg 2>/dev/null <"$d/cgroup"
	exe=$(readlink "$d/exe" 2>/dev/null) || exe=
	exe=${exe% (deleted)}
	why=
	if [[ $cg == *":/jailcell"* || $cg == *"/jailcell-"* ]]; then
		why="in a jailcell cgroup"
	fi
	for a in "${argv[@]}"; do
		[[ ${a##*/} == kernel.py || $a == *"jailcell_kernel.start import"* ]] && why="the Python kernel"
	done
	base=${exe##*/}
	[[ $base == jailcell || $base == jailcell-* ]] && why="a jailcell binary"
	[[ $base == *.test && ${argv[1]:-} == init ]] && why="a test binary's sandbox init"
	[[ $exe == /var/lib/jailcell/* ]] && why="a binary jailcell installed (criu)"
	[[ -n $why ]] || continue
	state=$(awk '/^State:/ {print $2; exit}' "$d/status" 2>/dev/null)
	ppid=$(awk '/^PPid:/ {print $2; exit}' "$d/status" 2>/dev/null)
	cmd=${argv[*]:0:8}
	cmd=${cmd//$'\n'/ }
	((${#cmd} <= 160)) || cmd="${cmd:0:160}..."
	line="pid $pid ($why, state ${state:-?}, ppid ${ppid:-?}): $cmd"
	if [[ $state == Z && $ppid == 1 ]]; then
		notes+=("$line")
	else
		procs+=("$line")
	fi
done
if ((${#procs[@]})); then
	echo "check-leaks: jailcell processes left:"
	for p in "${procs[@]}"; do report "$p"; done
fi
for n in "${notes[@]}"; do
	echo "check-leaks: note: a zombie handed to init (holds nothing): $n"
done

if ((found)); then
	echo "check-leaks: FAIL: the host holds jailcell mounts, cgroups or processes (listed above); nothing was removed" >&2
	exit 1
fi
echo "check-leaks: no jailcell mount, cgroup or process left"
