// Package testenv holds the probes tests use to decide whether the host can
// run a tier of tests. A test skips only when a probe proves the host lacks
// something, and the skip message says what.
package testenv

import (
	"os"
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
