package isolate

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

func TestCriuPATH(t *testing.T) {
	for _, c := range []struct{ criu, path, want string }{
		{"/a/b/criu", "/usr/bin:/bin", "/a/b:/usr/bin:/bin"},
		{"/a/b/criu", "/a/b:/usr/bin", "/a/b:/usr/bin"},
		{"/a/b/criu", "/a/b", "/a/b"},
		{"/a/b/criu", "", "/a/b"},
		{"/a/b/criu", "/usr/bin:/a/b", "/a/b:/usr/bin:/a/b"},
	} {
		if got := CriuPATH(c.criu, c.path); got != c.want {
			t.Errorf("CriuPATH(%q, %q) = %q, want %q", c.criu, c.path, got, c.want)
		}
	}
}

// noCriuLeft fails t if a criu or the hanging script's sleep outlived the
// operation as a child or grandchild of this process.
func noCriuLeft(t *testing.T) {
	t.Helper()
	self := os.Getpid()
	deadline := time.Now().Add(3 * time.Second)
	for {
		var left []string
		table := procTable()
		for pid, st := range table {
			if st.state == "Z" {
				continue
			}
			if st.ppid == self && st.comm == "criu" || table[st.ppid].ppid == self && table[st.ppid].comm == "criu" {
				left = append(left, st.comm)
				_ = pid
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A criu whose dump hangs fails the probe within its bound, naming the
// timeout, and leaves nothing behind.
func TestCriuProbeHangingDump(t *testing.T) {
	testenv.RequiresRoot(t)
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("requires sleep(1) for the probe's test process")
	}
	bin, hang := testenv.HangingCriu(t, "/bin/true")
	hang("dump")
	start := time.Now()
	err := criuProbe(bin, time.Second)
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "dump") {
		t.Fatalf("probe of a hanging criu: %v, want ErrTimeout naming the dump", err)
	}
	if took > time.Second+criuKillWait {
		t.Fatalf("probe took %v, bound 1s", took)
	}
	noCriuLeft(t)
}

// A criu that is not the one PATH finds is refused: libcontainer would
// run the other.
func TestCriuProbeWrongPATH(t *testing.T) {
	bin, _ := testenv.HangingCriu(t, "/bin/true")
	other := filepath.Join(t.TempDir(), "criu")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := criuOnPath(other)
	if err == nil || !strings.Contains(err.Error(), bin) || !strings.Contains(err.Error(), "PATH") {
		t.Fatalf("probe of %s with %s on PATH: %v", other, bin, err)
	}
}

// criuOp kills the criu its operation started (here the way libcontainer
// does it: a plain child, no context) and answers ErrTimeout in bound.
func TestCriuOpKillsHungCriu(t *testing.T) {
	bin, hang := testenv.HangingCriu(t, "/bin/true")
	hang("swrk")
	start := time.Now()
	err := criuOp("test dump", 500*time.Millisecond, func() error {
		return exec.Command("criu", "swrk", "3").Run()
	})
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "500ms") {
		t.Fatalf("criuOp over a hung %s: %v, want ErrTimeout naming the bound", bin, err)
	}
	if took := time.Since(start); took > 500*time.Millisecond+criuKillWait {
		t.Fatalf("criuOp took %v", took)
	}
	noCriuLeft(t)
	// The slot is free again.
	if err := criuOp("next", time.Second, func() error { return nil }); err != nil {
		t.Fatalf("next criuOp: %v", err)
	}
}

// The real criu dumps and restores the probe's test process.
func TestCriuProbeReal(t *testing.T) {
	testenv.RequiresRoot(t)
	if _, err := os.Stat(DefaultCriu); err != nil {
		t.Skipf("requires criu at %s (make criu): %v", DefaultCriu, err)
	}
	t.Setenv("PATH", CriuPATH(DefaultCriu, os.Getenv("PATH")))
	if err := criuProbe(DefaultCriu, criuProbeBound); err != nil {
		t.Fatalf("probe: %v", err)
	}
	noCriuLeft(t)
}

// TestCheckpointRestoreHungCriuBounded: a criu that hangs (as dumps did on
// this host before scripts/criu-patches/0002) costs a checkpoint or a
// restore its bound, not forever: the operation answers ErrTimeout, the
// criu it started is gone, and a checkpointed sandbox goes on running
// (thawed, if it was frozen). Before the bound, Checkpoint waited forever.
func TestCheckpointRestoreHungCriuBounded(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	if err := ProbeCriu(DefaultCriu); err != nil {
		t.Skip("requires a working criu (make criu): " + err.Error())
	}
	criu, hang := testenv.HangingCriu(t, DefaultCriu)
	const bound = 5 * time.Second
	h, err := NewHost(Config{StateDir: testenv.StateDir(t), Rootfs: r.Root, CgroupRoot: "/jailcell-test-isolate", Criu: criu, CriuTimeout: bound})
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	if err := h.CriuCheck(); err != nil {
		t.Fatalf("CriuCheck through the wrapper: %v", err)
	}
	d, spec, sb, ctl := counterSandbox(t, h, "hung")
	t.Cleanup(func() { _ = sb.Destroy() })

	hang("swrk")
	bounded := func(what string, op func() error) {
		t.Helper()
		start := time.Now()
		err := op()
		took := time.Since(start)
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), bound.String()) {
			t.Fatalf("%s with a hung criu: %v, want ErrTimeout naming the bound %v", what, err, bound)
		}
		if took > bound+criuKillWait {
			t.Fatalf("%s took %v, bound %v", what, took, bound)
		}
		noCriuLeft(t)
	}
	bounded("checkpoint", func() error { return sb.Checkpoint(filepath.Join(t.TempDir(), "images"), false) })
	waitCount(t, ctl, readCount(t, ctl))
	// Frozen first, as a fork's checkpoint is: thawed after the timeout.
	if err := sb.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	bounded("frozen checkpoint", func() error { return sb.Checkpoint(filepath.Join(t.TempDir(), "images"), true) })
	waitCount(t, ctl, readCount(t, ctl))

	// The criu that works again checkpoints; a hung restore is bounded too
	// and leaves nothing running.
	hang()
	images := filepath.Join(t.TempDir(), "images")
	if err := sb.Checkpoint(images, false); err != nil {
		t.Fatalf("Checkpoint after the hangs: %v", err)
	}
	<-sb.Done()
	if err := sb.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	hang("swrk")
	bounded("restore", func() error {
		rs, err := d.Restore(images, spec)
		if err == nil {
			_ = rs.Destroy()
		}
		return err
	})
	if ids := h.cgroupIDs(); len(ids) != 0 {
		t.Errorf("cgroups left by the hung restore: %v", ids)
	}
	n := readCount(t, ctl)
	time.Sleep(300 * time.Millisecond)
	if m := readCount(t, ctl); m != n {
		t.Errorf("count moved %d -> %d: a restored process runs after the failed restore", n, m)
	}
}

// TestCriuOpIfIdle: an operation that must not queue answers ErrBusy at
// once while another holds the criu slot, without running, and runs once
// the slot is free.
func TestCriuOpIfIdle(t *testing.T) {
	criuSlot <- struct{}{} // another checkpoint or restore is running
	ran := false
	err := criuOpWait("restore", time.Minute, false, func() error { ran = true; return nil })
	<-criuSlot
	if !errors.Is(err, ErrBusy) || ran {
		t.Fatalf("with the slot taken: err %v, ran %v; want ErrBusy and not run", err, ran)
	}
	if err := criuOpWait("restore", time.Minute, false, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("with the slot free: err %v, ran %v; want it run", err, ran)
	}
}
