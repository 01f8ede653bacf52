package workflow

import (
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestImportsNoSandbox keeps workflow above the seam: the API links it, so
// session or isolate here would link libcontainer and libseccomp into every
// front door.
func TestImportsNoSandbox(t *testing.T) {
	for _, p := range testenv.GoList(t, "-deps", "github.com/jailcell/jailcell/workflow") {
		switch p {
		case "github.com/jailcell/jailcell/session", "github.com/jailcell/jailcell/isolate":
			t.Errorf("workflow imports %s: it reaches the Manager through Sessions", p)
		}
	}
}
