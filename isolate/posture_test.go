package isolate

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate/internal/procfs"
	"github.com/jailcell/jailcell/isolate/seccomp"
	"github.com/jailcell/jailcell/policy"
)

func TestMain(m *testing.M) {
	Init()
	if os.Getenv("JAILCELL_TEST_SECCOMP_CHILD") == "1" {
		seccompInitChild()
	}
	if os.Getenv(execFromThreadEnv) == "1" {
		execFromThreadChild()
	}
	// libcontainer runs criu from PATH (Config.Criu).
	_ = os.Setenv("PATH", CriuPATH(DefaultCriu, os.Getenv("PATH")))
	code := m.Run()
	if strays := testenv.EndStrayCriu(); len(strays) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: criu still running after the tests (killed now):\n  %s\n", strings.Join(strays, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func newTestHost(t testing.TB) *Host {
	t.Helper()
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	h, err := NewHost(Config{StateDir: testenv.StateDir(t), Rootfs: r.Root, CgroupRoot: "/jailcell-test-isolate"})
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("host Close: %v", err)
		}
	})
	return h
}

// startSleeper starts a sandbox whose init sleeps, for inspection from
// outside.
func startSleeper(t *testing.T, h *Host, p policy.Policy) *Sandbox {
	t.Helper()
	return startPython(t, h, p, "posture", "import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: None)\ntime.sleep(60)")
}

// startPython starts a sandbox on a disk named disk running code, destroyed
// when t ends.
func startPython(t *testing.T, h *Host, p policy.Policy, disk, code string) *Sandbox {
	t.Helper()
	d := testDisk(t, h, p, disk)
	sb, err := d.Create(Spec{
		Policy: p,
		Args:   []string{"/usr/bin/python3", "-c", code},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Cwd:    "/work",
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(); err != nil {
			t.Errorf("destroy sandbox: %v", err)
		}
	})
	return sb
}

func statusField(t *testing.T, pid int, key string) string {
	t.Helper()
	st, err := readStatus(strconv.Itoa(pid))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := st[key]
	if !ok {
		t.Fatalf("no %s in /proc/%d/status", key, pid)
	}
	return v
}

