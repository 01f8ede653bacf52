package testenv

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/rootfs"
)

// RequiresRoot skips t unless running as root (privileged tier).
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("requires root: privileged sandbox test")
	}
}

// Rootfs returns the built Python rootfs tree, or skips t naming the
// missing piece. Under CI (CI=true) a missing rootfs is a failure: .ci/run
// builds it, so its absence is a defect, not a host property.
func Rootfs(t testing.TB) *rootfs.Rootfs {
	t.Helper()
	base := os.Getenv("JAILCELL_ROOTFS")
	if base == "" {
		base = rootfs.DefaultBase
	}
	r, err := rootfs.Open(base)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("rootfs missing under CI: %v", err)
		}
		t.Skipf("requires the built rootfs (make rootfs): %v", err)
	}
	return r
}

// StateDir returns a fresh state directory that a sandbox's user namespace
// can traverse. It is kept short: a Unix socket path inside it must fit in
// sun_path's 108 bytes.
func StateDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "jc")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// HostUID is the real uid of process pid as the host sees it.
func HostUID(t testing.TB, pid int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				if n, err := strconv.Atoi(f[0]); err == nil {
					return n
				}
			}
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return -1
}

// Run runs cmd with stdin and returns its exit code, stdout and stderr; a
// command that could not run at all fails the test.
func Run(t testing.TB, cmd *exec.Cmd, stdin string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("%s %q: %v", cmd.Path, cmd.Args[1:], err)
	return 0, "", ""
}
