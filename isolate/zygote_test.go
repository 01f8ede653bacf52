package isolate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/policy"
)

// zygoteProbe is the program forks run in these tests: it writes what the
// sandbox looks like from inside into the writable bind, then sleeps.
const zygoteProbe = `import os, sys, time
out = sys.argv[1]
lines = []
lines.append("uid %d gid %d pid %d" % (os.getuid(), os.getgid(), os.getpid()))
lines.append("hostname " + os.uname().nodename)
lines.append("json " + str("json" in sys.modules))
with open("/proc/self/status") as f:
    for l in f:
        if l.split(":")[0] in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp", "Seccomp_filters"):
            lines.append(l.strip().replace("\t", " "))
lines.append("fds " + " ".join(sorted(os.listdir("/proc/self/fd"))))
# Each further argument is a host pid (the zygote's, a sibling's) this
# sandbox must not reach: signal, ptrace, its memory, its root.
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for pid in sys.argv[2:]:
    res = []
    try:
        os.kill(int(pid), 0)
        res.append("kill:ok")
    except OSError as e:
        res.append("kill:" + errno.errorcode[e.errno])
    r = libc.ptrace(16, int(pid), None, None)  # PTRACE_ATTACH
    res.append("ptrace:" + ("ok" if r == 0 else errno.errorcode[ctypes.get_errno()]))
    for what in ("mem", "root/"):
        try:
            open("/proc/%s/%s" % (pid, what), "rb").close() if what == "mem" else os.listdir("/proc/%s/root" % pid)
            res.append(what + ":ok")
        except OSError as e:
            res.append(what + ":" + errno.errorcode[e.errno])
    lines.append("target%s %s" % (pid, " ".join(res)))
with open(out + ".tmp", "w") as f:
    f.write("\n".join(lines) + "\n")
os.rename(out + ".tmp", out)
time.sleep(600)
`

func startTestZygote(t *testing.T, h *Host, p policy.Policy) *Zygote {
	t.Helper()
	z, err := h.StartZygote(ZygoteSpec{
		Policy:  p,
		Command: []string{"/usr/bin/python3", "-s", "/run/jailcell/probe.py"},
		Dir:     "/run/jailcell",
		Prepare: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "probe.py"), []byte(zygoteProbe), 0o644)
		},
		Preload: []string{"json"},
		Env:     []string{"PATH=/usr/bin:/bin", "OPENBLAS_NUM_THREADS=1"},
	})
	if err != nil {
		t.Fatalf("StartZygote: %v", err)
	}
	t.Cleanup(func() {
		if err := z.Close(); err != nil {
			t.Errorf("zygote Close: %v", err)
		}
	})
	return z
}

func forkProbe(t *testing.T, h *Host, z *Zygote, p policy.Policy, targets ...int) (*Sandbox, map[string]string) {
	t.Helper()
	d := testDisk(t, h, p, "zyg")
	out := t.TempDir()
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	sb, err := d.Fork(z, Spec{
		Policy: p,
		Args:   append([]string{"/usr/bin/python3", "-s", "/run/jailcell/probe.py", "/out/probe"}, pidArgs(targets)...),
		Env:    []string{"PATH=/usr/bin:/bin"},
		Cwd:    "/work",
		Binds:  []Bind{{Source: out, Dest: "/out", Writable: true}},
	})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(); err != nil {
			t.Errorf("destroy sandbox: %v", err)
		}
	})
	var b []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err = os.ReadFile(filepath.Join(out, "probe")); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("the fork's probe wrote nothing: %v", err)
	}
	view := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, " ")
		view[strings.TrimSuffix(k, ":")] = strings.TrimSpace(v)
	}
	return sb, view
}

