package cgroupv2

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
)

func TestMain(m *testing.M) {
	isolate.Init()
	// A jailcell this test starts never reads the host's config or finds
	// its service (make test runs beside one).
	testenv.Hermetic()
	os.Exit(m.Run())
}

func newHost(t *testing.T) *isolate.Host {
	t.Helper()
	testenv.RequiresRoot(t)
	if !cgroups.IsCgroup2UnifiedMode() {
		t.Skip("requires a pure cgroup v2 host: run make test-cgroupv2")
	}
	r := testenv.Rootfs(t)
	h, err := isolate.NewHost(isolate.Config{StateDir: testenv.StateDir(t), Rootfs: r.Root, CgroupRoot: "/jailcell-test-vmtest"})
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

// run starts python3 -c code in a sandbox under p and returns it with its
// unified cgroup directory, read while it runs.
func run(t *testing.T, h *isolate.Host, p policy.Policy, code string, out *bytes.Buffer) (*isolate.Sandbox, string) {
	t.Helper()
	d, err := h.NewDisk("v2"+strconv.Itoa(time.Now().Nanosecond()), p)
	if err != nil {
		t.Fatalf("NewDisk: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Destroy(); err != nil {
			t.Errorf("destroy disk: %v", err)
		}
	})
	sb, err := d.Create(isolate.Spec{Policy: p, Args: []string{"/usr/bin/python3", "-c", code}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/", Log: out})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(); err != nil {
			t.Errorf("destroy sandbox: %v", err)
		}
	})
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sb.Pid()))
	if err != nil {
		t.Fatalf("read cgroup of %d: %v", sb.Pid(), err)
	}
	rel, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "0::")
	if !ok || !strings.HasPrefix(rel, "/jailcell-test-vmtest/") {
		t.Fatalf("sandbox init not in its own v2 cgroup: %q", b)
	}
	return sb, filepath.Join("/sys/fs/cgroup", rel)
}

func wait(t *testing.T, sb *isolate.Sandbox, d time.Duration) isolate.Exit {
	t.Helper()
	select {
	case <-sb.Done():
		return sb.Exit()
	case <-time.After(d):
		t.Fatalf("sandbox still running after %s", d)
		return isolate.Exit{}
	}
}

func keyed(t *testing.T, path, key string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key {
			v, _ := strconv.ParseUint(f[1], 10, 64)
			return v
		}
	}
	t.Fatalf("no %s in %s: %q", key, path, b)
	return 0
}

// TestMemoryMaxOOMKillCountedInMemoryEvents: a 256 MiB allocation under a
// 64 MiB memory.max is killed, memory.events counts it, and Usage (which
// the session's oom verdict reads) agrees.
func TestMemoryMaxOOMKillCountedInMemoryEvents(t *testing.T) {
	h := newHost(t)
	p := policy.Default()
	p.MemoryBytes = 64 << 20
	var out bytes.Buffer
	sb, dir := run(t, h, p, "b = bytearray(256 << 20)\nb[::4096] = b'x' * (len(b) // 4096)\nprint('survived')", &out)
	if v := strings.TrimSpace(readFile(t, filepath.Join(dir, "memory.swap.max"))); v != "0" {
		t.Errorf("memory.swap.max = %s, want 0", v)
	}
	ex := wait(t, sb, 2*time.Minute)
	if ex.Signal != syscall.SIGKILL || strings.Contains(out.String(), "survived") {
		t.Fatalf("exit %v, output %q: want killed by the OOM killer", ex, out.String())
	}
	if n := keyed(t, filepath.Join(dir, "memory.events"), "oom_kill"); n < 1 {
		t.Errorf("memory.events oom_kill = %d, want >= 1", n)
	}
	u := sb.Usage()
	if u.OOMKills < 1 {
		t.Errorf("Usage.OOMKills = %d, want >= 1", u.OOMKills)
	}
	if u.MemoryPeak < 48<<20 || u.MemoryPeak > 64<<20 {
		t.Errorf("Usage.MemoryPeak = %d, want near the 64 MiB limit", u.MemoryPeak)
	}
}

