package isolate

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

func TestOwnCgroup(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cgroup")
	os.WriteFile(p, []byte("12:memory:/x\n0::/system.slice/jailcell.service\n"), 0o644)
	if got, err := ownCgroup(p); err != nil || got != "/system.slice/jailcell.service" {
		t.Fatalf("ownCgroup = %q, %v", got, err)
	}
	os.WriteFile(p, []byte("12:memory:/x\n"), 0o644)
	if _, err := ownCgroup(p); err == nil {
		t.Fatal("v1-only file accepted")
	}
}

// TestDelegateMovesIntoLeaf runs the delegation steps on a cgroup v2
// hierarchy: a service cgroup of our own holding a child process stands in
// for systemd's, and the child stands in for the daemon.
func TestDelegateMovesIntoLeaf(t *testing.T) {
	testenv.RequiresRoot(t)
	fs := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(fs, "cgroup.controllers")); err != nil {
		fs = "/sys/fs/cgroup/unified" // hybrid host: its v2 mount
		if _, err := os.Stat(filepath.Join(fs, "cgroup.controllers")); err != nil {
			t.Skip("requires a cgroup v2 mount (none at /sys/fs/cgroup or /sys/fs/cgroup/unified)")
		}
	}
	own := fmt.Sprintf("/jailcell-delegate-test-%d", os.Getpid())
	base := filepath.Join(fs, own)
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		child.Process.Kill()
		child.Wait()
		for _, d := range []string{"sandboxes", "supervisor", ""} {
			for i := 0; i < 50; i++ {
				if err := os.Remove(filepath.Join(base, d)); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		if _, err := os.Stat(base); err == nil {
			t.Errorf("test cgroup %s left behind", base)
		}
	})
	if err := os.WriteFile(filepath.Join(base, "cgroup.procs"), []byte(fmt.Sprint(child.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	root, err := delegate(fs, own, child.Process.Pid)
	if err != nil {
		t.Fatalf("delegate: %v", err)
	}
	if root != own+"/sandboxes" {
		t.Fatalf("sandbox root %q", root)
	}
	procs, _ := os.ReadFile(filepath.Join(base, "supervisor", "cgroup.procs"))
	if strings.TrimSpace(string(procs)) != fmt.Sprint(child.Process.Pid) {
		t.Fatalf("daemon not in the supervisor leaf: %q", procs)
	}
	if procs, _ := os.ReadFile(filepath.Join(base, "cgroup.procs")); len(strings.TrimSpace(string(procs))) != 0 {
		t.Fatalf("processes left in the service cgroup itself: %q", procs)
	}
	ctrl, _ := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	sub, _ := os.ReadFile(filepath.Join(base, "cgroup.subtree_control"))
	if strings.TrimSpace(string(ctrl)) != strings.TrimSpace(string(sub)) {
		t.Fatalf("subtree_control %q, want every controller %q", sub, ctrl)
	}
	// A restart from inside the leaf finds the same subtree.
	if again, err := delegate(fs, own+"/supervisor", child.Process.Pid); err != nil || again != root {
		t.Fatalf("second delegate = %q, %v", again, err)
	}
}
