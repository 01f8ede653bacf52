package isolate

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate/internal/procfs"
	"github.com/jailcell/jailcell/isolate/seccomp"
)

// Posture check. A restore (hibernate, template, fork, snapshot, rollback)
// runs whatever criu's images say: seccomp mode and filters, capability
// sets, no_new_privs and mounts are all fields of those images, and an
// image edited in the store (before the fix: core-*.img with seccomp off, every
// capability and no_new_privs 0, checksums recomputed) came back with
// "Seccomp: 0" and "CapEff: 000001ffffffffff". So a restored sandbox is
// not handed out until the host has read its confinement from /proc and
// found it equal to what a cold start of the same libcontainer
// configuration has; otherwise it is destroyed (Disk.build's cleanup) and
// the restore answers ErrPosture naming what differed.
//
// Everything is read from the host side, never from the sandbox's word:
// /proc/PID/status of every thread of every process in the sandbox's
// cgroup, /proc/PID/{uid,gid}_map, /proc/PID/ns/*, /proc/PID/cgroup and
// /proc/PID/mountinfo of the init.

// procReadMax bounds each /proc file read: a status file is ~1.5 KiB, a
// sandbox's mountinfo a few KiB; a restored image may add mounts, and a
// mountinfo over the bound is itself a difference.
const procReadMax = 256 << 10

// readProc reads a /proc file of at most procReadMax bytes.
func readProc(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, procReadMax+1))
	if err != nil {
		return nil, err
	}
	if len(b) > procReadMax {
		return nil, fmt.Errorf("%s: over %d bytes", path, procReadMax)
	}
	return b, nil
}

// statusFields parses a /proc/PID/status ("Key:\tvalue" lines).
func statusFields(b []byte) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// readStatus reads /proc/PID/status (or /proc/PID/task/TID/status: pass
// "PID/task/TID").
func readStatus(pid string) (map[string]string, error) {
	b, err := readProc("/proc/" + pid + "/status")
	if err != nil {
		return nil, err
	}
	return statusFields(b), nil
}

// mountEntry is one line of mountinfo.
type mountEntry struct {
	dev    string // major:minor
	root   string // the mounted directory within its filesystem
	point  string // mount point, as the process sees it
	opts   []string
	fstype string
}

func parseMountinfo(b []byte) []mountEntry {
	var out []mountEntry
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 6 || sep+1 >= len(f) {
			continue
		}
		out = append(out, mountEntry{
			dev: f[2], root: unescapeMountinfo(f[3]), point: unescapeMountinfo(f[4]),
			opts: strings.Split(f[5], ","), fstype: f[sep+1],
		})
	}
	return out
}

// namespaces compared: every one the sandbox is given. The time namespace
// is not: criu gives a restored sandbox one that a cold start lacks.
var postureNamespaces = []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"}

// wantMount is what a cold start has at one mount point.
type wantMount struct {
	fstype string // "" for any (masked paths, devices)
	dev    string // major:minor a bind must come from, "" for any
	flags  int    // MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC that must be set
	// required: the mount must be there. A masked or read-only path of
	// the host's /proc or /sys is: an image edited in the store to leave
	// a mask out would otherwise come back with the host file readable,
	// a check that only refuses extra mounts never noticing.
	required bool
}

// posture is a cold start's confinement, derived from the libcontainer
// configuration it is given: what the host expects to read back.
type posture struct {
	status     map[string]string // per-thread /proc status fields
	uidMap     string            // normalised "inside outside count" lines
	gidMap     string
	cgroupPath string
	mounts     map[string]wantMount
	// rlimits: "Max open files" and the like, as /proc/PID/limits names
	// them, to "soft hard" in its units.
	rlimits map[string]string
	// ifaces are the network interfaces the sandbox may have ("lo", and
	// "eth0" with an egress allowlist).
	ifaces map[string]bool
	// filters is every thread's seccomp filter chain as a cold start of
	// the same configuration loads it (nil: not compared).
	filters *seccomp.FilterSum
}

// zeroCaps is a capability set with nothing in it, as /proc shows it.
const zeroCaps = "0000000000000000"

