package isolate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	runcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate/seccomp"
	"github.com/jailcell/jailcell/policy"
)

// BenchmarkColdStart times a sandbox from nothing to `python3 -c pass`
// exited and everything removed (disk, overlay, container, cgroup), and in
// the same loop, interleaved so a busy machine weighs on both alike,
// `runc run` of the same command on the same rootfs (read-only, runc's
// default namespaces, no user namespace and no seccomp filter: runc spec's
// defaults) under an absolute cgroup path. Both medians are reported;
// the peer only when runc is installed (make bench installs it), and the
// benchmark says so otherwise.
//
//	go test -tags seccomp -run '^$' -bench ColdStart -benchtime 20x ./isolate
func BenchmarkColdStart(b *testing.B) {
	h := newTestHost(b)
	root := testenv.Rootfs(b).Root
	runc := runcPeer(b, root)
	if runc == nil {
		b.Log("runc not installed: timing jailcell alone (make bench installs runc)")
	}
	p := policy.Default()
	jc := func(i int) time.Duration {
		t := time.Now()
		d, err := h.NewDisk(fmt.Sprintf("cold%d", i), p)
		if err != nil {
			b.Fatalf("NewDisk: %v", err)
		}
		sb, err := d.Create(Spec{Policy: p, Args: []string{"/usr/bin/python3", "-c", "pass"}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/"})
		if err != nil {
			_ = d.Destroy()
			b.Fatalf("Create: %v", err)
		}
		<-sb.Done()
		if ex := sb.Exit(); ex.Code != 0 || ex.Signal != 0 {
			b.Errorf("python3 -c pass %s", ex)
		}
		if err := sb.Destroy(); err != nil {
			b.Errorf("destroy sandbox: %v", err)
		}
		if err := d.Destroy(); err != nil {
			b.Errorf("destroy disk: %v", err)
		}
		return time.Since(t)
	}
	jc(1 << 20) // the page cache
	if runc != nil {
		runc(1 << 20)
	}
	var ours, theirs []time.Duration
	b.ResetTimer()
	for i := range b.N {
		ours = append(ours, jc(i))
		if runc != nil {
			theirs = append(theirs, runc(i))
		}
	}
	b.StopTimer()
	b.ReportMetric(medianMs(ours), "jailcell-ms")
	if runc != nil {
		b.ReportMetric(medianMs(theirs), "runc-ms")
	}
	b.ReportMetric(0, "ns/op") // the sum of both: meaningless
}

// BenchmarkSeccompInit times what the filter costs every sandbox start:
// libcontainer's init builds it with libseccomp and loads it
// (seccomp.InitSeccomp), here in a child of the test binary with
// no_new_privs set, as in the init. Compare with BenchmarkColdStart's
// figure in the same run to see its share of a cold start.
//
//	go test -tags seccomp -run '^$' -bench 'ColdStart|SeccompInit' -benchtime 20x ./isolate
func BenchmarkSeccompInit(b *testing.B) {
	testenv.RequiresRoot(b)
	var ds []time.Duration
	for range b.N {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "JAILCELL_TEST_SECCOMP_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v: %s", err, out)
		}
		var ns int64
		if _, err := fmt.Sscanf(string(bytes.TrimSpace(out)), "seccomp-init-ns %d", &ns); err != nil {
			b.Fatalf("child said %q: %v", out, err)
		}
		ds = append(ds, time.Duration(ns))
	}
	b.ReportMetric(medianMs(ds), "init-ms")
	b.ReportMetric(0, "ns/op") // mostly the child's start: meaningless
}

// seccompInitChild is BenchmarkSeccompInit's child (TestMain runs it
// instead of the tests): it loads the filter into its own process, so it
// runs nothing afterwards.
func seccompInitChild() {
	fail := func(err error) { fmt.Fprintln(os.Stderr, err); os.Exit(1) }
	cfg, err := seccomp.Config(uint(unix.EPERM))
	if err != nil {
		fail(err)
	}
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail(err)
	}
	start := time.Now()
	if _, err := runcseccomp.InitSeccomp(cfg); err != nil {
		fail(fmt.Errorf("InitSeccomp: %w", err))
	}
	fmt.Printf("seccomp-init-ns %d\n", time.Since(start).Nanoseconds())
	os.Exit(0)
}