// TestPidsMaxForkRefusedCountedInPidsEvents: forks past pids.max fail with
// EAGAIN and pids.events counts them.
func TestPidsMaxForkRefusedCountedInPidsEvents(t *testing.T) {
	h := newHost(t)
	p := policy.Default()
	p.Pids = 8
	var out bytes.Buffer
	sb, dir := run(t, h, p, `
import os, time
n, err = 0, None
try:
    for i in range(50):
        if os.fork() == 0:
            time.sleep(20); os._exit(0)
        n += 1
except OSError as e:
    err = e.errno
print(n, err, flush=True)
os._exit(0)
`, &out)
	ex := wait(t, sb, 2*time.Minute)
	if ex.Code != 0 || !strings.HasSuffix(strings.TrimSpace(out.String()), " 11") {
		t.Fatalf("exit %v, output %q: want forks refused with EAGAIN (11)", ex, out.String())
	}
	if n := keyed(t, filepath.Join(dir, "pids.events"), "max"); n < 1 {
		t.Errorf("pids.events max = %d, want >= 1", n)
	}
	if u := sb.Usage(); u.PidsDenied < 1 {
		t.Errorf("Usage.PidsDenied = %d, want >= 1", u.PidsDenied)
	}
}

// TestCPUMaxThrottlesCountedInCPUStat: a busy loop under cpu.max 0.2 cores
// is throttled (cpu.stat nr_throttled) and Usage.CPU reports its CPU time.
func TestCPUMaxThrottlesCountedInCPUStat(t *testing.T) {
	h := newHost(t)
	p := policy.Default()
	p.CPUs = 0.2
	sb, dir := run(t, h, p, "import time\nt = time.time()\nwhile time.time() - t < 3: pass", &bytes.Buffer{})
	if v := strings.TrimSpace(readFile(t, filepath.Join(dir, "cpu.max"))); v != "20000 100000" {
		t.Errorf("cpu.max = %q", v)
	}
	// The CPU time of a window measured from its start: the interpreter's
	// own start before it (seconds under emulation, with the host busy)
	// counts too, and is no part of what the window says.
	u0, start := sb.Usage(), time.Now()
	// Read while the cgroup exists: its counters go with it.
	time.Sleep(2500 * time.Millisecond)
	u := sb.Usage()
	wall := time.Since(start)
	u.CPU -= u0.CPU
	throttled := keyed(t, filepath.Join(dir, "cpu.stat"), "nr_throttled")
	wait(t, sb, 2*time.Minute)
	if throttled < 1 {
		t.Errorf("cpu.stat nr_throttled = %d, want >= 1", throttled)
	}
	if u.CPU <= 0 || u.CPU > wall/2 {
		t.Errorf("Usage.CPU grew %s over %s wall, want > 0 and throttled near 0.2", u.CPU, wall)
	}
}

// TestIDMappedOverlayCopyUpInUserNamespace: the sandbox's root (uid 0 in
// its user namespace, an unprivileged uid on the host) writes to a file of
// the read-only rootfs; overlayfs copies it up into the sandbox's disk,
// owned there by the sandbox's host uid, through the idmapped lower layer.
func TestIDMappedOverlayCopyUpInUserNamespace(t *testing.T) {
	h := newHost(t)
	p := policy.Default()
	var out bytes.Buffer
	sb, _ := run(t, h, p, "import os\nopen('/etc/debian_version', 'a').write('x')\nst = os.stat('/etc/debian_version')\nprint(os.getuid(), st.st_uid)", &out)
	if ex := wait(t, sb, 2*time.Minute); ex.Code != 0 || strings.TrimSpace(out.String()) != "0 0" {
		t.Fatalf("exit %v, output %q: want uid 0 writing a root-owned rootfs file", ex, out.String())
	}
	fi, err := os.Stat(filepath.Join(sb.Disk().UpperDir(), "etc/debian_version"))
	if err != nil {
		t.Fatalf("no copy-up in the upper layer: %v", err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != sb.Disk().HostID() {
		t.Errorf("copied-up file owned by host uid %d, want %d", uid, sb.Disk().HostID())
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}
