package mcp

import (
	"github.com/jailcell/jailcell/internal/testenv"
	"os"
	"testing"

	"github.com/jailcell/jailcell/isolate"
)

// TestMain lets this test binary serve as a sandbox's init: libcontainer
// re-executes it with the argument "init" (integration tests only).
func TestMain(m *testing.M) {
	isolate.Init()
	// A jailcell this test starts never reads the host's config or finds
	// its service (make test runs beside one).
	testenv.Hermetic()
	// libcontainer runs criu from PATH (isolate.Config.Criu).
	_ = os.Setenv("PATH", isolate.CriuPATH(isolate.DefaultCriu, os.Getenv("PATH")))
	os.Exit(m.Run())
}
