package mcp

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session"
)

// newTestManager is a copy of api's test helper (a test file cannot
// import another package's).
func newTestManager(t *testing.T, cgroupRoot string, p policy.Policy) *session.Manager {
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