// coldPostureOf is the posture a cold start of cfg has, but for the
// seccomp filter programs (Host.coldPosture adds them). Seccomp_filters is 1:
// libcontainer's init loads one filter (TestPostureColdStartPasses
// measures it); capabilities are none (containerConfig gives none, and a
// configuration with any is refused here rather than guessed at).
func coldPostureOf(cfg *configs.Config) (posture, error) {
	p := posture{status: map[string]string{}, mounts: map[string]wantMount{}}
	if c := cfg.Capabilities; c != nil && (len(c.Bounding)+len(c.Effective)+len(c.Inheritable)+len(c.Permitted)+len(c.Ambient)) > 0 {
		return p, fmt.Errorf("%w: posture check of a configuration with capabilities", ErrUnsupported)
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		p.status[k] = zeroCaps
	}
	p.status["Seccomp"], p.status["Seccomp_filters"] = "0", "0"
	if cfg.Seccomp != nil {
		p.status["Seccomp"], p.status["Seccomp_filters"] = "2", "1"
	}
	p.status["NoNewPrivs"] = "0"
	if cfg.NoNewPrivileges {
		p.status["NoNewPrivs"] = "1"
	}
	p.uidMap, p.gidMap = idMapText(cfg.UIDMappings), idMapText(cfg.GIDMappings)
	p.rlimits = map[string]string{}
	for _, r := range cfg.Rlimits {
		if name, ok := rlimitNames[r.Type]; ok {
			p.rlimits[name] = limitText(r.Soft) + " " + limitText(r.Hard)
		}
	}
	p.ifaces = map[string]bool{"lo": true}
	p.cgroupPath = cfg.Cgroups.Path

	rootDev, err := devOf(cfg.Rootfs)
	if err != nil {
		return p, err
	}
	p.mounts["/"] = wantMount{fstype: "overlay", dev: rootDev}
	const checked = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for _, m := range cfg.Mounts {
		w := wantMount{fstype: m.Device, flags: m.Flags & checked}
		if m.IsBind() {
			w.fstype = ""
			src := m.Source
			if !filepath.IsAbs(src) {
				src = filepath.Join(cfg.Rootfs, src)
			}
			if w.dev, err = devOf(src); err != nil {
				return p, err
			}
		}
		p.mounts[m.Destination] = w
	}
	for _, path := range cfg.MaskPaths {
		p.mounts[path] = wantMount{required: hostHas(path) && !slices.Contains(lateMasks, path)}
	}
	for _, path := range cfg.ReadonlyPaths {
		p.mounts[path] = wantMount{flags: unix.MS_RDONLY, required: hostHas(path)}
	}
	// In a user namespace libcontainer bind-mounts each device from the
	// host's /dev.
	for _, d := range cfg.Devices {
		if d.Path != "" {
			p.mounts[d.Path] = wantMount{}
		}
	}
	return p, nil
}

// lateMasks are masked paths a sandbox hibernated by an older jailcell
// lacks: its restore is not refused for their absence alone (it had the
// same view before the upgrade), every fork and cold start has them.
var lateMasks = []string{bootIDPath}

// hostHas says whether a masked or read-only path exists in the host's
// /proc or /sys: a sandbox's own proc and sysfs, of the same kernel, have
// the same entries, and libcontainer and the zygote skip a path that does
// not exist. Looked up once per path: every fork's posture check asks.
func hostHas(path string) bool {
	if has, ok := hostPaths.Load(path); ok {
		return has.(bool)
	}
	has := strings.HasPrefix(path, "/proc/") || strings.HasPrefix(path, "/sys/")
	if has {
		_, err := os.Lstat(path)
		has = err == nil
	}
	hostPaths.Store(path, has)
	return has
}

// hostPaths caches hostHas.
var hostPaths sync.Map

// rlimitNames are /proc/PID/limits' names of the limits a configuration
// sets.
var rlimitNames = map[int]string{
	unix.RLIMIT_NOFILE:     "Max open files",
	unix.RLIMIT_CORE:       "Max core file size",
	unix.RLIMIT_FSIZE:      "Max file size",
	unix.RLIMIT_NPROC:      "Max processes",
	unix.RLIMIT_SIGPENDING: "Max pending signals",
	unix.RLIMIT_MSGQUEUE:   "Max msgqueue size",
	unix.RLIMIT_MEMLOCK:    "Max locked memory",
}

