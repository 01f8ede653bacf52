package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// runJailcell runs this test binary as `jailcell run` on code, with its
// own state dir, and returns the exit status, stdout and stderr.
func runJailcell(t *testing.T, code string, args ...string) (int, string, string) {
	t.Helper()
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	cmd := exec.Command(os.Args[0], append([]string{"run", "--rootfs", r.Root, "--state-dir", state}, append(args, "-")...)...)
	cmd.Env = jailcellEnv("JAILCELL_REVIEW_DIR=" + state + "/review")
	return testenv.Run(t, cmd, code)
}

// TestRunCommand drives the real `jailcell run`: its exit codes, the
// figures a cell shows written under --out, and --policy.
func TestRunCommand(t *testing.T) {
	for _, tc := range []struct {
		name, code string
		args       []string
		want       int
		stderr     string
	}{
		{"ok", "print(6*7)", nil, exitCellOK, ""},
		{"exception", "1/0", nil, exitCellError, "ZeroDivisionError"},
		{"timeout", "import time\ntime.sleep(30)", []string{"--timeout", "1s"}, exitCellTimeout, "timed out"},
		{"killed", "import os\nos._exit(3)", nil, exitCellKilled, "killed"},
		{"unknown policy", "print(1)", []string{"--policy", "nosuch"}, exitRunFailed, "nosuch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, stderr := runJailcell(t, tc.code, tc.args...)
			if got != tc.want || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, want %d; stderr:\n%s", got, tc.want, stderr)
			}
		})
	}

	t.Run("figures under --out", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		code := `import matplotlib.pyplot as plt
open('figure-1.png', 'w').write('the cell's own file keeps its name')
plt.plot([1, 2, 3]); plt.show()
plt.figure(); plt.bar([1, 2], [3, 4]); plt.show()
`
		got, _, stderr := runJailcell(t, strings.ReplaceAll(code, "cell's", "cell"), "--out", out)
		if got != exitCellOK {
			t.Fatalf("exit %d; stderr:\n%s", got, stderr)
		}
		own, err := os.ReadFile(filepath.Join(out, "figure-1.png"))
		if err != nil || string(own) != "the cell own file keeps its name" {
			t.Fatalf("the cell's own figure-1.png: %q, %v", own, err)
		}
		for _, name := range []string{"figure-2.png", "figure-3.png"} {
			b, err := os.ReadFile(filepath.Join(out, name))
			if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
				t.Fatalf("%s: not a PNG (%d bytes, %v); stderr:\n%s", name, len(b), err, stderr)
			}
		}
		if strings.Contains(stderr, "not shown") {
			t.Errorf("figures reported as not shown:\n%s", stderr)
		}
	})
}

// TestRunUnderRestrictiveUmask: the sandbox's uid must traverse the
// directories the daemon makes for it, so their modes cannot follow the
// caller's umask. Under systemd's UMask=0077 (the unit's) or a root shell
// with umask 077, every sandbox init failed with EACCES.
func TestRunUnderRestrictiveUmask(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	cmd := exec.Command("/bin/sh", "-c", `umask 077; exec "$0" "$@"`, os.Args[0], "run", "--rootfs", r.Root, "--state-dir", state, "-")
	cmd.Env = jailcellEnv("JAILCELL_REVIEW_DIR=" + state + "/review")
	got, stdout, stderr := testenv.Run(t, cmd, "open('f', 'w').write('x'); print(6*7)")
	if got != exitCellOK || !strings.Contains(stdout, "42") {
		t.Fatalf("jailcell run under umask 077: exit %d\nstdout: %s\nstderr: %s", got, stdout, stderr)
	}
}