func TestZygoteForkPassesPosture(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	z := startTestZygote(t, h, p)
	sb, view := forkProbe(t, h, z, p)
	t.Logf("view: %v", view)
	for k, want := range map[string]string{
		"CapEff": zeroCaps, "CapBnd": zeroCaps, "NoNewPrivs": "1", "Seccomp": "2", "Seccomp_filters": "1",
		"hostname": "sandbox", "json": "True", "fds": "0 1 2 3",
	} {
		if view[k] != want {
			t.Errorf("%s = %q inside the fork, want %q", k, view[k], want)
		}
	}
	if !strings.HasPrefix(view["uid"], "0 gid 0 pid 1") {
		t.Errorf("uid line %q, want root of its own namespace, pid 1", view["uid"])
	}
	cfg := sb.container.Config()
	if err := h.verifyPosture(sb, &cfg); err != nil {
		t.Errorf("posture: %v", err)
	}
}

// TestZygoteMemoryHoldsItsForks: the zygote's memory limit leaves room
// for what the kernel charges it for each live fork (the forks' page
// tables and maps stay on the forking task's cgroup), one per slot the
// host has; at the policy's limit alone a zygote died after ~780 forks.
func TestZygoteMemoryHoldsItsForks(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	cfg := h.zygoteConfig(ZygoteSpec{Policy: p, Dir: "/zygote"}, "zygote_memtest")
	want := p.MemoryBytes + int64(h.cfg.Slots)*ZygoteForkCharge
	r := cfg.Cgroups.Resources
	if r.Memory != want || r.MemorySwap != 0 && r.MemorySwap != want {
		t.Errorf("zygote memory %d, swap %d; want %d (policy %d + %d slots x %d)", r.Memory, r.MemorySwap, want, p.MemoryBytes, h.cfg.Slots, ZygoteForkCharge)
	}
}

func pidArgs(pids []int) []string {
	var out []string
	for _, p := range pids {
		out = append(out, strconv.Itoa(p))
	}
	return out
}

// TestZygoteForksReachNeitherZygoteNorSibling: a fork cannot signal,
// ptrace, read the memory of or enter the root of the zygote it came from
// or a sibling forked before it; it shares no namespace with either, runs
// as its own host uid, and holds none of their descriptors.
func TestZygoteForksReachNeitherZygoteNorSibling(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	z := startTestZygote(t, h, p)
	zpid, err := z.process.Pid()
	if err != nil {
		t.Fatal(err)
	}
	sib, _ := forkProbe(t, h, z, p)
	sb, view := forkProbe(t, h, z, p, zpid, sib.Pid())
	for _, target := range []int{zpid, sib.Pid()} {
		// ptrace is refused by the seccomp filter (EPERM) before the pid
		// namespace would say ESRCH.
		got := view["target"+strconv.Itoa(target)]
		if got != "kill:ESRCH ptrace:EPERM mem:ENOENT root/:ENOENT" && got != "kill:ESRCH ptrace:ESRCH mem:ENOENT root/:ENOENT" {
			t.Errorf("fork reaching pid %d: %q, want every attempt refused", target, got)
		}
	}
	if view["fds"] != "0 1 2 3" {
		t.Errorf("fork's descriptors: %q, want its stdio only (3 is the listing's own)", view["fds"])
	}
	for _, other := range []struct {
		name string
		pid  int
	}{{"zygote", zpid}, {"sibling", sib.Pid()}} {
		mine, theirs := nsInodes(strconv.Itoa(sb.Pid())), nsInodes(strconv.Itoa(other.pid))
		for _, ns := range postureNamespaces {
			if mine[ns] == "" || mine[ns] == theirs[ns] {
				t.Errorf("fork shares its %s namespace with the %s (%s)", ns, other.name, mine[ns])
			}
		}
		if a, b := procUID(t, sb.Pid()), procUID(t, other.pid); a == b {
			t.Errorf("fork runs as the %s's host uid %d", other.name, a)
		}
	}
}

