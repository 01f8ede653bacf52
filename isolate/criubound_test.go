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

// hangingCriu writes a criu named "criu" that hangs (as dumps hung on
// this host before scripts/criu-patches/0002) in every mode except those
// it hands to real; its sleeps are its descendants, to be killed too. It
// returns the script's path and puts its directory first in PATH.
func hangingCriu(t *testing.T, real string, pass ...string) string {
	t.Helper()
	dir := t.TempDir()
	var cases string
	for _, p := range pass {
		cases += p + ") exec " + real + ` "$@";;` + "\n"
	}
	script := "#!/bin/sh\ncase \"$1\" in\n" + cases + "esac\nwhile :; do sleep 1; done\n"
	path := filepath.Join(dir, "criu")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", CriuPATH(path, os.Getenv("PATH")))
	return path
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
	bin := hangingCriu(t, "/bin/true", "check")
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
	bin := hangingCriu(t, "/bin/true")
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
	bin := hangingCriu(t, "/bin/true")
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