func medianMs(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// runcPeer returns a function that times one `runc run` of python3 -c pass
// on root, or nil when runc is not installed. Its bundle and cgroups go
// when the benchmark ends.
func runcPeer(b *testing.B, root string) func(i int) time.Duration {
	bin, err := exec.LookPath("runc")
	if err != nil {
		return nil
	}
	bundle := b.TempDir()
	c := exec.Command(bin, "spec")
	c.Dir = bundle
	if out, err := c.CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v: %s", err, out)
	}
	var spec map[string]any
	raw, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		b.Fatal(err)
	}
	// runc refuses a rootfs path through a symlink ("current").
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	spec["root"] = map[string]any{"path": root, "readonly": true}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"python3", "-c", "pass"}
	state := b.TempDir()
	const cgParent = "/jailcell-test-runc"
	b.Cleanup(func() {
		ents, _ := os.ReadDir("/sys/fs/cgroup")
		for _, e := range ents {
			_ = os.Remove(filepath.Join("/sys/fs/cgroup", e.Name(), cgParent))
		}
		_ = os.Remove(filepath.Join("/sys/fs/cgroup", cgParent))
	})
	return func(i int) time.Duration {
		id := fmt.Sprintf("jailcell-test-%d-%d", os.Getpid(), i)
		spec["linux"].(map[string]any)["cgroupsPath"] = cgParent + "/" + id
		raw, _ := json.Marshal(spec)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), raw, 0o644); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin, "--root", state, "run", "--bundle", bundle, id)
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		t := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("runc run: %v: %s", err, stderr.Bytes())
		}
		return time.Since(t)
	}
}

// TestSlotUsernsReusedAcrossSandboxes: a slot's user namespace is made once
// and kept; a later sandbox on the same slot still sees the rootfs owned by
// its root (the idmapped lower layer) and its writes land on the host as
// the slot's host uid, never as host root.
func TestSlotUsernsReusedAcrossSandboxes(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	// Writes a file by copy-up into /etc and exits 0 only if /usr is owned
	// by the sandbox's root: what a wrong mapping would break.
	code := "import os\nassert os.stat('/usr').st_uid == 0, os.stat('/usr')\nopen('/etc/jc-userns', 'w').write('x')\n"
	var first *os.File
	for i := range 2 {
		d, err := h.NewDisk(fmt.Sprintf("userns%d", i), p)
		if err != nil {
			t.Fatalf("NewDisk: %v", err)
		}
		t.Cleanup(func() { _ = d.Destroy() })
		sb, err := d.Create(Spec{Policy: p, Args: []string{"/usr/bin/python3", "-c", code}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/"})
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		<-sb.Done()
		if ex := sb.Exit(); ex.Code != 0 || ex.Signal != 0 {
			t.Errorf("sandbox %d: the copy-up check %s", i, ex)
		}
		fi, err := os.Stat(filepath.Join(d.UpperDir(), "etc", "jc-userns"))
		if err != nil {
			t.Fatalf("sandbox %d: its write is not in the upper layer: %v", i, err)
		}
		if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != d.HostID() {
			t.Errorf("sandbox %d: its file is owned by host uid %d, want the slot's %d", i, uid, d.HostID())
		}
		h.mu.Lock()
		ns, n := h.userns[d.HostID()], len(h.userns)
		h.mu.Unlock()
		if i == 0 {
			first = ns
		} else if ns != first || n != 1 {
			t.Errorf("the second sandbox on the slot made a new user namespace (%d kept)", n)
		}
		if err := sb.Destroy(); err != nil {
			t.Errorf("destroy sandbox: %v", err)
		}
		if err := d.Destroy(); err != nil {
			t.Errorf("destroy disk: %v", err)
		}
	}
}
