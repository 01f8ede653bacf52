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
	"time"

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

// GoList runs `go list -tags seccomp` with args and returns its words:
// the dependency tests hold the import graph to the design with it. It
// skips, saying so, where no go tool is on PATH.
func GoList(t testing.TB, args ...string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH to list packages: %v", err)
	}
	out, err := exec.Command(goTool, append([]string{"list", "-tags", "seccomp"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.Fields(string(out))
}

// TimeScale is how much slower than a host this test machine runs wall
// clock work: JAILCELL_TEST_TIME_SCALE (a whole number, default 1). The
// cgroup v2 guest sets it: an emulated (TCG) machine beside another guest
// on the same cores starts kernels and tears sandboxes down several times
// slower, and a lifetime or a bound sized for a host measures the
// emulator there, not jailcell.
func TimeScale() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("JAILCELL_TEST_TIME_SCALE")); err == nil && n > 1 {
		return time.Duration(n)
	}
	return 1
}