func procUID(t *testing.T, pid int) int {
	t.Helper()
	st, err := readStatus(strconv.Itoa(pid))
	if err != nil {
		t.Fatal(err)
	}
	uid, err := strconv.Atoi(strings.Fields(st["Uid"])[0])
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

// TestDeadDaemonsZygoteEndsAndIsReconciled: a zygote ends when its
// daemon's end of the socket closes (the daemon died), and the next
// daemon's Reconcile removes its container, cgroup and directory.
func TestDeadDaemonsZygoteEndsAndIsReconciled(t *testing.T) {
	h := newTestHost(t)
	z := startTestZygote(t, h, policy.Default())
	// As the daemon's death would: its end of the socket closes.
	_ = z.ctl.Close()
	select {
	case <-z.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the zygote outlived its daemon's socket by 20 s")
	}
	h2, err := NewHost(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if _, err := h2.Reconcile(nil); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	for _, p := range []string{filepath.Join(h.containersDir(), z.id), z.dir} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after Reconcile: %v", p, err)
		}
	}
	for _, id := range h2.cgroupIDs() {
		if id == z.id {
			t.Errorf("zygote cgroup %s left after Reconcile", id)
		}
	}
}

// TestReconcileKillsRunningLeftover: a previous daemon's sandbox still
// running (its daemon died, nothing adopts it) is killed and removed by
// the next daemon's Reconcile, not left running behind "container still
// running".
func TestReconcileKillsRunningLeftover(t *testing.T) {
	h := newTestHost(t)
	sb := startSleeper(t, h, policy.Default())
	pid := sb.Pid()
	sb.Release() // as a daemon that exits leaving it for the next one
	h2, err := NewHost(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if _, err := h2.Reconcile(nil); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("leftover init %d still running after Reconcile", pid)
	}
	if _, err := os.Stat(filepath.Join(h.containersDir(), sb.ID)); !os.IsNotExist(err) {
		t.Errorf("leftover container left after Reconcile: %v", err)
	}
	for _, id := range h2.cgroupIDs() {
		if id == sb.ID {
			t.Errorf("leftover cgroup %s left after Reconcile", id)
		}
	}
}

// TestHostileZygoteForkImportsNothingFromSessionRoot: a fork pivots into
// the session's root (its overlay, which cells write) before its seccomp
// filter is loaded. A module the fork imported there ran with no filter,
// every capability of its user namespace and the zygote's control socket
// still open (fd 3): a cell's resource.py in the stdlib's directory did.
// Now nothing is imported between the fork and the filter, and the
// zygote's socket is closed first.
func TestHostileZygoteForkImportsNothingFromSessionRoot(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	z := startTestZygote(t, h, p)
	libs, _ := filepath.Glob(filepath.Join(h.cfg.Rootfs, "usr/lib/python3.*"))
	if len(libs) == 0 {
		t.Fatalf("no usr/lib/python3.* in the rootfs %s", h.cfg.Rootfs)
	}
	stdlib := strings.TrimPrefix(libs[0], h.cfg.Rootfs)
	d := testDisk(t, h, p, "zygimp")
	out := t.TempDir()
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	payload := `import os
with open("/proc/self/status") as f:
    seccomp = [l.split()[1] for l in f if l.startswith("Seccomp:")]
try:
    import stat
    fd3 = "socket" if stat.S_ISSOCK(os.fstat(3).st_mode) else "other"
except OSError:
    fd3 = "closed"
for d in ("/out", "/work"):
    try:
        with open(d + "/pwned", "w") as f:
            f.write("seccomp %s fd3 %s\n" % (seccomp, fd3))
    except OSError:
        pass
from importlib.machinery import ExtensionFileLoader  # then the real module, so setup goes on
`
	for _, name := range []string{"resource.py", "fcntl.py"} {
		dir := filepath.Join(d.UpperDir(), stdlib)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(payload), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := d.Fork(z, Spec{
		Policy: p,
		Args:   []string{"/usr/bin/python3", "-s", "/run/jailcell/probe.py", "/out/probe"},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Cwd:    "/work",
		Binds:  []Bind{{Source: out, Dest: "/out", Writable: true}},
	})
	if err == nil {
		defer sb.Destroy()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(out, "probe")); err == nil {
				break
			}
		}
	}
	if b, rerr := os.ReadFile(filepath.Join(out, "pwned")); rerr == nil {
		t.Fatalf("a module from the session's root ran in the fork before its filter: %s(fork: %v)", b, err)
	}
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
}
