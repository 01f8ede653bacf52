package sessiontest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session"
)

// Manager is a Manager with p as its default policy, its sandboxes under
// cgroupRoot (a root of the caller's own: starting a manager sweeps its
// root, and other packages' tests may run at the same time), shut down
// when the test ends.
func Manager(t *testing.T, cgroupRoot string, p policy.Policy) *session.Manager {
	t.Helper()
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	host, err := isolate.NewHost(isolate.Config{StateDir: filepath.Join(state, "isolate"), Rootfs: r.Root, CgroupRoot: cgroupRoot})
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	m, err := session.New(session.Config{StateDir: filepath.Join(state, "sessions"), Policies: map[string]policy.Policy{"default": p}}, host)
	if err != nil {
		t.Fatalf("session.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := host.Close(); err != nil {
			t.Errorf("host Close: %v", err)
		}
	})
	return m
}

// Main runs a test binary that starts sandboxes: libcontainer re-executes
// it with the argument "init" as a sandbox's init (isolate.Init); a
// jailcell it starts never reads the host's config nor finds its service
// (make test runs beside one); libcontainer runs criu from PATH.
func Main(m *testing.M) {
	isolate.Init()
	testenv.Hermetic()
	_ = os.Setenv("PATH", isolate.CriuPATH(isolate.DefaultCriu, os.Getenv("PATH")))
	os.Exit(m.Run())
}
