#!/bin/bash
# systemd-vm-guest.sh: the guest half of scripts/systemd-vm.sh. Runs as
# root under the guest's systemd (jcvm-test.service), from the run's 9p
# share at /mnt/jcrun. Each step prints "STEP <name> PASS|FAIL (<s>s)" on
# ttyS1 (with its log's tail when it fails) and the run ends with "rc=<n>"
# on ttyS2, n being the number of failed steps (0: all passed).
#
# Boot 1: install, the README's path as a group member, stop/start, then
# reboot. Boot 2: what must have survived the reboot, then power off.
#
# Lines starting "#README: " are the README.md lines a step runs, word for
# word; the host refuses to boot when one is no longer in README.md. Where a
# step cannot run a line as written, it says why next to it.
set -uo pipefail
exec >/dev/ttyS1 2>&1

S=/run/jailcell/jailcell.sock
share=/mnt/jcrun
state=/var/lib/jcvm
logs=/mnt/jcout # the host's VM_OUT/guest
checkout=/home/agent/jailcell
mkdir -p "$state"
phase=$(cat "$state/phase" 2>/dev/null || echo 1)
. "$share/env"
mcpdir=/opt/jcvm/mcpclient
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# step NAME CMD...: runs CMD, its output in $logs/NAME.log.
step() {
	local name=$1 t r
	shift
	t=$(date +%s)
	echo "--- $name"
	if "$@" >"$logs/$name.log" 2>&1; then r=PASS; else r=FAIL; fi
	[[ $r == PASS ]] || tail -n 30 "$logs/$name.log" | sed 's/^/    /'
	echo "STEP $name $r ($(($(date +%s) - t))s)" | tee -a "$state/results"
}
finish() {
	local fails
	fails=$(grep -c ' FAIL ' "$state/results" 2>/dev/null)
	echo "=== $(grep -c '^STEP' "$state/results") steps, ${fails:-0} failed"
	echo "rc=${fails:-0}" >/dev/ttyS2
	sync
	systemctl --no-block --job-mode=replace-irreversibly start poweroff.target
	exit 0
}
# ag CMD...: CMD as the group member "agent", as after a fresh login
# (initgroups), no root; bounded, so a hung front door fails its step.
ag() { timeout 300 setpriv --reuid=agent --regid=agent --init-groups --reset-env "$@"; }
# as_agent 'SHELL LINE' [DIR]: a line of the README as agent, in DIR
# (default: home).
as_agent() { ag bash -c "cd ${2:-~} && $1"; }
# as_root 'LINE': a README line for root; this guest, like many hosts, has
# no sudo, so a leading "sudo " is dropped.
as_root() { (cd "$checkout" && USER=agent bash -c "${1#sudo }"); }
want() { # want NEEDLE TEXT: TEXT contains NEEDLE, or say what it was
	[[ $2 == *"$1"* ]] && return 0
	echo "want \"$1\" in: $2"
	return 1
}
api() { ag "$share/jcapi" "$@"; }
# new_session PERSIST: a session of agent's, its id on stdout.
new_session() {
	local out
	out=$(api POST /v1/sessions "{\"ttl_s\": 3600${1:+, \"persist\": \"$1\"}}") || return 1
	jq -er .session <<<"$out" || {
		echo "create: $out" >&2
		sandbox_dirs >&2
		return 1
	}
}
# exec_in ID CODE: the cell's stdout, or its error printed and 1.
exec_in() {
	local out
	out=$(api POST "/v1/sessions/$1/exec" "$(jq -cn --arg c "$2" '{code: $c}')") || return 1
	jq -e '.ok and .result.status == "ok"' <<<"$out" >/dev/null || { echo "exec: $out" >&2; return 1; }
	jq -r .result.stdout <<<"$out"
}

