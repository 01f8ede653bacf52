package criu

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate/internal/errdefs"
	"github.com/jailcell/jailcell/isolate/internal/procfs"
)

func TestCriuPATH(t *testing.T) {
	for _, c := range []struct{ criu, path, want string }{
		{"/a/b/criu", "/usr/bin:/bin", "/a/b:/usr/bin:/bin"},
		{"/a/b/criu", "/a/b:/usr/bin", "/a/b:/usr/bin"},
		{"/a/b/criu", "/a/b", "/a/b"},
		{"/a/b/criu", "", "/a/b"},
		{"/a/b/criu", "/usr/bin:/a/b", "/a/b:/usr/bin:/a/b"},
	} {
		if got := PATH(c.criu, c.path); got != c.want {
			t.Errorf("PATH(%q, %q) = %q, want %q", c.criu, c.path, got, c.want)
		}
	}
}

// noCriuLeft fails t if a criu or the hanging script's sleep outlived the
// operation as a child or grandchild of this process.
func noCriuLeft(t *testing.T) {
	t.Helper()
	if left := procfs.LeftBehind(os.Getpid(), "criu", 3*time.Second); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
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
	err := probe(bin, time.Second)
	took := time.Since(start)
	if !errors.Is(err, errdefs.ErrTimeout) || !strings.Contains(err.Error(), "dump") {
		t.Fatalf("probe of a hanging criu: %v, want ErrTimeout naming the dump", err)
	}
	if took > time.Second+KillWait {
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
	err := OnPath(other)
	if err == nil || !strings.Contains(err.Error(), bin) || !strings.Contains(err.Error(), "PATH") {
		t.Fatalf("probe of %s with %s on PATH: %v", other, bin, err)
	}
}

// Op kills the criu its operation started (here the way libcontainer
// does it: a plain child, no context) and answers ErrTimeout in bound.
func TestCriuOpKillsHungCriu(t *testing.T) {
	bin, hang := testenv.HangingCriu(t, "/bin/true")
	hang("swrk")
	start := time.Now()
	err := Op("test dump", 500*time.Millisecond, func() error {
		return exec.Command("criu", "swrk", "3").Run()
	})
	if !errors.Is(err, errdefs.ErrTimeout) || !strings.Contains(err.Error(), "500ms") {
		t.Fatalf("Op over a hung %s: %v, want ErrTimeout naming the bound", bin, err)
	}
	if took := time.Since(start); took > 500*time.Millisecond+KillWait {
		t.Fatalf("Op took %v", took)
	}
	noCriuLeft(t)
	// The slot is free again.
	if err := Op("next", time.Second, func() error { return nil }); err != nil {
		t.Fatalf("next Op: %v", err)
	}
}

// The real criu dumps and restores the probe's test process.
func TestCriuProbeReal(t *testing.T) {
	testenv.RequiresRoot(t)
	if _, err := os.Stat(DefaultBin); err != nil {
		t.Skipf("requires criu at %s (make criu): %v", DefaultBin, err)
	}
	t.Setenv("PATH", PATH(DefaultBin, os.Getenv("PATH")))
	if err := probe(DefaultBin, ProbeBound); err != nil {
		t.Fatalf("probe: %v", err)
	}
	noCriuLeft(t)
}

// TestCriuOpIfIdle: an operation that must not queue answers ErrBusy at
// once while another holds the criu slot, without running, and runs once
// the slot is free.
func TestCriuOpIfIdle(t *testing.T) {
	slot <- struct{}{} // another checkpoint or restore is running
	ran := false
	err := OpWait("restore", time.Minute, false, func() error { ran = true; return nil })
	<-slot
	if !errors.Is(err, errdefs.ErrBusy) || ran {
		t.Fatalf("with the slot taken: err %v, ran %v; want ErrBusy and not run", err, ran)
	}
	if err := OpWait("restore", time.Minute, false, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("with the slot free: err %v, ran %v; want it run", err, ran)
	}
}
