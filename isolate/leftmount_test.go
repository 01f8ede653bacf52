package isolate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/jailcell/jailcell/policy"
	"golang.org/x/sys/unix"
)

// TestDestroyDetachesCriuRootLeftInContainerDir: a restore's criu-root
// bind left mounted in the container's state directory (a daemon that died
// during a restore) goes with the sandbox, and so does the directory.
// Before, RemoveAll failed on the mount and it stayed, with no session or
// daemon to own it.
func TestDestroyDetachesCriuRootLeftInContainerDir(t *testing.T) {
	h := newTestHost(t)
	sb := startSleeper(t, h, policy.Default())
	dir := filepath.Join(h.containersDir(), sb.ID)
	root := filepath.Join(dir, "criu-root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(sb.Disk().RootDir(), root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if mps, _ := mountsUnder(dir); len(mps) > 0 {
		t.Errorf("mounts left in the container's directory: %v", mps)
		for _, mp := range mps {
			_ = unix.Unmount(mp, unix.MNT_DETACH)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("container directory %s left: %v", dir, err)
	}
}
