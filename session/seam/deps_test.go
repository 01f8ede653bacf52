package seam

import (
	"strings"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestImportsNoSandbox keeps seam a leaf: api and workflow import it to
// stay clear of isolate, so anything here that builds a sandbox or runs a
// process would ride along into every front door.
func TestImportsNoSandbox(t *testing.T) {
	deps := testenv.GoList(t, "-deps", "github.com/jailcell/jailcell/session/seam")
	allowed := map[string]bool{
		"github.com/jailcell/jailcell/internal/hostfeatures":      true,
		"github.com/jailcell/jailcell/policy":                     true,
		"github.com/jailcell/jailcell/runner":                     true,
		"github.com/jailcell/jailcell/session/internal/setupcell": true,
		"github.com/jailcell/jailcell/session/seam":               true,
	}
	for _, p := range deps {
		switch {
		case strings.HasPrefix(p, "github.com/jailcell/jailcell/") && !allowed[p],
			p == "os/exec",
			strings.HasPrefix(p, "github.com/opencontainers/"),
			strings.HasPrefix(p, "github.com/seccomp/"):
			t.Errorf("seam imports %s: it must stay a leaf that builds no sandbox", p)
		}
	}
}
