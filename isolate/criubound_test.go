package isolate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate/criu"
	"github.com/jailcell/jailcell/isolate/internal/procfs"
)

// noCriuLeft fails t if a criu or the hanging script's sleep outlived the
// operation as a child or grandchild of this process.
func noCriuLeft(t *testing.T) {
	t.Helper()
	if left := procfs.LeftBehind(os.Getpid(), "criu", 3*time.Second); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestCheckpointRestoreHungCriuBounded: a criu that hangs (as dumps did on
// this host before runtime/criu-patches/0002) costs a checkpoint or a
// restore its bound, not forever: the operation answers ErrTimeout, the
// criu it started is gone, and a checkpointed sandbox goes on running
// (thawed, if it was frozen). Before the bound, Checkpoint waited forever.
func TestCheckpointRestoreHungCriuBounded(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	if err := ProbeCriu(DefaultCriu); err != nil {
		t.Skip("requires a working criu (make criu): " + err.Error())
	}
	hungCriu, hang := testenv.HangingCriu(t, DefaultCriu)
	const bound = 5 * time.Second
	h, err := NewHost(Config{StateDir: testenv.StateDir(t), Rootfs: r.Root, CgroupRoot: "/jailcell-test-isolate", Criu: hungCriu, CriuTimeout: bound})
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
		if took > bound+criu.KillWait {
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