func limitText(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}

// checkRlimits: the init's limits are the configuration's.
func checkRlimits(pid string, want map[string]string, d *diffs) {
	b, err := readProc("/proc/" + pid + "/limits")
	if err != nil {
		d.addf("read limits: %v", err)
		return
	}
	got := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		for name := range want {
			if rest, ok := strings.CutPrefix(l, name); ok {
				f := strings.Fields(rest)
				if len(f) >= 2 {
					got[name] = f[0] + " " + f[1]
				}
			}
		}
	}
	for name, w := range want {
		if got[name] != w {
			d.addf("%s %q, want %q", name, got[name], w)
		}
	}
}

// checkIfaces: the init's network namespace has only the interfaces a
// cold start's has.
func checkIfaces(pid string, want map[string]bool, d *diffs) {
	b, err := readProc("/proc/" + pid + "/net/dev")
	if err != nil {
		d.addf("read net/dev: %v", err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range lines[min(2, len(lines)):] {
		name, _, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || !want[name] {
			d.addf("network interface %q that a cold start lacks", name)
		}
	}
}

func idMapText(ms []configs.IDMap) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%d %d %d\n", m.ContainerID, m.HostID, m.Size)
	}
	return b.String()
}

func devOf(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("stat %s for the posture check: %w", path, err)
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// maxDiffs bounds what an error lists.
const maxDiffs = 8

// diffs collects differences, at most maxDiffs of them.
type diffs struct {
	list []string
	more int
}

func (d *diffs) addf(format string, a ...any) {
	if len(d.list) >= maxDiffs {
		d.more++
		return
	}
	d.list = append(d.list, fmt.Sprintf(format, a...))
}

func (d *diffs) err() error {
	if len(d.list) == 0 {
		return nil
	}
	s := strings.Join(d.list, "; ")
	if d.more > 0 {
		s += fmt.Sprintf("; and %d more", d.more)
	}
	return fmt.Errorf("%w: %s", ErrPosture, s)
}

// checkPosture compares the live sandbox whose init is pid, and whose
// cgroup directories are cgDirs (controller -> host path, as libcontainer
// states them), with want. It answers nil or ErrPosture listing what
// differs.
func checkPosture(pid int, cgDirs map[string]string, want posture) error {
	var d diffs
	init := strconv.Itoa(pid)
	checkNamespaces(init, &d)
	checkIDMaps(init, want, &d)
	checkMounts(init, want.mounts, &d)
	checkRlimits(init, want.rlimits, &d)
	checkIfaces(init, want.ifaces, &d)
	// Every thread of every process of the sandbox: one restored task with
	// its filter off is enough to escape. Its processes are those in its
	// cgroup and the init's descendants (an image can place a task in
	// another cgroup; it cannot leave it outside the init's tree).
	pids, err := sandboxProcs(pid, cgDirs, &d)
	if err != nil {
		d.addf("read the sandbox's processes: %v", err)
	}
	initNS := nsInodes(init)
	var threads [][2]int // pid, tid
	for _, p := range pids {
		ps := strconv.Itoa(p)
		checkCgroup(ps, want.cgroupPath, &d)
		if p != pid {
			for ns, ino := range nsInodes(ps) {
				if ino != initNS[ns] {
					d.addf("process %d: %s namespace %s, init's %s", p, ns, ino, initNS[ns])
				}
			}
		}
		tids, err := os.ReadDir("/proc/" + ps + "/task")
		if err != nil {
			continue // ended since the list was read
		}
		for _, t := range tids {
			st, err := readStatus(ps + "/task/" + t.Name())
			if err != nil {
				continue
			}
			for _, k := range statusKeys {
				if got := st[k]; got != want.status[k] {
					d.addf("%s %s, want %s (pid %d thread %s)", k, got, want.status[k], p, t.Name())
				}
			}
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				threads = append(threads, [2]int{p, tid})
			}
		}
	}
	if want.filters != nil {
		checkFilters(threads, *want.filters, &d)
	}
	return d.err()
}