# --- boot 1 -------------------------------------------------------------
boot_checks() {
	want systemd "$(cat /proc/1/comm)" || return 1
	want cgroup2fs "$(stat -fc %T /sys/fs/cgroup)" || return 1
	systemctl is-system-running --wait || systemctl --failed --no-legend
	grep -q ' /var/lib/jailcell/rootfs ' /proc/mounts
}
setup() {
	# A user with a checkout of their own, as the README's reader has, and
	# the criu make criu builds (the hibernation steps need it).
	# The run's overlay is larger than the cached image: grow into it. The
	# state quota defaults to a share of this filesystem, and a hibernation
	# reserves the policy's memory limit (1 GiB) against it.
	resize2fs /dev/vda && df -h /
	useradd -m -s /bin/bash agent
	# A persistent journal: boot 2 reports what the service did at reboot.
	mkdir -p /var/log/journal && journalctl --flush
	cp -a "$share/repo" "$checkout"
	chown -R agent:agent "$checkout"
	cp -a "$share/criu" /var/lib/jailcell/criu
	# The rootfs stamp of the last passing run (systemd-vm.sh says why),
	# where the service keeps it, before its first start.
	local st
	for st in "$share"/rootfs-stamp/rootfs-verified-*.json; do
		[[ -f $st ]] || continue
		install -d -m 0711 /var/lib/jailcell/state
		install -m 0600 "$st" /var/lib/jailcell/state/
		echo "rootfs stamp of the last passing run: $(basename "$st")"
	done
	# Node resolves modules with many stats: from the local disk, not 9p.
	mkdir -p "$mcpdir" && tar -xf "$share/mcpclient.tar" -C "$mcpdir"
}
# workaround TEXT CMD...: only with VM_WORKAROUNDS=1, and said so.
workaround() {
	[[ $VM_WORKAROUNDS == 1 ]] || return 0
	echo "WORKAROUND: $1"
	shift
	"$@"
}
sandbox_dirs() {
	stat -c '%A %U:%G %n' /var/lib/jailcell /var/lib/jailcell/state /var/lib/jailcell/state/sandboxes 2>&1
	systemctl show -p UMask jailcell.service
}
install_step() {
	#README: make install
	# The install recipe itself; its prerequisite `rootfs` (Go, the network)
	# is the host's: the built binary is in the checkout and the rootfs on
	# the read-only disk at /var/lib/jailcell/rootfs, as make rootfs leaves it.
	as_root 'make -o rootfs install'
}
allow_group() {
	#README: sed -i 's/^allowed_gids: \[\]/allowed_gids: [jailcell]/' /etc/jailcell/config.yaml
	as_root "sed -i 's/^allowed_gids: \[\]/allowed_gids: [jailcell]/' /etc/jailcell/config.yaml" &&
		grep -qx 'allowed_gids: \[jailcell\]' /etc/jailcell/config.yaml
}
enable_socket() {
	#README: if [ -d /run/systemd/system ]; then systemctl enable --now jailcell.socket; else start-stop-daemon --start --background --notify-await --notify-timeout 120 --make-pidfile --pidfile /run/jailcell.pid --output /var/log/jailcell.log --exec /usr/local/bin/jailcell -- serve --config /etc/jailcell/config.yaml; fi
	as_root 'if [ -d /run/systemd/system ]; then systemctl enable --now jailcell.socket; else start-stop-daemon --start --background --notify-await --notify-timeout 120 --make-pidfile --pidfile /run/jailcell.pid --output /var/log/jailcell.log --exec /usr/local/bin/jailcell -- serve --config /etc/jailcell/config.yaml; fi' && systemctl is-active jailcell.socket &&
		ls -ld /run/jailcell "$S"
}
# ready: the service is up and its warm pool member built. Under emulation
# a create that arrives while the service is still starting (its criu
# probe, the pool's first kernel) queues behind them and misses its 60 s
# start bound; a real host is 5-30x faster.
ready() {
	local end=$((SECONDS + 600)) t0=$SECONDS
	# Up to 600 s: the first start hashes the whole rootfs (110 s alone
	# under TCG, 225 s beside other load); later ones check its metadata.
	# Bounded by the clock, not by tries (a hung curl took 20 s a try), and
	# a timeout leaves the service's own account in the step's log: once a
	# guest ran out of its whole time here and said nothing of why.
	while ((SECONDS < end)); do
		curl -s --max-time 20 --unix-socket "$S" http://jailcell/metrics | grep -q '^jailcell_pool_ready{policy="default"} [1-9]' &&
			{ echo "pool ready after ~$((SECONDS - t0))s"; return 0; }
		sleep 2
	done
	echo "no warm pool member after 600 s"
	systemctl status --no-pager jailcell.service jailcell.socket 2>&1 | head -30
	curl -s --max-time 20 --unix-socket "$S" http://jailcell/metrics | grep -E '^jailcell_(pool|sessions)' | head -20
	journalctl -b --no-pager -u jailcell.service | tail -n 120
	return 1
}
emulation_config() {
	sed -i -e 's/^preload: \[numpy, pandas, matplotlib.pyplot\]$/preload: []/' \
		-e 's/^\([[:space:]]*\)size: auto$/\1size: 1/' /etc/jailcell/config.yaml
	jailcell config --config /etc/jailcell/config.yaml | grep -E '^(preload|pool.size) ' | tee /dev/stderr |
		grep -c -E '^(preload +\[\]|pool.size +1) ' | grep -qx 2
}
add_user() {
	#README: usermod -aG jailcell "$AGENTUSER"
	as_root 'AGENTUSER=agent; usermod -aG jailcell "$AGENTUSER"' && id agent && want jailcell "$(ag id -Gn)"
}
health() {
	local out
	#README: curl -s --unix-socket /run/jailcell/jailcell.sock http://jailcell/healthz
	out=$(as_agent 'curl -s --unix-socket /run/jailcell/jailcell.sock http://jailcell/healthz') || return 1
	echo "$out"
	jq -e .ok <<<"$out" >/dev/null && want '"cgroup_mode":"v2"' "$out"
}
# The socket started the service (socket activation), and the service runs
# in the subtree systemd delegated (docs/service.md, cgroups).
activated() {
	local cg=/sys/fs/cgroup/system.slice/jailcell.service
	systemctl is-active jailcell.service && systemctl show -p MainPID,NRestarts jailcell.service &&
		grep -qx "$(systemctl show -P MainPID jailcell.service)" "$cg/supervisor/cgroup.procs" &&
		ls "$cg"
}
run_cell() {
	local out
	#README: echo 'import numpy as np; print(np.arange(5).sum())' | bin/jailcell run -
	# The installed jailcell (on PATH), not the checkout's bin/.
	out=$(as_agent "echo 'import numpy as np; print(np.arange(5).sum())' | jailcell run -") || { echo "$out"; return 1; }
	echo "$out"
	[[ $(tail -n1 <<<"$out") == 10 ]]
}
mcp() {
	local out
	#README: {"mcpServers": {"jailcell": {"command": "/usr/local/bin/jailcell", "args": ["mcp"]}}}
	# The official TypeScript client spawns it as that config says
	# (test/mcpclient/client.mjs, scenario full: state across calls, a
	# figure, progress, list_files).
	out=$(ag env MCPCLIENT_DIR="$mcpdir" node "$mcpdir/client.mjs" \
		'{"transport":"stdio","command":"/usr/local/bin/jailcell","args":["mcp"],"scenario":"full"}')
	echo "$out"
	jq -e '.ok and (.calls.get.text | contains("42")) and (.calls.plot.images | length >= 1) and ([.schemaErrors[] | select(. != null)] | length == 0)' <<<"$out" >/dev/null
}
python_client() {
	local out
	#README: python3 -m venv --system-site-packages ~/.venvs/jailcell
	as_agent 'python3 -m venv --system-site-packages ~/.venvs/jailcell' || return 1
	#README: ~/.venvs/jailcell/bin/pip install --no-index /usr/local/share/jailcell/python/jailcell-*.whl
	as_agent '~/.venvs/jailcell/bin/pip install --no-index /usr/local/share/jailcell/python/jailcell-*.whl' || return 1
	#README: from jailcell import Sandbox
	#README: with Sandbox(socket="/run/jailcell/jailcell.sock") as sbx:
	#README:     print(sbx.run_code("import numpy as np; np.arange(5).sum()", on_stdout=print).text)
	out=$(ag /home/agent/.venvs/jailcell/bin/python3 -c 'from jailcell import Sandbox
with Sandbox(socket="/run/jailcell/jailcell.sock") as sbx:
    print(sbx.run_code("import numpy as np; np.arange(5).sum()", on_stdout=print).text)') || { echo "$out"; return 1; }
	echo "$out"
	[[ $(tail -n1 <<<"$out") == 10 ]]
}
notebook() {
	#README: jailcell kernelspec install --user
	as_agent 'jailcell kernelspec install --user' || return 1
	# One notebook through nbclient with that kernel: state across cells.
	ag python3 -c '
import nbformat, nbclient
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 6 * 7"), nbformat.v4.new_code_cell("print(x)")])
nbclient.NotebookClient(nb, kernel_name="jailcell", timeout=240, startup_timeout=240).execute()
out = nb.cells[1].outputs
print(out)
assert out and out[0].get("text", "").strip() == "42", out'
}
# systemctl stop, start with sessions opted out of surviving it
# (survive_restart and hibernate_on_shutdown false; both are on in the
# shipped config): the stop drains and tears every sandbox down, the unit's
# cgroup goes with it, the old session answers not_found with state "lost"
# saying why, and a "persist" workspace comes back in a new session of that
# name (config.example.yaml, docs/service.md, docs/store.md). The defaults
# are put back at the end.
stop_start() {
	local sid out cg=/sys/fs/cgroup/system.slice/jailcell.service
	sed -i -e 's/^\([[:space:]]*\)survive_restart: true/\1survive_restart: false/' \
		-e 's/^\([[:space:]]*\)hibernate_on_shutdown: true/\1hibernate_on_shutdown: false/' /etc/jailcell/config.yaml
	want false "$(jailcell config --config /etc/jailcell/config.yaml | grep survive_restart)" || return 1
	systemctl restart jailcell.service && ready || return 1
	sid=$(new_session files) || return 1
	exec_in "$sid" "open('kept.txt', 'w').write('kept'); x = 41" || return 1
	echo "sandbox cgroups: $(cd "$cg/sandboxes" && ls -d -- */)"
	compgen -G "$cg/sandboxes/*/cgroup.procs" >/dev/null || { echo "no sandbox cgroup under $cg/sandboxes"; return 1; }
	systemctl stop jailcell.service jailcell.socket || return 1
	! systemctl is-active jailcell.service || return 1
	[[ ! -e $cg ]] || { echo "$cg left after stop"; return 1; }
	[[ ! -e $S ]] || { echo "$S left after stop"; return 1; }
	systemctl start jailcell.socket || return 1
	ready || return 1
	out=$(api POST "/v1/sessions/$sid/exec" '{"code": "x"}')
	echo "old session after restart: $out"
	jq -e '.ok == false and .error.code == "not_found" and .error.state == "lost"' <<<"$out" >/dev/null || return 1
	sid=$(new_session files) || return 1
	want kept "$(exec_in "$sid" "print(open('kept.txt').read())")" || return 1
	api DELETE "/v1/sessions/$sid"
	sed -i -e 's/^\([[:space:]]*\)survive_restart: false/\1survive_restart: true/' \
		-e 's/^\([[:space:]]*\)hibernate_on_shutdown: false/\1hibernate_on_shutdown: true/' /etc/jailcell/config.yaml
	systemctl restart jailcell.service && ready
}
# The shipped configuration keeps sessions across a restart (what
# systemctl restart, a package upgrade and a reboot send): a live session's
# variable and file answer after `systemctl restart`, nothing configured.
restart_keeps() {
	local sid
	want true "$(jailcell config --config /etc/jailcell/config.yaml | grep survive_restart)" || return 1
	want true "$(jailcell config --config /etc/jailcell/config.yaml | grep hibernate_on_shutdown)" || return 1
	sid=$(new_session) || return 1
	exec_in "$sid" "x = 41; open('kept.txt', 'w').write('kept')" || return 1
	systemctl restart jailcell.service && ready || return 1
	want "42 kept" "$(exec_in "$sid" "print(x + 1, open('kept.txt').read())")" || return 1
	api DELETE "/v1/sessions/$sid"
}
# sessions.hibernate_on_shutdown: true (docs/hibernate.md): a stop
# hibernates the live session, the next start restores it on its next cell,
# variables intact.
hibernate_stop_start() {
	local sid out
	sed -i 's/^\([[:space:]]*\)hibernate_on_shutdown: false/\1hibernate_on_shutdown: true/' /etc/jailcell/config.yaml
	want true "$(jailcell config --config /etc/jailcell/config.yaml | grep hibernate_on_shutdown)" || return 1
	systemctl restart jailcell.service && ready || return 1
	sid=$(new_session) || return 1
	exec_in "$sid" "y = 41; f = open('open.txt', 'w'); f.write('a')" || return 1
	systemctl stop jailcell.service || return 1
	ls -l "/var/lib/jailcell/state/sessions/$sid"
	[[ -e /var/lib/jailcell/state/sessions/$sid/hibernated ]] || { echo "no hibernated mark for $sid"; return 1; }
	systemctl start jailcell.service && ready || return 1
	out=$(api GET /v1/sessions)
	echo "sessions: $out"
	want '"hibernated"' "$out" || return 1
	want 42 "$(exec_in "$sid" "print(y + 1)")" || return 1
	echo "$sid" >"$state/hibernated-session"
}

# --- boot 2 -------------------------------------------------------------
after_reboot() {
	systemctl is-enabled jailcell.socket && systemctl is-active jailcell.socket && health && ready
}
session_after_reboot() {
	local sid
	sid=$(cat "$state/hibernated-session") || return 1
	want 42 "$(exec_in "$sid" "print(y + 1)")"
}
files_after_reboot() {
	local sid
	sid=$(new_session files) || return 1
	want kept "$(exec_in "$sid" "print(open('kept.txt').read())")"
}

if [[ $phase == 1 ]]; then
	: >"$state/results"
	echo "=== boot 1: $(uname -r), systemd $(systemctl --version | head -1)"
	step boot boot_checks
	step setup setup
	step make-install install_step
	workaround "the unit's UMask=0077 makes state dirs 0700 (sandbox init: EACCES); drop-in UMask=0022" \
		eval 'mkdir -p /etc/systemd/system/jailcell.service.d && printf "[Service]\nUMask=0022\n" >/etc/systemd/system/jailcell.service.d/umask.conf && systemctl daemon-reload'
	workaround "config.yaml is 0640 root:root, front doors die reading it; chmod 0644" chmod 0644 /etc/jailcell/config.yaml
	workaround "the unit's seccomp-based hardening (SystemCallArchitectures, LockPersonality, RestrictRealtime, RestrictSUIDSGID) puts the daemon under seccomp, and criu's PTRACE_O_SUSPEND_SECCOMP is refused to a seccomp'd tracer: no hibernation; drop-in clears them" \
		eval 'printf "[Service]\nSystemCallArchitectures=\nLockPersonality=no\nRestrictRealtime=no\nRestrictSUIDSGID=no\n" >/etc/systemd/system/jailcell.service.d/criu.conf && systemctl daemon-reload'
	step allowed-gids allow_group
	# Emulated CPUs are 5-30x slower. A kernel that imports the preload
	# (numpy, pandas, matplotlib) misses its 60 s start bound here, and the
	# warm pool's default (2 per CPU) would start 4 at once beside the
	# test's: no preload (cells import what they use), one warm member.
	step emulation-config emulation_config
	step enable-socket enable_socket
	step usermod add_user
	step curl-health health
	step socket-activated activated
	step ready ready
	# For the next run (systemd-vm.sh): the stamp the service wrote or kept.
	mkdir -p "$logs/rootfs-stamp" && cp /var/lib/jailcell/state/rootfs-verified-*.json "$logs/rootfs-stamp/" 2>/dev/null
	journalctl -b --no-pager -u jailcell.service | grep -m1 'rootfs content' | cut -c1-400
	step jailcell-run run_cell
	step jailcell-mcp mcp
	step python-client python_client
	step kernelspec-nbclient notebook
	step stop-start stop_start
	step restart-keeps-sessions restart_keeps
	step hibernate-stop-start hibernate_stop_start
	journalctl -b --no-pager -u jailcell.service -u jailcell.socket >"$logs/journal-boot1.log" 2>&1
	echo 2 >"$state/phase"
	sync
	echo "=== rebooting"
	systemctl --no-block --job-mode=replace-irreversibly start reboot.target
	exit 0
fi
echo "=== boot 2 (after reboot)"
step boot-2 boot_checks
step after-reboot-health after_reboot
step after-reboot-hibernated-session session_after_reboot
step after-reboot-persisted-files files_after_reboot
journalctl -b -1 --no-pager -u jailcell.service -u jailcell.socket >"$logs/journal-boot1.log" 2>&1
journalctl -b --no-pager -u jailcell.service -u jailcell.socket >"$logs/journal-boot2.log" 2>&1
echo 3 >"$state/phase"
finish