// TestPosture inspects a live sandbox from the host and compares it with
// the policy it was built from.
func TestPosture(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	p.MemoryBytes = 300 << 20
	p.Pids = 50
	p.CPUs = 0.5
	p.OpenFiles = 256
	sb := startSleeper(t, h, p)
	pid := sb.Pid()
	waitExec(t, pid)

	t.Run("namespaces differ from the host", func(t *testing.T) {
		for _, ns := range []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"} {
			host, _ := os.Readlink("/proc/thread-self/ns/" + ns)
			box, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
			if err != nil || box == host {
				t.Errorf("%s namespace: sandbox %q host %q (%v)", ns, box, host, err)
			}
		}
	})
	t.Run("no capabilities", func(t *testing.T) {
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if v := statusField(t, pid, k); v != "0000000000000000" {
				t.Errorf("%s = %s, want 0", k, v)
			}
		}
	})
	t.Run("seccomp filter and no_new_privs", func(t *testing.T) {
		if v := statusField(t, pid, "Seccomp"); v != "2" {
			t.Errorf("Seccomp = %s, want 2 (filter)", v)
		}
		if v := statusField(t, pid, "NoNewPrivs"); v != "1" {
			t.Errorf("NoNewPrivs = %s, want 1", v)
		}
	})
	t.Run("unprivileged host uid", func(t *testing.T) {
		uid := strings.Fields(statusField(t, pid, "Uid"))[0]
		if uid != strconv.Itoa(sb.Disk().HostID()) || uid == "0" {
			t.Errorf("host uid = %s, want %d", uid, sb.Disk().HostID())
		}
		m, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
		if f := strings.Fields(string(m)); len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(sb.Disk().HostID()) || f[2] != "65536" {
			t.Errorf("uid_map = %q", m)
		}
	})
	t.Run("only fds 0-2 (CVE-2024-21626)", func(t *testing.T) {
		// Python opens and closes shared libraries while it starts (slow
		// under emulation): a leaked descriptor stays, a loader's goes.
		var extra []string
		for deadline := time.Now().Add(10 * time.Second); ; {
			ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			if err != nil {
				t.Fatal(err)
			}
			extra = extra[:0]
			for _, e := range ents {
				if n, _ := strconv.Atoi(e.Name()); n > 2 {
					target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
					extra = append(extra, fmt.Sprintf("fd %d: %s", n, target))
				}
			}
			if len(extra) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, x := range extra {
			t.Errorf("open beyond 0-2: %s", x)
		}
	})
	t.Run("rlimits", func(t *testing.T) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
		want := map[string]string{
			"Max open files": "256", "Max core file size": "0",
			"Max file size": strconv.FormatInt(p.DiskBytes, 10), "Max processes": "100",
			"Max pending signals": strconv.Itoa(SigpendingShare), "Max msgqueue size": strconv.Itoa(MsgqueueShare),
			"Max locked memory": strconv.Itoa(MemlockShare),
		}
		for _, l := range strings.Split(string(b), "\n") {
			for k, v := range want {
				if strings.HasPrefix(l, k) {
					if f := strings.Fields(l[len(k):]); len(f) < 2 || f[0] != v || f[1] != v {
						t.Errorf("%s: %q, want %s", k, l, v)
					}
					delete(want, k)
				}
			}
		}
		for k := range want {
			t.Errorf("limit %s not found", k)
		}
	})
	t.Run("cgroup limits", func(t *testing.T) {
		read := func(ctrl, v1, v2 string) string {
			var path string
			if sb.cg.v2 {
				path = filepath.Join(sb.cg.dir(ctrl), v2)
			} else {
				path = filepath.Join(sb.cg.dir(ctrl), v1)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read %s: %v", path, err)
			}
			return strings.TrimSpace(string(b))
		}
		if v := read("memory", "memory.limit_in_bytes", "memory.max"); v != strconv.FormatInt(p.MemoryBytes, 10) {
			t.Errorf("memory limit = %s, want %d", v, p.MemoryBytes)
		}
		if v := read("pids", "pids.max", "pids.max"); v != "50" {
			t.Errorf("pids.max = %s", v)
		}
		if sb.cg.v2 {
			if v := read("cpu", "", "cpu.max"); v != "50000 100000" {
				t.Errorf("cpu.max = %s", v)
			}
			if v := read("memory", "", "memory.swap.max"); v != "0" {
				t.Errorf("memory.swap.max = %s", v)
			}
		} else {
			if v := read("cpu", "cpu.cfs_quota_us", ""); v != "50000" {
				t.Errorf("cfs quota = %s", v)
			}
			if h.features.SwapLimit {
				if v := read("memory", "memory.memsw.limit_in_bytes", ""); v != strconv.FormatInt(p.MemoryBytes, 10) {
					t.Errorf("memsw limit = %s (swap not held at zero)", v)
				}
			}
		}
	})
	t.Run("binary protected (CVE-2019-5736)", func(t *testing.T) {
		// The sandbox's exe is python from the read-only rootfs, never the
		// host's jailcell binary.
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		self, _ := os.Readlink("/proc/self/exe")
		if exe == self || !strings.HasSuffix(exe, "python3.11") {
			t.Errorf("sandbox exe = %q", exe)
		}
	})
}

