package api

import (
	"os"
	"testing"

	"github.com/jailcell/jailcell/isolate"
)

// TestMain lets this test binary serve as a sandbox's init: libcontainer
// re-executes it with the argument "init" (integration tests only).
func TestMain(m *testing.M) {
	isolate.Init()
	os.Exit(m.Run())
}
