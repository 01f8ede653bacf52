package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
)

// Faults of the host and of the kernel: each must give a clear error or
// verdict, leave nothing behind, and leave the manager serving.

// newEnvAt is newEnv on a given state directory and cgroup root.
func newEnvAt(t *testing.T, state, cgroupRoot string) (*env, error) {
	t.Helper()
	r := testenv.Rootfs(t)
	h, err := isolate.NewHost(isolate.Config{StateDir: filepath.Join(state, "isolate"), Rootfs: r.Root, CgroupRoot: cgroupRoot})
	if err != nil {
		return nil, err
	}
	p := policy.Default()
	p.MemoryBytes = 256 << 20
	p.Pids = 64
	p.DiskBytes = 64 << 20
	p.OutputBytes = 64 << 10
	p.InterruptGrace = time.Second
	m, err := New(Config{StateDir: filepath.Join(state, "sessions"), Policies: map[string]policy.Policy{"default": p}, Logger: testLogger()}, h)
	if err != nil {
		h.Close()
		return nil, err
	}
	return &env{m: m, host: h, state: state}, nil
}

// createWithin runs Create with a bound, failing the test on a hang.
func (e *env) createWithin(t *testing.T, d time.Duration) (*Info, error) {
	t.Helper()
	type out struct {
		info *Info
		err  error
	}
	ch := make(chan out, 1)
	go func() {
		info, err := e.m.Create(context.Background(), CreateOptions{})
		ch <- out{info, err}
	}()
	select {
	case o := <-ch:
		return o.info, o.err
	case <-time.After(d):
		t.Fatalf("Create hung for %s", d)
		return nil, nil
	}
}

// fill fills the filesystem holding dir: first its inodes, then its
// blocks. It returns what it made, for the caller to remove.
func fill(t *testing.T, dir string) []string {
	t.Helper()
	var made []string
	for i := 0; ; i++ {
		p := filepath.Join(dir, fmt.Sprintf("inode-%d", i))
		f, err := os.Create(p)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill inodes: %v", err)
			}
			break
		}
		f.Close()
		made = append(made, p)
	}
	// The blocks: the inodes are gone, so grow an existing file.
	f, err := os.OpenFile(made[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill blocks: %v", err)
			}
			break
		}
	}
	f.Close()
	return made
}

// TestFaultStateDirOnFullDisk puts the whole state directory on a small
// tmpfs and fills it: a create fails at once with an error that says the
// disk is full, a live session keeps running cells (its own disk is a
// separate tmpfs), nothing is left behind, and once space is freed the
// manager creates sessions again.
func TestFaultStateDirOnFullDisk(t *testing.T) {
	testenv.RequiresRoot(t)
	state := testenv.StateDir(t)
	if err := unix.Mount("tmpfs", state, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=2m,nr_inodes=256,mode=0711"); err != nil {
		t.Fatalf("mount the small state tmpfs: %v", err)
	}
	e, err := newEnvAt(t, state, testCgroupRoot)
	if err != nil {
		unix.Unmount(state, unix.MNT_DETACH)
		t.Fatalf("manager on the small state dir: %v", err)
	}
	t.Cleanup(func() {
		if err := e.m.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		e.host.Close()
		// Mounts under the state tmpfs first, then the rest once it is gone
		// (assertNothingLeft would count the tmpfs itself).
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		for _, line := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], state+"/") {
				t.Errorf("mount left behind: %s", f[4])
			}
		}
		for _, d := range []string{filepath.Join(state, "isolate", "sandboxes"), filepath.Join(state, "isolate", "containers"), filepath.Join(state, "sessions", "sessions")} {
			if ents, _ := os.ReadDir(d); len(ents) != 0 {
				t.Errorf("%s: %d entries left behind", d, len(ents))
			}
		}
		if err := unix.Unmount(state, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the state tmpfs: %v", err)
		}
		assertNothingLeft(t, state)
	})
	live := e.create(t, CreateOptions{})
	wantStatus(t, e.exec(t, live, "x = 6 * 7", 0), StatusOK)

	made := fill(t, state)
	for i := 0; i < 3; i++ {
		_, err := e.createWithin(t, 60*time.Second)
		if err == nil {
			t.Fatalf("create on a full state dir succeeded")
		}
		if !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("create on a full state dir: %v; want an error saying the disk is full", err)
		}
		t.Logf("create on a full state dir: %v", err)
	}
	// Nothing half-built is left by the failed creates.
	if ents, _ := os.ReadDir(filepath.Join(state, "sessions", "sessions")); len(ents) != 1 {
		t.Errorf("session dirs after failed creates: %d, want 1 (the live session)", len(ents))
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "isolate", "sandboxes")); len(ents) != 1 {
		t.Errorf("sandbox dirs after failed creates: %d, want 1 (the live session)", len(ents))
	}
	res := e.exec(t, live, "print(x)", 0)
	wantStatus(t, res, StatusOK)
	if res.Stdout != "42\n" {
		t.Fatalf("live session on a full state dir: %q", res.Stdout)
	}
	// A kernel restart needs the state dir (its log): a lost kernel is
	// reported, and so is the failed restart, without a hang.
	res = e.exec(t, live, "import os\nos._exit(1)", 0)
	if res.State != StateLost {
		t.Fatalf("state = %q, want lost", res.State)
	}
	t.Logf("kernel lost on a full state dir: %s", res.StateReason)

	for _, p := range made {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	res = e.exec(t, live, "print('back')", 0)
	wantStatus(t, res, StatusOK)
	info, err := e.createWithin(t, 60*time.Second)
	if err != nil {
		t.Fatalf("create after freeing space: %v", err)
	}
	wantStatus(t, e.exec(t, info.ID, "print(1)", 0), StatusOK)
}