func TestDestroyLeavesNothing(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	d, err := h.NewDisk("leak", p)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := d.Create(Spec{Policy: p, Args: []string{"/usr/bin/python3", "-c", "import os,time\nos.fork() or time.sleep(60)\ntime.sleep(60)"}, Env: []string{"PATH=/usr/bin"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	cg := sb.cg.dir("memory")
	if err := sb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := d.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left: %v", cg, err)
	}
	if _, err := os.Stat(d.dir); !os.IsNotExist(err) {
		t.Errorf("dir %s left", d.dir)
	}
	if err := sbAlive(sb.Pid()); err == nil {
		t.Errorf("init %d still alive", sb.Pid())
	}
}

func sbAlive(pid int) error {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err
}

// waitExec waits until the sandbox's init has left libcontainer's init
// stage and runs the sandbox's own program.
func waitExec(t *testing.T, pid int) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); !strings.HasPrefix(string(c), "runc:") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("sandbox init %d never exec'd its program", pid)
}

// TestGateHoldsAndRefusesBuilds: no sandbox is built before the host's
// gate (serve's rootfs check) has passed, and none after it failed.
func TestGateHoldsAndRefusesBuilds(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	spec := Spec{Policy: p, Args: []string{"/usr/bin/python3", "-c", "pass"}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/work"}
	release := make(chan struct{})
	passed := make(chan time.Time, 1)
	h.Gate(func() error { <-release; passed <- time.Now(); return nil })
	d, err := h.NewDisk("gate"+strconv.Itoa(time.Now().Nanosecond()), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy() })
	built := make(chan time.Time, 1)
	go func() {
		sb, err := d.Create(spec)
		if err == nil {
			<-sb.Done()
			_ = sb.Destroy()
		}
		built <- time.Now()
	}()
	select {
	case <-built:
		t.Fatal("a sandbox was built before the gate passed")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	at, done := <-passed, <-built
	if done.Before(at) {
		t.Fatal("built before the gate passed")
	}

	h.Gate(func() error { return errors.New("rootfs tree hashes to x, manifest says y") })
	_, err = d.Create(spec)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "manifest says y") {
		t.Fatalf("build after a failed gate: %v", err)
	}
}

// TestCountersLeaveMemoryOut: Counters reads what a cell's figures start
// from (CPU, kills, refused forks) and not the memory files; Usage reads
// them all.
func TestCountersLeaveMemoryOut(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	d, err := h.NewDisk("ctr"+strconv.Itoa(time.Now().Nanosecond()), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy() })
	sb, err := d.Create(Spec{Policy: p, Args: []string{"/usr/bin/python3", "-c", "sum(range(3_000_000)); import time; time.sleep(30)"},
		Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy() })
	deadline := time.Now().Add(10 * time.Second)
	for sb.Counters().CPU == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	c, u := sb.Counters(), sb.Usage()
	if c.CPU == 0 || c.MemoryCurrent != 0 || c.MemoryPeak != 0 {
		t.Errorf("Counters = %+v, want CPU and no memory figures", c)
	}
	if u.MemoryCurrent == 0 || u.CPU < c.CPU {
		t.Errorf("Usage = %+v after Counters %+v", u, c)
	}
}

