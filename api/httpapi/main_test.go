package httpapi

import (
	"testing"

	"github.com/jailcell/jailcell/internal/sessiontest"
)

// TestMain lets this test binary serve as a sandbox's init and keeps what
// it starts hermetic (sessiontest.Main).
func TestMain(m *testing.M) { sessiontest.Main(m) }