// TestFaultCgroupCreationRefused points the host at a cgroup root that
// cannot be created (a component is a cgroup's interface file): create
// fails closed with ErrUnavailable naming the cause, leaves nothing
// behind, and the manager keeps answering.
func TestFaultCgroupCreationRefused(t *testing.T) {
	testenv.RequiresRoot(t)
	const parent = "/jailcell-test-faults"
	state := testenv.StateDir(t)
	e, err := newEnvAt(t, state, parent+"/cgroup.procs/x")
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	t.Cleanup(func() {
		if err := e.m.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		assertNothingLeft(t, state)
		e.host.Close()
		// The parent cgroups are this test's: check them, then remove them.
		for _, d := range cgroupDirs(parent) {
			ents, _ := os.ReadDir(d)
			for _, ent := range ents {
				if ent.IsDir() {
					t.Errorf("cgroup left behind: %s/%s", d, ent.Name())
				}
			}
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("remove %s: %v", d, err)
			}
		}
	})
	for i := 0; i < 3; i++ {
		_, err := e.createWithin(t, 60*time.Second)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("create under a refused cgroup: %v, want ErrUnavailable", err)
		}
		if !strings.Contains(err.Error(), "cgroup") {
			t.Fatalf("create error does not name the cgroup: %v", err)
		}
		t.Logf("create under a refused cgroup: %v", err)
	}
	_, err = e.m.RunOnce(context.Background(), 0, "", ExecRequest{Code: "print(1)"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("run once under a refused cgroup: %v, want ErrUnavailable", err)
	}
	for _, d := range []string{filepath.Join(state, "isolate", "sandboxes"), filepath.Join(state, "sessions", "sessions")} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s after refused creates: %d entries", d, len(ents))
		}
	}
	// libcontainer keeps a container's state directory when it cannot
	// remove the container's cgroup path; isolate's cleanup removes it.
	if ents, _ := os.ReadDir(filepath.Join(state, "isolate", "containers")); len(ents) != 0 {
		t.Errorf("libcontainer state dirs left by refused creates: %d", len(ents))
	}
	// The manager still answers, and its places under MaxSessions were
	// all given back.
	if l := e.m.List(context.Background(), 0); len(l) != 0 {
		t.Fatalf("sessions after refused creates: %v", l)
	}
	if e.m.running() != 0 {
		t.Fatalf("%d creates still counted as running", e.m.running())
	}
}