// TestPostureColdStartPasses: the posture check that guards every restore
// passes a cold-started sandbox, so "equal to a cold start's" is what it
// checks, and it logs what one check costs.
func TestPostureColdStartPasses(t *testing.T) {
	h := newTestHost(t)
	sb := startSleeper(t, h, policy.Default())
	waitExec(t, sb.Pid())
	cfg := sb.container.Config()
	if err := h.verifyPosture(sb, &cfg); err != nil {
		mi, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", sb.Pid()))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sb.Pid()))
		t.Fatalf("cold start fails the posture check: %v\nmountinfo:\n%s\ncgroup:\n%s", err, mi, cg)
	}
	want, err := h.coldPosture(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want.filters == nil || want.filters.N != 1 {
		t.Fatalf("a cold start's seccomp filters: %v, want one filter", want.filters)
	}
	t.Logf("a cold start's seccomp filter: %v", *want.filters)
	const n = 50
	start := time.Now()
	for range n {
		if err := h.verifyPosture(sb, &cfg); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("posture check: %v each (mean of %d)", time.Since(start)/n, n)
	want.filters = nil
	start = time.Now()
	for range n {
		if err := checkPosture(sb.Pid(), sb.cgDirs(), want); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("of which /proc alone: %v each; the rest is the seccomp filter reader (this binary re-executed: %d MiB)", time.Since(start)/n, exeSize(t)>>20)
}

// TestPostureCheckNamesDifferences: the check run on a live cold start
// against an expectation that differs in one field at a time names that
// field: a check that cannot fail proves nothing.
func TestPostureCheckNamesDifferences(t *testing.T) {
	h := newTestHost(t)
	sb := startSleeper(t, h, policy.Default())
	waitExec(t, sb.Pid())
	cfg := sb.container.Config()
	cases := []struct {
		name, want string
		edit       func(p *posture)
	}{
		{"seccomp off", "Seccomp 2, want 0", func(p *posture) { p.status["Seccomp"] = "0" }},
		{"filter count", "Seccomp_filters 1, want 2", func(p *posture) { p.status["Seccomp_filters"] = "2" }},
		{"capabilities", "CapEff 0000000000000000, want 000001ffffffffff", func(p *posture) { p.status["CapEff"] = "000001ffffffffff" }},
		{"no_new_privs", "NoNewPrivs 1, want 0", func(p *posture) { p.status["NoNewPrivs"] = "0" }},
		{"uid map", "uid_map", func(p *posture) { p.uidMap = "0 0 65536\n" }},
		{"cgroup", "cgroup", func(p *posture) { p.cgroupPath = "/elsewhere" }},
		{"extra mount", "mount /tmp (tmpfs", func(p *posture) { delete(p.mounts, "/tmp") }},
		{"root device", "mount / from device", func(p *posture) { p.mounts["/"] = wantMount{fstype: "overlay", dev: "0:1"} }},
		{"seccomp filter program", "seccomp filter 1 filter(s) sha256 ", func(p *posture) { p.filters = &seccomp.FilterSum{N: 1, Sum: strings.Repeat("0", 64)} }},
		{"seccomp filter count", "want 2 filter(s) sha256", func(p *posture) { f := *p.filters; f.N = 2; p.filters = &f }},
		{"read-only", "mount /tmp lacks ro", func(p *posture) { m := p.mounts["/tmp"]; m.flags |= unix.MS_RDONLY; p.mounts["/tmp"] = m }},
		{"rlimit", "Max open files", func(p *posture) { p.rlimits["Max open files"] = "1 1" }},
		{"interface", `network interface "lo" that a cold start lacks`, func(p *posture) { delete(p.ifaces, "lo") }},
		{"missing mask", "mount /proc/uptime that a cold start has is missing", func(p *posture) { p.mounts["/proc/uptime"] = wantMount{required: true} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, err := h.coldPosture(&cfg)
			if err != nil {
				t.Fatal(err)
			}
			c.edit(&want)
			err = checkPosture(sb.Pid(), sb.cgDirs(), want)
			if !errors.Is(err, ErrPosture) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("check = %v, want ErrPosture naming %q", err, c.want)
			}
		})
	}
}

// TestPostureRefusesAMaskTakenAway: a sandbox whose masks were undone
// (here by the host, entering its namespaces; in the field by an image
// edited in the store) fails the check, naming each path; one whose only
// missing mask is a late one (an image hibernated before it existed)
// passes.
func TestPostureRefusesAMaskTakenAway(t *testing.T) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Fatalf("nsenter (util-linux) is needed to undo a mask: %v", err)
	}
	h := newTestHost(t)
	sb := startSleeper(t, h, policy.Default())
	waitExec(t, sb.Pid())
	cfg := sb.container.Config()
	if !slices.Contains(cfg.MaskPaths, bootIDPath) {
		t.Fatalf("the sandbox's masks %v lack %s", cfg.MaskPaths, bootIDPath)
	}
	umount := func(path string) {
		t.Helper()
		out, err := exec.Command(nsenter, "-t", strconv.Itoa(sb.Pid()), "-U", "-m", "-p", "-r", "-w", "umount", path).CombinedOutput()
		if err != nil {
			t.Fatalf("umount %s in the sandbox: %v: %s", path, err, out)
		}
	}
	umount(bootIDPath)
	if err := h.verifyPosture(sb, &cfg); err != nil {
		t.Fatalf("a sandbox lacking only the late mask %s: %v, want it to pass", bootIDPath, err)
	}
	umount("/proc/keys")
	err = h.verifyPosture(sb, &cfg)
	if !errors.Is(err, ErrPosture) || !strings.Contains(err.Error(), "mount /proc/keys that a cold start has is missing") {
		t.Fatalf("check with /proc/keys unmasked = %v, want ErrPosture naming it", err)
	}
}