// checkFilters compares every thread's seccomp filter programs with a
// cold start's: the status fields say how many filters, not what they
// allow (an image whose one filter allows everything has the same count).
func checkFilters(threads [][2]int, want seccomp.FilterSum, d *diffs) {
	tids := make([]int, len(threads))
	for i, t := range threads {
		tids[i] = t[1]
	}
	sums, errs, err := seccomp.ReadFilters(tids)
	if err != nil {
		d.addf("read the seccomp filters: %v", err)
		return
	}
	if len(sums) == 0 {
		// At least the init's threads live (the caller's restore just
		// started them): a reader that reads none proves nothing.
		d.addf("seccomp filter: no thread of %d could be read", len(threads))
	}
	for _, t := range threads {
		if e, ok := errs[t[1]]; ok {
			d.addf("seccomp filter unreadable: %s (pid %d thread %d)", e, t[0], t[1])
		} else if got, ok := sums[t[1]]; ok && got != want {
			d.addf("seccomp filter %v, want %v (pid %d thread %d)", got, want, t[0], t[1])
		}
	}
}

// statusKeys are the /proc status fields compared, in the order reported.
var statusKeys = []string{"Seccomp", "Seccomp_filters", "NoNewPrivs", "CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"}

// sandboxProcs lists the sandbox's processes: the init, its descendants
// and every process in its cgroup. The cgroup must have no child cgroup:
// a cold start has none (no cgroup filesystem is mounted inside), and a
// restore would create one only because its image asked.
func sandboxProcs(pid int, cgDirs map[string]string, d *diffs) ([]int, error) {
	set := map[int]bool{pid: true}
	for ctrl, dir := range cgDirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			if os.IsNotExist(err) {
				continue // a controller libcontainer names but the host lacks
			}
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() {
				d.addf("cgroup %s has a child cgroup %s that a cold start lacks", ctrl, e.Name())
			}
		}
	}
	procs, err := cgroupProcs(filepath.Join(cgDirs["pids"], "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		set[p] = true
	}
	if !slices.Contains(procs, pid) {
		d.addf("init %d is not in the sandbox's cgroup", pid)
	}
	// Descendants: walked from the init where the kernel lists each
	// thread's children, else from every host process's parent (a scan
	// that grows with the host's processes, each create's cost).
	if desc, ok := procfs.Descendants(pid); ok {
		for _, k := range desc {
			set[k] = true
		}
	} else {
		kids := map[int][]int{}
		for p, st := range procfs.Table() {
			kids[st.PPid] = append(kids[st.PPid], p)
		}
		seen := map[int]bool{pid: true} // a pid reused during the scan must not loop
		for todo := []int{pid}; len(todo) > 0; {
			p := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			for _, k := range kids[p] {
				if !seen[k] {
					seen[k], set[k] = true, true
					todo = append(todo, k)
				}
			}
		}
	}
	out := make([]int, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

func cgroupProcs(path string) ([]int, error) {
	b, err := readProc(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %q", path, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func nsInodes(pid string) map[string]string {
	out := map[string]string{}
	for _, ns := range postureNamespaces {
		out[ns], _ = os.Readlink("/proc/" + pid + "/ns/" + ns)
	}
	return out
}

// checkNamespaces: each of the init's namespaces is its own, not the
// host's (this thread's: libcontainer may leave the process's leader
// parked in a sandbox's mount namespace).
func checkNamespaces(pid string, d *diffs) {
	runtime.LockOSThread()
	host := map[string]string{}
	for _, ns := range postureNamespaces {
		host[ns], _ = os.Readlink("/proc/thread-self/ns/" + ns)
	}
	runtime.UnlockOSThread()
	for ns, ino := range nsInodes(pid) {
		if ino == "" || ino == host[ns] {
			d.addf("%s namespace %q is the host's %q", ns, ino, host[ns])
		}
	}
}

func checkIDMaps(pid string, want posture, d *diffs) {
	for _, m := range []struct{ name, want string }{{"uid_map", want.uidMap}, {"gid_map", want.gidMap}} {
		b, err := readProc("/proc/" + pid + "/" + m.name)
		if err != nil {
			d.addf("read %s: %v", m.name, err)
			continue
		}
		var got strings.Builder
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			got.WriteString(strings.Join(strings.Fields(l), " ") + "\n")
		}
		if got.String() != m.want {
			d.addf("%s %q, want %q", m.name, strings.TrimSpace(got.String()), strings.TrimSpace(m.want))
		}
	}
}

// checkCgroup: the process is in the sandbox's own cgroup in every
// hierarchy (as the host sees it: the daemon runs in the root cgroup
// namespace).
func checkCgroup(pid, want string, d *diffs) {
	b, err := readProc("/proc/" + pid + "/cgroup")
	if err != nil {
		return // ended since it was listed
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			d.addf("cgroup line %q", l)
			continue
		}
		if f[2] != want {
			d.addf("cgroup %s:%s, want %s (pid %s)", f[1], f[2], want, pid)
		}
	}
}

var mountFlagNames = []struct {
	flag int
	name string
}{{unix.MS_RDONLY, "ro"}, {unix.MS_NOSUID, "nosuid"}, {unix.MS_NODEV, "nodev"}, {unix.MS_NOEXEC, "noexec"}}

// checkMounts: every mount the init sees is one a cold start has, of the
// same filesystem type, from the same device for binds and the root, with
// at least the cold start's ro/nosuid/nodev/noexec; no mount point is
// stacked twice (a host directory mounted over a sandbox's); every
// required one (masks, read-only paths) is there.
func checkMounts(pid string, want map[string]wantMount, d *diffs) {
	b, err := readProc("/proc/" + pid + "/mountinfo")
	if err != nil {
		d.addf("read mountinfo: %v", err)
		return
	}
	seen := map[string]int{}
	for _, m := range parseMountinfo(b) {
		seen[m.point]++
		w, ok := want[m.point]
		switch {
		case !ok:
			d.addf("mount %s (%s %s from %s) that a cold start lacks", m.point, m.fstype, m.root, m.dev)
			continue
		case seen[m.point] > 1:
			d.addf("mount %s stacked %d times", m.point, seen[m.point])
		case w.fstype != "" && m.fstype != w.fstype:
			d.addf("mount %s is %s, want %s", m.point, m.fstype, w.fstype)
		case w.dev != "" && m.dev != w.dev:
			d.addf("mount %s from device %s, want %s", m.point, m.dev, w.dev)
		}
		for _, f := range mountFlagNames {
			if w.flags&f.flag != 0 && !slices.Contains(m.opts, f.name) {
				d.addf("mount %s lacks %s", m.point, f.name)
			}
		}
	}
	if seen["/"] == 0 {
		d.addf("no root mount")
	}
	for _, point := range slices.Sorted(maps.Keys(want)) {
		if want[point].required && seen[point] == 0 {
			d.addf("mount %s that a cold start has is missing", point)
		}
	}
}

// verifyPosture is the check Disk.build runs on a restored sandbox before
// it is returned: cfg is the configuration libcontainer was given.
func (h *Host) verifyPosture(s *Sandbox, cfg *configs.Config) error {
	want, err := h.coldPosture(cfg)
	if err != nil {
		return err
	}
	if s.net != nil {
		want.ifaces["eth0"] = true // the egress gateway's veth (isolate/network)
	}
	return checkPosture(s.pid, s.cgDirs(), want)
}

// coldPosture is coldPostureOf(cfg) with the seccomp filter programs a
// cold start of cfg loads.
func (h *Host) coldPosture(cfg *configs.Config) (posture, error) {
	want, err := coldPostureOf(cfg)
	if err != nil || cfg.Seccomp == nil {
		return want, err
	}
	f, err := h.seccompReference(cfg.Seccomp)
	if err != nil {
		return want, err
	}
	want.filters = &f
	return want, nil
}

// cgDirs is the sandbox's cgroup directory of each controller.
func (s *Sandbox) cgDirs() map[string]string {
	if s.cg.v2 {
		return map[string]string{"pids": s.cg.paths[""]}
	}
	return s.cg.paths
}