// cgroupDirs is every hierarchy's directory for cgroup path p.
func cgroupDirs(p string) []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup" + p}
	}
	var out []string
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		out = append(out, filepath.Join("/sys/fs/cgroup", e.Name())+p)
	}
	return out
}

// TestFaultKernelDiesMidOutput: the kernel exits while its output is
// streaming. The cell gets a host verdict (killed, state lost) with the
// output that arrived (streamed and in its result; all of it when the
// cell flushed before it died), nothing of the dead kernel survives, and the next
// cell runs in a fresh kernel.
func TestFaultKernelDiesMidOutput(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	for _, tc := range []struct{ name, code string }{
		{"os._exit", "import os, sys, time\nfor i in range(200):\n    print('line', i, flush=True)\n    time.sleep(0.005)\n    if i == 100:\n        os._exit(3)"},
		{"SIGKILL to itself", "import os, sys, time\nfor i in range(200):\n    print('line', i, flush=True)\n    time.sleep(0.005)\n    if i == 100:\n        os.kill(os.getpid(), 9)"},
		{"SIGKILL to its parent", "import os, sys, time\nfor i in range(200):\n    print('line', i, flush=True)\n    time.sleep(0.005)\n    if i == 100:\n        os.kill(os.getppid(), 9)\n        os.kill(os.getpid(), 9)"},
		{"mid-line", "import os, sys\nsys.stdout.write('x' * 50000)\nsys.stdout.flush()\nos._exit(0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var streamed strings.Builder
			res, err := e.m.Exec(context.Background(), 0, id, ExecRequest{Code: tc.code, OnOutput: func(_, text string) {
				mu.Lock()
				streamed.WriteString(text)
				mu.Unlock()
			}})
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if res.State != StateLost || res.Status != StatusKilled || res.Error == nil || res.Error.Type != "KernelDied" {
				t.Fatalf("verdict = %s/%s %+v, want killed/lost KernelDied", res.Status, res.State, res.Error)
			}
			mu.Lock()
			got := streamed.String()
			mu.Unlock()
			if strings.HasPrefix(tc.code, "import os, sys, time\nfor") && !strings.Contains(got, "line 50\n") {
				t.Errorf("output before the death did not stream: %q", tail80(got))
			}
			if res.Stdout != got {
				t.Errorf("result stdout %q (%d bytes), want what streamed %q (%d bytes)", tail80(res.Stdout), len(res.Stdout), tail80(got), len(got))
			}
			if tc.name == "mid-line" && got != strings.Repeat("x", 50000) {
				t.Errorf("flushed before os._exit: %d bytes arrived, want all 50000", len(got))
			}
			res = e.exec(t, id, "print('fresh', 'x' in globals())", 0)
			wantStatus(t, res, StatusOK)
			if res.Stdout != "fresh False\n" {
				t.Fatalf("next cell: %q", res.Stdout)
			}
			if n := len(sandboxProcs()); n == 0 || n > 2 {
				t.Errorf("%d sandbox processes after the restart, want the fresh kernel's (1-2)", n)
			}
		})
	}
}

func tail80(s string) string {
	if len(s) > 80 {
		return s[len(s)-80:]
	}
	return s
}

// TestKernelStartBoundBeginsAfterHostGate: a create queued
// behind the host's gate (serve's rootfs check: minutes under emulation)
// gets its whole StartTimeout once the gate passes. It used to time out
// the moment the gate passed ("kernel did not connect").
func TestKernelStartBoundBeginsAfterHostGate(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	h, err := isolate.NewHost(isolate.Config{StateDir: filepath.Join(state, "isolate"), Rootfs: r.Root, CgroupRoot: testCgroupRoot})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	h.Gate(func() error { <-release; return nil })
	const bound = 15 * time.Second
	m, err := New(Config{StateDir: filepath.Join(state, "sessions"), StartTimeout: bound, Logger: testLogger()}, h)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()); h.Close() })
	done := make(chan error, 1)
	go func() {
		_, err := m.Create(context.Background(), CreateOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("create finished while the host's gate was closed: %v", err)
	case <-time.After(bound + 2*time.Second):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("create after a gate held longer than StartTimeout (%s): %v", bound, err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("create did not finish within 3 min of the gate passing")
	}
}