func exeSize(t *testing.T) int64 {
	fi, err := os.Stat("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// testDisk is a new disk of policy p, destroyed when the test ends.
func testDisk(t *testing.T, h *Host, p policy.Policy, prefix string) *Disk {
	t.Helper()
	d, err := h.NewDisk(prefix+strconv.Itoa(time.Now().Nanosecond()), p)
	if err != nil {
		t.Fatalf("NewDisk: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Destroy(); err != nil {
			t.Errorf("destroy disk: %v", err)
		}
	})
	return d
}

// TestPostureFindsADescendantOutsideTheCgroup: a sandbox's process that
// is no longer in its cgroup (a restored image can place one elsewhere)
// is still checked, found from the init's tree (each thread's children
// list), and named.
func TestPostureFindsADescendantOutsideTheCgroup(t *testing.T) {
	if !procfs.ChildrenListed() {
		t.Skip("host lacks /proc/PID/task/TID/children (kernel without CONFIG_PROC_CHILDREN): the posture check scans every process there, which TestPosture covers")
	}
	h := newTestHost(t)
	sb := startPython(t, h, policy.Default(), "posturechild", "import subprocess, time\nsubprocess.Popen(['/bin/sleep', '60'])\ntime.sleep(60)")
	waitExec(t, sb.Pid())
	var child int
	for i := 0; child == 0; i++ {
		kids, _ := procfs.Descendants(sb.Pid())
		for _, k := range kids {
			if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", k)); strings.TrimSpace(string(c)) == "sleep" {
				child = k
			}
		}
		if i == 500 {
			t.Fatalf("the init %d never started its child (descendants %v)", sb.Pid(), kids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cfg := sb.container.Config()
	want, err := h.coldPosture(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPosture(sb.Pid(), sb.cgDirs(), want); err != nil {
		t.Fatalf("before the move: %v", err)
	}
	// Moved to a cgroup of this test's own, beside the sandbox's, in the
	// hierarchy whose members the check lists.
	own := filepath.Join(filepath.Dir(sb.cgDirs()["pids"]), "posture-escape-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Back where it came from, before the sandbox is destroyed (the
		// cleanups run last first): its cgroup is then empty.
		_ = os.WriteFile(filepath.Join(sb.cgDirs()["pids"], "cgroup.procs"), []byte(strconv.Itoa(child)), 0o644)
		if err := os.Remove(own); err != nil {
			t.Errorf("remove cgroup %s: %v", own, err)
		}
	})
	if err := os.WriteFile(filepath.Join(own, "cgroup.procs"), []byte(strconv.Itoa(child)), 0o644); err != nil {
		t.Fatal(err)
	}
	err = checkPosture(sb.Pid(), sb.cgDirs(), want)
	if !errors.Is(err, ErrPosture) || !strings.Contains(err.Error(), fmt.Sprintf("(pid %d)", child)) {
		t.Fatalf("check with pid %d outside the sandbox's cgroup = %v, want ErrPosture naming it", child, err)
	}
}
